"""The results: latest.json (numbers), latest.md (a table per section) and PNG plots, each naming the machine."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .client import table

Row = dict[str, Any]
SECTIONS = ("isolated_tts", "end_to_end", "transport", "load", "peer", "roofline")
# What each section measures, in plain words: printed above its headline (bench/README.md has the details).
ABOUT = {
    "isolated_tts": "the TTS server alone: how long until the first audio of a 267-character reply, asked four ways",
    "end_to_end": "the agent with the scripted (simulated) LLM: first audio in bidi (each sentence spoken as it is "
    "written) against batch (the whole reply first)",
    "transport": "the same speech in each audio format: bytes, the cost of base64 in SSE, and whether it is still "
    "understood",
    "load": "how many sessions this machine serves at once in real time: first audio, players running dry and "
    "callers refused, with the server's stream slots and without",
    "peer": "kokoro-onnx, another wrapper of the same model, on the same text, voice and machine",
    "roofline": "the most audio this CPU could make with every multiply-accumulate at onnxruntime's best "
    "matrix-product speed, and the share of it the engine makes",
}


@dataclass
class Section:
    """One section's result: a one-line headline, its numbers, and the tables latest.md shows."""

    headline: str
    data: dict[str, Any] = field(default_factory=dict)
    tables: list[tuple[str, list[Row]]] = field(default_factory=list)

    @classmethod
    def skipped(cls, why: str, **data: Any) -> Section:
        return cls(f"not measured: {why}", {"measured": False, **data})

    def as_json(self) -> dict[str, Any]:
        return {"headline": self.headline, **_rounded(self.data)}


def _rounded(value: Any) -> Any:
    """Floats to 0.1 for ms and % (noise is far larger), 2-3 digits for ratios; NaN to None: JSON has no NaN."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return round(value, 3 if abs(value) < 1 else 2 if abs(value) < 10 else 1)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def machine_line(machine: dict[str, Any]) -> str:
    return f"{machine['cores']} cores, {machine['cpu_model']}, backend {machine['backend']}"


def write_json(path: Path, run: dict[str, Any], machine: dict[str, Any], sections: dict[str, Section]) -> None:
    document = {"run": _rounded(run), "machine": machine, **{name: sections[name].as_json() for name in SECTIONS}}
    _atomic_write(path, json.dumps(document, indent=2) + "\n")


def write_markdown(path: Path, run: dict[str, Any], machine: dict[str, Any], sections: dict[str, Section]) -> None:
    where = machine_line(machine)
    lines = [
        "# Benchmark results",
        "",
        f"Machine: {where}. Target: {run['target']}; mode: {run['mode']}; {run['started']}; "
        f"took {run['elapsed_s']:.0f} s. Absolute times compare only within this run: the ratios are the result.",
    ]
    for name in SECTIONS:
        section = sections[name]
        lines += ["", f"## {name}", "", f"{ABOUT[name]}.", "", f"**{section.headline}**"]
        for title, rows in section.tables:
            if rows:
                lines += ["", f"{title} — {where}", "", table([_rounded(r) for r in rows])]
    _atomic_write(path, "\n".join(lines) + "\n")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def plot_isolated(path: Path, rows: list[Row], machine: dict[str, Any]) -> None:
    """Bars per variant, p50 and p95 side by side."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.8))
    labels = [str(r["variant"]) for r in rows]
    x = list(range(len(rows)))
    width = 0.38
    p50 = [float(r["ttfa_p50_ms"]) for r in rows]
    p95 = [float(r["ttfa_p95_ms"]) for r in rows]
    bars50 = ax.bar([i - width / 2 for i in x], p50, width, label="p50")
    bars95 = ax.bar([i + width / 2 for i in x], p95, width, label="p95")
    ax.bar_label(bars50, fmt="%.0f", fontsize=8)
    ax.bar_label(bars95, fmt="%.0f", fontsize=8)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("time to first audio (ms)")
    ax.set_title(f"Isolated TTS: time to first audio, 267-character reply\n{machine_line(machine)}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_load(path: Path, load: dict[str, Any], machine: dict[str, Any]) -> None:
    """Against concurrent sessions, one line per server (the load section's ``policies``): first audio p95 of the
    served sessions beside the real-time target, and the sessions that ran dry or were refused."""
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, StrMethodFormatter

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    policies = list(load["policies"].values())
    for i, policy in enumerate(policies):
        rows, color = policy["levels"], f"C{i}"
        sessions = [int(r["sessions"]) for r in rows]
        served = [r for r in rows if r["served"]]
        p95 = [r["ttfa_p95_ms"] for r in served]
        left.plot([r["sessions"] for r in served], p95, "o-", color=color, label=policy["server"])
        right.plot(sessions, [r["sessions_ran_dry"] or 0 for r in rows], "o-", color=color)
        right.plot(sessions, [r["refused"] for r in rows], "x--", color=color)
    target = load["real_time_ttfa_p95_ms"]
    left.axhline(target, color="grey", linewidth=0.8, linestyle=":", label=f"{target:.0f} ms (real time)")
    left.set_yscale("log")  # from about 100 ms to seconds where sessions wait or queue
    left.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    left.yaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    left.yaxis.set_minor_formatter(NullFormatter())
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_ylabel("time to first audio, p95 of the served (ms)")
    right.set_ylabel("sessions")
    ran_dry = Line2D([], [], color="grey", linestyle="-", marker="o", label="ran dry after their first audio")
    refused = Line2D([], [], color="grey", linestyle="--", marker="x", label="refused (server_busy)")
    right.legend(handles=[ran_dry, refused], fontsize=7)
    left.legend(fontsize=7)
    ticks = sorted({int(r["sessions"]) for policy in policies for r in policy["levels"]})
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(s) for s in ticks])
        ax.set_xlabel("concurrent sessions")
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Load: sessions speaking a 2-sentence reply at once, heard to the end\n{machine_line(machine)}", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server or in CI
    import matplotlib.pyplot as plt

    return plt
