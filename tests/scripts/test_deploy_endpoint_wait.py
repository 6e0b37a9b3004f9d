"""The deploy's wait for the endpoint to be InService (scripts/deploy/endpoint.py), against moto with scripted
statuses and a fake clock: progress lines, Failed with its reason, the timeout, an update that rolled back, an
endpoint that does not exist, and the `wait` command reading the deployment's outputs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from support.deploy_harness import ACCOUNT, DIGEST_A, REGION, TTS_REPO
from support.fakes.terraform import create_endpoint

from scripts.deploy.__main__ import main
from scripts.deploy.endpoint import EndpointError, wait_in_service

pytestmark = pytest.mark.usefixtures("fake_aws_env")  # moto or a stand-in, never the real account (tests/conftest.py)


@dataclass
class FakeTime:
    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedSageMaker:
    """moto's SageMaker client, whose DescribeEndpoint answers with scripted statuses first."""

    def __init__(self, client: Any, script: list[dict[str, str]]) -> None:
        self._client = client
        self.script = script
        self.meta = client.meta

    def describe_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        described: dict[str, Any] = self._client.describe_endpoint(**kwargs)
        return {**described, **self.script.pop(0)} if self.script else described

    def describe_endpoint_config(self, **kwargs: Any) -> Any:
        return self._client.describe_endpoint_config(**kwargs)


@pytest.fixture
def endpoint() -> Iterator[Any]:
    with mock_aws():
        sm = boto3.client("sagemaker", region_name=REGION)
        create_endpoint(sm, "kokoro-tts-m1", "kokoro-tts-c1", f"{TTS_REPO}@{DIGEST_A}")
        yield sm


def test_wait_shows_progress_until_in_service(endpoint: Any) -> None:
    time_ = FakeTime()
    lines: list[str] = []
    client: Any = ScriptedSageMaker(endpoint, [{"EndpointStatus": "Creating"}] * 3)
    ready = wait_in_service(
        client,
        "kokoro-tts",
        poll_s=30,
        expect_model="kokoro-tts-m1",
        log=lines.append,
        sleep=time_.sleep,
        clock=time_.clock,
    )
    assert (ready.model_name, ready.waited_s) == ("kokoro-tts-m1", 90)
    assert lines == [
        "  endpoint kokoro-tts: Creating (0m00s)",
        "  endpoint kokoro-tts: Creating (0m30s)",
        "  endpoint kokoro-tts: Creating (1m00s)",
        "  endpoint kokoro-tts: InService (1m30s)",
    ]
    assert time_.sleeps == [30, 30, 30]


def test_wait_fails_on_failed_with_the_failure_reason(endpoint: Any) -> None:
    reason = "The primary container for production variant AllTraffic did not pass the ping health check."
    client: Any = ScriptedSageMaker(
        endpoint, [{"EndpointStatus": "Creating"}, {"EndpointStatus": "Failed", "FailureReason": reason}]
    )
    time_ = FakeTime()
    with pytest.raises(EndpointError) as caught:
        wait_in_service(client, "kokoro-tts", poll_s=10, log=lambda _: None, sleep=time_.sleep, clock=time_.clock)
    assert str(caught.value) == f"endpoint kokoro-tts is Failed: {reason}"


def test_wait_gives_up_at_the_timeout(endpoint: Any) -> None:
    client: Any = ScriptedSageMaker(endpoint, [{"EndpointStatus": "Updating"}] * 100)
    time_ = FakeTime()
    with pytest.raises(EndpointError, match=r"still Updating after 1m30s \(timeout 1m40s\)"):
        wait_in_service(
            client, "kokoro-tts", timeout_s=100, poll_s=30, log=lambda _: None, sleep=time_.sleep, clock=time_.clock
        )


def test_wait_notices_an_update_that_rolled_back(endpoint: Any) -> None:
    client: Any = ScriptedSageMaker(endpoint, [{"EndpointStatus": "InService", "FailureReason": "image pull failed"}])
    with pytest.raises(EndpointError, match=r"serves model kokoro-tts-m1, not kokoro-tts-m2.*: image pull failed"):
        wait_in_service(client, "kokoro-tts", expect_model="kokoro-tts-m2", log=lambda _: None)


def test_wait_for_an_endpoint_that_does_not_exist(endpoint: Any) -> None:
    with pytest.raises(EndpointError, match="endpoint nope does not exist in us-east-1"):
        wait_in_service(endpoint, "nope", log=lambda _: None)


def test_the_wait_command_reads_the_deployment_outputs(
    endpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = tmp_path / "deployment.json"
    arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/kokoro-tts"
    values = {"endpoint_name": "kokoro-tts", "endpoint_arn": arn, "sagemaker_model_name": "kokoro-tts-m1"}
    outputs.write_text(json.dumps({k: {"value": v} for k, v in values.items()}))
    assert main(["wait", "--deployment-outputs", str(outputs), "--poll", "0.01"]) == 0
    assert "endpoint kokoro-tts is InService, serving kokoro-tts-m1" in capsys.readouterr().out
    values["sagemaker_model_name"] = "kokoro-tts-m0"
    outputs.write_text(json.dumps({k: {"value": v} for k, v in values.items()}))
    assert main(["wait", "--deployment-outputs", str(outputs), "--poll", "0.01"]) == 1
    assert "serves model kokoro-tts-m1, not kokoro-tts-m0" in capsys.readouterr().err
