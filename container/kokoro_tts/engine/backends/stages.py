"""Kokoro in three stages: the prosody front, the generator's input features, and the vocoder's generator.

The shipped ONNX export is one graph, tokens → audio. Cut where the decoder takes the aligned text features and the
predicted F0 and energy curves, and again where its generator (the iSTFTNet upsampler) takes its inputs, it
becomes:

- **front**: tokens, style, speed → ``aligned`` (1, 512, T): the text encoder's features repeated per aligned
  frame; ``f0`` and ``energy`` (1, 2T); and the predicted ``durations`` per token (frames, padding tokens
  included). BERT, the duration and the F0/energy predictors: the part that must see the whole sentence.
- **features**: aligned, f0, energy, style → ``features`` (1, 512, 2T), the decoder's frame-rate blocks, and
  ``harmonics`` (1, 22, 120T + 1): the STFT of the harmonic source the generator mixes in. The source is a sine
  bank whose phase integrates F0 from the start of the chunk, so it is made from the chunk's start: a window of the
  generator takes its slice, and its phase carries on across windows instead of restarting at zero.
- **decoder**: the generator alone: features, harmonics, style → audio (600 samples per aligned frame at 24 kHz).

The export has no random nodes (its sine generator draws no random initial phase and adds no noise), so the
stages as cut reproduce the monolithic graph bit for bit (tests/server/test_vocoder_windows.py). The graphs are
derived with onnx's own extractor at ``make weights`` time (scripts/weights/stage_graphs.py), which also makes the
source's STFT a convolution (faster; the same transform to float rounding: docs/weights.md).

A chunk's first audio needs the front, and the features and the generator of its first window only. The features
stage is local (its convolutions reach ``FEATURES_CONTEXT`` frames; the harmonic source, made from the chunk's
start, is exact on any prefix), so the first window takes its features from a prefix of the chunk; every later
window takes the whole chunk's, made once (``complete``) by the job of the second window. That halves the work
before the first audio on a long sentence (docs/engine.md).

Every AdaIN layer normalises over the time axis it is given, so a window (or a prefix) decoded alone would be
normalised by its own statistics, not the chunk's: that, not the convolutions' reach, is what made short windows
sound unlike the whole chunk (with the whole chunk's statistics fed in, windows of any size and count come as
close to it as the int8 model's own noise floor). The derived features and generator graphs
therefore take the statistics to pool with (``norm_moments``, ``norm_share``) and return their input's own
(``window_moments``): a chunk's ``ChunkPool`` carries them from window to window, starting from the voice's priors
(its statistics over a reference sentence, measured at ``make weights`` time), so the first window is normalised
nearly as the chunk will be. Run with no pool (a whole chunk), both graphs compute the export's arithmetic, bit for
bit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kokoro_tts.engine.backends import kernels
from kokoro_tts.engine.backends.ort_sessions import RUN_OPTIONS, SessionPair

SAMPLES_PER_FRAME = 600  # audio samples per aligned frame (25 ms at 24 kHz)
FEATURES_PER_FRAME = 2  # the generator's input runs at twice the aligned frame rate (F0's rate)
HARMONIC_PER_FRAME = 120  # STFT frames of the harmonic source per aligned frame (hop 5 samples)

FRONT_OUTPUTS = ("aligned", "f0", "energy", "durations")
FEATURES_INPUTS = ("aligned", "f0", "energy", "style")
FEATURES_OUTPUTS = ("features", "harmonics")
DECODER_INPUTS = ("features", "harmonics", "style")
NORM_INPUTS = ("norm_moments", "norm_share")  # added by the derivation (scripts/weights/stage_graphs.py)
NORM_OUTPUT = "window_moments"
# The priors' file: per voice, the generator's priors under the voice's name and the features stage's under this
# prefix; the tokens spoken as silence; and what the priors were measured from (scripts/weights/stage_graphs.py).
FEATURES_PRIOR = "features/"
SILENT_TOKENS = "silent_tokens"
PRIORS_FINGERPRINT = "fingerprint"
# Frames of the chunk beyond a window that its features are made from, while the chunk's own are not made yet. The
# blocks' convolutions reach 11 frames by count; a prefix's features match the whole chunk's to the int8 noise floor
# from fewer (docs/engine.md).
FEATURES_CONTEXT = 12
# A voice's prior counts as this many aligned frames in a chunk's pool (chosen by measurement: docs/engine.md).
PRIOR_FRAMES = 60.0
# A chunk that is mostly silence ("Hello!": its pads and punctuation take half its frames) is normalised unlike any
# prior mixed from speech and silence (docs/engine.md): it pools its own windows only.
MOST_SILENT = 0.4


@dataclass
class Prosody:
    """The front's output for one chunk, and once made (``OnnxStages.complete``) the generator's input for every
    aligned frame."""

    aligned: np.ndarray  # (1, 512, T)
    f0: np.ndarray  # (1, 2T)
    energy: np.ndarray  # (1, 2T)
    durations: np.ndarray  # (n_tokens + 2,) frames per token
    style: np.ndarray  # (1, 256)
    features: np.ndarray | None = None  # (1, 512, 2T)
    harmonics: np.ndarray | None = None  # (1, 22, 120T + 1)

    @property
    def frames(self) -> int:
        return int(self.aligned.shape[-1])

    def prefix(self, stop: int) -> dict[str, np.ndarray]:
        """The features stage's feeds for aligned frames [0, stop)."""
        return {
            "aligned": self.aligned[:, :, :stop],
            "f0": self.f0[:, : FEATURES_PER_FRAME * stop],
            "energy": self.energy[:, : FEATURES_PER_FRAME * stop],
            "style": self.style,
        }


