"""A stream slot is held by a stream whose client keeps up (engine/capacity.py's ``Pace``): a client that reads its
audio slower than it plays, or not at all, gives its slot up within the margin once its socket is full, so an
honest newcomer is served; and it is told (WS: an ``error`` frame ``slow_reader`` with the utterance's id, the
session goes on; HTTP/1.1 and HTTP/2: the body is cut off without its end, never a short body that looks whole).
Real Hypercorn and model on loopback, the shared server given one slot and a small margin."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
import time
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import pytest
from kokoro_tts.engine.capacity import StreamSlots
from kokoro_tts.server import hypercorn_hardening
from support.eventually import eventually
from support.inproc_server import RunningServer
from websockets.asyncio.client import ClientConnection, connect

LONG = " ".join(f"Sentence number {n} of a long answer keeps this stream busy for a while." for n in range(1, 40))
REPLY = "Your order shipped this morning from Ohio."
# The slow clients' and the server's socket buffers kept small, and the audio the densest there is (48 kHz PCM), so
# that the server's sends wait soon even where the model makes audio no faster than it plays.
SOCKET_BUFFER = 4096
DENSE = {"format": "pcm", "sample_rate": 48_000}


@pytest.fixture
def small_lag(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A client may fall 0.5 s behind its audio; a newcomer may wait 30 s for a slot; new connections get a small
    send buffer."""
    monkeypatch.setattr(hypercorn_hardening, "SEND_BUFFER_BYTES", SOCKET_BUFFER)
    engine = server.engine
    settings = engine.settings
    engine.settings = dataclasses.replace(settings, stream_lag_s=0.5, max_first_audio_wait_s=30.0)
    try:
        yield
    finally:
        engine.settings = settings


def small_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
    return sock


async def honest_first_audio_s(server: RunningServer) -> float:
    """An honest newcomer's wait from its text to its first audio; it then hears its reply to the end."""
    async with connect(server.ws_url) as ws:
        sent = time.perf_counter()
        await ws.send(json.dumps({"type": "synthesize", "id": "honest", "text": REPLY}))
        first: float | None = None
        async with asyncio.timeout(120):
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    first = first or time.perf_counter() - sent
                    continue
                frame = json.loads(message)
                if frame["type"] in ("synthesis_complete", "error"):
                    assert frame["type"] == "synthesis_complete", frame
                    break
        assert first is not None
        return first


async def frames_to_the_end(ws: ClientConnection, until_id: str) -> list[dict[str, object]]:
    """Every JSON frame until the one ending utterance ``until_id`` (audio read and dropped)."""
    frames: list[dict[str, object]] = []
    async with asyncio.timeout(120):
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                continue
            frames.append(json.loads(message))
            if frames[-1].get("id") == until_id and frames[-1]["type"] in ("synthesis_complete", "error"):
                return frames


async def test_a_ws_client_that_stops_reading_gives_its_slot_up_and_is_told(
    server: RunningServer, one_stream: StreamSlots, small_lag: None
) -> None:
    sock = small_socket()
    sock.connect(("127.0.0.1", server.port))
    sock.setblocking(False)
    async with connect(server.ws_url, sock=sock, max_queue=1) as slow:
        await slow.send(json.dumps({"type": "config", **DENSE}))
        await slow.send(json.dumps({"type": "synthesize", "id": "slow", "text": LONG}))
        await eventually(lambda: one_stream.count, "the slow session holds the slot", 60)
        # The slow session reads nothing now: an honest newcomer is served once it has fallen behind.
        waited = await honest_first_audio_s(server)
        assert one_stream.fell_behind == 1
        assert waited < 20, waited
        frames = await frames_to_the_end(slow, "slow")  # it reads on: it is told
        assert frames[-1]["type"] == "error" and frames[-1]["code"] == "slow_reader", frames[-1]
        # The session goes on: its next utterance is served like a newcomer's.
        await slow.send(json.dumps({"type": "synthesize", "id": "again", "text": REPLY}))
        again = await frames_to_the_end(slow, "again")
        assert again[-1]["type"] == "synthesis_complete", again[-1]
    await eventually(lambda: not one_stream.count, "every slot given back", 30)


async def read_slowly(ws: ClientConnection, bytes_per_s: float, until: asyncio.Event) -> int:
    """Reads ``ws`` at ``bytes_per_s`` until ``until`` is set; the audio bytes read."""
    read = 0
    while not until.is_set():
        message = await ws.recv()
        if isinstance(message, bytes):
            read += len(message)
            await asyncio.sleep(len(message) / bytes_per_s)
    return read


