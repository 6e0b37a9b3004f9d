"""What the engine is asked to say, checked once: ``SpeechRequest``, and ``RequestRules``, which makes one.

Each front door (routes/, sessions/) reads its own wire fields (names, formats, defaults), then hands text, voice
and speed to ``RequestRules.speech``: the one place each of them is checked. The engine takes the ``SpeechRequest``
that comes back and only synthesizes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from kokoro_client.errors import ErrorCode, TTSError, quoted

from kokoro_tts.engine.voices import Voice, VoiceBank
from kokoro_tts.settings import Settings
from kokoro_tts.text import markup
from kokoro_tts.text.normalize import longest_number, normalize
from kokoro_tts.text.phonemes import clean_text_mapped, kept_characters
from kokoro_tts.text.text_map import TextMap

# A number read with more digits than this is refused: misaki reads digits as one number (num2words overflows past
# ~300 digits, Python's int-string limit stops it at 4,300) and 100 digits already make ~1,900 phonemes. Counted as
# read (normalize.longest_number): "①①①" and "1,000,000" are numbers too.
MAX_NUMBER_DIGITS = 100

# Characters of text per second of speech at speed 1, for estimating an utterance's audio before it is made: English
# voices read about 14-16 (the warm-up sentence, 29 characters, is about 2 s). Scripts that pack more speech into a
# character (Mandarin) are estimated short, which only ever lets a queue hold more.
CHARACTERS_PER_SECOND = 15.0


@dataclass(frozen=True)
class SpeechRequest:
    """A validated utterance: build it with ``RequestRules.speech`` so every field has been checked.

    Its spoken text is made on first use (``prepare``, which ``TTSEngine.stream`` runs in a thread): cleaning,
    normalizing and their span maps are linear, yet for 5,000 characters they take tens of milliseconds, which the
    event loop must not spend."""

    sent: str  # the text the client sent (word timings point into it)
    voice: Voice
    speed: float
    literal: bool = False  # markup is read as written (the client's option), not as a person reads it

    @cached_property
    def _prepared(self) -> tuple[str, TextMap]:
        read, read_map = (self.sent, TextMap.identity(len(self.sent))) if self.literal else markup.spoken(self.sent)
        cleaned, cleaned_map = clean_text_mapped(read)
        spoken, spoken_map = normalize(cleaned, self.voice.lang)
        return spoken, read_map.then(cleaned_map).then(spoken_map)

    def prepare(self) -> SpeechRequest:
        """Makes the spoken text now (blocking: a worker thread's job)."""
        self._prepared  # noqa: B018 -- computed and kept
        return self

    @property
    def estimated_audio_s(self) -> float:
        """About how many seconds of audio the text makes (from its length: nothing is computed)."""
        return len(self.sent) / (CHARACTERS_PER_SECOND * self.speed)

    @property
    def text(self) -> str:
        """What is spoken: the client's text with its markup read (markup.py), cleaned and normalized (normalize.py)."""
        return self._prepared[0]

    @property
    def source(self) -> TextMap:
        """Spans of ``text`` → spans of the text the client sent."""
        return self._prepared[1]


def speed_within(speed: object, lo: float, hi: float) -> float:
    """``speed`` as a float if it is a number from ``lo`` to ``hi``; else ``TTSError`` invalid_speed."""
    # Compared before float(): a 400-digit integer is a bad speed, not an OverflowError.
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not lo <= speed <= hi:
        raise TTSError(ErrorCode.INVALID_SPEED, f"'speed' must be a number from {lo} to {hi}, not {quoted(speed)}.")
    return float(speed)


def literal_option(value: object) -> bool:
    """The ``literal`` option (every route and session has it): true, false, or None for its default, false."""
    if value is not None and not isinstance(value, bool):
        raise TTSError(ErrorCode.INVALID_MESSAGE, f"'literal' must be true or false, not {quoted(value)}.")
    return bool(value)


class RequestRules:
    """The server's limits on what it is asked to say: text length and content, the voices it has, the speeds the
    model speaks at."""

    def __init__(self, settings: Settings, voices: VoiceBank) -> None:
        self._settings = settings
        self._voices = voices

    def speech(
        self, text: object, voice: object | None, speed: object | None, *, literal: object = False
    ) -> SpeechRequest:
        """Validate a client's fields; raises ``TTSError`` naming the first bad one. ``literal``: the client's option
        to have markup read as written (markup.py); None is its default, false."""
        if text is None:
            raise TTSError(ErrorCode.MISSING_TEXT, "The request has no 'text' to speak.")
        if not isinstance(text, str):
            raise TTSError(ErrorCode.INVALID_TEXT, f"'text' must be a string, not {type(text).__name__}.")
        if len(text) > self._settings.max_text_chars:
            raise TTSError(
                ErrorCode.TEXT_TOO_LONG,
                f"'text' has {len(text)} characters; the limit is {self._settings.max_text_chars}. "
                "Split it into several utterances.",
            )
        if not text.strip():
            raise TTSError(ErrorCode.EMPTY_TEXT, "'text' is empty: send at least one word to speak.")
        # On the event loop, so only what C loops do (translate tables): the text itself is made in a thread.
        kept = kept_characters(text)
        if not kept.strip():
            raise TTSError(
                ErrorCode.NOTHING_TO_SPEAK,
                "'text' holds only characters that are not read aloud (emoji, control characters).",
            )
        literal = literal_option(literal)
        if longest_number(kept if literal else markup.speakable_markup(kept)) > MAX_NUMBER_DIGITS:
            raise TTSError(
                ErrorCode.NUMBER_TOO_LONG,
                f"'text' holds a number of more than {MAX_NUMBER_DIGITS} digits; "
                "write long digit strings in groups separated by spaces.",
            )
        resolved = self.voice(self._settings.default_voice if voice is None else voice)
        return SpeechRequest(text, resolved, self.speed(speed), literal)

    def voice(self, spec: object) -> Voice:
        """Resolve a voice or blend this server can speak, or raise ``TTSError``."""
        resolved = self._voices.resolve(spec)
        # Weights such as 1e308 overflow their sum: the blend comes out all zeros (or not finite), and speaks noise.
        if not np.isfinite(resolved.pack).all() or not resolved.pack.any():
            raise TTSError(
                ErrorCode.INVALID_VOICE,
                f"The blend {quoted(spec)} has weights too large to mix; "
                "use weights such as 'af_heart:0.7,af_bella:0.3'.",
            )
        return resolved  # every part's language checked by ``resolve``

    def speed(self, speed: object | None) -> float:
        """A speed the model speaks at (1.0 when none is given)."""
        return 1.0 if speed is None else speed_within(speed, self._settings.min_speed, self._settings.max_speed)
