"""One utterance run for every door: a ``Stream`` admits an utterance, speaks it and hands its audio out as events.

A door (an HTTP response, a WebSocket session) opens a ``Stream``, which takes its door's cap (server_busy past it),
and asks it to ``speak`` each utterance with an ``out`` that renders events (engine/events.py) into its wire format;
``speak`` returns the ending as data for the door to render too. Everything between is decided here, once:
- admission: the door's cap when the stream opens; for an utterance, a stream slot (capacity.py), waited for within a
  bound, while it counts against the engine's ``waiting`` cap until its first audio; an HTTP newcomer is refused
  with ``server_busy`` at once when the work already accepted would keep its first audio waiting too long
  (scheduler.py's ``admit``; ``Door``);
- the run: each piece synthesized window by window, due when the audio before it has played; a cancel or a client
  gone stops it within a window; the client's pace watched (capacity.py's ``Pace``), a slow reader refused;
- the metrics, through the door's ``Meter``.
A session's stream outlives its utterances: between them (``idle``, or waiting for the client's next text) it keeps
its slot until its audio has played out, and a reply's next sentence goes ahead of newcomers for a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Protocol

from kokoro_client.audio import SAMPLE_RATE
from kokoro_client.errors import INTERNAL_ERROR_MESSAGE, ErrorCode, TTSError
from kokoro_client.protocol import WordTiming

from kokoro_tts.engine.capacity import Pace, ReadReceipts, fell_behind
from kokoro_tts.engine.events import Audio, Completed, Ending, Event, Refused, Started, Stopped, Words
from kokoro_tts.engine.scheduler import Interrupted, Limit, unless
from kokoro_tts.engine.synthesis import AudioChunk, TTSEngine
from kokoro_tts.engine.utterances import Piece, Utterance

log = logging.getLogger(__name__)

# The most audio one event carries on a WebSocket. A client's WebSocket library answers the server's pings only once
# it has parsed the frames before them, but it parses up to a queue of whole messages ahead of its reader (Python
# ``websockets``: 16), so its answers vouch for that many frames it has not read (capacity.py's ``ReadReceipts``):
# short frames keep that to seconds, where whole vocoder windows made it over a minute.
FRAME_SAMPLES = SAMPLE_RATE // 2

Out = Callable[[Event], Awaitable[None]]


class Meter(Protocol):
    """What a run reports as it happens (metrics.py's ``RouteMeter`` counts it under the door's route)."""

    def first_audio(self, seconds: float) -> None: ...

    def ended(self, ending: Ending, audio_ms: float) -> None: ...


@dataclass(frozen=True)
class Door:
    """How a kind of door holds its stream. ``frame_samples``: the most audio per event (None: a window whole).
    ``cut_off``, ``lends``: its ``Pace``'s (a stream that cannot tell its client in band is cut off when it falls
    behind, and one whose lag only shows late lends its slot while far ahead). ``returns``: a stream that gave its
    slot back moments ago goes ahead of newcomers (a session's reply between sentences). ``estimated``: a newcomer
    is refused at once when the work already accepted would keep its first audio waiting too long. A session was
    admitted when it opened (its cap), and its caller is in a conversation, so its utterances wait for a slot within
    the same bound instead; an HTTP request is one utterance, whose client retries elsewhere."""

    frame_samples: int | None
    cut_off: bool
    lends: bool
    returns: bool
    estimated: bool


HTTP = Door(frame_samples=None, cut_off=True, lends=True, returns=False, estimated=True)
SESSION = Door(frame_samples=FRAME_SAMPLES, cut_off=False, lends=False, returns=True, estimated=False)


class Stream:
    """One client's stream of audio on the engine: one HTTP response's, or a WebSocket session's across its
    utterances. Holds its door's cap from ``open`` to ``close``, and a stream slot while it plays."""

    def __init__(self, engine: TTSEngine, door: Door, cap: Limit, meter: Meter) -> None:
        cap.acquire()  # server_busy past the door's cap
        self.engine, self.door, self.meter = engine, door, meter
        self._cap, self._closed = cap, False
        # What the client has read, by its own answers, where its transport can say (a WebSocket, once accepted).
        self.receipts: ReadReceipts | None = None
        self._pace: Pace | None = None  # while the stream holds a slot: its client must keep up
        # When the audio sent so far will have finished playing (loop time): later audio is due then, so it yields
        # to other clients' first audio.
        self._played_until = 0.0
        # Until when (loop time) the stream goes ahead of newcomers for a slot (``Door.returns``); never once it has
        # fallen behind.
        self._returning_until = 0.0

    @classmethod
    def for_http(cls, engine: TTSEngine, meter: Meter) -> Stream:
        return cls(engine, HTTP, engine.http_streams, meter)

    @classmethod
    def for_session(cls, engine: TTSEngine, meter: Meter) -> Stream:
        return cls(engine, SESSION, engine.sessions, meter)

    def close(self) -> None:
        """Gives the slot and the door's cap back (once)."""
        if not self._closed:
            self._closed = True
            self.engine.slots.release(self)
            self._cap.release()

    async def idle(self, wakeup: asyncio.Event) -> None:
        """Waits for ``wakeup`` (the door's next utterance). A stream holding a slot gives it back once its audio has
        played out; the next sentence of a reply, which comes while the last one plays, keeps it."""
        if self.engine.slots.holds(self):
            await self._keeping_slot(wakeup.wait())
        else:
            self._pace = None
        await wakeup.wait()

    async def speak(self, utterance: Utterance, out: Out) -> Ending:
        """Speaks ``utterance``, its events through ``out``; returns how it ended. Cancelled (the door is going), it
        is counted as stopped."""
        ending: Ending = Stopped(utterance)
        run = _Run(utterance, self.door.frame_samples)
        try:
            ending = await self._speak(utterance, run, out)
            return ending
        finally:
            self.meter.ended(ending, run.audio_ms)

    # --- admission ---------------------------------------------------------------------------------------------

    async def _admitted(self, utterance: Utterance) -> Pace | None:
        """The stream's pace once it holds a slot; None if the utterance was stopped meanwhile. ``server_busy`` for
        a newcomer too far behind the work already accepted, or past the bounded wait for a slot."""
        engine, slots = self.engine, self.engine.slots
        returning = self.door.returns and asyncio.get_running_loop().time() < self._returning_until
        if self.door.estimated and not slots.holds(self):
            engine.scheduler.admit(engine.settings.max_first_audio_wait_s)
        if not slots.try_acquire(self, returning=returning):
            with engine.waiting.hold():
                await _unless_stopped(
                    slots.acquire(self, engine.settings.max_first_audio_wait_s, returning=returning), utterance
                )
            if utterance.cancelled:
                return None
        if self._pace is None or self._pace.behind:
            self._pace = Pace(
                slots,
                self,
                engine.settings.stream_lag_s,
                cut_off=self.door.cut_off,
                lends=self.door.lends,
                receipts=self.receipts,
            )
        return self._pace

    async def _keeping_slot[T](self, step: Awaitable[T]) -> T | None:
        """``step``'s result, while the stream (which holds a slot) keeps it until its audio has played out; None if
        it plays out first: the slot is given back (the next utterance is a returning one for a while)."""
        slots, pace = self.engine.slots, self._pace
        since = asyncio.get_running_loop().time()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(self._played_until):
                result = await step
                if pace is not None:
                    pace.waited(since)  # waiting for the client's text is not reading slowly
                return result
        slots.release(self)
        self._returning_until = self._played_until + self.engine.settings.stream_lag_s
        self._pace = None
        return None

    async def _next_piece(self, utterance: Utterance) -> Piece | None:
        """The utterance's next piece, None once it has ended or is cancelled; while the client is still writing it,
        the slot is kept as between utterances (``idle``)."""
        pieces = utterance.pieces
        if not pieces.ready and self.engine.slots.holds(self):
            piece = await self._keeping_slot(_unless_stopped(pieces.next(), utterance))
            if piece is not None or utterance.cancelled:
                return piece
        return await _unless_stopped(pieces.next(), utterance)

    # --- the run -----------------------------------------------------------------------------------------------

    async def _speak(self, utterance: Utterance, run: _Run, out: Out) -> Ending:
        pace: Pace | None = None
        while not utterance.cancelled and (piece := await self._next_piece(utterance)) is not None:
            try:
                pace = await self._admitted(utterance)
            except TTSError as error:
                return Refused(error, utterance.id)
            if pace is None:
                break
            chunks = self.engine.stream(piece.request, due=self._played_until)
            if (refusal := await self._speak_piece(utterance, piece, chunks, run, pace, out)) is not None:
                return refusal
            if pace.behind:
                break
        if pace is not None and pace.behind:  # its slot is given up already: its next utterance waits as a newcomer
            self._returning_until = 0.0
            log.info("utterance %s stopped: its client fell behind its audio (slow_reader)", utterance.id)
            return Refused(fell_behind(pace.margin_s), utterance.id)
        if utterance.cancelled:
            return Stopped(utterance)
        if run.first_audio_s is None:
            nothing = TTSError(ErrorCode.NOTHING_TO_SPEAK, "The text has nothing that can be spoken in this voice.")
            return Refused(nothing, utterance.id)
        if tail := await utterance.encoder.finish():
            await out(Audio(utterance, tail))
            run.sent_bytes += len(tail)
        return Completed(utterance, run.audio_ms, run.synth_ms, run.sent_bytes, run.first_audio_s)

    async def _speak_piece(
        self,
        utterance: Utterance,
        piece: Piece,
        chunks: AsyncGenerator[AudioChunk],
        run: _Run,
        pace: Pace,
        out: Out,
    ) -> Refused | None:
        """Sends one piece's audio as it is made; a refusal if its synthesis fails."""
        loop = asyncio.get_running_loop()
        piece_start_ms = run.audio_ms  # the piece's words are timed from its own start, and index its own text
        async with aclosing(chunks):
            while not utterance.cancelled and not pace.behind:
                asked = loop.time()
                await pace.ready()  # a stream that lent its slot takes one back first
                try:
                    chunk = await self._next_chunk(chunks, utterance, started=run.first_audio_s is not None)
                except TTSError as error:
                    return Refused(error, utterance.id)
                except Exception:
                    log.exception("synthesis failed for utterance %s", utterance.id)
                    return Refused(TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE), utterance.id)
                if chunk is None or utterance.cancelled:
                    return None
                pace.waited(asked)
                if run.first_audio_s is None:
                    run.first_audio_s = time.perf_counter() - utterance.received
                    self.meter.first_audio(run.first_audio_s)
                    await pace.send(out(Started(utterance)), 0.0)
                words = _shifted(chunk.words, piece_start_ms, piece.start) if utterance.word_timestamps else ()
                await run.send(chunk, words, pace, out)
                self._played_until = max(self._played_until, loop.time()) + chunk.audio_ms / 1000.0
        return None

    async def _next_chunk(
        self, chunks: AsyncGenerator[AudioChunk], utterance: Utterance, *, started: bool
    ) -> AudioChunk | None:
        """The next chunk, None once there is none or the utterance is stopped. Until its first audio the utterance
        counts against the engine's ``waiting`` cap: server_busy rather than a wait behind every stream."""
        if started:
            return await _unless_stopped(anext(chunks, None), utterance)
        with self.engine.waiting.hold():
            return await _unless_stopped(anext(chunks, None), utterance)


