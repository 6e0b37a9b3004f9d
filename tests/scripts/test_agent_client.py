"""`python -m scripts.agent_client` (against a URL, and against an AgentCore ARN through a stand-in boto3 client),
with stand-in TTS transports: no model needed."""

from __future__ import annotations

import json
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from support.agent_fixtures import FAST, AgentServer, FakeBatch, FakeTTS, agent_settings, make_model

from scripts import agent_client as cli


def test_demo_against_a_url_prints_both_modes_and_the_ratio_and_writes_wavs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = AgentServer(agent_settings("http://unused"), make_model(**FAST), transport=FakeTTS(), batch=FakeBatch())
    with fake.running() as agent:
        with pytest.raises(SystemExit) as exited:
            cli.main(["--url", agent.url, "--trials", "2", "--out", str(tmp_path), "--prompt", "Hi"])
    out = capsys.readouterr().out
    assert exited.value.code == 0, out
    assert "model: scripted (simulated LLM: it ignores the prompt)" in out
    assert len([line for line in out.splitlines() if line.startswith("[") and "first audio" in line]) == 4
    assert "bidi   time to first audio: mean" in out and "n=2" in out
    assert "batch / bidi = " in out
    for mode in ("bidi", "batch"):
        with wave.open(str(tmp_path / f"demo-{mode}.wav")) as wav:
            assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 24000)
            assert wav.getnframes() > 0


def test_demo_reports_errors_and_exits_nonzero(capsys: pytest.CaptureFixture[str]) -> None:
    down = FakeTTS(refuse=True)
    fake = AgentServer(agent_settings("http://unused"), make_model(**FAST), transport=down, batch=FakeBatch())
    with fake.running() as agent:
        with pytest.raises(SystemExit) as exited:
            cli.main(["--url", agent.url, "--mode", "bidi"])
    assert exited.value.code == 1
    assert "ERROR tts_unavailable" in capsys.readouterr().out


class _StreamingBody:
    def __init__(self, data: bytes) -> None:
        self.data, self.closed = data, False

    def iter_chunks(self, chunk_size: int) -> Iterator[bytes]:
        for i in range(0, len(self.data), 7):  # small, odd pieces: events are cut anywhere
            yield self.data[i : i + 7]

    def close(self) -> None:
        self.closed = True


class _AgentCoreClient:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.body = _StreamingBody(b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events))
        self.calls: list[dict[str, Any]] = []

    def invoke_agent_runtime(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {"response": self.body, "contentType": "text/event-stream"}


async def test_arn_invoker_reads_the_streamed_sse_body(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        {"type": "agent_start", "t_ms": 0, "mode": "bidi", "model": "m"},
        {"type": "audio_chunk", "t_ms": 5, "audio": "AAA=", "format": "pcm", "sample_rate": 24000, "seq": 0},
        {"type": "agent_end", "t_ms": 9, "metrics": {}},
    ]
    client = _AgentCoreClient(events)
    regions: list[str | None] = []

    def fake_client(service: str, region_name: str | None = None) -> _AgentCoreClient:
        assert service == "bedrock-agentcore"
        regions.append(region_name)
        return client

    monkeypatch.setattr(boto3, "client", fake_client)
    arn = "arn:aws:bedrock-agentcore:eu-west-1:123456789012:runtime/voice-agent-abc"
    invoke = cli.arn_invoker(arn, qualifier="DEFAULT")
    trial = await cli.run_trial(invoke, {"prompt": "Hi", "mode": "bidi"})
    assert [e["type"] for e in trial.events] == ["agent_start", "audio_chunk", "agent_end"]
    assert trial.first_audio_s is not None and bytes(trial.pcm) == b"\x00\x00"
    call = client.calls[0]
    assert call["agentRuntimeArn"] == arn and call["qualifier"] == "DEFAULT"
    assert len(call["runtimeSessionId"]) >= 33 and json.loads(call["payload"]) == {"prompt": "Hi", "mode": "bidi"}
    assert regions == ["eu-west-1"]
    assert client.body.closed


def test_botocore_knows_invoke_agent_runtime() -> None:
    keys = {"aws_access_key_id": "x", "aws_secret_access_key": "y"}
    client = boto3.client("bedrock-agentcore", region_name="us-east-1", **keys)  # type: ignore[call-overload]
    assert hasattr(client, "invoke_agent_runtime")
