"""Resource soak of the real `serve` process on loopback (`make soak`; a short form runs in `make test`).

Phases run one after another while /ping is probed every 50 ms: connect/close churn (HTTP/1.1 and WebSocket),
sessions that queue work and vanish, bombs (compression offers, oversized messages, bodies that never end or are
abandoned), sessions that stay and must see every accepted utterance end, and (issue 28) stuck sockets: clients
that flood a session with bad frames without reading, then reset the connection; the hard-token victim: "Hello
there." timed beside a "1-2-" * 75 request and beside an ordinary one of as many words; and hostile text
(scripts/hostile_text.py)
through every text route. Afterwards the server's fds, threads and CPU must return to their baseline within
seconds and its RSS to the high-water mark of a first round of every kind of work, /ping's p99 must stay under
100 ms (and its max under SageMaker's 250 ms during the hostile text), the sessions gauge must come back to its
baseline after the stuck sockets with new sessions still accepted, and the victim beside the hard token must take
at most twice its time beside the ordinary request.

Then (issue 41) the slow-reader attack on a server of its own with stream slots (scripts/slow_readers.py): as many
slow readers as slots, WebSocket then HTTP, while honest sessions must hear their first audio within the documented
wait in 9 of 10 tries, every slow reader is told, and the server's log holds no ERROR line.

    python -m scripts.soak [--churn 3000] [--vanishing 20] [--staying 4] [--stuck 8] [--hostile 120]
                           [--slow-readers 2] [--slow-probes 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing import synchronize
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from kokoro_client import deepgram, protocol
from kokoro_client.deepgram import SPEAK_PATH
from kokoro_client.local_ws import ws_url
from kokoro_client.protocol import (
    PING_PATH,
    WS_PATH,
    Cancel,
    Cancelled,
    Close,
    Error,
    SynthesisComplete,
    Synthesize,
)
from kokoro_tts.audio.encoding import ENCODING_THREADS
from kokoro_tts.engine.capacity import UNLIMITED
from kokoro_tts.engine.synthesis import TEXT_THREADS
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from scripts import hostile_text, slow_readers
from scripts.hostile_text import ROUTES, Flight, speak_all
from scripts.scrape import scrape, value
from scripts.servers import free_port, serve_command, started, wait_ready
from scripts.stuck_sockets import flood_and_vanish

REPO = Path(__file__).resolve().parent.parent
SENTENCE = "The quick brown fox jumps over the lazy dog, and then it runs away into the quiet forest."
TICKS = os.sysconf("SC_CLK_TCK")
HARD_TOKEN = "1-2-" * 75  # issue 28: 300 characters whose G2P held the one G2P lock for ~8 s
ORDINARY = "one two " * 75  # as many spoken words, in ordinary text
VICTIM = "Hello there."
# The victim beside the hard token over the victim beside the ordinary text: a stall behind the token's G2P shows as
# 10x and more. Not over its time alone: beside any stream the victim shares the cores, 2-3x its time alone.
VICTIM_RATIO_LIMIT = 2.0
VICTIM_TRIALS = 3
# A body left unfinished is answered 408 once the server's KOKORO_BODY_TIMEOUT_S has passed: well within this.
BODY_ANSWER_WITHIN_S = 60.0
PING_LIMIT_MS = 250.0  # SageMaker's health check: an instance whose /ping misses it is replaced
HOSTILE_SEED = 28


@dataclass
class Usage:
    fds: int
    threads: int
    rss_mb: float
    cpu_s: float

    @classmethod
    def of(cls, pid: int) -> Usage:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return cls(
            fds=len(os.listdir(f"/proc/{pid}/fd")),
            threads=int(status["Threads"]),
            rss_mb=int(status["VmRSS"].split()[0]) / 1024,
            cpu_s=(int(stat[11]) + int(stat[12])) / TICKS,
        )


@dataclass
class Report:
    baseline: dict[str, float] = field(default_factory=dict)
    peak: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)
    settled_s: float = 0.0
    idle_cpu_percent: float = 0.0
    ping_count: int = 0
    ping_p50_ms: float = 0.0
    ping_p99_ms: float = 0.0
    ping_max_ms: float = 0.0
    ping_failures: int = 0
    churn_cycles: int = 0
    churn_per_s: float = 0.0
    vanished_sessions: int = 0
    utterances_sent: int = 0
    utterance_ends: dict[str, int] = field(default_factory=dict)
    utterances_lost: int = 0
    # stuck sockets: each client's end ("send blocked", ...), the sessions gauge before and after, and whether a
    # new session on each path was still spoken to
    stuck_clients: list[dict[str, Any]] = field(default_factory=list)
    stuck_sessions_in_use: dict[str, float] = field(default_factory=dict)
    stuck_settled_s: float | None = None
    stuck_new_sessions: dict[str, str] = field(default_factory=dict)
    # the hard-token victim: seconds of "Hello there." alone, beside "one two " * 75 and beside "1-2-" * 75 (medians
    # of 3, taken in turns), and the ratio of the last two
    victim_alone_s: float = 0.0
    victim_beside_ordinary_s: float = 0.0
    victim_beside_s: float = 0.0
    victim_ratio: float = 0.0
    hard_token_answer: str = ""
    # hostile text: counts, and the answers that failed (route, input shortened, why)
    hostile: dict[str, Any] = field(default_factory=dict)
    hostile_failures: list[str] = field(default_factory=list)
    phases_s: dict[str, float] = field(default_factory=dict)
    phase_ping_max_ms: dict[str, float] = field(default_factory=dict)
    # The slow-reader attack (scripts/slow_readers.py), on a server of its own with stream slots.
    slow_readers: dict[str, Any] = field(default_factory=dict)
    phase_rss_mb: dict[str, float] = field(default_factory=dict)  # the server's RSS as each phase ended
    warm_up_rss_mb: float = 0.0  # the RSS high-water mark of the round before the baseline

    @property
    def rss_ceiling_mb(self) -> float:
        """The RSS past which growth is a leak: the first round's high-water mark (or the baseline) + a margin."""
        return max(self.baseline.get("rss_mb", 0.0), self.warm_up_rss_mb) + RSS_GROWTH_MB


