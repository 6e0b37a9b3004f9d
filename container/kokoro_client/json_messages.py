"""What the socket vocabularies (protocol.py, deepgram.py, elevenlabs.py, cartesia.py) share: a client's message read
as a JSON object, within the size cap, from a text frame or a UTF-8 binary one (SageMaker relays every part as
binary); and a message written as JSON text that a frame or a response body can carry."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .errors import ErrorCode, TTSError


def json_text(
    value: Any, default: Callable[[Any], Any] | None = None, separators: tuple[str, str] | None = None
) -> str:
    """``value`` as JSON text, its characters as they are, unless it holds a lone surrogate (a client's JSON may
    escape one, "\\ud800", and text echoed from it keeps it): UTF-8 cannot carry that, so the text is then escaped
    as JSON escapes it. ``default`` and ``separators``: json.dumps'."""
    text = json.dumps(value, ensure_ascii=False, default=default, separators=separators)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, default=default, separators=separators)
    return text


def json_object(raw: str | bytes, max_bytes: int, example: str) -> dict[str, Any]:
    """``raw`` as a JSON object; ``TTSError`` (never anything else) if it is not one. ``example`` shows a client
    what a message looks like."""
    if len(raw) > max_bytes:
        raise TTSError(ErrorCode.MESSAGE_TOO_LARGE, f"The message has {len(raw)} bytes; the limit is {max_bytes}.")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TTSError(
                ErrorCode.INVALID_UTF8, f"A binary message must be UTF-8 text; byte {exc.start} is not."
            ) from None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise TTSError(ErrorCode.INVALID_JSON, f"A message must be a JSON object such as {example}.") from None
    if not isinstance(value, dict):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "A message must be a JSON object.")
    return value
