"""The evaluation terraform/tests/iam_authorizer.py holds the deployer policy to (the IAM-enforced moto run of
`scripts/terraform_checks.sh iam`), on the calls a privilege escalation would make: the committed policy allows
the deployment's own resources and refuses the same actions on anyone else's, which a policy of the same actions
on every resource allows: the refusals are the policy's scoping, not the evaluation refusing everything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "terraform" / "tests"))

from iam_authorizer import Call, Decision, evaluate  # noqa: E402

ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/kokoro-tts-sagemaker"
ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/OrganizationAccountAccessRole"
ENDPOINT = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:endpoint/kokoro-tts"
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
PROJECT_TAG = {"aws:ResourceTag/Project": "kokoro-tts"}
BOUNDED = {"iam:PermissionsBoundary": f"arn:aws:iam::{ACCOUNT}:policy/kokoro-tts-role-boundary"}


def committed() -> dict[str, Any]:
    """The three deployer policies as one document (IAM evaluates the union of what is attached)."""
    statements = []
    for purpose in ("images-and-weights", "roles", "deployment"):
        statements += json.loads((REPO / "docs" / "deployer-policy" / f"{purpose}.json").read_text())["Statement"]
    return {"Version": "2012-10-17", "Statement": statements}


def unscoped_policy() -> dict[str, Any]:
    """The actions an escalation uses, allowed on every resource ("Resource": "*"), as a deployer policy without
    resource scoping would allow them."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "WeightBucket",
                "Effect": "Allow",
                "Action": ["s3:DeleteBucket", "s3:PutBucketPolicy"],
                "Resource": "*",
            },
            {
                "Sid": "WeightKey",
                "Effect": "Allow",
                "Action": ["kms:PutKeyPolicy", "kms:ScheduleKeyDeletion"],
                "Resource": "*",
            },
            {
                "Sid": "Roles",
                "Effect": "Allow",
                "Action": ["iam:PutRolePolicy", "iam:UpdateAssumeRolePolicy"],
                "Resource": "*",
            },
        ],
    }


