"""Start a server and wait for its /ping: the one helper the demo, the bench, the soak and the tests share."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import httpx
from kokoro_client.protocol import PING_PATH


class ServerExited(RuntimeError):
    """The server process ended before its /ping answered 200."""

    def __init__(self, returncode: int) -> None:
        super().__init__(f"the server exited with code {returncode} before it was ready")
        self.returncode = returncode


class ServerNotReady(TimeoutError):
    """/ping did not answer 200 in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (another process may still take it: retry on failure)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def serve_command() -> list[str]:
    """The TTS server's ``serve`` command of this environment."""
    serve = Path(sys.executable).parent / "serve"
    return [str(serve)] if serve.exists() else ["serve"]


def wait_ready(
    base_url: str,
    process: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None,
    timeout_s: float = 180.0,
    poll_s: float = 0.2,
    statuses: list[int] | None = None,
    ready: int = 200,
) -> None:
    """Returns once ``GET {base_url}/ping`` answers ``ready`` (503: the server listens but its model is still
    loading); ``ServerExited`` if ``process`` ends first, ``ServerNotReady`` after ``timeout_s``. Each status /ping
    answered is appended to ``statuses``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServerExited(process.returncode)
        try:
            status = httpx.get(f"{base_url}{PING_PATH}", timeout=2, trust_env=False).status_code
            if statuses is not None:
                statuses.append(status)
            if status == ready:
                return
        except httpx.TransportError:
            pass
        time.sleep(poll_s)
    raise ServerNotReady(f"{base_url}{PING_PATH} did not answer {ready} within {timeout_s:g} s")


def stop(process: subprocess.Popen[bytes] | subprocess.Popen[str], timeout_s: float = 15.0) -> bool:
    """SIGTERM (both servers shut down cleanly on it), then SIGKILL after ``timeout_s``; False if it had to kill."""
    if process.poll() is not None:
        return True
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)
        return False


@contextlib.contextmanager
def started(
    argv: Sequence[str],
    env: dict[str, str],
    *,
    output: IO[bytes] | int | None = subprocess.DEVNULL,
    cwd: Path | None = None,
    stop_timeout_s: float = 15.0,
    name: str = "the server",
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process that is always stopped when the block ends (see ``stop``)."""
    process = subprocess.Popen(list(argv), env=env, stdout=output, stderr=subprocess.STDOUT, cwd=cwd)
    try:
        yield process
    finally:
        if not stop(process, stop_timeout_s):
            print(f"{name} did not stop within {stop_timeout_s:g} s: killed it", flush=True)


@contextlib.contextmanager
def local_server(
    model_dir: Path, ready_timeout_s: float = 180.0, settings: dict[str, str] | None = None
) -> Iterator[str]:
    """The real TTS server (``serve``, Hypercorn) in a child process on a free loopback port; its base URL once
    /ping is 200. Stopped (SIGTERM, then SIGKILL) when the block ends. ``settings``: KOKORO_* variables for it."""
    port = free_port()
    env = {**os.environ, "KOKORO_MODEL_DIR": str(model_dir), **(settings or {})}
    argv = [*serve_command(), "--host", "127.0.0.1", "--port", str(port)]
    with started(argv, env, stop_timeout_s=30, name="the TTS server") as process:
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process, ready_timeout_s)
        except (ServerExited, ServerNotReady) as exc:
            raise SystemExit(f"the TTS server was not ready: {exc}") from None
        yield url
