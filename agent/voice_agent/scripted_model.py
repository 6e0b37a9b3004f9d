"""The embedded default LLM: a Strands ``Model`` that streams a canned reply with a realistic cadence.

It is a simulated LLM: it ignores the prompt and always speaks the same reply (``DEFAULT_REPLY``, five sentences,
or ``SCRIPTED_REPLY``). It needs no network and no credentials, so `make agent` and `make demo` run anywhere, and it
is named as simulated wherever it appears (``SIMULATED_NAME`` in ``agent_start``, the demo's output, and the reply
itself). Its timing is what matters for the latency comparison: a time to first token, then tokens at a steady
rate with some jitter, like a hosted LLM. Each call is recorded in ``streams`` so tests can see a stream that was
stopped early. For real answers: AGENT_MODEL=bedrock or openai (docs/agent.md).
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar

from pydantic import BaseModel
from strands.models.model import Model
from strands.types.content import Messages
from strands.types.event_loop import StopReason
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolSpec

SIMULATED_NAME = "scripted (simulated LLM: it ignores the prompt)"

# Five sentences ("Hello!" is one): the chunker hands each to the TTS on its own.
DEFAULT_REPLY = (
    "Hello! I am a scripted stand-in for a language model, so this reply is simulated. "
    "Each sentence goes to the speech engine the moment it is complete. "
    "That way you hear the start of my answer while the rest is still being written. "
    "A batch pipeline would wait for the whole reply before it could say a single word."
)

# Roughly what a BPE tokenizer does to English: words with their leading space, long words in pieces,
# punctuation on its own.
_TOKEN = re.compile(r"\s*(?:[^\W\d_]{1,10}|\d{1,3}|[^\w\s])|\s+")

T = TypeVar("T", bound=BaseModel)


def tokenize(text: str) -> list[str]:
    """Split ``text`` into LLM-like tokens; joining them gives ``text`` back."""
    return _TOKEN.findall(text)


class ScriptedConfig(TypedDict, total=False):
    reply: str
    ttft_s: float  # time to first token
    tokens_per_s: float
    jitter: float  # each gap is 1/tokens_per_s times a factor in [1 - jitter, 1 + jitter]
    fail_after_tokens: int | None  # raise ScriptedModelError after this many tokens (fault injection)
    max_tokens: int | None  # stop after this many tokens, as a provider does at its limit (AGENT_MAX_TOKENS)
    echo_context: bool  # the reply starts by saying which earlier prompts it was given (conversation tests)
    seed: int


class ScriptedModelError(RuntimeError):
    """The simulated LLM failing mid-stream (fault injection)."""


@dataclass
class StreamRecord:
    """What one stream() call did."""

    started: float
    tokens_sent: int = 0
    completed: bool = False  # reached messageStop
    closed: bool = False  # the generator is finished: completed, failed, cancelled or closed by the caller
    cancelled: bool = False  # stopped by the caller (task cancelled, generator closed, or cancel_signal)
    context: list[tuple[str, str]] = field(default_factory=list)  # the conversation it was given: (role, text)


class ScriptedModel(Model):
    def __init__(self, **config: Any) -> None:
        self.config: ScriptedConfig = {
            "reply": DEFAULT_REPLY,
            "ttft_s": 0.6,
            "tokens_per_s": 15.0,
            "jitter": 0.3,
            "fail_after_tokens": None,
            "max_tokens": None,
            "echo_context": False,
            "seed": 0,
        }
        self.update_config(**config)
        self.streams: list[StreamRecord] = []
        self._lock = threading.Lock()  # the app calls stream() from its worker loop; tests read from another thread

    def update_config(self, **model_config: Any) -> None:
        unknown = set(model_config) - set(ScriptedConfig.__annotations__)
        if unknown:
            raise ValueError(f"unknown ScriptedModel settings: {sorted(unknown)}")
        if model_config.get("tokens_per_s", 1.0) <= 0:
            raise ValueError("tokens_per_s must be > 0")
        if (limit := model_config.get("max_tokens")) is not None and limit < 1:
            raise ValueError("max_tokens must be >= 1")
        self.config.update(model_config)  # type: ignore[typeddict-item]

    def get_config(self) -> ScriptedConfig:
        return self.config

    @property
    def name(self) -> str:
        return SIMULATED_NAME

    def expected_duration_s(self) -> float:
        """The reply's nominal length: time to first token plus one gap per later token."""
        n = len(tokenize(self.config["reply"]))
        if (limit := self.config["max_tokens"]) is not None:
            n = min(n, limit)
        return self.config["ttft_s"] + max(n - 1, 0) / self.config["tokens_per_s"]

    async def structured_output(
        self, output_model: type[T], prompt: Messages, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[dict[str, T | Any], None]:
        raise NotImplementedError("the scripted model only streams its canned reply")
        yield {}  # pragma: no cover - makes this an async generator, as the interface requires

    async def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        *,
        cancel_signal: threading.Event | None = None,
        **kwargs: Any,
    ) -> AsyncIterable[StreamEvent]:
        config = self.config
        rng = random.Random(config["seed"])
        context: list[tuple[str, str]] = [
            (m["role"], " ".join(b["text"] for b in m["content"] if "text" in b)) for m in messages
        ]
        reply = config["reply"]
        if config["echo_context"]:
            earlier = [text for role, text in context[:-1] if role == "user"]
            reply = (
                f"Earlier you said: {' / '.join(earlier)}. {reply}" if earlier else f"This is our first turn. {reply}"
            )
        tokens = tokenize(reply)
        # At the limit a provider stops mid-reply and says why: Bedrock's stopReason "max_tokens", OpenAI's
        # finish_reason "length" (which Strands reports as "max_tokens"); Strands then raises
        # MaxTokensReachedException.
        limit = config["max_tokens"]
        stop_reason: StopReason = "max_tokens" if limit is not None and len(tokens) > limit else "end_turn"
        tokens = tokens[:limit] if limit is not None else tokens
        gap = 1.0 / config["tokens_per_s"]
        record = StreamRecord(started=time.monotonic(), context=context)
        with self._lock:
            self.streams.append(record)
        try:
            yield {"messageStart": {"role": "assistant"}}
            yield {"contentBlockStart": {"start": {}}}
            # Sleep to absolute deadlines so the cadence does not drift with the consumer's own work.
            due = time.monotonic() + config["ttft_s"]
            for i, token in enumerate(tokens):
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if cancel_signal is not None and cancel_signal.is_set():
                    record.cancelled = True
                    return
                fail_after = config["fail_after_tokens"]
                if fail_after is not None and i >= fail_after:
                    raise ScriptedModelError(f"simulated LLM failure after {i} tokens")
                yield {"contentBlockDelta": {"delta": {"text": token}}}
                record.tokens_sent += 1
                due += gap * (1 + config["jitter"] * (2 * rng.random() - 1))
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": stop_reason}}
            yield {
                "metadata": {
                    "usage": {"inputTokens": 0, "outputTokens": len(tokens), "totalTokens": len(tokens)},
                    "metrics": {"latencyMs": int((time.monotonic() - record.started) * 1000)},
                }
            }
            record.completed = True
        except (asyncio.CancelledError, GeneratorExit):
            record.cancelled = True
            raise
        finally:
            record.closed = True
