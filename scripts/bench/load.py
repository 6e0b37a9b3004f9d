"""load: how many real-time streams this machine serves: N sessions speak a multi-sentence reply at once, heard to its
end, N = 1, 2, 4, 6, 8, 12, 16.

Each session is a caller: it sends the reply, listens until its audio has played out (its player starting at the
first audio), then hangs up. Per level: the sessions served and refused (server_busy: no stream slot came free within
the server's bounded wait, engine/capacity.py), and the longest a refused one waited to hear so; of the served, p50/p95
time to first audio and how many players ran dry after their first audio (a quick first audio and then a gap is not
what a caller wants either); the aggregate real-time factor (wall time until the last audio arrived, over the audio
made) and /ping latency meanwhile (the event loop must stay free while the workers synthesize). Served + refused must
be every session: one accepted and never finished was lost, and the run raises.

The headline is the largest N whose sessions were all served, with first audio p95 ≤ 300 ms and no player running
dry: the real-time streams this machine serves. It is measured on the server as it ships (stream slots: the server
measures at warm-up what its workers make side by side and plays at most 80 % of that at once; the rest wait or are
refused) and, level by level interleaved, on the same server without slots (KOKORO_STREAMS=-1: every stream starts at
once and past what the cores make they all run dry), on the server as it was before the slots and the fused Snake
kernel (KOKORO_STREAMS=-1 KOKORO_FUSED_SNAKE=0: what the real-time streams are compared with), and on the server with
windowed vocoding off (KOKORO_WINDOWED=0) where the run has one. Each server's slots and measured throughput come
from its GET /metrics.

The server's own view comes from /metrics too, sampled every 100 ms while a level runs: the scheduler's queue depth
(max and p95 of the samples), stream slots held and waited for (max), how many utterances its counters say it completed
(one per session served) and refused. Its job counters give what one session's first audio cost a worker at that level
(its phonemes job and its first-audio job, as they ran: side by side under load), and so the floor under the level's
p95: N sessions starting together need N of those jobs, and the k-th first audio comes after k of them shared among
the workers at best, however the scheduler orders them. A p95 near its floor is a machine short of cores, not a
scheduler to mend.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import httpx

from .client import SHORT, concurrent, pct, server_metrics, ws_once
from .report import Row, Section
from .texts import LOAD_REPLY

LEVELS = [1, 2, 4, 6, 8, 12, 16]
# A stream is real-time when its caller hears the first audio within this (p95) and then never a gap.
REAL_TIME_TTFA_P95_MS = 300.0
SAMPLE_EVERY_S = 0.1
# A session still unanswered after this was accepted and lost (a refusal comes within the server's bounded wait,
# 4 s by default, and 16 sessions' 4 s replies take a 2-core machine under 20 s).
SESSION_WITHIN_S = 120.0
# Each level starts on a server with no stream held from the level before (the sessions hung up: it frees them).
SLOTS_FREE_WITHIN_S = 30.0

# What the markdown's two tables show of each level's row (latest.json keeps every key).
CALLERS = (
    "server",
    "sessions",
    "served",
    "refused",
    "refused_after_ms_max",
    "ttfa_p50_ms",
    "ttfa_p95_ms",
    "sessions_ran_dry",
    "underrun_ms_max",
    "aggregate_rtf",
)
SERVERS_VIEW = (
    "server",
    "sessions",
    "ping_p50_ms",
    "ping_max_ms",
    "streams_in_use_max",
    "streams_waiting_max",
    "queue_depth_max",
    "queue_depth_p95",
    "first_job_ms",
    "ttfa_p95_floor_ms",
    "server_utterances",
    "server_refused",
)


@dataclass(frozen=True)
class LoadServer:
    """One server the levels run on: ``key`` names it in latest.json, ``label`` in the tables and the headline,
    ``setting`` is how it differs from the server as it ships (None: it does not)."""

    key: str
    label: str
    url: str
    setting: str | None = None


class SessionsLost(RuntimeError):
    """Sessions the server accepted and never finished: neither served nor refused."""


async def level(server: LoadServer, sessions: int) -> Row:
    """``sessions`` sessions speak the reply at once (``concurrent``'s row), plus the server's view from /metrics
    (``server_view``); ``SessionsLost`` unless every session was served or refused."""
    async with httpx.AsyncClient(timeout=10) as client:
        await slots_free(client, server.url)
        before = await server_metrics(client, server.url)
        task = asyncio.ensure_future(
            concurrent(server.url, sessions, LOAD_REPLY, busy_ok=True, play_out=True, within_s=SESSION_WITHIN_S)
        )
        during: list[dict[str, float]] = []
        while not task.done():
            during.append(await server_metrics(client, server.url))
            await asyncio.wait({task}, timeout=SAMPLE_EVERY_S)
        callers: Row = await task
        after = await server_metrics(client, server.url)
    row = {"server": server.label, **callers, **server_view(before, during, after, callers["served"])}
    if row["served"] + row["refused"] != sessions:
        raise SessionsLost(f"{server.label}: of {sessions} sessions {row['served']} served, {row['refused']} refused")
    return row


async def slots_free(client: httpx.AsyncClient, url: str) -> None:
    """Returns once the server holds no stream slot: the sessions of the level before have all hung up."""
    deadline = asyncio.get_running_loop().time() + SLOTS_FREE_WITHIN_S
    while (await server_metrics(client, url))["streams_in_use"]:
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"{url} still holds stream slots {SLOTS_FREE_WITHIN_S:.0f} s after its sessions ended")
        await asyncio.sleep(0.05)


def server_view(before: dict[str, float], during: list[dict[str, float]], after: dict[str, float], served: int) -> Row:
    """A level as /metrics saw it: what one session's first audio cost a worker and the floor under the p95 that
    makes for the ``served`` sessions (the module docstring), the queue depth and stream slots sampled meanwhile,
    and the utterances its counters completed and refused."""
    first_job_ms = 1000 * (mean_job_s(before, after, "phonemes") + mean_job_s(before, after, "first_audio"))
    workers = max(1, int(after["workers"]))
    depths = [now["queue_depth"] for now in during]
    return {
        "first_job_ms": first_job_ms,
        "ttfa_p95_floor_ms": pct([math.ceil(k / workers) * first_job_ms for k in range(1, served + 1)], 0.95)
        if served
        else None,
        "queue_depth_max": max(depths, default=0.0),
        "queue_depth_p95": pct(depths, 0.95) if depths else 0.0,
        "streams_in_use_max": max((now["streams_in_use"] for now in during), default=0.0),
        "streams_waiting_max": max((now["streams_waiting"] for now in during), default=0.0),
        "server_utterances": after["utterances_completed"] - before["utterances_completed"],
        "server_refused": refused_total(after) - refused_total(before),
    }


def mean_job_s(before: dict[str, float], after: dict[str, float], kind: str) -> float:
    """The mean worker seconds of the ``kind`` jobs run between two /metrics readings (``server_metrics``)."""
    jobs = after.get(f"jobs:{kind}", 0.0) - before.get(f"jobs:{kind}", 0.0)
    seconds = after.get(f"seconds:{kind}", 0.0) - before.get(f"seconds:{kind}", 0.0)
    return seconds / jobs if jobs else 0.0


def refused_total(metrics: dict[str, float]) -> float:
    """Requests refused with server_busy, every cap together (a stream slot, or the utterances waiting)."""
    return sum(value for name, value in metrics.items() if name.startswith("refused:"))


def real_time_streams(rows: list[Row]) -> int:
    """The most sessions at once that were all served, with first audio p95 within the target and no player
    running dry (0: not even one). A level with refusals does not count, however quick its served ones were."""
    met = [
        int(r["sessions"])
        for r in rows
        if r["refused"] == 0 and r["sessions_ran_dry"] == 0 and r["ttfa_p95_ms"] <= REAL_TIME_TTFA_P95_MS
    ]
    return max(met, default=0)


async def stream_slots(url: str) -> dict[str, Any]:
    """The server's stream slots (None: no slots, every stream starts at once) and the throughput measured at
    warm-up that sized them, from its /metrics."""
    async with httpx.AsyncClient(timeout=10) as client:
        now = await server_metrics(client, url)
    limit = now["streams_limit"]
    return {"stream_limit": None if math.isinf(limit) else int(limit), "stream_throughput": now["stream_throughput"]}


async def run_load(servers: list[LoadServer], levels: list[int]) -> Section:
    """Every level on every server, level by level (each server's turn at a level right after the other's, so a
    change in what else the machine runs meanwhile touches them alike); the first server is the one as it ships."""
    for server in servers:
        await ws_once(server.url, SHORT)  # the first session of a process pays for imports: not a level's
    rows: dict[str, list[Row]] = {server.key: [] for server in servers}
    for sessions in levels:
        for server in servers:
            rows[server.key].append(await level(server, sessions))
    policies = {
        server.key: {
            "server": server.label,
            "setting": server.setting,
            "real_time_streams": real_time_streams(rows[server.key]),
            **await stream_slots(server.url),
            "levels": rows[server.key],
        }
        for server in servers
    }
    data: dict[str, object] = {
        "reply": LOAD_REPLY,
        "reply_chars": len(LOAD_REPLY),
        "real_time_ttfa_p95_ms": REAL_TIME_TTFA_P95_MS,
        "policies": policies,
    }
    over_before = None
    if (before := policies.get("before")) is not None and before["real_time_streams"]:
        over_before = policies[servers[0].key]["real_time_streams"] / before["real_time_streams"]
        data["real_time_streams_over_before"] = over_before
    every_row = [row for server in servers for row in rows[server.key]]
    tables = [
        ("Callers per level: served, refused (server_busy), first audio and underruns of the served", CALLERS),
        ("The server's view per level (/ping meanwhile, its /metrics)", SERVERS_VIEW),
    ]
    return Section(
        headline(list(policies.values()), over_before),
        data,
        [(title, [{key: row[key] for key in keys} for row in every_row]) for title, keys in tables],
    )


def headline(policies: list[dict[str, Any]], over_before: float | None = None) -> str:
    """The real-time streams with each server (and the first's over the server before slots and kernel), then each
    level's ran-dry and refused counts, server by server."""
    first, *others = policies
    text = (
        f"real-time streams on this machine: {first['real_time_streams']} at p95 first audio "
        f"≤ {REAL_TIME_TTFA_P95_MS:.0f} ms with no session running dry, with {described(first)}"
    )
    if over_before is not None:
        text += f" ({over_before:.1f}× the server before slots and kernel)"
    text += "".join(f"; {p['real_time_streams']} with {described(p)}" for p in others)
    text += "; per level, sessions → ran dry of the served, refused (after at most) — "
    text += " | ".join(f"{p['server']}: {levels_of(p['levels'])}" for p in policies)
    everyone = [row for p in policies for row in p["levels"]]
    return text + f"; /ping max {max(float(r['ping_max_ms']) for r in everyone):.0f} ms"


def described(policy: dict[str, Any]) -> str:
    """The server's label, its setting and its stream slots with the throughput that sized them."""
    notes = [policy["setting"]] if policy["setting"] else []
    if (slots := policy["stream_limit"]) is not None:
        notes.append(
            f"{slots} slot{'s' if slots != 1 else ''} from {policy['stream_throughput']:.1f} s of audio per s "
            "measured at warm-up"
        )
    return f"{policy['server']} ({'; '.join(notes)})" if notes else policy["server"]


def levels_of(rows: list[Row]) -> str:
    def one(row: Row) -> str:
        dry = f"{row['sessions_ran_dry']}/{row['served']} dry" if row["served"] else "none served"
        waited = f" ({row['refused_after_ms_max'] / 1000:.1f} s)" if row["refused"] else ""
        return f"{row['sessions']} → {dry}, {row['refused']} refused{waited}"

    return "; ".join(one(row) for row in rows)
