"""Sessions whose clients flood bad frames without reading, then vanish: each frees its slot.

A client that sends without reading fills the server's send buffer (each bad frame gets an error that the client
never reads), so the session blocks in its send while Hypercorn's read loop blocks on the session's full queue.
The client then aborts the connection (SO_LINGER 0: a reset, no close handshake). Real Hypercorn, raw sockets on
loopback; every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from kokoro_tts.server import hypercorn_hardening
from support.inproc_server import RunningServer
from support.ws_client import Transcript, receive_until
from websockets.asyncio.client import connect

FLOODERS = 8  # the KOKORO_MAX_SESSIONS=8: every slot taken by a client that floods and vanishes
MAX_FRAMES = 400_000  # per client: far more than the buffers on the way hold
FLOOD_WITHIN_S = 60.0
SEND_STALL_S = 2.0  # a send blocked this long: the server has stopped reading this connection

BAD_FRAMES = {
    "/invocations-bidirectional-stream": json.dumps({"type": "sing-" + "x" * 200}).encode(),
    "/v1/speak": json.dumps({"type": "Sing-" + "x" * 200}).encode(),
}


def _masked_text_frame(payload: bytes) -> bytes:
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x81])
    if size < 126:
        head += bytes([0x80 | size])
    elif size < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", size)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _open_websocket(port: int, path: str, small_buffer: bool = True) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if small_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fill the server's send side sooner
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head and len(head) < 8192:
        chunk = sock.recv(1)  # one byte at a time: nothing past the handshake is read
        if not chunk:
            break
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head[:200]
    return sock


def flood_and_vanish(port: int, path: str) -> int:
    """Sends bad frames without reading until a send stalls, then resets the connection; returns frames sent."""
    sock = _open_websocket(port, path)
    frame = _masked_text_frame(BAD_FRAMES[path])
    sock.settimeout(SEND_STALL_S)
    sent, deadline = 0, time.monotonic() + FLOOD_WITHIN_S
    try:
        while sent < MAX_FRAMES and time.monotonic() < deadline:
            sock.sendall(frame)
            sent += 1
        raise AssertionError(f"the server kept reading {sent} frames from a client that reads nothing")
    except TimeoutError:
        pass  # the send stalled: the server has stopped reading, as intended
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset: no close frame, no FIN
    return sent


@pytest.fixture
def eight_session_slots(server: RunningServer) -> Iterator[int]:
    """The shared server's session cap set to what is open now plus eight (KOKORO_MAX_SESSIONS=8 for this test)."""
    sessions = server.engine.sessions
    ceiling = sessions.ceiling
    baseline = sessions.count
    sessions.ceiling = baseline + FLOODERS
    try:
        yield baseline
    finally:
        sessions.ceiling = ceiling


async def _sessions_back_to(server: RunningServer, baseline: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if server.engine.sessions.count <= baseline:
            return True
        await asyncio.sleep(0.1)
    return server.engine.sessions.count <= baseline


@pytest.mark.parametrize("path", list(BAD_FRAMES))
async def test_clients_that_flood_and_vanish_free_their_session_slots(
    server: RunningServer, eight_session_slots: int, path: str
) -> None:
    baseline = eight_session_slots
    sent = await asyncio.gather(*(asyncio.to_thread(flood_and_vanish, server.port, path) for _ in range(FLOODERS)))
    assert all(n > 0 for n in sent)
    assert await _sessions_back_to(server, baseline, within=20), (
        f"{server.engine.sessions.count - baseline} of {FLOODERS} vanished clients still hold a session slot"
    )
    # And a new session on each path is accepted and answers.
    async with connect(server.ws_url, open_timeout=10) as ws:
        await ws.send(json.dumps({"text": "Still here."}))
        transcript = Transcript()
        await receive_until(ws, transcript, lambda frame: frame["type"] == "synthesis_complete", limit_s=60)
    async with connect(f"ws://127.0.0.1:{server.port}/v1/speak", open_timeout=10) as ws:
        metadata = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert metadata["type"] == "Metadata"


SHORT_SEND_TIMEOUT_S = 3.0


@pytest.fixture
def short_send_timeout(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(hypercorn_hardening, "SEND_TIMEOUT_S", SHORT_SEND_TIMEOUT_S)
    return SHORT_SEND_TIMEOUT_S


def flood_and_stay(port: int, path: str) -> socket.socket:
    """As ``flood_and_vanish``, but the client stays connected, reading nothing."""
    sock = _open_websocket(port, path)
    frame = _masked_text_frame(BAD_FRAMES[path])
    sock.settimeout(SEND_STALL_S)
    deadline = time.monotonic() + FLOOD_WITHIN_S
    try:
        while time.monotonic() < deadline:
            sock.sendall(frame)
    except TimeoutError:
        return sock
    except OSError:  # the server may already have reset it
        return sock
    raise AssertionError("the server kept reading from a client that reads nothing")


@pytest.mark.parametrize("path", list(BAD_FRAMES))
async def test_a_client_that_reads_nothing_is_dropped_after_the_send_timeout(
    server: RunningServer, eight_session_slots: int, short_send_timeout: float, path: str
) -> None:
    sock = await asyncio.to_thread(flood_and_stay, server.port, path)
    try:
        assert await _sessions_back_to(server, eight_session_slots, within=short_send_timeout + 10)
    finally:
        sock.close()


def read_audio_at_playback_pace(port: int, text: str) -> tuple[int, str]:
    """A session client that reads as a player would: from its first bytes, no more than the 24 kHz PCM played so
    far and half a second ahead (its jitter buffer), a quarter second at a time; returns the bytes read and how
    it ended ("complete" when synthesis_complete came). It answers no ping, so the server judges it by its socket."""
    sock = _open_websocket(port, "/invocations-bidirectional-stream", small_buffer=False)
    sock.sendall(_masked_text_frame(json.dumps({"text": text}).encode()))
    received, deadline = bytearray(), time.monotonic() + 180
    sock.settimeout(60)
    ended, began = "deadline", 0.0
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(12_000)
            if not chunk:
                ended = "closed"
                break
            received += chunk
            if b'"synthesis_complete"' in received[-4096:]:
                ended = "complete"
                break
            began = began or time.monotonic()
            played_s = time.monotonic() - began
            time.sleep(max(0.0, len(received) / (24_000 * 2) - 0.5 - played_s))
    except OSError as error:
        ended = repr(error)
    finally:
        sock.close()
    return len(received), ended


async def test_a_client_reading_audio_at_playback_pace_gets_all_of_it(
    server: RunningServer, short_send_timeout: float
) -> None:
    text = " ".join(["This sentence is spoken to a client that reads its audio no faster than it plays."] * 2)
    size, ended = await asyncio.to_thread(read_audio_at_playback_pace, server.port, text)
    assert ended == "complete", f"the session ended ({ended}) after {size} bytes"
    assert size > 2 * SHORT_SEND_TIMEOUT_S * 24_000 * 2  # audio sent over twice the send timeout and more
