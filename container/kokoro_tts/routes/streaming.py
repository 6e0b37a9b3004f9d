"""What every synthesis route shares: the request body read within its bounds, the engine (or why there is none),
and ``SpeechResponse``, which speaks one utterance as an HTTP response through a route's ``Render``.

Every POST route streams: the first chunk is synthesized before the response starts (so a request with nothing
speakable still gets a 4xx), then each later chunk's bytes leave as soon as they exist. Work is done only for a
client still there: the body must arrive within ``body_timeout_s``, and a client that leaves (socket closed,
HTTP/2 stream reset) while its first chunk waits or streams stops its synthesis at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from kokoro_client.errors import ErrorCode, TTSError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from kokoro_tts import metrics
from kokoro_tts.engine.events import Audio, Ending, Event, Refused, Started, Stopped
from kokoro_tts.engine.runs import Stream
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.engine.utterances import Utterance

log = logging.getLogger(__name__)


def error_response(error: TTSError, body: dict[str, Any] | None = None) -> JSONResponse:
    """The refusal as JSON, ``{"error": body}`` (the error's own fields unless a route words it in its dialect),
    with its HTTP status and, when the client should come back, Retry-After."""
    return JSONResponse(
        {"error": error.to_dict() if body is None else body}, status_code=error.http_status, headers=retry_after(error)
    )


def retry_after(error: TTSError) -> dict[str, str] | None:
    """The Retry-After header of a refusal whose client should come back."""
    return {"Retry-After": str(error.retry_after_s)} if error.retry_after_s is not None else None


class ClientGone(Exception):
    """The client left before its answer was ready: there is nobody to answer."""


GONE = Response(status_code=499)  # never read by anyone; what access logs conventionally call "client closed"


def engine_of(request: Request) -> TTSEngine:
    if getattr(request.app.state, "draining", False):
        raise TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; retry on another instance.")
    engine: TTSEngine | None = getattr(request.app.state, "engine", None)
    if engine is None:
        raise TTSError(ErrorCode.NOT_READY, "The model is still loading; retry when GET /ping answers 200.")
    return engine


async def read_body(request: Request, engine: TTSEngine) -> bytes:
    limit, timeout = engine.settings.max_message_bytes, engine.settings.body_timeout_s
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for part in request.stream():
                body += part
                if len(body) > limit:
                    raise TTSError(ErrorCode.MESSAGE_TOO_LARGE, f"The request body exceeds {limit} bytes.")
    except TimeoutError:
        raise TTSError(
            ErrorCode.REQUEST_TIMEOUT, f"The request body did not arrive within {timeout:g} s; send it at once."
        ) from None
    except ClientDisconnect:
        log.info("a client left while sending its request body (%d bytes received)", len(body))
        raise ClientGone from None
    return bytes(body)


def utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TTSError(ErrorCode.INVALID_UTF8, f"The body is not UTF-8 (byte {exc.start}).") from None


def json_body(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(utf8(body))
    except (ValueError, RecursionError):
        raise TTSError(ErrorCode.INVALID_JSON, "The body is not valid JSON.") from None
    if not isinstance(value, dict):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "The JSON body must be an object.")
    return value


# A route's body: the bytes that a run's event, or its ending, add to the response (b"": none).
Render = Callable[[Event | Ending], bytes]


def audio_only(event: Event | Ending) -> bytes:
    """The body of a route that sends the audio alone."""
    return event.data if isinstance(event, Audio) else b""


class SpeechResponse(Response):
    """Speaks ``utterance`` as the response (engine/runs.py's run on an HTTP stream), its body from ``render``.

    The response starts at the first audio, so everything before it (server_busy, nothing_to_speak) is raised for
    the route's error path and a client that left gets nothing (``ClientGone``). After it, a refusal the body can carry
    (SSE's error event) ends the body; any other, or a client that falls behind its audio (slow_reader: the stream's
    slot went to another caller), cuts the body off without its end (HTTP/1.1: the connection closes before the last
    chunk; HTTP/2: the stream is reset), so the client sees a failed response, never a short one that looks whole."""

    def __init__(
        self,
        engine: TTSEngine,
        utterance: Utterance,
        render: Render,
        media_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.engine, self.utterance, self.body_of = engine, utterance, render
        self.status_code, self.media_type, self.background = 200, media_type, None
        self.init_headers({**(headers or {}), "Cache-Control": "no-store"})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        route = metrics.route_of(scope["path"])
        stream = Stream.for_http(self.engine, metrics.RouteMeter(route))  # server_busy past the HTTP cap
        started = False

        async def out(event: Event) -> None:
            nonlocal started
            if isinstance(event, Started):
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                started = True
            elif data := self.body_of(event):
                await send({"type": "http.response.body", "body": data, "more_body": True})

        watching = asyncio.create_task(_stop_when_gone(receive, self.utterance))
        try:
            ending = await stream.speak(self.utterance, out)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            stream.close()
        if isinstance(ending, Stopped):
            if not started:
                log.info("a client left before its first audio; its synthesis is dropped")
                raise ClientGone
            return
        if isinstance(ending, Refused):
            if not started:
                raise ending.error
            metrics.error(route, ending.error.code)
            if ending.error.code is ErrorCode.SLOW_READER or not (data := self.body_of(ending)):
                log.info("an HTTP synthesis was cut off: %s", ending.error.code)
                return
        else:
            data = self.body_of(ending)
        await send({"type": "http.response.body", "body": data, "more_body": False})


async def _stop_when_gone(receive: Any, utterance: Utterance) -> None:
    """Stops ``utterance`` when its client leaves (its socket closed, its HTTP/2 stream reset)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    utterance.cancel()
