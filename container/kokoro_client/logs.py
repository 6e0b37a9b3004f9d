"""Log lines for the server and the agent: one JSON object per line (LOG_FORMAT=json, the images' default) or
plain text (LOG_FORMAT=text, the default elsewhere), each carrying the ids of the work it was written for.

``bind_ids`` puts ids (request_id, session_id, utterance_id) into the current context at a route's entry; every
line logged in that context, and in the tasks it starts, carries them (docs/observability.md).

No client input can start a line: in text, the message and the ids have every control character (newline, CR, ESC,
...), Unicode line separator and bidirectional override written as an escape (``\n``, ``\x1b``, ``\u2028``), and a
traceback's lines are indented under the line they belong to; JSON escapes them by itself (ASCII output).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from types import MappingProxyType

FORMATS = ("json", "text")
# Characters that would start a new line, rewrite this one or reorder it on a terminal: C0, DEL and C1 controls,
# Unicode's line and paragraph separators, and the bidirectional embeddings, overrides and isolates.
_UNSAFE = [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES = {code: repr(chr(code))[1:-1] if code < 0x100 else f"\\u{code:04x}" for code in _UNSAFE}
TRACEBACK_INDENT = "    "
# The fields every JSON line has, besides the ids bound where the line was written.
JSON_FIELDS = ("levelname", "name", "message")  # and "timestamp": ISO 8601 in UTC, to the microsecond
_RENAMED = {"levelname": "level", "name": "logger"}

_ids: ContextVar[Mapping[str, str]] = ContextVar("log_ids", default=MappingProxyType({}))


def bind_ids(**ids: str | None) -> None:
    """Add ids to every later log line of this context (and of the tasks it creates from now on)."""
    _ids.set({**_ids.get(), **{key: value for key, value in ids.items() if value}})


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


def escape(text: str) -> str:
    """``text`` with nothing in it that could end a log line or disguise one (see the module's docstring)."""
    return text.translate(_ESCAPES)


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
    """The plain line, then the ids as key=value: a person reads it, grep finds a request. Client text in the
    message or the ids is escaped; a traceback follows on indented lines."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = escape(self.formatMessage(record))
        ids = [f"{key}={escape(str(getattr(record, key)))}" for key in ID_FIELDS if hasattr(record, key)]
        if ids:
            line += f" [{' '.join(ids)}]"
        # Formatted here rather than through logging's cache (record.exc_text), which another handler may share.
        details = [self.formatException(record.exc_info)] if record.exc_info else [record.exc_text or ""]
        if record.stack_info:
            details.append(self.formatStack(record.stack_info))
        return line + "".join(f"\n{_indented(text)}" for text in details if text)


def _indented(text: str) -> str:
    """A traceback (whose exception messages may quote clients) as lines that cannot pass for log lines."""
    return "\n".join(TRACEBACK_INDENT + escape(line) for line in text.splitlines())


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
