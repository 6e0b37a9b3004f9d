"""The server's Prometheus metrics (GET /metrics; docs/observability.md): every definition here, one small hook
per event where it happens.

Counters and histograms are observed as things happen; the engine's state (queue depth, sessions, HTTP streams,
refusals by each cap) is read at scrape time from the engines ``watch`` was given, so nothing is kept twice.
The registry is the server's own: a process that also runs the agent (tests) shows each side its own metrics.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from kokoro_tts.engine.events import Completed, Ending, Stopped

if TYPE_CHECKING:
    from kokoro_tts.engine.synthesis import TTSEngine

# One line per utterance, with its numbers as fields: where /metrics cannot be reached (SageMaker), CloudWatch
# Logs Insights computes the same figures from these (docs/observability.md).
utterance_log = logging.getLogger("kokoro_tts.utterances")

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

# Routes, as the ``route`` label names them; any other path is "other", so a label's values stay few.
ROUTES = {
    "/invocations": "invocations",
    "/v1/audio/speech": "openai",
    "/invocations-bidirectional-stream": "ws",
    "/v1/speak": "deepgram",
    "/dev/captioned_speech": "captioned",
    "/tts/websocket": "cartesia",
    "/tts/bytes": "cartesia",
}
ROUTE_PREFIXES = {"/v1/text-to-speech/": "elevenlabs"}  # the voice is in the path

TIME_TO_FIRST_AUDIO = Histogram(
    "kokoro_tts_time_to_first_audio_seconds",
    "From the request (HTTP) or the synthesize message (WebSocket) to its first audio, as the server sees it.",
    ["route"],
    buckets=(0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0),
    registry=REGISTRY,
)
REAL_TIME_FACTOR = Histogram(
    "kokoro_tts_real_time_factor",
    "Per completed utterance: inference time over the audio's duration (below 1: faster than real time).",
    ["route"],
    buckets=(0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0),
    registry=REGISTRY,
)
AUDIO_SECONDS = Counter(
    "kokoro_tts_audio_seconds", "Seconds of audio synthesized and sent.", ["route"], registry=REGISTRY
)
UTTERANCES = Counter(
    "kokoro_tts_utterances",
    "Utterances that ended: outcome completed, or cancelled (a cancel message, or the client left mid-way).",
    ["route", "outcome"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "kokoro_tts_errors",
    "Errors answered to clients, by route and stable error code (kokoro_client.errors.ErrorCode).",
    ["route", "code"],
    registry=REGISTRY,
)


def route_of(path: str) -> str:
    if path in ROUTES:
        return ROUTES[path]
    return next((route for prefix, route in ROUTE_PREFIXES.items() if path.startswith(prefix)), "other")


def first_audio(route: str, seconds: float) -> None:
    TIME_TO_FIRST_AUDIO.labels(route).observe(seconds)


def utterance_completed(route: str, audio_ms: float, synth_ms: float, first_audio_s: float | None) -> None:
    UTTERANCES.labels(route, "completed").inc()
    rtf = synth_ms / audio_ms if audio_ms > 0 else None
    if rtf is not None:
        REAL_TIME_FACTOR.labels(route).observe(rtf)
    utterance_log.info(
        "utterance completed",
        extra={
            "route": route,
            "outcome": "completed",
            "audio_ms": round(audio_ms, 1),
            "synth_ms": round(synth_ms, 1),
            "first_audio_ms": None if first_audio_s is None else round(1000 * first_audio_s, 1),
            "real_time_factor": None if rtf is None else round(rtf, 3),
        },
    )


def utterance_cancelled(route: str) -> None:
    UTTERANCES.labels(route, "cancelled").inc()
    utterance_log.info("utterance cancelled", extra={"route": route, "outcome": "cancelled"})


def audio_sent(route: str, audio_ms: float) -> None:
    AUDIO_SECONDS.labels(route).inc(audio_ms / 1000.0)


def error(route: str, code: str) -> None:
    ERRORS.labels(route, str(code)).inc()
    utterance_log.info("error answered: %s", code, extra={"route": route, "code": str(code)})


@dataclass(frozen=True)
class RouteMeter:
    """What an utterance's run reports (engine/runs.py's ``Meter``), counted under the door's route. A refusal is
    counted where the door answers it (``error``), with the refusals that never reach a run."""

    route: str

    def first_audio(self, seconds: float) -> None:
        first_audio(self.route, seconds)

    def ended(self, ending: Ending, audio_ms: float) -> None:
        audio_sent(self.route, audio_ms)
        if isinstance(ending, Completed):
            utterance_completed(self.route, ending.audio_ms, ending.synth_ms, ending.first_audio_s)
        elif isinstance(ending, Stopped):
            utterance_cancelled(self.route)


# --- the engine's state, read at scrape time ------------------------------------------------------------------

_engines: weakref.WeakSet[TTSEngine] = weakref.WeakSet()


def watch(engine: TTSEngine) -> None:
    """Report this engine's state from now on (until ``unwatch``, or it is gone)."""
    _engines.add(engine)


def unwatch(engine: TTSEngine) -> None:
    _engines.discard(engine)


