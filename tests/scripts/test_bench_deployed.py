"""`make bench TARGET=deployed` (scripts/bench/deployed.py) against the AgentCore stand-in in front of the real agent
and the real TTS server: one runtime session for the whole bench, stopped at the end; a section whose AWS call
fails records why and the bench goes on."""

from __future__ import annotations

import asyncio

import pytest
from botocore.exceptions import ClientError
from support.agent_fixtures import FAST, agent_settings, make_model
from support.agentcore_standin import deployed_agent
from support.inproc_server import RunningServer

from scripts.bench import deployed
from scripts.bench.deployed import Deployment, run_isolated_deployed, run_runtime_deployed

REGION = "us-east-1"
MODEL_ID = "us.amazon.nova-2-lite-v1:0"
RUNTIME_ARN = f"arn:aws:bedrock-agentcore:{REGION}:123456789012:runtime/kokoro_tts_agent-AbCdE12345"


@pytest.fixture(autouse=True)
def _aws_env(fake_aws_env: None) -> None:
    """Never the real account (see conftest.fake_aws_env)."""


async def test_one_runtime_session_for_the_whole_bench_stopped_at_the_end(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = agent_settings(f"http://127.0.0.1:{server.port}")
    with deployed_agent(settings, make_model(**FAST), f"bedrock:{MODEL_ID}", RUNTIME_ARN) as (url, standin):
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", url)
        async with asyncio.timeout(240):
            section = await run_runtime_deployed(Deployment("kokoro-tts", REGION, RUNTIME_ARN), 1)
    assert section.data["measured"], section.headline
    sessions = {i.session_id for i in standin.invocations}
    assert len(standin.invocations) == 3 and len(sessions) == 1  # the warm-up and both trials: one warm microVM
    [session] = sessions
    assert len(session) >= 33  # botocore: runtimeSessionId is 33 to 256 characters
    assert standin.stopped == [session]
    assert section.data["runtime_session_id"] == session and section.data["session_stopped"] is True


async def test_a_refused_call_is_recorded_in_its_section(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a deployer without sagemaker:InvokeEndpointWithResponseStream saw: AccessDenied escaped the section and
    the bench wrote nothing. Now the section says why; the caller writes the rest."""

    async def refused(batch: object, text: str) -> object:
        raise ClientError(
            {
                "Error": {
                    "Code": "AccessDeniedException",
                    "Message": "not authorized to perform: sagemaker:InvokeEndpointWithResponseStream",
                }
            },
            "InvokeEndpointWithResponseStream",
        )

    async def spoken(transport: object, text: str) -> object:
        return deployed.Sample(100.0, 200.0, 1.0)

    class Transport:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        async def aclose(self) -> None:
            pass

    monkeypatch.setattr(deployed, "bidi_once", spoken)
    monkeypatch.setattr(deployed, "batch_once", refused)
    monkeypatch.setattr("kokoro_client.sagemaker_bidi.SageMakerBidiTransport", Transport)
    monkeypatch.setattr("kokoro_client.sagemaker_batch.SageMakerBatchTTS", Transport)
    section = await run_isolated_deployed(Deployment("kokoro-tts", REGION, None), 1)
    assert section.data["measured"] is False
    assert "AccessDeniedException" in section.data["reason"]
    assert "InvokeEndpointWithResponseStream" in section.headline
