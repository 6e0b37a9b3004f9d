"""Inference backends: one interface, two implementations.

``onnx`` (onnxruntime: the CPU by default, the CUDA provider when present) is the embedded default;
``torch`` runs the kokoro package's KModel on a GPU from the same weight layout (optional extra ``gpu``): Hugging
Face's kokoro-v1_0.pth, or the weights ``derive-torch`` recovers from the ONNX export. Only the onnx backend has
``stages`` (windowed decoding) so far; the torch backend synthesizes whole chunks, several streams' in one call on a
GPU (``synthesize_batch``: torch_batch.py). Word timestamps need the predicted durations: the onnx front stage and
the torch KModel give them; the monolithic ONNX graph alone (a layout without the derived stages) does not.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from kokoro_tts.settings import Settings

if TYPE_CHECKING:
    from kokoro_tts.engine.backends.stages import OnnxStages
    from kokoro_tts.weights.layout import WeightLayout

log = logging.getLogger(__name__)


# Every inference call takes ``every_core``: whether its job has every core to itself, as the scheduler started it
# (engine/scheduler.py; backends/ort_sessions.py says why it matters). Outside the scheduler (a warm-up, a tool, a
# test) a call has the machine to itself: hence the default.


@dataclass(frozen=True)
class ChunkInput:
    """One token batch to synthesize whole: at most 510 phoneme tokens, the voice's style row for them, the speed."""

    tokens: list[int]
    style: np.ndarray
    speed: float


class Backend(Protocol):
    name: str
    device: str
    model_file: str  # the weights file, relative to the layout (its checksum is in the manifest)
    parallel_jobs: int  # inference jobs the scheduler may run side by side (backends/ort_sessions.py)
    batch_limit: int  # token batches of several streams one ``synthesize_batch`` call takes at most (1: none)

    @property
    def stages(self) -> OnnxStages | None:
        """The onnx stage graphs, for windowed decoding; None: this backend synthesizes whole chunks only."""
        ...

    def synthesize(self, tokens: list[int], style: np.ndarray, speed: float, *, every_core: bool = True) -> np.ndarray:
        """Float32 mono audio at 24 kHz for at most 510 phoneme tokens; blocking, called from a worker thread."""
        ...

    def synthesize_timed(
        self, tokens: list[int], style: np.ndarray, speed: float, *, every_core: bool = True
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``synthesize``, with the predicted frames per token (pad tokens included) when the graph gives them: the
        torch KModel does; the shipped monolithic ONNX graph outputs audio only (its stages have them: stages.py)."""
        ...

    def synthesize_batch(
        self, items: Sequence[ChunkInput], *, every_core: bool = True
    ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """``synthesize_timed`` for each of at most ``batch_limit`` items, in one model call where the backend
        batches (the torch backend's decoder): the same audio as one call each."""
        ...


def load_backend(settings: Settings) -> Backend:
    from kokoro_tts.weights.layout import NORM_PRIORS, WeightLayout

    layout = WeightLayout(settings.model_dir)
    if settings.backend == "onnx":
        from kokoro_tts.engine.backends.onnx import OnnxBackend

        stages, int8_stages = layout.stage_graphs(), layout.stage_graphs(int8=True)
        have_stages = all(path.is_file() for path in stages)
        if not have_stages:
            log.warning("the layout has no stage graphs (kokoro-weights derive-stages): whole chunks, no windows")
        # With windowing off the stages still run, on whole chunks: the same graphs, so the two compare fairly.
        return OnnxBackend(
            layout.onnx_path,
            device=settings.device,
            threads=settings.threads,
            stage_paths=stages if have_stages else None,
            workers=settings.workers,
            int8_stage_paths=int8_stages if all(path.is_file() for path in int8_stages) else None,
            norm_priors=layout.root / NORM_PRIORS,
            fused_snake=settings.fused_snake,
            direct_conv=settings.direct_conv,
        )
    if settings.backend == "torch":
        from kokoro_tts.engine.backends.torch import TorchBackend

        return TorchBackend(
            layout.config_path,
            torch_weights(layout),
            device=settings.device,
            threads=settings.threads,
            workers=settings.workers,
            batch=settings.batch,
        )
    raise ValueError(f"KOKORO_BACKEND must be 'onnx' or 'torch', not {settings.backend!r}")


def torch_weights(layout: WeightLayout) -> Path:
    """Hugging Face's kokoro-v1_0.pth when the layout has it, else the weights derived from the ONNX export."""
    from kokoro_tts.weights.layout import DERIVED_TORCH, TORCH, LayoutError

    try:
        files = layout.read_manifest().files
    except LayoutError:
        files = {}
    for name in (TORCH, DERIVED_TORCH):
        if name in files:
            return layout.root / name
    return layout.torch_path
