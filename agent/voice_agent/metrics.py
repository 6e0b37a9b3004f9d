"""The agent's Prometheus metrics (GET /metrics; docs/observability.md) and its trace spans, in one place.

``Reply`` watches one invocation's events as they go to the caller: it counts the prompt, times the first text and
the first audio (from ``agent_start``, as the caller hears it), and counts how the reply ended. It also holds the
invocation's span and its child "first audio" span. Without an OpenTelemetry SDK configured (the local default:
nothing runs ``opentelemetry-instrument``) the spans are no-ops and nothing is exported.
"""

from __future__ import annotations

from kokoro_client.session import TransportCode
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from starlette.requests import Request
from starlette.responses import Response

from .events import Event

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0)

PROMPTS = Counter("voice_agent_prompts", "Prompts accepted, by mode (bidi or batch).", ["mode"], registry=REGISTRY)
REPLIES_IN_PROGRESS = Gauge(
    "voice_agent_replies_in_progress", "Replies being written and spoken now.", ["mode"], registry=REGISTRY
)
REPLIES = Counter(
    "voice_agent_replies",
    "Replies that ended: outcome completed (agent_end), error (an error event), or left (the caller went away).",
    ["mode", "outcome"],
    registry=REGISTRY,
)
TIME_TO_FIRST_TEXT = Histogram(
    "voice_agent_time_to_first_text_seconds",
    "From the prompt to the LLM's first text.",
    ["mode"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
TIME_TO_FIRST_AUDIO = Histogram(
    "voice_agent_time_to_first_audio_seconds",
    "From the prompt to the first audio chunk sent to the caller: what the caller waits before hearing anything.",
    ["mode"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
ERRORS = Counter(
    "voice_agent_errors",
    "Replies ended by an error event, by its stable code (events.ErrorCode or kokoro_client.session.TransportCode).",
    ["code"],
    registry=REGISTRY,
)
TTS_SESSION_DROPS = Counter(
    "voice_agent_tts_session_drops",
    "TTS sessions or response streams lost mid-reply (error code tts_session_dropped).",
    registry=REGISTRY,
)

TRACER_NAME = "voice_agent"


def request_error(code: str) -> None:
    """A request refused before any reply started (bad request, no model)."""
    ERRORS.labels(str(code)).inc()


class Reply:
    """One reply's metrics and spans; feed it every event the caller gets, then ``end``."""

    def __init__(self, mode: str, model: str) -> None:
        self.mode = mode
        self.outcome = "left"  # until an agent_end or an error event says otherwise
        self._first_text = self._first_audio = False
        PROMPTS.labels(mode).inc()
        REPLIES_IN_PROGRESS.labels(mode).inc()
        tracer = trace.get_tracer(TRACER_NAME)
        attributes = {"voice_agent.mode": mode, "gen_ai.request.model": model}
        self.span: Span = tracer.start_span("voice_agent.reply", attributes=attributes)
        self._until_audio: Span = tracer.start_span(
            "voice_agent.time_to_first_audio", context=trace.set_span_in_context(self.span), attributes=attributes
        )

    def see(self, event: Event) -> None:
        kind = event["type"]
        if kind == "text_delta" and not self._first_text:
            self._first_text = True
            TIME_TO_FIRST_TEXT.labels(self.mode).observe(event["t_ms"] / 1000)
            self.span.add_event("first_text", {"t_ms": event["t_ms"]})
        elif kind == "audio_chunk" and not self._first_audio:
            self._first_audio = True
            TIME_TO_FIRST_AUDIO.labels(self.mode).observe(event["t_ms"] / 1000)
            self._until_audio.set_attribute("voice_agent.first_audio_ms", event["t_ms"])
            self._until_audio.end()
        elif kind == "agent_end":
            self.outcome = "completed"
            self.span.set_attribute("voice_agent.truncated", bool(event.get("truncated")))
            for key, value in event["metrics"].items():
                if isinstance(value, int | float):
                    self.span.set_attribute(f"voice_agent.{key}", value)
        elif kind == "error":
            self.outcome = "error"
            ERRORS.labels(event["code"]).inc()
            if event["code"] == TransportCode.TTS_SESSION_DROPPED:
                TTS_SESSION_DROPS.inc()
            self.span.set_attribute("voice_agent.error_code", event["code"])
            self.span.set_status(Status(StatusCode.ERROR, event["code"]))

    def end(self) -> None:
        REPLIES_IN_PROGRESS.labels(self.mode).dec()
        REPLIES.labels(self.mode, self.outcome).inc()
        if not self._first_audio:  # no audio ever came: the span says why the reply ended
            self._until_audio.set_status(Status(StatusCode.ERROR, f"no audio: {self.outcome}"))
            self._until_audio.end()
        self.span.set_attribute("voice_agent.outcome", self.outcome)
        self.span.end()


async def metrics_endpoint(request: Request) -> Response:
    """GET /metrics: the Prometheus text format (self-hosted agents; AgentCore Runtime forwards only /invocations
    and /ping, so there the traces and logs are the way in: docs/observability.md)."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
