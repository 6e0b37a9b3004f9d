"""Shared fixtures: the weight layout, and one real Hypercorn server with the real model for the whole run."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypercorn.asyncio import serve
from kokoro_tts.engine.capacity import UNLIMITED, StreamSlots
from kokoro_tts.server.app import create_app
from kokoro_tts.server.serve import hypercorn_config
from kokoro_tts.settings import Settings
from support.idle import wait_idle
from support.inproc_server import RunningServer
from support.repo import REPO

from scripts.servers import free_port, wait_ready

# Fixtures shared across rooms, from tests/support: the SageMaker stand-in (client and scripts rooms).
pytest_plugins = ["support.sagemaker"]


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The weight layout (what SageMaker mounts at /opt/ml/model), fetched by `make weights` if missing."""
    path = Path(os.environ.get("KOKORO_MODEL_DIR", REPO / "models" / "kokoro"))
    if not (path / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "scripts.weights", "fetch", "--dest", str(path)], check=True)
    return path


@pytest.fixture(scope="session")
def server(model_dir: Path) -> Iterator[RunningServer]:
    """Real Hypercorn serving the real app and model, in a thread of this process so tests can look inside. Every
    stream starts at once (no stream slots): tests here must not depend on how fast this machine is;
    tests/server/test_capacity.py gives the slots their own."""
    app = create_app(Settings(model_dir=model_dir, streams=UNLIMITED))
    port = free_port()
    stop = threading.Event()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        await serve(
            app, hypercorn_config("127.0.0.1", port), shutdown_trigger=lambda: loop.run_in_executor(None, stop.wait)
        )  # type: ignore[arg-type]

    thread = threading.Thread(target=asyncio.run, args=(run(),), name="hypercorn", daemon=True)
    thread.start()
    running = RunningServer(app, port)
    wait_ready(running.base_url)
    yield running
    stop.set()
    thread.join(timeout=30)


@pytest.fixture
def tight_admission(server: RunningServer) -> Iterator[None]:
    """The shared server refuses a new HTTP synthesis whose first audio would wait at all (not over 4 s): a burst
    a few requests wide is past the bound on any machine, however many jobs run side by side."""
    engine = server.engine
    asyncio.run(wait_idle(engine, 60))  # idle first: work a test before this one left running would refuse all
    settings = engine.settings
    engine.settings = dataclasses.replace(settings, max_first_audio_wait_s=0.0)
    try:
        yield
    finally:
        engine.settings = settings


@pytest.fixture
def one_stream(server: RunningServer) -> Iterator[StreamSlots]:
    """The shared server plays one stream at a time (its own slots are unlimited, so other tests need not care)."""
    engine = server.engine
    asyncio.run(wait_idle(engine, 60))
    unlimited, engine.slots = engine.slots, StreamSlots(1)
    try:
        yield engine.slots
    finally:
        engine.slots = unlimited


@pytest.fixture
def long_wait(server: RunningServer) -> Iterator[None]:
    """A newcomer may wait 30 s for a slot: longer than the playing reply on any machine."""
    yield from _waiting(server, 30.0)


@pytest.fixture
def short_wait(server: RunningServer) -> Iterator[None]:
    """A newcomer waits 0.3 s for a slot: far less than the playing reply."""
    yield from _waiting(server, 0.3)


def _waiting(server: RunningServer, seconds: float) -> Iterator[None]:
    engine = server.engine
    settings = engine.settings
    engine.settings = dataclasses.replace(settings, max_first_audio_wait_s=seconds)
    try:
        yield
    finally:
        engine.settings = settings


@pytest.fixture
def tts_sessions(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the TTS server's WebSocket sessions as they start and end (the server runs in this process)."""
    import kokoro_tts.server.app

    counts = {"started": 0, "ended": 0}
    base = kokoro_tts.server.app.Session

    class Counted(base):  # type: ignore[misc, valid-type]
        async def run(self) -> None:
            counts["started"] += 1
            try:
                await super().run()
            finally:
                counts["ended"] += 1

    monkeypatch.setattr(kokoro_tts.server.app, "Session", Counted)
    return counts


@pytest.fixture
def fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials and a region for moto, and nothing that could reach the real account."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "BEDROCK_MODEL_ID"):
        monkeypatch.delenv(key, raising=False)
