"""Permissions AWS checks in the deployer's name that no API call of the deployer names, read from tables the
project did not write:

- CloudFormation's registry schemas, as cfn-lint ships them (cfnlint/data/schemas/providers/<region>.json maps a
  type to schemas/resources/<hash>.json, whose ``handlers`` list each handler's permissions). The runtime's stack
  has no service role, so CloudFormation runs the handlers with the caller's credentials.
- Application Auto Scaling's checks of the caller before it scales a SageMaker variant (Application Auto Scaling
  user guide, "Permissions required for API actions on target services and CloudWatch" and "Permissions
  validation for API calls on target resources"; SageMaker's "Auto scaling prerequisites" points there): it calls
  the target's and CloudWatch's APIs as the caller and refuses the request when one is denied.

Each permission comes back as (action, resource ARN, condition context) for the names the deployment uses.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

Permission = tuple[str, str, Mapping[str, str]]

# Which handlers a stack operation runs: CloudFormation reads a resource back after creating or updating it.
HANDLERS = {"CreateStack": ("create", "read"), "UpdateStack": ("update", "read"), "DeleteStack": ("delete",)}
RUNTIME_TYPE = "AWS::BedrockAgentCore::Runtime"
RUNTIME_IDENTITY_SERVICE = "runtime-identity.bedrock-agentcore.amazonaws.com"
RUNTIME_IDENTITY_ROLE = "AWSServiceRoleForBedrockAgentCoreRuntimeIdentity"
# A runtime's id is <name>-<10 random characters>; its endpoint is DEFAULT.
RUNTIME_ID_SUFFIX = "AbCdE12345"


@dataclass(frozen=True)
class NotUsed:
    """Handler permissions for a feature the template does not use, and the check that it does not."""

    prefixes: tuple[str, ...]
    feature: str
    unused: Callable[[Mapping[str, Any]], bool]


# The schema lists one set of permissions for every configuration of the type; these belong to configurations the
# runtime's template does not have (each ``unused`` is checked against the template, so using one fails the test).
NOT_USED: Mapping[str, tuple[NotUsed, ...]] = {
    RUNTIME_TYPE: (
        NotUsed(
            ("ec2:", "vpc-lattice:"),
            "NetworkConfiguration.NetworkMode VPC",
            lambda p: p.get("NetworkConfiguration", {}).get("NetworkMode") == "PUBLIC",
        ),
        NotUsed(
            ("s3:GetObject", "s3:GetObjectVersion", "kms:Decrypt"),
            "a code artifact in S3 (AgentRuntimeArtifact.CodeConfiguration)",
            lambda p: "CodeConfiguration" not in p.get("AgentRuntimeArtifact", {}),
        ),
        NotUsed(
            ("bedrock-agentcore:PassCapacityProvider",),
            "CapacityProviderConfiguration",
            lambda p: "CapacityProviderConfiguration" not in p,
        ),
    )
}


def _cfnlint_schemas() -> Path:
    # Located, not imported: importing cfnlint loads all of its rules (seconds).
    spec = importlib.util.find_spec("cfnlint")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("cfn-lint is not installed (the dev extra has it)")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "schemas"


@cache
def registry_schema(resource_type: str, region: str = "us-east-1") -> dict[str, Any]:
    schemas = _cfnlint_schemas()
    providers = json.loads((schemas / "providers" / f"{region}.json").read_text())
    if resource_type not in providers:
        raise KeyError(f"{resource_type} has no registry schema in {region} (cfn-lint's providers/{region}.json)")
    schema: dict[str, Any] = json.loads((schemas / "resources" / f"{providers[resource_type]}.json").read_text())
    return schema


def handler_permissions(resource_type: str, handler: str, region: str = "us-east-1") -> tuple[str, ...]:
    permissions = registry_schema(resource_type, region)["handlers"][handler]["permissions"]
    return tuple(str(p) for p in permissions)


def applicable(resource_type: str, properties: Mapping[str, Any], permission: str) -> bool:
    for rule in NOT_USED.get(resource_type, ()):
        if permission.startswith(rule.prefixes):
            return not rule.unused(properties)
    return True


def _runtime_resource(action: str, properties: Mapping[str, Any], region: str, account: str) -> Permission:
    runtime_id = f"{properties.get('AgentRuntimeName')}-{RUNTIME_ID_SUFFIX}"
    runtime = f"arn:aws:bedrock-agentcore:{region}:{account}:runtime/{runtime_id}"
    name = action.split(":", 1)[1]
    if action == "iam:PassRole":
        return action, str(properties.get("RoleArn")), {"iam:PassedToService": "bedrock-agentcore.amazonaws.com"}
    if action == "iam:CreateServiceLinkedRole":
        role = f"arn:aws:iam::{account}:role/aws-service-role/{RUNTIME_IDENTITY_SERVICE}/{RUNTIME_IDENTITY_ROLE}"
        return action, role, {"iam:AWSServiceName": RUNTIME_IDENTITY_SERVICE}
    if action == "bedrock-agentcore:CreateAgentRuntime":
        return action, "*", {}  # IAM authorizes it on "*" only
    if action.startswith("bedrock-agentcore:") and name.endswith("WorkloadIdentity"):
        directory = f"arn:aws:bedrock-agentcore:{region}:{account}:workload-identity-directory/default"
        return action, f"{directory}/workload-identity/{runtime_id}", {}
    if name in ("GetAgentRuntimeEndpoint", "UpdateAgentRuntimeEndpoint", "DeleteAgentRuntimeEndpoint"):
        return action, f"{runtime}/runtime-endpoint/DEFAULT", {}
    if action.startswith("bedrock-agentcore:"):
        return action, runtime, {}
    raise KeyError(f"{RUNTIME_TYPE}: no resource known for {action}; say in aws_tables.py what it acts on")


RESOURCES: Mapping[str, Callable[[str, Mapping[str, Any], str, str], Permission]] = {RUNTIME_TYPE: _runtime_resource}


def stack_permissions(template: Mapping[str, Any], operation: str, region: str, account: str) -> list[Permission]:
    """What CloudFormation's handlers ask of the caller for each resource of ``template`` in a stack operation."""
    found: list[Permission] = []
    for resource in template.get("Resources", {}).values():
        resource_type, properties = str(resource.get("Type")), resource.get("Properties", {})
        for handler in HANDLERS.get(operation, ()):
            for action in handler_permissions(resource_type, handler, region):
                if not applicable(resource_type, properties, action):
                    continue
                if resource_type not in RESOURCES:
                    raise KeyError(f"{resource_type}: no resource mapping in aws_tables.py")
                permission = RESOURCES[resource_type](action, properties, region, account)
                if permission not in found:
                    found.append(permission)
    return found


