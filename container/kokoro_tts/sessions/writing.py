"""An utterance spoken while its client is still writing it: the part every dialect that takes text in fragments
shares (bidi's ``append``, ElevenLabs' contexts).

Fragments go into the fragment buffer (text/fragments.py), which decides where pieces start; each complete piece is
added to the utterance at once, with its offset in everything the client sent for it, so word timestamps index that
text. When a slow stream's sentence end is not in sight, a timer wakes the buffer to cut a clause early (its ``due``).
A flush speaks what is buffered and leaves the utterance open; ``end`` ends it.
"""

from __future__ import annotations

import asyncio

from kokoro_client.errors import ErrorCode, TTSError

from kokoro_tts.engine.utterances import Utterance
from kokoro_tts.sessions.core import Session
from kokoro_tts.text.fragments import EarlyCut, FragmentBuffer, TextPiece


class WrittenUtterance:
    """``utterance`` (queued on ``session`` by the dialect) taking its text in fragments, spoken with ``voice`` (a
    checked spec), ``speed`` and ``literal``."""

    def __init__(self, session: Session, utterance: Utterance, voice: str, speed: float, literal: bool) -> None:
        self._session = session
        self.utterance = utterance
        self.voice, self.speed, self.literal = voice, speed, literal
        wait_ms = session.settings.first_piece_ms
        loop = asyncio.get_running_loop()
        self._buffer = FragmentBuffer(EarlyCut(wait_ms / 1000) if wait_ms > 0 else None, loop.time)
        self._received = 0  # characters the client sent for the utterance
        self._base = 0  # where the buffer's text starts in them: a flush empties the buffer
        self._timer: asyncio.TimerHandle | None = None  # wakes the buffer when its ``due`` comes with no fragment
        self._refusals: set[asyncio.Task[None]] = set()  # errors of pieces cut by the timer, being sent

    @property
    def received_chars(self) -> int:
        return self._received

    def too_long(self, more: int) -> TTSError | None:
        """``text_too_long`` when ``more`` characters would take the text waiting to be spoken past the cap."""
        limit = self._session.settings.max_text_chars
        unspoken = self._buffer.pending_chars + self.utterance.pieces.waiting_chars + more
        if unspoken <= limit:
            return None
        return TTSError(
            ErrorCode.TEXT_TOO_LONG,
            f"At most {limit} characters of an utterance may wait to be spoken; this text would make {unspoken}. "
            "Wait for its audio, or end sentences sooner.",
        )

    async def append(self, text: str) -> None:
        """Adds ``text``; the pieces it completes are spoken (a piece that cannot be is refused, the rest go on)."""
        self._received += len(text)
        await self._refuse_all(self._queue(self._buffer.append(text)))
        self._arm()

    async def flush(self) -> None:
        """Speaks what is buffered, even without a sentence end; more text may follow."""
        self.stop()
        errors = self._queue(self._buffer.end())
        self._base = self._received
        await self._refuse_all(errors)

    async def end(self) -> None:
        """Speaks what is buffered and ends the utterance: its run completes once every piece is spoken."""
        try:
            await self.flush()
        finally:
            self.utterance.pieces.end()

    def stop(self) -> None:
        """No early cut is made any more (the utterance ended, or was dropped)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _queue(self, pieces: list[TextPiece]) -> list[TTSError]:
        """Queues ``pieces`` to be spoken (at once, in order); the errors of those that cannot be."""
        errors = []
        for piece in pieces:
            try:
                request = self._session.engine.rules.speech(piece.text, self.voice, self.speed, literal=self.literal)
            except TTSError as error:  # this piece only; the utterance goes on
                if error.code is not ErrorCode.NOTHING_TO_SPEAK:  # an emoji between sentences says nothing: no error
                    errors.append(error)
                continue
            self.utterance.pieces.add(request, self._base + piece.start)
        return errors

    def _arm(self) -> None:
        """Wakes the buffer when its next early cut is due, should no fragment come before. Past its due, a buffer
        that could not cut (too few whole words) waits for the next fragment: no timer then."""
        self.stop()
        loop = asyncio.get_running_loop()
        due = self._buffer.due
        if due is not None and due > loop.time():
            self._timer = loop.call_at(due, self._cut_due)

    def _cut_due(self) -> None:
        self._timer = None
        if not self.utterance.pieces.open:
            return
        if errors := self._queue(self._buffer.cut()):
            task = asyncio.create_task(self._refuse_all(errors))
            self._refusals.add(task)
            task.add_done_callback(self._refusals.discard)
        self._arm()

    async def _refuse_all(self, errors: list[TTSError]) -> None:
        for error in errors:
            await self._session.refuse(error, self.utterance.id)
