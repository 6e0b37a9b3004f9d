"""What the caller heard of a reply: its text and when each word's audio starts, cut at a playback position.

Built from the events the caller gets (``text_delta`` and ``words``), so the caller could compute the same cut;
the TTS server reports each word's start in the reply's audio and its place in the text as sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .events import Event


@dataclass(frozen=True)
class Cut:
    spoken: str
    remaining: str


@dataclass
class ReplyWords:
    text: str = ""  # the reply as the LLM wrote it (its text deltas joined)
    # Per word: (start_ms, char_end), in order. Bidi replies have them (each word comes before the audio it starts
    # in); batch replies have none.
    starts: list[tuple[float, int]] = field(default_factory=list)
    audible: bool = False  # some audio went to the caller

    def see(self, event: Event) -> None:
        kind = event["type"]
        if kind == "text_delta":
            self.text += event["text"]
        elif kind == "words":
            self.starts.extend((float(word["start_ms"]), int(word["char_end"])) for word in event["words"])
        elif kind == "audio_chunk":
            self.audible = True

    def cut(self, played_ms: float | None, *, complete: bool) -> Cut:
        """The words whose audio started before ``played_ms``; with no report (None), the words sent, which is the
        whole text when the reply was ``complete``. Without word times (batch) every word of an audible reply
        counts: there is nothing finer to cut by."""
        if (complete and played_ms is None) or (not self.starts and self.audible):
            end = len(self.text)
        else:
            ends = [char_end for start_ms, char_end in self.starts if played_ms is None or start_ms < played_ms]
            end = _through_punctuation(self.text, ends[-1]) if ends else 0
        return Cut(self.text[:end].strip(), self.text[end:].strip())

    def as_state(self) -> dict[str, Any]:
        return {"text": self.text, "starts": self.starts, "audible": self.audible}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ReplyWords:
        starts = [(float(start), int(end)) for start, end in state.get("starts", [])]
        return cls(str(state.get("text", "")), starts, bool(state.get("audible")))


def _through_punctuation(text: str, end: int) -> int:
    """A word's end moved past the punctuation that closes it ("now" → "now."), never into the next word."""
    while end < len(text) and not text[end].isspace() and not text[end].isalnum():
        end += 1
    return end
