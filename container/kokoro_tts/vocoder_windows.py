"""Decode a chunk's audio window by window, so its first audio costs one short window, not the whole chunk.

The vocoder is convolutional: the audio at aligned frame t depends on the decoder's inputs at frames
t - LEFT_CONTEXT … t + RIGHT_CONTEXT (measured by perturbing one input frame: tests/test_vocoder_windows.py).
Each window is decoded with that much context on each side and the context's audio is cut off. Two things
in the graph are not local: every AdaIN layer normalises over the time axis it is given, and the int8 export
quantizes each activation with a scale taken from the whole tensor. A window therefore sees slightly
different statistics from the whole chunk; the windows overlap by ``CROSSFADE`` frames and are cross-faded
there, so any small difference in level between neighbours is spread over 25 ms instead of stepping at a
sample. The harmonic source comes from the front for the whole chunk (stages.py), so its phase runs on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

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

    def bounds(self, frames: int) -> list[tuple[int, int]]:
        """[start, stop) of each window; a window shorter than the context is merged into the one before."""
        windows: list[tuple[int, int]] = []
        start, size = 0, self.first
        while start < frames:
            stop = min(frames, start + size)
            if frames - stop < max(self.first, self.left_context):
                stop = frames  # a short tail would cost more context than audio
            windows.append((start, stop))
            start, size = stop, min(self.largest, int(size * self.growth))
        return windows

    def decoded_frames(self, frames: int) -> int:
        """Frames the decoder runs on in all, context included (the cost of windowing)."""
        return sum(hi - lo for lo, hi in (self.span(start, stop, frames) for start, stop in self.bounds(frames)))

    def span(self, start: int, stop: int, frames: int) -> tuple[int, int]:
        """The frames decoded for window [start, stop): the window, the crossfade, and the context."""
        return max(0, start - self.left_context), min(frames, stop + self.crossfade + self.right_context)


def decode_in_windows(decode: Decode, frames: int, plan: WindowPlan) -> Iterator[np.ndarray]:
    """Yield the chunk's audio window by window; joined, the pieces are as long as the whole chunk's audio."""
    fade = plan.crossfade * SAMPLES_PER_FRAME
    ramp = (np.arange(fade, dtype=np.float32) + 0.5) / fade if fade else np.zeros(0, np.float32)
    held = np.zeros(0, dtype=np.float32)  # the previous window's overhang, to cross-fade with this one's head
    for start, stop in plan.bounds(frames):
        lo, hi = plan.span(start, stop, frames)
        audio = decode(lo, hi)
        keep_to = min(stop + plan.crossfade, frames)
        piece = audio[(start - lo) * SAMPLES_PER_FRAME : (keep_to - lo) * SAMPLES_PER_FRAME].copy()
        if held.size:
            piece[: held.size] = held * (1.0 - ramp[: held.size]) + piece[: held.size] * ramp[: held.size]
        cut = (stop - start) * SAMPLES_PER_FRAME
        held = piece[cut:]
        yield piece[:cut]
