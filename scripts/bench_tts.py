"""Benchmark the TTS server alone: time to first audio byte (TTFA) and real-time factor (RTF).

Measures, on this machine, side by side in one run: short and long text over POST /invocations and over the
WebSocket session; then 1, 4 and 16 concurrent sessions (p50/p95 TTFA, aggregate RTF, /ping latency meanwhile).
Absolute times depend on the machine; compare ratios within one run. The clients live in scripts/bench/client.py,
shared with the full benchmark (`python -m scripts.bench`).

    .venv/bin/python scripts/bench_tts.py            # starts its own server on a free port
    .venv/bin/python scripts/bench_tts.py --url http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

# Run as a script, this file's folder is on sys.path, not the repository: make `scripts.bench` importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from scripts.bench.client import (
    LONG,
    SHORT,
    Sample,
    concurrent,
    local_server,
    machine,
    post_once,
    table,
    ws_once,
)


async def single(url: str, trials: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    async with httpx.AsyncClient(http1=False, http2=True, timeout=300) as client:
        for label, text in (("short", SHORT), ("long", LONG)):
            for transport in ("POST (h2c)", "WS session"):
                samples: list[Sample] = []
                for _ in range(trials):
                    post = transport.startswith("POST")
                    samples.append(await (post_once(client, url, text) if post else ws_once(url, text)))
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
