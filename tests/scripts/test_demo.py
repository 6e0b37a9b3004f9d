"""The demo's audio is what a caller hears from the moment the request was sent: the wait is silence, so bidi and
batch sound different. With stand-in TTS transports (fast, exact), and once with the real `scripts/demo.py`."""

from __future__ import annotations

import array
import os
import re
import signal
import subprocess
import sys
import wave
from pathlib import Path

import httpx
import pytest
from support.agent_fixtures import FAST, AgentServer, FakeBatch, FakeTTS, agent_settings, make_model
from support.repo import REPO

from scripts import agent_client as cli

RATE = 24_000


def read_wav(path: Path) -> tuple[int, array.array[int]]:
    with wave.open(str(path)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth()) == (1, 2)
        return wav.getframerate(), array.array("h", wav.readframes(wav.getnframes()))


def leading_silence_s(path: Path) -> float:
    rate, samples = read_wav(path)
    first = next(i for i, x in enumerate(samples) if abs(x) > 0)
    return first / rate


def printed_first_audio_s(output: str, mode: str) -> float:
    found = re.search(rf"\] {mode}\s+first audio\s+(\d+) ms", output)
    assert found, output
    return int(found.group(1)) / 1000


def test_as_heard_places_each_chunk_at_its_arrival_and_keeps_underruns_silent() -> None:
    chunk = b"\x01\x00" * 2400  # 0.1 s
    trial = cli.Trial(mode="bidi", pcm=bytearray(chunk * 3), first_audio_s=0.5)
    trial.arrivals = [(0.5, 0), (0.55, len(chunk)), (1.0, 2 * len(chunk))]  # the 2nd is early, the 3rd late
    pcm, underruns = trial.as_heard()
    samples = array.array("h", pcm)
    assert samples[: int(0.5 * RATE)] == array.array("h", [0] * int(0.5 * RATE))  # the wait
    assert set(samples[int(0.5 * RATE) : int(0.7 * RATE)]) == {1}  # played back to back
    assert set(samples[int(0.7 * RATE) : RATE]) == {0}  # ran out until the 3rd chunk came
    assert len(samples) == int(1.1 * RATE)
    assert underruns == [(pytest.approx(0.7), pytest.approx(0.3))]


def test_demo_wavs_start_when_the_request_was_sent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = AgentServer(agent_settings("http://unused"), make_model(**FAST), transport=FakeTTS(), batch=FakeBatch())
    with fake.running() as agent:
        with pytest.raises(SystemExit) as exited:
            cli.main(["--url", agent.url, "--out", str(tmp_path), "--prompt", "Hi"])
    out = capsys.readouterr().out
    assert exited.value.code == 0, out
    waits = {}
    for mode in ("bidi", "batch"):
        measured = printed_first_audio_s(out, mode)
        waits[mode] = leading_silence_s(tmp_path / f"demo-{mode}.wav")
        assert waits[mode] == pytest.approx(measured, abs=0.0015), (mode, waits[mode], measured)
    # Batch waits for the whole reply (about 0.7 s of scripted LLM here): its file stays silent that much longer.
    assert waits["batch"] > waits["bidi"] + 0.3, waits
    assert (tmp_path / "demo-bidi.wav").read_bytes() != (tmp_path / "demo-batch.wav").read_bytes()
    # The comparison: bidi, a 1.5 s pause, batch; each begins with a beep where its request was sent.
    _, bidi = read_wav(tmp_path / "demo-bidi.wav")
    _, batch = read_wav(tmp_path / "demo-batch.wav")
    _, both = read_wav(tmp_path / "demo-compare.wav")
    assert len(both) == len(bidi) + int(1.5 * RATE) + len(batch)
    assert max(abs(x) for x in both[:100]) > 1000 and "demo-compare.wav" in out


def test_next_steps_name_the_files_the_page_and_make_serve_agent() -> None:
    from scripts import demo

    gone = demo.next_steps(Path("out"), None)
    assert "demo-compare.wav" in gone and "make demo KEEP=1" in gone and "http" not in gone.split("page")[1][:40]
    assert "make serve" in gone and "make agent" in gone
    assert "http://127.0.0.1:9/ (up until Ctrl-C)" in demo.next_steps(Path("out"), "http://127.0.0.1:9")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_make_demo_writes_files_that_differ_by_the_measured_wait(tmp_path: Path, model_dir: Path) -> None:
    """The real demo with --keep (`make demo KEEP=1`; about a minute on 2 cores): TTS server, agent, scripted LLM,
    both modes once; the page's URL only once it is measured and the page stays up; `kill` stops both servers."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "scripts.demo", "--keep", "--out", str(tmp_path), "--model-dir", str(model_dir)],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert demo.stdout is not None
        for line in demo.stdout:  # bounded by the test's timeout
            lines.append(line)
            if line.startswith("web page: "):
                break
        out = "".join(lines)
        assert lines and lines[-1].startswith("web page: "), out
        page = lines[-1].split()[2]
        assert httpx.get(page, timeout=10).status_code == 200  # kept up
    finally:
        demo.send_signal(signal.SIGTERM)
        rest, _ = demo.communicate(timeout=60)
    assert "stopping the servers" in rest, rest
    with pytest.raises(httpx.TransportError):
        httpx.get(page, timeout=5)  # SIGTERM stopped the agent, not only the demo
    assert "ignores the prompt" in out and "Next:" in out and "make agent" in out
    assert out.count("web page") == 1 and out.index("Next:") < out.index("web page: ")
    measured = {mode: printed_first_audio_s(out, mode) for mode in ("bidi", "batch")}
    heard = {mode: leading_silence_s(tmp_path / f"demo-{mode}.wav") for mode in ("bidi", "batch")}
    for mode in measured:  # Kokoro's audio may open with a few ms of digital silence of its own
        assert measured[mode] - 0.002 <= heard[mode] <= measured[mode] + 0.3, (mode, heard, measured)
    assert heard["batch"] - heard["bidi"] > 2.0, heard  # the scripted LLM writes for ~5 s before batch speaks
