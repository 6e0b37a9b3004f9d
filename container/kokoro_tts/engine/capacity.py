"""Stream slots: how many streams the engine plays at once without a gap, and who holds one.

A stream (a WebSocket session speaking, an HTTP synthesis streaming its body) needs its audio made at least as fast
as it plays. The warm-up measures what the workers make side by side, in seconds of audio per second of wall time;
the engine plays at most ``HEADROOM`` of that at once, one slot per stream. A newcomer past the slots waits for one
(its first audio later, never a start and then a stutter), up to a bound; past it, it is refused with
``server_busy``. A session whose reply is in progress (it gave its slot back moments ago) goes ahead of newcomers,
so a reply is never starved by callers arriving after it; that priority lasts a few seconds, so no session keeps
it for good.

A slot is held by a stream that keeps up (``Pace``): its client must take its audio about as fast as it plays. A
stream whose sent audio falls behind its playback clock by more than a margin gives its slot up at once; the stream
is then told (``slow_reader``) and stopped, so a client reading slowly cannot hold a slot that an honest caller
needs, however little it reads. Where that is slow to show (HTTP: the client's receive buffer hides a minute of mp3),
a stream far enough ahead of its playback lends its slot to a waiter and takes one back, ahead of everyone, when
it needs audio made again.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kokoro_client.errors import ErrorCode, TTSError

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


# Who goes first for a free slot: a stream taking back the slot it lent (``Pace``), then a session whose reply is in
# progress, then newcomers in arrival order.
_RECLAIMING, _RETURNING, _NEWCOMER = 0, 1, 2


@dataclass(order=True)
class _Waiter:
    rank: int
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
        self.first_throughput = 0.0  # the warm-up's figure, before any re-check moved it
        self.measured_at = 0.0  # when ``throughput`` was measured (Unix time; 0: never)
        self.measurements = 0  # the warm-up's, then each re-check while idle
        self.refused = 0  # streams refused after the bounded wait (GET /metrics)
        self.fell_behind = 0  # streams that gave their slot up because their client read too slowly (GET /metrics)
        self.lent = 0  # slots lent to a waiter by streams whose clients held plenty of audio (GET /metrics)
        self._holders: set[object] = set()
        self._queue: list[_Waiter] = []
        self._wanted: list[asyncio.Future[None]] = []
        self._seq = itertools.count()

    def measured(self, audio_s: float, wall_s: float) -> None:
        """The warm-up (or a re-check while idle) made ``audio_s`` of audio in ``wall_s`` with every worker busy."""
        self.throughput = audio_s / wall_s if wall_s > 0 else 0.0
        if not self.measurements:
            self.first_throughput = self.throughput
        self.measurements += 1
        self.measured_at = time.time()

    @property
    def idle(self) -> bool:
        """No stream holds or waits for a slot."""
        return not self._holders and not self._queue

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
        return self._try(holder, _RETURNING if returning else _NEWCOMER)

    def _try(self, holder: object, rank: int) -> bool:
        if holder in self._holders:
            return True
        if self.count < self.ceiling and not any(w.rank <= rank for w in self._queue):
            self._holders.add(holder)
            return True
        return False

    async def acquire(self, holder: object, max_wait_s: float, *, returning: bool = False) -> None:
        """Returns once ``holder`` has a slot: at once when ``try_acquire`` takes one, else when one is handed to
        it; ``server_busy`` after ``max_wait_s``. ``returning``: a session that has spoken before, served before
        every newcomer."""
        if await self._granted(holder, _RETURNING if returning else _NEWCOMER, max_wait_s):
            return
        self.refused += 1
        raise busy(
            f"All {self.ceiling:g} streams this server plays without a gap are in use and none came free within "
            f"{max_wait_s:g} s",
            max_wait_s,
        )

    async def reclaim(self, holder: object, within_s: float) -> None:
        """A stream that lent its slot (``Pace``) takes one back, ahead of everyone waiting; past ``within_s`` (its
        client's audio about to run out) it takes one over the ceiling: a stream once admitted is never refused, and
        the ceiling holds again as soon as a slot frees."""
        if not await self._granted(holder, _RECLAIMING, within_s):
            self._holders.add(holder)

    async def _granted(self, holder: object, rank: int, max_wait_s: float) -> bool:
        """Whether ``holder`` got a slot within ``max_wait_s``, queued by ``rank``."""
        if self._try(holder, rank):
            return True
        waiter = _Waiter(rank, next(self._seq), holder, asyncio.get_running_loop().create_future())
        heapq.heappush(self._queue, waiter)
        while self._wanted:  # streams that would lend their slot to a waiter (``Pace``)
            wanted = self._wanted.pop()
            if not wanted.done():
                wanted.set_result(None)
        try:
            async with asyncio.timeout(max_wait_s):
                await asyncio.shield(waiter.granted)
        except TimeoutError:
            if not waiter.granted.done():
                self._leave(waiter)
                return False
        except asyncio.CancelledError:  # the client left, or cancelled the utterance, while it waited
            if waiter.granted.done():
                self.release(holder)  # handed over just now: pass it on
            else:
                self._leave(waiter)
            raise
        return True

    def wanted(self) -> asyncio.Future[None]:
        """Done once a stream waits for a slot (at once if one does)."""
        future = asyncio.get_running_loop().create_future()
        if self._queue:
            future.set_result(None)
        else:
            self._wanted = [w for w in self._wanted if not w.done()]  # given up by streams that went on
            self._wanted.append(future)
        return future

    def lend(self, holder: object) -> None:
        """``holder`` needs no audio made for a while (its client holds plenty): its slot goes to the first waiter."""
        if holder in self._holders:
            self.lent += 1
            self.release(holder)

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


def fell_behind(margin_s: float) -> TTSError:
    """What a stream that gave its slot up is told."""
    return TTSError(
        ErrorCode.SLOW_READER,
        f"The audio was read more than {margin_s:g} s slower than it plays, so its stream slot went to another "
        "caller and this synthesis was stopped; read the audio as it comes.",
    )


READ_RECEIPTS = "kokoro.read_receipts"  # the ASGI scope extension a WebSocket's ``ReadReceipts`` travel in
MAX_UNANSWERED = 256  # marks kept for a client that does not answer; older ones are forgotten
# Audio a WebSocket stream may have sent past its client's latest answer. A client's library reads the socket in
# large pieces (Python's asyncio: up to 256 KiB, half a minute of μ-law) and answers every ping in a piece at once,
# so with more in flight its answers would vouch for audio still unread; a reader that keeps up answers within a
# round trip, far inside this.
AHEAD_OF_READ_S = 1.0


class ReadReceipts:
    """What a WebSocket's client has read, by its own answers: after each piece of audio the server pings with a mark
    (random, so it cannot be answered unread), and a client's WebSocket library answers a ping only once it has
    parsed every frame before it, parsing nothing more while its unread messages fill its queue (Python
    ``websockets``: 16 messages). So the latest answered mark is a floor on the audio its client has taken, however
    large the socket buffers between them. Made by the server (server/hypercorn_hardening.py), which calls
    ``answered`` with each pong's payload."""

    def __init__(self, ping: Callable[[bytes], Awaitable[None]]) -> None:
        self._ping = ping
        self._marks: deque[tuple[bytes, float]] = deque(maxlen=MAX_UNANSWERED)
        self._answer = asyncio.Event()  # set at each answer
        self.sent_s = 0.0  # audio sent on the connection
        self.read_s = 0.0  # audio before the latest answered mark
        # Whether the client has answered at all: one that never does (a library that does not, a proxy that
        # swallows pings) is judged by what its socket takes, as an HTTP stream is, not starved of audio.
        self.answering = False

    @property
    def ahead_s(self) -> float:
        """Audio sent that the client has not vouched for."""
        return self.sent_s - self.read_s

    async def answer(self) -> None:
        """Waits for the client's next answer."""
        self._answer.clear()
        await self._answer.wait()

    async def sent(self, audio_s: float) -> None:
        """``audio_s`` more audio went out: a ping marks where it ends."""
        self.sent_s += audio_s
        mark = secrets.token_bytes(8)
        self._marks.append((mark, self.sent_s))
        await self._ping(mark)

    def answered(self, payload: bytes) -> None:
        while self._marks:
            mark, position = self._marks.popleft()
            if mark == payload:
                self.read_s, self.answering = position, True
                self._answer.set()
                return
        # not one of ours (or already answered): nothing was forgotten that a later answer will not cover


# A stream judged by its transport alone (HTTP) cannot tell a client that plays what it reads from one that reads a
# tenth as fast until the client's receive buffer has filled and drained: a minute of mp3 on Linux's defaults. While
# the audio its transport took runs this far ahead of its playback clock, it needs nothing made, so a waiter may have
# its slot; it takes one back as soon as one is free, and ahead of everyone once that lead is down to
# ``RECLAIM_LEAD_S``.
LEND_LEAD_S = 12.0
RECLAIM_LEAD_S = 6.0
RECLAIM_POLL_S = 1.0


class Pace:
    """One slot holder's audio against its playback clock: the clock starts at its first audio and runs in real time,
    paused while the stream waits for the server (its next window) or for the client's next text; the audio its
    transport has taken must stay within ``margin_s`` of it, and so must the audio its client has read where the
    transport can say (``receipts``: a WebSocket). A send still waiting past that gives the slot up there and then
    (``behind``), so the slot is free for others at once, not when the slow send ends; so does a send that finds
    the client's reading already that far behind. ``cut_off``: a stream that is cut off when it falls behind (HTTP)
    abandons that send; else (a session, which tells its client in band) the send is finished first. ``lends``: a
    stream more than ``LEND_LEAD_S`` ahead lends its slot to a waiter (a WebSocket's does so too until its client
    first answers); it then calls ``ready`` before it makes more audio."""

    def __init__(
        self,
        slots: StreamSlots,
        holder: object,
        margin_s: float,
        *,
        cut_off: bool = False,
        lends: bool = False,
        receipts: ReadReceipts | None = None,
    ) -> None:
        self._slots, self._holder, self.margin_s, self._cut_off = slots, holder, margin_s, cut_off
        self._lends, self.lent = lends, False
        self._receipts = receipts
        self._read_from = receipts.sent_s if receipts is not None else 0.0  # what the connection sent before
        self._loop = asyncio.get_running_loop()
        self._started: float | None = None
        self._paused_s = 0.0  # time the player would have sat dry through no fault of the client
        self._sent_s = 0.0  # audio the transport has taken
        self.behind = False

    @property
    def _played_to(self) -> float:
        """When a player that started at the first audio has played everything sent (loop time)."""
        assert self._started is not None
        return self._started + self._paused_s + self._sent_s

    def waited(self, since: float) -> None:
        """The stream waited from ``since`` until now for the server or the client's text: the part of it its player
        would have sat dry is not the client's lag."""
        if self._started is None:
            return
        now = self._loop.time()
        dry_from = max(since, self._played_to)
        if now > dry_from:
            self._paused_s += now - dry_from

    @property
    def _deadline(self) -> float:
        """When the stream is too far behind (loop time), by what its transport took and what its client read."""
        played_to = self._played_to
        if self._receipts is not None and self._receipts.answering:
            read_s = max(0.0, self._receipts.read_s - self._read_from)
            played_to = min(played_to, self._played_to - self._sent_s + read_s)
        return played_to + self.margin_s

    @property
    def lead_s(self) -> float:
        """How long its client can play before it needs more audio."""
        return self._deadline - self.margin_s - self._loop.time()

    @property
    def _may_lend(self) -> bool:
        """A stream judged by its transport alone: HTTP's, and a WebSocket's until its client first answers (a
        client reading slowly answers its first ping late, and its socket's buffers hide that meanwhile)."""
        return self._lends or (self._receipts is not None and not self._receipts.answering)

    def _lend_if_wanted(self) -> asyncio.Future[None] | None:
        """Lends the slot if it may and a stream waits; else, while it may, what to wait on for a waiter."""
        if not self._may_lend or self.lent or self.lead_s < LEND_LEAD_S:
            return None
        wanted = self._slots.wanted()
        if wanted.done():
            self.lent = True
            self._slots.lend(self._holder)
            return None
        return wanted

    async def ready(self) -> None:
        """Before more audio is made: a stream that lent its slot takes one back. While its client holds more than
        ``RECLAIM_LEAD_S`` it takes only a free one nobody waits for (looking each ``RECLAIM_POLL_S``); then it
        goes ahead of everyone (``StreamSlots.reclaim``), waiting at most half of what is left."""
        if not self.lent or self.behind:
            return
        while (lead := self.lead_s) > RECLAIM_LEAD_S:
            if self._slots.try_acquire(self._holder):
                self.lent = False
                return
            await asyncio.sleep(min(RECLAIM_POLL_S, lead - RECLAIM_LEAD_S))
        await self._slots.reclaim(self._holder, max(0.0, self.lead_s) / 2)
        self.lent = False

    def _give_up(self) -> None:
        self.behind = True
        self._slots.fell_behind += 1
        self._slots.release(self._holder)

    async def _room_to_send(self) -> None:
        """Waits while ``AHEAD_OF_READ_S`` of audio is out that the client has not vouched for; gives the slot up
        once the deadline passes first."""
        receipts = self._receipts
        while receipts is not None and receipts.answering and receipts.ahead_s > AHEAD_OF_READ_S:
            timeout = self._deadline - self._loop.time()
            if timeout <= 0:
                self._give_up()
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await receipts.answer()

    async def send(self, sending: Awaitable[None], audio_s: float) -> None:
        """Awaits ``sending`` (``audio_s`` of audio), once the client has vouched for all but ``AHEAD_OF_READ_S`` of
        what went before; past the deadline the slot is given up, even while the send still waits."""
        if self._started is None:
            self._started = self._loop.time()
        watched = not self.behind and math.isfinite(self._slots.ceiling)  # no slots: none to give up
        try:
            if watched:
                await self._room_to_send()
        except BaseException:
            asyncio.ensure_future(sending).cancel()  # never started: closed unrun
            raise
        task = asyncio.ensure_future(sending)
        try:
            if watched:
                while not self.behind and not task.done():
                    timeout = self._deadline - self._loop.time()
                    if timeout <= 0:
                        self._give_up()
                        break
                    wanted = self._lend_if_wanted()
                    try:  # an answer may move the deadline meanwhile, a waiter may come for the slot
                        waits = {task} if wanted is None else {task, wanted}
                        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        if wanted is not None:
                            wanted.cancel()
                if self.behind and self._cut_off and not task.done():
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    return
            await task
        except BaseException:
            task.cancel()
            raise
        self._sent_s += audio_s
        if self._receipts is not None and audio_s > 0:
            await self._receipts.sent(audio_s)
