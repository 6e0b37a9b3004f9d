"""`python -m scripts.bench --quick` end to end: the real server and model, every section, every output file."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kokoro_client.audio import BYTES_PER_SECOND, SAMPLE_RATE
from kokoro_client.protocol import Error, SynthesisComplete, encode
from kokoro_tts.audio.encoding import FORMATS
from websockets.asyncio.server import ServerConnection, serve

from scripts.bench.client import played_out_ms, underruns, ws_once
from scripts.bench.load import REAL_TIME_TTFA_P95_MS, real_time_streams

REPO = Path(__file__).resolve().parents[2]
SECTIONS = ("isolated_tts", "end_to_end", "transport", "load", "peer", "roofline")


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
        timeout=540,  # about 2 minutes on 2 idle cores; a CI machine shared with other jobs is slower
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
    check_load(results["load"])
    end_to_end = results["end_to_end"]
    assert end_to_end["measured"], end_to_end["headline"]
    assert set(end_to_end["modes"]) == {"bidi", "batch", "bidi, windowing off"}
    assert [row["mode"] for row in end_to_end["heard_to_end"]] == ["bidi", "bidi, windowing off"]
    assert all(row["underruns"] >= 0 for row in end_to_end["heard_to_end"])
    check_roofline(results["roofline"])
    peer = results["peer"]  # kokoro-onnx against ours: measured in --quick too, never skipped for time
    assert peer["library"].startswith("kokoro-onnx ") and peer["per_sentence_ratio_mean"] > 0, peer["headline"]
    assert [row["ours_ms"] > 0 and row["kokoro_onnx_ms"] > 0 for row in peer["per_sentence"]] == [True, True]
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


def check_roofline(roofline: dict[str, Any]) -> None:
    """The model's work per second of audio is the model's (the generator about 24.6 G MACs, nearly all 8-bit), the
    ceiling follows from it and the peaks, and the fraction is the engine's share of it."""
    assert roofline["measured"] and roofline["audio_s"] > 2
    stages = {row["stage"]: row for row in roofline["stages"]}
    assert list(stages) == ["front", "features", "generator"]
    generator = stages["generator"]
    assert 22 < generator["int8_gmacs_per_audio_s"] + generator["float_gmacs_per_audio_s"] < 27, generator
    assert generator["int8_share_pct"] > 95 and stages["features"]["int8_share_pct"] > 95
    per_audio_s = sum(
        row["int8_gmacs_per_audio_s"] / roofline["int8_peak_gmacs_per_s"]
        + row["float_gmacs_per_audio_s"] / roofline["float_peak_gmacs_per_s"]
        for row in stages.values()
    )
    assert abs(roofline["ceiling_audio_s_per_s"] * per_audio_s - 1) < 0.02, roofline
    assert 0 < roofline["fraction"] < 1
    assert abs(roofline["fraction"] * roofline["ceiling_audio_s_per_s"] / roofline["engine_audio_s_per_s"] - 1) < 0.02
    # The headline rounds the exact fraction and the JSON keeps three decimals of it: they may part by one.
    quoted = re.search(r"(\d+) % of this CPU's roofline", roofline["headline"])
    assert quoted and abs(int(quoted[1]) - 100 * roofline["fraction"]) <= 0.6, roofline["headline"]


def check_load(load: dict[str, Any]) -> None:
    """The load section's figures agree with each other and with the server's own counters (its /metrics)."""
    policies = load["policies"]
    assert list(policies) == ["default", "windowing_off"]  # --quick runs no server without stream slots
    # The server as it ships measured its throughput at warm-up and sized its stream slots from it.
    assert policies["default"]["stream_limit"] >= 1 and policies["default"]["stream_throughput"] > 0
    for policy in policies.values():
        levels = policy["levels"]
        assert [level["sessions"] for level in levels] == [1, 2]
        for level in levels:
            check_level(level)
        # The largest level all served, quick enough and never dry; a level with refusals does not count.
        real_time = [
            level["sessions"]
            for level in levels
            if level["refused"] == 0
            and level["sessions_ran_dry"] == 0
            and level["ttfa_p95_ms"] <= load["real_time_ttfa_p95_ms"]
        ]
        assert policy["real_time_streams"] == max(real_time, default=0), policy
        assert f"{policy['real_time_streams']} " in load["headline"] and policy["server"] in load["headline"]
    assert load["headline"].startswith(
        f"real-time streams on this machine: {policies['default']['real_time_streams']} at p95 first audio ≤ 300 ms "
        "with no session running dry"
    ), load["headline"]


