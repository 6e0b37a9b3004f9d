"""GET /metrics and the log lines' ids, on the real server: the exposition parses with Prometheus' own parser, and
what a few requests do (WebSocket, /invocations, the OpenAI route, bad input, a refused session) moves the series
it should, and only those."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kokoro_client.protocol import Close, Synthesize, encode
from prometheus_client.parser import text_string_to_metric_families
from support.inproc_server import RunningServer
from support.log_capture import captured_log
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from scripts.scrape import moved, scrape, value
from scripts.servers import free_port, serve_command, wait_ready


async def speak_ws(ws_url: str, texts: list[str]) -> list[Any]:
    """Each text as one utterance of one session, then close; every text frame the server sent."""
    frames = []
    async with connect(ws_url) as ws:
        for text in texts:
            await ws.send(encode(Synthesize(text)) if text else "{not json")
        await ws.send(encode(Close()))
        async for message in ws:
            if isinstance(message, str):
                frames.append(json.loads(message))
    return frames


def test_metrics_parse_and_move_with_each_route(server: RunningServer) -> None:
    before = scrape(server.base_url)
    assert value(before, "kokoro_tts_model_ready") == 1
    assert ("kokoro_tts_queue_depth", ()) in before
    assert value(before, "kokoro_tts_limit", cap="sessions") == server.engine.settings.max_sessions

    frames = asyncio.run(speak_ws(server.ws_url, ["Hello from the socket.", ""]))
    assert [f["type"] for f in frames].count("synthesis_complete") == 1
    assert any(f["type"] == "error" and f["code"] == "invalid_json" for f in frames)
    ok = httpx.post(f"{server.base_url}/invocations", json={"text": "Hello over HTTP."}, timeout=60)
    assert ok.status_code == 200 and ok.headers["x-request-id"]
    openai = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        json={"model": "kokoro", "input": "Hello, OpenAI client.", "voice": "alloy", "response_format": "pcm"},
        timeout=60,
    )
    assert openai.status_code == 200
    bad = httpx.post(f"{server.base_url}/invocations", json={"text": "   "}, timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "empty_text"
    # Every route's refusal goes through one path (routes/errors.py): counted once under its route's label, in
    # OpenAI's error shape where the clients are OpenAI's.
    bad_openai = httpx.post(
        f"{server.base_url}/v1/audio/speech", json={"model": "kokoro", "input": " ", "voice": "alloy"}, timeout=10
    )
    assert bad_openai.status_code == 400
    assert bad_openai.json()["error"]["type"] == "invalid_request_error", bad_openai.json()
    bad_captioned = httpx.post(f"{server.base_url}/dev/captioned_speech", json={"input": "Hi.", "stream": "no"})
    assert bad_captioned.json()["error"]["type"] == "invalid_request_error", bad_captioned.json()
    unknown = httpx.get(f"{server.base_url}/v1/models/whisper-1", timeout=10)
    assert unknown.json()["error"]["code"] == "unknown_model", unknown.json()

    after = scrape(server.base_url)

    for route in ("ws", "invocations", "openai"):
        assert moved(before, after, "kokoro_tts_utterances_total", route=route, outcome="completed") == 1, route
        assert moved(before, after, "kokoro_tts_time_to_first_audio_seconds_count", route=route) == 1, route
        assert moved(before, after, "kokoro_tts_real_time_factor_count", route=route) == 1, route
        assert moved(before, after, "kokoro_tts_real_time_factor_sum", route=route) > 0, route
        assert moved(before, after, "kokoro_tts_audio_seconds_total", route=route) > 0.5, route
        # The first audio came within the request's own time, and the +Inf bucket holds every observation.
        assert moved(before, after, "kokoro_tts_time_to_first_audio_seconds_bucket", route=route, le="+Inf") == 1, route
    assert moved(before, after, "kokoro_tts_errors_total", route="ws", code="invalid_json") == 1
    assert moved(before, after, "kokoro_tts_errors_total", route="invocations", code="empty_text") == 1
    assert moved(before, after, "kokoro_tts_errors_total", route="openai", code="empty_text") == 1
    assert moved(before, after, "kokoro_tts_errors_total", route="captioned", code="invalid_message") == 1
    assert moved(before, after, "kokoro_tts_errors_total", route="other", code="unknown_model") == 1
    assert moved(before, after, "kokoro_tts_utterances_total", route="ws", outcome="cancelled") == 0
    # Each of the three utterances (one short text chunk each) ran one G2P job and one job for its first audio.
    for job in ("phonemes", "first_audio"):
        assert moved(before, after, "kokoro_tts_inference_jobs_total", job=job) == 3, job
        assert moved(before, after, "kokoro_tts_inference_seconds_total", job=job) > 0, job
    assert value(after, "kokoro_tts_inference_workers") == server.engine.scheduler.workers >= 1
    # Nothing is left in flight: a response's slot is freed just after its last byte leaves, so allow a moment.
    deadline = time.monotonic() + 5
    while sum(value(after, "kokoro_tts_in_use", cap=cap) for cap in ("sessions", "http_streams")):
        in_use = {cap: value(after, "kokoro_tts_in_use", cap=cap) for cap in ("sessions", "http_streams")}
        assert time.monotonic() < deadline, f"still in use 5 s after the responses ended: {in_use}"
        time.sleep(0.05)
        after = scrape(server.base_url)


def test_a_refused_session_counts_against_its_cap(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    before = scrape(server.base_url)
    monkeypatch.setattr(server.engine.sessions, "ceiling", 0)

    async def refused() -> str:
        async with connect(server.ws_url) as ws:
            try:
                await ws.recv()
            except ConnectionClosed as closed:
                return closed.rcvd.reason if closed.rcvd else ""
        return ""

    assert asyncio.run(refused()).startswith("server_busy")
    after = scrape(server.base_url)
    assert moved(before, after, "kokoro_tts_refused_total", cap="sessions") == 1
    assert moved(before, after, "kokoro_tts_errors_total", route="ws", code="server_busy") == 1


def test_queue_depth_is_read_at_scrape_time_under_load(server: RunningServer) -> None:
    """Three sessions at once on one inference worker: the scheduler holds their next jobs, /metrics shows it."""
    text = "This is a long sentence that takes the worker a while. " * 3

    async def load() -> float:
        seen = 0.0
        sessions = asyncio.gather(*(speak_ws(server.ws_url, [text]) for _ in range(3)))
        async with httpx.AsyncClient(timeout=10) as client:
            while not sessions.done():
                body = (await client.get(f"{server.base_url}/metrics")).text
                for family in text_string_to_metric_families(body):
                    if family.name == "kokoro_tts_queue_depth":
                        seen = max(seen, family.samples[0].value)
                await asyncio.sleep(0.05)
        await sessions
        return seen

    assert asyncio.run(load()) >= 1
    assert value(scrape(server.base_url), "kokoro_tts_queue_depth") == 0


@pytest.fixture
def json_log(server: RunningServer) -> Iterator[io.StringIO]:
    """The root logger's lines, as `serve` writes them with LOG_FORMAT=json, while the test runs."""
    with captured_log("json") as stream:
        yield stream


