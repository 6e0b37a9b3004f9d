"""Benchmark the TTS server alone: time to first audio byte (TTFA) and real-time factor (RTF).

Measures, on this machine, side by side in one run: short and long text over POST /invocations and over the
WebSocket session; then 1, 4 and 16 concurrent sessions (p50/p95 TTFA, aggregate RTF, /ping latency meanwhile).
Absolute times depend on the machine; compare ratios within one run.

    .venv/bin/python scripts/bench_tts.py            # starts its own server on a free port
    .venv/bin/python scripts/bench_tts.py --url http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

REPO = Path(__file__).resolve().parent.parent
SHORT = "Sure, I can help with that."
LONG = (
    "Thanks for reaching out about your order. I checked our system and it shipped this morning from our "
    "warehouse in Ohio. You should receive it by Thursday afternoon, and a tracking link is on its way to your "
    "email. Is there anything else I can help you with today, Sam?"
)
BYTES_PER_SECOND = 24_000 * 2


@dataclass
class Sample:
    ttfa_ms: float
    total_ms: float
    audio_s: float

    @property
    def rtf(self) -> float:
        return (self.total_ms / 1000) / self.audio_s if self.audio_s else float("nan")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def post_once(client: httpx.AsyncClient, url: str, text: str) -> Sample:
    started = time.perf_counter()
    ttfa, size = None, 0
    async with client.stream("POST", f"{url}/invocations", json={"text": text}) as response:
        response.raise_for_status()
        async for part in response.aiter_raw():
            if ttfa is None and part:
                ttfa = time.perf_counter() - started
            size += len(part)
    total = time.perf_counter() - started
    return Sample(1000 * (ttfa or total), 1000 * total, size / BYTES_PER_SECOND)


async def ws_once(url: str, text: str) -> Sample:
    ws_url = url.replace("http", "ws", 1) + "/invocations-bidirectional-stream"
    async with connect(ws_url) as ws:
        started = time.perf_counter()
        await ws.send(json.dumps({"text": text}))
        ttfa, size = None, 0
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                ttfa = ttfa or time.perf_counter() - started
                size += len(message)
            elif json.loads(message)["type"] in ("synthesis_complete", "error"):
                break
        total = time.perf_counter() - started
    return Sample(1000 * (ttfa or total), 1000 * total, size / BYTES_PER_SECOND)


async def single(url: str, trials: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    async with httpx.AsyncClient(http1=False, http2=True, timeout=300) as client:
        for label, text in (("short", SHORT), ("long", LONG)):
            for transport in ("POST (h2c)", "WS session"):
                samples = []
                for _ in range(trials):
                    sample = await (post_once(client, url, text) if transport.startswith("POST") else ws_once(url, text))
                    samples.append(sample)
                rows.append(
                    {
                        "text": f"{label} ({len(text)} chars)",
                        "transport": transport,
                        "ttfa_p50_ms": statistics.median(s.ttfa_ms for s in samples),
                        "ttfa_mean_ms": statistics.fmean(s.ttfa_ms for s in samples),
                        "rtf": statistics.median(s.rtf for s in samples),
                        "audio_s": samples[0].audio_s,
                    }
                )
    return rows


async def concurrent(url: str, sessions: int) -> dict[str, object]:
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
    samples = await asyncio.gather(*(ws_once(url, LONG) for _ in range(sessions)))
    wall = time.perf_counter() - started
    stop.set()
    await prober
    ttfa = [s.ttfa_ms for s in samples]
    return {
        "sessions": sessions,
        "ttfa_p50_ms": pct(ttfa, 0.5),
        "ttfa_p95_ms": pct(ttfa, 0.95),
        "aggregate_rtf": wall / sum(s.audio_s for s in samples),
        "ping_p50_ms": pct(ping_ms, 0.5),
        "ping_max_ms": max(ping_ms),
    }


@contextmanager
def local_server() -> Iterator[str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "KOKORO_MODEL_DIR": os.environ.get("KOKORO_MODEL_DIR", str(REPO / "models" / "kokoro"))}
    serve = Path(sys.executable).parent / "serve"
    process = subprocess.Popen(
        [str(serve), "--host", "127.0.0.1", "--port", str(port)], env=env, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/ping", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit("the TTS server did not become ready")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def machine() -> str:
    backend = os.environ.get("KOKORO_BACKEND", "onnx")
    return f"{os.cpu_count()} cores, {platform.machine()}, {platform.processor() or platform.system()}, backend {backend}"


def table(rows: list[dict[str, object]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def run(url: str, trials: int, levels: list[int]) -> dict[str, object]:
    await ws_once(url, SHORT)  # warm the connection path
    single_rows = await single(url, trials)
    load_rows = [await concurrent(url, n) for n in levels]
    return {"machine": machine(), "single": single_rows, "concurrent": load_rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server; default: start one")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--sessions", default="1,4,16", help="concurrency levels")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    levels = [int(n) for n in args.sessions.split(",")]
    if args.url:
        results = asyncio.run(run(args.url, args.trials, levels))
    else:
        with local_server() as url:
            results = asyncio.run(run(url, args.trials, levels))
    print(f"Machine: {results['machine']}\n")
    print(table(results["single"]))  # type: ignore[arg-type]
    print()
    print(table(results["concurrent"]))  # type: ignore[arg-type]
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
