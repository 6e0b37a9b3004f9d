"""The Cartesia-compatible socket: Cartesia's text-to-speech WebSocket vocabulary (``/tts/websocket``), typed both ways.

Pipecat's ``CartesiaTTSService`` and LiveKit's ``cartesia`` plugin speak it. docs/cartesia.md has the prose: what is
supported, mapped or ignored. Client → server: generation requests (``transcript`` for a ``context_id``, with
``continue`` while more will follow) and cancels, as JSON text messages. Server → client: ``chunk`` (base64 audio),
``timestamps`` (words, in seconds from the context's start), ``done`` and ``error`` (``error_code``: one of
``kokoro_client.errors.ErrorCode``) messages, each naming its context.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .errors import ErrorCode, TTSError, quoted
from .json_messages import json_object, json_text

WEBSOCKET_PATH: Final = "/tts/websocket"
BYTES_PATH: Final = "/tts/bytes"
PROTOCOL_NAME: Final = "cartesia"
"""On SageMaker's one session path, ``?protocol=cartesia`` selects this socket where only the query reaches the
container (deepgram.py's ``PROTOCOL_PARAM``)."""
ENCODINGS: Final = {"pcm_s16le": "pcm", "pcm_mulaw": "mulaw", "pcm_alaw": "alaw"}
"""Cartesia's raw ``encoding`` values → this server's format names (``pcm_f32le`` is not one: docs/cartesia.md)."""
WAV_ENCODINGS: Final = {"pcm_s16le": "wav", "pcm_mulaw": "wav_mulaw", "pcm_alaw": "wav_alaw"}
"""The same in a WAV container (``POST /tts/bytes`` only; a socket sends raw samples)."""
MAX_CONTEXT_ID: Final = 256


@dataclass(frozen=True)
class Generate:
    """A generation request: ``transcript`` for ``context_id``; ``more`` (Cartesia's ``continue``) while more text of
    the context will follow. The voice, format and speed are read from a context's first request."""

    transcript: str
    context_id: str | None
    more: bool
    voice: str
    format: str  # this server's format name (``ENCODINGS``)
    sample_rate: int
    add_timestamps: bool
    speed: float | None


@dataclass(frozen=True)
class Cancel:
    """Stop the context: what it has not yet said is dropped."""

    context_id: str


ClientMessage = Generate | Cancel


@dataclass(frozen=True)
class BytesRequest:
    """``POST /tts/bytes``: the whole transcript, answered with its audio."""

    transcript: str
    voice: str
    format: str  # this server's format name
    sample_rate: int
    speed: float | None


@dataclass(frozen=True)
class Chunk:
    context_id: str
    audio: bytes


@dataclass(frozen=True)
class Timestamps:
    """Words whose audio starts in the next chunk, in seconds from the context's start."""

    context_id: str
    words: tuple[str, ...]
    start: tuple[float, ...]
    end: tuple[float, ...]


@dataclass(frozen=True)
class Done:
    context_id: str


@dataclass(frozen=True)
class ErrorMessage:
    """A request refused (``code``: the stable code); the socket carries on."""

    context_id: str | None
    code: str
    error: str

    @classmethod
    def of(cls, error: TTSError, context_id: str | None = None) -> ErrorMessage:
        return cls(context_id, error.code.value, error.message)


ServerMessage = Chunk | Timestamps | Done | ErrorMessage


def encode(message: ServerMessage) -> str:
    value: dict[str, Any]
    match message:
        case Chunk(audio=audio):
            data = base64.b64encode(audio).decode("ascii")
            value = {"type": "chunk", "data": data, "done": False, "status_code": 206}
        case Timestamps(words=words, start=start, end=end):
            timestamps = {"words": list(words), "start": list(start), "end": list(end)}
            value = {"type": "timestamps", "word_timestamps": timestamps, "done": False, "status_code": 206}
        case Done():
            value = {"type": "done", "done": True, "status_code": 200}
        case ErrorMessage(code=code, error=error):
            value = {"type": "error", "error_code": code, "title": code, "message": error, "done": True}
            value["status_code"] = 400
    value["context_id"] = message.context_id
    return json_text(value)


def encode_client(message: ClientMessage) -> str:
    """A client's message as Cartesia's clients send it (raw samples: the socket's only container)."""
    if isinstance(message, Cancel):
        return json_text({"context_id": message.context_id, "cancel": True})
    encoding = next(name for name, fmt in ENCODINGS.items() if fmt == message.format)
    value: dict[str, Any] = {
        "transcript": message.transcript,
        "continue": message.more,
        "voice": {"mode": "id", "id": message.voice},
        "output_format": {"container": "raw", "encoding": encoding, "sample_rate": message.sample_rate},
        "add_timestamps": message.add_timestamps,
    }
    if message.context_id is not None:
        value["context_id"] = message.context_id
    if message.speed is not None:
        value["generation_config"] = {"speed": message.speed}
    return json_text(value)


def parse_server_message(raw: str | bytes) -> ServerMessage:
    """A server's message as a typed one; ``TTSError(invalid_message)`` if it is not one."""
    try:
        value = json.loads(raw)
        context_id, kind = value["context_id"], value["type"]
        if kind == "chunk":
            return Chunk(context_id, base64.b64decode(value["data"]))
        if kind == "timestamps":
            stamps = value["word_timestamps"]
            return Timestamps(context_id, tuple(stamps["words"]), tuple(stamps["start"]), tuple(stamps["end"]))
        if kind == "done":
            return Done(context_id)
        if kind == "error":
            return ErrorMessage(context_id, value["error_code"], value["message"])
        raise KeyError(kind)
    except (ValueError, RecursionError, AttributeError, KeyError, TypeError):
        raise TTSError(ErrorCode.INVALID_MESSAGE, f"not a message of the Cartesia socket: {raw[:200]!r}") from None


def parse_client_message(raw: str | bytes, max_bytes: int) -> ClientMessage:
    """A client's message, typed; ``TTSError`` (never anything else) if it is not one."""
    value = json_object(raw, max_bytes, '{"context_id": "c1", "transcript": "Hello ", "continue": true, ...}')
    context_id = value.get("context_id")
    if context_id is not None and (
        not isinstance(context_id, str) or not context_id or len(context_id) > MAX_CONTEXT_ID
    ):
        raise TTSError(ErrorCode.INVALID_ID, f"'context_id' must be a string of 1 to {MAX_CONTEXT_ID} characters.")
    if value.get("cancel") is True:
        if context_id is None:
            raise TTSError(ErrorCode.INVALID_MESSAGE, "A cancel needs the 'context_id' it stops.")
        return Cancel(context_id)
    if "transcript" not in value:
        raise TTSError(ErrorCode.MISSING_TEXT, "A generation request needs 'transcript'.")
    transcript = value["transcript"]
    if not isinstance(transcript, str):
        raise TTSError(ErrorCode.INVALID_TEXT, f"'transcript' must be a string, not {type(transcript).__name__}.")
    more = value.get("continue", False)
    add_timestamps = value.get("add_timestamps", False)
    if not isinstance(more, bool) or not isinstance(add_timestamps, bool):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "'continue' and 'add_timestamps' must be true or false.")
    fmt, rate = _output_format(value.get("output_format"), containers=("raw",))
    return Generate(transcript, context_id, more, _voice(value.get("voice")), fmt, rate, add_timestamps, _speed(value))


