"""Hold under attack and churn: work only for clients still there, caps that answer server_busy,
bounded jobs, bounded memory per message, connections and bodies released promptly. Real Hypercorn, loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
from kokoro_tts.text.chunks import MAX_CHUNK_CHARS, split_utterance
from support.eventually import eventually
from support.idle import wait_idle
from support.inproc_server import RunningServer
from support.ws_client import Transcript, receive_until
from websockets.asyncio.client import connect

# One long first sentence: its first chunk alone keeps a core busy for a while.
LONG_SENTENCE = (
    "This particular sentence is deliberately long, running on through clause after clause without stopping, "
    "so that its first chunk alone keeps the only inference worker busy for a noticeable while on this machine."
)
LONG_TEXT = " ".join([LONG_SENTENCE] * 4)


def raw_post(port: int, body: bytes, path: str = "/invocations", length: int | None = None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


# --- 1: clients that leave before their first chunk ------------------------------------------------------------


async def test_http_requests_whose_clients_leave_are_not_synthesized(server: RunningServer) -> None:
    engine = server.engine
    await wait_idle(engine, 60)
    body = json.dumps({"text": LONG_TEXT}).encode()
    sockets = [raw_post(server.port, body) for _ in range(6)]
    await asyncio.sleep(0.3)  # the requests are in, their first chunks queued
    for sock in sockets:
        sock.close()
    left = engine.scheduler.started
    await wait_idle(engine, 60)
    # Only what was already in a worker thread may finish, not each gone request's first chunk.
    assert engine.scheduler.started - left <= 1, engine.scheduler.started - left


def _h2_connection(port: int) -> tuple[socket.socket, h2.connection.H2Connection]:
    sock = socket.create_connection(("127.0.0.1", port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    sock.settimeout(5)
    while not any(isinstance(e, h2.events.RemoteSettingsChanged) for e in conn.receive_data(sock.recv(65536))):
        pass
    sock.sendall(conn.data_to_send())
    return sock, conn


async def test_http2_rapid_reset_stops_the_synthesis_and_streams_are_capped(server: RunningServer) -> None:
    engine = server.engine
    await wait_idle(engine, 60)
    sock, conn = _h2_connection(server.port)
    try:
        assert conn.remote_settings.max_concurrent_streams == engine.settings.max_h2_streams
        body = json.dumps({"text": LONG_TEXT}).encode()
        streams = []
        for _ in range(engine.settings.max_h2_streams):
            stream_id = conn.get_next_available_stream_id()
            headers = [
                (":method", "POST"),
                (":path", "/invocations"),
                (":scheme", "http"),
                (":authority", "x"),
                ("content-type", "application/json"),
            ]
            conn.send_headers(stream_id, headers)
            conn.send_data(stream_id, body, end_stream=True)
            streams.append(stream_id)
        sock.sendall(conn.data_to_send())
        await asyncio.sleep(0.3)
        for stream_id in streams:
            conn.reset_stream(stream_id)
        sock.sendall(conn.data_to_send())
        reset = engine.scheduler.started
        await wait_idle(engine, 60)  # the connection stays open: only the resets say the streams are gone
        assert engine.scheduler.started - reset <= 1
    finally:
        sock.close()


# --- caps answer server_busy -------------------------------------------------------------------------------------


@pytest.fixture
def one_waiting_slot(server: RunningServer) -> Iterator[None]:
    waiting = server.engine.waiting
    ceiling, waiting.ceiling = waiting.ceiling, 1
    try:
        yield
    finally:
        waiting.ceiling = ceiling


async def _hold_the_slot(server: RunningServer) -> asyncio.Task[httpx.Response]:
    client = httpx.AsyncClient(timeout=120)

    async def post() -> httpx.Response:
        async with client:
            return await client.post(f"{server.base_url}/invocations", json={"text": LONG_SENTENCE})

    task = asyncio.create_task(post())
    await eventually(lambda: server.engine.waiting.count >= 1, "an utterance waiting for its first audio", 30)
    return task


async def test_http_past_the_waiting_cap_is_server_busy_at_once(server: RunningServer, one_waiting_slot: None) -> None:
    await wait_idle(server.engine, 60)
    holder = await _hold_the_slot(server)
    async with httpx.AsyncClient(timeout=10) as client:
        busy = await client.post(f"{server.base_url}/invocations", json={"text": "Hello."})
    assert busy.status_code == 503 and busy.json()["error"]["code"] == "server_busy"
    assert (await holder).status_code == 200


async def test_session_utterance_past_the_waiting_cap_is_server_busy_and_the_session_goes_on(
    server: RunningServer, one_waiting_slot: None
) -> None:
    await wait_idle(server.engine, 60)
    async with connect(server.ws_url) as ws:
        holder = await _hold_the_slot(server)
        await ws.send(json.dumps({"text": "Hello.", "id": "busy"}))
        error = json.loads(await ws.recv())
        assert error == {
            "type": "error",
            "code": "server_busy",
            "message": error["message"],
            "id": "busy",
            "retry_after": 1,  # as HTTP's Retry-After: the least the server tells a client to wait
        }
        await holder
        await ws.send(json.dumps({"text": "Now.", "id": "ok"}))
        transcript = Transcript()
        await receive_until(ws, transcript, lambda f: f.get("id") == "ok" and f["type"] == "synthesis_complete")


async def test_sessions_past_the_cap_are_refused_with_server_busy(server: RunningServer) -> None:
    sessions = server.engine.sessions
    async with connect(server.ws_url) as first:
        await first.send(json.dumps({"type": "config", "speed": 1.0}))
        await eventually(lambda: sessions.count >= 1, "a session open", 10)
        ceiling, sessions.ceiling = sessions.ceiling, sessions.count
        try:
            async with connect(server.ws_url) as refused:
                await refused.wait_closed()
                assert refused.close_code == 1013
                assert refused.close_reason.startswith("server_busy")
        finally:
            sessions.ceiling = ceiling


# --- 2: a session closed and then abandoned ----------------------------------------------------------------------


async def test_session_that_closes_then_vanishes_stops_its_queue(server: RunningServer) -> None:
    engine = server.engine
    await wait_idle(engine, 60)
    ws = await connect(server.ws_url)
    for i in range(6):
        await ws.send(json.dumps({"text": LONG_SENTENCE, "id": f"q{i}"}))
    await ws.send(json.dumps({"type": "close"}))
    assert json.loads(await ws.recv())["type"] == "synthesis_start"
    ws.transport.abort()  # gone without a closing handshake
    vanished = engine.scheduler.started
    await wait_idle(engine, 60)
    assert engine.scheduler.started - vanished <= 2  # the look-ahead already running, at most


async def test_close_still_finishes_the_queue_for_a_client_that_stays(server: RunningServer) -> None:
    async with connect(server.ws_url) as ws:
        for i in range(2):
            await ws.send(json.dumps({"text": "Short one.", "id": f"c{i}"}))
        await ws.send(json.dumps({"type": "close"}))
        transcript = Transcript()
        with pytest.raises(Exception):  # noqa: B017 - receive_until ends when the server closes
            await receive_until(ws, transcript, lambda f: False)
        assert [f["id"] for f in transcript.json_frames("synthesis_complete")] == ["c0", "c1"]
        assert ws.close_code == 1000


# --- 3: compression bombs ----------------------------------------------------------------------------------------


async def test_permessage_deflate_is_declined(server: RunningServer) -> None:
    async with connect(server.ws_url, compression="deflate") as ws:
        assert ws.protocol.extensions == []  # nothing the client sends is ever inflated
        await ws.send(json.dumps({"type": "config", "speed": 1.0}))


# --- 4: no job longer than one batch -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["a" * 5000, "https://example.com/" + "segment/" * 600, "你好世界欢迎" * 800],
    ids=["5000-letter word", "long URL", "CJK without punctuation"],
)
def test_text_with_no_split_point_is_cut_into_bounded_chunks(text: str) -> None:
    chunks = split_utterance(text[:5000])
    assert len(chunks) >= 5000 // MAX_CHUNK_CHARS
    assert max(len(c) for c in chunks) <= MAX_CHUNK_CHARS


async def test_each_scheduler_job_is_one_phonemization_or_one_model_batch(server: RunningServer) -> None:
    engine = server.engine
    await wait_idle(engine, 60)
    calls: list[tuple[str, int]] = []
    stages, spoken = engine.backend.stages, engine.phonemizer.spoken
    front, decode = stages.front, stages.decode

    def run_front(tokens: list[int], style: Any, speed: float, *, every_core: bool = True) -> Any:
        calls.append(("batch", len(tokens)))
        return front(tokens, style, speed, every_core=every_core)

    def run_window(
        prosody: Any, start: int = 0, stop: int | None = None, pool: Any = None, *, every_core: bool = True
    ) -> Any:
        calls.append(("window", (prosody.frames if stop is None else stop) - start))
        return decode(prosody, start, stop, pool, every_core=every_core)

    def phonemize(text: str, lang: str) -> Any:
        calls.append(("text", len(text)))
        return spoken(text, lang)

    jobs_before = engine.scheduler.started
    mp = pytest.MonkeyPatch()
    mp.setattr(stages, "front", run_front)
    mp.setattr(stages, "decode", run_window)
    mp.setattr(engine.phonemizer, "spoken", phonemize)
    try:
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({"text": "b" * 1200, "id": "word"}))  # one "word" of 1,200 letters
            transcript = Transcript()
            await receive_until(ws, transcript, lambda f: f.get("id") == "word" and f["type"] != "synthesis_start")
    finally:
        mp.undo()
    assert transcript.json_frames("synthesis_complete")
    plan = engine.window_plan
    longest_window = plan.largest + max(plan.first, plan.left_context) + plan.left_context + plan.right_context + 1
    assert all(n <= 510 for kind, n in calls if kind == "batch")
    assert all(n <= longest_window for kind, n in calls if kind == "window")
    assert all(n <= MAX_CHUNK_CHARS for kind, n in calls if kind == "text")
    # One job per phonemization or vocoder window (a batch's prosody front runs in its first window's job): before,
    # the whole word was one job (phonemes and every batch together).
    jobs = len([kind for kind, _ in calls if kind != "batch"])
    assert engine.scheduler.started - jobs_before == jobs >= 8


# --- 6: connections and bodies -----------------------------------------------------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_closed_http1_connections_release_their_sockets_at_once(server: RunningServer) -> None:
    baseline = _open_fds()
    for _ in range(100):
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    await eventually(
        lambda: _open_fds() <= baseline + 5, "the closed connections' sockets closed (keep-alive is 75 s)", 5
    )


@pytest.fixture
def short_body_timeout(server: RunningServer) -> Iterator[float]:
    engine = server.engine
    settings = engine.settings
    engine.settings = dataclasses.replace(settings, body_timeout_s=1.0)
    try:
        yield 1.0
    finally:
        engine.settings = settings


def _read_answer(sock: socket.socket) -> bytes:
    """Head and body may come in separate segments: read until the body its head announces is here (or EOF)."""
    answer = b""
    while data := sock.recv(65536):
        answer += data
        head, _, body = answer.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
            None,
        )
        if length is not None and len(body) >= length:
            break
    return answer


async def test_a_body_that_never_ends_gets_request_timeout(server: RunningServer, short_body_timeout: float) -> None:
    sock = raw_post(server.port, b'{"text": "hel', length=100)
    try:
        sock.settimeout(short_body_timeout + 10)
        started = time.monotonic()
        answer = await asyncio.to_thread(_read_answer, sock)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b'"request_timeout"' in answer
        assert time.monotonic() - started < short_body_timeout + 5
    finally:
        sock.close()


async def test_an_aborted_upload_logs_one_line_and_no_traceback(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    sock = raw_post(server.port, b'{"text": "hel', length=1000)
    await asyncio.sleep(0.3)
    sock.close()
    await eventually(lambda: any("request body" in r.getMessage() for r in caplog.records), "the log line", 5)
    lines = [r for r in caplog.records if "request body" in r.getMessage()]
    assert len(lines) == 1
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]


# --- 7: clean errors over HTTP -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('{"text": "hi", "speed": ' + "9" * 400 + "}", "invalid_speed"),
        (json.dumps({"text": "1" * 4301}), "number_too_long"),
        ('{"text": "hi", "voice": "af_heart:1e308,af_bella:1e308"}', "invalid_voice"),
    ],
    ids=["speed of 400 digits", "a 4,301-digit number", "blend weights that overflow"],
)
def test_http_bad_values_get_a_coded_4xx(server: RunningServer, body: str, code: str) -> None:
    response = httpx.post(
        f"{server.base_url}/invocations", content=body, headers={"content-type": "application/json"}, timeout=60
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == code


# --- batch replies behind busy sessions ----------------------------------------------------------------------


async def test_a_sessions_next_sentence_is_due_when_its_earlier_audio_has_played(server: RunningServer) -> None:
    """A session's sentence queued while its earlier audio still plays is not needed now; scheduling it as if it
    were put every HTTP batch reply behind every sentence of every session (8 of 10 timed out at 20 prompts)."""
    engine = server.engine
    await wait_idle(engine, 60)
    slack: list[float] = []
    run = engine.scheduler.run

    async def recording(fn: Any, deadline: float, *args: Any) -> Any:
        slack.append(deadline - asyncio.get_running_loop().time())
        return await run(fn, deadline, *args)

    mp = pytest.MonkeyPatch()
    mp.setattr(engine.scheduler, "run", recording)
    # Whole-chunk jobs: with windows the sentence's audio finishes being made only just before it finishes
    # playing, leaving too little of it still playing for this check on a slow machine; the deadline rule is
    # the session's, the same either way.
    mp.setattr(type(engine), "windowed", property(lambda _: False))
    try:
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({"text": LONG_SENTENCE, "id": "one"}))
            transcript = Transcript()
            await receive_until(ws, transcript, lambda f: f.get("type") == "synthesis_start")
            first_audio = time.monotonic()
            await receive_until(ws, transcript, lambda f: f.get("type") == "synthesis_complete")
            audio_s = transcript.json_frames("synthesis_complete")[0]["audio_ms"] / 1000
            jobs_before = len(slack)
            sent = time.monotonic()
            await ws.send(json.dumps({"text": "And one more thing.", "id": "two"}))
            await receive_until(ws, transcript, lambda f: f.get("id") == "two" and f["type"] == "synthesis_complete")
    finally:
        mp.undo()
    still_playing = audio_s - (sent - first_audio)
    assert still_playing > 2, f"the machine is too slow for this check ({still_playing:.1f} s of audio left)"
    assert slack[jobs_before] > still_playing - 1.0, (slack[jobs_before], still_playing)
