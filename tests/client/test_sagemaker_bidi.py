"""SageMaker bidirectional streaming, end to end on loopback.

The real AWS SDK client (AsyncSageMakerRuntimeHTTP2Client: serializing, SigV4 request and event signing, event
stream framing) with its own CRT HTTP client (AWSCRTHTTPClient: HTTP/2 over TLS, ALPN h2), driven by
SageMakerBidiTransport, talks to the local stand-in, which relays to the real TTS server (the ``server`` fixture) or
to a scripted container. The CRT client trusts the stand-in's throwaway certificate through ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from io import BytesIO

import httpx
import pytest
from aws_sdk_sagemaker_runtime_http2.models import ResponsePayloadPart
from kokoro_client.sagemaker_bidi import (
    SageMakerBidiSession,
    SageMakerBidiTransport,
    event_from_payload_part,
)
from kokoro_client.session import (
    AudioEvent,
    ControlEvent,
    SessionOptions,
    TTSEvent,
    TTSTransportError,
)
from smithy_aws_event_stream.events import Event
from support.inproc_server import RunningServer
from support.sagemaker import CREDENTIALS, SENTENCES, Certs, ScriptedContainer, sagemaker, scripted
from support.ws_client import Transcript
from websockets.asyncio.server import ServerConnection


def transcript_of(events: list[TTSEvent]) -> Transcript:
    transcript = Transcript()
    for event in events:
        if isinstance(event, AudioEvent):
            transcript.frames.append(("audio", event.data))
        else:
            transcript.frames.append(("json", event.message))
    return transcript


async def until(events: AsyncIterator[TTSEvent], seen: list[TTSEvent], kind: str) -> ControlEvent:
    """Collect events into ``seen`` up to and including the first control event of type ``kind``."""
    async for event in events:
        seen.append(event)
        if isinstance(event, ControlEvent) and event.type == kind:
            return event
    raise AssertionError(f"the stream ended before a {kind} event")


async def test_three_sentences_stream_through_one_sagemaker_stream(server: RunningServer, certs: Certs) -> None:
    async with asyncio.timeout(60), sagemaker(f"ws://127.0.0.1:{server.port}", certs) as (transport, app):
        session = await transport.open_session(SessionOptions())
        events = aiter(session.events())
        seen: list[TTSEvent] = []
        # Full duplex: the first sentence's audio comes back while the request stream is still open.
        await session.send_text(SENTENCES[0], "s0")
        await until(events, seen, "synthesis_start")
        for i, text in enumerate(SENTENCES[1:], start=1):
            await session.send_text(text, f"s{i}")
        await session.finish()
        seen += [event async for event in events]

    transcript = transcript_of(seen)
    control = [(f["type"], f["id"]) for f in transcript.json_frames()]
    assert control == [(kind, f"s{i}") for i in range(3) for kind in ("synthesis_start", "synthesis_complete")]
    for utterance in transcript.utterances().values():
        assert utterance.complete is not None
        assert utterance.complete["bytes"] == len(utterance.audio) > 0
        assert abs(utterance.pcm().astype(int)).max() > 1000, "silent audio"
    [stream] = app.streams
    assert stream.http_version == "2"
    assert stream.authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDSTANDIN/")
    assert "/us-east-1/sagemaker/aws4_request" in stream.authorization
    # Three sentences and the close message, each a signed event; then the signed empty end-of-stream envelope.
    assert (stream.forwarded_frames, stream.signed_envelopes, stream.unsigned_events) == (4, 5, 0)


async def test_a_reply_appended_token_by_token_streams_through_one_sagemaker_stream(
    server: RunningServer, certs: Certs
) -> None:
    tokens = ["Good", " mor", "ning", ".", " The", " total", " is", " $", "4", "2", ".", "50", "."]
    async with asyncio.timeout(60), sagemaker(f"ws://127.0.0.1:{server.port}", certs) as (transport, app):
        session = await transport.open_session(SessionOptions())
        events = aiter(session.events())
        seen: list[TTSEvent] = []
        for token in tokens[:5]:  # " The" decides that the first sentence has ended
            await session.append_text(token, "r")
        await until(events, seen, "synthesis_start")  # heard before the reply is complete
        for token in tokens[5:]:
            await session.append_text(token, "r")
        await session.flush("r")
        await session.finish()
        seen += [event async for event in events]
    control = [(f["type"], f["id"]) for f in transcript_of(seen).json_frames()]
    assert control == [("synthesis_start", "r"), ("synthesis_complete", "r")]
    utterance = transcript_of(seen).utterances()["r"]
    assert utterance.complete is not None and utterance.complete["bytes"] == len(utterance.audio) > 0
    [stream] = app.streams
    assert stream.forwarded_frames == len(tokens) + 2  # every append, the flush and the close


async def test_a_malformed_part_is_an_error_event_and_the_stream_goes_on(server: RunningServer, certs: Certs) -> None:
    async with asyncio.timeout(60), sagemaker(f"ws://127.0.0.1:{server.port}", certs) as (transport, _):
        session = await transport.open_session(SessionOptions())
        assert isinstance(session, SageMakerBidiSession)
        await session.send_raw(b'{"type": "synthesize", "text": "cut sh')
        await session.send_text("Still here.", "after")
        await session.finish()
        events = [event async for event in session.events()]

    control = [e.message for e in events if isinstance(e, ControlEvent)]
    assert control[0]["type"] == "error" and control[0]["code"] == "invalid_json"
    assert [(m["type"], m["id"]) for m in control[1:]] == [
        ("synthesis_start", "after"),
        ("synthesis_complete", "after"),
    ]
    assert sum(len(e.data) for e in events if isinstance(e, AudioEvent)) == control[-1]["bytes"] > 0


async def test_data_type_not_content_tells_audio_from_control(certs: Certs) -> None:
    """Binary frames are audio even when they parse as JSON or start with 0x7b; text frames are control."""
    pcm = b"{\x00\x13\xff" * 50  # 16-bit PCM whose first byte is 0x7b
    looks_like_json = json.dumps({"type": "synthesis_complete", "id": "not-control"}).encode()

    async def reply(ws: ServerConnection, frame: bytes | str) -> None:
        message = json.loads(frame)
        if message["type"] == "synthesize":
            await ws.send(json.dumps({"type": "synthesis_start", "id": message["id"]}))  # text frame
            await ws.send(pcm)  # binary frames
            await ws.send(looks_like_json)
            await ws.send(json.dumps({"type": "synthesis_complete", "id": message["id"]}))
        elif message["type"] == "close":
            await ws.close(1000)

    container = ScriptedContainer(reply)
    async with asyncio.timeout(30), scripted(container) as url, sagemaker(url, certs) as (transport, _):
        session = await transport.open_session(SessionOptions(voice="af_bella", format="wav"))
        await session.send_text("Hi.", "u1")
        await session.finish()
        events = [event async for event in session.events()]

    assert events == [
        ControlEvent({"type": "synthesis_start", "id": "u1"}),
        AudioEvent(pcm),
        AudioEvent(looks_like_json),
        ControlEvent({"type": "synthesis_complete", "id": "u1"}),
    ]
    # Every payload part reached the container as a binary frame: the config first (options differ from the
    # defaults), then the sentence, then close.
    assert all(isinstance(frame, bytes) for frame in container.received)
    assert [json.loads(frame) for frame in container.received] == [
        {"type": "config", "voice": "af_bella", "format": "wav"},
        {"type": "synthesize", "text": "Hi.", "id": "u1"},
        {"type": "close"},
    ]


def test_without_a_data_type_only_a_whole_json_object_is_control() -> None:
    assert event_from_payload_part(ResponsePayloadPart(bytes_=b'{"type":"cancelled","id":"a"}')) == ControlEvent(
        {"type": "cancelled", "id": "a"}
    )
    assert event_from_payload_part(ResponsePayloadPart(bytes_=b"{\x00\x01\x02")) == AudioEvent(b"{\x00\x01\x02")
    assert event_from_payload_part(ResponsePayloadPart(bytes_=b"{}", data_type="BINARY")) == AudioEvent(b"{}")
    with pytest.raises(TTSTransportError) as caught:
        event_from_payload_part(ResponsePayloadPart(bytes_=b"\x00\x01", data_type="UTF8"))
    assert (caught.value.code, caught.value.tts_code) == ("tts_session_dropped", "invalid_control_frame")


async def test_cancel_reaches_the_container(certs: Certs) -> None:
    async def reply(ws: ServerConnection, frame: bytes | str) -> None:
        message = json.loads(frame)
        if message["type"] == "cancel":
            await ws.send(json.dumps({"type": "cancelled", "id": "u1"}))
            await ws.close(1000)

    container = ScriptedContainer(reply)
    async with asyncio.timeout(30), scripted(container) as url, sagemaker(url, certs) as (transport, _):
        session = await transport.open_session(SessionOptions())
        await session.send_text("A long answer.", "u1")
        await session.cancel()
        events = [event async for event in session.events()]
    assert events == [ControlEvent({"type": "cancelled", "id": "u1"})]
    assert json.loads(container.received[-1]) == {"type": "cancel"}


async def test_the_container_failing_mid_stream_drops_the_session(certs: Certs) -> None:
    async def reply(ws: ServerConnection, frame: bytes | str) -> None:
        await ws.send(json.dumps({"type": "synthesis_start", "id": "u1"}))
        await ws.close(1011, "engine crashed")

    async with asyncio.timeout(30), scripted(ScriptedContainer(reply)) as url, sagemaker(url, certs) as (transport, _):
        session = await transport.open_session(SessionOptions())
        await session.send_text("Hello.", "u1")
        seen: list[TTSEvent] = []
        with pytest.raises(TTSTransportError) as caught:
            async for event in session.events():
                seen.append(event)
    assert seen == [ControlEvent({"type": "synthesis_start", "id": "u1"})]
    assert caught.value.code == "tts_session_dropped"
    assert caught.value.tts_code == "ModelStreamError"
    assert "1011" in caught.value.message and "engine crashed" in caught.value.message


async def test_an_unreachable_container_makes_the_endpoint_unavailable(certs: Certs) -> None:
    async with scripted(ScriptedContainer(lambda ws, frame: asyncio.sleep(0))) as url:
        pass  # closed again: nothing listens there now
    async with asyncio.timeout(30), sagemaker(url, certs) as (transport, _):
        session = await transport.open_session(SessionOptions())
        with pytest.raises(TTSTransportError) as caught:
            [event async for event in session.events()]
        assert (caught.value.code, caught.value.tts_code) == ("tts_unavailable", "ModelError")
        with pytest.raises(TTSTransportError):
            await session.send_text("Anyone there?", "u1")


async def test_an_endpoint_nobody_listens_on_is_unavailable(certs: Certs) -> None:
    with socket.socket() as s:  # a port that was free a moment ago, and nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    transport = SageMakerBidiTransport(
        "kokoro-tts", "us-east-1", endpoint_uri=f"https://127.0.0.1:{port}", credentials=CREDENTIALS
    )
    async with asyncio.timeout(30):
        session = await transport.open_session(SessionOptions())
        with pytest.raises(TTSTransportError) as caught:
            [event async for event in session.events()]
        await transport.aclose()
    assert caught.value.code == "tts_unavailable"
    assert "AWS_IO_SOCKET_CONNECTION_REFUSED" in caught.value.message


class CuttableLink:
    """A TCP relay in front of the stand-in whose connections a test can cut, as a network failure would."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]
        await asyncio.gather(self.pipe(reader, up_writer), self.pipe(up_reader, writer), return_exceptions=True)

    @staticmethod
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()


