"""onnxruntime sessions as the server runs them: thread counts, and memory that goes back to the OS.

A graph is loaded twice when jobs may run side by side (``SessionPair``): on a CPU, one job on every core gives a
lone session its first audio soonest, but several jobs side by side, a core each, get through more work: intra-op
threads parallelise a short window poorly (docs/engine.md). So the scheduler runs a job alone, on every core, when
nothing else is waiting, and side by side otherwise (engine/scheduler.py), and tells the job which: the job passes
that ``every_core`` down to ``SessionPair.get``.

Each onnxruntime session would keep its own CPU arena, grown to its largest run and never returned: under load the
server's memory then rose in steps of the arenas' doubling. So every session of the process allocates from one
shared arena, each run hands the arena's free regions back (``RUN_OPTIONS``), and glibc's mmap threshold is fixed so
a freed region is unmapped rather than kept in its heap (glibc raises the threshold after each large free, and later
large blocks then stay in the heap). RSS then stays flat at the same speed (docs/engine.md).
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

import onnxruntime as ort

from kokoro_tts.engine.backends import kernels

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
_MMAP_THRESHOLD_BYTES = 4 << 20  # the arena grows in regions of 1 MB and up; its large ones are the ones to unmap

# Passed to every run: afterwards the shared CPU arena frees the regions nothing uses (the module docstring).
RUN_OPTIONS = ort.RunOptions()
RUN_OPTIONS.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

_arena_lock = threading.Lock()
_arena_made = False


def _share_one_cpu_arena(options: ort.SessionOptions) -> None:
    global _arena_made
    with _arena_lock:
        if not _arena_made:
            try:
                ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
            except (AttributeError, OSError):  # not glibc: its allocator keeps its own policy
                pass
            cpu = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            ort.create_and_register_allocator(cpu, None)
            _arena_made = True
    options.add_session_config_entry("session.use_env_allocators", "1")


def exact_int8_dot_products(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether onnxruntime's uint8 x int8 matrix product is exact and fast on this CPU: on x86 with VNNI (AVX512-VNNI,
    AVX-VNNI) its kernel sums 8-bit products in 32 bits; without, it pairs them in 16 bits with saturation
    (vpmaddubsw), so the stage graphs' int8 build (weights/layout.py) would not compute the export's integers.
    Elsewhere (another OS, another architecture) the portable build is used."""
    try:
        flags = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    return re.search(r"^flags\s*:.*\b(?:avx512_vnni|avx_vnni)\b", flags, re.MULTILINE) is not None


def session(
    path: Path,
    threads: int = 0,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    fused_snake: bool = False,
    direct_conv: bool = False,
) -> ort.InferenceSession:
    """``path`` on ``threads`` cores (0: all), allocating from the process's shared CPU arena; ``fused_snake``: with
    the native kernels registered (kernels.py: the caller has checked they are ``usable``), the direct convolution
    among them where ``direct_conv`` and the CPU suits it."""
    options = ort.SessionOptions()
    _share_one_cpu_arena(options)
    if fused_snake and not kernels.register(options, direct_conv=direct_conv):
        raise RuntimeError(f"the native kernels {kernels.LIBRARY} did not register")
    options.intra_op_num_threads = threads or (os.cpu_count() or 1)
    options.inter_op_num_threads = 1
    # Each session has its own intra-op threads, which spin between operators (fast) and, by default, for a while
    # after a run: the next graph's threads then share the cores with them. A job runs two or three graphs in a row
    # (backends/stages.py), so the spinning stops when a run returns (a first job a third faster: docs/engine.md).
    options.add_session_config_entry("session.force_spinning_stop", "1")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=list(providers))


class SessionPair:
    """One graph, loaded twice when the thread counts differ: on ``threads`` cores (0: all) for a job that runs
    alone, on its share of them when ``parallel`` jobs run side by side (the module docstring)."""

    def __init__(
        self,
        path: Path,
        threads: int,
        parallel: int,
        providers: Sequence[str],
        fused_snake: bool = False,
        direct_conv: bool = False,
    ) -> None:
        wide = threads or (os.cpu_count() or 1)
        narrow = max(1, wide // max(1, parallel))
        self._every_core = session(path, wide, providers, fused_snake, direct_conv)
        self._shared = (
            self._every_core if narrow == wide else session(path, narrow, providers, fused_snake, direct_conv)
        )

    def get(self, every_core: bool) -> ort.InferenceSession:
        """The session for a job with ``every_core``, or for one side by side with others (its share of the cores)."""
        return self._every_core if every_core else self._shared
