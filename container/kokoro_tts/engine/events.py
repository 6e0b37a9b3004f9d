"""What a run (engine/runs.py) says as it speaks an utterance: the one vocabulary every door renders, an HTTP route
into its body and a session's dialect into its frames.

In order: ``Started`` once the first audio is made, then ``Words`` (asked for only) and ``Audio`` as they come,
then one ending: ``Completed``, ``Stopped`` (a cancel, or the client left) or ``Refused`` (with the stable error).
"""

from __future__ import annotations

from dataclasses import dataclass

from kokoro_client.errors import TTSError
from kokoro_client.protocol import WordTiming

from kokoro_tts.engine.utterances import Utterance


@dataclass(frozen=True)
class Started:
    """``utterance``'s first audio is made and about to be sent."""

    utterance: Utterance


@dataclass(frozen=True)
class Words:
    """The words whose audio starts in the next ``Audio``: in ms from the utterance's start, indexing its text."""

    utterance: Utterance
    words: tuple[WordTiming, ...]


@dataclass(frozen=True)
class Audio:
    """Encoded audio of ``utterance``, in order: ``seconds`` of the utterance's audio (the encoder's last bytes,
    after its final ``Audio``, say 0 though they hold the few samples it kept back)."""

    utterance: Utterance
    data: bytes
    seconds: float = 0.0


@dataclass(frozen=True)
class Completed:
    """``utterance`` was spoken to its end: its audio's length, the synthesis time, the bytes sent, its first audio."""

    utterance: Utterance
    audio_ms: float
    synth_ms: float
    sent_bytes: int
    first_audio_s: float


@dataclass(frozen=True)
class Stopped:
    """A cancel stopped ``utterance``, or its client left."""

    utterance: Utterance


@dataclass(frozen=True)
class Refused:
    """``error`` ended the utterance named (or refused a message of a session, with no utterance)."""

    error: TTSError
    utterance_id: str | None = None


Event = Started | Words | Audio
Ending = Completed | Stopped | Refused
