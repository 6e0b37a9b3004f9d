"""WS /v1/speak (and the session path with Deepgram's query): each message, bad input, and Clear stopping work,
with a client written to Deepgram's documented wire format (the real Pipecat service: test_pipecat_services.py)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from kokoro_client.deepgram import SPEAK_PATH
from kokoro_tts.sessions.deepgram import DeepgramDialect
from support.inproc_server import RunningServer
from support.ws_client import assert_synthesis_stopped
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

LONG_TEXT = " ".join(
    f"This is sentence number {n} of a long answer that keeps the speaker busy for a while." for n in range(1, 16)
)


def url(server: RunningServer, query: str = "", path: str = SPEAK_PATH) -> str:
    return f"ws://127.0.0.1:{server.port}{path}" + (f"?{query}" if query else "")


async def next_message(ws: ClientConnection, wait_s: float = 120) -> str | bytes:
    return await asyncio.wait_for(ws.recv(), wait_s)


async def until(
    ws: ClientConnection, kind: str, wait_s: float = 120
) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    """Read until a JSON message of ``kind``: (it, audio bytes before it, other JSON messages before it)."""
    audio, others = 0, []
    while True:
        message = await next_message(ws, wait_s)
        if isinstance(message, bytes):
            audio += len(message)
            continue
        value = json.loads(message)
        if value["type"] == kind:
            return value, audio, others
        others.append(value)


async def opened(ws: ClientConnection) -> dict[str, Any]:
    metadata = json.loads(await next_message(ws, 30))
    assert metadata["type"] == "Metadata"
    return metadata


async def test_metadata_at_open_then_tokens_speak_as_sentences_and_flush_answers_after_the_audio(
    server: RunningServer,
) -> None:
    async with connect(url(server, "model=af_heart&encoding=linear16&sample_rate=16000")) as ws:
        metadata = await opened(ws)
        assert set(metadata) == {"type", "request_id", "model_name", "model_version", "model_uuid"}
        assert "af_heart" in metadata["model_name"]
        # An LLM's tokens: the first sentence is complete (and spoken) before any Flush.
        for token in ["Good", " morn", "ing.", " How", " can I", " help"]:
            await ws.send(json.dumps({"type": "Speak", "text": token}))
        first = await next_message(ws)
        assert isinstance(first, bytes) and len(first) % 2 == 0
        await ws.send(json.dumps({"type": "Speak", "text": " you today"}))
        await ws.send(json.dumps({"type": "Flush"}))
        flushed, audio, others = await until(ws, "Flushed")
        assert flushed == {"type": "Flushed", "sequence_id": 0} and not others
        seconds = (len(first) + audio) / 2 / 16_000
        assert 1.5 < seconds < 8, f"{seconds:.2f} s for two short sentences"
        # A Flush with nothing buffered or queued is answered at once, with the next sequence id.
        await ws.send(json.dumps({"type": "Flush"}))
        flushed, audio, _ = await until(ws, "Flushed", 10)
        assert flushed["sequence_id"] == 1 and audio == 0


async def test_mulaw_at_8k_is_one_byte_a_sample(server: RunningServer) -> None:
    async with connect(url(server, "encoding=mulaw&sample_rate=8000")) as ws:
        await opened(ws)
        await ws.send(json.dumps({"type": "Speak", "text": "Please hold the line."}))
        await ws.send(json.dumps({"type": "Flush"}))
        _, audio, _ = await until(ws, "Flushed")
        assert 0.8 < audio / 8000 < 4


async def test_clear_stops_the_speaker_promptly_and_the_session_goes_on(server: RunningServer) -> None:
    async with connect(url(server, "encoding=linear16&sample_rate=24000")) as ws:
        await opened(ws)
        await ws.send(json.dumps({"type": "Speak", "text": LONG_TEXT}))
        await ws.send(json.dumps({"type": "Flush"}))
        assert isinstance(await next_message(ws), bytes)  # speaking now
        sent = time.monotonic()
        await ws.send(json.dumps({"type": "Clear"}))
        cleared, audio, others = await until(ws, "Cleared", 60)
        took = time.monotonic() - sent
        assert cleared == {"type": "Cleared", "sequence_id": 1}
        assert not others  # the Flush the Clear dropped is not answered
        # At most the window already on its way, not the rest of fifteen sentences (minutes of audio here).
        assert audio / 2 / 24_000 < 3.0, f"{audio / 48_000:.1f} s of audio after the Clear"
        assert took < 3.0, f"Cleared after {took:.1f} s"  # the window being made is not waited for
        print(f"Cleared {took * 1000:.0f} ms after the Clear, {audio / 48:.0f} ms of audio in between")
        settled = server.engine.scheduler.started  # inference jobs handed to a worker so far
        await asyncio.sleep(2.0)
        assert server.engine.scheduler.started == settled, "synthesis of the cleared text went on"
        # Nothing of the cleared text follows; the session takes new text.
        await ws.send(json.dumps({"type": "Speak", "text": "Fresh start."}))
        await ws.send(json.dumps({"type": "Flush"}))
        flushed, audio, others = await until(ws, "Flushed")
        assert flushed["sequence_id"] == 2 and not others
        assert audio / 2 / 24_000 < 2.5
    # The engine is free again: no job of the cleared text is left in the scheduler.
    assert server.engine.scheduler.pending == 0


async def test_clear_with_nothing_in_flight_is_answered_at_once(server: RunningServer) -> None:
    async with connect(url(server)) as ws:
        await opened(ws)
        await ws.send(json.dumps({"type": "Speak", "text": "Unfinished thought without an end"}))
        await ws.send(json.dumps({"type": "Clear"}))
        cleared, audio, _ = await until(ws, "Cleared", 10)
        assert cleared["sequence_id"] == 0 and audio == 0
        await ws.send(json.dumps({"type": "Flush"}))  # the cleared buffer is gone: nothing to speak
        flushed, audio, _ = await until(ws, "Flushed", 10)
        assert flushed["sequence_id"] == 1 and audio == 0


async def test_close_speaks_the_rest_then_closes_normally(server: RunningServer) -> None:
    async with connect(url(server)) as ws:
        await opened(ws)
        await ws.send(json.dumps({"type": "Speak", "text": "Goodbye for now"}))
        await ws.send(json.dumps({"type": "Close"}))
        audio = 0
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                message = await next_message(ws)
                assert isinstance(message, bytes), message
                audio += len(message)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
        assert audio / 2 / 24_000 > 0.5


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (json.dumps({"type": "Speek", "text": "hi"}), "unknown_type"),
        ("{not json", "invalid_json"),
        ("[1, 2]", "invalid_message"),
        (json.dumps({"type": "Speak"}), "missing_text"),
        (json.dumps({"type": "Speak", "text": 42}), "invalid_text"),
        (json.dumps({"type": "Speak", "text": "word " * 1001}), "text_too_long"),
        (json.dumps({"type": "Speak", "text": "x" * 70_000}), "message_too_large"),
        (b"\xff\xfe", "invalid_utf8"),
        (json.dumps({"type": "Speak", "text": "🙂🙂."}), "nothing_to_speak"),
    ],
)
async def test_bad_input_gets_a_warning_with_its_code_and_the_session_carries_on(
    server: RunningServer, message: str | bytes, code: str
) -> None:
    async with connect(url(server), max_size=None) as ws:
        await opened(ws)
        await ws.send(message)
        if code == "nothing_to_speak":
            await ws.send(json.dumps({"type": "Flush"}))
        warning, _, _ = await until(ws, "Warning", 30)
        assert warning["code"] == code and warning["description"]
        if code == "nothing_to_speak":  # its Flush is answered, with nothing to speak before it
            assert (await until(ws, "Flushed", 10))[1] == 0
        await ws.send(json.dumps({"type": "Speak", "text": "Still here."}))
        await ws.send(json.dumps({"type": "Flush"}))
        _, audio, others = await until(ws, "Flushed")
        assert audio > 0 and not [m for m in others if m["type"] != "Flushed"]


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("encoding=opus", "unsupported_format"),
        ("encoding=linear16&sample_rate=11025", "unsupported_sample_rate"),
        ("encoding=linear16&sample_rate=fast", "unsupported_sample_rate"),
        ("encoding=mulaw&sample_rate=24000", "unsupported_sample_rate"),
        ("model=no_such_voice", "unknown_voice"),
        ("speed=9", "invalid_speed"),
    ],
)
async def test_bad_query_parameters_get_an_error_and_close_1008(server: RunningServer, query: str, code: str) -> None:
    async with connect(url(server, query)) as ws:
        error = json.loads(await next_message(ws, 30))
        assert error["type"] == "Error" and error["code"] == code and error["description"]
        with pytest.raises(ConnectionClosed) as closed:
            await next_message(ws, 30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert closed.value.rcvd.reason.startswith(code)


@pytest.mark.parametrize("query", ["protocol=deepgram", "model=aura-2-helena-en&encoding=linear16&sample_rate=24000"])
async def test_the_sagemaker_path_speaks_deepgram_when_the_query_asks(server: RunningServer, query: str) -> None:
    async with connect(url(server, query, path="/invocations-bidirectional-stream")) as ws:
        await opened(ws)
        await ws.send(json.dumps({"type": "Speak", "text": "Hello from SageMaker."}).encode())  # as SageMaker relays
        await ws.send(json.dumps({"type": "Flush"}).encode())
        _, audio, _ = await until(ws, "Flushed")
        assert audio > 0


async def test_a_client_that_hangs_up_mid_speech_stops_its_synthesis(server: RunningServer) -> None:
    scheduler = server.engine.scheduler
    async with connect(url(server)) as ws:
        await opened(ws)
        await ws.send(json.dumps({"type": "Speak", "text": LONG_TEXT}))
        assert isinstance(await next_message(ws), bytes)
        started = scheduler.started
    await assert_synthesis_stopped(scheduler, started)


async def test_shutdown_stops_the_session_with_an_error_and_1001(server: RunningServer) -> None:
    async with connect(url(server)) as ws:
        await opened(ws)
        await ws.send(json.dumps({"type": "Speak", "text": LONG_TEXT}))
        await ws.send(json.dumps({"type": "Flush"}))
        assert isinstance(await next_message(ws), bytes)
        # The server's drain (app.begin_shutdown) for this one session, with no grace: the sentence in flight ends.
        [session] = [s for s in server.app.state.sessions if isinstance(s.dialect, DeepgramDialect)]
        loop = session._speaker.get_loop()
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(session.shutdown(0.0), loop))
        error, _, others = await until(ws, "Error", 30)
        assert error["code"] == "shutting_down" and not others  # the unspoken Flush gets no Flushed
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                assert isinstance(await next_message(ws, 30), bytes)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001


async def test_a_warning_quotes_a_long_type_cut_short(server: RunningServer) -> None:
    async with connect(url(server), max_size=None) as ws:
        await opened(ws)
        await ws.send(json.dumps({"type": "S" * 60_000}))
        warning, _, _ = await until(ws, "Warning", 30)
        assert warning["code"] == "unknown_type" and "'SSSSSSSSSS" in warning["description"]
        assert len(json.dumps(warning)) < 600, warning
