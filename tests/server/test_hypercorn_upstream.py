"""Hypercorn still needs server/hypercorn_hardening.py: the same small app on Hypercorn bare and hardened, side by
side. Each bare assertion is a bug upstream still has; when one fails, upstream has fixed it and the fix can go
(with its half of the test). Fixes 4 and 5 (a flooding client that resets, a client that never reads) are held by
test_stuck_sockets.py against the hardened server only.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kokoro_tts.server import hypercorn_hardening
from support.bare_hypercorn import KEEP_ALIVE_S, MAX_MESSAGE_BYTES
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from scripts.servers import free_port, started, wait_ready

APP = Path(__file__).resolve().parents[1] / "support" / "bare_hypercorn.py"


@pytest.fixture(scope="module", params=["bare", "hardened"])
def hypercorn(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """(mode, port) of the small app on Hypercorn in a child process."""
    port = free_port()
    argv = [sys.executable, str(APP), str(port), request.param]
    with started(argv, env=dict(os.environ), output=subprocess.DEVNULL) as proc:
        wait_ready(f"http://127.0.0.1:{port}", proc, timeout_s=60)
        yield request.param, port


def test_a_closed_connection_is_closed_at_once_not_after_the_keep_alive(hypercorn: tuple[str, int]) -> None:
    mode, port = hypercorn
    with socket.create_connection(("127.0.0.1", port), timeout=3 * KEEP_ALIVE_S) as client:
        client.sendall(b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = b""
        while not answer.endswith(b"ok"):
            answer += client.recv(4096)
        client.shutdown(socket.SHUT_WR)  # the client is done
        start = time.monotonic()
        assert client.recv(4096) == b""
        held_s = time.monotonic() - start
    if mode == "bare":
        assert held_s > 0.75 * KEEP_ALIVE_S, f"upstream now closes at once ({held_s:.2f} s): fix 1 can go"
    else:
        assert held_s < 0.25 * KEEP_ALIVE_S, held_s


def test_permessage_deflate_is_declined(hypercorn: tuple[str, int]) -> None:
    mode, port = hypercorn

    async def extensions() -> str | None:
        async with connect(f"ws://127.0.0.1:{port}/", compression="deflate") as ws:
            assert ws.response is not None
            return ws.response.headers.get("Sec-WebSocket-Extensions")

    agreed = asyncio.run(extensions())
    if mode == "bare":
        assert agreed and "permessage-deflate" in agreed, f"upstream now declines deflate ({agreed}): fix 2 can go"
    else:
        assert agreed is None


def test_an_oversize_message_is_answered_and_the_session_goes_on(hypercorn: tuple[str, int]) -> None:
    mode, port = hypercorn

    async def exchange() -> list[str]:
        heard: list[str] = []
        async with connect(f"ws://127.0.0.1:{port}/", compression=None, close_timeout=1) as ws:
            try:
                for text in ("x" * (2 * MAX_MESSAGE_BYTES), "after"):
                    await ws.send(text)
                    heard.append(str(await asyncio.wait_for(ws.recv(), 5)))
            except (ConnectionClosed, TimeoutError) as exc:
                heard.append(type(exc).__name__)
        return heard

    heard = asyncio.run(exchange())
    if mode == "bare":
        assert heard[-1] in ("ConnectionClosedError", "ConnectionClosedOK", "TimeoutError"), (
            f"upstream now goes on after an oversize message ({heard}): fix 3 can go"
        )
    else:
        assert heard == ["oversize", "after"]


def test_the_fixes_refuse_a_hypercorn_they_were_not_written_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hypercorn_hardening.importlib.metadata, "version", lambda name: "0.19.0")
    with pytest.raises(hypercorn_hardening.UnvettedHypercorn, match=r"Hypercorn 0\.19\.0 is installed"):
        hypercorn_hardening.apply()
