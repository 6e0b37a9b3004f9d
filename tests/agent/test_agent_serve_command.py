"""`voice-agent serve` (what `make agent` runs) as a new user meets it: the checks before it starts, each a single
line with the fix, its help text, and its log (each line once)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from support.inproc_server import RunningServer
from support.repo import REPO, make_dry_run
from voice_agent.settings import environment

from scripts.servers import free_port, wait_ready


def voice_agent() -> str:
    script = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin" / "voice-agent"
    return str(script) if script.exists() else shutil.which("voice-agent") or "voice-agent"


def run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [voice_agent(), "serve", *args],
        env={**os.environ, "TTS_ENDPOINT_NAME": "", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_a_tts_server_it_says_start_make_serve_and_exits_1() -> None:
    closed = free_port()  # nothing listens here
    result = run_serve("--port", str(free_port()), env={"TTS_URL": f"http://127.0.0.1:{closed}"})
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert f"no TTS server answers at http://127.0.0.1:{closed}/ping" in lines[0] and "make serve" in lines[0]


def test_a_taken_port_is_one_line_before_anything_else() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_serve("--port", str(port), "--no-tts-check")
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert f"port {port} on 127.0.0.1 is already in use" in lines[0] and "PORT=" in lines[0]
    assert "Traceback" not in lines[0] and "web page" not in lines[0]


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("AGENT_MAX_TOKENS", "many", "expected an integer"),
        ("TTS_IDLE_TIMEOUT_S", "30s", "expected a number"),
        ("AGENT_WEB_PAGE", "yes", "use 1 (on) or 0 (off)"),  # 0/1, as the server's settings take
        ("AGENT_PORT", "http", "expected an integer"),
    ],
)
def test_a_bad_setting_is_one_line_naming_its_variable(variable: str, value: str, says: str) -> None:
    result = run_serve("--no-tts-check", env={variable: value})
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert lines == [f"voice-agent: {variable}={value!r}: {says}"], lines


def test_make_agent_listens_on_8081_beside_make_serve_on_8080() -> None:
    command = make_dry_run("agent")[-1]
    assert "voice-agent serve" in command and "--port 8081" in command, command
    assert "TTS_URL=http://127.0.0.1:8080" in command, command
    assert "--port 8080" in make_dry_run("serve")[-1]


def test_help_describes_each_option_and_every_environment_variable() -> None:
    result = run_serve("--help")
    assert result.returncode == 0
    text = result.stdout
    assert "make serve" in text  # the TTS server comes first
    for option in ("--host", "--port", "--no-tts-check"):
        described = re.search(rf"^\s+{option}( [A-Z]+)?\s+\S", text, re.MULTILINE)
        assert described, f"{option} has no description:\n{text}"
    # Every variable is declared once (settings.py) and listed with its description; nothing reads one by hand.
    agent_source = "".join(path.read_text() for path in (REPO / "agent" / "voice_agent").rglob("*.py"))
    assert not re.search(r"os\.environ|os\.getenv", agent_source), "read the environment through settings.py"
    listed = environment()
    assert {"AGENT_MODEL", "TTS_URL", "AGENT_PORT", "LOG_LEVEL"} <= set(listed)
    for name in listed:
        assert re.search(rf"^\s+{name}\s+\S", text, re.MULTILINE), f"{name} is not described"


@pytest.mark.slow
def test_each_log_line_is_printed_once(server: RunningServer) -> None:
    """`voice-agent serve` prints each log line once, in its own format: the AgentCore SDK's logger goes through the
    root handler only, not through the SDK's JSON handler as well."""
    port = free_port()
    env = {**os.environ, "TTS_URL": server.base_url, "TTS_ENDPOINT_NAME": "", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [voice_agent(), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, timeout_s=60)
        # A bad mode passes the body guard and reaches the SDK, which logs the request (its reply is an error event).
        response = httpx.post(f"http://127.0.0.1:{port}/invocations", json={"prompt": "hi", "mode": "x"}, timeout=10)
        assert response.status_code == 200 and "unknown_mode" in response.text, response.text
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert output.count("voice agent on 127.0.0.1") == 1, output
    # The SDK logs how the invocation ended: once, in our format (no second copy from its JSON handler).
    sdk_lines = [line for line in output.splitlines() if "streaming response" in line]
    assert len(sdk_lines) == 1, output
    assert " bedrock_agentcore" in sdk_lines[0], output
