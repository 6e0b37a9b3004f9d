"""Word timestamps from the model's own predicted durations, aligned to the text the client sent.

The prosody front predicts how many aligned frames each phoneme token lasts (``Prosody.durations``, the two pad
tokens included), and the decoder makes exactly ``SAMPLES_PER_FRAME`` (600: 25 ms at 24 kHz) samples per frame:
measured, a batch's audio is sum(durations) × 600 samples, on the stages and on the monolithic graph alike. So a
word starts after the frames of every token before its first one and ends with its last token's frames; the
silence of a space, a comma or the opening pad lies between words. misaki's English G2P says which phonemes are
which word's (phonemes.py); each word is then found in the utterance's spoken text, in order, and mapped back
through normalization and cleaning (text_map.py) to the client's characters. A piece the normalizer read as
several words ("$1.2M" → "1.2 million dollars") comes back as one word spanning them all.

Only the G2P of English tells words apart: other languages' chunks carry no word timings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kokoro_client.protocol import WordTiming

from kokoro_tts.audio.encoding import SAMPLE_RATE
from kokoro_tts.engine.backends.stages import SAMPLES_PER_FRAME
from kokoro_tts.text.phonemes import TokenBatch
from kokoro_tts.text.text_map import TextMap


@dataclass(frozen=True)
class TimedWord:
    """A word of a token batch: its samples from the batch's start, its characters in the client's text."""

    start: int
    end: int
    char_start: int
    char_end: int


class TextCursor:
    """Finds an utterance's words, in the order spoken, in its spoken text, and maps them to the client's text."""

    def __init__(self, spoken: str, source: TextMap) -> None:
        self._spoken, self._source = spoken, source
        self._position = 0

    def locate(self, word: str) -> tuple[int, int] | None:
        """The client's span for ``word`` (a G2P token's text), searched from the previous word on; None if absent."""
        pieces = word.split()
        if not pieces:
            return None
        start = self._spoken.find(pieces[0], self._position)
        if start < 0:
            return None
        end = start + len(pieces[0])
        for piece in pieces[1:]:
            found = self._spoken.find(piece, end)
            if found < 0:
                return None
            end = found + len(piece)
        self._position = end
        return self._source.source_span(start, end)


def batch_words(batch: TokenBatch, durations: np.ndarray, cursor: TextCursor) -> list[TimedWord]:
    """The batch's words from its durations (frames per token, the pad tokens first and last included)."""
    edges = np.concatenate([[0], np.cumsum(np.asarray(durations, dtype=np.int64))]) * SAMPLES_PER_FRAME
    words: list[TimedWord] = []
    for text, first, last in batch.words:
        if last + 1 >= edges.size:  # durations for fewer tokens than the batch has: nothing trustworthy
            return []
        span = cursor.locate(text)
        if span is None:
            continue
        start, end = int(edges[first + 1]), int(edges[last + 1])
        if words and span[0] < words[-1].char_end:  # one piece of the client's text read as several words
            merged = words.pop()
            start, span = merged.start, (merged.char_start, max(merged.char_end, span[1]))
        words.append(TimedWord(start, end, *span))
    return words


def timings(words: list[TimedWord], offset: int, sent: str) -> tuple[WordTiming, ...]:
    """``words`` as the wire has them: ms from the utterance's start (``offset``: samples before the batch)."""
    return tuple(
        WordTiming(
            sent[w.char_start : w.char_end],
            round(1000.0 * (offset + w.start) / SAMPLE_RATE, 1),
            round(1000.0 * (offset + w.end) / SAMPLE_RATE, 1),
            w.char_start,
            w.char_end,
        )
        for w in words
    )