class _Run:
    """What one utterance's run has sent so far."""

    def __init__(self, utterance: Utterance, frame_samples: int | None) -> None:
        self.utterance, self._frame_samples = utterance, frame_samples
        self.audio_ms = 0.0  # what was sent: a chunk cut short by a cancel counts its frames only
        self.synth_ms = 0.0
        self.sent_bytes = 0
        self.first_audio_s: float | None = None
        self._owed_s = 0.0  # audio the encoder has taken but not yet given back as bytes (held for its next frame)

    async def send(self, chunk: AudioChunk, words: tuple[WordTiming, ...], pace: Pace, out: Out) -> None:
        """``chunk``'s audio, frame by frame, each frame's words (when asked for) before it."""
        utterance, encoder = self.utterance, self.utterance.encoder
        chunk_start_ms, step = self.audio_ms, self._frame_samples or chunk.pcm.size
        for offset in range(0, chunk.pcm.size, step):
            pcm = chunk.pcm[offset : offset + step]
            ends_ms = chunk_start_ms + 1000.0 * (offset + pcm.size) / SAMPLE_RATE
            due = words if offset + pcm.size >= chunk.pcm.size else _starting_before(words, ends_ms)
            if due:
                words = words[len(due) :]
                await pace.send(out(Words(utterance, due)), 0.0)
            data = await encoder.encode(pcm)
            self._owed_s += pcm.size / SAMPLE_RATE
            if data:
                await pace.send(out(Audio(utterance, data, self._owed_s)), self._owed_s)
                self._owed_s = 0.0
            self.sent_bytes += len(data)
            self.audio_ms = ends_ms
            if utterance.cancelled or pace.behind:
                break
        self.synth_ms += chunk.synth_ms


async def _unless_stopped[T](step: Awaitable[T], utterance: Utterance) -> T | None:
    """``step``'s result, or None as soon as ``utterance`` is cancelled: a cancel does not wait for the window being
    made (nor for one still queued behind other streams' work)."""
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
