"""Distances between two renderings of the same speech, and a detector for clicks at known sample positions."""

from __future__ import annotations

import numpy as np

RATE = 24_000


def _mel_filters(n_fft: int, n_mels: int, rate: int) -> np.ndarray:
    def mel(hz: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    edges_mel = np.linspace(mel(np.array(0.0)), mel(np.array(rate / 2)), n_mels + 2)
    edges = 700.0 * (10 ** (edges_mel / 2595.0) - 1.0)
    bins = np.fft.rfftfreq(n_fft, 1.0 / rate)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.maximum(0.0, np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)))


def log_mel_db(audio: np.ndarray, rate: int = RATE, n_fft: int = 1024, hop: int = 256, n_mels: int = 80) -> np.ndarray:
    """(frames, n_mels) log-mel power in dB, Hann window (the usual TTS evaluation front end)."""
    audio = np.asarray(audio, dtype=np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(np.pad(audio, n_fft // 2), n_fft)[::hop]
    power = np.abs(np.fft.rfft(frames * np.hanning(n_fft), axis=1)) ** 2
    return 10.0 * np.log10(np.maximum(power @ _mel_filters(n_fft, n_mels, rate).T, 1e-10))


def log_mel_l1_db(reference: np.ndarray, test: np.ndarray, floor_db: float = 60.0) -> float:
    """Mean |Δ log-mel| in dB over the cells of ``reference`` within ``floor_db`` of its loudest (silence would
    dominate otherwise)."""
    ref, tst = log_mel_db(reference), log_mel_db(test)
    n = min(len(ref), len(tst))
    ref, tst = ref[:n], tst[:n]
    floor = ref.max() - floor_db
    mask = ref > floor
    return float(np.abs(np.maximum(ref, floor) - np.maximum(tst, floor))[mask].mean())


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    n = min(reference.size, test.size)
    ref, err = reference[:n].astype(np.float64), reference[:n].astype(np.float64) - test[:n]
    return float(10.0 * np.log10(np.sum(ref**2) / max(np.sum(err**2), 1e-30)))


def seam_features(audio: np.ndarray, positions: list[int], half: int = 48) -> np.ndarray:
    """Per position: the largest sample-to-sample jump within ±2 ms and the energy above 8 kHz in that span
    (first-differenced twice: a step or a click shows up there, voiced speech hardly does)."""
    out = []
    for pos in positions:
        span = np.asarray(audio[max(0, pos - half) : pos + half], dtype=np.float64)
        jump = float(np.abs(np.diff(span)).max()) if span.size > 1 else 0.0
        high = float(np.mean(np.diff(span, n=2) ** 2)) if span.size > 2 else 0.0
        out.append((jump, high))
    return np.array(out)
