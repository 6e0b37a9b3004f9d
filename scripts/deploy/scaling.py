"""Make room for an instance-type change on an autoscaled endpoint, before `terraform apply` updates it.

SageMaker refuses an UpdateEndpoint that changes the instance type of a variant registered with Application Auto
Scaling ("Update endpoints that use auto scaling", SageMaker developer guide): the scaling policies must be
deleted and the variant deregistered first, and registered again after the update. This does the first half;
the apply does the rest, because Terraform finds the scalable target and its policy gone when it refreshes its
state and creates them again once the endpoint update is done (the target refers to the endpoint).

A change of image alone needs none of this (the guide's one exception: a new model on the same instance type).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from .errors import DeployError

NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"


class ScalingError(DeployError):
    pass


@dataclass(frozen=True)
class Released:
    resource_id: str  # endpoint/<name>/variant/<variant>
    instance_type: str  # what the variant runs on now
    policies: tuple[str, ...]  # the scaling policies deleted


def resource_id(endpoint_name: str, variant: str) -> str:
    return f"endpoint/{endpoint_name}/variant/{variant}"


def _described_endpoint(sagemaker: Any, endpoint_name: str) -> dict[str, Any] | None:
    """DescribeEndpoint's answer; None when there is no endpoint."""
    try:
        described: dict[str, Any] = sagemaker.describe_endpoint(EndpointName=endpoint_name)
    except ClientError as e:
        if "not find" in str(e.response.get("Error", {}).get("Message", "")):
            return None
        raise ScalingError(f"DescribeEndpoint {endpoint_name} failed: {e}") from e
    return described


def _live_variants(sagemaker: Any, endpoint_name: str) -> dict[str, str] | None:
    """{variant: instance type} of the endpoint's current configuration; None when there is no endpoint."""
    if (described := _described_endpoint(sagemaker, endpoint_name)) is None:
        return None
    config = sagemaker.describe_endpoint_config(EndpointConfigName=described["EndpointConfigName"])
    return {v["VariantName"]: v.get("InstanceType", "") for v in config.get("ProductionVariants", [])}


def live_desired_count(sagemaker: Any, endpoint_name: str) -> int | None:
    """The desired instance count of the endpoint's (single) variant now, which autoscaling may have moved away from
    the configuration's initial count; None when there is no endpoint or it reports none.

    Fed back as initial_instance_count because the provider's UpdateEndpoint resets the variant to the new
    configuration's count (it sends no RetainAllVariantProperties: terraform-provider-aws #48990)."""
    if (described := _described_endpoint(sagemaker, endpoint_name)) is None:
        return None
    counts = [
        v.get("DesiredInstanceCount", v.get("CurrentInstanceCount")) for v in described.get("ProductionVariants", [])
    ]
    found = [int(c) for c in counts if isinstance(c, int)]
    return max(found) if found else None


def release_for_instance_type(
    sagemaker: Any,
    autoscaling: Any,
    endpoint_name: str,
    instance_type: str,
    *,
    log: Callable[[str], Any] = print,
) -> list[Released]:
    """Delete the scaling policies of, and deregister, every registered variant of ``endpoint_name`` whose
    instance type is about to change to ``instance_type``. Nothing to do (no endpoint, same type, not
    registered): an empty list."""
    variants = _live_variants(sagemaker, endpoint_name)
    if variants is None:
        log(f"  endpoint {endpoint_name} does not exist yet: nothing to deregister")
        return []
    released = []
    for variant, current in sorted(variants.items()):
        if current == instance_type:
            continue
        rid = resource_id(endpoint_name, variant)
        try:
            targets = autoscaling.describe_scalable_targets(ServiceNamespace=NAMESPACE, ResourceIds=[rid])
            if not targets.get("ScalableTargets"):
                log(f"  {rid} changes from {current} to {instance_type}; it is not registered for autoscaling")
                continue
            policies = autoscaling.describe_scaling_policies(ServiceNamespace=NAMESPACE, ResourceId=rid)
            names = tuple(p["PolicyName"] for p in policies.get("ScalingPolicies", []))
            for name in names:
                autoscaling.delete_scaling_policy(
                    PolicyName=name, ServiceNamespace=NAMESPACE, ResourceId=rid, ScalableDimension=DIMENSION
                )
            autoscaling.deregister_scalable_target(
                ServiceNamespace=NAMESPACE, ResourceId=rid, ScalableDimension=DIMENSION
            )
        except ClientError as e:
            raise ScalingError(f"cannot deregister {rid} from autoscaling: {e}") from e
        log(
            f"  {rid}: {current} -> {instance_type}: deleted scaling policies {', '.join(names) or '(none)'} and "
            "deregistered the variant (SageMaker refuses the change otherwise); the apply registers it again"
        )
        released.append(Released(rid, current, names))
    return released
