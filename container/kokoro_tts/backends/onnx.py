"""Kokoro-82M through onnxruntime (the int8 export runs on any CPU; the CUDA provider is used when present)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort


class OnnxBackend:
    name = "onnx"

    def __init__(self, model_path: Path, device: str = "auto", threads: int = 0) -> None:
        available = ort.get_available_providers()
        want_cuda = device in ("auto", "cuda") and "CUDAExecutionProvider" in available
        if device == "cuda" and not want_cuda:
            raise RuntimeError(f"KOKORO_DEVICE=cuda but onnxruntime offers only {available}")
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if want_cuda else ["CPUExecutionProvider"]
        options = ort.SessionOptions()
        # One job uses every core: on a CPU the lowest latency comes from one inference at a time.
        options.intra_op_num_threads = threads or (os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(str(model_path), options, providers=providers)
        self.device = "cuda" if want_cuda else "cpu"
        self.model_file = model_path.name
        # Exports differ in naming (the PyPI mirror: tokens → audio; onnx-community: input_ids → waveform).
        inputs = {i.name for i in self._session.get_inputs()}
        self._tokens_input = "input_ids" if "input_ids" in inputs else "tokens"
        self._audio_output = self._session.get_outputs()[0].name

    def synthesize(self, tokens: list[int], style: np.ndarray, speed: float) -> np.ndarray:
        feeds = {
            self._tokens_input: np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
            "speed": np.array([speed], dtype=np.float32),
        }
        (audio,) = self._session.run([self._audio_output], feeds)
        return np.asarray(audio, dtype=np.float32).reshape(-1)
