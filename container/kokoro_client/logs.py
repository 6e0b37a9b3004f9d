"""Log lines for the server and the agent: one JSON object per line (LOG_FORMAT=json, the images' default) or
plain text (LOG_FORMAT=text, the default elsewhere), each carrying the ids of the work it was written for.

``bind_ids`` puts ids (request_id, session_id, utterance_id) into the current context at a route's entry; every
line logged in that context, and in the tasks it starts, carries them (docs/observability.md).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from types import MappingProxyType

FORMATS = ("json", "text")
# The fields every JSON line has, besides the ids bound where the line was written.
JSON_FIELDS = ("levelname", "name", "message")  # and "timestamp": ISO 8601 in UTC, to the microsecond
_RENAMED = {"levelname": "level", "name": "logger"}

_ids: ContextVar[Mapping[str, str]] = ContextVar("log_ids", default=MappingProxyType({}))


def bind_ids(**ids: str | None) -> None:
    """Add ids to every later log line of this context (and of the tasks it creates from now on)."""
    _ids.set({**_ids.get(), **{key: value for key, value in ids.items() if value}})


def current_ids() -> Mapping[str, str]:
    return _ids.get()


class IdsFilter(logging.Filter):
    """Copies the context's ids (and ``extra_ids()``'s, such as the AgentCore SDK's own) onto each record."""

    def __init__(self, extra_ids: Callable[[], Mapping[str, str | None]] | None = None) -> None:
        super().__init__()
        self._extra_ids = extra_ids

    def filter(self, record: logging.LogRecord) -> bool:
        ids = {**(self._extra_ids() if self._extra_ids else {}), **_ids.get()}
        for key, value in ids.items():
            if value and not hasattr(record, key):
                setattr(record, key, value)
        return True


def log_format(default: str = "text") -> str:
    value = os.environ.get("LOG_FORMAT", "").strip().lower() or default
    if value not in FORMATS:
        raise ValueError(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, not {value!r}")
    return value


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        return JsonFormatter(" ".join(f"%({field})s" for field in JSON_FIELDS), rename_fields=_RENAMED, timestamp=True)
    return _TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s")


class _TextFormatter(logging.Formatter):
    """The plain line, then the ids as key=value: a person reads it, grep finds a request."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = [f"{key}={getattr(record, key)}" for key in ID_FIELDS if hasattr(record, key)]
        return f"{line} [{' '.join(ids)}]" if ids else line


ID_FIELDS = ("request_id", "session_id", "utterance_id")


def configure(
    level: str | None = None, fmt: str | None = None, extra_ids: Callable[[], Mapping[str, str | None]] | None = None
) -> None:
    """One handler on the root logger, to stderr, in ``fmt`` (else LOG_FORMAT, else text); ``level``: else
    LOG_LEVEL, else INFO. Replaces the root's handlers, so calling it twice changes the format, never doubles it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt or log_format()))
    handler.addFilter(IdsFilter(extra_ids))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel((level or os.environ.get("LOG_LEVEL") or "INFO").upper())
