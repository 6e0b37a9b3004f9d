"""The fused Snake activation: an onnxruntime custom op (``kokoro.Snake``, container/native/snake_op.c).

The derived generator graphs hold each Snake activation (x + sin²(αx)/α, five elementwise operators in the export)
as one ``kokoro.Snake`` node with a model-local function of those same five operators. A session with this library
registered runs the node as one vectorised pass on its intra-op threads (the generator about 1.4x faster on 2
cores: docs/engine.md); without it, onnxruntime inlines the function and computes exactly what the export does.
So the library is an option: where it was not built, or does not load, the server runs as before, and says so once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import onnxruntime as ort

log = logging.getLogger(__name__)

DOMAIN = "kokoro"
OP = "Snake"
LIBRARY = Path(__file__).with_name("libkokoro_snake.so")  # built by container/native/build.py

_lock = threading.Lock()
_said: set[str] = set()


def _say_once(level: int, message: str, *args: object) -> None:
    with _lock:
        if message in _said:
            return
        _said.add(message)
    log.log(level, message, *args)


def usable(providers: Sequence[str]) -> bool:
    """Whether sessions on ``providers`` can run the kernel: a CPU-only session, with the library built and loading
    (said once where it is not). A GPU provider runs the graph's function where it puts the nodes."""
    return list(providers) == ["CPUExecutionProvider"] and register(ort.SessionOptions())


def register(options: ort.SessionOptions, library: Path = LIBRARY) -> bool:
    """Register the kernel with ``options``; False (and one log line) where it is not built or does not load."""
    if not library.is_file():
        _say_once(logging.WARNING, "fused Snake kernel not built (%s): the generator runs its own operators", library)
        return False
    try:
        options.register_custom_ops_library(str(library))
    except Exception as e:  # onnxruntime raises its own Fail for a library it cannot load
        _say_once(logging.WARNING, "fused Snake kernel did not load (%s): the generator runs its own operators", e)
        return False
    _say_once(logging.INFO, "fused Snake kernel: %s", library.name)
    return True
