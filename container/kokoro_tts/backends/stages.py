"""Kokoro in two stages: the front (cheap) and the vocoder's generator (about 90 % of the time).

The shipped ONNX export is one graph, tokens → audio. Cut where the decoder's generator (the iSTFTNet upsampler)
takes its inputs, it becomes:

- **front**: tokens, style, speed → ``features`` (1, 512, 2T): the decoder's frame-rate blocks run on the whole
  chunk (7 % of the decoder's time: their AdaIN statistics are the whole chunk's, as in the monolithic graph);
  the predicted ``durations`` per token (frames, padding tokens included); and ``harmonics`` (1, 22, 120T + 1):
  the STFT of the harmonic source the generator mixes in. The source is a sine bank whose phase integrates F0
  from the start of the chunk, so it is made here, once for the whole chunk: a window of the generator then
  takes its slice and its phase carries on across windows instead of restarting at zero.
- **decoder**: the generator alone: features, harmonics, style → audio (600 samples per aligned frame at 24 kHz).
  Windowing only this part needs less context per window than windowing the whole decoder did (vocoder_windows.py).

The export has no random nodes (its sine generator draws no random initial phase and adds no noise), so the
two stages as cut reproduce the monolithic graph bit for bit (tests/server/test_vocoder_windows.py). The graphs are
derived with onnx's own extractor at ``make weights`` time (scripts/weights/stage_graphs.py), which also makes the
front's STFT a convolution (faster; the same transform to float rounding: docs/weights.md).

Every AdaIN layer of the generator normalises over the time axis it is given, so a window decoded alone would be
normalised by its own statistics, not the chunk's: that, not the convolutions' reach, is what made short windows
sound unlike the whole chunk (measured: with the whole chunk's statistics fed in, windows of any size and count
come within 0.9 dB log-mel L1 of it, the int8 model's own noise floor). The derived generator therefore takes the
statistics to pool with (``norm_moments``, ``norm_share``) and returns its window's own (``window_moments``):
``NormPool`` carries them from window to window, starting from the voice's prior (its statistics over a reference
sentence, measured at ``make weights`` time), so the first window is normalised nearly as the chunk will be.
Decoding with no pool (a whole chunk) is the export's arithmetic, bit for bit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .ort_sessions import RUN_OPTIONS, SessionPair

SAMPLES_PER_FRAME = 600  # audio samples per aligned frame (25 ms at 24 kHz)
FEATURES_PER_FRAME = 2  # the generator's input runs at twice the aligned frame rate (F0's rate)
HARMONIC_PER_FRAME = 120  # STFT frames of the harmonic source per aligned frame (hop 5 samples)

FRONT_OUTPUTS = ("features", "durations", "harmonics")
DECODER_INPUTS = ("features", "harmonics", "style")
NORM_INPUTS = ("norm_moments", "norm_share")  # added by the derivation (scripts/weights/stage_graphs.py)
NORM_OUTPUT = "window_moments"
SILENT_TOKENS = "silent_tokens"  # the norm priors' file also lists the tokens spoken as silence
# A voice's prior counts as this many aligned frames in a chunk's pool. Measured over 3 voices x 4 sentences, 3
# windows, the prior from another sentence: 60 frames 1.4-2.1 dB log-mel L1 from the whole chunk, no prior 2.2-3.7.
PRIOR_FRAMES = 60.0
# A chunk that is mostly silence ("Hello!": its pads and punctuation take half its frames) is normalised unlike any
# prior mixed from speech and silence (measured: 2.1-4.7 dB with one, 2.7-3.6 without): it pools its own windows only.
MOST_SILENT = 0.4


@dataclass(frozen=True)
class Prosody:
    """The front's output for one chunk: everything the decoder needs, for every aligned frame."""

    features: np.ndarray  # (1, 512, 2T)
    durations: np.ndarray  # (n_tokens + 2,) frames per token
    harmonics: np.ndarray  # (1, 22, 120T + 1)
    style: np.ndarray  # (1, 256)

    @property
    def frames(self) -> int:
        return int(self.features.shape[-1]) // FEATURES_PER_FRAME

    def window(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The generator's feeds for aligned frames [start, stop)."""
        return {
            "features": self.features[:, :, FEATURES_PER_FRAME * start : FEATURES_PER_FRAME * stop],
            "harmonics": self.harmonics[:, :, HARMONIC_PER_FRAME * start : HARMONIC_PER_FRAME * stop + 1],
            "style": self.style,
        }


class NormPool:
    """The generator's instance-norm statistics pooled over a chunk's windows so far: per channel of every layer,
    the mean and the mean square (``moments``, [2, C]), weighted by the aligned frames they cover (a window's
    context included). Starts from a prior, or empty (the first window then normalises by its own)."""

    def __init__(self, prior: np.ndarray | None = None, prior_frames: float = PRIOR_FRAMES) -> None:
        self.moments = None if prior is None else np.asarray(prior, dtype=np.float32)
        self.weight = 0.0 if prior is None else prior_frames

    def feeds(self, frames: int, channels: int) -> dict[str, np.ndarray]:
        """The generator's statistics inputs for a window of ``frames``: its share of the pool, and the pool."""
        moments = self.moments if self.moments is not None else np.zeros((2, channels), np.float32)
        moments_in, share = NORM_INPUTS
        return {moments_in: moments, share: np.array([frames / (frames + self.weight)], np.float32)}

    def add(self, frames: int, window_moments: np.ndarray) -> None:
        own = np.asarray(window_moments, dtype=np.float32)
        if self.moments is None:
            self.moments = own
        else:
            self.moments = (self.weight * self.moments + frames * own) / (self.weight + frames)
        self.weight += frames


def silent_fraction(tokens: Sequence[int], durations: np.ndarray, silent: Collection[int]) -> float:
    """The share of a chunk's frames that its pads and its ``silent`` tokens (punctuation) take."""
    ids = [0, *tokens, 0]
    frames = float(np.sum(durations))
    return sum(float(d) for token, d in zip(ids, durations, strict=True) if token == 0 or token in silent) / max(
        frames, 1.0
    )


class OnnxStages:
    """The two derived graphs, run on their own: ``front`` once per chunk, ``decode`` per window."""

    def __init__(
        self,
        front: Path,
        decoder: Path,
        threads: int = 0,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        parallel: int = 1,
        priors: Path | None = None,
    ) -> None:
        self._front = SessionPair(front, threads, parallel, providers)
        self._decoder = SessionPair(decoder, threads, parallel, providers)
        inputs = {i.name: i.shape for i in self._decoder.get().get_inputs()}
        self.channels = int(inputs[NORM_INPUTS[0]][1])  # the generator's norm channels, all layers
        # Per voice: the statistics of silence and of speech ([2, 2, C]), mixed per chunk (``norm_pool``).
        self._priors: dict[str, np.ndarray] = {}
        self._silent: frozenset[int] = frozenset()
        if priors is not None and priors.is_file():
            with np.load(priors) as saved:
                self._priors = {name: saved[name] for name in saved.files if name != SILENT_TOKENS}
                self._silent = frozenset(int(token) for token in saved[SILENT_TOKENS])

    def norm_pool(self, voice: str, tokens: Sequence[int], prosody: Prosody) -> NormPool:
        """A chunk's pool, starting from ``voice``'s silence and speech statistics mixed as the chunk's frames are
        (its pads and punctuation: silence). Empty for a blend, or a chunk that is mostly silence (``MOST_SILENT``):
        its first window then normalises by its own statistics."""
        prior = self._priors.get(voice)
        if prior is None:
            return NormPool()
        silence = silent_fraction(tokens, prosody.durations, self._silent)
        if silence > MOST_SILENT:
            return NormPool()
        return NormPool(silence * prior[0] + (1.0 - silence) * prior[1])

    def front(self, tokens: list[int], style: np.ndarray, speed: float) -> Prosody:
        style = np.asarray(style, dtype=np.float32).reshape(1, -1)
        feeds = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": style,
            "speed": np.array([speed], dtype=np.float32),
        }
        features, durations, harmonics = self._front.get().run(list(FRONT_OUTPUTS), feeds, RUN_OPTIONS)
        return Prosody(features, np.asarray(durations).reshape(-1), harmonics, style)

    def decode(
        self, prosody: Prosody, start: int = 0, stop: int | None = None, pool: NormPool | None = None
    ) -> np.ndarray:
        """Audio for aligned frames [start, stop), normalised with ``pool``, whose statistics then take in the
        window's own; without one, each layer normalises by the frames it is given: the export's arithmetic."""
        stop = prosody.frames if stop is None else stop
        feeds = prosody.window(start, stop) | (pool or NormPool()).feeds(stop - start, self.channels)
        audio, moments = self._decoder.get().run(["audio", NORM_OUTPUT], feeds, RUN_OPTIONS)
        if pool is not None:
            pool.add(stop - start, moments)
        return np.asarray(audio, dtype=np.float32).reshape(-1)
