"""What every synthesis route shares: the request body read within its bounds, the engine (or why there is none),
and ``stream_speech``, which streams one utterance as an HTTP response.

Every POST route streams: the first chunk is synthesized before the response starts (so a request with nothing
speakable still gets a 4xx), then each later chunk's bytes leave as soon as they exist. Work is done only for a
client still there: the body must arrive within ``body_timeout_s``, and a client that leaves (socket closed,
HTTP/2 stream reset) while its first chunk waits or streams stops its synthesis at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from kokoro_client.errors import INTERNAL_ERROR_MESSAGE, ErrorCode, TTSError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from kokoro_tts import metrics
from kokoro_tts.audio.encoding import OffLoopEncoder
from kokoro_tts.engine.capacity import Pace
from kokoro_tts.engine.requests import SpeechRequest
from kokoro_tts.engine.scheduler import Interrupted, unless
from kokoro_tts.engine.synthesis import AudioChunk, TTSEngine

log = logging.getLogger(__name__)


def error_response(error: TTSError, body: dict[str, Any] | None = None) -> JSONResponse:
    """The refusal as JSON, ``{"error": body}`` (the error's own fields unless a route words it in its dialect),
    with its HTTP status and, when the client should come back, Retry-After."""
    headers = {"Retry-After": str(error.retry_after_s)} if error.retry_after_s is not None else None
    return JSONResponse(
        {"error": error.to_dict() if body is None else body}, status_code=error.http_status, headers=headers
    )


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


# The response body, from the first chunk (already synthesized) and the chunks after it.
Render = Callable[[AudioChunk, AsyncGenerator[AudioChunk]], AsyncIterator[bytes]]


async def stream_speech(
    request: Request,
    engine: TTSEngine,
    speech: SpeechRequest,
    render: Render,
    media_type: str,
    headers: dict[str, str] | None = None,
) -> Response:
    """Synthesize the first chunk (a 4xx if there is nothing to speak, ``ClientGone`` if the client leaves first),
    then stream ``render``'s bytes; the synthesis stops and the HTTP slot is freed however the response ends."""
    engine.scheduler.admit(engine.settings.max_first_audio_wait_s)  # server_busy when too far behind already
    route, started = metrics.route_of(request.url.path), time.perf_counter()
    stream = _Stream(engine)  # holds the HTTP slot, then a stream slot; freed when the response ends, however
    try:
        with engine.waiting.hold():
            await _admitted(request, engine, stream)
            chunks = engine.stream(speech)
            first = await _first_chunk(request, chunks)
    except BaseException:
        stream.release()
        raise
    if first is None:
        stream.release()
        raise TTSError(ErrorCode.NOTHING_TO_SPEAK, "The text has nothing that can be spoken in this voice.")
    first_audio_s = time.perf_counter() - started
    metrics.first_audio(route, first_audio_s)
    tally = _Tally(route, first_audio_s)
    tally.add(first)
    body = tally.until_done(render(first, tally.counting(chunks)))
    headers = {**(headers or {}), "Cache-Control": "no-store"}
    return _SynthesisResponse(stream, chunks, tally, body, media_type=media_type, headers=headers)


class _Stream:
    """An HTTP synthesis's hold on the engine's caps: an HTTP stream at once (``server_busy`` past the cap), and a
    stream slot before its first audio (``_admitted``)."""

    def __init__(self, engine: TTSEngine) -> None:
        self.engine = engine
        engine.http_streams.acquire()
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.engine.slots.release(self)
            self.engine.http_streams.release()


async def _admitted(request: Request, engine: TTSEngine, stream: _Stream) -> None:
    """Returns once ``stream`` holds a stream slot (engine/capacity.py): ``server_busy`` past the bounded wait,
    ``ClientGone`` if the client leaves while it waits."""
    if engine.slots.try_acquire(stream):  # a free slot: no wait to race against the client leaving
        return
    try:
        await unless(engine.slots.acquire(stream, engine.settings.max_first_audio_wait_s), _disconnected(request))
    except Interrupted:
        metrics.utterance_cancelled(metrics.route_of(request.url.path))
        log.info("a client left while waiting for a stream slot")
        raise ClientGone from None


@dataclass
class _Tally:
    """What a streamed response has sent, for its metrics when it ends."""

    route: str
    first_audio_s: float
    audio_ms: float = 0.0
    synth_ms: float = 0.0
    done: bool = False

    def add(self, chunk: AudioChunk) -> None:
        self.audio_ms += chunk.audio_ms
        self.synth_ms += chunk.synth_ms

    async def counting(self, chunks: AsyncGenerator[AudioChunk]) -> AsyncGenerator[AudioChunk]:
        async with aclosing(chunks):
            async for chunk in chunks:
                self.add(chunk)
                yield chunk

    async def until_done(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for data in body:
            yield data
        self.done = True

    def ended(self) -> None:
        metrics.audio_sent(self.route, self.audio_ms)
        if self.done:
            metrics.utterance_completed(self.route, self.audio_ms, self.synth_ms, self.first_audio_s)
        else:
            metrics.utterance_cancelled(self.route)


class _SynthesisResponse(StreamingResponse):
    """Starlette stops the body when the client disconnects while it streams; this also ends the synthesis and
    frees the stream's slots, however the response ends (even if it never started). Its client must read the audio
    about as fast as it plays (engine/capacity.py's ``Pace``): one that falls further behind gives its stream slot
    up and its body is cut off without its end (HTTP/1.1: the connection closes before the last chunk; HTTP/2: the
    stream is reset), so the client sees a failed response, never a short one that looks whole."""

    def __init__(
        self, stream: _Stream, chunks: AsyncGenerator[AudioChunk], tally: _Tally, *args: Any, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._stream, self._chunks, self._tally = stream, chunks, tally

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except (ClientDisconnect, OSError):  # the client left: counted as cancelled
            raise
        except Exception:
            metrics.error(self._tally.route, ErrorCode.INTERNAL_ERROR)
            raise
        finally:
            try:
                self._tally.ended()
                await self._chunks.aclose()
            finally:
                self._stream.release()

    async def stream_response(self, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        engine, loop = self._stream.engine, asyncio.get_running_loop()
        pace = Pace(engine.slots, self._stream, engine.settings.stream_lag_s, cut_off=True, lends=True)
        body, credited = aiter(self.body_iterator), 0.0
        while True:
            asked = loop.time()
            await pace.ready()
            data = await anext(body, None)
            if data is None:
                break
            pace.waited(asked)
            audio_s, credited = self._tally.audio_ms / 1000.0 - credited, self._tally.audio_ms / 1000.0
            chunk = data if isinstance(data, bytes | memoryview) else data.encode(self.charset)
            await pace.send(send({"type": "http.response.body", "body": chunk, "more_body": True}), audio_s)
            if pace.behind:  # its slot is given up already: end without the body's end
                metrics.error(self._tally.route, ErrorCode.SLOW_READER)
                log.info("an HTTP synthesis was cut off: its client fell behind its audio (slow_reader)")
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _first_chunk(request: Request, chunks: AsyncGenerator[AudioChunk]) -> AudioChunk | None:
    """The first chunk, unless the client leaves first: then its synthesis is dropped and ``ClientGone`` raised."""
    try:
        return await unless(anext(chunks, None), _disconnected(request))
    except Interrupted:
        await chunks.aclose()
        metrics.utterance_cancelled(metrics.route_of(request.url.path))
        log.info("a client left before its first audio chunk; its synthesis is dropped")
        raise ClientGone from None
    except TTSError:
        await chunks.aclose()
        raise
    except Exception:
        await chunks.aclose()
        log.exception("synthesis failed before the first chunk")
        raise TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE) from None


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def first_then(first: AudioChunk, rest: AsyncGenerator[AudioChunk]) -> AsyncGenerator[AudioChunk]:
    """The first chunk (already synthesized), then the rest. A render closes it (``aclosing``) rather than leave it
    to the collector, so the synthesis is over before the response's own cleanup runs."""
    yield first
    async with aclosing(rest):
        async for chunk in rest:
            yield chunk


async def encoded(
    first: AudioChunk, rest: AsyncGenerator[AudioChunk], encoder: OffLoopEncoder[Any]
) -> AsyncIterator[bytes]:
    """The chunks' audio through ``encoder``, the encoder's tail last."""
    async with aclosing(first_then(first, rest)) as chunks:
        async for chunk in chunks:
            if data := await encoder.encode(chunk.pcm):
                yield data
    if data := await encoder.finish():
        yield data
