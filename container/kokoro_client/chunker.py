"""Cut an LLM's token stream into sentences for TTS, each one as soon as it is decidable.

`IncrementalSentenceChunker.feed` returns the sentences a fragment completed; `flush` returns the rest.
A boundary is decided from a few characters of lookahead at most (the next non-space character after
"end. ", the character after "。"), so the caller hears the first sentence while the LLM is still
writing the second, and the result never depends on how the stream was cut into fragments: a decision
that needs a character not yet received waits for it instead of guessing.

What ends a chunk:
- `.`, `!`, `?`, `…` and runs of them (`?!`, `...`) followed by whitespace and then a character that is
  not lowercase ("Wait... what?" stays whole; "Wait... What?" is two). Closing quotes and brackets
  right after the terminator stay with their sentence. No whitespace after it means no boundary:
  3.14, v1.2.3, $4.99, example.com/a.b, a.b@c.d.
- A single `.` after an abbreviation does not end a sentence before a capital when the abbreviation
  precedes a name (Dr., Mr., St., Mt., e.g., vs. ...) or is an initial (U.S. Army, J. R. R. Tolkien),
  nor before a digit when it is any known abbreviation (No. 5, Jan. 5). Ambiguous cases lean towards
  not splitting: a missed split only delays audio a little, a false one mangles the prosody.
  So "in the U.S. Then" and "Plan B. Then" stay one chunk.
- `。`, `！`, `？`, `．` (no space needed), unless a closing quote after them is followed by more text:
  “你好。”他说。 is one sentence.
- A newline: paragraphs and markdown list items are each a chunk; a list marker ("1.", "a.") at the
  start of a chunk is not a sentence of its own.

Chunks with nothing to speak ("...", "1.", "---") and, with `min_chars`, very short ones are merged
forward into the next chunk. Emitted chunks are stripped and their inner whitespace collapsed.
"""

from __future__ import annotations

import re
from typing import Final

_TERMINATORS: Final = ".!?…"
_CJK_TERMINATORS: Final = "。！？．｡"
_CLOSERS: Final = "\"'”’»)]}」』）】》〉〕"
_OPENERS: Final = "\"'“‘«([{「『（【《〈〔¿¡"
_CLAUSE: Final = ",;:"
_DASHES: Final = "-–—"
# Chinese and Japanese clauses are dense (one character is one syllable) and take no space after.
_CJK_CLAUSE: Final = "，；："


def _any_of(*chars: str) -> str:
    return "[" + re.escape("".join(chars)) + "]"


_CANDIDATE: Final = re.compile(_any_of(_TERMINATORS, _CJK_TERMINATORS, "\n"))
_EAGER_CANDIDATE: Final = re.compile(_any_of(_TERMINATORS, _CJK_TERMINATORS, "\n", _CLAUSE, _CJK_CLAUSE, _DASHES))
# A sentence end: a run of terminators ("?!", "...", "。"), then closing quotes and brackets.
_END: Final = re.compile(f"{_any_of(_TERMINATORS, _CJK_TERMINATORS)}+({_any_of(_CLOSERS)}*)")
_WORD_OR_NEWLINE: Final = re.compile(r"[\S\n]")
_ALNUM: Final = re.compile(r"[^\W_]")  # what str.isalnum() accepts
_NOT_SPACE: Final = re.compile(r"\S")

# Abbreviations that come before a name or a term: never the end of a sentence unless a newline follows.
_BEFORE_NAME: Final = frozenset(
    "dr mr mrs ms mx prof st mt ft rev fr gen sen rep gov lt col capt cpt sgt cmdr adm hon pres supt "
    "messrs mme mlle e.g i.e vs v cf viz approx ca incl esp".split()
)
# Abbreviations that may end a sentence ("... and so on, etc. The rest"), but not before a digit.
_KNOWN: Final = frozenset(
    "etc inc ltd co corp llc plc jr sr bros no nos vol vols fig figs p pp ch sec art eq ref ed eds "
    "jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun "
    "dept est min max avg tel ave blvd rd ln".split()
)
_INITIALS: Final = re.compile(r"(?:[A-Z]\.)*[A-Z]")  # J, U.S, U.S.A
_DOTTED: Final = re.compile(r"(?:[a-z]\.)+[a-z]")  # a.m, p.m
_LIST_MARKER_TOKEN: Final = re.compile(r"\d{1,3}|[A-Za-z]")
_LIST_MARKER: Final = re.compile(r"(?:\d{1,3}|[A-Za-z])[.)]|[-*+•]")