def generator_feeds(
    features: np.ndarray, harmonics: np.ndarray, style: np.ndarray, start: int, stop: int
) -> dict[str, np.ndarray]:
    """The generator's feeds for aligned frames [start, stop) of ``features`` and ``harmonics``."""
    return {
        "features": features[:, :, FEATURES_PER_FRAME * start : FEATURES_PER_FRAME * stop],
        "harmonics": harmonics[:, :, HARMONIC_PER_FRAME * start : HARMONIC_PER_FRAME * stop + 1],
        "style": style,
    }


class NormPool:
    """One graph's instance-norm statistics pooled over a chunk's windows so far: per channel of every layer, the
    mean and the mean square (``moments``, [2, C]), weighted by the aligned frames they cover. Starts from a prior,
    or empty (the first window then normalises by its own)."""

    def __init__(self, prior: np.ndarray | None = None, prior_frames: float = PRIOR_FRAMES) -> None:
        self.moments = None if prior is None else np.asarray(prior, dtype=np.float32)
        self.weight = 0.0 if prior is None else prior_frames

    def feeds(self, frames: int, channels: int) -> dict[str, np.ndarray]:
        """The graph's statistics inputs for a window of ``frames``: its share of the pool, and the pool."""
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


@dataclass
class ChunkPool:
    """A windowed chunk's pools: the generator's, and the features stage's (used while the chunk's own features are
    not made: its first window)."""

    generator: NormPool = field(default_factory=NormPool)
    features: NormPool = field(default_factory=NormPool)


def silent_fraction(tokens: Sequence[int], durations: np.ndarray, silent: Collection[int]) -> float:
    """The share of a chunk's frames that its pads and its ``silent`` tokens (punctuation) take."""
    ids = [0, *tokens, 0]
    frames = float(np.sum(durations))
    return sum(float(d) for token, d in zip(ids, durations, strict=True) if token == 0 or token in silent) / max(
        frames, 1.0
    )


