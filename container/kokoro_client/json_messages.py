"""What the vendor socket vocabularies (deepgram.py, elevenlabs.py) read alike: a client's message as a JSON object,
within the size cap, from a text frame or a UTF-8 binary one (SageMaker relays every part as binary)."""

from __future__ import annotations

import json
from typing import Any

from .errors import ErrorCode, TTSError


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
