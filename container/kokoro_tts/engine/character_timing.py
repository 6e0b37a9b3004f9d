"""Characters timed from the words spoken, for clients that read a character alignment (ElevenLabs' sockets and
routes): a word's time is spread evenly over its characters, the text between two words over the gap between them,
so every character the client sent gets a start and an end, in order, from the word timestamps (word_timing.py)."""

from __future__ import annotations

from dataclasses import dataclass

from kokoro_client.protocol import WordTiming


@dataclass(frozen=True)
class TimedChar:
    char: str
    start_ms: float
    end_ms: float


class CharacterTimes:
    """One utterance's characters as they are received, timed as its words are spoken."""

    def __init__(self) -> None:
        self._chars: list[str] = []  # every character the client sent for the utterance
        self._next = 0  # the first character not yet timed
        self._word_end_ms = 0.0  # where the last word timed ends

    def received(self, text: str) -> None:
        self._chars.extend(text)

    def words(self, words: tuple[WordTiming, ...]) -> list[TimedChar]:
        """The characters up to the end of ``words`` (the next words spoken, in order), timed."""
        timed: list[TimedChar] = []
        for word in words:
            timed += self._spread(word.char_start, self._word_end_ms, word.start_ms)  # the text before it: the gap
            timed += self._spread(word.char_end, word.start_ms, word.end_ms)
            self._word_end_ms = word.end_ms
        return timed

    def rest(self, end_ms: float) -> list[TimedChar]:
        """The characters after the last word (its closing punctuation), timed up to ``end_ms``."""
        return self._spread(len(self._chars), self._word_end_ms, max(end_ms, self._word_end_ms))

    def _spread(self, end: int, start_ms: float, end_ms: float) -> list[TimedChar]:
        count = end - self._next
        if count <= 0:
            return []
        step = max(end_ms - start_ms, 0.0) / count
        first, self._next = self._next, end
        return [TimedChar(self._chars[first + i], start_ms + i * step, start_ms + (i + 1) * step) for i in range(count)]
