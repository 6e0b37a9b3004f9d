"""The agent's GET /metrics, its trace spans (on only where an OpenTelemetry SDK is configured) and its JSON log
lines, on the real app, the scripted model and the real TTS server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.agent_fixtures import FAST, AgentServer, TCPProxy, agent_settings, invoke, make_model
from support.inproc_server import RunningServer

from scripts.scrape import moved, scrape, value
from scripts.servers import free_port, wait_ready
from scripts.sse import post_sse

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


async def test_agent_metrics_move_with_prompts_errors_and_drops(server: RunningServer) -> None:
    with AgentServer(agent_settings(server.base_url), make_model(**FAST)).running() as agent:
        before = scrape(agent.url)
        assert not [key for key in before if key[0].startswith("kokoro_tts")]  # the agent's own registry only
        for mode in ("bidi", "batch"):
            events = await invoke(agent.url, {"prompt": "Say hello.", "mode": mode})
            assert events[-1]["type"] == "agent_end", events[-1]
        assert (await invoke(agent.url, {"prompt": "Hi", "mode": "stream"}))[0]["code"] == "unknown_mode"
        async with httpx.AsyncClient(timeout=10) as client:
            bad = await client.post(f"{agent.url}/invocations", content=b"{not json")
        assert bad.status_code == 400
        after = scrape(agent.url)

    # A TTS server lost mid-reply (the proxy stands for its process) is a dropped session.
    with TCPProxy(server.port) as proxy:
        with AgentServer(agent_settings(proxy.url), make_model(**FAST)).running() as agent:
            async with asyncio.timeout(60):
                async for event in post_sse(f"{agent.url}/invocations", {"prompt": "Hi", "mode": "bidi"}):
                    if event["type"] == "audio_chunk" and event["seq"] == 0:
                        proxy.cut()
            dropped = scrape(agent.url)

    for mode in ("bidi", "batch"):
        assert moved(before, after, "voice_agent_prompts_total", mode=mode) == 1, mode
        assert moved(before, after, "voice_agent_replies_total", mode=mode, outcome="completed") == 1, mode
        assert moved(before, after, "voice_agent_time_to_first_audio_seconds_count", mode=mode) == 1, mode
        assert moved(before, after, "voice_agent_time_to_first_audio_seconds_sum", mode=mode) > 0, mode
        assert moved(before, after, "voice_agent_time_to_first_text_seconds_count", mode=mode) == 1, mode
        assert value(after, "voice_agent_replies_in_progress", mode=mode) == 0, mode
    assert moved(before, after, "voice_agent_errors_total", code="unknown_mode") == 1
    assert moved(before, after, "voice_agent_errors_total", code="invalid_json") == 1
    assert moved(after, dropped, "voice_agent_tts_session_drops_total") == 1
    assert moved(after, dropped, "voice_agent_errors_total", code="tts_session_dropped") == 1
    assert moved(after, dropped, "voice_agent_replies_total", mode="bidi", outcome="error") == 1


def traced_prompt(tts_url: str, mode: str, *flags: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "support.traced_prompt", tts_url, mode, *flags],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return output


def test_with_tracing_a_prompt_is_one_trace_from_the_reply_down_to_strands(server: RunningServer) -> None:
    traced = traced_prompt(server.base_url, "bidi", "--tracing")
    assert traced["events"][-1] == "agent_end", traced["events"]
    spans = {span["name"]: span for span in traced["spans"]}
    reply, until_audio = spans["voice_agent.reply"], spans["voice_agent.time_to_first_audio"]
    assert reply["parent"] is None and until_audio["parent"] == reply["id"]
    assert (
        reply["attributes"]["voice_agent.mode"] == "bidi" and reply["attributes"]["voice_agent.outcome"] == "completed"
    )
    assert 0 < until_audio["attributes"]["voice_agent.first_audio_ms"] <= reply["attributes"]["voice_agent.total_ms"]
    assert reply["status"] != "ERROR" and until_audio["status"] != "ERROR"
    # Strands' own spans (the agent invocation, the model call) belong to the same trace, under the reply.
    by_id = {span["id"]: span for span in traced["spans"]}

    def root_of(span: dict[str, Any]) -> dict[str, Any]:
        while span["parent"] in by_id:
            span = by_id[span["parent"]]
        return span

    strands = [span for span in traced["spans"] if span["scope"] and span["scope"].startswith("strands")]
    assert strands, [span["name"] for span in traced["spans"]]
    assert all(span["trace"] == reply["trace"] and root_of(span) is reply for span in strands)


def test_without_tracing_nothing_is_configured_or_exported(server: RunningServer) -> None:
    untraced = traced_prompt(server.base_url, "batch")
    assert untraced["events"][-1] == "agent_end", untraced["events"]
    # The agent sets up no tracer provider of its own: the API's no-op stand-in stays, and no span is recorded.
    assert untraced["provider"] == "ProxyTracerProvider"
    assert untraced["spans"] == []


def test_serve_writes_json_lines_with_the_invocation_ids(server: RunningServer) -> None:
    """`voice-agent serve` with the image's LOG_FORMAT=json: every line a JSON object; the lines written while an
    invocation is handled carry AgentCore's request and session ids."""
    port = free_port()
    env = {**os.environ, "TTS_URL": server.base_url, "TTS_ENDPOINT_NAME": "", "LOG_FORMAT": "json"}
    command = [str(Path(sys.executable).parent / "voice-agent"), "serve", "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    session = "obs-session-0123456789-0123456789-0123"
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, timeout_s=60)
        response = httpx.post(
            f"http://127.0.0.1:{port}/invocations",
            json={"prompt": "hi", "mode": "x"},
            headers={"X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": session},
            timeout=10,
        )
        assert response.status_code == 200 and "unknown_mode" in response.text, response.text
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    lines = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert all({"timestamp", "level", "logger", "message"} <= set(line) for line in lines), output
    handled = [line for line in lines if "streaming response" in line["message"]]
    assert len(handled) == 1, output
    assert handled[0]["session_id"] == session and handled[0]["request_id"], handled[0]


