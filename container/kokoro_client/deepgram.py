"""The Deepgram-compatible session: Deepgram's TTS WebSocket vocabulary (``/v1/speak``), typed both ways.

Pipecat's Deepgram services (``DeepgramTTSService`` over a WebSocket, ``DeepgramSageMakerTTSService`` over
SageMaker's bidirectional stream) and other Deepgram clients speak it unchanged to this server; docs/protocol.md
has its prose. Client → server: ``Speak``, ``Flush``, ``Clear``, ``Close`` as JSON text (or UTF-8 binary) frames.
Server → client: the audio as binary frames with no container, and ``Metadata`` (at open), ``Flushed``,
``Cleared``, ``Warning`` (a message refused; the session carries on) and ``Error`` (the session cannot go on; a
close follows) as JSON text frames. ``code`` in a Warning or an Error is one of ``kokoro_client.errors.ErrorCode``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Self

from .errors import ErrorCode, TTSError, quoted
from .json_messages import json_object, json_text

SPEAK_PATH: Final = "/v1/speak"
"""Deepgram's path; on SageMaker's one path (``/invocations-bidirectional-stream``) the query selects it (below)."""
PROTOCOL_PARAM: Final = "protocol"
PROTOCOL_NAME: Final = "deepgram"
ENCODINGS: Final = {"linear16": "pcm", "mulaw": "mulaw", "alaw": "alaw"}
"""Deepgram's ``encoding`` query values → this server's format names (raw samples, no container)."""
DEFAULT_ENCODING: Final = "linear16"
CLOSE_INVALID_PARAMETERS: Final = 1008
"""The query parameters were refused (an ``Error`` message says which); Deepgram answers such a request with 400."""

MESSAGE_TYPES: Final = ("Speak", "Flush", "Clear", "Close")


def selects_deepgram(query: Mapping[str, str]) -> bool:
    """Whether a connection to the session path asks for this vocabulary: ``?protocol=deepgram``, or Deepgram's own
    query parameters (``model``, ``encoding``: the session protocol takes none), as Pipecat's SageMaker service
    sends them in ``ModelQueryString``."""
    return query.get(PROTOCOL_PARAM) == PROTOCOL_NAME or "model" in query or "encoding" in query


@dataclass(frozen=True)
class Speak:
    """Text to add to the buffer; whole sentences are spoken as soon as they are complete."""

    text: object


@dataclass(frozen=True)
class Flush:
    """Speak what is buffered, even without a sentence end; ``Flushed`` follows that audio."""


@dataclass(frozen=True)
class Clear:
    """Drop the buffer, the queue and the audio in flight; ``Cleared`` follows the last audio sent."""


@dataclass(frozen=True)
class Close:
    """Speak what is buffered and queued, then close with 1000."""


@dataclass(frozen=True)
class Metadata:
    """Sent once, as the session opens: which model speaks (``model_name`` names the voice)."""

    request_id: str
    model_name: str
    model_version: str
    model_uuid: str


@dataclass(frozen=True)
class _Answer:
    sequence_id: int  # one count over Flush and Clear: each answer names its own


class Flushed(_Answer):
    """The audio of everything before the Flush has been sent."""


class Cleared(_Answer):
    """No audio of the cleared text comes after this."""


@dataclass(frozen=True)
class _Notice:
    code: str  # one of kokoro_client.errors.ErrorCode
    description: str

    @classmethod
    def of(cls, error: TTSError) -> Self:
        return cls(error.code.value, error.message)


class WarningMessage(_Notice):
    """``{"type":"Warning"}``: a message was refused; the session carries on."""


class ErrorMessage(_Notice):
    """``{"type":"Error"}``: the session cannot go on; a close follows."""


Command = Speak | Flush | Clear | Close
ServerMessage = Metadata | Flushed | Cleared | WarningMessage | ErrorMessage
_TYPE_NAMES: dict[type, str] = {
    Speak: "Speak",
    Flush: "Flush",
    Clear: "Clear",
    Close: "Close",
    Metadata: "Metadata",
    Flushed: "Flushed",
    Cleared: "Cleared",
    WarningMessage: "Warning",
    ErrorMessage: "Error",
}


def encode(message: Command | ServerMessage) -> str:
    return json_text({"type": _TYPE_NAMES[type(message)], **vars(message)})


def parse_server_message(raw: str | bytes) -> ServerMessage:
    """A server's JSON text message as a typed one; ``TTSError(invalid_message)`` if it is not one."""
    try:
        value = json.loads(raw)
        kind = {name: cls for cls, name in _TYPE_NAMES.items()}[value.pop("type")]
        if kind not in (Metadata, Flushed, Cleared, WarningMessage, ErrorMessage):
            raise KeyError(kind)
        message: ServerMessage = kind(**value)
        return message
    except (ValueError, RecursionError, AttributeError, KeyError, TypeError):
        raise TTSError(ErrorCode.INVALID_MESSAGE, f"not a message of the Deepgram socket: {raw[:200]!r}") from None


def parse_command(raw: str | bytes, max_bytes: int) -> Command:
    """A client's message as a command; ``TTSError`` (never anything else) if it is not one."""
    value = json_object(raw, max_bytes, '{"type":"Flush"}')
    kind = value.get("type")
    if kind not in MESSAGE_TYPES:
        raise TTSError(
            ErrorCode.UNKNOWN_TYPE, f"Unknown message type {quoted(kind)}; use one of: {', '.join(MESSAGE_TYPES)}."
        )
    if kind == "Speak":
        if "text" not in value:
            raise TTSError(ErrorCode.MISSING_TEXT, "A Speak message needs 'text'.")
        return Speak(value["text"])
    return Flush() if kind == "Flush" else Clear() if kind == "Clear" else Close()
