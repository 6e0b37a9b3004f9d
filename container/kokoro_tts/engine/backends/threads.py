"""Whether the inference job running in this thread has the machine to itself.

On a CPU, one job on every core gives a lone session its first audio soonest, but several jobs side by side, a core
each, get through more work: intra-op threads parallelise a short window poorly (docs/engine.md). So the
scheduler runs a job alone, on every core, when nothing else is waiting, and side by side otherwise
(scheduler.py); the onnx backend keeps a session for each case (``ort_sessions.SessionPair``) and asks ``alone()``
which to use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_local = threading.local()


def alone() -> bool:
    """Whether the job running in this thread runs alone (True outside the scheduler: a warm-up, a test)."""
    return bool(getattr(_local, "alone", True))


def run_as[T](fn: Callable[[], T], alone: bool) -> T:
    """``fn()`` in this thread, with ``alone()`` answering ``alone`` meanwhile."""
    _local.alone = alone
    try:
        return fn()
    finally:
        _local.alone = True