def parse_bytes_request(value: Mapping[str, Any]) -> BytesRequest:
    """``POST /tts/bytes``'s JSON body, typed; ``TTSError`` if it is not one."""
    transcript = value.get("transcript")
    if transcript is None:
        raise TTSError(ErrorCode.MISSING_TEXT, "The request needs 'transcript'.")
    if not isinstance(transcript, str):
        raise TTSError(ErrorCode.INVALID_TEXT, f"'transcript' must be a string, not {type(transcript).__name__}.")
    fmt, rate = _output_format(value.get("output_format"), containers=("raw", "wav", "mp3"))
    return BytesRequest(transcript, _voice(value.get("voice")), fmt, rate, _speed(value))


def _voice(voice: object) -> str:
    """Cartesia's ``{"mode": "id", "id": ...}``, or the id alone: it names a Kokoro voice or blend."""
    if isinstance(voice, str):
        return voice
    if not isinstance(voice, Mapping) or voice.get("mode", "id") != "id" or not isinstance(voice.get("id"), str):
        raise TTSError(
            ErrorCode.INVALID_VOICE, 'A generation request needs \'voice\': {"mode": "id", "id": "af_heart"}.'
        )
    voice_id: str = voice["id"]
    return voice_id


def _output_format(output: object, containers: tuple[str, ...]) -> tuple[str, int]:
    container = output.get("container") if isinstance(output, Mapping) else None
    if not isinstance(output, Mapping) or container not in containers:
        raise TTSError(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"'output_format' must name a container ({', '.join(containers)}), an encoding and a sample_rate, "
            'such as {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}.',
        )
    encoding = output.get("encoding")
    encodings = {"raw": ENCODINGS, "wav": WAV_ENCODINGS}.get(str(container))
    if encodings is not None and encoding not in encodings:
        raise TTSError(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"'encoding' {quoted(encoding)} is not one this server sends; use one of: {', '.join(encodings)}.",
        )
    rate = output.get("sample_rate")
    if isinstance(rate, bool) or not isinstance(rate, int):
        raise TTSError(ErrorCode.UNSUPPORTED_SAMPLE_RATE, f"'sample_rate' must be an integer, not {quoted(rate)}.")
    return (encodings[str(encoding)] if encodings is not None else "mp3"), rate


def _speed(value: Mapping[str, Any]) -> float | None:
    """``generation_config.speed`` (Cartesia's 0.6–1.5, 1 the normal pace), else the older top-level ``speed`` as a
    number; None for the default pace."""
    config = value.get("generation_config")
    speed = config.get("speed") if isinstance(config, Mapping) else None
    if speed is None:
        legacy = value.get("speed")
        speed = legacy if isinstance(legacy, int | float) and not isinstance(legacy, bool) else None
    if speed is not None and (isinstance(speed, bool) or not isinstance(speed, int | float)):
        raise TTSError(ErrorCode.INVALID_SPEED, f"'speed' must be a number, not {quoted(speed)}.")
    return None if speed is None else float(speed)
