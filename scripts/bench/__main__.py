"""Run the benchmark: ``python -m scripts.bench [--quick] [--target local|deployed] [--out DIR]``.

Local (the default) starts the real server on a free port, and beside it the same server with windowed vocoding
switched off (KOKORO_WINDOWED=0, the side-by-side baseline of the first-window figures) and, for the load section's
old policy, without stream slots (KOKORO_STREAMS=-1; not in --quick), and loads our engine in this process too (for
the naive baseline and the kokoro-onnx comparison), then runs the sections one after the other, never two at once, so
they do not compete for the cores. Writes DIR/latest.json, DIR/latest.md, DIR/isolated_tts.png
and DIR/load.png; DIR is bench/results for a full local run (the figures the README quotes), bench/results/quick for
--quick (ignored by git), bench/results/deployed for --target deployed. A quick run never writes over a full run's
results.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .client import BEFORE_SLOTS_AND_KERNEL, NO_STREAM_SLOTS, REPO, WINDOWING_OFF, cpu_model, drain, local_server
from .end_to_end import TTSTarget, run_end_to_end
from .load import LEVELS, LoadServer, run_load
from .report import ABOUT, SECTIONS, Section, plot_isolated, plot_load, write_json, write_markdown

RESULTS = REPO / "bench" / "results"


def default_out(target: str, quick: bool) -> Path:
    """Full local results where the README quotes them; quick and deployed runs each in a folder of their own."""
    out = RESULTS if target == "local" else RESULTS / target
    return out / "quick" if quick else out


def overwrites_full_run(out: Path) -> bool:
    import json

    try:
        return bool(json.loads((out / "latest.json").read_text())["run"]["mode"] == "full")
    except (OSError, ValueError, KeyError, TypeError):
        return False


@dataclass(frozen=True)
class Plan:
    """How much of everything to measure: the full run, or --quick (a CI smoke test of every section: about 2 minutes
    on 2 idle cores)."""

    trials: int
    levels: list[int]
    segments: int
    e2e_trials: int
    peer_trials: int
    peer_sentences: int | None  # None: every sentence of the reply
    peer_ttfa_trials: int  # 0: not measured (kokoro-onnx's first audio is the whole text's synthesis: ~10 s each)
    roofline_runs: int = 3  # profiled runs of the reply, after one untimed; and measurements of the throughput
    roofline_sentences: int | None = None  # of the reply (None: all)
    # The load section's old policy beside the new: a server without stream slots (its own process and warm-up).
    no_slots_server: bool = True

    @classmethod
    def of(cls, quick: bool) -> Plan:
        if quick:
            return cls(
                2,
                [1, 2],
                4,
                1,
                1,
                2,
                0,
                no_slots_server=False,
                roofline_runs=1,
                roofline_sentences=2,
            )
        return cls(5, LEVELS, 24, 3, 3, None, 2)


def machine_info(backend: str) -> dict[str, Any]:
    import onnxruntime

    return {
        "cores": os.cpu_count(),
        "cpu_model": cpu_model(),
        "backend": backend,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
    }


async def timed(name: str, work: Awaitable[Section]) -> Section:
    print(f"[bench] {name} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    section = await work
    section.data["elapsed_s"] = time.perf_counter() - started
    print(f"[bench] {name}: {section.headline}", file=sys.stderr, flush=True)
    return section


async def run_local(plan: Plan, url: str | None) -> tuple[dict[str, Any], dict[str, Section]]:
    from .inproc import InProcess
    from .isolated import run_isolated
    from .peer import run_peer
    from .roofline import run_roofline
    from .transport import run_transport

    with ThreadPoolExecutor(1) as pool, ExitStack() as servers:
        # The servers start one at a time, each with the cores to itself: its warm-up measures what they make,
        # which sizes its stream slots (the load section's subject). Our engine loads beside the one whose slots
        # nothing reads: the server without slots, or in --quick (figures not to quote) the windowing-off one.
        base = servers.enter_context(local_server()) if url is None else url.rstrip("/")
        loading = None if plan.no_slots_server else pool.submit(InProcess.load)
        # The same server with windowed vocoding switched off, idle while the other is measured: the side by side.
        whole = servers.enter_context(local_server(env=WINDOWING_OFF)) if url is None else None
        loading = loading or pool.submit(InProcess.load)
        no_slots = before = None
        if url is None and plan.no_slots_server:
            # The old policy (every stream starts at once), beside the new in the load section; and the server as it
            # was before the slots and the fused Snake kernel, what the real-time streams are compared with.
            no_slots = servers.enter_context(local_server(env=NO_STREAM_SLOTS))
            before = servers.enter_context(local_server(env=BEFORE_SLOTS_AND_KERNEL))
        inproc = loading.result()
        inproc.engine.start()  # the deadline scheduler's worker, for TTSEngine.stream

        async def settle() -> None:
            await drain(base)
            if whole is not None:
                await drain(whole)

        try:
            local, off = TTSTarget("local", url=base), TTSTarget("local", url=whole) if whole else None
            sections = {
                "isolated_tts": await timed("isolated_tts", run_isolated(base, inproc, plan.trials, whole)),
                "end_to_end": await timed("end_to_end", run_end_to_end(local, plan.e2e_trials, settle, off)),
                "transport": await timed("transport", run_transport(base, plan.segments)),
                "load": await timed("load", run_load(load_servers(base, no_slots, whole, before), plan.levels)),
            }
            # Last, with the server idle: the comparison runs in this process.
            sections["peer"] = await timed(
                "peer",
                run_peer(inproc, plan.peer_trials, n_sentences=plan.peer_sentences, ttfa_trials=plan.peer_ttfa_trials),
            )
            sections["roofline"] = await timed(
                "roofline", run_roofline(inproc.engine, plan.roofline_runs, plan.roofline_sentences)
            )
        finally:
            await inproc.engine.stop()
    return machine_info(inproc.backend), sections


def load_servers(base: str, no_slots: str | None, whole: str | None, before: str | None = None) -> list[LoadServer]:
    """The servers the load section compares, the one as it ships first."""
    servers = [LoadServer("default", "stream slots as shipped", base)]
    if no_slots is not None:
        servers.append(LoadServer("no_slots", "no slots", no_slots, "KOKORO_STREAMS=-1"))
    if before is not None:
        setting = "KOKORO_STREAMS=-1 KOKORO_FUSED_SNAKE=0"
        servers.append(LoadServer("before", "before slots and kernel", before, setting))
    if whole is not None:
        servers.append(LoadServer("windowing_off", "windowing off", whole, "KOKORO_WINDOWED=0"))
    return servers


async def run_deployed(plan: Plan) -> tuple[dict[str, Any], dict[str, Section]]:
    from .deployed import read_deployment, run_isolated_deployed, run_runtime_deployed

    deployment = read_deployment()  # exits with a clear message when nothing is deployed
    local_only = "local-only section (run `make bench` for it)"
    sections = {
        "isolated_tts": await timed("isolated_tts", run_isolated_deployed(deployment, plan.trials)),
        # The deployed agent itself (AgentCore runtime, Bedrock), not the pipelines run on this machine.
        "end_to_end": await timed("end_to_end", run_runtime_deployed(deployment, plan.e2e_trials)),
        "transport": Section.skipped(local_only),
        "load": Section.skipped(f"{local_only}: not run against a paid endpoint"),
        "peer": Section.skipped(local_only),
        "roofline": Section.skipped(local_only),
    }
    backend = f"SageMaker endpoint {deployment.endpoint_name} ({deployment.region}); client on this machine"
    return machine_info(backend), sections


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI smoke: 2 trials, sessions 1,2, 4 segments")
    parser.add_argument("--target", choices=("local", "deployed"), default="local")
    parser.add_argument(
        "--out",
        type=Path,
        help="default: bench/results (full, local), bench/results/quick (--quick), bench/results/deployed",
    )
    parser.add_argument("--url", help="local: measure this running server instead of starting one")
    args = parser.parse_args(argv)
    plan = Plan.of(args.quick)
    args.out = args.out or default_out(args.target, args.quick)
    if args.quick and overwrites_full_run(args.out):
        parser.error(f"{args.out} holds a full run's results: a --quick run writes elsewhere (leave --out out)")

    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    started = time.perf_counter()
    if args.target == "deployed":
        machine, sections = asyncio.run(run_deployed(plan))
    else:
        machine, sections = asyncio.run(run_local(plan, args.url))
    run = {
        "started": started_at,
        "elapsed_s": time.perf_counter() - started,
        "mode": "quick" if args.quick else "full",
        "target": args.target,
    }
    assert set(sections) == set(SECTIONS), sorted(sections)

    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "latest.json", run, machine, sections)
    write_markdown(args.out / "latest.md", run, machine, sections)
    plot_isolated(args.out / "isolated_tts.png", sections["isolated_tts"].tables[0][1], machine)
    if "policies" in sections["load"].data:
        plot_load(args.out / "load.png", sections["load"].data, machine)

    print(f"Machine: {machine['cores']} cores, {machine['cpu_model']}, backend {machine['backend']}")
    print("Absolute times compare only within this run and machine: the ratios are the result.")
    for name in SECTIONS:
        print(f"\n{name}: {ABOUT[name]}\n  {sections[name].headline}")
    kind = "a QUICK run (2 trials each: a smoke test, not figures to quote)" if args.quick else "a full run"
    print(f"\ntook {run['elapsed_s']:.0f} s, {kind}; wrote {args.out}/latest.json, latest.md and the plots")


if __name__ == "__main__":
    main()
