"""Splits an utterance into chunks that stream well: sentences, and long sentences at clauses.

Short chunks reach the first audio byte sooner; whole sentences keep Kokoro's prosody natural. A chunk is
kept under ``MAX_CHUNK_CHARS`` so that its phonemes almost always fit the model's 510 tokens; the phonemizer
still cuts the rare longer one at a clause or word boundary. Text with no boundary at all (a 5,000-letter word,
a long URL, CJK without punctuation) is cut every ``MAX_CHUNK_CHARS`` characters, and a chunk of many pieces
(punctuation, digits and letters in turn) into chunks of at most ``MAX_CHUNK_PIECES``, so that no chunk can hold
the G2P or the engine for long. Sentence boundaries come from the agent's
incremental chunker (abbreviations, decimals, URLs, CJK): one set of rules in the project, shipped in the same wheel.
"""

from __future__ import annotations

import re
import unicodedata

from kokoro_client.chunker import IncrementalSentenceChunker

MAX_CHUNK_CHARS = 300
# misaki's English G2P works per piece (a run of letters, a run of digits, any other character: its subtokens,
# roughly): a chunk holds at most MAX_CHUNK_PIECES, more than a 300-character sentence of prose has. And misaki
# looks a word of k pieces up as every one of its k² spans, k long each: a word of more than MAX_WORD_PIECES pieces
# ("1-2-1-2-…", "a_a_a_…") is read as several words, else one such 300-character word held the G2P for 8 s.
MAX_CHUNK_PIECES = 120
MAX_WORD_PIECES = 8
# A chunk that had to be cut is cut finer: such text (a hard token) speaks many words per piece ("1%" is "one
# percent"), and its first job should be no larger than a short sentence's, so that others' jobs are not held up.
CUT_CHUNK_PIECES = 40
_CLAUSE_END = re.compile(r"(?<=[,;:—–])\s+|\s+(?=[—–]\s)")
_PIECE = re.compile(r"[^\W\d_]+|\d+|\S")


def split_utterance(text: str, *, english: bool = False) -> list[str]:
    """``text`` in chunks; ``english``: also bounded in pieces, for misaki's English G2P, whose cost is in them."""
    chunker = IncrementalSentenceChunker()
    sentences = chunker.feed(text)
    if (rest := chunker.flush()) is not None:
        sentences.append(rest)
    chunks: list[str] = []
    for sentence in sentences:
        for chunk in _split_long(sentence):
            chunks.extend(_bound_pieces(chunk) if english else [chunk])
    # Punctuation alone ("… … …", what the chunker leaves at the end) makes no sound: no G2P job for it.
    return [chunk for chunk in chunks if any(unicodedata.category(ch)[0] in "LNS" for ch in chunk)]


def _bound_pieces(chunk: str) -> list[str]:
    """``chunk`` as it is unless a word of it has more than MAX_WORD_PIECES pieces or it has more than
    MAX_CHUNK_PIECES; else its words cut into words of at most MAX_WORD_PIECES, in chunks of at most
    CUT_CHUNK_PIECES."""
    words = [_pieces(word) for word in chunk.split()]
    if sum(map(len, words)) <= MAX_CHUNK_PIECES and all(len(w) <= MAX_WORD_PIECES for w in words):
        return [chunk]
    out: list[str] = []
    current: list[str] = []
    count = 0
    for pieces in words:
        for i in range(0, len(pieces), MAX_WORD_PIECES):
            part = pieces[i : i + MAX_WORD_PIECES]
            if current and count + len(part) > CUT_CHUNK_PIECES:
                out.append(" ".join(current))
                current, count = [], 0
            current.append("".join(part))
            count += len(part)
    if current:
        out.append(" ".join(current))
    return out


def _pieces(word: str) -> list[str]:
    return _PIECE.findall(word)


def _split_long(sentence: str) -> list[str]:
    if len(sentence) <= MAX_CHUNK_CHARS:
        return [sentence]
    pieces: list[str] = []
    current = ""
    for clause in _CLAUSE_END.split(sentence):
        for part in _split_words(clause):
            if current and len(current) + 1 + len(part) > MAX_CHUNK_CHARS:
                pieces.append(current)
                current = part
            else:
                current = f"{current} {part}" if current else part
    if current:
        pieces.append(current)
    return pieces


def _split_words(clause: str) -> list[str]:
    if len(clause) <= MAX_CHUNK_CHARS:
        return [clause]
    words = [piece for word in clause.split() for piece in _cut_word(word)]
    out, current = [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > MAX_CHUNK_CHARS:
            out.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    return [*out, current] if current else out


def _cut_word(word: str) -> list[str]:
    return [word[i : i + MAX_CHUNK_CHARS] for i in range(0, len(word), MAX_CHUNK_CHARS)]
