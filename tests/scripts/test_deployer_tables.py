"""The deployer policies against what AWS's own tables say the deployment needs, for the ARNs it uses
(terraform/tests/aws_tables.py): CloudFormation's registry handlers of every type the runtime's stack creates, as
cfn-lint ships their schemas, and Application Auto Scaling's checks of the caller for a SageMaker variant. Every
permission must be allowed by the committed policies, and removing a statement that some permission needs must
make the check fail. The boundary the roles carry must allow what terraform/modules/iam grants them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "terraform" / "tests"))

from aws_tables import (  # noqa: E402
    NOT_USED,
    RUNTIME_TYPE,
    Permission,
    handler_permissions,
    scaling_permissions,
    stack_permissions,
)
from iam_authorizer import Call, evaluate  # noqa: E402

from scripts.deploy.permissions import runtime_name  # noqa: E402

ACCOUNT, REGION, NAME = "123456789012", "us-east-1", "kokoro-tts"
POLICY_DIR = REPO / "docs" / "deployer-policy"
DEPLOYER_POLICIES = ("images-and-weights", "roles", "deployment")
RUNTIME_MODULE = REPO / "terraform" / "modules" / "agentcore_runtime" / "main.tf"


def committed() -> list[dict[str, Any]]:
    return [json.loads((POLICY_DIR / f"{p}.json").read_text()) for p in DEPLOYER_POLICIES]


def runtime_template() -> dict[str, Any]:
    """The runtime's stack as terraform/modules/agentcore_runtime renders it (the properties the handlers' needs
    depend on; the enforced moto flow evaluates the rendered template itself)."""
    properties = {
        "AgentRuntimeName": runtime_name(NAME),
        "AgentRuntimeArtifact": {"ContainerConfiguration": {"ContainerUri": "x"}},
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/{NAME}-agentcore",
        "NetworkConfiguration": {"NetworkMode": "PUBLIC"},
        "ProtocolConfiguration": "HTTP",
    }
    return {"Resources": {"Runtime": {"Type": RUNTIME_TYPE, "Properties": properties}}}


def needed() -> list[Permission]:
    permissions = [
        p
        for operation in ("CreateStack", "UpdateStack", "DeleteStack")
        for p in stack_permissions(runtime_template(), operation, REGION, ACCOUNT)
    ]
    permissions += scaling_permissions(f"endpoint/{NAME}/variant/AllTraffic", REGION, ACCOUNT)
    return permissions


def denied(documents: list[dict[str, Any]]) -> list[str]:
    return [f"{a} on {r}" for a, r, c in needed() if evaluate(documents, Call(a, r, c)) is None]


def without(sid: str) -> list[dict[str, Any]]:
    return [{**d, "Statement": [s for s in d["Statement"] if s.get("Sid") != sid]} for d in committed()]


def test_the_runtime_schema_lists_the_endpoint_handlers() -> None:
    # What the first review missed: the runtime's DEFAULT endpoint is created, updated and deleted with it.
    assert {"bedrock-agentcore:CreateAgentRuntimeEndpoint", "bedrock-agentcore:GetAgentRuntimeEndpoint"} <= set(
        handler_permissions(RUNTIME_TYPE, "create")
    )
    assert "bedrock-agentcore:UpdateAgentRuntimeEndpoint" in handler_permissions(RUNTIME_TYPE, "update")
    assert "bedrock-agentcore:DeleteAgentRuntimeEndpoint" in handler_permissions(RUNTIME_TYPE, "delete")


def test_every_permission_the_tables_name_is_allowed() -> None:
    actions = {a for a, _, _ in needed()}
    assert {"iam:PassRole", "bedrock-agentcore:CreateAgentRuntime", "cloudwatch:PutMetricAlarm"} <= actions
    assert denied(committed()) == []


# The statements some permission of the tables needs: without any one of them the check fails.
NEEDED_STATEMENTS = (
    "ReadAndUnscoped",
    "Runtime",
    "PassDeploymentRoles",
    "ServiceLinkedRoles",
    "Endpoint",
    "ScalingAlarms",
)


@pytest.mark.parametrize("sid", NEEDED_STATEMENTS)
def test_removing_a_statement_the_tables_need_fails_the_check(sid: str) -> None:
    assert denied(without(sid)) != []


def test_no_other_statement_is_needed_by_the_tables() -> None:
    sids = [s["Sid"] for d in committed() for s in d["Statement"] if s["Effect"] == "Allow"]
    assert sorted(s for s in sids if denied(without(s))) == sorted(NEEDED_STATEMENTS)


def test_what_the_template_does_not_use_is_really_unused() -> None:
    # The schema's permissions for a VPC network, an S3 code artifact and a capacity provider are left out only
    # while the module's template has none of them.
    text = RUNTIME_MODULE.read_text()
    assert re.search(r'NetworkMode\s*=\s*"PUBLIC"', text) and "ContainerConfiguration" in text
    assert not any(word in text for word in ("CodeConfiguration", "CapacityProviderConfiguration", '"VPC"'))
    properties = runtime_template()["Resources"]["Runtime"]["Properties"]
    assert all(rule.unused(properties) for rule in NOT_USED[RUNTIME_TYPE])
    vpc = {**properties, "NetworkConfiguration": {"NetworkMode": "VPC"}}
    vpc_template = {"Resources": {"Runtime": {"Type": RUNTIME_TYPE, "Properties": vpc}}}
    with pytest.raises(KeyError, match=r"no resource known for (ec2|vpc-lattice):"):
        stack_permissions(vpc_template, "CreateStack", REGION, ACCOUNT)


def test_the_boundary_allows_what_the_roles_are_granted() -> None:
    # terraform/modules/iam's inline policies: every action either role is granted must pass the boundary,
    # or the role could not do it (a boundary caps; it grants nothing).
    module = (REPO / "terraform/modules/iam/main.tf").read_text()
    # Action lists only (the trust policies' single "sts:AssumeRole" is no permission of the role).
    granted = {
        a for actions in re.findall(r"Action\s*=\s*\[([^\]]*)\]", module) for a in re.findall(r'"([^"]+)"', actions)
    }
    boundary = json.loads((POLICY_DIR / "role-boundary.json").read_text())
    allowed = {
        a for s in boundary["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert granted and granted <= allowed, sorted(granted - allowed)
    assert not any(a.startswith("iam:") or a.endswith("*") for a in allowed)
