"""Which AWS region a deployment goes to, and which regions the roots' local state already lives in.

Terraform finds its resources only in the provider's region: applying a root that already holds resources
with another region would create a second copy and lose track of the first, and destroying it would drop
them from the state without deleting them. So the region is resolved once, checked against what the
local state records, and then passed explicitly to everything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_REGION = "us-east-1"  # the roots' own default
SHARED_STATE = Path("terraform/shared/terraform.tfstate")
DEPLOYMENT_STATE = Path("terraform/deployment/terraform.tfstate")


def _state(path: Path) -> dict[str, Any] | None:
    """A local state file that holds resources; None without one (never applied, destroyed, or a remote backend)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not doc.get("resources"):
        return None
    return doc


def _output(state: Mapping[str, Any], name: str) -> Any:
    output = state.get("outputs", {}).get(name)
    return output.get("value") if isinstance(output, dict) else None


def recorded_shared_region(repo: Path) -> str | None:
    """The region terraform/shared was applied in (its `region` output), if its local state holds resources."""
    state = _state(repo / SHARED_STATE)
    region = _output(state, "region") if state else None
    return region if isinstance(region, str) and region else None


def recorded_deployment_region(repo: Path) -> str | None:
    """The deployed endpoint's region (from its ARN output), if terraform/deployment's local state holds resources."""
    state = _state(repo / DEPLOYMENT_STATE)
    arn = _output(state, "endpoint_arn") if state else None
    if not isinstance(arn, str):
        return None
    parts = arn.split(":")  # arn:aws:sagemaker:<region>:<account>:endpoint/<name>
    return parts[3] if len(parts) > 4 and parts[3] else None


def resolve_region(env: Mapping[str, str], repo: Path, profile_region: str | None = None) -> tuple[str, str]:
    """(region, where it came from). An explicit AWS_REGION/AWS_DEFAULT_REGION wins; then the region the shared
    root already lives in, so a second `make deploy` updates the same resources; then the profile's; then us-east-1."""
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if value := env.get(var, "").strip():
            return value, var
    if recorded := recorded_shared_region(repo):
        return recorded, str(SHARED_STATE)
    if profile_region:
        return profile_region, "the AWS profile"
    return DEFAULT_REGION, "default"


def region_conflicts(region: str, repo: Path) -> list[str]:
    """One line per root whose local state lives in another region than ``region``."""
    conflicts = []
    for root, recorded in (
        ("terraform/shared", recorded_shared_region(repo)),
        ("terraform/deployment", recorded_deployment_region(repo)),
    ):
        if recorded and recorded != region:
            conflicts.append(f"{root} was applied in {recorded} (its state says so), not {region}")
    return conflicts
