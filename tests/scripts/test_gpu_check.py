"""make gpu-check needs a GPU, which CI lacks: here its refusal, and its report from a small run on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def gpu_check(*args: str, model_dir: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KOKORO_MODEL_DIR": str(model_dir), "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "scripts.gpu_check", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_without_a_gpu_it_refuses_with_the_reason(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    result = gpu_check("--out", str(out), model_dir=model_dir, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gpu-check: needs an NVIDIA GPU with a CUDA 12 driver" in result.stderr
    assert not out.exists()


@pytest.mark.slow
def test_a_cpu_run_writes_the_report_against_the_real_server(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    args = ("--allow-cpu", "--out", str(out), "--levels", "1,2", "--trials", "1", "--reply", "Okay then.")
    result = gpu_check(*args, "--batch", "2", model_dir=model_dir, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["run"]["device"] == "cpu" and "testing" in report["run"]["note"]
    assert report["health"]["backend"] == "torch" and report["health"]["device"] == "cpu"
    assert len(report["health"]["model_sha256"]) == 64
    assert report["first_audio"]["ttfa_p50_ms"] > 0
    assert report["health"]["batch"] == 2
    # Streams per GPU as each server measured them at warm-up, with batching across sessions and without.
    batched, unbatched = report["streams"]["batched"], report["streams"]["unbatched"]
    assert (batched["batch"], unbatched["batch"]) == (2, 1)
    for streams in (batched, unbatched):
        assert streams["throughput_audio_s_per_s"] > 0 and streams["slots"] >= 1
        levels = streams["levels"]
        assert [row["sessions"] for row in levels] == [1, 2]
        assert all(row["served"] + row["refused"] == row["sessions"] and row["lost"] == 0 for row in levels)
        assert all(row["ttfa_p50_ms"] > 0 for row in levels if row["served"])
    assert report["streams"]["batching_gain"] > 0
