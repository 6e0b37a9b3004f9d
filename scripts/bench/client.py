"""Clients of the TTS server and small statistics, shared by ``python -m scripts.bench`` and ``scripts.gpu_check``.

Time to first audio (TTFA) is measured from the moment the request leaves to the first audio byte received, so it
includes what a caller waits for: G2P, the first chunk's inference, encoding and the wire.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import time
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from kokoro_client.audio import BYTES_PER_SECOND
from kokoro_client.errors import ErrorCode
from kokoro_client.local_ws import ws_url
from kokoro_client.protocol import Close, Config, Error, SynthesisComplete, Synthesize, encode, parse_server_frame
from kokoro_client.utterances import UtteranceReader
from websockets.asyncio.client import connect

from scripts import servers
from scripts.scrape import scrape_async

REPO = Path(__file__).resolve().parents[2]
SHORT = "Sure, I can help with that."
LONG = (
    "Thanks for reaching out about your order. I checked our system and it shipped this morning from our "
    "warehouse in Ohio. You should receive it by Thursday afternoon, and a tracking link is on its way to your "
    "email. Is there anything else I can help you with today, Sam?"
)


@dataclass
class Sample:
    ttfa_ms: float
    total_ms: float
    audio_s: float
    synth_ms: float | None = None  # the server's compute time (WS synthesis_complete), when it reports one
    underrun_ms: float = 0.0  # silence a player starting at the first audio heard before the end (``underruns``)
    sent_at: float = 0.0  # perf_counter when the text was sent: the clock of ttfa_ms and total_ms
    refused_ms: float | None = None  # a server_busy came instead of audio, this long after the text (``ws_once``)

    @classmethod
    def refusal(cls, after_ms: float, sent_at: float) -> Sample:
        return cls(math.nan, after_ms, 0.0, sent_at=sent_at, refused_ms=after_ms)

    @property
    def refused(self) -> bool:
        return self.refused_ms is not None

    @property
    def rtf(self) -> float:
        return (self.total_ms / 1000) / self.audio_s if self.audio_s else float("nan")


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: with 5 trials p95 is the slowest one, never an interpolation between two."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# A player's silence up to this long is this client's own timing noise (an asyncio loop's wake-ups stamp each
# frame's arrival a little late); a real player's buffer hides far more (WebRTC's jitter buffer: 20 ms and up).
TIMING_NOISE_MS = 1.0


def ran_dry(silence_ms: float) -> bool:
    """Whether a player heard ``silence_ms`` of silence in all after its first audio, past the timing noise."""
    return silence_ms > TIMING_NOISE_MS


def underruns(chunks: list[tuple[float, float]]) -> tuple[int, float]:
    """(times, ms of silence in all) a player runs dry after it started: ``chunks`` are (arrival ms, audio ms)
    in order, the player starting at the first and playing each one as soon as it has both it and the time."""
    gaps = gaps_of(chunks)
    return len(gaps), sum(gap for _, gap in gaps)


def gaps_of(chunks: list[tuple[float, float]]) -> list[tuple[int, float]]:
    """(index of the chunk that ended it, ms) per underrun of ``underruns``' player."""
    gaps, played_until = [], None
    for i, (arrived, audio_ms) in enumerate(chunks):
        if played_until is not None and arrived > played_until:
            gaps.append((i, arrived - played_until))
        played_until = max(arrived, played_until or arrived) + audio_ms
    return gaps


def played_out_ms(chunks: list[tuple[float, float]]) -> float:
    """When ``underruns``' player has played every chunk, on the chunks' clock (0 with none)."""
    played_until = 0.0
    for arrived, audio_ms in chunks:
        played_until = max(arrived, played_until) + audio_ms
    return played_until


def model_dir() -> Path:
    return Path(os.environ.get("KOKORO_MODEL_DIR", str(REPO / "models" / "kokoro")))


