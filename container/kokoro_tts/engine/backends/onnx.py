"""Kokoro-82M through onnxruntime (the int8 export runs on any CPU; the CUDA provider is used when present)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from kokoro_tts.engine.backends import ChunkInput
from kokoro_tts.engine.backends.ort_sessions import RUN_OPTIONS, SessionPair, exact_int8_dot_products
from kokoro_tts.engine.backends.stages import OnnxStages
from kokoro_tts.weights.layout import StagePaths

log = logging.getLogger(__name__)


class OnnxBackend:
    """With the layout's derived stage graphs (``stage_paths``; ``int8_stage_paths`` on a CPU that runs them
    exactly): ``stages`` (the prosody front, the generator's input and the generator, for windowed decoding:
    engine/synthesis.py), and ``synthesize`` runs the same three on a whole chunk, so windowing on and off differ only
    in the windows. Without them: the shipped monolithic graph."""

    name = "onnx"
    # The stage graphs take one chunk: on a CPU the workers side by side beat one call for several (docs/engine.md).
    batch_limit = 1

    def __init__(
        self,
        model_path: Path,
        device: str = "auto",
        threads: int = 0,
        stage_paths: StagePaths | None = None,
        workers: int = 0,
        int8_stage_paths: StagePaths | None = None,
        norm_priors: Path | None = None,
        fused_snake: bool = True,
        direct_conv: bool = True,
    ) -> None:
        available = ort.get_available_providers()
        want_cuda = device in ("auto", "cuda") and "CUDAExecutionProvider" in available
        if device == "cuda" and not want_cuda:
            raise RuntimeError(f"KOKORO_DEVICE=cuda but onnxruntime offers only {available}")
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if want_cuda else ["CPUExecutionProvider"]
        # Jobs side by side: ``workers``, else a core each on a CPU (ort_sessions.py); one at a time on a GPU.
        self.parallel_jobs = workers or (1 if want_cuda else (os.cpu_count() or 1))
        self.device = "cuda" if want_cuda else "cpu"
        self.model_file = model_path.name
        if stage_paths and int8_stage_paths and not want_cuda and exact_int8_dot_products():
            stage_paths = int8_stage_paths  # the same integers, on the CPU's 8-bit dot products (ort_sessions.py)
        if stage_paths:
            log.info("stage graphs: %s", ", ".join(path.name for path in stage_paths))
        self.stages = (
            OnnxStages(*stage_paths, threads, providers, self.parallel_jobs, norm_priors, fused_snake, direct_conv)
            if stage_paths
            else None
        )
        if self.stages is None:  # with the stages the monolithic graph is not loaded: its memory is theirs
            self._session = SessionPair(model_path, threads, self.parallel_jobs, providers)
            # Exports differ in naming (the PyPI mirror: tokens → audio; onnx-community: input_ids → waveform).
            inputs = {i.name for i in self._session.get(every_core=True).get_inputs()}  # both sessions: one graph
            self._tokens_input = "input_ids" if "input_ids" in inputs else "tokens"
            self._audio_output = self._session.get(every_core=True).get_outputs()[0].name

    def synthesize(self, tokens: list[int], style: np.ndarray, speed: float, *, every_core: bool = True) -> np.ndarray:
        return self.synthesize_timed(tokens, style, speed, every_core=every_core)[0]

    def synthesize_timed(
        self, tokens: list[int], style: np.ndarray, speed: float, *, every_core: bool = True
    ) -> tuple[np.ndarray, np.ndarray | None]:
        if self.stages is not None:
            prosody = self.stages.front(tokens, style, speed, every_core=every_core)
            return self.stages.decode(prosody, every_core=every_core), prosody.durations
        # The export's only output is the audio: no durations, so no word timings.
        feeds = {
            self._tokens_input: np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
            "speed": np.array([speed], dtype=np.float32),
        }
        (audio,) = self._session.get(every_core).run([self._audio_output], feeds, RUN_OPTIONS)
        return np.asarray(audio, dtype=np.float32).reshape(-1), None

    def synthesize_batch(
        self, items: Sequence[ChunkInput], *, every_core: bool = True
    ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        return [self.synthesize_timed(i.tokens, i.style, i.speed, every_core=every_core) for i in items]

    @property
    def session(self) -> ort.InferenceSession:
        """The monolithic graph's session, as a job alone runs it (the peer benchmark hands it to kokoro-onnx)."""
        return self._session.get(every_core=True)
