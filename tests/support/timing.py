"""Timing a text step for a ratio: best of a few tries, in this thread's CPU time, with the cyclic GC off.

Thread CPU time leaves out what other processes on a shared machine take; the GC is off as in ``timeit``, because a
full collection lands in whichever step happens to allocate past the threshold (in the test process the in-process
server froze its long-lived objects, so full collections come often) and would be charged to that step alone.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


def best_cpu_time(step: Callable[[], object], tries: int = 5) -> float:
    """The shortest of ``tries`` runs of ``step``, in seconds of this thread's CPU time."""
    best = float("inf")
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(tries):
            started = time.thread_time()
            step()
            best = min(best, time.thread_time() - started)
    finally:
        if was_enabled:
            gc.enable()
    return best