def test_the_images_command_exports_one_trace_per_invocation() -> None:
    """The image's command, `opentelemetry-instrument voice-agent serve` with ADOT, its spans printed by the console
    exporter instead of sent to X-Ray: the reply's span sits under the HTTP server span, Strands' under it. (No TTS
    server: the reply ends in tts_unavailable, which its spans say.)"""
    port = free_port()
    env = {
        **os.environ,
        "OTEL_PYTHON_DISTRO": "aws_distro",
        "OTEL_PYTHON_CONFIGURATOR": "aws_configurator",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "TTS_URL": f"http://127.0.0.1:{free_port()}",  # nothing listens there
        "TTS_ENDPOINT_NAME": "",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",  # no batch leaves on its timer: the last ones must be flushed at exit
    }
    bin_dir = Path(sys.executable).parent
    command = [str(bin_dir / "opentelemetry-instrument"), str(bin_dir / "voice-agent"), "serve", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--no-tts-check"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, timeout_s=90)
        response = httpx.post(f"http://127.0.0.1:{port}/invocations", json={"prompt": "Hi"}, timeout=30)
        assert "tts_unavailable" in response.text, response.text
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := output.find("{", at)) >= 0:  # the console exporter prints indented JSON objects, one per span
        span, at = decoder.raw_decode(output, at)
        spans.append(span)
    by_id = {span["context"]["span_id"]: span for span in spans}
    assert "voice_agent.reply" in [span["name"] for span in spans], output[-3000:]
    reply = next(span for span in spans if span["name"] == "voice_agent.reply")
    assert by_id[reply["parent_id"]]["name"] == "POST /invocations"
    assert reply["attributes"]["voice_agent.error_code"] == "tts_unavailable"
    children = {span["name"] for span in spans if span["parent_id"] == reply["context"]["span_id"]}
    assert "voice_agent.time_to_first_audio" in children
    assert any(name.startswith("invoke_agent") for name in children), children
