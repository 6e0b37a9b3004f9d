"""THE frame-reading rule: audio belongs to the utterance whose ``synthesis_start`` came last.

The server speaks one utterance at a time, so a binary frame carries no id: it is the audio of the utterance in
flight, from its ``synthesis_start`` until its ``synthesis_complete`` (or a ``cancelled`` or ``error`` naming it).
Every client reads a session through one ``UtteranceReader``.
"""

from __future__ import annotations

from .errors import ErrorCode, TTSError
from .protocol import Cancelled, Error, ServerFrame, SynthesisComplete, SynthesisStart


class UtteranceReader:
    """Tracks the utterance in flight across a session's frames."""

    def __init__(self) -> None:
        self.current: SynthesisStart | None = None

    def audio(self, data: bytes) -> SynthesisStart:
        """The utterance ``data`` belongs to; ``TTSError(invalid_message)`` when none is in flight."""
        if self.current is None:
            raise TTSError(
                ErrorCode.INVALID_MESSAGE, f"the TTS server sent {len(data)} audio bytes outside an utterance"
            )
        return self.current

    def frame(self, frame: ServerFrame) -> ServerFrame:
        """Follows a control frame (returned as is): a start opens an utterance, its end closes it."""
        match frame:
            case SynthesisStart():
                self.current = frame
            case SynthesisComplete(id=ended) | Cancelled(id=ended) | Error(id=ended) if ended is not None:
                if self.current is not None and self.current.id == ended:
                    self.current = None
        return frame
