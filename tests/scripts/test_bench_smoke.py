"""`python -m scripts.bench --quick` end to end: the real server and model, every section, every output file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kokoro_client.audio import SAMPLE_RATE
from kokoro_tts.audio.encoding import FORMATS

from scripts.bench.client import underruns

REPO = Path(__file__).resolve().parents[2]
SECTIONS = ("isolated_tts", "end_to_end", "transport", "load", "peer")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_bench_writes_every_section(tmp_path: Path, model_dir: Path) -> None:
    env = {**os.environ, "KOKORO_MODEL_DIR": str(model_dir)}
    result = subprocess.run(
        [sys.executable, "-m", "scripts.bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,  # the target is 2 minutes on 2 idle cores; a CI machine shared with other jobs is slower
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    results = json.loads((tmp_path / "latest.json").read_text())
    for name in SECTIONS:
        assert isinstance(results[name]["headline"], str) and results[name]["headline"], name
    assert {"cores", "cpu_model", "backend"} <= set(results["machine"])
    assert results["run"]["mode"] == "quick"

    isolated = results["isolated_tts"]
    assert set(isolated["variants"]) == {"a", "b", "c", "d", "e"}  # e: the first sentence with windowing off
    assert all(v["trials"] == 2 and v["ttfa_p50_ms"] > 0 for v in isolated["variants"].values())
    assert isolated["comparisons"]["first_window_over_whole_engine_p50"] > 0
    assert [level["sessions"] for level in results["load"]["levels"]] == [1, 2]
    assert [level["sessions"] for level in results["load"]["windowing_off"]["levels"]] == [1, 2]
    # The server's own counters (its /metrics) moved by one utterance per session; its queue depth was sampled.
    for level in results["load"]["levels"] + results["load"]["windowing_off"]["levels"]:
        assert level["server_utterances"] == level["sessions"], level
        assert 0 <= level["queue_depth_p95"] <= level["queue_depth_max"], level
        assert 0 <= level["sessions_ran_dry"] <= level["sessions"] and level["underrun_ms_max"] >= 0, level
        # What a first audio cost a worker (the server's job counters), and the floor that puts under the p95.
        assert level["first_job_ms"] > 0 and level["ttfa_p95_floor_ms"] >= level["first_job_ms"], level
    end_to_end = results["end_to_end"]
    if end_to_end["measured"]:
        assert set(end_to_end["modes"]) == {"bidi", "batch", "bidi, windowing off"}
        assert [row["mode"] for row in end_to_end["heard_to_end"]] == ["bidi", "bidi, windowing off"]
        assert all(row["underruns"] >= 0 for row in end_to_end["heard_to_end"])
    transport = results["transport"]
    assert transport["segments"] == 4
    # Every format the server speaks at the model's rate; G.711 (8 kHz telephony) is not an agent's choice here.
    assert set(transport["formats"]) == {name for name, spec in FORMATS.items() if spec.default_rate == SAMPLE_RATE}
    assert {"pcm", "flac", "opus"} <= set(transport["formats"])
    # base64 alone is 4/3 of the bytes: SSE framing costs at least a third more than binary frames.
    assert transport["formats"]["pcm"]["sse_over_ws_pct"] > 33

    markdown = (tmp_path / "latest.md").read_text()
    assert all(f"## {name}" in markdown for name in SECTIONS)
    for plot in ("isolated_tts.png", "load.png"):
        assert (tmp_path / plot).read_bytes().startswith(b"\x89PNG"), plot


def test_underruns_count_where_the_player_runs_dry() -> None:
    # (arrival ms, audio ms): the second chunk comes 50 ms after the first has played out; the third in time.
    assert underruns([(0.0, 300.0), (350.0, 1000.0), (1200.0, 500.0)]) == (1, 50.0)
    assert underruns([(0.0, 300.0), (100.0, 300.0), (599.0, 10.0)]) == (0, 0.0)
    assert underruns([]) == (0, 0.0)
