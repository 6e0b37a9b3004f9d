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

With an ``EarlyCut`` policy, a slow stream is not left silent while its sentence is written: once the first sentence end
has not come within ``wait_s`` of the first fragment, the text so far is spoken as a clause (up to its last comma,
semicolon, colon or dash) or else a phrase (up to its last whole word that does not lean on the next, as "the", "to" or
"is" do), never fewer than ``min_words`` words and never inside a word, a number or markup; after that, a piece waits
for its sentence end for as long as the audio already cut (estimated from its length) keeps playing, and is then cut at
a clause end only (with audio playing, a phrase cut off at any word costs more than it saves). A fast stream ends its
sentences before either deadline and is cut at sentence ends only, as without the policy. ``due`` says when the next
such cut is decided, so that a session can wake for it when no fragment comes (a stalled stream); docs/engine.md has the
measurement behind it.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from kokoro_client.chunker import IncrementalSentenceChunker

from kokoro_tts.text import markup

_WORD = re.compile(r"\S+")
_CLAUSE_END = re.compile(r"[,;:–—]$")  # a word that ends a clause
_DASH = re.compile(r"[-–—]+")  # a dash standing alone: the clause ends before it
_DIGIT_END = re.compile(r"\d\W*$")
_TRIES = 8  # places an early cut looks at, at most, before it waits for the next fragment
# Words that lean on the next one (articles, possessives, prepositions, conjunctions, auxiliaries, subject
# pronouns): a piece ending on one is heard cut inside its phrase ("He reads the" / "news on his phone"), and
# Whisper misheard such seams (docs/engine.md); a piece cut early ends before it instead.
_LEANS_ON_NEXT = frozenset(
    """a an the my your his her its our their this that these those
    to of in on at by for from with without into onto about over under after before through during between
    and or but nor so if than as because while when where whether which who whose
    is are was were be been being am has have had do does did will would shall should can could may might must
    i we they he she""".split()
)
_NOT_LETTERS = re.compile(r"[^\w']+")


@dataclass(frozen=True)
class EarlyCut:
    """When a piece is spoken before its sentence ends."""

    wait_s: float  # the longest wait for the first sentence end, from the utterance's first fragment
    min_words: int = 3  # no piece cut early is shorter: one or two words alone sound clipped
    # Kokoro's pace at speed 1 (about 14 characters a second), to estimate how long the audio already cut plays.
    chars_per_s: float = 14.0


@dataclass(frozen=True)
class TextPiece:
    """A piece to speak: ``text`` as the client sent it, starting at ``start`` in the utterance's whole text."""

    text: str
    start: int


