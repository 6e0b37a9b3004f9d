"""The events the agent streams to its caller (one SSE ``data:`` line each), and the metrics they add up to.

Every event is a JSON object with ``type`` and ``t_ms``, milliseconds since ``agent_start``. A reply ends with
exactly one of ``agent_end`` (success; ``truncated`` when the LLM stopped at its token limit, the reply spoken up
to the cut) or ``error`` (with a stable ``code``); nothing follows either. A request that reports how much of the
last reply was played (``played_ms``) gets ``interrupted`` first; one with no prompt gets only that.
"""

from __future__ import annotations

import base64
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from kokoro_client.protocol import WordTiming
from kokoro_client.session import TransportCode

Event = dict[str, Any]


class ErrorCode(StrEnum):
    # The request
    INVALID_REQUEST = "invalid_request"  # not a JSON object, or a field of the wrong type
    INVALID_JSON = "invalid_json"  # the body is not JSON at all (HTTP 400, before any event)
    BODY_TOO_LARGE = "body_too_large"  # the body is over MAX_BODY_BYTES (HTTP 413, never read in full)
    EMPTY_PROMPT = "empty_prompt"
    PROMPT_TOO_LONG = "prompt_too_long"
    UNKNOWN_MODE = "unknown_mode"
    INVALID_SPEED = "invalid_speed"
    INVALID_SESSION_ID = "invalid_session_id"  # not 1-256 of A-Z a-z 0-9 _ - (AgentCore's own ids are such)
    # The conversation
    SESSION_BUSY = "session_busy"  # the session's running reply did not stop in time for this prompt
    SUPERSEDED = "superseded"  # a newer prompt in the same session interrupted this reply (its last event)
    SESSION_UNAVAILABLE = "session_unavailable"  # the session's turns cannot be read (durable storage failing)
    # The LLM
    MODEL_UNAVAILABLE = "model_unavailable"  # the configured model cannot be built (missing package, bad config)
    LLM_FAILED = "llm_failed"  # the LLM stream raised
    LLM_TIMEOUT = "llm_timeout"  # no token for llm_idle_timeout_s
    # The TTS server's codes are kokoro_client's TransportCode: the clients raise them, the agent passes them on.
    INTERNAL_ERROR = "internal_error"


class Clock:
    """Milliseconds since the reply started (the ``agent_start`` event)."""

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def ms(self) -> float:
        return round((time.perf_counter() - self._start) * 1000, 1)


class Events:
    """Builds events stamped by one clock."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()

    def _event(self, type_: str, **fields: Any) -> Event:
        return {"type": type_, "t_ms": self.clock.ms(), **fields}

    def agent_start(self, mode: str, model: str, voice: str | None) -> Event:
        return self._event("agent_start", mode=mode, model=model, voice=voice)

    def text_delta(self, text: str) -> Event:
        return self._event("text_delta", text=text)

    def sentence(self, index: int, text: str) -> Event:
        return self._event("sentence", index=index, text=text)

    def audio_chunk(self, data: bytes, fmt: str, sample_rate: int, sentence: int, seq: int) -> Event:
        # seq counts audio chunks across the whole reply (0, 1, ...), so a caller can spot a gap.
        audio = base64.b64encode(data).decode("ascii")
        return self._event("audio_chunk", audio=audio, format=fmt, sample_rate=sample_rate, sentence=sentence, seq=seq)

    def words(self, words: tuple[WordTiming, ...]) -> Event:
        # The words whose audio starts in the next audio_chunk: start_ms from the reply's first audio, and where
        # each is in the reply's text (its text_deltas joined: text[char_start:char_end] == word).
        return self._event("words", words=[asdict(word) for word in words])

    def sentence_complete(self, index: int, audio_ms: float, skipped: str | None = None) -> Event:
        event = self._event("sentence_complete", index=index, audio_ms=audio_ms)
        if skipped:
            event["skipped"] = skipped  # the server's code: the sentence had nothing speakable
        return event

    def interrupted(self, played_ms: float, text_spoken: str, text_remaining: str) -> Event:
        # The caller's report on the previous reply: what of it stays in the conversation, what was cut.
        return self._event("interrupted", played_ms=played_ms, text_spoken=text_spoken, text_remaining=text_remaining)

    def agent_end(self, metrics: Metrics, truncated: bool = False) -> Event:
        return self._event("agent_end", truncated=truncated, metrics=metrics.as_dict(self.clock.ms()))

    def error(self, code: ErrorCode | TransportCode, message: str, **extra: Any) -> Event:
        return self._event("error", code=str(code), message=message, **{k: v for k, v in extra.items() if v})


@dataclass
class Metrics:
    """First-event times in ms since agent_start (None when it never happened), and the audio's length."""

    first_text_ms: float | None = None
    first_sentence_ms: float | None = None
    first_audio_ms: float | None = None
    text_done_ms: float | None = None  # the last text_delta: the LLM's end, as seen by the pipeline
    audio_ms: float = 0.0
    sentences: int = 0
    audio_chunks: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def observe(self, event: Event) -> None:
        kind, t = event["type"], event["t_ms"]
        if kind == "text_delta":
            self.first_text_ms = self.first_text_ms if self.first_text_ms is not None else t
            self.text_done_ms = t
        elif kind == "sentence":
            self.first_sentence_ms = self.first_sentence_ms if self.first_sentence_ms is not None else t
            self.sentences += 1
        elif kind == "audio_chunk":
            self.first_audio_ms = self.first_audio_ms if self.first_audio_ms is not None else t
            self.audio_chunks += 1
        elif kind == "sentence_complete":
            self.audio_ms = round(self.audio_ms + float(event.get("audio_ms") or 0.0), 1)

    def as_dict(self, total_ms: float) -> dict[str, Any]:
        return {
            "first_text_ms": self.first_text_ms,
            "first_sentence_ms": self.first_sentence_ms,
            "first_audio_ms": self.first_audio_ms,
            "text_done_ms": self.text_done_ms,
            "total_ms": total_ms,
            "audio_ms": self.audio_ms,
            "sentences": self.sentences,
            "audio_chunks": self.audio_chunks,
            **self.extra,
        }


def pcm_ms(n_bytes: int, sample_rate: int) -> float:
    """Duration of 16-bit mono PCM."""
    return round(n_bytes / 2 / sample_rate * 1000, 1)
