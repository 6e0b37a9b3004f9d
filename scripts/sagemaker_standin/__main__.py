"""python -m scripts.sagemaker_standin --tts-url ws://127.0.0.1:8080 --port 8443"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import tempfile
from pathlib import Path

from hypercorn.asyncio import serve

from .app import StandIn
from .serve import hypercorn_config
from .tls import write_self_signed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scripts.sagemaker_standin", description=__doc__)
    parser.add_argument("--tts-url", default="ws://127.0.0.1:8080", help="the container's base WebSocket URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--endpoint-name", help="refuse other endpoint names (default: accept any)")
    parser.add_argument("--cert-dir", type=Path, help="where to write the throwaway certificate (default: a temp dir)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    cert_dir = args.cert_dir or Path(tempfile.mkdtemp(prefix="sagemaker-standin-"))
    certfile, keyfile = write_self_signed(cert_dir, hosts=("localhost", args.host))
    print(f"CA certificate to trust (SSL_CERT_FILE for the agent): {certfile}", flush=True)
    print(f"endpoint_uri: https://{args.host}:{args.port} -> {args.tts_url}", flush=True)
    app = StandIn(args.tts_url, endpoint_name=args.endpoint_name)
    asyncio.run(_serve(app, hypercorn_config(args.host, args.port, certfile, keyfile)))


async def _serve(app: StandIn, config: object) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(app, config, shutdown_trigger=stop.wait, mode="asgi")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
