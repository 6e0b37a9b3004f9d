"""Tags on Application Auto Scaling scalable targets, which moto 5.2.5 does not serve.

The AWS provider reads a target's tags (ListTagsForResource) after RegisterScalableTarget and sends TagResource /
UntagResource when they change; without them the apply of an autoscaled endpoint fails. install() adds the three
operations to moto's Application Auto Scaling responses in this process, in AWS's wire format (botocore's
``application-autoscaling`` model: ResourceARN, a Tags map, TagKeys; an unknown ARN is ResourceNotFoundException),
and keeps the Tags that RegisterScalableTarget carries. Call it before the server starts.
"""

from __future__ import annotations

import json
from typing import Any

from moto.applicationautoscaling.models import ApplicationAutoscalingBackend, FakeScalableTarget
from moto.applicationautoscaling.responses import ApplicationAutoScalingResponse
from moto.core.exceptions import JsonRESTError

# Tags by scalable-target ARN. A target registered again after a deregistration gets a new ARN, so entries of
# deregistered targets are never found (ListTagsForResource looks the ARN up among the live targets first).
_TAGS: dict[str, dict[str, str]] = {}


class ResourceNotFound(JsonRESTError):
    def __init__(self, arn: str) -> None:
        super().__init__("ResourceNotFoundException", f"No scalable target found for ARN {arn}")


def _target(response: Any) -> FakeScalableTarget:
    arn = str(response._get_param("ResourceARN"))
    backend: ApplicationAutoscalingBackend = response.applicationautoscaling_backend
    for by_resource in backend.targets.values():
        for target in by_resource.values():
            if target.arn == arn:
                return target
    raise ResourceNotFound(arn)


def list_tags_for_resource(self: Any) -> str:
    return json.dumps({"Tags": _TAGS.get(_target(self).arn, {})})


def tag_resource(self: Any) -> str:
    _TAGS.setdefault(_target(self).arn, {}).update(self._get_param("Tags") or {})
    return "{}"


def untag_resource(self: Any) -> str:
    tags = _TAGS.get(_target(self).arn, {})
    for key in self._get_param("TagKeys") or []:
        tags.pop(key, None)
    return "{}"


def install() -> None:
    register = ApplicationAutoScalingResponse.register_scalable_target

    def register_with_tags(self: Any) -> str:
        answer = register(self)
        if self._get_param("Tags"):
            _TAGS.setdefault(json.loads(answer)["ScalableTargetARN"], {}).update(self._get_param("Tags"))
        return answer

    responses: Any = ApplicationAutoScalingResponse
    responses.register_scalable_target = register_with_tags
    responses.list_tags_for_resource = list_tags_for_resource
    responses.tag_resource = tag_resource
    responses.untag_resource = untag_resource