async def test_a_ws_client_reading_a_fifth_of_real_time_through_big_buffers_is_caught_by_what_it_read(
    server: RunningServer, one_stream: StreamSlots, small_lag: None
) -> None:
    """The attack of issue 41: μ-law (8 KB/s) read at 1.5 KB/s through the sockets' own (default) buffers, which
    hold tens of seconds of it before the server's send waits. The client's answers to the server's pings say what
    it has read, so it gives its slot up once the margin, the 16 frames its library queues and the audio let out
    ahead of its answers are behind, not once the buffers fill too; and it is told, after the audio it was sent."""
    # Its own keepalive pings off: their answers wait behind the audio it reads slowly, and it would close itself.
    async with connect(server.ws_url, ping_interval=None) as slow:
        await slow.send(json.dumps({"type": "config", "format": "mulaw"}))
        await slow.send(json.dumps({"type": "synthesize", "id": "slow", "text": LONG}))
        await eventually(lambda: one_stream.count, "the slow session holds the slot", 60)
        honest_done = asyncio.Event()
        began = time.perf_counter()
        reading = asyncio.create_task(read_slowly(slow, 1500, honest_done))
        await eventually(lambda: one_stream.fell_behind, "the slow reader caught", 60)
        caught_s = time.perf_counter() - began
        await honest_first_audio_s(server)
        honest_done.set()
        await reading
        assert one_stream.fell_behind == 1
        # By what its socket took alone, over a minute: the sockets hold ~220 KB and its library 16 frames more. By
        # its answers, its library's 16 frames (half a second each: engine/runs.py's FRAME_SAMPLES) and the
        # margins: ~15 s on an idle 2-core machine (the frames' pace is synthesis's).
        assert caught_s < 30, caught_s
        frames = await frames_to_the_end(slow, "slow")  # it reads on at full speed: all it was sent, then told
        assert frames[-1]["type"] == "error" and frames[-1]["code"] == "slow_reader", frames[-1]
    await eventually(lambda: not one_stream.count, "every slot given back", 30)


