"""Stream slots: how many streams the engine plays at once without a gap, and who holds one.

A stream (a WebSocket session speaking, an HTTP synthesis streaming its body) needs its audio made at least as fast
as it plays. The warm-up measures what the workers make side by side, in seconds of audio per second of wall time;
the engine plays at most ``HEADROOM`` of that at once, one slot per stream. A newcomer past the slots waits for one
(its first audio later, never a start and then a stutter), up to a bound; past it, it is refused with
``server_busy``. A session that has spoken before goes ahead of newcomers, so a reply in progress is never starved
by callers arriving after it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from dataclasses import dataclass, field

from kokoro_tts.engine.scheduler import busy

# The share of the measured throughput the slots use: the rest absorbs first jobs, text work and the noise of a
# shared machine (a slot's stream uses about 1 s of audio per second, plus its first job).
HEADROOM = 0.8
MEASURED = 0  # KOKORO_STREAMS=0: the slots come from the warm-up's measurement
UNLIMITED = -1  # KOKORO_STREAMS=-1: no slots (every stream starts at once, as before the slots existed)


def waiting_room(floor: int, slots: float) -> int:
    """The cap on utterances waiting for their first audio: ``floor`` (KOKORO_MAX_WAITING), or twice the stream slots
    where that is more. A burst the slots can take is never refused at the door: as many streams as there are slots
    start together, and as many again may queue for the next free ones (bounded by the first-audio wait). A GPU's
    slots outnumber the CPU-sized floor (docs/gpu.md)."""
    return floor if math.isinf(slots) else max(floor, 2 * int(slots))


@dataclass(order=True)
class _Waiter:
    newcomer: bool  # False sorts first: a returning session goes ahead
    seq: int
    holder: object = field(compare=False)
    granted: asyncio.Future[None] = field(compare=False)


class StreamSlots:
    """The slots, their holders (any hashable: a session, an HTTP response's token) and the queue for them."""

    def __init__(self, setting: int) -> None:
        if setting < UNLIMITED:
            raise ValueError(f"streams must be {UNLIMITED} (no limit), {MEASURED} (measured) or a count, not {setting}")
        self.setting = setting
        self.throughput = 0.0  # seconds of audio the workers make per second, side by side (0: not measured)
        self.refused = 0  # streams refused after the bounded wait (GET /metrics)
        self._holders: set[object] = set()
        self._queue: list[_Waiter] = []
        self._seq = itertools.count()

    def measured(self, audio_s: float, wall_s: float) -> None:
        """The warm-up made ``audio_s`` of audio in ``wall_s`` with every worker busy."""
        self.throughput = audio_s / wall_s if wall_s > 0 else 0.0

    @property
    def ceiling(self) -> float:
        """How many streams play at once (``math.inf``: no limit)."""
        if self.setting == UNLIMITED or (self.setting == MEASURED and not self.throughput):
            return math.inf
        if self.setting == MEASURED:
            return max(1, math.floor(HEADROOM * self.throughput))
        return self.setting

    @property
    def count(self) -> int:
        return len(self._holders)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def holds(self, holder: object) -> bool:
        return holder in self._holders

    def try_acquire(self, holder: object, *, returning: bool = False) -> bool:
        """Whether ``holder`` has a slot now, taking a free one unless someone waits ahead of it (a newcomer queues
        behind anyone waiting; a returning session only behind other returning ones)."""
        if holder in self._holders:
            return True
        ahead = any(not w.newcomer or not returning for w in self._queue)
        if self.count < self.ceiling and not ahead:
            self._holders.add(holder)
            return True
        return False

    async def acquire(self, holder: object, max_wait_s: float, *, returning: bool = False) -> None:
        """Returns once ``holder`` has a slot: at once when ``try_acquire`` takes one, else when one is handed to
        it; ``server_busy`` after ``max_wait_s``. ``returning``: a session that has spoken before, served before
        every newcomer."""
        if self.try_acquire(holder, returning=returning):
            return
        waiter = _Waiter(not returning, next(self._seq), holder, asyncio.get_running_loop().create_future())
        heapq.heappush(self._queue, waiter)
        try:
            async with asyncio.timeout(max_wait_s):
                await asyncio.shield(waiter.granted)
        except TimeoutError:
            if not waiter.granted.done():
                self._leave(waiter)
                self.refused += 1
                raise busy(
                    f"All {self.ceiling:g} streams this server plays without a gap are in use and none came free "
                    f"within {max_wait_s:g} s",
                    max_wait_s,
                ) from None
        except asyncio.CancelledError:  # the client left, or cancelled the utterance, while it waited
            if waiter.granted.done():
                self.release(holder)  # handed over just now: pass it on
            else:
                self._leave(waiter)
            raise

    def _leave(self, waiter: _Waiter) -> None:
        """``waiter`` stops waiting: out of the queue now (not when a slot next frees, which can be minutes away)."""
        waiter.granted.cancel()
        self._queue.remove(waiter)
        heapq.heapify(self._queue)

    def release(self, holder: object) -> None:
        """``holder`` is done playing: its slot goes to the first in the queue (no-op for one holding none)."""
        if holder not in self._holders:
            return
        self._holders.discard(holder)
        while self._queue and self.count < self.ceiling:
            waiter = heapq.heappop(self._queue)
            self._holders.add(waiter.holder)
            waiter.granted.set_result(None)
