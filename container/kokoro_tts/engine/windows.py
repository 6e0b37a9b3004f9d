"""Decode a chunk's audio window by window, so its first audio costs one short window, not the whole chunk.

The vocoder's generator is windowed; its input is the whole chunk's, made once by the second window's job, except for
the first window, whose input comes from a prefix of the chunk (backends/stages.py). Each window is decoded with
``left_context`` / ``right_context`` frames of the features on each side and the context's audio is cut off. What is not
local in the generator is its AdaIN layers' normalisation over time: a window normalised by its own statistics sounds
unlike the whole chunk, the more so the shorter it is. So a chunk's windows share their statistics (``NormPool``: pooled
from a prior and the windows before, backends/stages.py), and then the context matters little: 2 left / 1 right frames
come as close as far wider ones (docs/engine.md has the figures). The windows overlap by ``crossfade`` frames and are
cross-faded there, so a small difference in level between neighbours is spread over 25 ms instead of stepping at a
sample. The harmonic source is made from the chunk's start, so its phase runs on.

Window sizes are planned so that playback, once started, never runs dry inside a chunk: a listener hearing
"Thanks for —" then half a second of silence is worse off than one who waits 100 ms more for fluent speech. The
first window is the smallest from ``first`` up after which the later windows, each the largest whose decoding
(context included, at the speed learnt so far: ``DecoderSpeed``) ends within ``margin`` of the audio queued
ahead of it, keep up (``first_size``; making the generator's input counts too: the first window's prefix, and the
whole chunk's in the second window's job). A chunk has a few windows (``windows``: three, or one per 1.25 s of a longer
chunk): each one costs its context and a call, and with three or four the first is a small part of a sentence.
No window, first or later, takes
more than ``longest_s`` of decoding alone: a huge first window would keep the first audio waiting for seconds, and a
client who leaves would still pay for a huge later one. When no first window up to that keeps up (a loaded
machine), the first window is ``first`` and the rest follows in windows of ``longest``: a gap, not a long wait. Under
load: a stream whose windows take turns with k others' gets a k-th of the decoder (``share``). A job alone has every
core, and jobs side by side a core each, so each kind is planned at the speed learnt from windows decoded that way.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kokoro_tts.audio.encoding import SAMPLE_RATE
from kokoro_tts.engine.backends.stages import FEATURES_CONTEXT, SAMPLES_PER_FRAME

FRAME_S = SAMPLES_PER_FRAME / SAMPLE_RATE  # seconds of audio per aligned frame


class Decode(Protocol):
    def __call__(self, start: int, stop: int, *, every_core: bool) -> np.ndarray:
        """Audio for aligned frames [start, stop), by a job with ``every_core`` or not (backends/ort_sessions.py)."""
        ...


class Complete(Protocol):
    def __call__(self, *, every_core: bool) -> object:
        """Make the chunk's whole input (backends/stages.py), by a job with ``every_core`` or not."""
        ...


class DecoderSpeed:
    """What decoding a window costs, learnt from the windows decoded last the way the ones it plans will be: by a job
    running alone (on every core: backends/ort_sessions.py), or by one of several side by side (a core each). A fixed
    cost per call (the generator's many small nodes) plus a cost per frame, fitted by least squares; in proportion to
    the frames until two window sizes have been seen. Empty (``known`` False) until the first window."""

    SAMPLES = 16  # the latest windows the fit uses: recent enough to follow the machine's load

    def __init__(self) -> None:
        self._samples: deque[tuple[int, float]] = deque(maxlen=self.SAMPLES)
        self._lock = threading.Lock()  # the engine's workers share one
        self._line = (0.0, 0.0)  # fitted at each ``add``: planning a window reads it many times

    @property
    def known(self) -> bool:
        return bool(self._samples)

    def add(self, frames: int, seconds: float) -> None:
        with self._lock:
            self._samples.append((frames, seconds))
            n = np.array([f for f, _ in self._samples], dtype=np.float64)
            t = np.array([s for _, s in self._samples], dtype=np.float64)
        line = (0.0, float(t.sum() / max(n.sum(), 1.0)))
        if np.ptp(n) > 0:
            per_frame, fixed = np.polyfit(n, t, 1)
            if per_frame > 0 and fixed >= 0:
                line = (float(fixed), float(per_frame))
        self._line = line

    def line(self) -> tuple[float, float]:
        """(fixed seconds per call, seconds per frame)."""
        return self._line

    def cost(self, frames: int) -> float:
        fixed, per_frame = self.line()
        return fixed + per_frame * frames

    def frames_within(self, seconds: float) -> int:
        """The most frames one call decodes within ``seconds``."""
        fixed, per_frame = self.line()
        return int((seconds - fixed) / max(per_frame, 1e-6))


