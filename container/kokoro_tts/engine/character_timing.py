"""The text a client sent for an utterance, as word timestamps point into it: read back word by word as written
(Cartesia's timestamps carry each word's punctuation), and every character timed (ElevenLabs' alignment): a word's
time is spread evenly over its characters, the text between two words over the gap between them, so every character
the client sent gets a start and an end, in order, from the word timestamps (word_timing.py)."""

from __future__ import annotations

from dataclasses import dataclass

from kokoro_client.protocol import WordTiming


@dataclass(frozen=True)
class TimedChar:
    char: str
    start_ms: float
    end_ms: float


class SentText:
    """Every character the client sent for one utterance, in order: what ``char_start``/``char_end`` index."""

    def __init__(self) -> None:
        self.chars: list[str] = []
        self._written_end = 0  # where the last word read as written ends

    def received(self, text: str) -> None:
        self.chars.extend(text)

    def as_written(self, word: WordTiming) -> str:
        """``word`` with the punctuation it is written with ("Sure," and "(yes)"): the words a client joins are then
        the text it sent. Words are read in order; punctuation goes to the first word that can take it."""
        start, end = word.char_start, word.char_end
        while start > self._written_end and _punctuation(self.chars[start - 1]):
            start -= 1
        while end < len(self.chars) and _punctuation(self.chars[end]):
            end += 1
        self._written_end = end
        return "".join(self.chars[start:end])


def _punctuation(char: str) -> bool:
    return not char.isspace() and not char.isalnum()


class CharacterTimes:
    """One utterance's characters as they are received, timed as its words are spoken."""

    def __init__(self) -> None:
        self.sent = SentText()
        self._next = 0  # the first character not yet timed
        self._word_end_ms = 0.0  # where the last word timed ends

    def received(self, text: str) -> None:
        self.sent.received(text)

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
        return self._spread(len(self.sent.chars), self._word_end_ms, max(end_ms, self._word_end_ms))

    def _spread(self, end: int, start_ms: float, end_ms: float) -> list[TimedChar]:
        count = end - self._next
        if count <= 0:
            return []
        step = max(end_ms - start_ms, 0.0) / count
        first, self._next = self._next, end
        chars = self.sent.chars
        return [TimedChar(chars[first + i], start_ms + i * step, start_ms + (i + 1) * step) for i in range(count)]
