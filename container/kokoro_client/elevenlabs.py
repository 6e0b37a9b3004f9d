"""The ElevenLabs-compatible sockets: ElevenLabs' text-to-speech WebSocket vocabulary, typed both ways.

Two paths, as ElevenLabs serves them: ``/v1/text-to-speech/{voice_id}/stream-input`` (one utterance a connection)
and ``.../multi-stream-input`` (contexts: several utterances on one connection, named by ``context_id``), which
Pipecat's ``ElevenLabsTTSService`` and LiveKit's ``elevenlabs`` plugin speak. docs/elevenlabs.md has the prose:
what is supported, mapped or ignored.

Client → server: JSON text messages (``text``, ``context_id``, ``flush``, ``close_context``, ``close_socket``,
``voice_settings``, ``generation_config``). Server → client: JSON text messages with the audio in base64 and its
character ``alignment``, a final message (``isFinal``) when an utterance or context has ended, and an error message
(``message``, ``error``: one of ``kokoro_client.errors.ErrorCode``) for a message refused.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .errors import ErrorCode, TTSError, quoted
from .json_messages import json_object, json_text

STREAM_INPUT_PATH: Final = "/v1/text-to-speech/{voice_id}/stream-input"
MULTI_STREAM_INPUT_PATH: Final = "/v1/text-to-speech/{voice_id}/multi-stream-input"
PROTOCOL_NAME: Final = "elevenlabs"
"""On SageMaker's one session path, ``?protocol=elevenlabs&voice_id=…`` selects ``multi-stream-input`` where only the
query (``ModelQueryString``) reaches the container, as ``?protocol=deepgram`` selects Deepgram's (deepgram.py)."""
DEFAULT_OUTPUT_FORMAT: Final = "mp3_44100_128"
"""What ElevenLabs sends when the query names no ``output_format``."""
_OUTPUT_FORMAT = re.compile(r"(pcm|ulaw|alaw|mp3)_(\d{4,5})(?:_\d{2,3})?")
_CODECS: Final = {"pcm": "pcm", "ulaw": "mulaw", "alaw": "alaw", "mp3": "mp3"}


def error_detail(error: TTSError) -> dict[str, Any]:
    """An HTTP refusal's body, in ElevenLabs' shape; ``status`` is the stable code."""
    return {"detail": {"status": error.code.value, "message": error.message}}


def output_format(name: str) -> tuple[str, int]:
    """ElevenLabs' ``output_format`` (``pcm_24000``, ``ulaw_8000``, ``mp3_44100_128``) as this server's format name
    and sample rate; an mp3 bitrate is the encoder's own. ``unsupported_format`` for one this server cannot send."""
    match = _OUTPUT_FORMAT.fullmatch(name)
    if match is None:
        raise TTSError(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"'output_format' {quoted(name)} is not one this server sends; use pcm_<rate> (8000, 16000, 22050, "
            "24000, 44100, 48000), ulaw_8000, alaw_8000 or mp3_<rate>_<bitrate>.",
        )
    return _CODECS[match[1]], int(match[2])


@dataclass(frozen=True)
class SendText:
    """Text for a context (``None``: the single context of ``stream-input``), and what may come with it.

    ``text`` "" keeps a context alive on ``multi-stream-input`` and ends the input on ``stream-input``; ``" "`` alone
    opens a context (with its ``voice_settings``); ``flush`` speaks what is buffered without waiting for a sentence
    end."""

    text: str | None
    context_id: str | None = None
    flush: bool = False
    voice_settings: Mapping[str, Any] | None = None
    generation_config: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class CloseContext:
    """No more text for the context: what was flushed is spoken, then its final message; a context closed while
    text of it was never flushed (a barge-in) is stopped at once."""

    context_id: str


@dataclass(frozen=True)
class CloseSocket:
    """Every context's text is spoken, then the connection closes."""


ClientMessage = SendText | CloseContext | CloseSocket


@dataclass(frozen=True)
class Alignment:
    """Characters of the text sent and when each is heard, in ms from the start of the message's audio."""

    chars: tuple[str, ...]
    char_start_times_ms: tuple[int, ...]
    char_durations_ms: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "chars": list(self.chars),
            "charStartTimesMs": list(self.char_start_times_ms),
            "charDurationsMs": list(self.char_durations_ms),
        }


@dataclass(frozen=True)
class AudioOutput:
    """Audio of a context, in order, with the characters whose sound starts in it."""

    audio: bytes
    context_id: str | None
    alignment: Alignment | None


