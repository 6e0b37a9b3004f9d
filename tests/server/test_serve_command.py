"""The exact command the image runs (`serve`, as `docker run IMAGE serve`), against a layout like /opt/ml/model."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kokoro_tts.engine.capacity import HEADROOM, waiting_room
from support.eventually import eventually
from websockets.asyncio.client import connect

from scripts.scrape import scrape, value
from scripts.servers import ServerExited, ServerNotReady, free_port, wait_ready

LONG_REPLY = " ".join(f"This is sentence number {n} of a long reply that keeps every core busy." for n in range(1, 9))


@pytest.fixture(scope="module")
def served(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[int]]]:
    # SageMaker copies the S3 prefix to /opt/ml/model: a plain directory holding the layout, nothing else.
    opt_ml_model = tmp_path_factory.mktemp("opt_ml") / "model"
    shutil.copytree(model_dir, opt_ml_model, symlinks=False)
    port = free_port()
    env = {**os.environ, "KOKORO_MODEL_DIR": str(opt_ml_model), "PORT": str(port)}
    serve = Path(os.environ.get("VIRTUAL_ENV", ".venv")) / "bin" / "serve"
    command = [str(serve)] if serve.exists() else [shutil.which("serve") or "serve"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    statuses: list[int] = []
    try:
        wait_ready(base, process, poll_s=0.1, statuses=statuses)
    except (ServerExited, ServerNotReady):
        pass  # the test that reads `statuses` says what went wrong
    try:
        yield base, statuses
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        finally:
            process.kill()
        assert code == 0, process.stdout.read().decode() if process.stdout else ""


def test_ping_is_503_while_loading_then_200(served: tuple[str, list[int]]) -> None:
    _, statuses = served
    assert statuses[-1] == 200
    assert 503 in statuses, "the server should listen (and say 503) while the model loads"
    assert set(statuses) <= {200, 503}


def test_serves_speech_with_the_weights_it_was_given(served: tuple[str, list[int]]) -> None:
    base, _ = served
    response = httpx.post(f"{base}/invocations", json={"text": "Hello from the container."}, timeout=60)
    assert response.status_code == 200 and len(response.content) > 24000


async def test_ping_and_new_sessions_answer_within_250_ms_while_every_core_synthesizes(
    served: tuple[str, list[int]],
) -> None:
    """SageMaker's health check allows 250 ms; inference must never hold the event loop."""
    base, _ = served
    ws_url = base.replace("http", "ws") + "/invocations-bidirectional-stream"
    sessions = [await connect(ws_url) for _ in range(4)]
    try:
        for ws in sessions:
            await ws.send(json.dumps({"text": LONG_REPLY}))
        await asyncio.gather(*(ws.recv() for ws in sessions))  # all four are synthesizing now
        ping_ms: list[float] = []
        accept_ms: list[float] = []
        async with httpx.AsyncClient(timeout=5) as client:
            for _ in range(15):
                started = time.perf_counter()
                assert (await client.get(f"{base}/ping")).status_code == 200
                ping_ms.append(1000 * (time.perf_counter() - started))
                started = time.perf_counter()
                async with connect(ws_url):
                    accept_ms.append(1000 * (time.perf_counter() - started))
                await asyncio.sleep(0.1)
    finally:
        for ws in sessions:
            await ws.close()
    print(f"ping max {max(ping_ms):.0f} ms, accept max {max(accept_ms):.0f} ms")
    assert max(ping_ms) < 250, f"/ping took {max(ping_ms):.0f} ms under load"
    assert max(accept_ms) < 250, f"a WebSocket accept took {max(accept_ms):.0f} ms under load"


async def test_the_warm_up_measures_the_streams_it_plays_and_metrics_show_them(
    served: tuple[str, list[int]],
) -> None:
    """The default `serve` sizes its stream slots from what its warm-up measured, and /metrics shows both; a session
    holds a slot while it speaks and gives it back when its audio has played out."""
    base, _ = served
    before = scrape(base)
    throughput = value(before, "kokoro_tts_stream_throughput")
    assert throughput > 0
    slots = max(1, math.floor(HEADROOM * throughput))
    assert value(before, "kokoro_tts_limit", cap="streams") == slots
    assert value(before, "kokoro_tts_limit", cap="waiting_first_audio") == waiting_room(16, slots)
    assert value(before, "kokoro_tts_in_use", cap="streams") == 0
    async with connect(base.replace("http", "ws") + "/invocations-bidirectional-stream") as ws:
        await ws.send(json.dumps({"text": "A slot is held while this plays."}))
        while isinstance(await ws.recv(), str):
            pass  # synthesis_start, then the first audio
        assert value(scrape(base), "kokoro_tts_in_use", cap="streams") == 1
        while "synthesis_complete" not in str(await ws.recv()):
            pass
        await eventually(  # given back once its audio has played out
            lambda: not value(scrape(base), "kokoro_tts_in_use", cap="streams"), "the slot given back", 30
        )
    after = scrape(base)
    assert value(after, "kokoro_tts_stream_headroom") == value(after, "kokoro_tts_limit", cap="streams")
    assert value(after, "kokoro_tts_streams_waiting") == 0
