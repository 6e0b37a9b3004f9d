"""Wait for a condition that other threads or tasks make true, up to a bound; the one way tests wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

POLL_S = 0.02


def _expired(what: str, within_s: float) -> AssertionError:
    return AssertionError(f"{what}: not within {within_s:g} s")


async def eventually(condition: Callable[[], object], what: str, within_s: float = 10.0) -> None:
    """Returns once ``condition()`` is true; ``AssertionError`` naming ``what`` after ``within_s``."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise _expired(what, within_s)
        await asyncio.sleep(POLL_S)


def eventually_here(condition: Callable[[], object], what: str, within_s: float = 10.0) -> None:
    """``eventually`` for a thread that must not start an event loop (sync Playwright keeps one on it)."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise _expired(what, within_s)
        time.sleep(POLL_S)