async def post_once(client: httpx.AsyncClient, url: str, text: str, *, first_audio_only: bool = False) -> Sample:
    """One POST /invocations. ``first_audio_only`` stops reading at the first audio byte: see ``post_first_audio``."""
    started = time.perf_counter()
    ttfa, size = None, 0
    async with client.stream("POST", f"{url}/invocations", json={"text": text}) as response:
        response.raise_for_status()
        async for part in response.aiter_raw():
            if ttfa is None and part:
                ttfa = time.perf_counter() - started
            size += len(part)
            if first_audio_only and ttfa is not None:
                break
    total = time.perf_counter() - started
    return Sample(1000 * (ttfa or total), 1000 * total, 0.0 if first_audio_only else size / BYTES_PER_SECOND)


async def post_first_audio(url: str, text: str) -> Sample:
    """Time to first audio over POST /invocations (h2c), then a real hang-up (then call ``drain``).

    httpcore never resets an HTTP/2 stream whose response is closed early (it only forgets it), so on a shared
    connection the server would go on synthesizing the whole reply for nobody. A connection of its own, closed at
    the first byte, is a hang-up the server sees.
    """
    async with httpx.AsyncClient(http1=False, http2=True, timeout=300) as client:
        await client.get(f"{url}/ping")  # connected first: the clock counts from the request, as ws_once's does
        return await post_once(client, url, text, first_audio_only=True)


async def ws_once(
    url: str, text: str, *, first_audio_only: bool = False, busy_ok: bool = False, play_out: bool = False
) -> Sample:
    """One utterance on a fresh session; the clock starts when the text is sent, after the handshake.

    ``first_audio_only`` hangs up at the first audio byte (then call ``drain``). ``busy_ok``: a ``server_busy``
    error frame (no stream slot came free in time) is a refusal, a Sample with ``refused_ms``, rather than an error;
    any other error frame still raises. ``play_out``: the session stays open until a player starting at the first
    audio has played it all, as a caller's would: the server holds the session's stream slot until then, so the
    sessions after it wait as long as they would for real callers."""
    async with connect(ws_url(url)) as ws:
        started = time.perf_counter()
        await ws.send(encode(Synthesize(text)))
        ttfa, size, synth_ms = None, 0, None
        arrivals: list[tuple[float, float]] = []  # (ms since the text was sent, ms of audio) per audio frame
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                ttfa = ttfa or time.perf_counter() - started
                size += len(message)
                arrivals.append((1000 * (time.perf_counter() - started), 1000 * len(message) / BYTES_PER_SECOND))
                if first_audio_only:
                    break
                continue
            frame = parse_server_frame(message)
            if isinstance(frame, Error):
                if busy_ok and frame.code == ErrorCode.SERVER_BUSY:
                    return Sample.refusal(1000 * (time.perf_counter() - started), started)
                raise RuntimeError(f"the TTS server refused the text: {frame}")
            if isinstance(frame, SynthesisComplete):
                synth_ms = frame.synth_ms
                break
        total = time.perf_counter() - started
        if play_out:
            await asyncio.sleep(max(0.0, played_out_ms(arrivals) / 1000 - (time.perf_counter() - started)))
    audio_s = 0.0 if first_audio_only else size / BYTES_PER_SECOND
    return Sample(1000 * (ttfa or total), 1000 * total, audio_s, synth_ms, underruns(arrivals)[1], started)


