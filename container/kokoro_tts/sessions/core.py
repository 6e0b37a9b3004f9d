"""The session core every WebSocket wire protocol shares, and the interface of the dialect that speaks one.

A ``Session`` holds one client's queue of utterances and speaks them strictly in order: two tasks, a receiver that
hands each incoming message to the dialect and a speaker that synthesizes the queue; cancel, close-when-spoken,
the send lock, the end when the client vanishes and the drain on shutdown. It knows no wire protocol's frames: a
``Dialect`` (sessions/bidi.py, sessions/deepgram.py) turns messages into calls on the session's public methods and
renders the session's events (audio, an utterance done or stopped, a refusal, a shutdown) into its own frames.
The receiver keeps reading after a close, so a client that vanishes while its queue is spoken stops that work at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

from kokoro_client.audio import SAMPLE_RATE
from kokoro_client.errors import INTERNAL_ERROR_MESSAGE, ErrorCode, TTSError
from kokoro_client.logs import bind_ids
from kokoro_client.protocol import CLOSE_GOING_AWAY, CLOSE_NORMAL, WordTiming
from starlette.websockets import WebSocket, WebSocketDisconnect

from kokoro_tts import metrics
from kokoro_tts.audio.encoding import AudioFormat, off_loop_encoder
from kokoro_tts.engine.capacity import READ_RECEIPTS, Pace, fell_behind
from kokoro_tts.engine.requests import SpeechRequest
from kokoro_tts.engine.scheduler import Interrupted, unless
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.settings import Settings

# The ASGI receive message key the server sets (server/hypercorn_hardening.py) on a frame over the size limit
# it dropped: the session answers message_too_large and goes on.
OVERSIZE_KEY = "kokoro.oversize_bytes"
# The most audio one binary frame carries. A client's WebSocket library answers the server's pings only once it has
# parsed the frames before them, but it parses up to a queue of whole messages ahead of its reader (Python
# ``websockets``: 16), so its answers vouch for that many frames it has not read (engine/capacity.py's
# ``ReadReceipts``): short frames keep that to seconds, where whole vocoder windows made it over a minute.
FRAME_SAMPLES = SAMPLE_RATE // 2

log = logging.getLogger(__name__)  # every dialect's session lines


# --- what an utterance says, as the speaker takes it: one whole request, or requests added while the client is
# still writing it (bidi's ``append``), then an end (``flush``) ---


@dataclass(frozen=True)
class Piece:
    """A request to speak, and where its text starts in the text the client sent for the utterance."""

    request: SpeechRequest
    start: int


class Pieces:
    """An utterance's pieces in order; ``next`` waits for one while the utterance is open."""

    def __init__(self) -> None:
        self._waiting: deque[Piece] = deque()
        self._open = True
        self._changed = asyncio.Event()
        self.waiting_chars = 0  # text of the pieces not yet taken: what a dialect caps

    @property
    def estimated_audio_s(self) -> float:
        """About how much audio the pieces not yet taken make (from their text: nothing is computed)."""
        return sum(piece.request.estimated_audio_s for piece in self._waiting)

    @classmethod
    def whole(cls, request: SpeechRequest) -> Pieces:
        """An utterance whose whole text came in one message."""
        pieces = cls()
        pieces.add(request, 0)
        pieces.end()
        return pieces

    @property
    def open(self) -> bool:
        return self._open

    @property
    def ready(self) -> bool:
        """``next`` returns at once: a piece waits, or the utterance has ended."""
        return bool(self._waiting) or not self._open

    def add(self, request: SpeechRequest, start: int) -> None:
        assert self._open, "a piece added after the end"
        self._waiting.append(Piece(request, start))
        self.waiting_chars += len(request.sent)
        self._changed.set()

    def end(self) -> None:
        self._open = False
        self._changed.set()

    async def next(self) -> Piece | None:
        """The next piece, once there is one; None once the utterance has ended and every piece was taken."""
        while not self.ready:
            self._changed.clear()
            await self._changed.wait()
        if not self._waiting:
            return None
        piece = self._waiting.popleft()
        self.waiting_chars -= len(piece.request.sent)
        return piece


@dataclass
class Utterance:
    id: str
    pieces: Pieces  # one whole request, or the pieces of a text still being written
    format: AudioFormat
    sample_rate: int
    word_timestamps: bool = False
    cancelled: bool = False
    received: float = field(default_factory=time.perf_counter)  # when its message arrived
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # set with ``cancelled``: wakes the speaker

    def cancel(self) -> None:
        self.cancelled = True
        self.stopping.set()


