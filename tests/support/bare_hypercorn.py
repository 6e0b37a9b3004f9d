"""A minimal ASGI app on Hypercorn, bare or with kokoro_tts's hardening: what test_hypercorn_upstream compares.

``python bare_hypercorn.py PORT bare|hardened``. HTTP answers 200 "ok"; a WebSocket echoes each message, and
answers "oversize" where the hardening marks a message over the size limit.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config
from kokoro_tts.server import hypercorn_hardening
from kokoro_tts.sessions.core import OVERSIZE_KEY

KEEP_ALIVE_S = 4.0
MAX_MESSAGE_BYTES = 1024


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
    elif scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while (message := await receive())["type"] == "websocket.receive":
            text = "oversize" if message.get(OVERSIZE_KEY) else message.get("text")
            await send({"type": "websocket.send", "text": text, "bytes": message.get("bytes")})


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "hardened":
        hypercorn_hardening.apply()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.keep_alive_timeout = KEEP_ALIVE_S
    config.websocket_max_message_size = MAX_MESSAGE_BYTES
    asyncio.run(serve(app, config))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