class OnnxStages:
    """The three derived graphs, run on their own: ``front`` once per chunk, ``decode`` per window."""

    def __init__(
        self,
        front: Path,
        features: Path,
        decoder: Path,
        threads: int = 0,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        parallel: int = 1,
        priors: Path | None = None,
        fused_snake: bool = True,
        direct_conv: bool = True,
    ) -> None:
        self._front = SessionPair(front, threads, parallel, providers)
        self._features = SessionPair(features, threads, parallel, providers)
        # The generator's Snake nodes, and its convolutions where the CPU suits the kernel, as native kernels where
        # they can run (kernels.py); else as their functions.
        self.fused_snake = fused_snake and kernels.usable(providers)
        self.direct_conv = self.fused_snake and direct_conv and kernels.direct_conv_runs()
        self._decoder = SessionPair(decoder, threads, parallel, providers, self.fused_snake, self.direct_conv)
        self.channels = self._norm_channels(self._decoder)  # the generator's norm channels, all layers
        self.features_channels = self._norm_channels(self._features)
        # Per voice and graph: the statistics of silence and of speech ([2, 2, C]), mixed per chunk (``norm_pool``).
        self._priors: dict[str, np.ndarray] = {}
        self._silent: frozenset[int] = frozenset()
        if priors is not None and priors.is_file():
            with np.load(priors) as saved:
                voices = (name for name in saved.files if name not in (SILENT_TOKENS, PRIORS_FINGERPRINT))
                self._priors = {name: saved[name] for name in voices}
                self._silent = frozenset(int(token) for token in saved[SILENT_TOKENS])

    @staticmethod
    def _norm_channels(graph: SessionPair) -> int:
        inputs = {i.name: i.shape for i in graph.get(every_core=True).get_inputs()}  # both sessions: one graph
        return int(inputs[NORM_INPUTS[0]][1])

    def norm_pool(self, voice: str, tokens: Sequence[int], prosody: Prosody) -> ChunkPool:
        """A chunk's pools, each starting from ``voice``'s silence and speech statistics mixed as the chunk's frames
        are (its pads and punctuation: silence). Empty for a blend, or a chunk that is mostly silence
        (``MOST_SILENT``): its first window then normalises by its own statistics."""
        generator, features = self._priors.get(voice), self._priors.get(FEATURES_PRIOR + voice)
        if generator is None or features is None:
            return ChunkPool()
        silence = silent_fraction(tokens, prosody.durations, self._silent)
        if silence > MOST_SILENT:
            return ChunkPool()
        return ChunkPool(
            NormPool(silence * generator[0] + (1.0 - silence) * generator[1]),
            NormPool(silence * features[0] + (1.0 - silence) * features[1]),
        )

    def front(self, tokens: list[int], style: np.ndarray, speed: float, *, every_core: bool = True) -> Prosody:
        style = np.asarray(style, dtype=np.float32).reshape(1, -1)
        feeds = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": style,
            "speed": np.array([speed], dtype=np.float32),
        }
        aligned, f0, energy, durations = self._front.get(every_core).run(list(FRONT_OUTPUTS), feeds, RUN_OPTIONS)
        return Prosody(aligned, f0, energy, np.asarray(durations).reshape(-1), style)

    def features(
        self, prosody: Prosody, stop: int | None = None, pool: NormPool | None = None, *, every_core: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """The generator's input (features, harmonics) made from aligned frames [0, stop) (all: the whole chunk),
        normalised with ``pool``, whose statistics then take in these frames' own; without one, by their own."""
        stop = prosody.frames if stop is None else min(stop, prosody.frames)
        feeds = prosody.prefix(stop) | (pool or NormPool()).feeds(stop, self.features_channels)
        features, harmonics, moments = self._features.get(every_core).run(
            [*FEATURES_OUTPUTS, NORM_OUTPUT], feeds, RUN_OPTIONS
        )
        if pool is not None:
            pool.add(stop, moments)
        return features, harmonics

    def complete(self, prosody: Prosody, *, every_core: bool = True) -> Prosody:
        """Make the whole chunk's features, as the export does (once: later calls return at once)."""
        if prosody.features is None:
            prosody.features, prosody.harmonics = self.features(prosody, every_core=every_core)
        return prosody

    def decode(
        self,
        prosody: Prosody,
        start: int = 0,
        stop: int | None = None,
        pool: ChunkPool | None = None,
        *,
        every_core: bool = True,
    ) -> np.ndarray:
        """Audio for aligned frames [start, stop), normalised with ``pool``, whose statistics then take in the
        window's own; without one, each layer normalises by the frames it is given: the export's arithmetic. A
        pooled first window, before the chunk's features are made, takes its features from a prefix; any other
        window makes the chunk's first (``complete``)."""
        stop = prosody.frames if stop is None else stop
        if prosody.features is None and pool is not None and start == 0:
            features, harmonics = self.features(prosody, stop + FEATURES_CONTEXT, pool.features, every_core=every_core)
        else:
            self.complete(prosody, every_core=every_core)
            assert prosody.features is not None and prosody.harmonics is not None
            features, harmonics = prosody.features, prosody.harmonics
        generator = pool.generator if pool is not None else None
        feeds = generator_feeds(features, harmonics, prosody.style, start, stop)
        feeds |= (generator or NormPool()).feeds(stop - start, self.channels)
        audio, moments = self._decoder.get(every_core).run(["audio", NORM_OUTPUT], feeds, RUN_OPTIONS)
        if generator is not None:
            generator.add(stop - start, moments)
        return np.asarray(audio, dtype=np.float32).reshape(-1)
