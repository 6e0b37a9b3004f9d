"""load: N sessions speak a multi-sentence reply at once, N = 1, 2, 4, 8, 16.

Per level: p50/p95 time to first audio across the sessions, the aggregate real-time factor (wall time over the
sum of the audio produced: below 1 means the machine keeps up with N listeners), /ping latency meanwhile (the
event loop must stay free while the workers synthesize), and how many sessions' players ran dry after their first
audio, heard to the end (a quick first audio and then a gap is not what a caller wants either). With a
windowing-off server in the run (KOKORO_WINDOWED=0), every level runs on it too, level by level, and the headline
compares the first-audio spread: p95 at the most sessions over the single session's p50 (each session's first
window ahead of others' later ones).

The server's own view comes from its GET /metrics, sampled every 100 ms while a level runs: the scheduler's queue
depth (max and p95 of the samples) and how many utterances its counters say it completed (one per session).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import httpx

from .client import concurrent, pct, server_metrics
from .report import Row, Section
from .texts import LOAD_REPLY

SAMPLE_EVERY_S = 0.1


async def with_server_metrics(url: str, work: Awaitable[dict[str, object]]) -> dict[str, object]:
    """``work``'s row, plus the server's queue depth (max, p95) sampled from /metrics meanwhile, and the
    utterances its counters completed."""
    task = asyncio.ensure_future(work)
    depths: list[float] = []
    async with httpx.AsyncClient(timeout=10) as client:
        before = await server_metrics(client, url)
        while not task.done():
            depths.append((await server_metrics(client, url))["queue_depth"])
            await asyncio.wait({task}, timeout=SAMPLE_EVERY_S)
        row = await task
        after = await server_metrics(client, url)
    return {
        **row,
        "queue_depth_max": max(depths, default=0.0),
        "queue_depth_p95": pct(depths, 0.95) if depths else 0.0,
        "server_utterances": after["utterances_completed"] - before["utterances_completed"],
    }


async def run_load(url: str, levels: list[int], whole_url: str | None = None) -> Section:
    rows: list[Row] = []
    off_rows: list[Row] = []
    for sessions in levels:
        rows.append({"windowing": "on", **await with_server_metrics(url, concurrent(url, sessions, LOAD_REPLY))})
        if whole_url is not None:
            off = await with_server_metrics(whole_url, concurrent(whole_url, sessions, LOAD_REPLY))
            off_rows.append({"windowing": "off", **off})
    first, last = rows[0], rows[-1]
    headline = (
        f"time to first audio p50 {first['ttfa_p50_ms']:.0f} ms with {first['sessions']} session(s), "
        f"{last['ttfa_p50_ms']:.0f} ms (p95 {last['ttfa_p95_ms']:.0f} ms) with {last['sessions']}; real-time factor "
        f"{last['aggregate_rtf']:.2f} at {last['sessions']} sessions (wall time / audio made: below 1 keeps up); "
        f"/ping p50 ≤ {max(float(r['ping_p50_ms']) for r in rows):.0f} ms, "
        f"max {max(float(r['ping_max_ms']) for r in rows):.0f} ms; "
        f"queue depth (/metrics) max {last['queue_depth_max']:.0f}, p95 {last['queue_depth_p95']:.0f} "
        f"at {last['sessions']} sessions; heard to the end, sessions that ran dry after their first audio: "
        + ", ".join(f"{r['sessions_ran_dry']} of {r['sessions']}" for r in rows)
        + f" (longest silence {max(float(r['underrun_ms_max']) for r in rows):.0f} ms)"
    )
    data: dict[str, object] = {"reply": LOAD_REPLY, "reply_chars": len(LOAD_REPLY), "levels": rows}
    spread = float(last["ttfa_p95_ms"]) / float(first["ttfa_p50_ms"])
    data["p95_at_most_over_single_p50"] = spread
    headline += f"; p95 at {last['sessions']} over p50 at {first['sessions']}: {spread:.1f}×"
    if off_rows:
        off_spread = float(off_rows[-1]["ttfa_p95_ms"]) / float(off_rows[0]["ttfa_p50_ms"])
        data["windowing_off"] = {"levels": off_rows, "p95_at_most_over_single_p50": off_spread}
        headline += (
            f" (windowing off: {off_spread:.1f}×, p50 {off_rows[0]['ttfa_p50_ms']:.0f} ms with "
            f"{off_rows[0]['sessions']}, p95 {off_rows[-1]['ttfa_p95_ms']:.0f} ms with {off_rows[-1]['sessions']})"
        )
    return Section(headline, data, [("Concurrent sessions", rows + off_rows)])
