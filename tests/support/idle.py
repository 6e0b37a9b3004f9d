"""Wait for the in-process server's scheduler to be idle: tests that read its job log or tighten its admission
start from nothing queued or running (the server runs in this process, in its own thread)."""

from __future__ import annotations

import asyncio
import time
from typing import Any


async def wait_idle(engine: Any, within: float = 120.0) -> float:
    """Seconds until ``engine``'s scheduler has nothing queued or running; fails past ``within``."""
    started = time.monotonic()
    while engine.scheduler.pending or engine.scheduler.running:
        assert time.monotonic() - started < within, (
            f"still synthesizing after {within} s: pending={engine.scheduler.pending}"
        )
        await asyncio.sleep(0.05)
    return time.monotonic() - started
