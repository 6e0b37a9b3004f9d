"""``make gpu-check``: the torch backend on an NVIDIA GPU, measured against the real server (bench/results/gpu.json).

On a GPU host (the dev lock carries the GPU extra with container/requirements-torch.lock's pins: torch 2.10.0 on
CUDA 12.8), it derives the torch weights if the layout lacks them, starts ``serve`` with KOKORO_BACKEND=torch and
KOKORO_DEVICE=cuda, checks /health says ``cuda``, then measures time to first audio (one session, WebSocket) and
1/8/32 sessions speaking at once, each heard to its end and held open until its audio has played, as a caller's
would be. It reports the streams per GPU: the server's own warm-up measurement (its stream slots and the seconds of
audio it makes per second, from /metrics; engine/capacity.py), which the autoscaling target of a GPU type should
come from (docs/deploy.md), and per level the sessions served and those refused with server_busy past the slots.
It does so twice: with batching across sessions (the default: several streams' chunks in one call) and without
(KOKORO_BATCH=1), each on a server of its own. Without a usable GPU it refuses (exit 2) and says why.
``--allow-cpu`` runs the same steps on the CPU, for testing the script itself; its report says so.

    python -m scripts.gpu_check [--out bench/results/gpu.json] [--levels 1,8,32] [--trials 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from scripts.bench.client import LONG, SHORT, concurrent, local_server, model_dir, pct, server_metrics, ws_once
from scripts.bench.texts import LOAD_REPLY

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / "results" / "gpu.json"
BUDGET_S = 8 * 60  # the whole check, install excluded: each step is bounded to fit


def gpu_problem() -> str | None:
    """Why this machine cannot run the torch backend on CUDA, or None."""
    import torch
    from kokoro_tts.engine.backends.torch import cuda_problem

    if shutil.which("nvidia-smi") is None and not Path("/proc/driver/nvidia").exists():
        return "no NVIDIA driver here (no nvidia-smi, no /proc/driver/nvidia)"
    return cuda_problem(torch)


def gpu_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        info["driver"] = subprocess.run(query, capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        info["driver"] = None
    return info


def checked_health(url: str, device: str) -> dict[str, Any]:
    health: dict[str, Any] = httpx.get(f"{url}/health", timeout=10).json()
    if health.get("device") != device or health.get("backend") != "torch":
        raise SystemExit(f"gpu-check: the server runs {health}, not the torch backend on {device}")
    return health


async def first_audio(url: str, trials: int) -> dict[str, Any]:
    await ws_once(url, SHORT)  # warm: CUDA kernels and allocator
    first = [(await ws_once(url, SHORT)).ttfa_ms for _ in range(trials)]
    long_first = [(await ws_once(url, LONG)).ttfa_ms for _ in range(max(1, trials // 2))]
    return {
        "text": SHORT,
        "trials": trials,
        "ttfa_p50_ms": pct(first, 0.5),
        "ttfa_p95_ms": pct(first, 0.95),
        "long_reply_ttfa_p50_ms": pct(long_first, 0.5),
    }


async def streams(url: str, batch: int, levels: Sequence[int], reply: str, deadline: float) -> dict[str, Any]:
    """The server's measured stream slots and throughput, and ``levels`` of concurrent sessions against it."""
    rows = []
    for sessions in levels:
        if time.monotonic() > deadline:
            rows.append({"sessions": sessions, "measured": False, "why": "this server's share of the budget ran out"})
            continue
        level = concurrent(url, sessions, reply, busy_ok=True, play_out=True)
        rows.append(await asyncio.wait_for(level, max(1.0, deadline - time.monotonic())))
    async with httpx.AsyncClient(timeout=10) as client:
        server = await server_metrics(client, url)
    return {
        "batch": batch,
        "slots": None if server["streams_limit"] == float("inf") else int(server["streams_limit"]),
        "throughput_audio_s_per_s": round(server["stream_throughput"], 2),
        "levels": rows,
    }


def write_report(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--levels", default="1,8,32", help="concurrent sessions, comma-separated")
    parser.add_argument("--trials", type=int, default=10, help="first-audio trials")
    parser.add_argument("--reply", default=LOAD_REPLY, help="what each concurrent session speaks")
    parser.add_argument("--batch", type=int, help="KOKORO_BATCH of the batched server (default: the backend's)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU when there is no GPU (testing)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    levels = [int(x) for x in args.levels.split(",") if x.strip()]

    problem = gpu_problem()
    if problem and not args.allow_cpu:
        print(f"gpu-check: needs an NVIDIA GPU with a CUDA 12 driver (>= 525): {problem}", file=sys.stderr)
        return 2
    device = "cpu" if problem else "cuda"

    from kokoro_tts.engine.backends import torch_weights
    from kokoro_tts.weights.layout import WeightLayout

    from scripts.weights.derive import derive_torch

    layout = WeightLayout(model_dir())
    if not (layout.root / "kokoro-v1_0.pth").is_file():
        derive_torch(layout.root)
    os.environ.update(KOKORO_BACKEND="torch", KOKORO_DEVICE=device)
    os.environ.setdefault("KOKORO_WORKERS", "1")
    # Two servers, each with half of what is left: batching as configured (the backend's default), then without.
    half = (started + BUDGET_S - time.monotonic()) / 2
    batching = {"KOKORO_BATCH": str(args.batch)} if args.batch else None
    with local_server(ready_timeout_s=min(300, half / 2), env=batching) as url:
        health = checked_health(url, device)
        first = asyncio.run(first_audio(url, args.trials))
        batched = asyncio.run(streams(url, health["batch"], levels, args.reply, started + BUDGET_S - half))
    with local_server(ready_timeout_s=min(300, half / 2), env={"KOKORO_BATCH": "1"}) as url:
        unbatched = asyncio.run(streams(url, 1, levels, args.reply, started + BUDGET_S))
    gain = batched["throughput_audio_s_per_s"] / max(unbatched["throughput_audio_s_per_s"], 1e-9)
    document = {
        "run": {
            "device": device,
            "note": None if device == "cuda" else f"CPU run for testing the check itself ({problem})",
            "weights": torch_weights(layout).name,
            "workers": int(os.environ["KOKORO_WORKERS"]),
            "wall_s": round(time.monotonic() - started, 1),
        },
        "machine": {"cores": os.cpu_count(), "arch": platform.machine(), **gpu_info()},
        "health": health,
        "first_audio": first,
        "reply": args.reply,
        "streams": {"batched": batched, "unbatched": unbatched, "batching_gain": round(gain, 2)},
    }
    write_report(args.out, document)
    print(
        f"gpu-check: wrote {args.out} ({device}, {batched['slots']} stream slots with batches of {batched['batch']}, "
        f"{unbatched['slots']} without; {document['run']['wall_s']} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
