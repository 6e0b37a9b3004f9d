"""Kokoro-82M through the kokoro package's KModel (PyTorch), for the GPU endpoint image (extra ``gpu``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class TorchBackend:
    name = "torch"

    def __init__(self, config_path: Path, model_path: Path, device: str = "auto") -> None:
        import torch
        from kokoro import KModel

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._torch = torch
        if not model_path.is_file():
            raise FileNotFoundError(f"{model_path} is missing: fetch the weights with --with-torch")
        model = KModel(config=str(config_path), model=str(model_path))
        self._model = model.to(device).eval()
        self.device = device

    def synthesize(self, tokens: list[int], style: np.ndarray, speed: float) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode():
            input_ids = torch.tensor([[0, *tokens, 0]], dtype=torch.long, device=self.device)
            ref_s = torch.from_numpy(np.ascontiguousarray(style, dtype=np.float32)).to(self.device)
            audio, _ = self._model.forward_with_tokens(input_ids, ref_s, speed)
        return audio.float().cpu().numpy().reshape(-1)
