"""Decode a chunk's audio window by window, so its first audio costs one short window, not the whole chunk.

The vocoder is convolutional: the audio at aligned frame t depends on the decoder's inputs at frames
t - LEFT_CONTEXT … t + RIGHT_CONTEXT (measured by perturbing one input frame: tests/test_vocoder_windows.py).
Each window is decoded with that much context on each side and the context's audio is cut off. Two things
in the graph are not local: every AdaIN layer normalises over the time axis it is given, and the int8 export
quantizes each activation with a scale taken from the whole tensor. A window therefore sees slightly
different statistics from the whole chunk; the windows overlap by ``crossfade`` frames and are cross-faded
there, so any small difference in level between neighbours is spread over 25 ms instead of stepping at a
sample. The harmonic source comes from the front for the whole chunk (stages.py), so its phase runs on.

Window sizes are paced: after the first (small) window, each next window grows by ``growth`` at least, and more
when it can still be decoded, context included, before the audio already yielded has played (at the decoder
speed just measured): as few seams (and as little context recomputed) as playback allows. When even a
first-sized window cannot beat playback (a loaded machine), the rest of the chunk goes in one window: one gap,
at the least compute.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from .audio import SAMPLE_RATE
from .backends.stages import SAMPLES_PER_FRAME

Decode = Callable[[int, int], np.ndarray]  # audio for aligned frames [start, stop)


@dataclass(frozen=True)
class WindowPlan:
    """Window sizes in aligned frames (25 ms each) and the context decoded around each window."""

    first: int = 12  # 300 ms: the first audio waits for this window only
    growth: float = 4.0  # each later window this many times the one before...
    largest: int = 400  # ...up to 10 s, so a long chunk still yields audio steadily
    left_context: int = 20
    right_context: int = 10
    crossfade: int = 1
    margin: float = 0.7  # a paced window must be done within this share of the audio queued ahead of it

    def stop(self, start: int, size: int, frames: int) -> int:
        """End of the window of ``size`` frames from ``start``; a tail shorter than a first window (or the
        context) is merged in: it would cost more context than audio."""
        stop = min(frames, start + max(1, size))
        return frames if frames - stop < max(self.first, self.left_context) else stop

    def bounds(self, frames: int) -> list[tuple[int, int]]:
        """[start, stop) of each window, unpaced (sizes growing by ``growth``): the plan's cost and shape."""
        windows: list[tuple[int, int]] = []
        start, size = 0, self.first
        while start < frames:
            stop = self.stop(start, size, frames)
            windows.append((start, stop))
            start, size = stop, min(self.largest, int(size * self.growth))
        return windows

    def paced_size(self, queued_s: float, seconds_per_frame: float, previous: int) -> int:
        """The next window's size: the largest whose decoding, context included, ends within ``margin`` of the
        ``queued_s`` seconds of audio not yet played, but at least ``growth`` times the previous window (fewer,
        longer windows are closer to the whole chunk); ``largest`` when not even a first-sized one would fit."""
        context = self.left_context + self.right_context + self.crossfade
        size = int(self.margin * queued_s / max(seconds_per_frame, 1e-6)) - context
        if size < self.first:
            return self.largest
        return min(self.largest, max(size, int(previous * self.growth)))

    def decoded_frames(self, frames: int) -> int:
        """Frames the decoder runs on in all, context included (the cost of windowing)."""
        return sum(hi - lo for lo, hi in (self.span(start, stop, frames) for start, stop in self.bounds(frames)))

    def span(self, start: int, stop: int, frames: int) -> tuple[int, int]:
        """The frames decoded for window [start, stop): the window, the crossfade, and the context."""
        return max(0, start - self.left_context), min(frames, stop + self.crossfade + self.right_context)


class ChunkWindows:
    """One chunk's audio, decoded one window per call (the engine runs each call as its own scheduler job).

    Each call decodes its window with the plan's context, cross-fades its head with the previous window's
    overhang and keeps its own overhang for the next; joined, the pieces are as long as the whole chunk's audio.
    """

    def __init__(
        self,
        decode: Decode,
        frames: int,
        plan: WindowPlan,
        seconds_per_frame: float = 0.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._decode, self.frames, self.plan, self._clock = decode, frames, plan, clock
        fade = plan.crossfade * SAMPLES_PER_FRAME
        self._ramp = (np.arange(fade, dtype=np.float32) + 0.5) / fade if fade else np.zeros(0, np.float32)
        self._held = np.zeros(0, dtype=np.float32)  # the previous window's overhang
        self.start = 0  # the first aligned frame not yet decoded
        self.last_size = 0  # frames in the window decoded last
        # The decoder's speed on the last window, context included (0: not measured yet; a later chunk of the same
        # utterance starts from the one before's).
        self.seconds_per_frame = seconds_per_frame
        self.decoded = 0  # frames the decoder ran on so far, context included

    @property
    def done(self) -> bool:
        return self.start >= self.frames

    def next_size(self, queued_s: float) -> int:
        """The next window's size when ``queued_s`` seconds of audio are still to play ahead of it: a first window
        while the decoder's speed is unknown, else paced (``WindowPlan.paced_size``)."""
        if not self.seconds_per_frame:
            return self.plan.first
        return self.plan.paced_size(queued_s, self.seconds_per_frame, self.last_size)

    def decode(self, size: int) -> np.ndarray:
        """Audio of the next window of about ``size`` frames (a short tail is merged in: ``WindowPlan.stop``)."""
        plan, start = self.plan, self.start
        stop = plan.stop(start, size, self.frames)
        lo, hi = plan.span(start, stop, self.frames)
        began = self._clock()
        audio = self._decode(lo, hi)
        self.seconds_per_frame = (self._clock() - began) / (hi - lo)
        self.decoded += hi - lo
        keep_to = min(stop + plan.crossfade, self.frames)
        piece = audio[(start - lo) * SAMPLES_PER_FRAME : (keep_to - lo) * SAMPLES_PER_FRAME].copy()
        held, ramp = self._held, self._ramp
        if held.size:
            piece[: held.size] = held * (1.0 - ramp[: held.size]) + piece[: held.size] * ramp[: held.size]
        cut = (stop - start) * SAMPLES_PER_FRAME
        self._held = piece[cut:]
        self.start, self.last_size = stop, stop - start
        return piece[:cut]


def decode_in_windows(
    decode: Decode,
    frames: int,
    plan: WindowPlan,
    paced: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[np.ndarray]:
    """Yield the chunk's audio window by window; joined, the pieces are as long as the whole chunk's audio.
    ``paced``: size windows by the decoder's measured speed (module docstring), playback starting with the first
    window; else ``plan.bounds``."""
    windows = ChunkWindows(decode, frames, plan, clock=clock)
    fixed = iter(plan.bounds(frames))
    yielded_s, playing_since = 0.0, 0.0
    while not windows.done:
        if paced:
            size = windows.next_size(yielded_s - (clock() - playing_since))
        else:
            start, stop = next(fixed)
            size = stop - start
        piece = windows.decode(size)
        yield piece
        if not yielded_s:
            playing_since = clock()
        yielded_s += piece.size / SAMPLE_RATE