async def test_the_connection_dropping_mid_stream_drops_the_session(certs: Certs) -> None:
    async def reply(ws: ServerConnection, frame: bytes | str) -> None:
        await ws.send(json.dumps({"type": "synthesis_start", "id": "u1"}))  # and then nothing

    async with asyncio.timeout(30), scripted(ScriptedContainer(reply)) as url, sagemaker(url, certs) as (direct, _):
        link = CuttableLink(int(direct.endpoint_uri.rsplit(":", 1)[1]))
        async with await asyncio.start_server(link.handle, "127.0.0.1", 0) as relay:
            transport = SageMakerBidiTransport(
                "kokoro-tts",
                "us-east-1",
                endpoint_uri=f"https://127.0.0.1:{relay.sockets[0].getsockname()[1]}",
                credentials=CREDENTIALS,
            )
            session = await transport.open_session(SessionOptions())
            await session.send_text("Hello.", "u1")
            events = aiter(session.events())
            assert await anext(events) == ControlEvent({"type": "synthesis_start", "id": "u1"})
            link.cut()
            with pytest.raises(TTSTransportError) as caught:
                await anext(events)
            with pytest.raises(TTSTransportError):
                await session.send_text("Still there?", "u2")
            await transport.aclose()
    assert caught.value.code == "tts_session_dropped"
    assert "AWS_ERROR_HTTP_CONNECTION_CLOSED" in caught.value.message


