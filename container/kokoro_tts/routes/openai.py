"""OpenAI's speech API, so its clients work unchanged: POST /v1/audio/speech, GET /v1/audio/voices (Kokoro-FastAPI's
list, which Open WebUI reads), GET /v1/models and /v1/models/{id}.

The same engine and streaming as /invocations (routes/streaming.py), in OpenAI's vocabulary: ``input``,
``response_format`` (default mp3), ``speed`` 0.25–4.0 (tempo.py: the model's range, then a time-stretch),
OpenAI's voice names, ``stream_format`` "audio" (the bytes themselves) or "sse" (``speech.audio.delta`` events
carrying base64 audio in the requested format, then one ``speech.audio.done`` with ``usage``), and errors shaped
as OpenAI's, ``{"error": {"message", "type", "param", "code"}}``, with our stable code in ``code``.
"""

from __future__ import annotations

import base64
import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from kokoro_client.errors import ErrorCode, TTSError, quoted
from kokoro_client.json_messages import json_text
from kokoro_client.protocol import WordTiming
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kokoro_tts.audio.encoding import AudioFormat, OffLoopEncoder, audio_format, make_encoder, output_rate
from kokoro_tts.audio.tempo import TempoStretcher, split_speed
from kokoro_tts.engine.backends.stages import SAMPLES_PER_FRAME
from kokoro_tts.engine.events import Audio, Completed, Ending, Event, Refused, Words
from kokoro_tts.engine.requests import SpeechRequest, speed_within
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.engine.utterances import Pieces, Utterance
from kokoro_tts.routes import streaming
from kokoro_tts.routes.streaming import SpeechResponse, audio_only, engine_of, json_body, read_body

log = logging.getLogger(__name__)

