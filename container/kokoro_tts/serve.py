"""``serve``: how SageMaker starts the container (``docker run IMAGE serve``), and ``make serve`` locally.

Hypercorn speaks HTTP/1.1 and cleartext HTTP/2 (prior knowledge or upgrade) on the same port, plus WebSockets.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config

from .app import create_app
from .settings import Settings


def hypercorn_config(host: str, port: int) -> Config:
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = "-"
    config.keep_alive_timeout = 75  # above the 60 s idle timeouts of the load balancers in front of endpoints
    # Larger messages get our own message_too_large error frame rather than a dropped connection.
    config.websocket_max_message_size = 4 * 1024 * 1024
    return config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="serve", description="Kokoro TTS server (SageMaker contract)")
    parser.add_argument("--host", default=os.environ.get("HOST", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(_serve(args.host, args.port))


async def _serve(host: str, port: int) -> None:
    shutdown = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, shutdown.set)
    await hypercorn_serve(create_app(Settings()), hypercorn_config(host, port), shutdown_trigger=shutdown.wait)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
