"""SageMaker's routes: GET /ping, GET /health (or /invocations asking for it), POST /invocations (text or JSON in,
audio out, streamed as routes/streaming.py streams every synthesis)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kokoro_client.errors import ErrorCode, TTSError, quoted
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kokoro_tts.audio.encoding import AudioFormat, audio_format, output_rate
from kokoro_tts.engine.requests import SpeechRequest
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.engine.utterances import Pieces, Utterance
from kokoro_tts.routes.streaming import SpeechResponse, audio_only, engine_of, json_body, read_body, utf8


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
    """{status, backend, device, model_file, model_sha256 (from the layout's manifest), fused_snake and direct_conv
    (whether the generator runs the fused Snake kernel, the direct int8 convolution: engine/backends/kernels.py),
    batch (how many streams' chunks one model call takes at most: engine/scheduler.py), version}."""
    from importlib.metadata import PackageNotFoundError, version

    from kokoro_tts.weights.layout import LayoutError, WeightLayout

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
        "fused_snake": engine.fused_snake,
        "direct_conv": engine.direct_conv,
        "batch": engine.backend.batch_limit,
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


@dataclass(frozen=True)
class Invocation:
    """An /invocations body, every field checked: what to say (text, voice, speed) and how to send it."""

    speech: SpeechRequest
    fmt: AudioFormat
    sample_rate: int

    @classmethod
    def parse(cls, engine: TTSEngine, fields: dict[str, Any]) -> Invocation:
        speech = engine.rules.speech(
            fields.get("text"), fields.get("voice"), fields.get("speed"), literal=fields.get("literal")
        )
        fmt = audio_format(fields.get("format", "pcm"))
        return cls(speech, fmt, output_rate(fmt, fields.get("sample_rate")))


async def invocations(request: Request) -> Response:
    if asks_for_health(request):
        return await health(request)
    engine = engine_of(request)
    body = await read_body(request, engine)
    invocation = Invocation.parse(engine, _invocation_fields(request, body))
    return _spoken(engine, invocation)


def _invocation_fields(request: Request, body: bytes) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" or (not content_type and body.lstrip().startswith(b"{")):
        return json_body(body)
    if content_type in ("", "text/plain"):
        return {"text": utf8(body)}
    raise TTSError(
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        f"Content-Type {quoted(content_type)} is not supported; send application/json or text/plain.",
    )


def _spoken(engine: TTSEngine, invocation: Invocation) -> Response:
    fmt, rate = invocation.fmt, invocation.sample_rate
    utterance = Utterance.in_format("http", Pieces.whole(invocation.speech), fmt, rate)
    return SpeechResponse(engine, utterance, audio_only, fmt.content_type(rate), {"X-Sample-Rate": str(rate)})