async def server_metrics(client: httpx.AsyncClient, url: str) -> dict[str, float]:
    """The server's queue depth, inference jobs running, its workers, WebSocket utterances completed, and per kind
    of inference job (``phonemes``, ``first_audio``, ``audio``) the jobs run (``jobs:KIND``) and the worker seconds
    they took (``seconds:KIND``), from its /metrics. And its stream slots (engine/capacity.py): how many
    (``streams_limit``, ``inf``: no slots), held (``streams_in_use``), waited for (``streams_waiting``), the
    throughput measured at warm-up that sized them (``stream_throughput``, s of audio per s); and per cap the
    requests refused with server_busy (``refused:CAP``)."""
    found = {"queue_depth": 0.0, "running": 0.0, "workers": 0.0, "utterances_completed": 0.0}
    found |= {"streams_limit": math.inf, "streams_in_use": 0.0, "streams_waiting": 0.0, "stream_throughput": 0.0}
    for (name, label_pairs), sample in (await scrape_async(client, url)).items():
        labels = dict(label_pairs)
        if name in STREAM_GAUGES:
            found[STREAM_GAUGES[name]] = sample
        elif name in ("kokoro_tts_limit", "kokoro_tts_in_use") and labels == {"cap": "streams"}:
            found["streams_limit" if name == "kokoro_tts_limit" else "streams_in_use"] = sample
        elif name == "kokoro_tts_refused_total":
            found[f"refused:{labels['cap']}"] = sample
        elif name in SCALARS:
            found[SCALARS[name]] = sample
        elif name in PER_JOB:
            found[f"{PER_JOB[name]}:{labels['job']}"] = sample
        elif name == "kokoro_tts_utterances_total" and labels == {"route": "ws", "outcome": "completed"}:
            found["utterances_completed"] = sample
    return found


STREAM_GAUGES = {"kokoro_tts_streams_waiting": "streams_waiting", "kokoro_tts_stream_throughput": "stream_throughput"}
SCALARS = {
    "kokoro_tts_queue_depth": "queue_depth",
    "kokoro_tts_inference_running": "running",
    "kokoro_tts_inference_workers": "workers",
}
PER_JOB = {"kokoro_tts_inference_jobs_total": "jobs", "kokoro_tts_inference_seconds_total": "seconds"}


async def drain(url: str, within_s: float = 60.0) -> None:
    """Returns once the server's inference workers are idle, after a client hung up mid-utterance.

    Hanging up stops an utterance, but the window already running in a worker thread runs to its end (onnxruntime
    cannot be interrupted): the next measurement starts once /metrics shows nothing queued or running, without
    waiting for the whole reply."""
    async with httpx.AsyncClient(timeout=10) as client:
        ends = time.monotonic() + within_s
        while (now := await server_metrics(client, url))["queue_depth"] or now["running"]:
            if time.monotonic() > ends:
                raise RuntimeError(f"{url} still busy after {within_s:.0f} s: {now}")
            await asyncio.sleep(0.02)


async def ws_utterances(url: str, texts: Sequence[str], fmt: str = "pcm") -> list[tuple[bytes, dict[str, Any]]]:
    """Every text as one utterance of ONE session: (its audio bytes, its synthesis_complete), in order."""
    audio = [bytearray() for _ in texts]
    done: list[dict[str, Any]] = [{} for _ in texts]
    async with connect(ws_url(url), max_size=None) as ws:
        await ws.send(encode(Config(format=fmt)))
        for i, text in enumerate(texts):
            await ws.send(encode(Synthesize(text, str(i))))
        await ws.send(encode(Close()))
        reader = UtteranceReader()
        async for message in ws:  # ends when the server closes after the last utterance
            if isinstance(message, bytes):
                audio[int(reader.audio(message).id)] += message
                continue
            frame = reader.frame(parse_server_frame(message))
            if isinstance(frame, Error):
                raise RuntimeError(f"the TTS server refused an utterance: {frame}")
            if isinstance(frame, SynthesisComplete):
                done[int(frame.id)] = json.loads(message)
    missing = [i for i, frame in enumerate(done) if not frame]
    if missing:
        raise RuntimeError(f"utterances {missing} never completed")
    return [(bytes(a), d) for a, d in zip(audio, done, strict=True)]


