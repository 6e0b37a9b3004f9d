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

    def synthesize(self, tokens: list[int], style: np.ndarray, speed: float) -> np.ndarray:
        feeds = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
            "speed": np.array([speed], dtype=np.float32),
        }
        (audio,) = self._session.run(["audio"], feeds)
        return np.asarray(audio, dtype=np.float32).reshape(-1)
