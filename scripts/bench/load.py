"""load: N sessions speak a multi-sentence reply at once, N = 1, 2, 4, 8, 16.

Per level: p50/p95 time to first audio across the sessions, the aggregate real-time factor (wall time over the
sum of the audio produced: below 1 means the machine keeps up with N listeners), and /ping latency meanwhile
(the event loop must stay free while the workers synthesize). With a windowing-off server in the run
(KOKORO_WINDOWED=0), every level runs on it too, level by level, and the headline compares the first-audio spread:
p95 at the most sessions over the single session's p50 (each session's first window ahead of others' later ones).
"""

from __future__ import annotations

from .client import concurrent
from .report import Row, Section
from .texts import LOAD_REPLY


async def run_load(url: str, levels: list[int], whole_url: str | None = None) -> Section:
    rows: list[Row] = []
    off_rows: list[Row] = []
    for sessions in levels:
        rows.append({"windowing": "on", **await concurrent(url, sessions, LOAD_REPLY)})
        if whole_url is not None:
            off_rows.append({"windowing": "off", **await concurrent(whole_url, sessions, LOAD_REPLY)})
    first, last = rows[0], rows[-1]
    headline = (
        f"time to first audio p50 {first['ttfa_p50_ms']:.0f} ms with {first['sessions']} session(s), "
        f"{last['ttfa_p50_ms']:.0f} ms (p95 {last['ttfa_p95_ms']:.0f} ms) with {last['sessions']}; real-time factor "
        f"{last['aggregate_rtf']:.2f} at {last['sessions']} sessions (wall time / audio made: below 1 keeps up); "
        f"/ping p50 ≤ "
        f"{max(float(r['ping_p50_ms']) for r in rows):.0f} ms, max {max(float(r['ping_max_ms']) for r in rows):.0f} ms"
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