async def concurrent(
    url: str,
    sessions: int,
    text: str = LONG,
    *,
    busy_ok: bool = False,
    play_out: bool = False,
    within_s: float | None = None,
) -> dict[str, object]:
    """``sessions`` sessions speak ``text`` at once while a probe GETs /ping every 100 ms: the sessions served and
    refused (``busy_ok``, ``play_out``: ``ws_once``'s), the served ones' first audio and underruns, how long the
    refused ones waited to hear so, and the sessions lost: not over within ``within_s`` (None: waits on)."""
    stop = asyncio.Event()
    ping_ms: list[float] = []

    async def probe() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            while not stop.is_set():
                started = time.perf_counter()
                await client.get(f"{url}/ping")
                ping_ms.append(1000 * (time.perf_counter() - started))
                await asyncio.sleep(0.1)

    prober = asyncio.create_task(probe())
    started = time.perf_counter()
    ended = await asyncio.gather(
        *(_within(ws_once(url, text, busy_ok=busy_ok, play_out=play_out), within_s) for _ in range(sessions))
    )
    stop.set()
    await prober
    samples = [sample for sample in ended if sample is not None]
    served = [sample for sample in samples if not sample.refused]
    refused = [sample.refused_ms for sample in samples if sample.refused_ms is not None]
    return {
        "sessions": sessions,
        "served": len(served),
        "refused": len(refused),
        "lost": sessions - len(samples),
        **_served_figures(served, started),
        "refused_after_ms_max": max(refused, default=None),
        "ping_p50_ms": pct(ping_ms, 0.5),
        "ping_max_ms": max(ping_ms),
    }


async def _within(session: Awaitable[Sample], within_s: float | None) -> Sample | None:
    """``session``'s Sample, or None when it is not over within ``within_s`` (then it is cancelled)."""
    try:
        return await asyncio.wait_for(session, within_s)
    except TimeoutError:
        return None


def _served_figures(served: list[Sample], started: float) -> dict[str, float | int | None]:
    """The served sessions' first audio (p50, p95), underruns heard to the end, and real-time factor: wall time
    from ``started`` until the last one's audio had all arrived, over the audio made (below 1 keeps up). None
    where no session was served."""
    if not served:
        return dict.fromkeys(("ttfa_p50_ms", "ttfa_p95_ms", "sessions_ran_dry", "underrun_ms_max", "aggregate_rtf"))
    ttfa, silences = [s.ttfa_ms for s in served], [s.underrun_ms for s in served]
    all_arrived = max(s.sent_at + s.total_ms / 1000 for s in served)
    return {
        "ttfa_p50_ms": pct(ttfa, 0.5),
        "ttfa_p95_ms": pct(ttfa, 0.95),
        # Heard to the end: the sessions whose player ran dry after its first audio, and the longest silence in all.
        "sessions_ran_dry": sum(ran_dry(silence) for silence in silences),
        "underrun_ms_max": max(silences),
        "aggregate_rtf": (all_arrived - started) / sum(s.audio_s for s in served),
    }


# The server with windowed vocoding switched off (whole chunks): the side-by-side baseline of the same run.
WINDOWING_OFF = {"KOKORO_WINDOWED": "0"}
# The server without stream slots (engine/capacity.py): every stream starts at once, however many there are, as
# before the slots existed; past what the cores make, sessions run dry instead of waiting or being refused.
NO_STREAM_SLOTS = {"KOKORO_STREAMS": "-1"}
# The server as it was before both: no stream slots and the generator's own operators, no native kernel
# (engine/backends/kernels.py).
BEFORE_SLOTS_AND_KERNEL = {**NO_STREAM_SLOTS, "KOKORO_FUSED_SNAKE": "0"}


@contextmanager
def local_server(ready_timeout_s: float = 180, env: dict[str, str] | None = None) -> Iterator[str]:
    """The real server on a free port with this run's weights (``scripts.servers.local_server``); ``env``: settings
    for this server on top of this process's environment (``WINDOWING_OFF``, ``NO_STREAM_SLOTS``)."""
    with servers.local_server(model_dir(), ready_timeout_s, env) as url:
        yield url


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    backend = os.environ.get("KOKORO_BACKEND", "onnx")
    return f"{os.cpu_count()} cores, {platform.machine()}, {cpu_model()}, backend {backend}"


def table(rows: list[dict[str, object]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        cells = ["" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