def _ping_every_50_ms(base_url: str, stop: synchronize.Event, results: Connection) -> None:
    """In a process of its own: GET /ping until ``stop``, sending (sent at, monotonic s; latency ms or None)."""
    with httpx.Client(timeout=5, trust_env=False) as client:
        while not stop.is_set():
            sent, started = time.monotonic(), time.perf_counter()
            try:
                ok = client.get(f"{base_url}{PING_PATH}").status_code == 200
            except httpx.HTTPError:
                ok = False
            results.send((sent, 1000 * (time.perf_counter() - started) if ok else None))
            stop.wait(0.05)


class Prober:
    """GET /ping every 50 ms from a process of its own, and the server's peak usage from a thread. The soak's own
    process would add its stalls to the server's latency: its event loop is busy with the phases' clients, and in
    `make test` it is pytest's, where a thread of its own still saw 500 ms that the server never spent."""

    def __init__(self, base_url: str, pid: int) -> None:
        self.pid = pid
        self.pings: list[tuple[float, float]] = []  # (sent at, monotonic s; latency ms)
        self.failures = 0
        self._peak = Usage.of(pid)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        context = multiprocessing.get_context("spawn")
        self._stop_pinging = context.Event()
        self._results, self._sender = context.Pipe(duplex=False)
        self._pinger = context.Process(
            target=_ping_every_50_ms, args=(base_url, self._stop_pinging, self._sender), name="ping-prober", daemon=True
        )
        self._thread = threading.Thread(target=self._run, name="ping-collector", daemon=True)

    def start(self) -> None:
        self._pinger.start()
        self._sender.close()  # the pinger's copy is the one end left: its exit reads as EOF here
        self._thread.start()

    def stop(self) -> None:
        self._stop_pinging.set()
        self._pinger.join(timeout=10)
        self._stop.set()
        self._thread.join()
        self._collect()

    def reset_peak(self, to: Usage) -> Usage:
        """The peak so far; the next one is counted from ``to``."""
        with self._lock:
            peak, self._peak = self._peak, to
        return peak

    def _collect(self) -> None:
        while not self._results.closed and self._results.poll():
            try:
                sent, latency = self._results.recv()
            except EOFError:  # the pinger has ended
                self._results.close()
                return
            if latency is None:
                self.failures += 1
            else:
                self.pings.append((sent, latency))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._collect()
            usage = Usage.of(self.pid)
            with self._lock:
                pairs = zip(asdict(self._peak).values(), asdict(usage).values(), strict=True)
                self._peak = Usage(*(max(a, b) for a, b in pairs))
            self._stop.wait(0.05)


