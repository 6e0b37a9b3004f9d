"""Timing text steps for a ratio: best of a few tries, in this thread's CPU time, with the cyclic GC off.

Thread CPU time leaves out what other processes on a shared machine take; the GC is off as in ``timeit``, because a
full collection lands in whichever step happens to allocate past the threshold (in the test process the in-process
server froze its long-lived objects, so full collections come often) and would be charged to that step alone.
``freeze_heap`` is for tests that time the in-process server's answers.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


def best_cpu_times(*steps: Callable[[], object], tries: int = 5) -> list[float]:
    """The shortest of ``tries`` runs of each step, in seconds of this thread's CPU time. The steps take turns, so a
    slow spell of the machine (a neighbour's burst, a frequency drop) falls on all of them, not on one's tries."""
    best = [float("inf")] * len(steps)
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(tries):
            for i, step in enumerate(steps):
                started = time.thread_time()
                step()
                best[i] = min(best[i], time.thread_time() - started)
    finally:
        if was_enabled:
            gc.enable()
    return best


def freeze_heap() -> None:
    """Take what earlier tests left in this process out of the cyclic GC, as the server takes its own long-lived
    objects out at start (server/app.py): a full collection then scans what the test makes, not the suite's
    history. A served process holds the server alone; here such a scan stops the in-process server's threads too,
    and a /ping measured meanwhile would be charged with it."""
    gc.collect()
    gc.freeze()


def best_cpu_time(step: Callable[[], object], tries: int = 5) -> float:
    """The shortest of ``tries`` runs of ``step``, in seconds of this thread's CPU time."""
    return best_cpu_times(step, tries=tries)[0]
