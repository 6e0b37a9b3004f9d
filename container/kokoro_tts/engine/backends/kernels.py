"""The native kernels: onnxruntime custom ops of the ``kokoro`` domain, one library built from container/native/.

- ``kokoro.Snake``: the generator's Snake activation (x + sin²(αx)/α, five elementwise operators in the export) as
  one vectorised pass on the session's intra-op threads.
- ``kokoro.ConvInteger1d``: the int8 generator's convolutions computed from their input as it lies (no im2col copy,
  no transposes) on the CPU's 8-bit dot products, where the CPU has AVX-512 VNNI and no AMX (with AMX, onnxruntime's
  own product is faster); ``kokoro.ConvInteger1dScaled``, the same with its output's bias and scale applied.

The derived graphs hold each as a node with a model-local function of the operators it replaces; a session without
the library, or without that op, runs the function: the export's arithmetic. So the library is an option: where it
was not built, or does not load, the server runs as before, and says so once. docs/engine.md has the measurements.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import onnxruntime as ort

log = logging.getLogger(__name__)

DOMAIN = "kokoro"
SNAKE = "Snake"
CONV = "ConvInteger1d"
CONV_SCALED = "ConvInteger1dScaled"  # the same, its output's bias and scale applied
LIBRARY = Path(__file__).with_name("libkokoro_kernels.so")  # built by container/native/build.py

_lock = threading.Lock()
_said: set[str] = set()


def _say_once(level: int, message: str, *args: object) -> None:
    with _lock:
        if message in _said:
            return
        _said.add(message)
    log.log(level, message, *args)


def usable(providers: Sequence[str]) -> bool:
    """Whether sessions on ``providers`` can run the kernels: a CPU-only session, with the library built and loading
    (said once where it is not). A GPU provider runs the graphs' functions where it puts the nodes."""
    return list(providers) == ["CPUExecutionProvider"] and register(ort.SessionOptions())


@functools.cache
def _loaded(library: Path) -> ctypes.CDLL:
    """The library as this process has it loaded (onnxruntime's own load of the same file is the same copy)."""
    return ctypes.CDLL(str(library))


def direct_conv_runs(library: Path = LIBRARY) -> bool:
    """Whether this CPU is one the direct convolution serves (the library decides: AVX-512 VNNI, no AMX)."""
    return bool(_loaded(library).kokoro_conv_integer_1d_serves_this_cpu())


def register(options: ort.SessionOptions, library: Path = LIBRARY, direct_conv: bool = False) -> bool:
    """Register the kernels with ``options``, the direct convolution too where ``direct_conv`` and the CPU suits
    it; False (and one log line) where the library is not built or does not load."""
    if not library.is_file():
        _say_once(logging.WARNING, "native kernels not built (%s): the generator runs its own operators", library)
        return False
    try:
        with _lock:  # the library reads the wish as the session registers it
            _loaded(library).kokoro_want_conv_integer_1d(int(direct_conv))
            options.register_custom_ops_library(str(library))
    except Exception as e:  # onnxruntime raises its own Fail for a library it cannot load, ctypes an OSError
        _say_once(logging.WARNING, "native kernels did not load (%s): the generator runs its own operators", e)
        return False
    if not direct_conv:
        _say_once(logging.INFO, "native kernels: %s", SNAKE)
    elif direct_conv_runs(library):
        _say_once(logging.INFO, "native kernels: %s, %s (AVX-512 VNNI)", SNAKE, CONV)
    else:
        _say_once(logging.INFO, "native kernels: %s (this CPU lacks AVX-512 VNNI or has AMX: no %s)", SNAKE, CONV)
    return True
