"""Every request gets an id at the door, so each of its log lines can be found (docs/observability.md).

HTTP: ``request_id``, the client's ``X-Request-Id`` when it sent a sane one, else a new one; it goes back in the
response's ``X-Request-Id`` header, which Hypercorn's access line reads too. WebSocket: ``session_id`` (the
session's utterances add ``utterance_id`` where they are spoken, sessions/core.py).
"""

from __future__ import annotations

import logging
import re
import uuid

from kokoro_client.logs import bind_ids
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "x-request-id"
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def _client_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == HEADER.encode():
            text = value.decode("latin-1")
            return text if _SANE.fullmatch(text) else None
    return None


class RequestIds:
    """Pure ASGI: binds the id for the whole request (the route, its tasks, its streamed body)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            bind_ids(session_id=_client_id(scope) or new_id())
        elif scope["type"] == "http":
            request_id = _client_id(scope) or new_id()
            bind_ids(request_id=request_id)

            async def send_with_id(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message = {
                        **message,
                        "headers": [*message.get("headers", []), (HEADER.encode(), request_id.encode())],
                    }
                await send(message)

            await self.app(scope, receive, send_with_id)
            return
        await self.app(scope, receive, send)


QUIET_PATHS = ("/ping", "/metrics")  # polled every few seconds by the platform and the scraper


class AccessFields(logging.Filter):
    """On Hypercorn's access lines: lifts method, path, status, duration and the request id out of its atoms into
    fields of their own (the JSON line's, or the text line's ids), and drops the successful health/scrape polls."""

    def filter(self, record: logging.LogRecord) -> bool:
        atoms = record.args
        if not isinstance(atoms, dict):
            return True
        path, status = atoms.get("U", "-"), atoms.get("s", "-")
        if path in QUIET_PATHS and str(status).isdigit() and int(status) < 400:
            return False
        record.method, record.path, record.status = atoms.get("m"), path, status
        record.duration_ms = round(int(atoms.get("D", 0) or 0) / 1000, 1)
        request_id = atoms.get("{x-request-id}o", "-")
        if request_id != "-":
            record.request_id = request_id
        return True