# A decision: None = wait for more text; (position, True) = a chunk ends at position;
# (position, False) = no boundary here, resume scanning at position.
_Decision = tuple[int, bool] | None


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return 0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF


class IncrementalSentenceChunker:
    """Feed an LLM's token stream; get each sentence back as soon as it is complete.

    eager: let the first chunk of a reply out at a clause break (", ", ": ", "; ", " — ", "，") once
        it holds `eager_min_chars` characters, to cut the time to first audio further; later chunks
        are whole sentences again. Off by default: it trades a little prosody for latency.
    min_chars: merge chunks shorter than this ("OK.", "Sure!") into the next one; the last one still
        comes out of `flush`. 0 (off) by default. 12 is a good value: it folds interjections
        ("OK.", "Sure!", "Got it.") into the sentence after them, which gives them natural prosody
        and saves a TTS request, while any real sentence still goes out alone.
    """

    def __init__(self, *, eager: bool = False, eager_min_chars: int = 24, min_chars: int = 0) -> None:
        if eager_min_chars < 0 or min_chars < 0:
            raise ValueError("eager_min_chars and min_chars must be >= 0")
        self._eager = eager
        self._eager_min_chars = eager_min_chars
        self._min_chars = min_chars
        self._reset()

    def _reset(self) -> None:
        self._buf = ""  # text received and not emitted yet (during ``feed``: from ``_start`` on)
        self._start = 0  # where the text not emitted yet starts in _buf: emitted text is cut off once per feed
        self._seg = 0  # where the current sentence starts in _buf (after a merged short chunk, > _start)
        self._scan = 0  # everything before this in _buf is decided: scanning resumes here
        self._alnum = False  # _buf[_start:_alnum_scan] holds a letter or digit
        self._alnum_scan = 0
        self._emitted = False  # a chunk of this reply has left: eager mode is over

    def feed(self, fragment: str) -> list[str]:
        """Add a fragment of the reply; return the chunks it completed (stripped, non-empty)."""
        if fragment.isspace() and "\n" not in fragment and self._buf[-1:].isspace():
            # More blanks after blanks decide nothing; skipping the rescan keeps long runs linear.
            self._buf += fragment
            return []
        self._buf += fragment
        out: list[str] = []
        try:
            self._scan_buffer(out)
        finally:
            self._drop_emitted()
        return out

    def _scan_buffer(self, out: list[str]) -> None:
        while True:
            pattern = _EAGER_CANDIDATE if self._eager and not self._emitted else _CANDIDATE
            match = pattern.search(self._buf, self._scan)
            if match is None:
                self._scan = len(self._buf)
                return
            decision = self._decide(match.start())
            if decision is None:
                self._scan = match.start()
                return
            end, boundary = decision
            self._scan = end
            if boundary:
                self._seg = end
                if (chunk := self._chunk_until(end)) is not None:
                    out.append(chunk)
                    self._start = self._seg = self._scan = self._alnum_scan = end
                    self._alnum = False
                    self._emitted = True

    def _chunk_until(self, end: int) -> str | None:
        """The chunk ending at ``end`` if it is worth sending. Nothing to pronounce is found by scanning each
        character once: rebuilding the chunk at every boundary of "… … …" would be quadratic."""
        if not self._alnum:
            self._alnum = _ALNUM.search(self._buf, self._alnum_scan, end) is not None
            self._alnum_scan = end
            if not self._alnum:
                return None
        chunk = " ".join(self._buf[self._start : end].split())
        return chunk if self._worth_sending(chunk) else None

    def _drop_emitted(self) -> None:
        """Cuts the emitted text off the buffer once per feed (not once per chunk: that copy would be quadratic)."""
        if start := self._start:
            self._buf = self._buf[start:]
            self._start = 0
            self._seg -= start
            self._scan -= start
            self._alnum_scan = max(0, self._alnum_scan - start)

    @property
    def pending_chars(self) -> int:
        """Characters received and not emitted yet: what a server caps when clients send no sentence ends."""
        return len(self._buf)

    def flush(self) -> str | None:
        """Return what is left (stripped), or None; the chunker is then ready for the next reply."""
        rest = " ".join(self._buf.split())
        self._reset()
        return rest or None

    def _worth_sending(self, chunk: str) -> bool:
        # A chunk with nothing to pronounce ("...", "1.") or a too-short one waits for the next.
        if len(chunk) < max(self._min_chars, 1) or _LIST_MARKER.fullmatch(chunk):
            return False
        return any(ch.isalnum() for ch in chunk)

    def _decide(self, i: int) -> _Decision:
        ch = self._buf[i]
        if ch == "\n":
            if self._buf[self._seg : i].strip():
                return i + 1, True
            self._seg = i + 1  # a blank line: the next one need not look back over it
            return i + 1, False
        if ch in _TERMINATORS or ch in _CJK_TERMINATORS:
            return self._decide_terminator(i)
        return self._decide_clause(i)

    def _decide_terminator(self, i: int) -> _Decision:
        buf, n = self._buf, len(self._buf)
        end = _END.match(buf, i)
        assert end is not None  # buf[i] is a terminator
        j, k = end.start(1), end.end()
        if k == n:
            return None  # the next character decides (a closer, a digit, a space ...)
        run, nxt = buf[i:j], buf[k]
        if any(c in _CJK_TERMINATORS for c in run):
            if run == "．" and buf[i - 1 : i].isdigit() and nxt.isdigit():
                return k, False  # a fullwidth decimal: ３．１４
            if k > j and not nxt.isspace() and nxt not in _OPENERS:
                return k, False  # the quote goes on: “你好。”他说。
            return k, True
        if not nxt.isspace():
            # Mid-token: 3.14, v1.2.3, example.com/a.b, ?q=1; but "好!我" is Chinese with ASCII marks.
            return k, _is_cjk(nxt)
        after = _WORD_OR_NEWLINE.search(buf, k)
        if after is None:
            return None  # the first character of the next word decides
        nxt = after.group()
        if nxt == "\n":
            return k, True
        if nxt.islower():
            return k, False  # "etc. are", '"Stop!" he said', "Wait... what"
        if run != ".":
            return k, True  # !, ?, ... and runs: no abbreviation to mistake
        return k, not self._abbreviation_holds(i, nxt)

    def _abbreviation_holds(self, dot: int, nxt: str) -> bool:
        """Whether the word before a lone "." keeps the sentence going before `nxt` (not lowercase)."""
        start = dot
        while start > self._seg and not self._buf[start - 1].isspace():
            start -= 1
        word = self._buf[start:dot].lstrip(_OPENERS)
        if not word:
            return False
        if _LIST_MARKER_TOKEN.fullmatch(word) and not self._buf[self._seg : start].strip():
            return True  # "1. Open the app": a list marker at the start of a chunk
        lower = word.lower()
        if lower in _BEFORE_NAME or _INITIALS.fullmatch(word):
            return True
        return nxt.isdigit() and (lower in _KNOWN or bool(_DOTTED.fullmatch(lower)))

    def _decide_clause(self, i: int) -> _Decision:
        buf, n = self._buf, len(self._buf)
        end = i + 1
        if buf[i] in _DASHES:
            # A spaced dash (" - ", " — ", " -- "), not "well-known" nor a "- item" marker.
            while end < n and buf[end] in _DASHES:
                end += 1
            if buf[i - 1 : i] not in (" ", "\t"):
                return end, False
        if buf[i] not in _CJK_CLAUSE:
            if end == n:
                return None
            if not buf[end].isspace():
                return end, False  # 1,000 and 10:30
        return end, self._pending_length(end) >= self._eager_min_chars

    def _pending_length(self, end: int) -> int:
        """len(_buf[_start:end].strip()) when _buf[end - 1] is not a space, without copying it."""
        first = _NOT_SPACE.search(self._buf, self._start, end)
        return end - first.start() if first else 0


def split_sentences(text: str, *, eager: bool = False, eager_min_chars: int = 24, min_chars: int = 0) -> list[str]:
    """Chunk a whole text at once, as a stream would be: every chunk, then the remainder."""
    chunker = IncrementalSentenceChunker(eager=eager, eager_min_chars=eager_min_chars, min_chars=min_chars)
    chunks = chunker.feed(text)
    rest = chunker.flush()
    return [*chunks, rest] if rest else chunks
