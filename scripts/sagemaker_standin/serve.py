"""Serving the stand-in with Hypercorn: HTTPS, HTTP/2 by ALPN (``h2``), as the real endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from hypercorn.asyncio import serve
from hypercorn.config import Config

from scripts.servers import free_port

from .app import StandIn


def hypercorn_config(host: str, port: int, certfile: Path, keyfile: Path) -> Config:
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.certfile, config.keyfile = str(certfile), str(keyfile)
    config.accesslog = None
    config.graceful_timeout = 1.0  # open streams do not hold a shutdown up
    return config


@dataclass
class RunningStandIn:
    app: StandIn
    endpoint_uri: str


@asynccontextmanager
async def serving(
    app: StandIn,
    *,
    certfile: Path,
    keyfile: Path,
    host: str = "127.0.0.1",
    port: int = 0,
) -> AsyncIterator[RunningStandIn]:
    """Serve ``app`` over HTTPS in this event loop until the block ends; ``port=0`` picks a free one."""
    port = port or free_port(host)
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(app, hypercorn_config(host, port, certfile, keyfile), shutdown_trigger=stop.wait, mode="asgi")  # type: ignore[arg-type]
    )
    try:
        await _wait_listening(host, port, task)
        yield RunningStandIn(app, f"https://{host}:{port}")
    finally:
        await app.aclose()
        stop.set()
        try:
            await asyncio.wait_for(task, 10)
        except TimeoutError:
            task.cancel()


async def _wait_listening(host: str, port: int, server: asyncio.Task[None]) -> None:
    async with asyncio.timeout(10):
        while True:
            if server.done():
                server.result()  # raises what stopped it
                raise RuntimeError("the stand-in stopped before it listened")
            try:
                _, writer = await asyncio.open_connection(host, port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            writer.close()
            return
