"""Session protocol v1 (docs/protocol.md): client messages parsed into typed commands.

A message arrives in a text or a binary frame (SageMaker hands client payloads over as binary frames, UTF-8).
Parsing never raises anything but ``TTSError``, so a malformed message costs the client one error frame and
never its session.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import ErrorCode, TTSError

MESSAGE_TYPES = ("synthesize", "config", "cancel", "close")
_UNSET: Any = object()


@dataclass(frozen=True)
class Synthesize:
    text: object
    id: str | None = None
    voice: object = None
    speed: object = None


@dataclass(frozen=True)
class Config:
    voice: object = _UNSET
    speed: object = _UNSET
    format: object = _UNSET


@dataclass(frozen=True)
class Cancel:
    id: str | None = None


@dataclass(frozen=True)
class Close:
    pass


Command = Synthesize | Config | Cancel | Close


def is_set(value: object) -> bool:
    return value is not _UNSET


def parse_message(raw: str | bytes, max_bytes: int) -> Command:
    if len(raw) > max_bytes:
        raise TTSError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The message has {len(raw)} bytes; the limit is {max_bytes}. Send long text as several utterances.",
        )
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TTSError(
                ErrorCode.INVALID_UTF8,
                f"A binary message must be UTF-8 text; byte {exc.start} is not valid UTF-8.",
            ) from None
    if not raw.lstrip().startswith("{"):
        return Synthesize(text=raw)
    return _command(_json_object(raw))


def _json_object(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except RecursionError:
        raise TTSError(ErrorCode.INVALID_JSON, "The message is nested too deeply to be a protocol message.") from None
    except ValueError as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "invalid JSON"
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise TTSError(
            ErrorCode.INVALID_JSON, f"The message starts with '{{' but is not valid JSON: {reason}{where}."
        ) from None
    if not isinstance(value, dict):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "A JSON message must be an object.")
    return value


def _command(message: dict[str, Any]) -> Command:
    kind = message.get("type", _UNSET)
    if kind is _UNSET:
        if "text" in message:
            kind = "synthesize"
        else:
            raise TTSError(
                ErrorCode.INVALID_MESSAGE,
                f"The message has no 'type'; use one of: {', '.join(MESSAGE_TYPES)}.",
            )
    if kind not in MESSAGE_TYPES:
        raise TTSError(
            ErrorCode.UNKNOWN_TYPE,
            f"Unknown message type {kind!r}; use one of: {', '.join(MESSAGE_TYPES)}.",
        )
    if kind == "synthesize":
        if "text" not in message:
            raise TTSError(ErrorCode.MISSING_TEXT, "A synthesize message needs 'text'.")
        return Synthesize(
            text=message["text"],
            id=_utterance_id(message.get("id")),
            voice=message.get("voice"),
            speed=message.get("speed"),
        )
    if kind == "config":
        return Config(
            voice=message.get("voice", _UNSET),
            speed=message.get("speed", _UNSET),
            format=message.get("format", _UNSET),
        )
    if kind == "cancel":
        return Cancel(id=_utterance_id(message.get("id")))
    return Close()


MAX_ID_CHARS = 128


def _utterance_id(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TTSError(ErrorCode.INVALID_ID, "'id' must be a string of at most 128 characters, or an integer.")
    if isinstance(value, int):
        if not -(10**MAX_ID_CHARS) < value < 10**MAX_ID_CHARS:
            raise TTSError(ErrorCode.INVALID_ID, f"An integer 'id' may have at most {MAX_ID_CHARS} digits.")
        return str(value)
    if len(value) > MAX_ID_CHARS:
        raise TTSError(ErrorCode.INVALID_ID, f"'id' may have at most {MAX_ID_CHARS} characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800"): it could never be sent back
        raise TTSError(ErrorCode.INVALID_ID, "'id' must be valid Unicode text (it holds a lone surrogate).") from None
    return value
