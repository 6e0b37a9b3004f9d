"""load: N sessions speak a multi-sentence reply at once, N = 1, 2, 4, 8, 16.

Per level: p50/p95 time to first audio across the sessions, the aggregate real-time factor (wall time over the
sum of the audio produced: below 1 means the machine keeps up with N listeners), and /ping latency meanwhile
(the event loop must stay free while the workers synthesize).
"""

from __future__ import annotations

from .client import concurrent
from .report import Row, Section
from .texts import LOAD_REPLY


async def run_load(url: str, levels: list[int]) -> Section:
    rows: list[Row] = []
    for sessions in levels:
        rows.append(await concurrent(url, sessions, LOAD_REPLY))
    first, last = rows[0], rows[-1]
    headline = (
        f"time to first audio p50 {first['ttfa_p50_ms']:.0f} ms with {first['sessions']} session(s), "
        f"{last['ttfa_p50_ms']:.0f} ms (p95 {last['ttfa_p95_ms']:.0f} ms) with {last['sessions']}; real-time factor "
        f"{last['aggregate_rtf']:.2f} at {last['sessions']} sessions (wall time / audio made: below 1 keeps up); "
        f"/ping p50 ≤ "
        f"{max(float(r['ping_p50_ms']) for r in rows):.0f} ms, max {max(float(r['ping_max_ms']) for r in rows):.0f} ms"
    )
    return Section(
        headline,
        {"reply": LOAD_REPLY, "reply_chars": len(LOAD_REPLY), "levels": rows},
        [("Concurrent sessions", rows)],
    )
