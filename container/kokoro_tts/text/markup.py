"""Markup read as a person reads it: the markdown and HTML that LLMs write, turned into what a reader says.

An LLM writes ``## Summary``, ``Wait *ten* seconds``, ``[the docs](https://…)``, ``<b>Note:</b>`` and ``&amp;``
even when asked for prose; read character by character they come out as "hash summary" or "B note slash B". A
person reading aloud says the words and lets the markup shape the reading:

- headings, list bullets and block-quote markers are silent, and the line they start ends as a sentence does;
  numbered list items keep their number ("1. Preheat" is read "one. Preheat")
- emphasis (``*x*``, ``**x**``, ``_x_``, ``~~x~~``) and code-span backticks are silent, their words read;
  a lone ``*`` between spaces or digits ("2 * 3", "5*3") and ``_`` inside a word (snake_case) stay as written
- fenced-code fence lines (```` ```python ````), rules (``---``), table delimiter rows and link reference
  definitions are silent; a code block's lines are read as they are
- links and images read their text (``[the docs](url)`` is "the docs"); ``<https://…>`` reads the address
- table cells are read in turn, a pause between them, each row a sentence
- HTML tags and comments are silent (a block tag ends its clause or sentence); character references are the
  characters they name (``&amp;`` is "&", read "and"; ``&nbsp;`` a space); a backslash escape is its character
- emoji are silent: the cleaning after this step drops them (phonemes.clean_text_mapped)

No construct needs its closing half to be decided (emphasis markers are dropped by what stands beside them, not by
a matching partner), so a text cut into sentences or fragments reads the same as the whole. ``held_from`` says where
a text that is still being written ends inside a construct whose reading the next characters may change.

Linear in the text: one left-to-right scan; every look ahead for a closing ``]``, ``)``, ``>``, ``-->`` or newline
reuses the last answer while it still holds, so a text of ten thousand ``[`` costs no more than ten thousand words.
"""

from __future__ import annotations

import html
import re

from kokoro_tts.text.text_map import TextBuilder, TextMap

__all__ = ["held_from", "speakable_markup", "spoken"]

# The characters where a construct can start; everything between them is copied as it is.
_SPECIAL = re.compile(r"[\\`*_~#\[\]!<&|\n]")
_NUMERIC_REFERENCE = re.compile(r"&#(?:[0-9]{1,7}|[xX][0-9A-Fa-f]{1,6});")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# Attributes run to the tag's end: [^<>]* stops at the next "<", so the attempts at each "<" cover the text once.
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]{0,31})(?:\s[^<>]*)?/?>")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^\s<>]{1,2000})>")
_ESCAPABLE = frozenset("\\`*_{}[]()#+-.!|<>&~\"'")
# Tags that end a sentence when they close, and those that separate what is around them.
_SENTENCE_TAGS = frozenset("p div li h1 h2 h3 h4 h5 h6 tr blockquote dt dd title section article".split())
_SPACE_TAGS = frozenset("br hr td th ul ol table thead tbody pre img".split())
_CLAUSE_TAGS = frozenset("td th".split())

# What may open a line: block-quote markers, then a heading, a bullet or a number.
_QUOTE = re.compile(r"[ \t]{0,3}(?:>[ \t]?)+")
_HEADING = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t]+|(?=\n)|$)")
_BULLET = re.compile(r"[ \t]{0,3}[-*+][ \t]+(?:\[[ xX]\][ \t]+)?")
_NUMBERED = re.compile(r"[ \t]{0,3}\d{1,9}[.)][ \t]")
_TABLE_ROW = re.compile(r"[ \t]{0,3}\|")
# Whole lines that say nothing: a code fence with its info string, a rule, a table's delimiter row, a link
# reference definition. Each alternative's parts are disjoint, so a failed attempt costs its line once.
_SILENT_LINE = re.compile(
    r"[ \t]{0,3}(?:(?:```|~~~)[^\n]*"
    r"|([-*_=])(?:[ \t]*\1){2,}[ \t]*(?=\n|$)"
    r"|(?:\|[ \t]*)?:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)+\|?[ \t]*(?=\n|$)"
    r"|\|[ \t]*:?-+:?[ \t]*\|[ \t]*(?=\n|$)"
    r"|\[[^\]\n]{1,200}\]:[ \t]*\S+[^\n]*)"
)
_CLOSERS = frozenset(")]\"'”’»")