# (call, allowed by the committed policy)
CALLS = [
    (Call("iam:PutRolePolicy", ROLE, BOUNDED), True),
    (Call("iam:PutRolePolicy", ROLE), False),  # a kokoro-tts-* role without the boundary is not the deployer's
    (Call("iam:CreateRole", ROLE, {"iam:PermissionsBoundary": f"arn:aws:iam::{ACCOUNT}:policy/other"}), False),
    (Call("iam:DeleteRolePermissionsBoundary", ROLE, BOUNDED), False),
    (Call("iam:PutRolePolicy", ADMIN_ROLE), False),
    (Call("iam:UpdateAssumeRolePolicy", ADMIN_ROLE), False),
    (Call("iam:PassRole", ROLE, {"iam:PassedToService": "sagemaker.amazonaws.com"}), True),
    (Call("iam:PassRole", ROLE, {"iam:PassedToService": "ec2.amazonaws.com"}), False),
    (Call("iam:PassRole", ADMIN_ROLE, {"iam:PassedToService": "sagemaker.amazonaws.com"}), False),
    (
        Call(
            "iam:CreateServiceLinkedRole",
            f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/runtime-identity.bedrock-agentcore.amazonaws.com/"
            "AWSServiceRoleForBedrockAgentCoreRuntimeIdentity",
            {"iam:AWSServiceName": "runtime-identity.bedrock-agentcore.amazonaws.com"},
        ),
        True,
    ),
    (Call("kms:ScheduleKeyDeletion", KEY, PROJECT_TAG), True),
    (Call("kms:ScheduleKeyDeletion", KEY, {"aws:ResourceTag/Project": "payroll"}), False),
    (Call("kms:PutKeyPolicy", KEY, PROJECT_TAG), False),
    (Call("kms:RetireGrant", KEY, {"kms:ViaService": "ecr.us-east-1.amazonaws.com"}), True),
    (Call("kms:RetireGrant", KEY), False),
    (Call("s3:PutBucketPolicy", "arn:aws:s3:::kokoro-tts-weights-20261202"), True),
    (Call("s3:PutBucketPolicy", "arn:aws:s3:::payroll-exports"), False),
    (Call("s3:DeleteBucket", "arn:aws:s3:::payroll-exports"), False),
    (Call("cloudformation:DeleteStack", f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stack/kokoro-tts-agent/1"), True),
    (Call("cloudformation:DeleteStack", f"arn:aws:cloudformation:us-east-1:{ACCOUNT}:stack/network/1"), False),
    (Call("logs:DeleteLogGroup", f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:/aws/cloudtrail"), False),
    (Call("sagemaker:DeleteEndpoint", f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:endpoint/fraud-model"), False),
    (
        Call(
            "sagemaker:InvokeEndpointWithResponseStream", f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:endpoint/kokoro-tts"
        ),
        True,
    ),
    (
        Call(
            "application-autoscaling:RegisterScalableTarget",
            "*",
            {"application-autoscaling:service-namespace": "dynamodb"},
        ),
        False,
    ),
]


@pytest.mark.parametrize(("call", "allowed"), CALLS, ids=lambda v: v.action if isinstance(v, Call) else None)
def test_the_committed_policy_allows_only_the_deployments_resources(call: Call, allowed: bool) -> None:
    assert (evaluate([committed()], call) is not None) is allowed


def test_an_unscoped_policy_allows_the_escalations() -> None:
    old = unscoped_policy()
    escalations = [c for c, allowed in CALLS if not allowed and c.action.split(":")[0] in ("iam", "kms", "s3")]
    let_through = [c.action for c in escalations if evaluate([old], c) is not None]
    assert {"iam:PutRolePolicy", "iam:UpdateAssumeRolePolicy", "kms:PutKeyPolicy", "s3:PutBucketPolicy"} <= set(
        let_through
    )


def test_a_deny_wins_and_unknown_condition_operators_are_refused() -> None:
    deny = {"Statement": [{"Effect": "Deny", "Action": "iam:*", "Resource": "*"}]}
    assert evaluate([committed(), deny], Call("iam:PutRolePolicy", ROLE)) is None
    condition = {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}
    odd = {"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*", "Condition": condition}]}
    with pytest.raises(ValueError, match="IpAddress"):
        evaluate([odd], Call("s3:GetObject", "arn:aws:s3:::b/k"))


def test_needs_names_the_statement_a_recorded_call_depends_on() -> None:
    sys.path.insert(0, str(REPO / "terraform" / "tests"))
    from enforced_flow import needs

    principal = f"arn:aws:iam::{ACCOUNT}:user/kokoro-deployer"
    recorded = [
        Decision(principal, "iam:PutRolePolicy", ROLE, BOUNDED, "RolesWithBoundary"),
        Decision(principal, "kms:ScheduleKeyDeletion", KEY, PROJECT_TAG, "WeightKey"),
    ]
    found = needs(recorded, {"all": committed()})
    assert [d.action for d in found["RolesWithBoundary"]] == ["iam:PutRolePolicy"]
    assert [d.action for d in found["WeightKey"]] == ["kms:ScheduleKeyDeletion"]
    assert found["Ecr"] == []


FLOW = REPO / "terraform" / "tests" / "enforced_flow.py"
# What a deployer policy without the boundary condition would allow (the Roles statement before the boundary).
UNBOUNDED_ROLES = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["iam:CreateRole", "iam:DeleteRolePermissionsBoundary", "iam:PutRolePolicy"],
            "Resource": "arn:aws:iam::*:role/kokoro-tts-*",
        }
    ],
}


def escalation(*args: str) -> subprocess.CompletedProcess[str]:
    """The deployer's attempts to get a role out of the boundary, against moto with IAM enforced (a few seconds)."""
    return subprocess.run(
        [sys.executable, str(FLOW), "escalation", *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


def test_the_deployer_cannot_escape_the_role_boundary() -> None:
    result = escalation()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for refused in (
        "create a role without a boundary",
        "create a role with another boundary",
        "remove the role's boundary",
        "replace the role's boundary",
        "widen the boundary policy",
        "delete the boundary policy",
    ):
        assert f"  refused: {refused}" in lines
    assert "  allowed: create a role with the project's boundary" in lines


def test_the_escalation_check_fails_for_a_policy_without_the_boundary_condition() -> None:
    result = escalation("--extra-policy", json.dumps(UNBOUNDED_ROLES))
    assert result.returncode == 1
    assert "  allowed: create a role without a boundary" in result.stdout.splitlines()
    # The explicit Deny holds whatever else is attached.
    assert "  refused: remove the role's boundary" in result.stdout.splitlines()
