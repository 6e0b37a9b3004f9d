"""Where each piece of a derived text came from: cleaning and normalization rewrite the client's text, and word
timestamps point back into it through these maps (word_timing.py).

Every operation is linear in the segments it touches (a bisect finds the first), so a text of thousands of
rewritten pieces costs no more per piece than a short one.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property

Segment = tuple[int, int, int, int]


@dataclass(frozen=True)
class TextMap:
    """``(start, end, source_start, source_end)`` segments, in order, covering the derived text. A segment whose two
    lengths are equal maps character by character."""

    segments: tuple[Segment, ...]

    @cached_property
    def _starts(self) -> list[int]:
        return [segment[0] for segment in self.segments]

    @classmethod
    def identity(cls, length: int) -> TextMap:
        return cls(((0, length, 0, length),) if length else ())

    @classmethod
    def from_spans(cls, spans: list[tuple[int, int]]) -> TextMap:
        """The map of a text whose character i came from source span ``spans[i]``."""
        segments: list[Segment] = []
        for i, (src_start, src_end) in enumerate(spans):
            if segments:
                start, end, last_start, last_end = segments[-1]
                one_to_one = end - start == last_end - last_start and src_end - src_start == 1
                if (one_to_one and src_start == last_end) or (src_start, src_end) == (last_start, last_end):
                    segments[-1] = (start, i + 1, last_start, src_end)
                    continue
            segments.append((i, i + 1, src_start, src_end))
        return cls(tuple(segments))

    def _overlapping(self, start: int, end: int) -> list[Segment]:
        """The segments that overlap the derived span [start, end), in order."""
        first = max(0, bisect.bisect_right(self._starts, start) - 1)
        last = bisect.bisect_left(self._starts, end, lo=first)
        return [s for s in self.segments[first:last] if s[1] > start]

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        """The source span the derived span [start, end) came from (at least one character when it is not empty)."""
        if not self.segments:
            return (0, 0)
        end = max(end, start + 1)
        lo = hi = None
        for seg_start, seg_end, src_start, src_end in self._overlapping(start, end):
            if seg_end - seg_start == src_end - src_start:  # character by character
                a = src_start + max(start, seg_start) - seg_start
                b = src_start + min(end, seg_end) - seg_start
            else:
                a, b = src_start, src_end
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        if lo is None or hi is None:  # past the end: the source's end
            last = self.segments[-1]
            return (last[3], last[3])
        return (lo, hi)

    def then(self, later: TextMap) -> TextMap:
        """The map of a text derived in two steps: ``self`` (source → middle), then ``later`` (middle → final)."""
        segments = []
        for start, end, mid_start, mid_end in later.segments:
            if end - start == mid_end - mid_start:  # split along self's segments to keep character precision
                for seg_start, seg_end, src_start, src_end in self._overlapping(mid_start, mid_end):
                    lo, hi = max(mid_start, seg_start), min(mid_end, seg_end)
                    if lo >= hi:
                        continue
                    if seg_end - seg_start == src_end - src_start:
                        shift = src_start - seg_start
                        segments.append((start + lo - mid_start, start + hi - mid_start, lo + shift, hi + shift))
                    else:
                        segments.append((start + lo - mid_start, start + hi - mid_start, src_start, src_end))
            else:
                segments.append((start, end, *self.source_span(mid_start, mid_end)))
        return TextMap(_merge(segments))


class TextBuilder:
    """A derived text built piece by piece, each piece with the source span it came from: ``keep`` copies source
    text (mapped character by character), ``add`` writes new text for a span (``add("", a, b)``: the span is
    silent; ``add(".", a, a)``: text with no source of its own)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.segments: list[Segment] = []
        self.length = 0
        self._last_visible = ""
        self._last_visible_part = -1  # the part holding it
        self._added = False  # that part was written by ``add`` for the mark it is, not copied

    def add(self, text: str, src_start: int, src_end: int) -> None:
        if not text and src_start == src_end:
            return
        self.parts.append(text)
        self.segments.append((self.length, self.length + len(text), src_start, src_end))
        self.length += len(text)
        if visible := text.rstrip():
            self._last_visible, self._last_visible_part, self._added = visible[-1], len(self.parts) - 1, True

    def keep(self, source: str, start: int, end: int) -> None:
        if end > start:
            self.add(source[start:end], start, end)
            self._added = False

    def last_visible_added(self) -> bool:
        """The last character that is not a space is a mark ``add`` wrote alone (a pause), not copied text."""
        return self._added and len(self.parts[self._last_visible_part]) == 1

    def rewrite_last_visible(self, mark: str) -> None:
        """Turns the mark ``add`` wrote alone into another of one character (its span stays)."""
        assert self.last_visible_added() and len(mark) == 1
        self.parts[self._last_visible_part] = mark
        self._last_visible = mark

    def last_visible(self) -> str:
        """The last character written that is not a space ("" before any)."""
        return self._last_visible

    def result(self) -> tuple[str, TextMap]:
        return "".join(self.parts), TextMap(tuple(s for s in self.segments if s[1] > s[0]))


def _merge(segments: list[Segment]) -> tuple[Segment, ...]:
    """Joins a rewritten segment split in two by ``then`` back into one, so its pieces keep mapping to all of it."""
    out: list[Segment] = []
    for seg in segments:
        if out and out[-1][2:] == seg[2:] and out[-1][1] == seg[0]:
            out[-1] = (out[-1][0], seg[1], *seg[2:])
        else:
            out.append(seg)
    return tuple(out)
