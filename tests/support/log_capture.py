"""The root logger's lines in one of the formats `serve` writes, captured while a test runs."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator

from kokoro_client import logs


@contextlib.contextmanager
def captured_log(fmt: str) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.formatter(fmt))
    handler.addFilter(logs.IdsFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
