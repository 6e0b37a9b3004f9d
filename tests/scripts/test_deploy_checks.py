"""What `make deploy` checks after the apply, and what makes a redeploy work, without an AWS account.

- The endpoint's health through InvokeEndpoint (CustomAttributes "health"): the device asserted from the
  instance type, against a stand-in of SageMaker's InvokeEndpoint answering the container's health JSON.
- The agent runtime through InvokeAgentRuntime (boto3, its SSE body) against a local stand-in that speaks the
  operation's wire format, in front of the real agent app and the real TTS server: Bedrock's model named in
  agent_start, decodable speech; and `make bench TARGET=deployed`'s end-to-end section through the same stand-in.
- The deregistration before an instance-type change of an autoscaled variant, against moto.
- The deployer policy: the committed document is the one the preflight's list generates; the preflight names the
  actions the identity may not call.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws
from support.agent_fixtures import FAST, agent_settings, make_model
from support.agentcore_standin import HealthStandin, deployed_agent, running
from support.fakes.terraform import create_endpoint, register_autoscaling
from support.inproc_server import RunningServer
from voice_agent.scripted_model import SIMULATED_NAME

from scripts.bench.deployed import Deployment, run_runtime_deployed
from scripts.deploy.__main__ import main
from scripts.deploy.permissions import ACTIONS, all_actions, check_permissions, policy_files
from scripts.deploy.preflight import Report, check_deployer_permissions
from scripts.deploy.scaling import release_for_instance_type
from scripts.deploy.smoke import SmokeFailure, check_trial, endpoint_health, is_gpu_instance, smoke_runtime
from scripts.servers import free_port

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "123456789012"
REGION = "us-east-1"
MODEL_ID = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
RUNTIME_ARN = f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/kokoro_tts_agent-AbCdE12345"
HEALTHY = {"status": "ok", "backend": "torch", "device": "cuda", "model_sha256": "ab" * 32, "version": "1.0.0"}


@pytest.fixture(autouse=True)
def _aws_env(fake_aws_env: None) -> None:
    """Every test here talks to moto or a stand-in, never the real account (see conftest.fake_aws_env)."""


# ---------------------------------------------------------------------------------------------------------------
# The endpoint's health


def health_client(url: str) -> Any:
    return boto3.client("sagemaker-runtime", region_name=REGION, endpoint_url=url)


def test_gpu_instance_types() -> None:
    assert [is_gpu_instance(t) for t in ("ml.g5.xlarge", "ml.g6e.2xlarge", "ml.p5.48xlarge", "ml.g4dn.xlarge")] == [
        True
    ] * 4
    assert not any(is_gpu_instance(t) for t in ("ml.m5.large", "ml.c7i.xlarge", "ml.inf2.xlarge", "ml.trn1.2xlarge"))


def test_the_health_check_asserts_the_device_the_instance_type_implies() -> None:
    standin = HealthStandin("kokoro-tts", dict(HEALTHY))
    with running(standin.app(), free_port()) as url:
        client = health_client(url)
        health = endpoint_health(client, "kokoro-tts", "ml.g5.xlarge")
        assert (health.backend, health.device) == ("torch", "cuda")
        assert "backend torch on cuda" in health.summary()
        # What SageMaker forwards: CustomAttributes as X-Amzn-SageMaker-Custom-Attributes, SigV4 for sagemaker.
        assert standin.calls[0]["x-amzn-sagemaker-custom-attributes"] == "health"
        assert "/sagemaker/aws4_request" in standin.calls[0]["authorization"]

        # A GPU endpoint that fell back to the CPU fails; a CPU variant must say cpu.
        standin.answer["device"] = "cpu"
        with pytest.raises(SmokeFailure, match=r"runs torch on cpu, but ml\.g5\.xlarge should run it on cuda"):
            endpoint_health(client, "kokoro-tts", "ml.g5.xlarge")
        assert endpoint_health(client, "kokoro-tts", "ml.m5.large").device == "cpu"
        standin.answer["device"] = "cuda:0"
        with pytest.raises(SmokeFailure, match="should run it on cpu"):
            endpoint_health(client, "kokoro-tts", "ml.c7i.xlarge")
        # A CPU endpoint without the fused Snake kernel is slower than its autoscaling target assumes.
        standin.answer = {**HEALTHY, "backend": "onnx", "device": "cpu", "fused_snake": False}
        with pytest.raises(SmokeFailure, match="without the fused Snake kernel"):
            endpoint_health(client, "kokoro-tts", "ml.c7i.xlarge")
        standin.answer["fused_snake"] = True
        assert endpoint_health(client, "kokoro-tts", "ml.c7i.xlarge").backend == "onnx"

        standin.answer = {"status": "ok", "backend": "torch"}
        with pytest.raises(SmokeFailure, match="lacks device, model_sha256, version"):
            endpoint_health(client, "kokoro-tts", "ml.g5.xlarge")
        standin.answer = {**HEALTHY, "status": "degraded"}
        with pytest.raises(SmokeFailure, match="not ok"):
            endpoint_health(client, "kokoro-tts", "ml.g5.xlarge")
        with pytest.raises(SmokeFailure, match=r"InvokeEndpoint .* failed.*not found"):
            endpoint_health(client, "other", "ml.g5.xlarge")


# ---------------------------------------------------------------------------------------------------------------
# The agent runtime


@pytest.fixture
def runtime_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Points boto3's bedrock-agentcore client at the stand-in (the URL is set once the stand-in runs)."""

    def point(url: str) -> None:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", url)

    yield point


