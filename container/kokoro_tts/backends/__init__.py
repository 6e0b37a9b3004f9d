"""Inference backends: one interface, two implementations.

``onnx`` (onnxruntime: the CPU by default, the CUDA provider when present) is the embedded default;
``torch`` runs the kokoro package's KModel on a GPU from the same weight layout (optional extra ``gpu``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..settings import Settings


class Backend(Protocol):
    name: str
    device: str

    def synthesize(self, tokens: list[int], style: np.ndarray, speed: float) -> np.ndarray:
        """Float32 mono audio at 24 kHz for at most 510 phoneme tokens; blocking, called from a worker thread."""
        ...


def load_backend(settings: Settings) -> Backend:
    from ..weights.layout import WeightLayout

    layout = WeightLayout(settings.model_dir)
    if settings.backend == "onnx":
        from .onnx import OnnxBackend

        return OnnxBackend(layout.onnx_path, device=settings.device, threads=settings.threads)
    if settings.backend == "torch":
        from .torch import TorchBackend

        return TorchBackend(layout.config_path, layout.torch_path, device=settings.device)
    raise ValueError(f"KOKORO_BACKEND must be 'onnx' or 'torch', not {settings.backend!r}")
