"""Errors a client can act on: each has a stable code, a message for a person, and an HTTP status.

Handlers turn a ``TTSError`` into ``{"error": {"code", "message"}}`` (HTTP) or an error frame (WebSocket).
Any other exception is a bug: the client reads ``internal_error`` and a generic message, never the exception's text.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    INVALID_JSON = "invalid_json"
    INVALID_UTF8 = "invalid_utf8"
    INVALID_MESSAGE = "invalid_message"
    UNKNOWN_TYPE = "unknown_type"
    MISSING_TEXT = "missing_text"
    EMPTY_TEXT = "empty_text"
    INVALID_TEXT = "invalid_text"
    TEXT_TOO_LONG = "text_too_long"
    NOTHING_TO_SPEAK = "nothing_to_speak"
    UNKNOWN_VOICE = "unknown_voice"
    INVALID_VOICE = "invalid_voice"
    UNSUPPORTED_LANGUAGE = "unsupported_language"
    INVALID_SPEED = "invalid_speed"
    UNSUPPORTED_FORMAT = "unsupported_format"
    UNKNOWN_MODEL = "unknown_model"
    UNSUPPORTED_SAMPLE_RATE = "unsupported_sample_rate"
    INVALID_ID = "invalid_id"
    QUEUE_FULL = "queue_full"
    MESSAGE_TOO_LARGE = "message_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    NUMBER_TOO_LONG = "number_too_long"
    NOT_READY = "not_ready"
    SERVER_BUSY = "server_busy"
    SLOW_READER = "slow_reader"
    SHUTTING_DOWN = "shutting_down"
    REQUEST_TIMEOUT = "request_timeout"
    INTERNAL_ERROR = "internal_error"
    UNAUTHORIZED = "unauthorized"


_STATUS = {
    ErrorCode.UNKNOWN_MODEL: 404,
    ErrorCode.TEXT_TOO_LONG: 413,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.NOT_READY: 503,
    ErrorCode.SERVER_BUSY: 503,
    ErrorCode.SHUTTING_DOWN: 503,
    ErrorCode.REQUEST_TIMEOUT: 408,
    ErrorCode.QUEUE_FULL: 429,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.UNAUTHORIZED: 401,
}


class TTSError(Exception):
    """A failure the client caused or can work around; ``message`` is written for the client."""

    def __init__(self, code: ErrorCode, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s  # server_busy: when to try again (HTTP sends it as Retry-After)

    @property
    def http_status(self) -> int:
        return _STATUS.get(self.code, 400)

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code.value, "message": self.message}


QUOTE_LIMIT = 40  # characters of a client's value an error message quotes


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``value`` as an error message quotes it: its repr, cut to ``limit`` characters ("..." at the cut), so a
    client's 60 KB string comes back as a short prefix. Every error that quotes a client's value goes through here."""
    if isinstance(value, str | bytes) and len(value) > limit:
        value = value[: limit + 1]  # repr of the prefix only: the cut below marks it, whatever the value's length
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        return f"<a {type(value).__name__} too long to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


INTERNAL_ERROR_MESSAGE = "The server failed to synthesize this request; it has been logged."