# One model, Kokoro-82M, under its own name and OpenAI's speech model names (so a client's default works).
MODELS = ("kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
MODEL_OWNER = "hexgrad"
MODEL_CREATED = 1736294400  # 2025-01-08, Kokoro-82M v1.0's release: the Unix time OpenAI's model objects carry

# OpenAI's built-in voices → the Kokoro voice nearest in gender and accent.
OPENAI_VOICES = {
    "alloy": "af_alloy",
    "ash": "am_adam",
    "ballad": "bm_lewis",
    "cedar": "am_michael",
    "coral": "af_heart",
    "echo": "am_echo",
    "fable": "bm_fable",
    "marin": "af_river",
    "nova": "af_nova",
    "onyx": "am_onyx",
    "sage": "af_sarah",
    "shimmer": "af_bella",
    "verse": "am_puck",
}

# OpenAI's range, wider than the model's (kokoro_client.audio): past the model's, the audio is time-stretched.
OPENAI_MIN_SPEED, OPENAI_MAX_SPEED = 0.25, 4.0
STREAM_FORMATS = ("audio", "sse")

# The request field each code is about, for OpenAI's ``param``.
_PARAMS = {
    ErrorCode.MISSING_TEXT: "input",
    ErrorCode.EMPTY_TEXT: "input",
    ErrorCode.INVALID_TEXT: "input",
    ErrorCode.TEXT_TOO_LONG: "input",
    ErrorCode.NOTHING_TO_SPEAK: "input",
    ErrorCode.NUMBER_TOO_LONG: "input",
    ErrorCode.UNKNOWN_VOICE: "voice",
    ErrorCode.INVALID_VOICE: "voice",
    ErrorCode.UNSUPPORTED_LANGUAGE: "voice",
    ErrorCode.INVALID_SPEED: "speed",
    ErrorCode.UNSUPPORTED_FORMAT: "response_format",
    ErrorCode.UNSUPPORTED_SAMPLE_RATE: "sample_rate",
    ErrorCode.UNKNOWN_MODEL: "model",
}


class _FieldError(TTSError):
    """A ``TTSError`` about a field the code alone does not name (``stream_format`` vs ``response_format``)."""

    def __init__(self, code: ErrorCode, message: str, param: str) -> None:
        super().__init__(code, message)
        self.param = param


def openai_error(error: TTSError) -> dict[str, Any]:
    # The engine's messages name our field 'text'; this route's client sent 'input'.
    return {
        "message": error.message.replace("'text'", "'input'"),
        "type": "server_error" if error.http_status >= 500 else "invalid_request_error",
        "param": getattr(error, "param", None) or _PARAMS.get(error.code),
        "code": error.code.value,
    }


def error_response(error: TTSError) -> JSONResponse:
    return streaming.error_response(error, openai_error(error))


# --- POST /v1/audio/speech


@dataclass(frozen=True)
class SpeechBody:
    """The fields of OpenAI's speech body, checked: what /v1/audio/speech and /dev/captioned_speech both read."""

    speech: SpeechRequest
    fmt: AudioFormat
    tempo: float  # the time-stretch after the model (1.0: none)
    sample_rate: int  # an extension to OpenAI's fields, as on every route here: 8 to 48 kHz
    input_chars: int  # the characters of ``input`` as sent (usage.input_tokens)

    @property
    def content_type(self) -> str:
        return self.fmt.content_type(self.sample_rate)

    def output(self) -> Output:
        """A fresh encoder for this body's audio (stretched, resampled and encoded off the event loop)."""
        return OffLoopEncoder(lambda: _Output(self.fmt, self.tempo, self.sample_rate))

    def utterance(self, output: Output, *, word_timestamps: bool) -> Utterance:
        """The body's speech as one utterance, its audio through ``output``."""
        pieces = Pieces.whole(self.speech)
        return Utterance("http", pieces, self.fmt, self.sample_rate, output, word_timestamps)


def speech_body(engine: TTSEngine, fields: dict[str, Any]) -> SpeechBody:
    """OpenAI's speech fields (``model``, ``input``, ``voice``, ``speed``, ``response_format``, ``sample_rate``)
    checked; null is the default, as if omitted. Fields a route adds are the route's to check."""
    fields = without_nulls(fields)
    model = fields.get("model", "kokoro")
    if not isinstance(model, str):
        raise _FieldError(ErrorCode.INVALID_MESSAGE, "'model' must be a string such as 'kokoro'.", "model")
    _check_model(model)
    speed = speed_within(fields.get("speed", 1.0), OPENAI_MIN_SPEED, OPENAI_MAX_SPEED)
    model_speed, tempo = split_speed(speed, engine.settings.min_speed, engine.settings.max_speed)
    speech = engine.rules.speech(
        fields.get("input"), voice_spec(fields.get("voice")), model_speed, literal=fields.get("literal")
    )
    fmt = audio_format(fields.get("response_format", "mp3"))
    rate = output_rate(fmt, fields.get("sample_rate"))
    input_chars = len(speech_input) if isinstance(speech_input := fields.get("input"), str) else 0
    return SpeechBody(speech, fmt, tempo, rate, input_chars)


def without_nulls(fields: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


@dataclass(frozen=True)
class _SpeechParams:
    body: SpeechBody
    sse: bool
    word_timestamps: bool  # an extension: SSE only, ``speech.audio.words`` events before the audio they time


def _speech_params(engine: TTSEngine, fields: dict[str, Any]) -> _SpeechParams:
    body = speech_body(engine, fields)
    fields = without_nulls(fields)
    stream_format = fields.get("stream_format", "audio")
    if stream_format not in STREAM_FORMATS:
        raise _FieldError(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"Unsupported stream_format {quoted(stream_format)}; use 'audio' or 'sse'.",
            "stream_format",
        )
    word_timestamps = fields.get("word_timestamps", False)
    if not isinstance(word_timestamps, bool):
        raise _FieldError(ErrorCode.INVALID_MESSAGE, "'word_timestamps' must be true or false.", "word_timestamps")
    if word_timestamps and stream_format != "sse":
        raise _FieldError(
            ErrorCode.INVALID_MESSAGE,
            "'word_timestamps' needs stream_format 'sse' (or POST /dev/captioned_speech).",
            "word_timestamps",
        )
    return _SpeechParams(body, stream_format == "sse", word_timestamps)


def voice_spec(voice: object) -> object:
    """A Kokoro voice or blend as is; OpenAI's names mapped; OpenAI's ``{"id": ...}`` voice object unwrapped."""
    if isinstance(voice, dict) and set(voice) == {"id"}:
        voice = voice["id"]
    if isinstance(voice, str):
        return OPENAI_VOICES.get(voice.strip().lower(), voice)
    return voice


async def speech(request: Request) -> Response:
    engine = engine_of(request)
    params = _speech_params(engine, json_body(await read_body(request, engine)))
    body = params.body
    output = body.output()
    utterance = body.utterance(output, word_timestamps=params.word_timestamps)
    media_type = "text/event-stream" if params.sse else body.content_type
    render = _SSE(output, _Usage(input_tokens=body.input_chars), body.tempo).render if params.sse else audio_only
    return SpeechResponse(engine, utterance, render, media_type, {"X-Sample-Rate": str(body.sample_rate)})


class _Output:
    """PCM → the time-stretch (if any) → the requested container, chunk by chunk (run off the loop: a stretch to
    0.25 and AAC at 48 kHz are the costliest output there is)."""

    def __init__(self, fmt: AudioFormat, tempo: float, sample_rate: int) -> None:
        self._encoder = make_encoder(fmt, sample_rate)
        self._stretcher = TempoStretcher(tempo) if tempo != 1.0 else None
        self.model_samples = 0  # before the stretch: what the model made

    def encode(self, pcm: np.ndarray) -> bytes:
        self.model_samples += pcm.size
        return self._encoder.encode(self._stretcher.process(pcm) if self._stretcher else pcm)

    def finish(self) -> bytes:
        tail = self._encoder.encode(self._stretcher.finish()) if self._stretcher else b""
        return tail + self._encoder.finish()


Output = OffLoopEncoder[_Output]


# --- stream_format "sse": OpenAI's events, each one bare ``data: {json}`` line and a blank line.


@dataclass
class _Usage:
    """OpenAI counts tokens; Kokoro's nearest units: the characters of ``input`` as the client sent them and the
    25 ms frames its decoder made (before any time-stretch)."""

    input_tokens: int
    output_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        total = self.input_tokens + self.output_tokens
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "total_tokens": total}


def audio_delta(data: bytes) -> dict[str, Any]:
    return {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}


def audio_done(usage: _Usage) -> dict[str, Any]:
    return {"type": "speech.audio.done", "usage": usage.to_dict()}


def audio_words(words: tuple[WordTiming, ...], tempo: float) -> dict[str, Any]:
    """Our extension event: the words whose audio starts in the next delta, times in ms of the (stretched) audio."""
    timed = [
        {**asdict(w), "start_ms": round(w.start_ms / tempo, 1), "end_ms": round(w.end_ms / tempo, 1)} for w in words
    ]
    return {"type": "speech.audio.words", "words": timed}


@dataclass
class _SSE:
    """The events of ``stream_format`` "sse": the words (if asked for) and the audio as they come, then
    ``speech.audio.done`` with the usage, or an ``error`` event when the synthesis fails after the stream started."""

    output: Output
    usage: _Usage
    tempo: float

    def render(self, event: Event | Ending) -> bytes:
        match event:
            case Words(words=words):
                return _encode(audio_words(words, self.tempo))
            case Audio(data=data):
                return _encode(audio_delta(data))
            case Completed():
                model_samples = self.output.encoder.model_samples if self.output.encoder else 0
                self.usage.output_tokens = math.ceil(model_samples / SAMPLES_PER_FRAME)
                return _encode(audio_done(self.usage))
            case Refused(error=error):
                return _encode({"type": "error", "error": openai_error(error)})
        return b""


def _encode(event: dict[str, Any]) -> bytes:
    return ServerSentEvent(json_text(event, separators=(",", ":")), sep="\n").encode()


# --- GET /v1/audio/voices, /v1/models, /v1/models/{id}


async def voices(request: Request) -> Response:
    """Every voice this server can speak (packs whose language the phonemizer supports), as Kokoro-FastAPI lists
    them; OpenAI's names are aliases of some of these, not voices of their own."""
    return JSONResponse({"voices": engine_of(request).voices.names})


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": MODEL_CREATED, "owned_by": MODEL_OWNER}


def _check_model(model_id: str) -> None:
    if model_id not in MODELS:
        raise TTSError(
            ErrorCode.UNKNOWN_MODEL,
            f"The model {quoted(model_id)} does not exist here; use one of: {', '.join(MODELS)} (all Kokoro-82M).",
        )


async def models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [_model(model_id) for model_id in MODELS]})


async def model(request: Request) -> Response:
    model_id = request.path_params["model_id"]
    _check_model(model_id)
    return JSONResponse(_model(model_id))
