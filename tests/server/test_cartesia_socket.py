"""Cartesia's socket on our server (sessions/cartesia.py, docs/cartesia.md).

Raw sockets, written to Cartesia's documented messages, check what Pipecat's ``CartesiaTTSService``
(test_pipecat_services.py) does not: two contexts where one is cancelled, timestamps of the words sent, a context
that takes no text after its end, G.711 output, bad input, and the socket reached through SageMaker's stand-in."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from kokoro_client.cartesia import Chunk, Done, ErrorMessage, Timestamps, parse_server_message
from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors
from support.pipecat_pipeline import LONG_REPLY, REPLY, tokens
from support.sagemaker import Certs, json_messages, sagemaker
from websockets.asyncio.client import ClientConnection, connect

RATE = 16_000
VOICE = "af_heart"
MULAW = {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}


# --- raw sockets, written to Cartesia's messages ----------------------------------------------------------------


def request(context_id: str, transcript: str, more: bool, **extra: Any) -> str:
    return json.dumps(
        {
            "model_id": "sonic-3",
            "transcript": transcript,
            "continue": more,
            "context_id": context_id,
            "voice": {"mode": "id", "id": VOICE},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24_000},
            "add_timestamps": True,
            **extra,
        }
    )


async def messages_until_done(ws: ClientConnection, context_id: str, limit_s: float = 120.0) -> list[Any]:
    out: list[Any] = []
    async with asyncio.timeout(limit_s):
        while not (out and isinstance(out[-1], Done) and out[-1].context_id == context_id):
            out.append(parse_server_message(await ws.recv()))
    return out


def audio_of(messages: list[Any], context_id: str) -> np.ndarray:
    data = b"".join(m.audio for m in messages if isinstance(m, Chunk) and m.context_id == context_id)
    return np.frombuffer(data, dtype="<i2")


@pytest.mark.slow
async def test_a_cancel_stops_one_context_and_the_other_goes_on(server: RunningServer) -> None:
    url = f"ws://127.0.0.1:{server.port}/tts/websocket?cartesia_version=2025-04-16&api_key=ignored"
    async with connect(url) as ws:
        await ws.send(request("first", LONG_REPLY + " ", more=True))
        while not isinstance(parse_server_message(await ws.recv()), Chunk):
            pass
        await ws.send(json.dumps({"context_id": "first", "cancel": True}))
        for token in tokens(REPLY):
            await ws.send(request("second", token, more=True))
        await ws.send(request("second", "", more=False))
        await ws.send(request("second", "Again.", more=False))  # an ended context takes no more text
        messages = await messages_until_done(ws, "second")
    assert not [m for m in messages if isinstance(m, Done) and m.context_id == "first"]  # a cancel has no done
    assert audio_of(messages, "first").size / 24_000 < 4.0
    heard_second = WhisperListener.shared().transcribe(audio_of(messages, "second"), rate=24_000)
    errors, words = word_errors(REPLY, heard_second)
    assert errors / words <= 0.05, heard_second
    stamps = [m for m in messages if isinstance(m, Timestamps) and m.context_id == "second"]
    assert [w for m in stamps for w in m.words] == REPLY.split()
    starts = [s for m in stamps for s in m.start]
    assert starts == sorted(starts) and starts[-1] < audio_of(messages, "second").size / 24_000
    [refused] = [m for m in messages if isinstance(m, ErrorMessage)]
    assert refused.context_id == "second" and refused.code == "invalid_id"


async def test_a_bad_request_gets_an_error_naming_its_context_and_the_socket_goes_on(server: RunningServer) -> None:
    async with connect(f"ws://127.0.0.1:{server.port}/tts/websocket") as ws:
        for bad, code in (
            ("not json", "invalid_json"),
            (json.dumps({"context_id": "a", "transcript": 3}), "invalid_text"),
            (json.dumps({"context_id": "a"}), "missing_text"),
            (request("a", "Hi.", False, voice={"mode": "embedding", "embedding": [0.1]}), "invalid_voice"),
            (request("a", "Hi.", False, voice={"mode": "id", "id": "a0e99841-438c-4a64"}), "invalid_voice"),
            (request("a", "Hi.", False, output_format={"container": "mp3"}), "unsupported_format"),
            (
                request("a", "Hi.", False, output_format={"container": "raw", "encoding": "pcm_f32le"}),
                "unsupported_format",
            ),
            (request("a", "Hi.", False, output_format={**MULAW, "sample_rate": 24000}), "unsupported_sample_rate"),
        ):
            await ws.send(bad)
            error = parse_server_message(await ws.recv())
            assert isinstance(error, ErrorMessage) and error.code == code, (bad, error)
        await ws.send(request("a", "Still here.", more=False, output_format=MULAW))
        messages = await messages_until_done(ws, "a")
    assert audio_of(messages, "a").size > 0


@pytest.mark.slow
@pytest.mark.parametrize(("path", "query"), [("tts/websocket", None), (None, "protocol=cartesia")])
async def test_the_socket_is_reached_through_sagemakers_bidirectional_stream(
    server: RunningServer, certs: Certs, path: str | None, query: str | None
) -> None:
    """SageMaker sends the container's path as ModelInvocationPath (the stand-in opens the socket there), or only
    the query reaches the container: it selects the socket on the session path."""
    async with asyncio.timeout(120), sagemaker(f"ws://127.0.0.1:{server.port}", certs) as (transport, _):
        stream = await transport.open_stream(path, query)
        for token in tokens(REPLY):
            await stream.send_json(json.loads(request("turn", token, more=True)))
        await stream.send_json(json.loads(request("turn", "", more=False)))
        messages = await json_messages(stream, parse_server_message, Done)
    heard_reply = WhisperListener.shared().transcribe(audio_of(messages, "turn"), rate=24_000)
    errors, words = word_errors(REPLY, heard_reply)
    assert errors / words <= 0.05, heard_reply
