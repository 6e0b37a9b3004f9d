"""The preflight refuses, before anything is created, what a fresh account or region lacks:
no endpoint quota, a Legacy model, a model the account cannot call, a region without AgentCore Runtime; one line
each telling how to fix it. STS, IAM and AgentCore's control plane are moto's; Service Quotas, Bedrock and Bedrock
Runtime, which moto does not serve, are tests/support/account_standin.py, in their wire formats.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from support.account_standin import NOVA_2_LITE_PROFILE, FakeAccount, account_app, account_endpoints
from support.agentcore_standin import running

from scripts.deploy import preflight as preflight_module
from scripts.deploy.permissions import SERVICE_LINKED_ROLES
from scripts.deploy.preflight import DeployInputs, Report, preflight_deploy
from scripts.servers import free_port

REPO = Path(__file__).resolve().parents[2]
REGION = "us-east-1"


@pytest.fixture(autouse=True)
def _aws_env(fake_aws_env: None) -> None:
    """moto and the stand-in only (tests/conftest.py)."""


@dataclass
class Cloud:
    account: FakeAccount
    env: dict[str, str]  # what the preflight's boto3 and its bidirectional-streaming probe use


@pytest.fixture
def cloud(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    """A fresh moto account with the service-linked roles, beside a stand-in account with quota and Nova 2 Lite.
    The deployer policy's simulation (iam:SimulatePrincipalPolicy, which moto lacks) is tested on its own
    (tests/scripts/test_deploy_checks.py): here it is left out."""
    monkeypatch.setattr(preflight_module, "check_deployer_permissions", lambda iam, arn, report: None)
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST"), timeout=10)
    account = FakeAccount()
    with running(account_app(account), free_port()) as url:
        env = {"AWS_ENDPOINT_URL": moto_server, **account_endpoints(url), "SMOKE_ENDPOINT_URI": url}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        iam = boto3.client("iam", region_name=REGION)
        for service, role in SERVICE_LINKED_ROLES.items():
            # As AWS names them (moto's CreateServiceLinkedRole names them otherwise).
            trust = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
            }
            iam.create_role(
                RoleName=role, Path=f"/aws-service-role/{service}/", AssumeRolePolicyDocument=json.dumps(trust)
            )
        # What an administrator creates once (docs/deploy.md, Permissions).
        boundary = (REPO / "docs" / "deployer-policy" / "role-boundary.json").read_text()
        iam.create_policy(PolicyName="kokoro-tts-role-boundary", PolicyDocument=boundary)
        yield Cloud(account, env)


def preflight(cloud: Cloud, **settings: str) -> Report:
    inputs = DeployInputs(
        bedrock_model_id=settings.get("model", NOVA_2_LITE_PROFILE),
        region=REGION,
        region_source="AWS_REGION",
        instance_type=settings.get("instance_type", "ml.g5.xlarge"),
        min_instances="1",
        max_instances="2",
    )
    return preflight_deploy(REPO, cloud.env, inputs, boto3.Session(region_name=REGION))


def account_problems(report: Report) -> list[str]:
    """The problems the account checks add (the machine's own, such as a missing docker, left aside), each as its
    one line and its one fix line."""
    lines = []
    for problem in report.problems:
        if any(
            word in problem.what
            for word in ("quota", "BEDROCK_MODEL_ID", "AgentCore", "bidirectional", "linked", "boundary")
        ):
            assert "\n" not in problem.fix, f"the fix must be one line: {problem.fix!r}"
            lines.append(f"{problem.what} | {problem.fix}")
    return lines


def test_an_account_with_quota_and_an_active_model_passes(cloud: Cloud) -> None:
    report = preflight(cloud)
    assert account_problems(report) == []
    assert any(line.startswith("account: quota for ml.g5.xlarge") for line in report.found), report.found
    assert "ListServiceQuotas" in cloud.account.calls
    assert f"GetInferenceProfile {NOVA_2_LITE_PROFILE}" in cloud.account.calls
    assert f"Converse {NOVA_2_LITE_PROFILE}" in cloud.account.calls


def test_a_fresh_account_without_endpoint_quota_is_refused(cloud: Cloud) -> None:
    cloud.account.applied_quotas.clear()  # AWS's default for ml.g5.xlarge endpoints: 0
    [line] = account_problems(preflight(cloud))
    assert "quota 'ml.g5.xlarge for endpoint usage' in us-east-1 is 0, MIN_INSTANCES is 1" in line
    assert "Service Quotas console → Amazon SageMaker → 'ml.g5.xlarge for endpoint usage' → Request increase" in line


def test_a_legacy_model_is_refused(cloud: Cloud) -> None:
    [line] = account_problems(preflight(cloud, model="us.anthropic.claude-3-5-haiku-20241022-v1:0"))
    assert "anthropic.claude-3-5-haiku-20241022-v1:0 is LEGACY in us-east-1" in line
    assert "BEDROCK_MODEL_ID=us.amazon.nova-2-lite-v1:0" in line


def test_a_model_the_account_cannot_call_is_refused(cloud: Cloud) -> None:
    model = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
    cloud.account.models["anthropic.claude-haiku-4-5-20251001-v1:0"] = "ACTIVE"
    cloud.account.profiles[model] = ["anthropic.claude-haiku-4-5-20251001-v1:0"]
    cloud.account.refusals[model] = (
        "AccessDeniedException",
        "Model use case details have not been submitted for this account. Fill out the Anthropic use case details "
        "form before using the model.",
    )
    [line] = account_problems(preflight(cloud, model=model))
    assert f"BEDROCK_MODEL_ID {model} does not answer this account in us-east-1: AccessDeniedException" in line
    assert "use-case form" in line and "aws-marketplace:Subscribe" in line


def test_a_region_without_agentcore_runtime_is_refused(cloud: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    # What a region without AgentCore Runtime looks like to botocore: its regional host does not answer.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{closed.getsockname()[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL", nobody)
    [line] = account_problems(preflight(cloud))
    assert "AgentCore Runtime is not available in us-east-1" in line
    assert "deploy to a region that has it" in line


def test_every_gap_in_one_message_bidirectional_streaming_too(cloud: Cloud) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        cloud.env["SMOKE_ENDPOINT_URI"] = f"https://127.0.0.1:{closed.getsockname()[1]}"
    cloud.account.applied_quotas.clear()
    lines = account_problems(preflight(cloud, model="us.anthropic.claude-3-5-haiku-20241022-v1:0"))
    assert len(lines) == 3, lines
    assert any("bidirectional streaming does not answer" in line for line in lines)


def test_an_account_without_the_role_boundary_is_refused(cloud: Cloud) -> None:
    iam = boto3.client("iam", region_name=REGION)
    [policy] = [
        p for p in iam.list_policies(Scope="Local")["Policies"] if p["PolicyName"] == "kokoro-tts-role-boundary"
    ]
    iam.delete_policy(PolicyArn=policy["Arn"])
    [line] = account_problems(preflight(cloud))
    assert f"the roles' permissions boundary {policy['Arn']} does not exist" in line
    assert "aws iam create-policy --policy-name kokoro-tts-role-boundary" in line
    assert "file://docs/deployer-policy/role-boundary.json" in line