class FragmentBuffer:
    """Takes an utterance's text fragment by fragment; returns each piece once where it ends is decided."""

    def __init__(self, early: EarlyCut | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._chunker = IncrementalSentenceChunker()
        self._text = ""  # received and not yet in a piece (the chunker holds the same words)
        self._offset = 0  # where ``_text`` starts in the utterance's text
        # Words of chunks the chunker let out and ``_unfinished`` held back; below 0 when words of the sentence the
        # chunker still holds were already spoken in a piece cut early.
        self._held_words = 0
        self._early, self._clock = early, clock
        self._first_at: float | None = None  # when the utterance's first fragment came
        self._plays_until: float | None = None  # when the audio of the pieces so far will have played (estimate)

    @property
    def due(self) -> float | None:
        """When (on the clock) ``cut`` will next speak text before its sentence end; None while it never will (no
        policy, or no text waiting)."""
        if self._early is None or self._first_at is None or not self._text.strip():
            return None
        if self._plays_until is None:
            return self._first_at + self._early.wait_s
        # Counted from the cuts, the estimate ends about one synthesis before the audio does: time to make the next.
        return self._plays_until

    @property
    def pending_chars(self) -> int:
        """Characters received and not yet in a piece: what a server caps while no sentence ends."""
        return len(self._text)

    def append(self, fragment: str) -> list[TextPiece]:
        """Adds ``fragment``; the pieces it completed, in order."""
        if self._first_at is None:
            self._first_at = self._clock()
        self._text += fragment
        pieces = self._pieces(self._chunker.feed(fragment))
        if any(c.isspace() for c in fragment):  # only a new word boundary makes an early cut possible
            pieces += self.cut()
        return pieces

    def cut(self) -> list[TextPiece]:
        """Once ``due`` has passed: the text so far up to its last clause end (for the first piece, else its last whole
        word) as a piece, when that makes ``min_words`` words; else nothing yet."""
        due, early = self.due, self._early
        if due is None or early is None or self._clock() < due:
            return []
        text = self._text
        words = list(_WORD.finditer(text))
        ends = [i for i in range(len(words) - 1, early.min_words - 2, -1) if _cuttable(text, words, i)]
        # The last clause end, else (the first piece only: later ones have audio playing) the last word; outside
        # markup: not in an open construct nor inside a closed one ("[a, b](url)" is read whole), as ``_unfinished``
        # holds a sentence end. A few tries: each reads the text.
        clauses = [i for i in ends if _clause_ends(words, i)]
        preferred = clauses + ends if self._plays_until is None else clauses
        cut = next((i for i in preferred[:_TRIES] if not _unfinished(text[: words[i].end()])), None)
        if cut is None:
            return []
        last = words[cut]
        start = words[0].start()
        piece = TextPiece(text[start : last.end()], self._offset + start)
        self._held_words -= cut + 1  # words now in a piece
        self._text = text[last.end() :]
        self._offset += last.end()
        self._played(piece)
        return [piece]

    def _played(self, piece: TextPiece) -> None:
        """Counts ``piece``'s audio in what is already buffered."""
        if self._early is not None:
            now = self._clock()
            since = now if self._plays_until is None else max(self._plays_until, now)
            self._plays_until = since + len(piece.text) / self._early.chars_per_s

    def end(self) -> list[TextPiece]:
        """The utterance's text is complete: the pieces left (at most one). The buffer is then empty again."""
        rest = self._chunker.flush()
        # With no rest, chunks held back (``_unfinished``) still go out: an empty chunk adds no words.
        pieces = self._pieces([rest] if rest else [""] if self._held_words > 0 else [], final=True)
        self._text, self._offset, self._held_words = "", 0, 0
        self._first_at = self._plays_until = None
        self._chunker = IncrementalSentenceChunker()
        return pieces

    def _pieces(self, chunks: list[str], *, final: bool = False) -> list[TextPiece]:
        out: list[TextPiece] = []
        cursor = 0  # where the text not yet in a piece starts in ``_text``
        for chunk in chunks:
            self._held_words += len(chunk.split())
            if self._held_words <= 0:
                continue  # all its words were in a piece cut early
            # The chunker's chunks are the text's next words with their spaces collapsed: find them as sent.
            words = list(itertools.islice(_WORD.finditer(self._text, cursor), self._held_words))
            assert len(words) == self._held_words  # the chunker's words are the text's
            first, last = words[0], words[-1]
            if not final and _unfinished(self._text[first.start() : last.end()]):
                continue  # held: the next chunk joins it
            out.append(TextPiece(self._text[first.start() : last.end()], self._offset + first.start()))
            self._played(out[-1])
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


def _cuttable(text: str, words: list[re.Match[str]], i: int) -> bool:
    """Whether a piece may end after ``words[i]``: a space follows it (the word cannot grow), it ends a clause or
    does not lean on the next word, and it does not end a number that the next word may go on ("Jan 5, 2025",
    "1 000": the next word is known and starts with no digit)."""
    end = words[i].end()
    if end == len(text) or not text[end].isspace():
        return False
    word = words[i].group()
    if not _CLAUSE_END.search(word) and _NOT_LETTERS.sub("", word).lower() in _LEANS_ON_NEXT:
        return False
    if not _DIGIT_END.search(word):
        return True
    return i + 1 < len(words) and not words[i + 1].group()[0].isdigit()


def _clause_ends(words: list[re.Match[str]], i: int) -> bool:
    return bool(_CLAUSE_END.search(words[i].group())) or (
        i + 1 < len(words) and _DASH.fullmatch(words[i + 1].group()) is not None
    )
