"""HTTP routes: GET /ping, GET /health, POST /invocations (SageMaker) and POST /v1/audio/speech (OpenAI-compatible).

Both POST routes stream: the first chunk is synthesized before the response starts (so a request with nothing
speakable still gets a 4xx), then each later chunk's bytes leave as soon as they exist. Work is done only for a
client still there: the body must arrive within ``body_timeout_s``, and a client that leaves (socket closed,
HTTP/2 stream reset) while its first chunk waits or streams stops its synthesis at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from kokoro_client.errors import INTERNAL_ERROR_MESSAGE, ErrorCode, TTSError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .audio import AudioFormat, audio_format, make_encoder, output_rate
from .engine import AudioChunk, SpeechRequest, TTSEngine

log = logging.getLogger(__name__)

# OpenAI's voice names, for clients that send them unchanged.
OPENAI_VOICES = {
    "alloy": "af_alloy",
    "ash": "am_adam",
    "coral": "af_heart",
    "echo": "am_echo",
    "fable": "bm_fable",
    "nova": "af_nova",
    "onyx": "am_onyx",
    "sage": "af_sarah",
    "shimmer": "af_bella",
}


def error_response(error: TTSError) -> JSONResponse:
    return JSONResponse({"error": error.to_dict()}, status_code=error.http_status)


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


async def ping(request: Request) -> Response:
    if getattr(request.app.state, "draining", False):
        return JSONResponse({"status": "shutting_down"}, status_code=503)
    if getattr(request.app.state, "engine", None) is None:
        return JSONResponse({"status": "loading"}, status_code=503)
    return JSONResponse({"status": "ok"})


# --- health: what is serving, cheaply; through SageMaker only /invocations is reachable, so the same answer comes
# back from InvokeEndpoint with CustomAttributes="health" (SageMaker forwards it in this header).
CUSTOM_ATTRIBUTES = "x-amzn-sagemaker-custom-attributes"


def health_document(engine: TTSEngine) -> dict[str, Any]:
    """{status, backend, device, model_file, model_sha256 (from the layout's manifest), version}."""
    from importlib.metadata import PackageNotFoundError, version

    from .weights.layout import LayoutError, WeightLayout

    backend = engine.backend
    try:
        entry = WeightLayout(engine.settings.model_dir).read_manifest().files.get(backend.model_file)
    except LayoutError:
        entry = None
    try:
        package_version = version("kokoro-voice-agent")
    except PackageNotFoundError:
        package_version = "unknown"
    return {
        "status": "ok",
        "backend": backend.name,
        "device": backend.device,
        "model_file": backend.model_file,
        "model_sha256": entry.sha256 if entry else None,
        "version": package_version,
    }


async def health(request: Request) -> Response:
    engine: TTSEngine | None = getattr(request.app.state, "engine", None)
    if engine is None:
        return JSONResponse({"status": "loading"}, status_code=503)
    return JSONResponse(health_document(engine), headers={"Cache-Control": "no-store"})


def asks_for_health(request: Request) -> bool:
    attributes = request.headers.get(CUSTOM_ATTRIBUTES, "")
    return "health" in {a.strip().lower() for a in attributes.replace(";", ",").split(",")}


async def invocations(request: Request) -> Response:
    if asks_for_health(request):
        return await health(request)
    try:
        engine = engine_of(request)
        body = await _read_body(request, engine)
        fields = _invocation_fields(request, body)
        speech = engine.request(fields.get("text"), fields.get("voice"), fields.get("speed"))
        fmt = audio_format(fields.get("format", "pcm"))
        return await _stream(request, engine, speech, fmt, output_rate(fmt, fields.get("sample_rate")))
    except TTSError as error:
        return error_response(error)
    except ClientGone:
        return GONE


async def openai_speech(request: Request) -> Response:
    try:
        engine = engine_of(request)
        body = await _read_body(request, engine)
        fields = _json_body(body)
        model = fields.get("model", "kokoro")
        if not isinstance(model, str):
            raise TTSError(ErrorCode.INVALID_MESSAGE, "'model' must be a string such as 'kokoro'.")
        voice = fields.get("voice")
        if isinstance(voice, str):
            voice = OPENAI_VOICES.get(voice, voice)
        speech = engine.request(fields.get("input"), voice, fields.get("speed"))
        fmt = audio_format(fields.get("response_format", "mp3"))
        return await _stream(request, engine, speech, fmt)
    except TTSError as error:
        return error_response(error)
    except ClientGone:
        return GONE


async def _read_body(request: Request, engine: TTSEngine) -> bytes:
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


def _invocation_fields(request: Request, body: bytes) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" or (not content_type and body.lstrip().startswith(b"{")):
        return _json_body(body)
    if content_type in ("", "text/plain"):
        return {"text": _utf8(body)}
    raise TTSError(
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        f"Content-Type {content_type!r} is not supported; send application/json or text/plain.",
    )


def _utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TTSError(ErrorCode.INVALID_UTF8, f"The body is not UTF-8 (byte {exc.start}).") from None


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(_utf8(body))
    except (ValueError, RecursionError):
        raise TTSError(ErrorCode.INVALID_JSON, "The body is not valid JSON.") from None
    if not isinstance(value, dict):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "The JSON body must be an object.")
    return value


async def _stream(
    request: Request, engine: TTSEngine, speech: SpeechRequest, fmt: AudioFormat, sample_rate: int | None = None
) -> Response:
    sample_rate = fmt.default_rate if sample_rate is None else sample_rate
    engine.http_streams.acquire()  # released when the response ends, however it ends
    try:
        chunks = engine.stream(speech)
        with engine.waiting.hold():
            first = await _first_chunk(request, chunks)
    except BaseException:
        engine.http_streams.release()
        raise
    if first is None:
        engine.http_streams.release()
        raise TTSError(ErrorCode.NOTHING_TO_SPEAK, "The text has nothing that can be spoken in this voice.")
    headers = {"X-Sample-Rate": str(sample_rate), "Cache-Control": "no-store"}
    body = _encoded(first, chunks, fmt, sample_rate)
    return _SynthesisResponse(engine, chunks, body, media_type=fmt.content_type(sample_rate), headers=headers)


class _SynthesisResponse(StreamingResponse):
    """Starlette stops the body when the client disconnects while it streams; this also ends the synthesis and
    frees the HTTP slot, however the response ends (even if it never started)."""

    def __init__(self, engine: TTSEngine, chunks: AsyncGenerator[AudioChunk], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._engine, self._chunks = engine, chunks

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._chunks.aclose()
            self._engine.http_streams.release()


async def _first_chunk(request: Request, chunks: AsyncGenerator[AudioChunk]) -> AudioChunk | None:
    """The first chunk, unless the client leaves first: then its synthesis is dropped and ``ClientGone`` raised."""
    first = asyncio.ensure_future(anext(chunks, None))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({first, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not first.done():
            first.cancel()
        await asyncio.gather(first, gone, return_exceptions=True)
    if first.cancelled():
        await chunks.aclose()
        log.info("a client left before its first audio chunk; its synthesis is dropped")
        raise ClientGone
    try:
        return first.result()
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


async def _encoded(
    first: AudioChunk, rest: AsyncGenerator[AudioChunk], fmt: AudioFormat, sample_rate: int
) -> AsyncIterator[bytes]:
    encoder = make_encoder(fmt, sample_rate)
    async with aclosing(rest):
        if data := encoder.encode(first.pcm):
            yield data
        async for chunk in rest:
            if data := encoder.encode(chunk.pcm):
                yield data
    if data := encoder.finish():
        yield data