@dataclass(frozen=True)
class Spoken:
    """An utterance spoken to its end: its audio's length, the synthesis time, and the bytes sent."""

    audio_ms: float
    synth_ms: float
    sent_bytes: int


class Dialect(Protocol):
    """One wire protocol on a ``Session``: made with the session (``dialect(session)``), it calls only the session's
    public methods. The session calls these, each awaited before the session goes on."""

    @property
    def route(self) -> str:
        """The route label its metrics carry."""
        ...

    async def opened(self) -> bool:
        """The socket is accepted; False ends the session (the dialect has closed the socket)."""
        ...

    async def received(self, raw: str | bytes) -> None:
        """One client message. A ``TTSError`` raised here is answered with ``refused`` and the session goes on."""
        ...

    async def refused(self, error: TTSError, utterance_id: str | None = None) -> None:
        """A message, or an utterance's synthesis, failed with ``error``."""
        ...

    async def started(self, utterance: Utterance) -> None:
        """``utterance``'s first audio is about to be sent."""
        ...

    async def words(self, utterance: Utterance, words: tuple[WordTiming, ...]) -> None:
        """The words whose audio starts in the next ``audio`` (only for an utterance with ``word_timestamps``)."""
        ...

    async def audio(self, utterance: Utterance, data: bytes) -> None:
        """Encoded audio of ``utterance``, in order."""
        ...

    async def completed(self, utterance: Utterance, spoken: Spoken) -> None:
        """``utterance`` was spoken to its end."""
        ...

    async def stopped(self, utterance: Utterance) -> None:
        """A cancel stopped ``utterance`` in flight."""
        ...

    async def finished(self, utterance: Utterance) -> None:
        """After each utterance the speaker took, however it ended (spoken, failed, stopped)."""
        ...

    async def shutting_down(self, unfinished: Sequence[Utterance]) -> None:
        """The server is stopping with ``unfinished`` (stopped in flight, then queued) not spoken; the session then
        drops its queue and closes with 1001."""
        ...