@dataclass(frozen=True)
class FinalOutput:
    """The context (or the single utterance) has ended: nothing more of it comes."""

    context_id: str | None


@dataclass(frozen=True)
class ErrorOutput:
    """A message was refused (``error``: the stable code); the connection carries on unless a close follows."""

    message: str
    error: str
    context_id: str | None = None

    @classmethod
    def of(cls, error: TTSError, context_id: str | None = None) -> ErrorOutput:
        return cls(error.message, error.code.value, context_id)


ServerMessage = AudioOutput | FinalOutput | ErrorOutput


def encode(message: ServerMessage) -> str:
    value: dict[str, Any]
    match message:
        case AudioOutput(audio=audio, alignment=alignment):
            aligned = alignment.to_json() if alignment is not None else None
            value = {
                "audio": base64.b64encode(audio).decode("ascii"),
                "isFinal": False,
                "alignment": aligned,
                "normalizedAlignment": aligned,
            }
        case FinalOutput():
            value = {"isFinal": True}
        case ErrorOutput(message=text, error=code):
            value = {"message": text, "error": code}
    if message.context_id is not None:
        value["contextId"] = message.context_id
    return json_text(value)


def encode_client(message: ClientMessage) -> str:
    """A client's message as ElevenLabs' clients send it."""
    value: dict[str, Any]
    match message:
        case SendText(text=text, context_id=context_id, flush=flush):
            value = {"text": text} if text is not None else {}
            value |= {"context_id": context_id} if context_id is not None else {}
            value |= {"flush": True} if flush else {}
            for name in ("voice_settings", "generation_config"):
                if (given := getattr(message, name)) is not None:
                    value[name] = dict(given)
        case CloseContext(context_id=context_id):
            value = {"context_id": context_id, "close_context": True}
        case CloseSocket():
            value = {"close_socket": True}
    return json_text(value)


def parse_server_message(raw: str | bytes) -> ServerMessage:
    """A server's message as a typed one; ``TTSError(invalid_message)`` if it is not one."""
    try:
        value = json.loads(raw)
        context_id = value.get("contextId")
        if "message" in value:
            return ErrorOutput(value["message"], value["error"], context_id)
        if value.get("audio"):
            aligned = value.get("alignment")
            alignment = (
                Alignment(
                    tuple(aligned["chars"]), tuple(aligned["charStartTimesMs"]), tuple(aligned["charDurationsMs"])
                )
                if aligned
                else None
            )
            return AudioOutput(base64.b64decode(value["audio"]), context_id, alignment)
        if value.get("isFinal") is True:
            return FinalOutput(context_id)
        raise KeyError("isFinal")
    except (ValueError, RecursionError, AttributeError, KeyError, TypeError):
        raise TTSError(ErrorCode.INVALID_MESSAGE, f"not a message of the ElevenLabs socket: {raw[:200]!r}") from None


def parse_client_message(raw: str | bytes, max_bytes: int) -> ClientMessage:
    """A client's message, typed; ``TTSError`` (never anything else) if it is not one."""
    value = json_object(raw, max_bytes, '{"text": "Hello "}')
    context_id = value.get("context_id")
    if context_id is not None and (not isinstance(context_id, str) or not context_id or len(context_id) > 256):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "'context_id' must be a string of 1 to 256 characters.")
    if value.get("close_socket") is True:
        return CloseSocket()
    if value.get("close_context") is True:
        if context_id is None:
            raise TTSError(ErrorCode.INVALID_MESSAGE, "'close_context' needs the 'context_id' it closes.")
        return CloseContext(context_id)
    text = value.get("text")
    if text is not None and not isinstance(text, str):
        raise TTSError(ErrorCode.INVALID_TEXT, f"'text' must be a string, not {type(text).__name__}.")
    flush = value.get("flush", False)
    if not isinstance(flush, bool):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "'flush' must be true or false.")
    if text is None and not flush:
        raise TTSError(ErrorCode.MISSING_TEXT, "A message needs 'text', 'flush', 'close_context' or 'close_socket'.")
    settings, config = value.get("voice_settings"), value.get("generation_config")
    for name, given in (("voice_settings", settings), ("generation_config", config)):
        if given is not None and not isinstance(given, dict):
            raise TTSError(ErrorCode.INVALID_MESSAGE, f"{name!r} must be a JSON object.")
    return SendText(text, context_id, flush, settings, config)