class _Next:
    """Where the next ``needle`` at or after a position is: the last answer is reused while it lies ahead of the
    position asked about, so asking at increasing positions costs one pass over the text in all."""

    def __init__(self, text: str, needle: str) -> None:
        self._text, self._needle = text, needle
        self._asked, self._found = len(text) + 1, -1  # nothing asked yet

    def at(self, position: int) -> int:
        """The index of the next ``needle`` at or after ``position``, or -1."""
        # The answer for an earlier position holds for this one if it lies ahead of it (or there was none).
        reusable = self._asked <= position and (self._found == -1 or self._found >= position)
        if not reusable:
            self._found = self._text.find(self._needle, position)
        self._asked = position
        return self._found


class _Reading:
    """One scan of a text: the builder of what is read, and what the scan has seen."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.out = TextBuilder()
        self.position = 0  # the start of the text not yet copied
        self.line_ends_sentence = False  # a heading, list item, quote or table row: its end is a sentence end
        self.link_close = -1  # the "]" of the link being read: from it to link_end is silent
        self.link_end = -1
        self.brackets, self.parens = _Next(text, "]"), _Next(text, ")")
        self.newlines, self.comment_ends = _Next(text, "\n"), _Next(text, "-->")

    def copy_to(self, end: int) -> None:
        self.out.keep(self.text, self.position, end)
        self.position = end

    def skip(self, start: int, end: int) -> None:
        """Copies up to ``start``; ``start``..``end`` says nothing."""
        self.copy_to(start)
        self.position = end

    def replace(self, start: int, end: int, spoken: str) -> None:
        self.copy_to(start)
        self.out.add(spoken, start, end)
        self.position = end

    def end_clause(self, mark: str, at: int) -> None:
        """Ends what has been read with ``mark`` unless it ends in punctuation already (or nothing was read)."""
        self.copy_to(at)
        last = self.out.last_visible()
        if last and (last.isalnum() or last in _CLOSERS):
            self.out.add(mark, at, at)
        elif last == "," and mark == "." and self.out.last_visible_added():
            self.out.rewrite_last_visible(".")  # the pause after a table's last cell: the row's end instead


def spoken(text: str) -> tuple[str, TextMap]:
    """``text`` as a person reads it aloud (its markup silent or read as words), and the map back to ``text``."""
    reading = _Reading(text)
    i = _line_start(reading, 0)
    while (found := _SPECIAL.search(text, i)) is not None:
        i = _construct(reading, found.start())
    reading.copy_to(len(text))
    if reading.line_ends_sentence:
        reading.end_clause(".", len(text))
    return reading.out.result()


def speakable_markup(text: str) -> str:
    """``text`` with its numeric character references decoded, for the checks made on the event loop before the
    reading (a number written ``&#49;&#50;`` is read as digits, and the digit cap must count them): a search in C
    unless the text holds such references (no named reference is a digit)."""
    return _NUMERIC_REFERENCE.sub(lambda m: html.unescape(m.group()), text) if "&#" in text else text


def _line_start(reading: _Reading, i: int) -> int:
    """Reads the markers that open the line at ``i``; returns where the scan goes on."""
    text = reading.text
    reading.line_ends_sentence = False
    if (silent := _SILENT_LINE.match(text, i)) is not None:
        reading.skip(i, silent.end())
        return silent.end()
    if (quote := _QUOTE.match(text, i)) is not None:
        reading.skip(i, quote.end())
        reading.line_ends_sentence = True
        i = quote.end()
    for marker in (_HEADING, _BULLET):
        if (found := marker.match(text, i)) is not None:
            reading.skip(i, found.end())
            reading.line_ends_sentence = True
            return found.end()
    if _NUMBERED.match(text, i) or _TABLE_ROW.match(text, i):
        reading.line_ends_sentence = True
    return i


def _construct(reading: _Reading, i: int) -> int:
    """Reads the construct that may start at ``i`` (a character of ``_SPECIAL``); returns where the scan goes on."""
    text = reading.text
    ch = text[i]
    if i == reading.link_close:
        reading.skip(i, reading.link_end)
        reading.link_close = -1
        return reading.link_end
    if ch == "\n":
        if reading.line_ends_sentence:
            reading.end_clause(".", i)
        return _line_start(reading, i + 1)
    if ch == "\\":
        if i + 1 < len(text) and text[i + 1] in _ESCAPABLE:
            reading.skip(i, i + 1)  # the backslash goes; the character after it is read as written
            return i + 2
        return i + 1
    if ch in "*_~`#":
        return _marker_run(reading, i)
    if ch == "[" or (ch == "!" and text.startswith("[", i + 1)):
        return _link(reading, i)
    if ch == "<":
        return _angle(reading, i)
    if ch == "&":
        if (entity := _ENTITY.match(text, i)) is not None:
            decoded = html.unescape(entity.group()).replace("\xa0", " ")
            reading.replace(i, entity.end(), decoded)
            return entity.end()
        return i + 1
    if ch == "|":  # a table's cell border: a pause between cells, none before the first or after the last
        reading.skip(i, i + 1)
        reading.end_clause(",", i + 1)
        reading.out.add(" ", i + 1, i + 1)
        return i + 1
    return i + 1  # "]" or "!" that start nothing


def _marker_run(reading: _Reading, i: int) -> int:
    """A run of ``*``, ``_``, ``~``, backticks or ``#``: silent when it marks up the words beside it."""
    text = reading.text
    ch = text[i]
    end = i
    while end < len(text) and text[end] == ch:
        end += 1
    before = text[i - 1] if i > 0 else " "
    after = text[end] if end < len(text) else " "
    spaced_before, spaced_after = before.isspace(), after.isspace()
    if ch == "`":
        silent = True
    elif ch == "#":
        silent = end - i >= 2 and spaced_before and spaced_after  # "## Heading" run into a line; "C#", "#1" stay
    elif ch == "_":
        silent = not (before.isalnum() and after.isalnum()) and not (spaced_before and spaced_after)
    elif ch == "~":
        silent = end - i >= 2 and not (spaced_before and spaced_after)
    else:  # "*": "2 * 3" and "5*3" are arithmetic
        silent = not (spaced_before and spaced_after) and not (before.isdigit() and after.isdigit())
    if silent:
        reading.skip(i, end)
    return end


def _link(reading: _Reading, i: int) -> int:
    """``[text](url)``, ``![alt](url)``, ``[text][ref]``: the text is read, the rest is silent."""
    text = reading.text
    start = i + 1 if text[i] == "!" else i
    if reading.link_close >= start:  # a bracket inside a link's text: read as written
        return start + 1
    close = reading.brackets.at(start + 1)
    line_end = reading.newlines.at(start)
    if close == -1 or (line_end != -1 and close > line_end):
        return start + 1
    after = text[close + 1 : close + 2]
    if after == "(":
        end = reading.parens.at(close + 2)
        if end != -1 and text.find("(", close + 2, end) != -1:  # an address with (one pair of) brackets in it
            end = reading.parens.at(end + 1)
        if end == -1 or (line_end != -1 and end > line_end):
            return start + 1
    elif after == "[":
        end = reading.brackets.at(close + 2)
        if end == -1 or (line_end != -1 and end > line_end):
            return start + 1
    else:
        return start + 1  # "[1]", "[sic]": brackets the G2P reads as nothing
    reading.skip(i, start + 1)
    reading.link_close, reading.link_end = close, end + 1
    return start + 1


def _angle(reading: _Reading, i: int) -> int:
    """An HTML tag or comment (silent), or an autolink (its address); else a "<" as written."""
    text = reading.text
    if text.startswith("<!--", i):
        end = reading.comment_ends.at(i + 4)
        if end == -1:
            return i + 1
        reading.skip(i, end + 3)
        return end + 3
    if (link := _AUTOLINK.match(text, i)) is not None:
        address = link.start(1) + (len("mailto:") if link.group(1).startswith("mailto:") else 0)
        reading.skip(i, address)
        reading.skip(link.end() - 1, link.end())  # the address is copied, character by character
        return link.end()
    tag = _TAG.match(text, i)
    if tag is None:
        return i + 1
    name = tag.group(2).lower()
    reading.skip(i, tag.end())
    if tag.group(1) and name in _SENTENCE_TAGS:
        reading.end_clause(".", tag.end())
    elif tag.group(1) and name in _CLAUSE_TAGS:
        reading.end_clause(",", tag.end())
    if name in _SENTENCE_TAGS or name in _SPACE_TAGS:
        reading.out.add(" ", tag.end(), tag.end())
    return tag.end()


# --- a text still being written ---------------------------------------------------------------------------------

# How far back a construct may have opened for ``held_from`` to hold it: a link's address or a tag's attributes
# are rarely longer, and a cutter must never hold a whole reply because of one stray "[".
MAX_HELD_CHARS = 512
_LINE_OPENING = frozenset(" \t#>-*+=_~`|:.)0123456789")
_ENTITY_PREFIX = re.compile(r"&(?:#[xX]?[0-9A-Fa-f]{0,7}|[A-Za-z][A-Za-z0-9]{0,31})?\Z")


def held_from(text: str) -> int:
    """Where the end of ``text`` (still being written) may be read differently once more text comes: the start of
    an unfinished construct (an open ``[`` or ``[text](``, ``<tag``, ``<!--``, ``&amp`` without its ``;``, a run
    of markers at the very end, a line whose opening markers are not finished, a code fence's line), or
    ``len(text)`` when all of it reads the same whatever follows. Looks back at most ``MAX_HELD_CHARS``."""
    n = len(text)
    floor = max(0, n - MAX_HELD_CHARS)
    held = n
    # A run of marker characters at the end: what follows decides whether they are silent.
    end = n
    while end > floor and text[end - 1] in "*_~`#\\":
        end -= 1
    held = min(held, end)
    # The line being written: its opening markers, or a code fence whose info string is not finished.
    newline = text.rfind("\n", floor)
    line = newline + 1 if newline != -1 else (0 if floor == 0 else -1)  # -1: the line began before the floor
    if line != -1:
        opening = text[line:]
        if all(ch in _LINE_OPENING for ch in opening) or opening.lstrip(" \t").startswith(("```", "~~~")):
            held = min(held, line)
    # An open "[" (and its "](…" or "][…"), "<" or "&" in the tail.
    bracket = text.rfind("[", floor)
    if bracket != -1:
        close = text.find("]", bracket)
        if close == -1 or close == n - 1:
            held = min(held, _with_bang(text, bracket))
        elif text[close + 1] in "([" and text.find(")" if text[close + 1] == "(" else "]", close + 2) == -1:
            held = min(held, _with_bang(text, bracket))
    angle = text.rfind("<", floor)
    if angle != -1 and text.find(">", angle) == -1:
        opening = text[angle + 1 : angle + 2]
        if not opening or opening.isalpha() or opening in "/!":
            held = min(held, angle)
    comment = text.rfind("<!--", floor)
    if comment != -1 and text.find("-->", comment) == -1:
        held = min(held, comment)
    amp = text.rfind("&", max(floor, n - 40))
    if amp != -1 and _ENTITY_PREFIX.match(text, amp):
        held = min(held, amp)
    return held


def _with_bang(text: str, bracket: int) -> int:
    return bracket - 1 if bracket > 0 and text[bracket - 1] == "!" else bracket
