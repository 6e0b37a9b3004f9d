"""The deploy's smoke test (scripts/deploy/smoke.py): audio attributed to each sentence from the event stream, the
whole test through the real SDK and the SageMaker stand-in (tests/support/sagemaker.py) in front of the real TTS
server, its failures (a sentence without audio, an endpoint that cannot open a stream), and signing with the
credentials boto3 finds.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from kokoro_client.aws_credentials import Boto3CredentialsResolver
from kokoro_client.session import AudioEvent, ControlEvent, TTSEvent
from smithy_core.exceptions import SmithyIdentityError
from support.deploy_harness import REGION
from support.inproc_server import RunningServer
from support.sagemaker import Certs, ScriptedContainer, sagemaker, scripted
from websockets.asyncio.server import ServerConnection

from scripts.deploy.smoke import SmokeFailure, check_events, run_smoke, smoke_endpoint

pytestmark = pytest.mark.usefixtures("fake_aws_env")  # moto or a stand-in, never the real account (tests/conftest.py)


def events(*items: TTSEvent) -> list[tuple[float, TTSEvent]]:
    return [(0.1 * i, event) for i, event in enumerate(items)]


def start(uid: str) -> ControlEvent:
    return ControlEvent({"type": "synthesis_start", "id": uid})


def complete(uid: str, size: int | None) -> ControlEvent:
    message: dict[str, Any] = {"type": "synthesis_complete", "id": uid}
    return ControlEvent(message if size is None else {**message, "bytes": size})


def test_check_events_attributes_audio_to_each_sentence() -> None:
    ids = ["smoke-0", "smoke-1"]
    ok = events(start("smoke-0"), AudioEvent(b"\x01" * 10), AudioEvent(b"\x02" * 6), complete("smoke-0", 16))
    ok += events(start("smoke-1"), AudioEvent(b"\x03" * 8), complete("smoke-1", None))
    utterances, first_audio = check_events(ok, ids)
    assert [(u.id, u.audio_bytes, u.reported_bytes) for u in utterances] == [("smoke-0", 16, 16), ("smoke-1", 8, None)]
    assert first_audio == pytest.approx(0.1)

    with pytest.raises(SmokeFailure) as caught:
        check_events(events(start("smoke-0"), complete("smoke-0", 0), start("smoke-1")), ids)
    assert str(caught.value).startswith("no audio for smoke-0; no synthesis_complete for smoke-1")
    error = ControlEvent({"type": "error", "code": "engine_error", "message": "CUDA out of memory"})
    with pytest.raises(SmokeFailure, match="error event engine_error: CUDA out of memory"):
        check_events([*ok, (1.0, error)], ids)
    with pytest.raises(SmokeFailure, match="smoke-0: synthesis_complete says 99 bytes, 4 arrived"):
        check_events(events(start("smoke-0"), AudioEvent(b"abcd"), complete("smoke-0", 99)), ["smoke-0"])


async def test_smoke_test_through_the_bidirectional_api(server: RunningServer, certs: Certs) -> None:
    async with asyncio.timeout(60), sagemaker(f"ws://127.0.0.1:{server.port}", certs) as (transport, app):
        result = await run_smoke(transport)
    assert [u.id for u in result.utterances] == ["smoke-0", "smoke-1"]
    assert all(u.audio_bytes == u.reported_bytes and u.audio_bytes > 0 for u in result.utterances)
    assert 0 < result.first_audio_s < result.total_s
    assert "time to first audio" in result.summary()
    [stream] = app.streams
    assert stream.forwarded_frames == 3  # two sentences and the close message


async def test_smoke_test_fails_on_a_sentence_without_audio(certs: Certs) -> None:
    async def reply(ws: ServerConnection, frame: bytes | str) -> None:
        message = json.loads(frame)
        if message["type"] == "synthesize":
            await ws.send(json.dumps({"type": "synthesis_start", "id": message["id"]}))
            await ws.send(json.dumps({"type": "synthesis_complete", "id": message["id"], "bytes": 0}))
        elif message["type"] == "close":
            await ws.close(1000)

    container = ScriptedContainer(reply)
    async with asyncio.timeout(30), scripted(container) as url, sagemaker(url, certs) as (transport, _):
        with pytest.raises(SmokeFailure, match="no audio for smoke-0; no audio for smoke-1"):
            await run_smoke(transport)


async def test_smoke_test_retries_an_endpoint_that_cannot_open_a_stream(certs: Certs) -> None:
    async with scripted(ScriptedContainer(lambda ws, frame: asyncio.sleep(0))) as url:
        pass  # closed again: the stand-in cannot reach its container (ModelError)
    lines: list[str] = []
    async with asyncio.timeout(30), sagemaker(url, certs) as (transport, _):
        with pytest.raises(SmokeFailure) as caught:
            await smoke_endpoint(
                "kokoro-tts", REGION, endpoint_uri=transport.endpoint_uri, attempts=2, retry_delay_s=0, log=lines.append
            )
    assert caught.value.retryable
    assert "tts_unavailable [ModelError]" in str(caught.value)
    assert len(lines) == 1 and lines[0].startswith("  attempt 1/2 failed")


async def test_the_smoke_test_signs_with_what_boto3_finds(tmp_path: Path) -> None:
    """boto3's chain (SSO, assumed roles, container, instance), not only what the SDK's own chain knows."""
    session = boto3.Session(aws_access_key_id="AKIDBOTO3", aws_secret_access_key="secret", aws_session_token="token")
    identity = await Boto3CredentialsResolver(session).get_identity(properties={})
    assert (identity.access_key_id, identity.secret_access_key, identity.session_token) == (
        "AKIDBOTO3",
        "secret",
        "token",
    )

    class NoCredentials:
        def get_credentials(self) -> None:
            return None

    with pytest.raises(SmithyIdentityError, match="boto3 found no AWS credentials"):
        await Boto3CredentialsResolver(NoCredentials()).get_identity(properties={})
