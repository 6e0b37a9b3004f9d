"""The local transports (WebSocket session, HTTP batch) against the real server, plus the SageMaker batch one.

A stand-in WebSocket server also sends audio frames that begin with "{" and even parse as JSON: the frame's own
type decides, so they stay audio all the way out of the pipeline.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError, EventStreamError
from kokoro_client.http_batch import HTTPBatchTTS, error_from_response
from kokoro_client.local_ws import LocalWSTransport, ws_url
from kokoro_client.sagemaker_batch import SageMakerBatchTTS
from kokoro_client.session import (
    AudioEvent,
    ControlEvent,
    SessionOptions,
    TTSEvent,
    TTSTransportError,
    classify_chunk,
)
from support.agent_fixtures import FakeSource
from support.inproc_server import RunningServer
from voice_agent.pipeline import PipelineOptions, run_bidi
from websockets.asyncio.server import ServerConnection, serve

from scripts.servers import free_port
from scripts.speech import rms

# 16-bit PCM whose first sample is 0x227b: its first byte is "{". The second one is valid JSON as a whole.
PCM_LEADING_BRACE = np.array([0x227B, -1200, 3000, -5], dtype="<i2").tobytes()
AUDIO_THAT_IS_JSON = b'{"type":"synthesis_complete","id":"0"}'  # 38 bytes: 19 samples


def test_classify_chunk_uses_the_frame_type_and_never_guesses_pcm_is_json() -> None:
    assert PCM_LEADING_BRACE[0] == 0x7B
    assert classify_chunk(PCM_LEADING_BRACE, is_text=False) == AudioEvent(PCM_LEADING_BRACE)
    assert classify_chunk(PCM_LEADING_BRACE) == AudioEvent(PCM_LEADING_BRACE)  # no frame type: not JSON → audio
    assert classify_chunk(AUDIO_THAT_IS_JSON, is_text=False) == AudioEvent(AUDIO_THAT_IS_JSON)
    assert classify_chunk(b'{"type":"synthesis_start","id":"u1"}', is_text=True) == ControlEvent(
        {"type": "synthesis_start", "id": "u1"}
    )
    assert classify_chunk(b"{" + b"\x00" * 10) == AudioEvent(b"{" + b"\x00" * 10)
    with pytest.raises(ValueError):
        classify_chunk(b"not json", is_text=True)


def test_ws_url_accepts_base_urls_and_full_urls() -> None:
    assert ws_url("http://h:1") == "ws://h:1/invocations-bidirectional-stream"
    assert ws_url("https://h/") == "wss://h/invocations-bidirectional-stream"
    assert ws_url("ws://h:1/invocations-bidirectional-stream") == "ws://h:1/invocations-bidirectional-stream"


async def _drain(events: AsyncIterator[TTSEvent]) -> list[TTSEvent]:
    async with asyncio.timeout(120):
        return [event async for event in events]


async def test_local_ws_session_speaks_sentences_in_order(server: RunningServer) -> None:
    transport = LocalWSTransport(server.base_url)
    session = await transport.open_session(SessionOptions(voice="af_heart", speed=1.1))
    try:
        await session.send_text("Good morning.", "0")
        await session.send_text("How are you?", "1")
        await session.finish()
        events = await _drain(session.events())
    finally:
        await session.aclose()
    controls = [(e.type, e.message.get("id")) for e in events if isinstance(e, ControlEvent)]
    assert controls == [
        ("synthesis_start", "0"),
        ("synthesis_complete", "0"),
        ("synthesis_start", "1"),
        ("synthesis_complete", "1"),
    ]
    pcm = np.frombuffer(b"".join(e.data for e in events if isinstance(e, AudioEvent)), dtype="<i2")
    assert rms(pcm) > 300


async def test_local_ws_server_errors_arrive_as_control_events(server: RunningServer) -> None:
    session = await LocalWSTransport(server.base_url).open_session(SessionOptions(voice="zz_nobody"))
    try:
        await session.send_text("Hello.", "0")
        async with asyncio.timeout(30):
            first = await anext(aiter(session.events()))
    finally:
        await session.aclose()
    assert isinstance(first, ControlEvent) and first.type == "error" and first.message["code"] == "unknown_voice"


async def test_local_ws_with_the_server_down_is_tts_unavailable() -> None:
    with pytest.raises(TTSTransportError) as caught:
        await LocalWSTransport(f"http://127.0.0.1:{free_port()}", open_timeout_s=2).open_session(SessionOptions())
    assert caught.value.code == "tts_unavailable"


async def test_http_batch_streams_the_whole_reply(server: RunningServer) -> None:
    batch = HTTPBatchTTS(server.base_url)
    async with asyncio.timeout(120):
        audio = b"".join([chunk async for chunk in batch.synthesize("One. Two.", SessionOptions())])
    assert len(audio) % 2 == 0 and rms(np.frombuffer(audio, dtype="<i2")) > 300


async def test_http_batch_refusal_keeps_the_servers_code(server: RunningServer) -> None:
    with pytest.raises(TTSTransportError) as caught:
        async for _ in HTTPBatchTTS(server.base_url).synthesize("   ", SessionOptions()):
            pass
    assert (caught.value.code, caught.value.tts_code) == ("tts_error", "empty_text")


async def test_http_batch_with_the_server_down_is_tts_unavailable() -> None:
    with pytest.raises(TTSTransportError) as caught:
        async for _ in HTTPBatchTTS(f"http://127.0.0.1:{free_port()}", connect_timeout_s=2).synthesize(
            "Hi.", SessionOptions()
        ):
            pass
    assert caught.value.code == "tts_unavailable"


async def test_audio_frames_starting_with_a_brace_stay_audio_through_the_pipeline() -> None:
    """A stand-in server sends, for one sentence, a frame of PCM beginning with 0x7b and a frame that is JSON."""

    async def handler(ws: ServerConnection) -> None:
        async for raw in ws:
            message = json.loads(raw)
            if message.get("type") == "flush":  # the agent appends the reply's tokens, then ends it
                start = {"type": "synthesis_start", "id": message["id"], "format": "pcm", "sample_rate": 24000}
                await ws.send(json.dumps(start))
                await ws.send(PCM_LEADING_BRACE)  # bytes → a binary frame
                await ws.send(AUDIO_THAT_IS_JSON)
                await ws.send(json.dumps({"type": "synthesis_complete", "id": message["id"], "audio_ms": 1.0}))
            elif message.get("type") == "close":
                await ws.close()
                return

    async with serve(handler, "127.0.0.1", 0) as stand_in:
        port = stand_in.sockets[0].getsockname()[1]
        transport = LocalWSTransport(f"http://127.0.0.1:{port}")
        source = FakeSource(["Hi", " there", "."])
        events = [e async for e in run_bidi(source, transport, model_name="fake", options=PipelineOptions())]
    assert events[-1]["type"] == "agent_end", events[-1]
    audio = [base64.b64decode(e["audio"]) for e in events if e["type"] == "audio_chunk"]
    assert audio == [PCM_LEADING_BRACE, AUDIO_THAT_IS_JSON]
    assert [e["index"] for e in events if e["type"] == "sentence_complete"] == [0]


# --- SageMaker batch: moto 5.2 has no InvokeEndpointWithResponseStream, so a fake boto3 client stands in ---------


class _FakeEventStream:
    def __init__(self, events: list[Any]) -> None:
        self.events, self.closed = events, False

    def __iter__(self) -> Any:
        for event in self.events:
            if isinstance(event, Exception):
                raise event
            yield event

    def close(self) -> None:
        self.closed = True


class _FakeSageMakerRuntime:
    def __init__(self, events: list[Any] | None = None, error: Exception | None = None) -> None:
        self.stream = _FakeEventStream(events or [])
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def invoke_endpoint_with_response_stream(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        return {"Body": self.stream}


async def test_sagemaker_batch_yields_payload_parts_and_sends_the_protocols_body() -> None:
    client = _FakeSageMakerRuntime([{"PayloadPart": {"Bytes": b"\x7b\x00"}}, {"PayloadPart": {"Bytes": b"\x01\x02"}}])
    batch = SageMakerBatchTTS("kokoro", client=client)
    parts = [p async for p in batch.synthesize("Hello.", SessionOptions(voice="af_bella"))]
    assert parts == [b"\x7b\x00", b"\x01\x02"]
    call = client.calls[0]
    assert call["EndpointName"] == "kokoro" and call["ContentType"] == "application/json"
    assert json.loads(call["Body"]) == {"text": "Hello.", "format": "pcm", "voice": "af_bella"}


async def test_sagemaker_batch_errors_have_codes() -> None:
    message = 'Received client error (400): {"error": {"code": "empty_text"}}'
    response: Any = {
        "Error": {"Code": "ModelError", "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 424},
    }
    refused = ClientError(response, "InvokeEndpointWithResponseStream")
    with pytest.raises(TTSTransportError) as caught:
        async for _ in SageMakerBatchTTS("e", client=_FakeSageMakerRuntime(error=refused)).synthesize(
            " ", SessionOptions()
        ):
            pass
    assert (caught.value.code, caught.value.tts_code) == ("tts_error", "empty_text")

    busy_message = 'Received server error (503): {"error": {"code": "server_busy", "message": "retry in 2 s."}}'
    busy: Any = {"Error": {"Code": "ModelError", "Message": busy_message}, "ResponseMetadata": {"HTTPStatusCode": 424}}
    with pytest.raises(TTSTransportError) as caught:
        client = _FakeSageMakerRuntime(error=ClientError(busy, "InvokeEndpointWithResponseStream"))
        async for _ in SageMakerBatchTTS("e", client=client).synthesize("Hi.", SessionOptions()):
            pass
    assert (caught.value.code, caught.value.tts_code) == ("tts_busy", "server_busy")

    broken = EventStreamError({"Error": {"Code": "ModelStreamError", "Message": "gone"}}, "InvokeEndpoint")
    client = _FakeSageMakerRuntime([{"PayloadPart": {"Bytes": b"\x00\x00"}}, broken])
    with pytest.raises(TTSTransportError) as caught:
        async for _ in SageMakerBatchTTS("e", client=client).synthesize("Hi.", SessionOptions()):
            pass
    assert caught.value.code == "tts_session_dropped"


async def test_sagemaker_batch_closing_early_closes_the_stream() -> None:
    client = _FakeSageMakerRuntime([{"PayloadPart": {"Bytes": bytes([n, 0])}} for n in range(100)])
    stream = SageMakerBatchTTS("e", client=client).synthesize("Hi.", SessionOptions())
    assert await anext(stream) == b"\x00\x00"
    await stream.aclose()  # type: ignore[attr-defined]
    assert client.stream.closed


def test_a_busy_refusal_is_tts_busy_with_the_servers_retry_after() -> None:
    body = b'{"error": {"code": "server_busy", "message": "The server is 9.0 s behind; retry in 5 s."}}'
    error = error_from_response(503, body, "5")
    assert (error.code, error.tts_code, error.retry_after_s) == ("tts_busy", "server_busy", 5.0)
    assert error_from_response(503, b'{"error": {"code": "not_ready", "message": "loading"}}').code == (
        "tts_unavailable"
    )


async def test_local_ws_refused_at_the_session_cap_is_tts_busy(server: RunningServer) -> None:
    sessions = server.engine.sessions
    ceiling, sessions.ceiling = sessions.ceiling, sessions.count  # the next session is one too many
    try:
        with pytest.raises(TTSTransportError) as caught:  # from the config it sends, or the first read
            async with asyncio.timeout(10):
                session = await LocalWSTransport(server.base_url).open_session(SessionOptions())
                async for _ in session.events():
                    pass
    finally:
        sessions.ceiling = ceiling
    assert (caught.value.code, caught.value.tts_code) == ("tts_busy", "server_busy")