async def test_the_stand_in_refuses_an_unsigned_request(certs: Certs) -> None:
    async with asyncio.timeout(30), sagemaker("ws://127.0.0.1:9", certs) as (transport, _):
        async with httpx.AsyncClient(http2=True, verify=certs.client_context()) as client:
            response = await client.post(
                f"{transport.endpoint_uri}/endpoints/kokoro-tts/invocations-bidirectional-stream",
                headers={"content-type": "application/vnd.amazon.eventstream"},
            )
    assert response.status_code == 403
    assert response.headers["x-amzn-errortype"] == "MissingAuthenticationTokenException"


async def test_an_unknown_endpoint_is_refused(certs: Certs) -> None:
    async with asyncio.timeout(30), sagemaker("ws://127.0.0.1:9", certs) as (transport, _):
        other = SageMakerBidiTransport(
            "no-such-endpoint",
            "us-east-1",
            endpoint_uri=transport.endpoint_uri,
            credentials=CREDENTIALS,
        )
        session = await other.open_session(SessionOptions())
        with pytest.raises(TTSTransportError) as caught:
            [event async for event in session.events()]
        await other.aclose()
    assert (caught.value.code, caught.value.tts_code) == ("tts_error", "InputValidationError")


async def test_large_parts_flow_both_ways_past_the_http2_windows(certs: Certs) -> None:
    """A 200 kB part and 1 MiB replies: each far past HTTP/2's initial 64 KiB windows, so flow control must work."""
    audio = bytes(range(256)) * 4096  # 1 MiB per frame, three frames

    async def reply(ws: ServerConnection, frame: bytes | str) -> None:
        if json.loads(frame)["type"] == "close":
            return await ws.close(1000)
        for _ in range(3):
            await ws.send(audio)

    container = ScriptedContainer(reply)
    text = "word " * 40_000  # 200 kB in one payload part
    async with asyncio.timeout(30), scripted(container) as url, sagemaker(url, certs) as (transport, _):
        session = await transport.open_session(SessionOptions())
        await session.send_text(text, "big")
        events = aiter(session.events())
        first = await anext(events)
        await session.finish()
        rest = [event async for event in events]
    assert [first, *rest] == [AudioEvent(audio)] * 3
    assert json.loads(container.received[0])["text"] == text


async def test_the_stand_in_answers_a_malformed_event_stream_with_an_error_event(certs: Certs) -> None:
    async def reply(ws: ServerConnection, frame: bytes | str) -> None:
        pass

    garbage = b"\x00\x00\x00\x20" + b"\x00" * 28  # a prelude whose CRC is wrong
    async with (
        asyncio.timeout(30),
        scripted(ScriptedContainer(reply)) as url,
        sagemaker(url, certs) as (transport, _),
        httpx.AsyncClient(http2=True, verify=certs.client_context()) as client,
    ):
        response = await client.post(
            f"{transport.endpoint_uri}/endpoints/kokoro-tts/invocations-bidirectional-stream",
            headers={"content-type": "application/vnd.amazon.eventstream", "authorization": "AWS4-HMAC-SHA256 x"},
            content=garbage,
        )
    assert response.status_code == 200
    event = Event.decode(BytesIO(response.content))
    assert event is not None
    assert event.message.headers[":message-type"] == "error"
    assert event.message.headers[":error-code"] == "InvalidEventStream"