@dataclass(frozen=True)
class WindowPlan:
    """Window sizes in aligned frames (25 ms each) and the context decoded around each window."""

    first: int = 6  # 150 ms: the smallest first window (the first audio waits for this window only)
    growth: float = 4.0  # unpaced (``bounds``): each later window this many times the one before...
    largest: int = 400  # ...up to 10 s, so a long chunk still yields audio steadily
    # A paced window's decoding, alone on the machine, takes at most this: a job is not interrupted, so another
    # stream's first window may wait for one window of this one, and a stream whose client left runs on for one.
    # Uncapped, a long chunk ahead of its playback grew to windows of seconds; capped, the same reply took no more
    # compute (docs/engine.md).
    longest_s: float = 1.0
    left_context: int = 2
    right_context: int = 1
    crossfade: int = 1
    # A paced window must be done within this share of the audio queued ahead of it: on a shared machine a window
    # now and then takes up to twice its usual time, and 0.85 left gaps where 0.7 left none (docs/engine.md).
    margin: float = 0.7
    # A first window planned into audio already queued (a later piece of a reply, behind the earlier pieces' audio)
    # also leaves this much of it unspent: the audio must still reach the listener through an agent and a network,
    # and ``margin``'s share of a short queue is less than that (docs/engine.md).
    slack_s: float = 0.3
    # A paced window must also be done this long before the queue runs out, however short the queue: on a CPU without
    # AMX the window after a short first one now and then arrived after the first had played (docs/engine.md).
    seam_s: float = 0.04
    least: int = 4  # a paced window smaller than this could not keep up: the context would cost more than its audio
    frames_per_window: int = 50  # a chunk has at most one window per 1.25 s, three at least: the module docstring
    fewest: int = 3

    def windows(self, frames: int, speed: DecoderSpeed | None = None) -> int:
        """The most windows a chunk of ``frames`` is decoded in (the last takes the rest): more when windows no
        longer than ``longest`` (at ``speed``) need more."""
        capped = -(-frames // self.longest(speed)) if speed is not None else 0
        return max(self.fewest, frames // self.frames_per_window, capped)

    @property
    def context(self) -> int:
        """Frames decoded for a window beside its own (both contexts and the crossfade)."""
        return self.left_context + self.right_context + self.crossfade

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

    def paced_size(self, queued_s: float, speed: DecoderSpeed, share: float = 1.0) -> int:
        """The largest window whose decoding, context included, ends within ``margin`` of the ``queued_s`` seconds
        of audio not yet played, less ``seam_s`` (at most ``largest``); 0 when not even ``least`` frames would.
        ``share``: how many streams' windows the decoder takes in turn (each of them waits for the others')."""
        size = speed.frames_within(min(self.margin * (queued_s - self.seam_s) / share, self.longest_s)) - self.context
        return 0 if size < self.least else min(self.largest, size)

    def longest(self, speed: DecoderSpeed) -> int:
        """The largest window ``longest_s`` allows (``largest`` while the speed is unknown)."""
        if not speed.known:
            return self.largest
        return max(self.least, min(self.largest, speed.frames_within(self.longest_s) - self.context))

    def paced_cost(
        self,
        first: int,
        frames: int,
        speed: DecoderSpeed,
        queued_s: float = 0.0,
        share: float = 1.0,
        inputs: DecoderSpeed | None = None,
    ) -> int | None:
        """Frames decoded in all (context included) when a first window of ``first`` frames is followed by paced
        windows; None when those cannot keep up: playback, from the first window on, would run dry inside the
        chunk (``queued_s``: audio still to play when the first window starts decoding; ``inputs``: what making
        the generator's input costs: the first window makes its own from a prefix, and the second window's job
        the whole chunk's first, backends/stages.py)."""
        start = self.stop(0, first, frames)
        lo, hi = self.span(0, start, frames)
        first_s = speed.cost(hi - lo) + self.prefix_cost(hi, frames, inputs)
        setup_s = inputs.cost(frames) if inputs is not None else 0.0
        queued = max(0.0, queued_s - share * first_s) + start * FRAME_S - share * setup_s
        decoded, count = hi - lo, 1
        while start < frames:
            if not (size := self.paced_size(queued, speed, share)) or (
                count + 1 >= self.windows(frames, speed) and size < frames - start
            ):
                return None
            stop, count = self.stop(start, size, frames), count + 1
            lo, hi = self.span(start, stop, frames)
            queued += (stop - start) * FRAME_S - share * speed.cost(hi - lo)
            start, decoded = stop, decoded + hi - lo
        return decoded

    def prefix_cost(self, stop: int, frames: int, inputs: DecoderSpeed | None) -> float:
        """Seconds to make a first window's input, decoded up to ``stop``, from a prefix of the chunk."""
        return inputs.cost(min(frames, stop + FEATURES_CONTEXT)) if inputs is not None else 0.0

    def first_size(
        self,
        frames: int,
        speed: DecoderSpeed,
        queued_s: float = 0.0,
        share: float = 1.0,
        inputs: DecoderSpeed | None = None,
    ) -> int:
        """The first window: the largest that fits the audio queued ahead (its decoding done within ``margin`` of it
        and ``slack_s`` before its end) when paced windows keep up after it; else the smallest from ``first`` up
        after which they do (``paced_cost``); ``first`` when none up to half the chunk or ``longest`` keeps up, or
        while the speed is unknown."""
        if not speed.known:
            return self.first
        prefix_s = self.prefix_cost(self.first + self.context, frames, inputs)
        # The queue whose ``margin`` is the time left to fit in: the shorter of the margin's and the slack's.
        fitted_s = min(queued_s, (queued_s - self.slack_s) / self.margin)
        fits = self.paced_size(fitted_s - share * prefix_s / self.margin, speed, share)
        if fits >= self.first and self.paced_cost(fits, frames, speed, queued_s, share, inputs) is not None:
            return fits
        # More than half the chunk is hardly windowed; more than ``longest`` keeps the first audio waiting longer
        # than a gap later would (a 900-frame chunk under load chose 370 frames: first audio after 5-7 s).
        largest = min(max(self.first, frames // 2), self.longest(speed))
        for smallest in range(self.first, largest + 1):
            if self.paced_cost(smallest, frames, speed, queued_s, share, inputs) is not None:
                return smallest
        return self.first

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
        speed: DecoderSpeed | None = None,
        clock: Callable[[], float] = time.perf_counter,
        inputs: DecoderSpeed | None = None,
        complete: Complete | None = None,
        side: DecoderSpeed | None = None,
    ) -> None:
        self._decode, self.frames, self.plan, self._clock = decode, frames, plan, clock
        self.inputs = inputs  # what making the generator's input costs (``WindowPlan.paced_cost``)
        # Makes the chunk's whole input, which the windows after the first decode from (backends/stages.py).
        self._complete = complete
        fade = plan.crossfade * SAMPLES_PER_FRAME
        self._ramp = (np.arange(fade, dtype=np.float32) + 0.5) / fade if fade else np.zeros(0, np.float32)
        self._held = np.zeros(0, dtype=np.float32)  # the previous window's overhang
        self.start = 0  # the first aligned frame not yet decoded
        self.count = 0  # windows decoded so far
        # The decoder's speed, learnt from the windows decoded alone (the engine shares one across its streams, so a
        # chunk's first window is planned from the windows before it); ``side``: from those decoded side by side,
        # whose fixed cost per call is a fraction of a job alone's (docs/engine.md).
        self.speed = speed if speed is not None else DecoderSpeed()
        self.side = side

    @property
    def done(self) -> bool:
        return self.start >= self.frames

    def next_size(self, queued_s: float, share: float = 1.0, speed: DecoderSpeed | None = None) -> int:
        """The next window's size when ``queued_s`` seconds of audio are still to play ahead of it, at ``speed``
        (default: ``self.speed``'s): the first window by ``WindowPlan.first_size``, the later ones paced
        (``WindowPlan.paced_size``)."""
        speed = speed if speed is not None else self.speed
        if not self.start:
            return self.plan.first_size(self.frames, speed, queued_s, share, self.inputs)
        paced, rest = self.plan.paced_size(queued_s, speed, share), self.frames - self.start
        if not paced:
            return self.plan.longest(speed)  # behind: the rest as fast as it can be made
        if self.count + 1 >= self.plan.windows(self.frames, speed) and paced >= rest:
            return rest  # the last window: the rest
        # A window more than planned when the rest would not be ready in time (the machine slower than learnt).
        return paced

    def next_window(
        self, queued_s: Callable[[], float], share: float = 1.0, *, every_core: bool, workers: int = 1
    ) -> np.ndarray:
        """Audio of the next window, sized by ``next_size`` against the audio still queued ahead of it (``queued_s``,
        asked after the chunk's whole input is made: the second window's job makes it first, once, and its cost is
        learnt into ``inputs``). ``every_core``: whether this window's job has every core (the scheduler's say);
        ``share``: the jobs taking turns on the ``workers``. A job alone is planned at ``speed``, each of the share
        taking the whole machine in turn; one side by side at ``side`` once known, its worker's jobs taking turns."""
        speed = self.speed
        if not every_core and self.side is not None and self.side.known:
            speed, share = self.side, max(1.0, share / workers)
        if self.start and self._complete is not None:
            began = self._clock()
            self._complete(every_core=every_core)
            if every_core and self.inputs is not None:  # the machine's own speed, as ``speed`` learns it
                self.inputs.add(self.frames, self._clock() - began)
            self._complete = None
        return self.decode(self.next_size(queued_s(), share, speed), every_core=every_core)

    def decode(self, size: int, *, every_core: bool) -> np.ndarray:
        """Audio of the next window of about ``size`` frames (a short tail is merged in: ``WindowPlan.stop``), by a
        job with ``every_core`` or not."""
        plan, start = self.plan, self.start
        stop = plan.stop(start, size, self.frames)
        lo, hi = plan.span(start, stop, self.frames)
        began = self._clock()
        audio = self._decode(lo, hi, every_core=every_core)
        # A first window also made its input from a prefix of the chunk (backends/stages.py): its decoding took that
        # less, and nothing is learnt while that cost is unknown (the engine's very first window). Side by side, the
        # prefix's cost is not learnt at all.
        prefix_known = start or self.inputs is None or self.inputs.known
        seconds = self._clock() - began
        if every_core and prefix_known:
            if not start:
                seconds -= plan.prefix_cost(hi, self.frames, self.inputs)
            self.speed.add(hi - lo, seconds)
        elif not every_core and start and self.side is not None:
            self.side.add(hi - lo, seconds)
        keep_to = min(stop + plan.crossfade, self.frames)
        piece = audio[(start - lo) * SAMPLES_PER_FRAME : (keep_to - lo) * SAMPLES_PER_FRAME].copy()
        held, ramp = self._held, self._ramp
        if held.size:
            piece[: held.size] = held * (1.0 - ramp[: held.size]) + piece[: held.size] * ramp[: held.size]
        cut = (stop - start) * SAMPLES_PER_FRAME
        self._held = piece[cut:]
        self.start, self.count = stop, self.count + 1
        return piece[:cut]


def decode_in_windows(
    decode: Decode,
    frames: int,
    plan: WindowPlan,
    paced: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    speed: DecoderSpeed | None = None,
    inputs: DecoderSpeed | None = None,
    complete: Complete | None = None,
    every_core: bool = True,
    side: DecoderSpeed | None = None,
) -> Iterator[np.ndarray]:
    """Yield the chunk's audio window by window, as the engine's jobs make it; joined, the pieces are as long as
    the whole chunk's audio. ``paced``: size windows by the decoder's measured speed (module docstring; ``speed``:
    what was learnt on chunks before, for the first window; ``inputs``, ``complete``: ``ChunkWindows``'), playback
    starting with the first window; else ``plan.bounds``. What the caller does between two windows counts against
    the audio queued. ``every_core``: whether this thread has every core (a warm-up's second round runs side by
    side, learning ``side``)."""
    windows = ChunkWindows(decode, frames, plan, speed, clock, inputs, complete, side)
    fixed = iter(plan.bounds(frames))
    yielded_s, playing_since = 0.0, 0.0

    def queued_s() -> float:
        return yielded_s - (clock() - playing_since) if yielded_s else 0.0

    while not windows.done:
        if paced:
            piece = windows.next_window(queued_s, every_core=every_core)
        else:
            start, stop = next(fixed)
            piece = windows.decode(stop - start, every_core=every_core)
        if not yielded_s:
            playing_since = clock()
        yielded_s += piece.size / SAMPLE_RATE
        yield piece
