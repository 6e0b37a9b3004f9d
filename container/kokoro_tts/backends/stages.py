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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .ort_sessions import RUN_OPTIONS, SessionPair

SAMPLES_PER_FRAME = 600  # audio samples per aligned frame (25 ms at 24 kHz)
FEATURES_PER_FRAME = 2  # the generator's input runs at twice the aligned frame rate (F0's rate)
HARMONIC_PER_FRAME = 120  # STFT frames of the harmonic source per aligned frame (hop 5 samples)

FRONT_OUTPUTS = ("features", "durations", "harmonics")
DECODER_INPUTS = ("features", "harmonics", "style")


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


class OnnxStages:
    """The two derived graphs, run on their own: ``front`` once per chunk, ``decode`` per window."""

    def __init__(
        self,
        front: Path,
        decoder: Path,
        threads: int = 0,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        parallel: int = 1,
    ) -> None:
        self._front = SessionPair(front, threads, parallel, providers)
        self._decoder = SessionPair(decoder, threads, parallel, providers)

    def front(self, tokens: list[int], style: np.ndarray, speed: float) -> Prosody:
        style = np.asarray(style, dtype=np.float32).reshape(1, -1)
        feeds = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": style,
            "speed": np.array([speed], dtype=np.float32),
        }
        features, durations, harmonics = self._front.get().run(list(FRONT_OUTPUTS), feeds, RUN_OPTIONS)
        return Prosody(features, np.asarray(durations).reshape(-1), harmonics, style)

    def decode(self, prosody: Prosody, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Audio for aligned frames [start, stop) decoded on their own (no context: see vocoder_windows.py)."""
        stop = prosody.frames if stop is None else stop
        (audio,) = self._decoder.get().run(["audio"], prosody.window(start, stop), RUN_OPTIONS)
        return np.asarray(audio, dtype=np.float32).reshape(-1)
