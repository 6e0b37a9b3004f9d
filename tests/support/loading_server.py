"""A real Hypercorn serving the app whose model never finishes loading: every synthesis is answered not_ready.
What reaches the engine, or is refused before it, can be tested without loading a model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from hypercorn.asyncio import serve
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.server.app import create_app
from kokoro_tts.server.serve import hypercorn_config
from kokoro_tts.settings import Settings

from scripts.servers import free_port, wait_ready


@contextmanager
def loading_server(settings: Settings | None = None) -> Iterator[int]:
    """The port of a server made with ``settings`` whose model never loads, once it listens."""
    loaded = threading.Event()

    def never(settings: Settings) -> TTSEngine:
        loaded.wait()
        raise RuntimeError("test over")

    port, stop = free_port(), threading.Event()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        config = hypercorn_config("127.0.0.1", port)
        await serve(
            create_app(settings or Settings(), load_engine=never),
            config,
            shutdown_trigger=lambda: loop.run_in_executor(None, stop.wait),
        )  # type: ignore[arg-type]

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout_s=30, ready=503)
        yield port
    finally:
        loaded.set()
        stop.set()
        thread.join(timeout=30)
