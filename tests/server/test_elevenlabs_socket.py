"""ElevenLabs' sockets on our server (sessions/elevenlabs.py, docs/elevenlabs.md).

Raw sockets, written to ElevenLabs' documented messages, check what Pipecat's ``ElevenLabsTTSService``
(test_pipecat_services.py) does not use: ``stream-input``'s end of input, two contexts where one is barged in on,
alignment that indexes the text sent and adds up to the audio, the socket reached through SageMaker's stand-in, and
bad input."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
import pytest
from kokoro_client.elevenlabs import AudioOutput, ErrorOutput, FinalOutput, parse_server_message
from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors
from support.pipecat_pipeline import LONG_REPLY, REPLY, tokens
from support.sagemaker import Certs, json_messages, sagemaker
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

RATE = 16_000
VOICE = "af_heart"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "query"),
    [
        (f"v1/text-to-speech/{VOICE}/multi-stream-input", "model_id=eleven_flash_v2_5&output_format=pcm_24000"),
        (None, f"protocol=elevenlabs&voice_id={VOICE}&output_format=pcm_24000"),  # the session path, by its query
    ],
    ids=["its path", "the query"],
)
async def test_the_socket_is_reached_through_sagemakers_bidirectional_stream(
    server: RunningServer, certs: Certs, path: str | None, query: str
) -> None:
    """SageMaker sends the container's path and query as ModelInvocationPath and ModelQueryString: the stand-in
    opens the socket there and relays each message both ways. Where only the query reaches the container, it
    selects the socket on the session path."""
    async with asyncio.timeout(120), sagemaker(f"ws://127.0.0.1:{server.port}", certs) as (transport, app):
        stream = await transport.open_stream(path, query)
        await stream.send_json({"text": " ", "context_id": "turn"})
        for token in tokens(REPLY):
            await stream.send_json({"text": token, "context_id": "turn"})
        await stream.send_json({"context_id": "turn", "flush": True})
        await stream.send_json({"context_id": "turn", "close_context": True})
        messages = await json_messages(stream, parse_server_message, FinalOutput)
    heard_reply = WhisperListener.shared().transcribe(audio_of(messages, "turn"), rate=24_000)
    errors, words = word_errors(REPLY, heard_reply)
    assert errors / words <= 0.05, heard_reply
    assert aligned_text(messages, "turn").strip() == REPLY.rstrip(".")
    [record] = app.streams
    assert record.forwarded_frames == len(tokens(REPLY)) + 3


# --- raw sockets, written to ElevenLabs' messages ---------------------------------------------------------------


def socket_url(server: RunningServer, path: str = "multi-stream-input", query: str = "output_format=pcm_24000") -> str:
    return f"ws://127.0.0.1:{server.port}/v1/text-to-speech/{VOICE}/{path}?{query}"


async def messages_until_final(ws: ClientConnection, finals: int, limit_s: float = 120.0) -> list[Any]:
    """Every message until ``finals`` final messages have come."""
    out: list[Any] = []
    async with asyncio.timeout(limit_s):
        while sum(isinstance(m, FinalOutput) for m in out) < finals:
            out.append(parse_server_message(await ws.recv()))
    return out


def aligned_text(messages: list[Any], context_id: str | None) -> str:
    return "".join(
        "".join(m.alignment.chars)
        for m in messages
        if isinstance(m, AudioOutput) and m.context_id == context_id and m.alignment is not None
    )


def audio_of(messages: list[Any], context_id: str | None) -> np.ndarray:
    data = b"".join(m.audio for m in messages if isinstance(m, AudioOutput) and m.context_id == context_id)
    return np.frombuffer(data, dtype="<i2")


@pytest.mark.slow
async def test_stream_input_takes_tokens_and_ends_with_an_empty_text(server: RunningServer) -> None:
    async with connect(socket_url(server, "stream-input")) as ws:
        await ws.send(json.dumps({"text": " ", "voice_settings": {"speed": 1.0}, "xi_api_key": "ignored"}))
        for token in tokens(REPLY):
            await ws.send(json.dumps({"text": token, "try_trigger_generation": True}))
        await ws.send(json.dumps({"text": ""}))
        messages = await messages_until_final(ws, 1)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    assert all(m.context_id is None for m in messages)
    pcm = audio_of(messages, None)
    errors, words = word_errors(REPLY, WhisperListener.shared().transcribe(pcm, rate=24_000))
    assert errors / words <= 0.05
    # Every character of the reply is aligned, in order, and the spans add up to the audio sent.
    assert aligned_text(messages, None).strip() == REPLY.rstrip(".")
    spans = [
        m.alignment.char_start_times_ms[-1] + m.alignment.char_durations_ms[-1]
        for m in messages
        if isinstance(m, AudioOutput) and m.alignment is not None
    ]
    assert abs(sum(spans) - 1000 * pcm.size / 24_000) < 700  # a message without a character (silence) adds none


@pytest.mark.slow
async def test_a_barge_in_stops_one_context_and_the_other_goes_on(server: RunningServer) -> None:
    async with connect(socket_url(server)) as ws:
        await ws.send(json.dumps({"text": " ", "context_id": "first"}))
        await ws.send(json.dumps({"text": LONG_REPLY + " ", "context_id": "first"}))  # never flushed
        while not isinstance(parse_server_message(await ws.recv()), AudioOutput):
            pass
        began = time.perf_counter()
        await ws.send(json.dumps({"context_id": "first", "close_context": True}))  # a barge-in
        await ws.send(json.dumps({"text": REPLY + " ", "context_id": "second", "flush": True}))
        await ws.send(json.dumps({"context_id": "second", "close_context": True}))  # flushed: spoken to its end
        messages = await messages_until_final(ws, 2)
    finals = [m.context_id for m in messages if isinstance(m, FinalOutput)]
    assert finals == ["first", "second"]
    first_final = next(i for i, m in enumerate(messages) if isinstance(m, FinalOutput))
    assert all(m.context_id == "first" for m in messages[:first_final])
    assert time.perf_counter() - began < 60
    # The first context stopped within a window or two of its barge-in; the second was spoken whole.
    assert audio_of(messages, "first").size / 24_000 < 4.0
    heard_second = WhisperListener.shared().transcribe(audio_of(messages, "second"), rate=24_000)
    errors, words = word_errors(REPLY, heard_second)
    assert errors / words <= 0.05, heard_second
    assert aligned_text(messages, "second").strip() == REPLY.rstrip(".")


@pytest.mark.parametrize(
    ("path", "query", "code"),
    [
        ("multi-stream-input", "output_format=opus_48000_64", "unsupported_format"),
        ("multi-stream-input", "output_format=pcm_11025", "unsupported_sample_rate"),
    ],
)
async def test_bad_query_parameters_get_an_error_and_close_1008(
    server: RunningServer, path: str, query: str, code: str
) -> None:
    async with connect(socket_url(server, path, query)) as ws:
        error = parse_server_message(await ws.recv())
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert isinstance(error, ErrorOutput) and error.error == code
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


@pytest.mark.parametrize(
    ("voice", "code"), [("21m00Tcm4TlvDq8ikWAM", "invalid_voice"), ("af_nobody", "unknown_voice")]
)  # an ElevenLabs voice id is not a Kokoro voice name
async def test_a_voice_this_server_lacks_gets_an_error_and_close_1008(
    server: RunningServer, voice: str, code: str
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/text-to-speech/{voice}/stream-input"
    async with connect(url) as ws:
        error = parse_server_message(await ws.recv())
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert isinstance(error, ErrorOutput) and error.error == code, error
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_a_bad_message_gets_an_error_and_the_socket_goes_on(server: RunningServer) -> None:
    async with connect(socket_url(server)) as ws:
        for bad, code in (
            ("not json", "invalid_json"),
            (json.dumps({"text": 42, "context_id": "a"}), "invalid_text"),
            (json.dumps({"context_id": "a"}), "missing_text"),
            (json.dumps({"close_context": True}), "invalid_message"),
        ):
            await ws.send(bad)
            error = parse_server_message(await ws.recv())
            assert isinstance(error, ErrorOutput) and error.error == code, (bad, error)
        await ws.send(json.dumps({"text": "Still here. ", "context_id": "a", "flush": True}))
        await ws.send(json.dumps({"close_socket": True}))  # what the open context has is spoken, then the close
        messages = await messages_until_final(ws, 1)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert audio_of(messages, "a").size > 0
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
