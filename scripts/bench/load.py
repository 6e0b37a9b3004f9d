"""load: N sessions speak a multi-sentence reply at once, N = 1, 2, 4, 8, 16.

Per level: p50/p95 time to first audio across the sessions, the aggregate real-time factor (wall time over the
sum of the audio produced: below 1 means the machine keeps up with N listeners), /ping latency meanwhile (the
event loop must stay free while the workers synthesize), and how many sessions' players ran dry after their first
audio, heard to the end (a quick first audio and then a gap is not what a caller wants either). With a
windowing-off server in the run (KOKORO_WINDOWED=0), every level runs on it too, level by level, and the headline
compares the first-audio spread: p95 at the most sessions over the single session's p50 (each session's first
window ahead of others' later ones).

The server's own view comes from its GET /metrics, sampled every 100 ms while a level runs: the scheduler's queue
depth (max and p95 of the samples) and how many utterances its counters say it completed (one per session). Its job
counters give what one session's first audio cost a worker at that level (its phonemes job and its first-audio
job, as they ran: side by side under load), and so the floor under the level's p95: N sessions arriving together
need N of those jobs, and the k-th first audio comes after k of them shared among the workers at best, however the
scheduler orders them. A p95 near its floor is a machine short of cores, not a scheduler to mend.
"""

from __future__ import annotations

import asyncio
import math

import httpx

from .client import concurrent, pct, server_metrics
from .report import Row, Section
from .texts import LOAD_REPLY

SAMPLE_EVERY_S = 0.1


async def level(url: str, sessions: int) -> dict[str, object]:
    """``sessions`` sessions speak the reply at once (``concurrent``'s row), plus the server's view: its queue depth
    (max, p95) sampled from /metrics meanwhile, the utterances its counters completed, what one session's first
    audio cost a worker and the floor under the p95 it makes (the module docstring)."""
    task = asyncio.ensure_future(concurrent(url, sessions, LOAD_REPLY))
    depths: list[float] = []
    async with httpx.AsyncClient(timeout=10) as client:
        before = await server_metrics(client, url)
        while not task.done():
            depths.append((await server_metrics(client, url))["queue_depth"])
            await asyncio.wait({task}, timeout=SAMPLE_EVERY_S)
        row = await task
        after = await server_metrics(client, url)
    first_job_ms = 1000 * (mean_job_s(before, after, "phonemes") + mean_job_s(before, after, "first_audio"))
    workers = max(1, int(after["workers"]))
    return {
        **row,
        "first_job_ms": first_job_ms,
        "ttfa_p95_floor_ms": pct([math.ceil(k / workers) * first_job_ms for k in range(1, sessions + 1)], 0.95),
        "queue_depth_max": max(depths, default=0.0),
        "queue_depth_p95": pct(depths, 0.95) if depths else 0.0,
        "server_utterances": after["utterances_completed"] - before["utterances_completed"],
    }


def mean_job_s(before: dict[str, float], after: dict[str, float], kind: str) -> float:
    """The mean worker seconds of the ``kind`` jobs run between two /metrics readings (``server_metrics``)."""
    jobs = after.get(f"jobs:{kind}", 0.0) - before.get(f"jobs:{kind}", 0.0)
    seconds = after.get(f"seconds:{kind}", 0.0) - before.get(f"seconds:{kind}", 0.0)
    return seconds / jobs if jobs else 0.0


async def run_load(url: str, levels: list[int], whole_url: str | None = None) -> Section:
    rows: list[Row] = []
    off_rows: list[Row] = []
    for sessions in levels:
        rows.append({"windowing": "on", **await level(url, sessions)})
        if whole_url is not None:
            off_rows.append({"windowing": "off", **await level(whole_url, sessions)})
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
    headline += "; p95 against its floor (the first jobs alone, shared among the workers): " + ", ".join(
        f"{r['ttfa_p95_ms']:.0f}/{r['ttfa_p95_floor_ms']:.0f} ms at {r['sessions']}" for r in rows
    )
    if off_rows:
        off_spread = float(off_rows[-1]["ttfa_p95_ms"]) / float(off_rows[0]["ttfa_p50_ms"])
        data["windowing_off"] = {"levels": off_rows, "p95_at_most_over_single_p50": off_spread}
        headline += (
            f" (windowing off: {off_spread:.1f}×, p50 {off_rows[0]['ttfa_p50_ms']:.0f} ms with "
            f"{off_rows[0]['sessions']}, p95 {off_rows[-1]['ttfa_p95_ms']:.0f} ms with {off_rows[-1]['sessions']})"
        )
    return Section(headline, data, [("Concurrent sessions", rows + off_rows)])
