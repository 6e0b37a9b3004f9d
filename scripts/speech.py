"""Proof that audio is speech: pocketsphinx (offline, on PyPI) transcribes it, and we score the word error rate.

Shared by the benchmark (the transport section scores each format) and the tests.
"""

from __future__ import annotations

import re

import av
import numpy as np
from kokoro_client.audio import SAMPLE_RATE
from pocketsphinx import Decoder

_decoder: Decoder | None = None


def resample_16k(pcm: np.ndarray, rate: int = SAMPLE_RATE) -> np.ndarray:
    """int16 mono at ``rate`` → int16 mono at 16 kHz, through FFmpeg's resampler."""
    frame = av.AudioFrame.from_ndarray(pcm.astype(np.int16).reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="s16", layout="mono", rate=16_000)
    out = [f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame), *resampler.resample(None)]]
    return np.concatenate(out) if out else np.zeros(0, np.int16)


def transcribe(pcm: np.ndarray, rate: int = SAMPLE_RATE) -> str:
    global _decoder
    if _decoder is None:
        _decoder = Decoder(samprate=16_000, loglevel="FATAL")
    _decoder.start_utt()
    _decoder.process_raw(resample_16k(pcm, rate).tobytes(), full_utt=True)
    _decoder.end_utt()
    hyp = _decoder.hyp()
    return hyp.hypstr if hyp else ""


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance in words, number of reference words).

    A word written as two, or two as one ("goodbye" heard as "good bye", or as "good by", Whisper's spelling of the
    same sounds), is a spelling variant, not a mishearing: it counts as a match when the halves, joined, spell it
    but for one letter.
    """
    ref, hyp = words(reference), words(hypothesis)
    rows = [list(range(len(hyp) + 1))]
    for i, r in enumerate(ref, 1):
        above, row = rows[-1], [i]
        for j, h in enumerate(hyp, 1):
            cost = min(above[j] + 1, row[j - 1] + 1, above[j - 1] + (r != h))
            if j >= 2 and spelled_alike(hyp[j - 2] + h, r):
                cost = min(cost, above[j - 2])
            if i >= 2 and spelled_alike(ref[i - 2] + r, h):
                cost = min(cost, rows[-2][j - 1])
            row.append(cost)
        rows = [above, row]
    return rows[-1][-1], len(ref)


def spelled_alike(joined: str, word: str) -> bool:
    """Whether two words ``joined`` spell ``word`` but for at most one letter added or dropped ("goodby",
    "goodbye"); short words must match exactly (too many are a letter apart)."""
    if joined == word:
        return True
    shorter, longer = sorted((joined, word), key=len)
    if len(longer) - len(shorter) != 1 or len(shorter) < 5:
        return False
    return any(longer[:k] + longer[k + 1 :] == shorter for k in range(len(longer)))


def rms(pcm: np.ndarray) -> float:
    return float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2))) if pcm.size else 0.0
