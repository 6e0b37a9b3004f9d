"""Resource soak of the real `serve` process on loopback (`make soak`; a short form runs in `make test`).

Phases run one after another while /ping is probed every 50 ms: connect/close churn (HTTP/1.1 and WebSocket),
sessions that queue work and vanish, bombs (compression offers, oversized messages, bodies that never end or are
abandoned), and sessions that stay and must see every accepted utterance end. Afterwards the server's fds,
threads, RSS and CPU must return to their baseline within seconds, and /ping's p99 must stay under 100 ms.

    python -m scripts.soak [--churn 3000] [--vanishing 20] [--staying 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from kokoro_client.local_ws import ws_url
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from scripts.servers import free_port, serve_command, started, wait_ready

REPO = Path(__file__).resolve().parent.parent
SENTENCE = "The quick brown fox jumps over the lazy dog, and then it runs away into the quiet forest."
TICKS = os.sysconf("SC_CLK_TCK")


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
    phases_s: dict[str, float] = field(default_factory=dict)


class Soak:
    def __init__(self, base_url: str, pid: int) -> None:
        self.base = base_url
        self.ws_url = ws_url(base_url)
        self.host, port = base_url.rsplit("//", 1)[1].split(":")
        self.port = int(port)
        self.pid = pid
        self.report = Report()
        self._pings: list[float] = []
        self._peak = Usage.of(pid)

    async def run(self, churn: int, vanishing: int, staying: int) -> Report:
        # The baseline is taken after one round of each kind of work: the G2P caches and the allocator have grown
        # to their working size by then, and growth past it would be a leak.
        await self._staying(1)
        await self._bombs(slow_bodies=2)
        await self._wait_idle()
        base = Usage.of(self.pid)
        self.report.baseline = asdict(base)
        stop = asyncio.Event()
        prober = asyncio.create_task(self._probe(stop))
        try:
            await self._phase("churn", self._churn(churn))
            await self._phase("vanishing", self._vanishing(vanishing))
            await self._phase("bombs", self._bombs())
            await self._phase("staying", self._staying(staying))
        finally:
            stop.set()
            await prober
        self.report.peak = asdict(self._peak)
        await self._settle(base)
        pings = sorted(self._pings)
        self.report.ping_count = len(pings)
        if pings:
            self.report.ping_p50_ms = round(pings[len(pings) // 2], 1)
            self.report.ping_p99_ms = round(pings[min(len(pings) - 1, int(len(pings) * 0.99))], 1)
            self.report.ping_max_ms = round(pings[-1], 1)
        return self.report

    async def _phase(self, name: str, work: Any) -> None:
        started = time.monotonic()
        await work
        self.report.phases_s[name] = round(time.monotonic() - started, 1)

    async def _probe(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=5) as client:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    ok = (await client.get(f"{self.base}/ping")).status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    self._pings.append(1000 * (time.perf_counter() - started))
                else:
                    self.report.ping_failures += 1
                usage = Usage.of(self.pid)
                pairs = zip(asdict(self._peak).values(), asdict(usage).values(), strict=True)
                self._peak = Usage(*(max(a, b) for a, b in pairs))
                await asyncio.sleep(0.05)

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
                await ws.send(json.dumps({"text": SENTENCE, "id": f"v{index}-{i}"}))
            if index % 2:
                await ws.send(json.dumps({"type": "close"}))
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
            frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert frame.get("code") == "message_too_large", frame
        slow = []
        for _ in range(slow_bodies):
            sock = socket.create_connection((self.host, self.port))
            sock.sendall(b'POST /invocations HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n{"text": ')
            slow.append(sock)
        await asyncio.sleep(0.5)
        for sock in slow[: slow_bodies // 2]:
            sock.close()  # abandoned uploads
        await asyncio.sleep(12)  # the rest must be answered 408 by the body timeout
        for sock in slow[slow_bodies // 2 :]:
            sock.settimeout(1)
            try:
                assert sock.recv(64).startswith(b"HTTP/1.1 408")
            finally:
                sock.close()

    async def _staying(self, sessions: int) -> None:
        """Sessions that stay: every accepted utterance must end in synthesis_complete, cancelled or a coded error."""

        async def one(index: int) -> Counter[str]:
            ends: Counter[str] = Counter()
            async with connect(self.ws_url) as ws:
                ids = [f"s{index}-{i}" for i in range(4)]
                for utterance_id in ids:
                    await ws.send(json.dumps({"text": SENTENCE, "id": utterance_id}))
                if index % 2:
                    await ws.send(json.dumps({"type": "cancel", "id": ids[-1]}))
                await ws.send(json.dumps({"type": "close"}))
                pending = set(ids)
                try:
                    async for message in ws:
                        if isinstance(message, str):
                            frame = json.loads(message)
                            if frame["type"] in ("synthesis_complete", "cancelled", "error") and frame.get("id"):
                                pending.discard(frame["id"])
                                ends[frame["type"] if frame["type"] != "error" else f"error:{frame['code']}"] += 1
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
            back = now.fds <= base.fds + 5 and now.threads <= base.threads + 2 and now.rss_mb <= base.rss_mb + 64
            if (back and cpu < 5) or time.monotonic() - started > within:
                self.report.after = asdict(now)
                self.report.idle_cpu_percent = round(cpu, 1)
                self.report.settled_s = round(time.monotonic() - started, 1)
                return


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
    if after["threads"] > base["threads"] + 2:
        problems.append(f"threads {base['threads']} -> {after['threads']}")
    if after["rss_mb"] > base["rss_mb"] + 64:
        problems.append(f"RSS {base['rss_mb']:.0f} -> {after['rss_mb']:.0f} MB")
    if report.idle_cpu_percent >= 5:
        problems.append(f"CPU still {report.idle_cpu_percent}% after {report.settled_s} s")
    if report.ping_p99_ms >= 100 or report.ping_failures:
        problems.append(f"/ping p99 {report.ping_p99_ms} ms, {report.ping_failures} failures")
    if report.utterances_lost:
        problems.append(f"{report.utterances_lost} accepted utterances ended without a frame")
    return problems


def soak(churn: int, vanishing: int, staying: int, model_dir: Path) -> Report:
    port = free_port()
    env = {**os.environ, "PORT": str(port), "KOKORO_MODEL_DIR": str(model_dir)}
    env.pop("HOST", None)
    base_url = f"http://127.0.0.1:{port}"
    with started(serve_command(), env, stop_timeout_s=30) as process:
        wait_ready(base_url, process)
        return asyncio.run(Soak(base_url, process.pid).run(churn, vanishing, staying))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--churn", type=int, default=3000, help="HTTP connect/close cycles (plus a tenth as WS)")
    parser.add_argument("--vanishing", type=int, default=20, help="sessions that queue 8 utterances and vanish")
    parser.add_argument("--staying", type=int, default=4, help="sessions that stay and count every utterance's end")
    parser.add_argument("--model-dir", type=Path, default=Path(os.environ.get("KOKORO_MODEL_DIR", "models/kokoro")))
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()
    report = soak(args.churn, args.vanishing, args.staying, args.model_dir)
    text = json.dumps(asdict(report), indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    problems = check(report)
    print("soak held" if not problems else "soak FAILED: " + "; ".join(problems))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