class Session:
    """One client's WebSocket session, speaking the wire protocol of the dialect it is made with."""

    def __init__(self, websocket: WebSocket, engine: TTSEngine, dialect: Callable[[Session], Dialect]) -> None:
        self._ws = websocket
        self.engine: Final = engine
        self._queue: deque[Utterance] = deque()
        self._wakeup = asyncio.Event()
        self._closing = False
        self._in_flight: Utterance | None = None
        self._send_lock = asyncio.Lock()
        self._closed = False  # the server has sent its close: nothing more can reach the client

        self._draining = False
        # Until when (loop time) the session goes ahead of newcomers for a stream slot: a reply's next sentence,
        # shortly after it gave its slot back; never once it has fallen behind (engine/capacity.py).
        self._returning_until = 0.0
        self._pace: Pace | None = None  # while the session holds a stream slot: its client must keep up
        # When the audio sent so far will have finished playing (loop time): a sentence queued while earlier ones
        # still play is not needed now, so it yields to other clients' first audio (HTTP batch replies included,
        # which would otherwise wait behind every sentence of every session and time out).
        self._played_until = 0.0
        self._speaker: asyncio.Task[None] | None = None
        self.dialect: Final = dialect(self)
        self.route: Final = self.dialect.route

    # --- what a dialect reads ----------------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.engine.settings

    @property
    def path(self) -> str:
        path: str = self._ws.scope.get("path", "")
        return path

    @property
    def query_params(self) -> Mapping[str, str]:
        return self._ws.query_params

    @property
    def queued(self) -> Sequence[Utterance]:
        """The utterances waiting to be spoken, in order (a copy)."""
        return tuple(self._queue)

    @property
    def in_flight(self) -> Utterance | None:
        return self._in_flight

    @property
    def closing(self) -> bool:
        """The client asked to close: no new utterances, the queue is spoken, then the socket closes."""
        return self._closing

    def refuse_when_closing(self, close: str) -> None:
        """For a message that adds work: ``invalid_message`` once the client has asked to close (with the dialect's
        message ``close``)."""
        if self._closing:
            raise TTSError(ErrorCode.INVALID_MESSAGE, f"The session is closing: it takes nothing new after {close}.")

    def refuse_when_draining(self) -> None:
        """For a message that adds an utterance: ``shutting_down`` once the server is stopping."""
        if self._draining:
            raise TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; send this to another instance.")

    # --- what a dialect does -----------------------------------------------------------------------------------

    def enqueue(self, utterance: Utterance) -> None:
        """Queues ``utterance`` to be spoken after those before it (the dialect checks the count cap first);
        ``queue_full`` when it would take the queue past its seconds of audio (estimated from the text), so one
        session cannot reserve an hour of a stream slot. An empty queue takes any utterance."""
        queued_s = sum(u.pieces.estimated_audio_s for u in self._queue)
        limit = self.settings.max_queued_audio_s
        if self._queue and queued_s + utterance.pieces.estimated_audio_s > limit:
            raise TTSError(
                ErrorCode.QUEUE_FULL,
                f"About {queued_s:.0f} s of audio is already queued and this would take it past {limit:g} s; "
                "wait for what is queued to be spoken before sending more.",
            )
        self._queue.append(utterance)
        self._wakeup.set()

    def cancel(self, target: str | None) -> list[str]:
        """Drops matching queued utterances (returned, each counted as cancelled) and stops a matching one in
        flight (``stopped`` follows); None matches every one."""
        dropped = [u for u in self._queue if target is None or u.id == target]
        for utterance in dropped:
            self._queue.remove(utterance)
            metrics.utterance_cancelled(self.route)
        in_flight = self._in_flight
        if in_flight is not None and (target is None or in_flight.id == target):
            in_flight.cancel()  # the speaker stops waiting for its next chunk at once and reports it
        return [u.id for u in dropped]

    def clear(self) -> None:
        """Drops the whole queue (not counted as cancelled, as a shutdown's drop) and stops the utterance in
        flight, if any."""
        self._queue.clear()
        if self._in_flight is not None:
            self._in_flight.cancel()

    def close_when_spoken(self) -> None:
        """Takes no new utterances; once the queue is spoken the socket closes with 1000."""
        self._closing = True
        self._wakeup.set()

    async def send_text(self, text: str) -> None:
        """Sends ``text``; dropped once the server has closed the socket (the answer to a message the client sent
        after its close has nobody to reach)."""
        async with self._send_lock:
            if not self._closed:
                await self._ws.send_text(text)

    async def send_bytes(self, data: bytes) -> None:
        async with self._send_lock:
            if not self._closed:
                await self._ws.send_bytes(data)

    async def close(self, code: int, reason: str | None = None) -> None:
        async with self._send_lock:
            if not self._closed:
                self._closed = True
                await self._ws.close(code, reason)

    # --- the session's life ------------------------------------------------------------------------------------

    async def run(self) -> None:
        await self._ws.accept()
        log.info("session opened")
        if not await self.dialect.opened():
            return
        self._speaker = asyncio.create_task(self._speak())
        try:
            await self._receive()
        except WebSocketDisconnect:
            pass
        finally:
            self._speaker.cancel()  # the client left: stop synthesis, drop what is queued
            await asyncio.gather(self._speaker, return_exceptions=True)
            self.engine.slots.release(self)
            log.info("session closed")

    async def shutdown(self, grace_s: float) -> None:
        """The server is stopping: refuse new utterances, let the one in flight finish within ``grace_s`` (else stop
        it), tell the dialect what is left unspoken, and close with 1001."""
        self._draining = True
        self._wakeup.set()
        speaker = self._speaker
        if speaker is None or speaker.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(speaker), grace_s)
            return
        except TimeoutError:
            stopped = [self._in_flight] if self._in_flight is not None else []
            speaker.cancel()
            await asyncio.gather(speaker, return_exceptions=True)
        with contextlib.suppress(Exception):  # the client may be gone already
            await self._end_for_shutdown(stopped)

    # --- receiving -------------------------------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:  # until the client leaves, also after a close: its queue is dropped the moment it vanishes
            message = await self._ws.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            raw = message.get("bytes")
            if raw is None:
                raw = message.get("text") or ""
            try:
                if oversize := message.get(OVERSIZE_KEY):
                    raise TTSError(
                        ErrorCode.MESSAGE_TOO_LARGE,
                        f"The message has {oversize} bytes; the limit is {self.settings.max_message_bytes}.",
                    )
                await self.dialect.received(raw)
            except TTSError as error:
                await self.dialect.refused(error)
            except Exception:
                log.exception("unexpected failure handling a client message")
                await self.dialect.refused(TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE))

    # --- speaking --------------------------------------------------------------------------------------------

    async def _speak(self) -> None:
        while True:
            if self._draining:
                await self._end_for_shutdown([])
                return
            while not self._queue:
                if self._closing:
                    await self.close(CLOSE_NORMAL)
                    return
                if self._draining:
                    break
                self._wakeup.clear()
                await self._idle()
            if not self._queue:
                continue
            utterance = self._queue.popleft()
            self._in_flight = utterance
            try:
                await self._speak_one(utterance)
            finally:
                self._in_flight = None
            await self.dialect.finished(utterance)

    async def _speak_one(self, utterance: Utterance) -> None:
        bind_ids(utterance_id=utterance.id)
        try:
            await self._speak_one_counted(utterance)
        except asyncio.CancelledError:  # the client left, or the server stopped it
            metrics.utterance_cancelled(self.route)
            raise

    async def _idle(self) -> None:
        """Waits for the next utterance. A session holding a stream slot gives it back once its audio has played
        out with nothing queued; the next sentence of a reply, which comes while the last one plays, keeps it."""
        slots, pace, since = self.engine.slots, self._pace, asyncio.get_running_loop().time()
        if slots.holds(self):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(self._played_until):
                    await self._wakeup.wait()
                    if pace is not None:
                        pace.waited(since)  # waiting for the client's text is not reading slowly
                    return
            slots.release(self)
            self._returning_until = self._played_until + self.settings.stream_lag_s
        self._pace = None
        await self._wakeup.wait()

    async def _admitted(self, utterance: Utterance) -> bool:
        """Whether ``utterance`` may start: at once when the session holds a stream slot, else once it gets one
        (engine/capacity.py; a cancel stops the wait). Refused with ``server_busy`` past the bounded wait, or when
        too many utterances server-wide wait for their first audio."""
        slots = self.engine.slots
        returning = asyncio.get_running_loop().time() < self._returning_until
        if not slots.try_acquire(self, returning=returning):
            try:
                with self.engine.waiting.hold():
                    await _unless_stopped(
                        slots.acquire(self, self.settings.max_first_audio_wait_s, returning=returning), utterance
                    )
            except TTSError as error:
                await self.dialect.refused(error, utterance.id)
                return False
        if self._pace is None or self._pace.behind:
            receipts = self._ws.scope.get("extensions", {}).get(READ_RECEIPTS)  # None where the server has none
            self._pace = Pace(slots, self, self.settings.stream_lag_s, receipts=receipts)
        return True

    async def _next_piece(self, utterance: Utterance) -> Piece | None:
        """The utterance's next piece, None once it has ended or is cancelled. While the client is still writing it,
        the session keeps its stream slot until its audio has played out, as between utterances (``_idle``)."""
        pieces, slots, pace = utterance.pieces, self.engine.slots, self._pace
        if not pieces.ready and slots.holds(self):
            since = asyncio.get_running_loop().time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(self._played_until):
                    piece = await _unless_stopped(pieces.next(), utterance)
                    if pace is not None:
                        pace.waited(since)  # waiting for the client's text is not reading slowly
                    return piece
            slots.release(self)
            self._returning_until = self._played_until + self.settings.stream_lag_s
            self._pace = None
        return await _unless_stopped(pieces.next(), utterance)

    async def _speak_one_counted(self, utterance: Utterance) -> None:
        encoder = off_loop_encoder(utterance.format, utterance.sample_rate)
        sent_bytes, audio_ms, synth_ms, started, first_audio_s = 0, 0.0, 0.0, False, None
        loop = asyncio.get_running_loop()
        pace: Pace | None = None
        while not utterance.cancelled and (piece := await self._next_piece(utterance)) is not None:
            if not await self._admitted(utterance):
                return
            pace = self._pace
            assert pace is not None
            piece_start_ms = audio_ms  # the piece's words are timed from its own start, and index its own text
            async with aclosing(self.engine.stream(piece.request, due=self._played_until)) as stream:
                while not utterance.cancelled and not pace.behind:
                    asked = loop.time()
                    try:
                        if started:
                            chunk = await _unless_stopped(anext(stream, None), utterance)
                        else:
                            with self.engine.waiting.hold():  # server_busy rather than a wait behind every session
                                chunk = await _unless_stopped(anext(stream, None), utterance)
                    except TTSError as error:
                        await self.dialect.refused(error, utterance.id)
                        return
                    except Exception:
                        log.exception("synthesis failed for utterance %s", utterance.id)
                        await self.dialect.refused(
                            TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE), utterance.id
                        )
                        return
                    if chunk is None or utterance.cancelled:
                        break
                    pace.waited(asked)
                    if not started:
                        first_audio_s = time.perf_counter() - utterance.received
                        metrics.first_audio(self.route, first_audio_s)
                        await pace.send(self.dialect.started(utterance), 0.0)
                        started = True
                    words = _shifted(chunk.words, piece_start_ms, piece.start) if utterance.word_timestamps else ()
                    chunk_start_ms = audio_ms
                    for offset in range(0, chunk.pcm.size, FRAME_SAMPLES):
                        pcm = chunk.pcm[offset : offset + FRAME_SAMPLES]
                        ends_ms = chunk_start_ms + 1000.0 * (offset + pcm.size) / SAMPLE_RATE
                        last = offset + pcm.size >= chunk.pcm.size
                        due = words if last else _starting_before(words, ends_ms)
                        if due:  # the words whose audio starts in the frame that comes next
                            words = words[len(due) :]
                            await pace.send(self.dialect.words(utterance, due), 0.0)
                        data = await encoder.encode(pcm)
                        if data:
                            await pace.send(self.dialect.audio(utterance, data), pcm.size / SAMPLE_RATE)
                        sent_bytes += len(data)
                        audio_ms = ends_ms  # what was sent: a chunk cut short by a cancel counts its frames only
                        if utterance.cancelled or pace.behind:
                            break
                    self._played_until = max(self._played_until, loop.time()) + chunk.audio_ms / 1000.0
                    synth_ms += chunk.synth_ms
            if pace.behind:
                break
        metrics.audio_sent(self.route, audio_ms)
        if pace is not None and pace.behind:  # its slot is given up already: its next utterance waits as a newcomer
            self._returning_until = 0.0
            log.info("utterance %s stopped: its client fell behind its audio (slow_reader)", utterance.id)
            await self.dialect.refused(fell_behind(pace.margin_s), utterance.id)
            return
        if utterance.cancelled:
            metrics.utterance_cancelled(self.route)
            await self.dialect.stopped(utterance)
            return
        if not started:
            await self.dialect.refused(
                TTSError(ErrorCode.NOTHING_TO_SPEAK, "The text has nothing that can be spoken in this voice."),
                utterance.id,
            )
            return
        tail = await encoder.finish()
        if tail:
            await self.dialect.audio(utterance, tail)
            sent_bytes += len(tail)
        metrics.utterance_completed(self.route, audio_ms, synth_ms, first_audio_s)
        await self.dialect.completed(utterance, Spoken(audio_ms, synth_ms, sent_bytes))

    async def _end_for_shutdown(self, stopped: list[Utterance]) -> None:
        await self.dialect.shutting_down([*stopped, *self._queue])
        self._queue.clear()
        await self.close(CLOSE_GOING_AWAY)


async def _unless_stopped[T](step: Awaitable[T], utterance: Utterance) -> T | None:
    """``step``'s result, or None as soon as ``utterance`` is cancelled: a cancel does not wait for the window being
    made (nor for one still queued behind other sessions' work)."""
    try:
        return await unless(step, utterance.stopping.wait())
    except Interrupted:
        return None


def _starting_before(words: tuple[WordTiming, ...], ms: float) -> tuple[WordTiming, ...]:
    """The first of ``words`` (in order of their start) that start before ``ms``."""
    return tuple(itertools.takewhile(lambda w: w.start_ms < ms, words))


def _shifted(words: tuple[WordTiming, ...], ms: float, chars: int) -> tuple[WordTiming, ...]:
    """A piece's words, timed from the utterance's start and indexing the utterance's whole text."""
    if not ms and not chars:
        return words
    return tuple(
        replace(
            w,
            start_ms=round(w.start_ms + ms, 1),
            end_ms=round(w.end_ms + ms, 1),
            char_start=w.char_start + chars,
            char_end=w.char_end + chars,
        )
        for w in words
    )
