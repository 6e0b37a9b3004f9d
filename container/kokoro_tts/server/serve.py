"""``serve``: how SageMaker starts the container (``docker run IMAGE serve``), and ``make serve`` locally.

Hypercorn speaks HTTP/1.1 and cleartext HTTP/2 (prior knowledge or upgrade) on the same port, plus WebSockets.
SIGTERM (how SageMaker stops a container) stops accepting at once, drains the sessions and exits within
``KOKORO_SHUTDOWN_GRACE_S``. A model that cannot load, or a port already taken, ends the process with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from hypercorn.asyncio.run import worker_serve
from hypercorn.config import Config, Sockets
from hypercorn.utils import wrap_app
from kokoro_client import logs

from kokoro_tts.server import hypercorn_hardening
from kokoro_tts.server.app import begin_shutdown, create_app
from kokoro_tts.server.request_ids import AccessFields
from kokoro_tts.settings import SettingError, Settings, environment

log = logging.getLogger("kokoro_tts.server.serve")

# What --help lists: every setting's variable (settings.py declares them), then the process's own.
ENVIRONMENT = {
    **environment(),
    "HOST, PORT": "the defaults of --host and --port",
    "LOG_LEVEL": "INFO, DEBUG, ...",
    "LOG_FORMAT": "json (one object per line, the image's default) or text (the default elsewhere)",
}

# Hypercorn's access line (the JSON line also has method, path, status, duration_ms and request_id as fields).
ACCESS_LOG_FORMAT = '%(h)s "%(R)s" %(s)s %(b)s %(L)ss'


def hypercorn_config(host: str, port: int, settings: Settings | None = None) -> Config:
    settings = settings or Settings()
    hypercorn_hardening.apply()
    config = Config()
    config.bind = [f"{host}:{port}"]
    # Hypercorn's loggers go through the root handler (logs.configure): one format, ids on every line.
    access = logging.getLogger("hypercorn.access")
    if not any(isinstance(f, AccessFields) for f in access.filters):
        access.addFilter(AccessFields())
    config.accesslog = access
    config.access_log_format = ACCESS_LOG_FORMAT
    config.errorlog = logging.getLogger("hypercorn.error")
    config.keep_alive_timeout = 75  # above the 60 s idle timeouts of the load balancers in front of endpoints
    config.h2_max_concurrent_streams = settings.max_h2_streams
    # Larger messages get our own message_too_large error frame rather than a dropped connection.
    config.websocket_max_message_size = 4 * 1024 * 1024
    # Connections still open this long after SIGTERM are cut; sessions have been drained before (see _serve).
    config.graceful_timeout = 0.8 * settings.shutdown_grace_s
    return config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="serve",
        description="Kokoro TTS server (SageMaker real-time endpoint contract): GET /ping, POST /invocations, "
        "POST /v1/audio/speech and WS /invocations-bidirectional-stream (docs/protocol.md).",
        epilog="environment variables:\n"
        + "\n".join(f"  {name:<30} {meaning}" for name, meaning in ENVIRONMENT.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--host",
        default=os.environ.get("HOST", "127.0.0.1"),
        help="address to listen on (default: $HOST or 127.0.0.1; the container sets 0.0.0.0)",
    )
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("PORT", "8080")), help="port (default: $PORT or 8080)"
    )
    args = parser.parse_args(argv)
    try:
        logs.configure()
    except ValueError as exc:
        parser.error(str(exc))
    try:
        settings = Settings()
        config = hypercorn_config(args.host, args.port, settings)
    except (SettingError, hypercorn_hardening.UnvettedHypercorn) as exc:
        print(f"serve: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        sockets = config.create_sockets()  # before anything starts: a taken port is one line, not a traceback
    except OSError as exc:
        print(f"serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(2)
    code = asyncio.run(_serve(settings, config, sockets))
    logging.shutdown()
    # An inference job still running in its worker thread must not hold the exit past the grace period.
    os._exit(code)


async def _serve(settings: Settings, config: Config, sockets: Sockets) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    exit_code = 0

    def fatal(_: str) -> None:
        nonlocal exit_code
        exit_code = 1
        stop.set()

    app = create_app(settings, on_fatal=fatal)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def shutdown_trigger() -> None:
        await stop.wait()
        if exit_code == 0:
            log.info("stopping: draining sessions for up to %g s", settings.shutdown_grace_s)
        # Returning stops the listeners at once; the drain runs while Hypercorn waits for the connections.
        drains = begin_shutdown(app, grace_s=0.5 * settings.shutdown_grace_s)
        app.state.drains = drains

    asgi = wrap_app(app, config.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]
    await worker_serve(asgi, config, sockets=sockets, shutdown_trigger=shutdown_trigger)
    return exit_code


if __name__ == "__main__":
    main()
