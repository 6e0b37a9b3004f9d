"""The deployment root's variables, from the shared root's outputs (terraform/README.md, "Deploying").

The deployment root reads nothing from the shared root's state: deploy.sh writes these into a var file that
both the apply and a later destroy use. The checks here repeat the deployment's own variable validations on
purpose: they fail in seconds, naming the value, instead of after the images are built and pushed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .ecr import DIGEST, EcrError, Repository
from .errors import DeployError
from .gpu_slots import GpuSlots
from .instances import instance_type_problem

SHARED_OUTPUTS = (
    "region",
    "tts_repository_url",
    "agent_repository_url",
    "weights_bucket_name",
    "weights_prefix",
    "weights_s3_uri",
    "weights_kms_key_arn",
)


# terraform/deployment's agent_session_storage.
SESSION_STORAGES = ("memory", "s3")


class OutputsError(DeployError):
    pass


def load_outputs(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """`terraform output -json` as {name: value}; every name in ``required`` must be there (and not null,
    except weights_kms_key_arn, which is null for an SSE-S3 bucket)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise OutputsError(f"cannot read terraform outputs from {path}: {e}") from e
    if not isinstance(doc, dict):
        raise OutputsError(f"{path}: not the JSON of `terraform output -json`")
    values = {name: entry.get("value") if isinstance(entry, dict) else None for name, entry in doc.items()}
    missing = [n for n in required if values.get(n) is None and not (n == "weights_kms_key_arn" and n in values)]
    if missing:
        raise OutputsError(f"{path} lacks the output(s) {', '.join(missing)}: was that root applied?")
    return values


@dataclass(frozen=True)
class DeploymentSettings:
    bedrock_model_id: str
    instance_type: str = "ml.g5.xlarge"
    min_instances: int = 1
    max_instances: int = 2
    # The live desired count of an endpoint already deployed (None: a first deploy, which starts at the floor).
    live_instances: int | None = None
    # make gpu-check's stream slots (gpu_slots.py): the autoscaling target's basis on a GPU type.
    gpu_slots: GpuSlots | None = None
    session_storage: str = "memory"  # the agent's conversation turns: memory, or s3 (the weight bucket)

    def initial_instances(self) -> int:
        """What the variant starts with: the floor, or the live count kept within the (new) bounds."""
        if self.live_instances is None:
            return self.min_instances
        return min(max(self.live_instances, self.min_instances), self.max_instances)


def count_problems(instance_type: str, min_instances: str, max_instances: str) -> list[str]:
    """What the deployment's variable validations would reject, said in make's variable names."""
    problems = []
    wrong_type = instance_type_problem(instance_type)
    if wrong_type:
        problems.append(wrong_type)
    try:
        low, high = int(min_instances), int(max_instances)
    except ValueError:
        return [*problems, f"MIN_INSTANCES={min_instances!r} and MAX_INSTANCES={max_instances!r} must be whole numbers"]
    if low < 1:
        problems.append(f"MIN_INSTANCES={low} must be at least 1")
    if high < low:
        problems.append(f"MAX_INSTANCES={high} is smaller than MIN_INSTANCES={low}")
    return problems


def _image(label: str, uri: str, repository_url: str, region: str) -> str:
    repo_url, sep, digest = uri.partition("@")
    if not sep or not DIGEST.match(digest):
        raise OutputsError(f"{label} image {uri!r} is not referenced by digest (…@sha256:<64 hex digits>)")
    if repo_url != repository_url:
        raise OutputsError(f"{label} image {uri!r} is not in the shared root's repository {repository_url}")
    try:
        repository = Repository.parse(repo_url)
    except EcrError as e:
        raise OutputsError(f"{label} image: {e}") from e
    if repository.region != region:
        raise OutputsError(f"{label} image {uri!r} is in {repository.region}, the deployment in {region}")
    return uri


def deployment_variables(
    shared: Mapping[str, Any], tts_image_uri: str, agent_image_uri: str, settings: DeploymentSettings
) -> dict[str, Any]:
    """The deployment root's variables: the images by digest, the shared root's outputs, the sizing."""
    missing = [n for n in SHARED_OUTPUTS if n not in shared]
    if missing:
        raise OutputsError(f"the shared outputs lack {', '.join(missing)}")
    region = str(shared["region"])
    problems = count_problems(settings.instance_type, str(settings.min_instances), str(settings.max_instances))
    if not settings.bedrock_model_id.strip():
        problems.append("BEDROCK_MODEL_ID is empty")
    if settings.session_storage not in SESSION_STORAGES:
        problems.append(f"SESSION_STORAGE={settings.session_storage!r} must be one of {', '.join(SESSION_STORAGES)}")
    if problems:
        raise OutputsError("; ".join(problems))
    variables = {
        "region": region,
        "tts_image_uri": _image("TTS", tts_image_uri, str(shared["tts_repository_url"]), region),
        "agent_image_uri": _image("agent", agent_image_uri, str(shared["agent_repository_url"]), region),
        "weights_bucket_name": shared["weights_bucket_name"],
        "weights_prefix": shared["weights_prefix"],
        "weights_kms_key_arn": shared["weights_kms_key_arn"],
        "bedrock_model_id": settings.bedrock_model_id.strip(),
        "instance_type": settings.instance_type,
        # A new endpoint starts at the floor, a redeployed one at its live count; autoscaling takes it from there.
        "initial_instance_count": settings.initial_instances(),
        "min_instance_count": settings.min_instances,
        "max_instance_count": settings.max_instances,
        "agent_session_storage": settings.session_storage,
    }
    if settings.gpu_slots is not None and settings.gpu_slots.measured_on(settings.instance_type):
        variables["gpu_stream_slots"] = settings.gpu_slots.variable()
    return variables


def write_var_file(path: Path, variables: Mapping[str, Any]) -> None:
    """Written whole or not at all: a destroy later reads it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(variables, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
