"""The seed's sentence chunker, kept unchanged as the baseline `python -m scripts.chunkers` measures.

Do not use it: it splits "Dr. Smith" and "U.S. Army", never splits Chinese or Japanese,
ignores line breaks and parts a closing quote from its sentence.
Use `kokoro_client.chunker.IncrementalSentenceChunker`.
"""

from __future__ import annotations

import re

_SPLIT = re.compile(r"(?<=[.!?])\s+")


class SeedSentenceChunker:
    """Split on whitespace after `.`, `!` or `?`; emit every part but the last."""

    def __init__(self) -> None:
        self._buffer = ""

    def feed(self, fragment: str) -> list[str]:
        self._buffer += fragment
        *done, self._buffer = _SPLIT.split(self._buffer)
        return [part.strip() for part in done if part.strip()]

    def flush(self) -> str | None:
        rest, self._buffer = self._buffer.strip(), ""
        return rest or None
