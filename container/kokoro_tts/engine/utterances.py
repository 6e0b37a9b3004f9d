"""What a run speaks (engine/runs.py): an ``Utterance``, whose text is one whole request or pieces added while the
client is still writing it (bidi's ``append``, text/fragments.py), then an end."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kokoro_tts.audio.encoding import AudioFormat, OffLoopEncoder, off_loop_encoder
from kokoro_tts.engine.requests import SpeechRequest


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


@dataclass(eq=False)
class Utterance:
    """One utterance as a door hands it to a run: its pieces, and the shape of its audio (``encoder`` makes it: most
    doors take ``in_format``'s; one that also stretches the audio brings its own)."""

    id: str
    pieces: Pieces
    format: AudioFormat
    sample_rate: int
    encoder: OffLoopEncoder[Any]
    word_timestamps: bool = False  # the run reports which words start in each piece of audio (``Words``)
    cancelled: bool = False
    received: float = field(default_factory=time.perf_counter)  # when its request arrived: first audio counts from it
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # set with ``cancelled``: wakes the run

    @classmethod
    def in_format(
        cls, id: str, pieces: Pieces, fmt: AudioFormat, sample_rate: int, *, word_timestamps: bool = False
    ) -> Utterance:
        """An utterance whose audio is ``fmt`` at ``sample_rate``, encoded off the event loop."""
        return cls(id, pieces, fmt, sample_rate, off_loop_encoder(fmt, sample_rate), word_timestamps)

    def cancel(self) -> None:
        """Stops the utterance: queued, it is never spoken; in flight, its run ends within a window (``Stopped``)."""
        self.cancelled = True
        self.stopping.set()
