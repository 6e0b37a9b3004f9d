"""How the server runs onnxruntime (backends/ort_sessions.py): a graph loaded for a job alone on every core and
for jobs side by side, one core each, giving the same audio; the stage graphs' int8 build only on a CPU that
computes it exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kokoro_tts.engine.backends import onnx as onnx_backend
from kokoro_tts.engine.backends.ort_sessions import RUN_OPTIONS, SessionPair, exact_int8_dot_products
from kokoro_tts.engine.backends.stages import NormPool
from kokoro_tts.weights.layout import DECODER_GRAPH, WeightLayout


def test_a_job_alone_gets_every_core_and_jobs_side_by_side_one_each(model_dir: Path) -> None:
    # Two cores asked for explicitly, so the test means the same on any machine.
    pair = SessionPair(model_dir / DECODER_GRAPH, threads=2, parallel=2, providers=["CPUExecutionProvider"])
    lone, beside = pair.get(every_core=True), pair.get(every_core=False)
    assert lone is not beside
    assert lone.get_session_options().intra_op_num_threads == 2
    assert beside.get_session_options().intra_op_num_threads == 1
    # A job runs several graphs in a row: no session's threads spin on after its run (ort_sessions.py).
    assert lone.get_session_options().get_session_config_entry("session.force_spinning_stop") == "1"

    rng = np.random.default_rng(0)
    feeds = {  # 10 aligned frames of made-up features: the same input to both sessions
        "features": rng.standard_normal((1, 512, 20), dtype=np.float32),
        "harmonics": rng.standard_normal((1, 22, 1201), dtype=np.float32),
        "style": rng.standard_normal((1, 256), dtype=np.float32) * 0.1,
    } | NormPool().feeds(10, int(lone.get_inputs()[3].shape[1]))
    (alone_audio,) = lone.run(["audio"], feeds, RUN_OPTIONS)
    (beside_audio,) = beside.run(["audio"], feeds, RUN_OPTIONS)
    assert np.asarray(alone_audio).size == 10 * 600
    np.testing.assert_allclose(beside_audio, alone_audio, atol=1e-4)


def test_one_worker_or_a_set_thread_count_loads_the_graph_once(model_dir: Path) -> None:
    pair = SessionPair(model_dir / DECODER_GRAPH, threads=1, parallel=2, providers=["CPUExecutionProvider"])
    assert pair.get(every_core=True) is pair.get(every_core=False)


@pytest.mark.parametrize(
    ("flags", "exact"),
    [
        ("fpu sse2 avx2 fma avx512f avx512bw avx512_vnni", True),  # Ice Lake, Sapphire Rapids, Zen 4
        ("fpu sse2 avx2 fma avx_vnni", True),  # Alder Lake
        ("fpu sse2 avx2 fma avx512f avx512bw", False),  # Skylake-SP: vpmaddubsw saturates
        ("fpu sse2 avx2 fma", False),  # Zen 2/3, Haswell
    ],
)
def test_int8_dot_products_are_exact_only_with_vnni(tmp_path: Path, flags: str, exact: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: x\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert exact_int8_dot_products(cpuinfo) is exact
    assert not exact_int8_dot_products(tmp_path / "absent")  # not Linux: the portable build


@pytest.mark.parametrize("exact", [True, False])
def test_the_backend_runs_the_int8_build_only_where_it_is_exact(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, exact: bool
) -> None:
    monkeypatch.setattr(onnx_backend, "exact_int8_dot_products", lambda: exact)
    loaded: list[str] = []
    monkeypatch.setattr(onnx_backend, "OnnxStages", lambda *paths, **_: loaded.extend(p.name for p in paths[:3]))
    layout = WeightLayout(model_dir)
    portable, int8 = layout.stage_graphs(), layout.stage_graphs(int8=True)
    onnx_backend.OnnxBackend(model_dir / "kokoro.onnx", device="cpu", stage_paths=portable, int8_stage_paths=int8)
    assert loaded == [path.name for path in (int8 if exact else portable)]