class _EngineCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        engines = list(_engines)
        yield _gauge(
            "kokoro_tts_model_ready", "1 once the model is loaded and serving (/ping 200).", [], [((), len(engines))]
        )
        yield _gauge(
            "kokoro_tts_queue_depth",
            "Inference jobs waiting for a worker (the deadline scheduler's queue).",
            [],
            [((), sum(e.scheduler.pending for e in engines))],
        )
        yield _gauge(
            "kokoro_tts_inference_running",
            "Inference jobs in a worker now.",
            [],
            [((), sum(e.scheduler.running for e in engines))],
        )
        yield _gauge(
            "kokoro_tts_inference_workers",
            "Inference jobs that can run at once (KOKORO_WORKERS; on a CPU, one per core).",
            [],
            [((), sum(e.scheduler.workers for e in engines))],
        )
        kinds = sorted({kind for e in engines for kind in e.scheduler.tallies})
        jobs = CounterMetricFamily(
            "kokoro_tts_inference_jobs",
            "Inference jobs run, by job: phonemes (a text chunk's G2P), first_audio (the job making an utterance's "
            "first audio), audio (the jobs after it).",
            labels=["job"],
        )
        seconds = CounterMetricFamily(
            "kokoro_tts_inference_seconds",
            "Worker time those jobs took: over the job count, what one costs as the workers run them now.",
            labels=["job"],
        )
        for kind in kinds:
            tallies = [e.scheduler.tallies[kind] for e in engines if kind in e.scheduler.tallies]
            jobs.add_metric([kind], sum(t.jobs for t in tallies))
            seconds.add_metric([kind], sum(t.seconds for t in tallies))
        yield jobs
        yield seconds
        caps = [(name, [getattr(e, attr) for e in engines]) for name, attr in CAPS.items()]
        yield _gauge(
            "kokoro_tts_in_use",
            "What each cap counts, now: sessions (WebSocket sessions open), http_streams (HTTP syntheses in "
            "flight), waiting_first_audio (utterances waiting for their first audio), streams (streams holding a "
            "slot: playing without a gap).",
            ["cap"],
            [((name,), sum(limit.count for limit in limits)) for name, limits in caps],
        )
        yield _gauge(
            "kokoro_tts_limit",
            "Each cap's ceiling (KOKORO_MAX_*; streams: KOKORO_STREAMS or measured at warm-up, +Inf: no limit).",
            ["cap"],
            [((name,), sum(limit.ceiling for limit in limits)) for name, limits in caps],
        )
        refused = CounterMetricFamily(
            "kokoro_tts_refused", "Requests refused with server_busy because a cap was reached.", labels=["cap"]
        )
        for name, limits in caps:
            refused.add_metric([name], sum(limit.refused for limit in limits))
        yield refused
        slots = [e.slots for e in engines]
        yield _gauge(
            "kokoro_tts_stream_throughput",
            "Seconds of audio the workers make per second side by side, measured at warm-up: the streams the "
            "engine could play at once with no headroom.",
            [],
            [((), sum(s.throughput for s in slots))],
        )
        yield _gauge(
            "kokoro_tts_stream_throughput_warmup",
            "The warm-up's throughput figure, before any re-check while idle moved it.",
            [],
            [((), sum(s.first_throughput for s in slots))],
        )
        yield _gauge(
            "kokoro_tts_stream_throughput_measured_timestamp_seconds",
            "When the throughput figure was last measured (Unix time; 0: never).",
            [],
            [((), max((s.measured_at for s in slots), default=0.0))],
        )
        measurements = CounterMetricFamily(
            "kokoro_tts_stream_throughput_measurements", "Throughput measurements: the warm-up's, then each re-check."
        )
        measurements.add_metric([], sum(s.measurements for s in slots))
        yield measurements
        behind = CounterMetricFamily(
            "kokoro_tts_streams_fell_behind",
            "Streams that gave their slot up because their client read the audio slower than it plays (slow_reader).",
        )
        behind.add_metric([], sum(s.fell_behind for s in slots))
        yield behind
        lent = CounterMetricFamily(
            "kokoro_tts_streams_lent",
            "Stream slots lent to a waiter by streams whose clients held plenty of audio; each took one back later.",
        )
        lent.add_metric([], sum(s.lent for s in slots))
        yield lent
        yield _gauge(
            "kokoro_tts_stream_headroom",
            "Stream slots free now: streams that would start at once (+Inf: no limit).",
            [],
            [((), sum(s.ceiling - s.count for s in slots))],
        )
        yield _gauge(
            "kokoro_tts_streams_waiting",
            "Streams waiting for a slot (their first audio later, never a gap).",
            [],
            [((), sum(s.waiting for s in slots))],
        )


# The engine's Limits (scheduler.Limit) and its stream slots (capacity.StreamSlots), by the ``cap`` label.
CAPS = {"sessions": "sessions", "http_streams": "http_streams", "waiting_first_audio": "waiting", "streams": "slots"}


def _gauge(name: str, doc: str, labels: list[str], samples: Iterable[tuple[tuple[str, ...], float]]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


REGISTRY.register(_EngineCollector())


async def metrics_endpoint(request: Request) -> Response:
    """GET /metrics: the Prometheus text format. Not on SageMaker's path (only /ping and /invocations are)."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