async def test_the_runtime_smoke_test_through_invoke_agent_runtime(server: RunningServer, runtime_env: Any) -> None:
    settings = agent_settings(f"http://127.0.0.1:{server.port}")
    with deployed_agent(settings, make_model(**FAST), f"bedrock:{MODEL_ID}", RUNTIME_ARN) as (url, standin):
        runtime_env(url)
        async with asyncio.timeout(120):
            result = await smoke_runtime(RUNTIME_ARN, expect_model_id=MODEL_ID, log=lambda _: None)
    assert result.model == f"bedrock:{MODEL_ID}"
    assert result.audio_s > 1.0 and 0 < result.first_audio_s
    assert result.text.startswith("Hello there!")
    assert "runtime smoke test passed: model bedrock:" in result.summary()
    [invocation] = standin.invocations
    assert invocation.arn == RUNTIME_ARN and len(invocation.session_id) >= 33
    assert (invocation.content_type, invocation.accept) == ("application/json", "text/event-stream")
    assert json.loads(invocation.payload)["mode"] == "bidi"


async def test_the_runtime_smoke_test_fails_on_the_scripted_model_and_a_wrong_runtime(
    server: RunningServer, runtime_env: Any
) -> None:
    settings = agent_settings(f"http://127.0.0.1:{server.port}")
    with deployed_agent(settings, make_model(**FAST), SIMULATED_NAME, RUNTIME_ARN) as (url, _):
        runtime_env(url)
        async with asyncio.timeout(120):
            with pytest.raises(SmokeFailure, match=re.escape(f"ran model '{SIMULATED_NAME}', not a Bedrock model")):
                await smoke_runtime(RUNTIME_ARN, log=lambda _: None)
            lines: list[str] = []
            with pytest.raises(SmokeFailure, match="ResourceNotFoundException"):
                await smoke_runtime(RUNTIME_ARN + "x", attempts=2, retry_delay_s=0, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("  attempt 1/2 failed")


def trial(pcm: bytes, model: str = f"bedrock:{MODEL_ID}", end: bool = True) -> Any:
    events = [{"type": "agent_start", "model": model}, *([{"type": "agent_end", "metrics": {}}] if end else [])]
    return SimpleNamespace(
        error=None, model=model, events=events, pcm=bytearray(pcm), sample_rate=24_000, audio_format="pcm",
        first_audio_s=0.5, audio_s=len(pcm) / 48_000, text="Hi.",
    )  # fmt: skip


def test_the_runtime_reply_must_be_speech_from_the_expected_model() -> None:
    import array
    import math

    tone = array.array("h", (int(8000 * math.sin(i / 10)) for i in range(24_000))).tobytes()
    assert check_trial(trial(tone), MODEL_ID).audio_s == pytest.approx(1.0)
    with pytest.raises(SmokeFailure, match="no speech in the audio"):
        check_trial(trial(bytes(48_000)))
    with pytest.raises(SmokeFailure, match="not 16-bit PCM"):
        check_trial(trial(tone + b"\x00"))
    with pytest.raises(SmokeFailure, match=r"not bedrock:us\.anthropic"):
        check_trial(trial(tone, model="bedrock:another-model"), MODEL_ID)
    with pytest.raises(SmokeFailure, match="no agent_end event"):
        check_trial(trial(tone, end=False))


async def test_bench_deployed_measures_the_agent_through_the_runtime(server: RunningServer, runtime_env: Any) -> None:
    settings = agent_settings(f"http://127.0.0.1:{server.port}")
    deployment = Deployment("kokoro-tts", REGION, RUNTIME_ARN)
    with deployed_agent(settings, make_model(**FAST), f"bedrock:{MODEL_ID}", RUNTIME_ARN) as (url, standin):
        runtime_env(url)
        async with asyncio.timeout(240):
            section = await run_runtime_deployed(deployment, trials=1)
    assert section.data["measured"], section.headline
    assert [json.loads(i.payload)["mode"] for i in standin.invocations] == ["bidi", "bidi", "batch"]  # warm-up first
    assert section.data["llm"] == f"bedrock:{MODEL_ID}"
    assert set(section.data["modes"]) == {"bidi", "batch"}
    assert section.data["batch_over_bidi_first_audio"] > 0
    assert "through the AgentCore runtime" in section.headline
    assert (await run_runtime_deployed(Deployment("kokoro-tts", REGION, None), 1)).data["measured"] is False


# ---------------------------------------------------------------------------------------------------------------
# The deregistration before an instance-type change


@pytest.fixture
def autoscaled() -> Iterator[tuple[Any, Any]]:
    with mock_aws():
        sm = boto3.client("sagemaker", region_name=REGION)
        scaling = boto3.client("application-autoscaling", region_name=REGION)
        create_endpoint(sm, "m1", "c1", f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/kokoro-tts/tts@sha256:" + "a" * 64)
        register_autoscaling(scaling, 1, 2)
        yield sm, scaling


def registered(scaling: Any) -> tuple[int, int]:
    targets = scaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    policies = scaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    return len(targets), len(policies)


def test_the_same_instance_type_or_no_endpoint_leaves_autoscaling_alone(autoscaled: tuple[Any, Any]) -> None:
    sm, scaling = autoscaled
    assert release_for_instance_type(sm, scaling, "kokoro-tts", "ml.m5.large", log=lambda _: None) == []
    lines: list[str] = []
    assert release_for_instance_type(sm, scaling, "nope", "ml.m5.xlarge", log=lines.append) == []
    assert lines == ["  endpoint nope does not exist yet: nothing to deregister"]
    assert registered(scaling) == (1, 1)


def test_a_new_instance_type_deregisters_the_variant_first(autoscaled: tuple[Any, Any]) -> None:
    sm, scaling = autoscaled
    lines: list[str] = []
    [released] = release_for_instance_type(sm, scaling, "kokoro-tts", "ml.m5.xlarge", log=lines.append)
    assert (released.resource_id, released.instance_type) == ("endpoint/kokoro-tts/variant/AllTraffic", "ml.m5.large")
    assert released.policies == ("kokoro-tts-concurrent-requests",)
    assert registered(scaling) == (0, 0)
    assert "ml.m5.large -> ml.m5.xlarge" in lines[0] and "deregistered" in lines[0]
    # Again (an apply that failed after the release): nothing registered, nothing to do, no error.
    assert release_for_instance_type(sm, scaling, "kokoro-tts", "ml.m5.xlarge", log=lines.append) == []
    assert "not registered for autoscaling" in lines[-1]


# ---------------------------------------------------------------------------------------------------------------
# The deployer policy


def test_the_committed_deployer_policies_are_the_generated_ones(tmp_path: Path) -> None:
    committed = REPO / "docs" / "deployer-policy"
    assert {p.name: p.read_text() for p in committed.glob("*.json")} == policy_files(), (
        f"regenerate: python -m scripts.deploy deployer-policy --out {committed.relative_to(REPO)}"
    )
    assert main(["deployer-policy", "--out", str(tmp_path)]) == 0
    written = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json")) if p.name != "role-boundary.json"]
    assert len(written) == 3
    statements = [s for document in written for s in document["Statement"]]
    actions = {
        a
        for s in statements
        if s["Effect"] == "Allow"
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert actions == set(all_actions())
    # What the deploy flow itself calls beyond Terraform: the release, the health check, the runtime smoke test.
    assert {
        "application-autoscaling:DeregisterScalableTarget",
        "application-autoscaling:DeleteScalingPolicy",
        "sagemaker:InvokeEndpoint",
        "bedrock-agentcore:InvokeAgentRuntime",
        "logs:PutRetentionPolicy",
        "logs:DeleteLogGroup",
    } <= actions
    assert not any("*" in a for a in actions)
    [pass_role] = [s for s in statements if s["Action"] == "iam:PassRole"]
    assert pass_role["Resource"] == "arn:aws:iam::*:role/kokoro-tts-*"


class FakeIam:
    """IAM's GetRole and SimulatePrincipalPolicy (moto has no simulation): ``allowed`` decides."""

    def __init__(self, allowed: set[str], fail: Exception | None = None) -> None:
        self.allowed, self.fail = allowed, fail
        self.simulated: list[tuple[str, list[str]]] = []
        self.contexts: list[tuple[str, dict[str, Any]]] = []

    def get_role(self, RoleName: str) -> dict[str, Any]:
        return {"Role": {"Arn": f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/{RoleName}"}}

    def simulate_principal_policy(self, PolicySourceArn: str, ActionNames: list[str], **context: Any) -> dict[str, Any]:
        if self.fail:
            raise self.fail
        self.simulated.append((PolicySourceArn, ActionNames))
        self.contexts.extend((a, context) for a in ActionNames if context)
        return {
            "EvaluationResults": [
                {"EvalActionName": a, "EvalDecision": "allowed" if a in self.allowed else "implicitDeny"}
                for a in ActionNames
            ]
        }


def test_the_preflight_names_the_actions_the_deployer_may_not_call() -> None:
    everything = set(all_actions())
    missing = {"bedrock-agentcore:InvokeAgentRuntime", "logs:PutRetentionPolicy"}
    iam = FakeIam(everything - missing)
    report = Report()
    check_deployer_permissions(iam, f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_Admin_0123/me", report)
    [problem] = report.problems
    role = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_0123"
    assert problem.what == f"{role} may not: bedrock-agentcore:InvokeAgentRuntime, logs:PutRetentionPolicy."
    assert "python -m scripts.deploy deployer-policy" in problem.fix
    simulated = [a for _, names in iam.simulated for a in names]
    assert set(simulated) == everything and all(len(names) <= 50 for _, names in iam.simulated)
    # The scoped statements are simulated with the context their conditions need, on the deployment's role.
    passed = [c for a, c in iam.contexts if a == "iam:PassRole"]
    assert [c["ContextEntries"][0]["ContextKeyValues"] for c in passed] == [
        ["sagemaker.amazonaws.com"],
        ["bedrock-agentcore.amazonaws.com"],
    ]
    assert [c["ResourceArns"] for c in passed] == [
        [f"arn:aws:iam::{ACCOUNT}:role/kokoro-tts-sagemaker"],
        [f"arn:aws:iam::{ACCOUNT}:role/kokoro-tts-agentcore"],
    ]
    linked = [c for a, c in iam.contexts if a == "iam:CreateServiceLinkedRole"]
    assert [c["ContextEntries"][0]["ContextKeyValues"] for c in linked] == [
        ["sagemaker.application-autoscaling.amazonaws.com"],
        ["runtime-identity.bedrock-agentcore.amazonaws.com"],
    ]

    report = Report()
    check_deployer_permissions(FakeIam(everything), f"arn:aws:iam::{ACCOUNT}:user/deployer", report)
    assert not report.problems and "every action of the deployer policy is allowed" in report.found[0]

    from botocore.exceptions import ClientError

    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "not authorized"}}, "SimulatePrincipalPolicy")
    report = Report()
    check_deployer_permissions(FakeIam(set(), fail=denied), f"arn:aws:iam::{ACCOUNT}:user/deployer", report)
    assert not report.problems and "were not checked: iam:SimulatePrincipalPolicy failed" in report.warnings[0]
    assert check_permissions(FakeIam(set()), f"arn:aws:iam::{ACCOUNT}:root").unchecked == (
        "the account root may do everything"
    )
    assert set(ACTIONS)  # the groups are the policy's statement ids
