"""Splits an utterance into chunks that stream well: sentences, and long sentences at clauses.

Short chunks reach the first audio byte sooner; whole sentences keep Kokoro's prosody natural. A chunk is
kept under ``MAX_CHUNK_CHARS`` so that its phonemes almost always fit the model's 510 tokens; the phonemizer
still cuts the rare longer one at a clause or word boundary. Text with no boundary at all (a 5,000-letter word,
a long URL, CJK without punctuation) is cut every ``MAX_CHUNK_CHARS`` characters, so that no chunk can hold the
engine for long. Sentence boundaries come from the agent's
incremental chunker (abbreviations, decimals, URLs, CJK): one set of rules in the project, shipped in the same wheel.
"""

from __future__ import annotations

import re

from kokoro_client.chunker import IncrementalSentenceChunker

MAX_CHUNK_CHARS = 300
_CLAUSE_END = re.compile(r"(?<=[,;:—–])\s+|\s+(?=[—–]\s)")


def split_utterance(text: str) -> list[str]:
    chunker = IncrementalSentenceChunker()
    sentences = chunker.feed(text)
    if (rest := chunker.flush()) is not None:
        sentences.append(rest)
    chunks: list[str] = []
    for sentence in sentences:
        chunks.extend(_split_long(sentence))
    return chunks


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
