"""How the server runs onnxruntime (backends/ort_sessions.py): a graph loaded for a job alone on every core and
for jobs side by side, one core each, giving the same audio."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from kokoro_tts.backends.ort_sessions import RUN_OPTIONS, SessionPair
from kokoro_tts.backends.threads import run_as
from kokoro_tts.weights.layout import DECODER_GRAPH


def test_a_job_alone_gets_every_core_and_jobs_side_by_side_one_each(model_dir: Path) -> None:
    # Two cores asked for explicitly, so the test means the same on any machine.
    pair = SessionPair(model_dir / DECODER_GRAPH, threads=2, parallel=2, providers=["CPUExecutionProvider"])
    lone, beside = pair.get(), run_as(pair.get, alone=False)
    assert lone is not beside
    assert lone.get_session_options().intra_op_num_threads == 2
    assert beside.get_session_options().intra_op_num_threads == 1

    rng = np.random.default_rng(0)
    feeds = {  # 10 aligned frames of made-up features: the same input to both sessions
        "features": rng.standard_normal((1, 512, 20), dtype=np.float32),
        "harmonics": rng.standard_normal((1, 22, 1201), dtype=np.float32),
        "style": rng.standard_normal((1, 256), dtype=np.float32) * 0.1,
    }
    (alone_audio,) = lone.run(["audio"], feeds, RUN_OPTIONS)
    (beside_audio,) = beside.run(["audio"], feeds, RUN_OPTIONS)
    assert np.asarray(alone_audio).size == 10 * 600
    np.testing.assert_allclose(beside_audio, alone_audio, atol=1e-4)


def test_one_worker_or_a_set_thread_count_loads_the_graph_once(model_dir: Path) -> None:
    pair = SessionPair(model_dir / DECODER_GRAPH, threads=1, parallel=2, providers=["CPUExecutionProvider"])
    assert pair.get() is run_as(pair.get, alone=False)