def test_every_line_of_a_request_carries_its_ids(server: RunningServer, json_log: io.StringIO) -> None:
    frames = asyncio.run(speak_ws(server.ws_url, ["First sentence.", "Second one."]))
    assert [f["type"] for f in frames].count("synthesis_complete") == 2
    response = httpx.post(
        f"{server.base_url}/invocations", json={"text": "Hi."}, headers={"X-Request-Id": "req-42"}, timeout=60
    )
    assert response.headers["x-request-id"] == "req-42"
    # A response's own lines (its utterance, its access line) are written just after its last byte: allow a moment.
    deadline = time.monotonic() + 5
    while json_log.getvalue().count('"req-42"') < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    for line in lines:
        assert {"timestamp", "level", "logger", "message"} <= set(line), line
    session = [line for line in lines if line["logger"] == "kokoro_tts.sessions.core"]
    assert [line["message"] for line in session] == ["session opened", "session closed"]
    assert len({line["session_id"] for line in session}) == 1
    utterances = [line for line in lines if line["logger"] == "kokoro_tts.utterances"]
    ws_done = [line for line in utterances if line.get("session_id") == session[0]["session_id"]]
    assert [line["utterance_id"] for line in ws_done] == ["u1", "u2"]
    assert all(line["first_audio_ms"] > 0 and line["audio_ms"] > 0 for line in ws_done)
    http_done = [line for line in utterances if line.get("request_id") == "req-42"]
    assert len(http_done) == 1 and http_done[0]["route"] == "invocations"
    access = [line for line in lines if line["logger"] == "hypercorn.access" and line.get("path") == "/invocations"]
    assert [(line["request_id"], line["status"]) for line in access] == [("req-42", "200")]


@pytest.mark.slow
def test_serve_writes_one_json_object_per_line(model_dir: Path) -> None:
    """The command the image runs, with the image's LOG_FORMAT=json: every line of its stderr is a JSON object."""
    port = free_port()
    env = {**os.environ, "KOKORO_MODEL_DIR": str(model_dir), "PORT": str(port), "LOG_FORMAT": "json"}
    process = subprocess.Popen(serve_command(), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, process)
        httpx.post(f"{base}/invocations", json={"text": "Hello."}, timeout=60).raise_for_status()
        asyncio.run(speak_ws(base.replace("http", "ws") + "/invocations-bidirectional-stream", ["Hi there."]))
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    lines = [json.loads(line) for line in stderr.decode().splitlines()]
    assert all({"timestamp", "level", "logger", "message"} <= set(line) for line in lines)
    completed = [line for line in lines if line["message"] == "utterance completed"]
    assert {line["route"] for line in completed} == {"invocations", "ws"}
    assert all(line.get("request_id") or line.get("utterance_id") for line in completed)
    assert any(line["logger"] == "hypercorn.access" and line.get("request_id") for line in lines)