class Soak:
    def __init__(self, base_url: str, pid: int) -> None:
        self.base = base_url
        self.ws_url = ws_url(base_url)
        self.host, port = base_url.rsplit("//", 1)[1].split(":")
        self.port = int(port)
        self.pid = pid
        self.report = Report()
        self._prober = Prober(base_url, pid)

    async def run(
        self, churn: int, vanishing: int, staying: int, stuck: int = 8, hostile: int = 120, hard_token: bool = True
    ) -> Report:
        # The baseline is taken after one round of each kind of work: the G2P caches and the allocator have grown
        # to their working size by then, and growth past it would be a leak. The hostile text is that round's
        # largest (eight texts at the cap at once): measured, it took RSS 60-130 MB past the rest's, which the
        # allocator handed back minutes later, and identical rounds swung it as far with no trend. So the RSS
        # ceiling is the round's high-water mark, not where it happened to stand at its end.
        self._prober.start()
        try:
            await self._staying(1)
            await self._bombs(slow_bodies=2)
            warm_up_failures: list[str] = []
            if hostile:
                await self._hostile(hostile)
                warm_up_failures = [f"(first round) {failure}" for failure in self.report.hostile_failures]
            await self._wait_idle()
            base = Usage.of(self.pid)
            self.report.baseline = asdict(base)
            self.report.warm_up_rss_mb = round(max(base.rss_mb, self._prober.reset_peak(base).rss_mb), 1)
            await self._phase("churn", self._churn(churn))
            await self._phase("vanishing", self._vanishing(vanishing))
            await self._phase("bombs", self._bombs())
            await self._phase("staying", self._staying(staying))
            if stuck:
                await self._phase("stuck", self._stuck(stuck))
            if hard_token:
                await self._phase("hard_token", self._hard_token())
            if hostile:
                await self._phase("hostile", self._hostile(hostile))
                self.report.hostile_failures[:0] = warm_up_failures
        finally:
            await asyncio.to_thread(self._prober.stop)
        self.report.peak = asdict(self._prober.reset_peak(base))
        self.report.ping_failures = self._prober.failures
        await self._settle(base)
        pings = sorted(latency for _, latency in self._prober.pings)
        self.report.ping_count = len(pings)
        if pings:
            self.report.ping_p50_ms = round(pings[len(pings) // 2], 1)
            self.report.ping_p99_ms = round(pings[min(len(pings) - 1, int(len(pings) * 0.99))], 1)
            self.report.ping_max_ms = round(pings[-1], 1)
        return self.report

    async def _phase(self, name: str, work: Any) -> None:
        started = time.monotonic()
        await work
        ended = time.monotonic()
        self.report.phases_s[name] = round(ended - started, 1)
        latencies = [latency for sent, latency in list(self._prober.pings) if started <= sent <= ended]
        self.report.phase_ping_max_ms[name] = round(max(latencies, default=0.0), 1)
        self.report.phase_rss_mb[name] = round(Usage.of(self.pid).rss_mb, 1)

    # --- phases ------------------------------------------------------------------------------------------------

    async def _churn(self, cycles: int) -> None:
        """HTTP/1.1 connect, GET /ping, close; every tenth a WebSocket open and close."""
        started = time.monotonic()

        def http_cycles(n: int) -> None:
            for _ in range(n):
                with socket.create_connection((self.host, self.port)) as sock:
                    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: soak\r\n\r\n")
                    sock.recv(4096)

        workers = 4
        http = [asyncio.to_thread(http_cycles, cycles // workers) for _ in range(workers)]
        ws = [self._open_close() for _ in range(cycles // 10)]
        await asyncio.gather(*http, _limited(ws, 8))
        elapsed = time.monotonic() - started
        self.report.churn_cycles = cycles + cycles // 10
        self.report.churn_per_s = round(self.report.churn_cycles / elapsed, 1)

    async def _open_close(self) -> None:
        async with connect(self.ws_url):
            pass

    async def _vanishing(self, sessions: int) -> None:
        """Sessions that queue work, close, and vanish without a closing handshake."""

        async def one(index: int) -> None:
            ws = await connect(self.ws_url)
            for i in range(8):
                await ws.send(protocol.encode(Synthesize(SENTENCE, f"v{index}-{i}")))
            if index % 2:
                await ws.send(protocol.encode(Close()))
            await asyncio.sleep(0.2)
            ws.transport.abort()

        await asyncio.gather(*(one(i) for i in range(sessions)))
        self.report.vanished_sessions = sessions
        await self._wait_idle()

    async def _bombs(self, slow_bodies: int = 20) -> None:
        """A compression offer (declined), a 5 MB message, bodies that never end, and an abandoned upload."""
        async with connect(self.ws_url, compression="deflate", max_size=None) as ws:
            assert not ws.protocol.extensions, "permessage-deflate must be declined"
            await ws.send("x" * (5 * 1024 * 1024))
            frame = protocol.parse_server_frame(await asyncio.wait_for(ws.recv(), 30))
            assert isinstance(frame, Error) and frame.code == "message_too_large", frame
        slow = []
        for _ in range(slow_bodies):
            sock = socket.create_connection((self.host, self.port))
            sock.sendall(b'POST /invocations HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n{"text": ')
            slow.append(sock)
        await asyncio.sleep(0.5)
        for sock in slow[: slow_bodies // 2]:
            sock.close()  # abandoned uploads
        for sock in slow[slow_bodies // 2 :]:  # the rest must be answered 408 by the body timeout
            try:
                answer = await asyncio.to_thread(_first_bytes, sock, BODY_ANSWER_WITHIN_S)
                assert answer.startswith(b"HTTP/1.1 408"), answer
            finally:
                sock.close()

    async def _staying(self, sessions: int) -> None:
        """Sessions that stay: every accepted utterance must end in synthesis_complete, cancelled or a coded error."""

        async def one(index: int) -> Counter[str]:
            ends: Counter[str] = Counter()
            async with connect(self.ws_url) as ws:
                ids = [f"s{index}-{i}" for i in range(4)]
                for utterance_id in ids:
                    await ws.send(protocol.encode(Synthesize(SENTENCE, utterance_id)))
                if index % 2:
                    await ws.send(protocol.encode(Cancel(ids[-1])))
                await ws.send(protocol.encode(Close()))
                pending = set(ids)
                try:
                    async for message in ws:
                        if isinstance(message, str):
                            frame = protocol.parse_server_frame(message)
                            if isinstance(frame, SynthesisComplete | Cancelled | Error) and frame.id:
                                pending.discard(frame.id)
                                ends[_end_name(frame)] += 1
                except ConnectionClosed:
                    pass
                ends["lost"] += len(pending)
            return ends

        totals: Counter[str] = Counter()
        for ends in await asyncio.gather(*(one(i) for i in range(sessions))):
            totals.update(ends)
        self.report.utterances_sent = 4 * sessions
        self.report.utterances_lost = totals.pop("lost", 0)
        self.report.utterance_ends = dict(totals)

    async def _stuck(self, clients: int) -> None:
        """Clients on both session paths flood bad frames without reading until their send blocks, then reset the
        connection (issue 28: each left a session slot taken for good). The sessions gauge must come back to its
        baseline, and a new session on each path must still be spoken to."""
        before = self._sessions_in_use()
        paths = [WS_PATH if index % 2 == 0 else f"{SPEAK_PATH}?encoding=linear16" for index in range(clients)]
        ends = await asyncio.gather(
            *(asyncio.to_thread(flood_and_vanish, self.host, self.port, path) for path in paths)
        )
        self.report.stuck_clients = [asdict(end) for end in ends]
        started = time.monotonic()
        after = self._sessions_in_use()
        while after > before and time.monotonic() - started < 15:
            await asyncio.sleep(0.25)
            after = self._sessions_in_use()
        if after <= before:
            self.report.stuck_settled_s = round(time.monotonic() - started, 1)
        self.report.stuck_sessions_in_use = {"before": before, "after": after}
        self.report.stuck_new_sessions = {"bidi": await self._bidi_spoken(), "deepgram": await self._deepgram_spoken()}

    def _sessions_in_use(self) -> float:
        found = scrape(self.base)
        if ("kokoro_tts_in_use", (("cap", "sessions"),)) not in found:
            raise RuntimeError('/metrics has no kokoro_tts_in_use{cap="sessions"}')
        return value(found, "kokoro_tts_in_use", cap="sessions")

    async def _bidi_spoken(self) -> str:
        """ "spoken" if a new session speaks "Hello.", else what it answered."""

        def verdict(message: str | bytes) -> str | None:
            frame = protocol.parse_server_frame(message) if isinstance(message, str) else None
            if isinstance(frame, SynthesisComplete):
                return "spoken"
            return f"error {frame.code}" if isinstance(frame, Error) else None

        return await _answer(self.ws_url, [protocol.encode(Synthesize("Hello.", "after-stuck"))], verdict)

    async def _deepgram_spoken(self) -> str:
        audio = 0

        def verdict(message: str | bytes) -> str | None:
            nonlocal audio
            if isinstance(message, bytes):
                audio += len(message)
            elif isinstance(deepgram.parse_server_message(message), deepgram.Flushed):
                return "spoken" if audio else "Flushed without audio"
            return None

        said = [deepgram.encode(deepgram.Speak("Hello.")), deepgram.encode(deepgram.Flush())]
        return await _answer(ws_url(self.base).replace(WS_PATH, SPEAK_PATH), said, verdict)

    async def _hard_token(self) -> None:
        """ "Hello there." alone, then 0.3 s after a "1-2-" * 75 request started (issue 28: its G2P held the one G2P
        lock for ~8 s, and every English request waited behind it), and after an ordinary one of as many words."""
        await self._wait_idle()
        alone = statistics.median([await self._victim() for _ in range(VICTIM_TRIALS)])
        ordinary, hard = [], []
        for _ in range(VICTIM_TRIALS):
            ordinary.append(await self._victim_beside(ORDINARY))
            hard.append(await self._victim_beside(HARD_TOKEN))
        self.report.hard_token_answer = await self._speak(HARD_TOKEN)
        self.report.victim_alone_s = round(alone, 3)
        self.report.victim_beside_ordinary_s = round(statistics.median(ordinary), 3)
        self.report.victim_beside_s = round(statistics.median(hard), 3)
        self.report.victim_ratio = round(statistics.median(hard) / statistics.median(ordinary), 2)
        await self._wait_idle()

    async def _victim_beside(self, text: str) -> float:
        """The victim's seconds 0.3 s after a request for ``text`` started; that request is then abandoned."""
        await self._wait_idle()
        other = asyncio.create_task(self._speak(text))
        await asyncio.sleep(0.3)
        try:
            return await self._victim()
        finally:
            other.cancel()
            await asyncio.gather(other, return_exceptions=True)

    async def _speak(self, text: str) -> str:
        """``text`` on /v1/audio/speech, read to its end: what came back."""
        body = {"input": text, "voice": "af_heart", "response_format": "pcm"}
        async with httpx.AsyncClient(timeout=600) as client:
            response = await client.post(f"{self.base}/v1/audio/speech", json=body)
        if response.status_code == 200:
            return f"200, {len(response.content) / 48000:.1f} s of audio"
        return f"{response.status_code} {response.json().get('error', {}).get('code')}"

    async def _victim(self) -> float:
        """Seconds for the whole of "Hello there." on /v1/audio/speech, on a connection of its own."""
        started = time.perf_counter()
        answer = await self._speak(VICTIM)
        if not answer.startswith("200"):
            raise RuntimeError(f"the victim was answered {answer}")
        return time.perf_counter() - started

    async def _hostile(self, count: int) -> None:
        """Hostile text through every route (scripts/hostile_text.py), one at a time: the issue's reproductions and
        the adversarial strings on several routes each, digits of every script against "1" * 120, ``count`` seeded
        random strings; then eight of the issue's loop stalls at once."""
        await self._wait_idle()
        bounds = await hostile_text.calibrate(self.base)
        routes = list(ROUTES)
        full = count >= 60  # `make soak`: every script's digits, each adversarial string on three routes
        scripts = len(hostile_text.unicode_digits()) if full else 0  # else the five always spoken
        digits = hostile_text.digit_cases(random.Random(HOSTILE_SEED), scripts=scripts)
        twins = [(route, hostile_text.ASCII_TWIN) for route in routes]
        jobs = (
            hostile_text.rotate(hostile_text.issue_cases(), routes, len(routes))
            + hostile_text.rotate(hostile_text.fixed_cases(), routes, 3 if full else 1)
            + twins
            + hostile_text.rotate(digits, routes, 1)
            + hostile_text.rotate(hostile_text.random_cases(HOSTILE_SEED, count), routes, 1)
        )
        flights: list[Flight] = []
        outcomes = await speak_all(self.base, jobs, bounds, flights)
        burst = hostile_text.Bounds(bounds.first_base_s * 8, bounds.first_per_char_s * 8, bounds.rtf * 8)
        burst_jobs = hostile_text.rotate(hostile_text.burst_cases() * 4, routes, 1)
        outcomes += await speak_all(self.base, burst_jobs, burst, flights, concurrency=8, retry_busy_s=0.0)
        failures = [o.line() for o in outcomes if o.problem]
        twins_refused = all(o.refused for o in outcomes if o.case == hostile_text.ASCII_TWIN)
        digit_names = {case.name for case in digits}
        failures += [
            f"{o.line()}: spoken where {hostile_text.ASCII_TWIN.name} is refused"
            for o in outcomes
            if twins_refused and o.case.name in digit_names and not o.refused
        ]
        self.report.hostile = {**hostile_text.summary(outcomes), "seed": HOSTILE_SEED, "bounds": asdict(bounds)}
        self.report.hostile_failures = failures
        await self._wait_idle()

    # --- settling ----------------------------------------------------------------------------------------------

    async def _wait_idle(self, within: float = 120) -> None:
        """Until the server's CPU is idle (under 10% of one core over 0.5 s)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            before = Usage.of(self.pid).cpu_s
            await asyncio.sleep(0.5)
            if (Usage.of(self.pid).cpu_s - before) / 0.5 < 0.10:
                return
        raise TimeoutError(f"the server stayed busy for {within} s")

    async def _settle(self, base: Usage, within: float = 15) -> None:
        started = time.monotonic()
        while True:
            before = Usage.of(self.pid)
            await asyncio.sleep(1)
            now = Usage.of(self.pid)
            cpu = 100 * (now.cpu_s - before.cpu_s)
            threads_back = now.threads <= base.threads + 2 + POOL_THREADS
            rss_back = now.rss_mb <= self.report.rss_ceiling_mb
            back = now.fds <= base.fds + 5 and threads_back and rss_back
            if (back and cpu < 5) or time.monotonic() - started > within:
                self.report.after = asdict(now)
                self.report.idle_cpu_percent = round(cpu, 1)
                self.report.settled_s = round(time.monotonic() - started, 1)
                return


RSS_GROWTH_MB = 64  # past the first round's high-water mark: a leak

# Threads the server starts on demand and keeps, each pool bounded: not a leak, so not counted against the soak.
POOL_THREADS = ENCODING_THREADS + TEXT_THREADS


async def _limited(coroutines: list[Any], limit: int) -> None:
    gate = asyncio.Semaphore(limit)

    async def run(coroutine: Any) -> None:
        async with gate:
            await coroutine

    await asyncio.gather(*(run(c) for c in coroutines))


def check(report: Report) -> list[str]:
    """What failed, as sentences; empty when the soak held."""
    base, after = report.baseline, report.after
    problems = []
    if after["fds"] > base["fds"] + 5:
        problems.append(f"fds {base['fds']} -> {after['fds']}")
    if after["threads"] > base["threads"] + 2 + POOL_THREADS:
        problems.append(f"threads {base['threads']} -> {after['threads']}")
    if after["rss_mb"] > report.rss_ceiling_mb:
        problems.append(
            f"RSS {base['rss_mb']:.0f} -> {after['rss_mb']:.0f} MB (the first round's high-water mark: "
            f"{report.warm_up_rss_mb:.0f} MB)"
        )
    if report.idle_cpu_percent >= 5:
        problems.append(f"CPU still {report.idle_cpu_percent}% after {report.settled_s} s")
    if report.ping_p99_ms >= 100 or report.ping_failures:
        problems.append(f"/ping p99 {report.ping_p99_ms} ms, {report.ping_failures} failures")
    if report.utterances_lost:
        problems.append(f"{report.utterances_lost} accepted utterances ended without a frame")
    in_use = report.stuck_sessions_in_use
    if in_use and in_use["after"] > in_use["before"]:
        problems.append(f"stuck sockets left sessions in use: {in_use['before']:g} -> {in_use['after']:g}")
    refused = {path: answer for path, answer in report.stuck_new_sessions.items() if answer != "spoken"}
    if refused:
        problems.append(f"new sessions after the stuck sockets: {refused}")
    if report.victim_ratio > VICTIM_RATIO_LIMIT:
        problems.append(
            f"{VICTIM!r} took {report.victim_beside_s} s beside a hard token, {report.victim_ratio}x its "
            f"{report.victim_beside_ordinary_s} s beside ordinary text (limit {VICTIM_RATIO_LIMIT:g}x)"
        )
    if report.hostile_failures:
        shown = "; ".join(report.hostile_failures[:5])
        problems.append(f"{len(report.hostile_failures)} hostile-text answers failed: {shown}")
    if report.phase_ping_max_ms.get("hostile", 0.0) >= PING_LIMIT_MS:
        problems.append(f"/ping max {report.phase_ping_max_ms['hostile']} ms during the hostile text")
    problems += report.slow_readers.get("problems", [])
    return problems


def _end_name(frame: SynthesisComplete | Cancelled | Error) -> str:
    """How an utterance ended, as the report counts it."""
    if isinstance(frame, Error):
        return f"error:{frame.code}"
    return "synthesis_complete" if isinstance(frame, SynthesisComplete) else "cancelled"


def soak(
    churn: int,
    vanishing: int,
    staying: int,
    model_dir: Path,
    stuck: int = 8,
    hostile: int = 120,
    hard_token: bool = True,
) -> Report:
    port = free_port()
    # No stream slots: the soak counts what the server does with every session at once (leaks, stuck sockets,
    # /ping), not how many this machine plays without a gap (the bench's load section measures that).
    env = {**os.environ, "PORT": str(port), "KOKORO_MODEL_DIR": str(model_dir), "KOKORO_STREAMS": str(UNLIMITED)}
    env.pop("HOST", None)
    base_url = f"http://127.0.0.1:{port}"
    with started(serve_command(), env, stop_timeout_s=30) as process:
        wait_ready(base_url, process, timeout_s=600)  # a loaded machine may take minutes to load and warm up
        return asyncio.run(Soak(base_url, process.pid).run(churn, vanishing, staying, stuck, hostile, hard_token))


def _first_bytes(sock: socket.socket, within_s: float) -> bytes:
    """What the server sends first on ``sock`` (b"" if it closes, or nothing comes within ``within_s``)."""
    sock.settimeout(within_s)
    try:
        return sock.recv(64)
    except TimeoutError:
        return b""


async def _answer(url: str, messages: list[str], verdict: Callable[[str | bytes], str | None]) -> str:
    """Sends ``messages`` on a new socket and reads until ``verdict`` says what the answer was (60 s at most)."""
    try:
        async with asyncio.timeout(60), connect(url) as ws:
            for sent in messages:
                await ws.send(sent)
            async for message in ws:
                if (said := verdict(message)) is not None:
                    return said
    except ConnectionClosed as closed:
        return f"closed {closed.rcvd.code if closed.rcvd else None}: {closed.rcvd.reason if closed.rcvd else ''}"
    except TimeoutError:
        return "no answer within 60 s"
    return "closed without an answer"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--churn", type=int, default=3000, help="HTTP connect/close cycles (plus a tenth as WS)")
    parser.add_argument("--vanishing", type=int, default=20, help="sessions that queue 8 utterances and vanish")
    parser.add_argument("--staying", type=int, default=4, help="sessions that stay and count every utterance's end")
    parser.add_argument("--stuck", type=int, default=8, help="clients that flood a session unread, then reset")
    parser.add_argument("--hostile", type=int, default=120, help="seeded random hostile strings (0: no hostile phase)")
    parser.add_argument("--slow-readers", type=int, default=2, help="stream slots, and slow readers (0: none)")
    parser.add_argument("--slow-probes", type=int, default=10, help="honest sessions beside the slow readers")
    parser.add_argument("--model-dir", type=Path, default=Path(os.environ.get("KOKORO_MODEL_DIR", "models/kokoro")))
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()
    report = soak(args.churn, args.vanishing, args.staying, args.model_dir, args.stuck, args.hostile)
    if args.slow_readers:
        log = REPO / "out" / "soak-slow-readers-server.log"
        log.parent.mkdir(exist_ok=True)
        attack = slow_readers.run(args.model_dir, args.slow_readers, args.slow_probes, log)
        report.slow_readers = slow_readers.report_dict(attack)
    text = json.dumps(asdict(report), indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    problems = check(report)
    print("soak held" if not problems else "soak FAILED: " + "; ".join(problems))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
