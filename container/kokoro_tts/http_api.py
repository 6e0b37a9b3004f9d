"""HTTP routes: GET /ping, GET /health, POST /invocations (SageMaker) and POST /v1/audio/speech (OpenAI-compatible).

Both POST routes stream: the first chunk is synthesized before the response starts (so a request with nothing
speakable still gets a 4xx), then each later chunk's bytes leave as soon as they exist.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .audio import SAMPLE_RATE, AudioFormat, audio_format, make_encoder
from .engine import AudioChunk, SpeechRequest, TTSEngine
from .errors import INTERNAL_ERROR_MESSAGE, ErrorCode, TTSError

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


def engine_of(request: Request) -> TTSEngine:
    engine: TTSEngine | None = getattr(request.app.state, "engine", None)
    if engine is None:
        raise TTSError(ErrorCode.NOT_READY, "The model is still loading; retry when GET /ping answers 200.")
    return engine


async def ping(request: Request) -> Response:
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
        body = await _read_body(request, engine.settings.max_message_bytes)
        fields = _invocation_fields(request, body)
        speech = engine.request(fields.get("text"), fields.get("voice"), fields.get("speed"))
        fmt = audio_format(fields.get("format", "pcm"))
        return await _stream(engine, speech, fmt)
    except TTSError as error:
        return error_response(error)


async def openai_speech(request: Request) -> Response:
    try:
        engine = engine_of(request)
        body = await _read_body(request, engine.settings.max_message_bytes)
        fields = _json_body(body)
        model = fields.get("model", "kokoro")
        if not isinstance(model, str):
            raise TTSError(ErrorCode.INVALID_MESSAGE, "'model' must be a string such as 'kokoro'.")
        voice = fields.get("voice")
        if isinstance(voice, str):
            voice = OPENAI_VOICES.get(voice, voice)
        speech = engine.request(fields.get("input"), voice, fields.get("speed"))
        fmt = audio_format(fields.get("response_format", "mp3"))
        return await _stream(engine, speech, fmt)
    except TTSError as error:
        return error_response(error)


async def _read_body(request: Request, limit: int) -> bytes:
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            raise TTSError(ErrorCode.MESSAGE_TOO_LARGE, f"The request body exceeds {limit} bytes.")
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


async def _stream(engine: TTSEngine, speech: SpeechRequest, fmt: AudioFormat) -> Response:
    chunks = engine.stream(speech)
    try:
        first = await anext(chunks, None)
    except Exception:
        await chunks.aclose()
        log.exception("synthesis failed before the first chunk")
        raise TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE) from None
    if first is None:
        raise TTSError(ErrorCode.NOTHING_TO_SPEAK, "The text has nothing that can be spoken in this voice.")
    headers = {"X-Sample-Rate": str(SAMPLE_RATE), "Cache-Control": "no-store"}
    return StreamingResponse(_encoded(first, chunks, fmt), media_type=fmt.media_type, headers=headers)


async def _encoded(first: AudioChunk, rest: AsyncGenerator[AudioChunk], fmt: AudioFormat) -> AsyncIterator[bytes]:
    encoder = make_encoder(fmt)
    async with aclosing(rest):
        if data := encoder.encode(first.pcm):
            yield data
        async for chunk in rest:
            if data := encoder.encode(chunk.pcm):
                yield data
    if data := encoder.finish():
        yield data