def _http1_request(port: int) -> socket.socket:
    sock = small_socket()
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"text": LONG, **DENSE}).encode()
    head = (
        "POST /invocations HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def _read_to_eof(sock: socket.socket) -> bytes:
    sock.settimeout(60)
    data = bytearray()
    while part := sock.recv(65536):
        data += part
    return bytes(data)


async def test_an_http1_client_that_stops_reading_gives_its_slot_up_and_its_body_has_no_end(
    server: RunningServer, one_stream: StreamSlots, small_lag: None
) -> None:
    sock = _http1_request(server.port)
    try:
        await eventually(lambda: one_stream.count, "the slow request holds the slot", 60)
        waited = await honest_first_audio_s(server)
        assert one_stream.fell_behind == 1 and waited < 20, (one_stream.fell_behind, waited)
        body = await asyncio.to_thread(_read_to_eof, sock)
    finally:
        sock.close()
    assert body.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in body.lower()
    assert not body.endswith(b"\r\n0\r\n\r\n"), body[-20:]  # cut off: the client cannot take it for whole


def _http1_speech_read_slowly(port: int, bytes_per_s: float, until: threading.Event) -> bytes:
    """``POST /v1/audio/speech`` of LONG's first ten sentences (about 50 s) in mp3 through default socket buffers,
    read at ``bytes_per_s`` until ``until`` is set, then at full speed to its end (made no faster than it plays once
    20 s ahead, so it comes in about its length)."""
    text = LONG[: LONG.index("Sentence number 11")]
    body = json.dumps({"model": "tts-1", "voice": "alloy", "input": text, "response_format": "mp3"}).encode()
    head = (
        "POST /v1/audio/speech HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    data = bytearray()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head.encode() + body)
        while not until.is_set():
            data += sock.recv(int(bytes_per_s))
            time.sleep(1.0)
        sock.settimeout(120)
        while not data.endswith(b"\r\n0\r\n\r\n") and (part := sock.recv(65536)):  # its end, or a cut
            data += part
    return bytes(data)


async def test_an_http1_client_reading_a_tenth_of_real_time_through_big_buffers_lends_its_slot_and_is_served_whole(
    server: RunningServer, one_stream: StreamSlots, long_wait: None
) -> None:
    """The HTTP attack of issue 41: mp3 (~4 KB/s) read at 400 B/s through default buffers, which hold over a minute
    of it: the server cannot see what such a client has read until they drain. But its stream needs nothing made
    while its transport has taken more than ``LEND_LEAD_S`` past its playback clock, so an honest newcomer gets its
    slot within the wait (by what its socket took alone, not for over a minute); the lender takes the slot back once
    it is free, and, reading on at full speed, gets its whole body."""
    until = threading.Event()
    reading = asyncio.create_task(asyncio.to_thread(_http1_speech_read_slowly, server.port, 400, until))
    try:
        await eventually(lambda: one_stream.count, "the slow request holds the slot", 60)
        waited = await honest_first_audio_s(server)
        assert one_stream.lent and not one_stream.fell_behind, (one_stream.lent, one_stream.fell_behind, waited)
    finally:
        until.set()
        body = await reading
    assert body.startswith(b"HTTP/1.1 200") and body.endswith(b"\r\n0\r\n\r\n"), body[-20:]
    await eventually(lambda: not one_stream.count, "every slot given back", 30)


def _h2_request(port: int) -> tuple[socket.socket, h2.connection.H2Connection, int]:
    sock = small_socket()
    sock.connect(("127.0.0.1", port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream_id = conn.get_next_available_stream_id()
    headers = [(":method", "POST"), (":path", "/invocations"), (":scheme", "http"), (":authority", "x")]
    conn.send_headers(stream_id, [*headers, ("content-type", "application/json")])
    conn.send_data(stream_id, json.dumps({"text": LONG, **DENSE}).encode(), end_stream=True)
    sock.sendall(conn.data_to_send())
    return sock, conn, stream_id


def _h2_ending(sock: socket.socket, conn: h2.connection.H2Connection, stream_id: int) -> h2.events.Event:
    """Reads the stream (never opening its flow-control window) until it ends or is reset."""
    sock.settimeout(60)
    while True:
        data = sock.recv(65536)
        assert data, "the connection closed without ending the stream"
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.StreamEnded | h2.events.StreamReset) and event.stream_id == stream_id:
                return event
        sock.sendall(conn.data_to_send())


async def test_an_http2_client_that_stops_reading_gives_its_slot_up_and_its_stream_is_reset(
    server: RunningServer, one_stream: StreamSlots, small_lag: None
) -> None:
    sock, conn, stream_id = _h2_request(server.port)
    try:
        await eventually(lambda: one_stream.count, "the slow stream holds the slot", 60)
        waited = await honest_first_audio_s(server)
        assert one_stream.fell_behind == 1 and waited < 20, (one_stream.fell_behind, waited)
        ending = await asyncio.to_thread(_h2_ending, sock, conn, stream_id)
    finally:
        sock.close()
    assert isinstance(ending, h2.events.StreamReset), ending


async def first_frame_at(ws: ClientConnection, utterance_id: str) -> tuple[float, str]:
    """When ``utterance_id``'s first frame about it came, and its type (``synthesis_start``, or ``error``); then
    hears it to its end."""
    async with asyncio.timeout(120):
        while True:
            message = await ws.recv()
            if isinstance(message, str) and json.loads(message).get("id") == utterance_id:
                at, kind = time.perf_counter(), json.loads(message)["type"]
                if kind != "error":
                    await frames_to_the_end(ws, utterance_id)
                return at, kind


async def test_a_session_that_spoke_long_ago_waits_behind_an_earlier_newcomer(
    server: RunningServer, one_stream: StreamSlots, small_lag: None
) -> None:
    """A returning session goes ahead of newcomers only within KOKORO_STREAM_LAG_S of giving its slot back (a
    reply's next sentence); one that comes back later queues in arrival order, so newcomers are never starved."""
    async with connect(server.ws_url) as old, connect(server.ws_url) as holder, connect(server.ws_url) as newcomer:
        await old.send(json.dumps({"type": "synthesize", "id": "before", "text": REPLY}))
        await frames_to_the_end(old, "before")
        await eventually(lambda: not one_stream.count, "the slot given back", 30)
        await asyncio.sleep(1.0)  # past the 0.5 s in which it would go ahead of newcomers
        await holder.send(json.dumps({"type": "synthesize", "id": "hold", "text": REPLY}))
        await eventually(lambda: one_stream.count, "the holder has the slot", 60)
        held = asyncio.create_task(frames_to_the_end(holder, "hold"))
        await newcomer.send(json.dumps({"type": "synthesize", "id": "new", "text": REPLY}))
        await eventually(lambda: one_stream.waiting == 1, "the newcomer waits", 30)
        await old.send(json.dumps({"type": "synthesize", "id": "again", "text": REPLY}))
        await eventually(lambda: one_stream.waiting == 2, "the old session waits too", 30)
        new, again = await asyncio.gather(first_frame_at(newcomer, "new"), first_frame_at(old, "again"))
        await held
    assert new[1] == "synthesis_start", new
    assert again[1] == "error" or again[0] > new[0], (new, again)