# Application Auto Scaling, SageMaker variants: the calls it makes as the caller before registering the variant or
# putting a scaling policy on it (the target-tracking alarms it creates are named TargetTracking-<resource id>-...).
SCALING_CHECKS = (
    "sagemaker:DescribeEndpoint",
    "sagemaker:DescribeEndpointConfig",
    "sagemaker:UpdateEndpointWeightsAndCapacities",
    "cloudwatch:DescribeAlarms",
    "cloudwatch:PutMetricAlarm",
    "cloudwatch:DeleteAlarms",
)
CHECKED_OPERATIONS = ("RegisterScalableTarget", "PutScalingPolicy")


def scaling_permissions(resource_id: str, region: str, account: str) -> list[Permission]:
    """``resource_id``: endpoint/<endpoint>/variant/<variant>."""
    endpoint = resource_id.split("/")[1].lower()
    arns = {
        "sagemaker:DescribeEndpointConfig": f"arn:aws:sagemaker:{region}:{account}:endpoint-config/{endpoint}-config",
        "sagemaker:": f"arn:aws:sagemaker:{region}:{account}:endpoint/{endpoint}",
        "cloudwatch:": f"arn:aws:cloudwatch:{region}:{account}:alarm:TargetTracking-{resource_id}-AlarmHigh-0000",
    }
    found: list[Permission] = []
    for action in SCALING_CHECKS:
        resource = next(arn for prefix, arn in arns.items() if action.startswith(prefix))
        found.append((action, resource, {}))
    return found