def check_level(level: dict[str, Any]) -> None:
    # Every session served or refused, none accepted and lost; the server counted the same.
    assert level["served"] + level["refused"] == level["sessions"] and level["lost"] == 0, level
    assert level["server_utterances"] == level["served"], level
    assert level["server_refused"] == level["refused"], level
    assert (level["refused_after_ms_max"] is None) == (level["refused"] == 0), level
    assert 0 <= level["queue_depth_p95"] <= level["queue_depth_max"], level
    assert level["streams_in_use_max"] <= level["sessions"], level
    if level["served"]:
        assert 0 < level["ttfa_p50_ms"] <= level["ttfa_p95_ms"], level
        assert 0 <= level["sessions_ran_dry"] <= level["served"] and level["underrun_ms_max"] >= 0, level
        # What a first audio cost a worker (the server's job counters), and the floor that puts under the p95.
        assert level["first_job_ms"] > 0 and level["ttfa_p95_floor_ms"] >= level["first_job_ms"], level


def test_a_level_counts_as_real_time_only_when_everyone_was_served_in_time_and_never_ran_dry() -> None:
    def level(sessions: int, p95: float, dry: int = 0, refused: int = 0) -> dict[str, Any]:
        return {"sessions": sessions, "ttfa_p95_ms": p95, "sessions_ran_dry": dry, "refused": refused}

    quick = REAL_TIME_TTFA_P95_MS - 1
    assert real_time_streams([level(1, quick), level(2, quick), level(4, quick, refused=1)]) == 2
    assert real_time_streams([level(1, quick), level(2, quick, dry=1), level(4, quick)]) == 4
    assert real_time_streams([level(1, REAL_TIME_TTFA_P95_MS + 1)]) == 0


@asynccontextmanager
async def fake_tts(answer: Callable[[ServerConnection], Awaitable[None]]) -> AsyncIterator[str]:
    """A WebSocket server on loopback that answers each session's first message with ``answer``; its base URL."""

    async def handler(ws: ServerConnection) -> None:
        await ws.recv()
        await answer(ws)
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"http://127.0.0.1:{port}"


def test_ws_once_takes_server_busy_as_a_refusal_and_raises_on_any_other_error() -> None:
    async def busy(ws: ServerConnection) -> None:
        await asyncio.sleep(0.05)
        await ws.send(encode(Error("server_busy", "All 1 streams are in use", "0", 4)))

    async def too_long(ws: ServerConnection) -> None:
        await ws.send(encode(Error("text_too_long", "The text is too long", "0")))

    async def main() -> None:
        async with fake_tts(busy) as url:
            refusal = await ws_once(url, "Hello.", busy_ok=True)
            assert refusal.refused and refusal.refused_ms is not None and refusal.refused_ms >= 50
            with pytest.raises(RuntimeError, match="server_busy"):
                await ws_once(url, "Hello.")  # not asked to take it as a refusal
        async with fake_tts(too_long) as url:
            with pytest.raises(RuntimeError, match="text_too_long"):
                await ws_once(url, "Hello.", busy_ok=True)

    asyncio.run(main())


def test_ws_once_plays_out_before_it_hangs_up() -> None:
    """With ``play_out`` the session stays open until its audio has played (the server frees its stream slot then),
    while total_ms is still when the last audio arrived."""
    closed: list[float] = []
    audio = bytes(int(0.3 * BYTES_PER_SECOND) // 2 * 2)  # 300 ms of PCM, sent at once

    async def speak(ws: ServerConnection) -> None:
        await ws.send(audio)
        await ws.send(encode(SynthesisComplete("0", 300.0, 10.0, len(audio))))
        await ws.wait_closed()
        closed.append(time.perf_counter())

    async def main() -> None:
        async with fake_tts(speak) as url:
            sample = await ws_once(url, "Hello.", play_out=True)
        assert not sample.refused and sample.audio_s == pytest.approx(0.3, abs=0.01)
        assert sample.total_ms < 250, sample
        assert closed and closed[0] - sample.sent_at >= 0.3  # the server's handlers have ended by now

    asyncio.run(main())
    assert played_out_ms([(0.0, 300.0), (350.0, 1000.0)]) == 1350.0 and played_out_ms([]) == 0.0


def test_underruns_count_where_the_player_runs_dry() -> None:
    # (arrival ms, audio ms): the second chunk comes 50 ms after the first has played out; the third in time.
    assert underruns([(0.0, 300.0), (350.0, 1000.0), (1200.0, 500.0)]) == (1, 50.0)
    assert underruns([(0.0, 300.0), (100.0, 300.0), (599.0, 10.0)]) == (0, 0.0)
    assert underruns([]) == (0, 0.0)
