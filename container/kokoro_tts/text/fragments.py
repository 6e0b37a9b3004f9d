"""An utterance's text as it is written (an LLM's tokens, a client's fragments), cut into the pieces the server speaks.

``FragmentBuffer`` is the one place that decides where a piece of streamed text starts: every session dialect that
takes text in fragments (bidi's ``append``/``flush``, Deepgram's ``Speak``/``Flush``) feeds it and speaks what it
returns. Pieces end where the sentence chunker (kokoro_client.chunker) decides a sentence ends, and only there, so
what a piece says never depends on how the text was cut into fragments: the chunker holds a boundary until the
characters that decide it have come ("$4" + "2" + ".50", "Dr." + " Smith", "3:" + "30"), and a sentence boundary is
a place where normalization (normalize.py) reads the two sides as it reads them whole
(tests/server/test_fragments.py cuts texts at every position and compares).

Each piece is the client's own text (its spaces kept) with its offset in everything the client sent for the
utterance, so word timestamps index the concatenated text.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from kokoro_client.chunker import IncrementalSentenceChunker

from kokoro_tts.text import markup

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class TextPiece:
    """A piece to speak: ``text`` as the client sent it, starting at ``start`` in the utterance's whole text."""

    text: str
    start: int


class FragmentBuffer:
    """Takes an utterance's text fragment by fragment; returns each piece once where it ends is decided."""

    def __init__(self) -> None:
        self._chunker = IncrementalSentenceChunker()
        self._text = ""  # received and not yet in a piece (the chunker holds the same words)
        self._offset = 0  # where ``_text`` starts in the utterance's text
        self._held_words = 0  # words of chunks the chunker let out and ``_unfinished`` held back

    @property
    def pending_chars(self) -> int:
        """Characters received and not yet in a piece: what a server caps while no sentence ends."""
        return len(self._text)

    def append(self, fragment: str) -> list[TextPiece]:
        """Adds ``fragment``; the pieces it completed, in order."""
        self._text += fragment
        return self._pieces(self._chunker.feed(fragment))

    def end(self) -> list[TextPiece]:
        """The utterance's text is complete: the pieces left (at most one). The buffer is then empty again."""
        rest = self._chunker.flush()
        # With no rest, chunks held back (``_unfinished``) still go out: an empty chunk adds no words.
        pieces = self._pieces([rest] if rest else [""] if self._held_words else [], final=True)
        self._text, self._offset, self._held_words = "", 0, 0
        self._chunker = IncrementalSentenceChunker()
        return pieces

    def _pieces(self, chunks: list[str], *, final: bool = False) -> list[TextPiece]:
        out: list[TextPiece] = []
        cursor = 0  # where the text not yet in a piece starts in ``_text``
        for chunk in chunks:
            self._held_words += len(chunk.split())
            # The chunker's chunks are the text's next words with their spaces collapsed: find them as sent.
            words = list(itertools.islice(_WORD.finditer(self._text, cursor), self._held_words))
            assert len(words) == self._held_words  # the chunker's words are the text's
            first, last = words[0], words[-1]
            if not final and _unfinished(self._text[first.start() : last.end()]):
                continue  # held: the next chunk joins it
            out.append(TextPiece(self._text[first.start() : last.end()], self._offset + first.start()))
            cursor, self._held_words = last.end(), 0
        if cursor:  # once per call, not once per piece: the copy stays linear in what was received
            self._text = self._text[cursor:]
            self._offset += cursor
        return out


def _unfinished(piece: str) -> bool:
    """Whether ``piece`` (the client's text from the last cut to a sentence end the chunker decided) ends inside a
    construct that must not be cut, so that it is held and joined to what follows: an unfinished markup construct
    (markup.py's ``held_from``: an open link, tag or entity) would be read differently once its end comes. The one
    place to ask such a check; the chunker's own rules need none."""
    return markup.held_from(piece) < len(piece)
