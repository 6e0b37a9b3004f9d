"""Nine fixes to Hypercorn 0.18 that its configuration cannot express; ``apply()`` installs them (idempotent).

They replace private parts of Hypercorn, so ``apply()`` refuses any other minor release (``WRITTEN_FOR``): a new
one must be read again first. tests/server/test_hypercorn_upstream.py runs Hypercorn bare beside Hypercorn
hardened and fails once upstream no longer has the bugs of fixes 1-3.

1. A connection its client has closed keeps its socket until ``keep_alive_timeout`` (75 s here): the idle timer
   lives in the connection's task group, which waits for it before closing the socket. Connect/close churn then
   piles up file descriptors. The fix stops the idle timer as soon as the client's side is closed.
2. Hypercorn accepts permessage-deflate and inflates without a cap: half a megabyte on the wire becomes hundreds of
   megabytes in memory before ``websocket_max_message_size`` is checked. The protocol's messages are small JSON
   and its audio does not compress, so the server declines the extension (RFC 7692 lets a server decline; a
   client that compresses anyway breaks the protocol and is closed with 1002).
3. A message over ``websocket_max_message_size`` makes Hypercorn send close 1009 and then stop reading that
   connection's events, so the client's close reply is never processed and the client sees nothing until it
   sends again. Instead the excess is counted and dropped, and the app receives a marker (``OVERSIZE_KEY``) it
   answers with a message_too_large error frame; the session goes on.
4. A client that sends without reading, then resets the connection, leaked its app for good (and with it a
   session slot): the app was blocked sending its reply to the full socket, Hypercorn's read loop was blocked
   putting the next message into the app's full queue (``max_app_queue_size``), and when the reset failed the
   send, Hypercorn put the disconnect into that same full queue from the app's own task, waiting for room only
   the app could make. Here the departure never waits for room: it goes in at once, and what the client sent
   after it is dropped (no one is left to answer).
5. A client that stays connected but reads nothing held its connection (and its session slot) for as long as TCP
   kept it open: every send waits for room in the socket. A send that finds no room for ``SEND_TIMEOUT_S``
   (not a byte taken in that time) aborts the connection (a reset), and the app hears that its client is gone. A
   client that reads, however slowly, makes room: a big message read at playback pace may take longer than that
   (fix 6 keeps the socket's buffer small), and one reading slower than its audio plays is ``Pace``'s to judge.
6. A client that reads slowly filled the kernel's send buffer first, which Linux grows to megabytes (``tcp_wmem``):
   minutes of μ-law audio left "sent" before a send waited at all, so a slow reader kept its stream slot
   (engine/capacity.py's ``Pace``) for minutes before falling behind. Each connection's send buffer is fixed at
   ``SEND_BUFFER_BYTES``: a second of 48 kHz PCM; on a 100 ms round trip still three times the fastest audio
   rate.
7. An HTTP/2 response its app ends without the body's end (a slow reader's synthesis cut off: routes/streaming.py)
   was left open: Hypercorn forgot the stream without a word, and the client waited for the rest until its own
   timeout. The stream is reset (RST_STREAM), as HTTP/1.1's connection closes, so the client knows at once that the
   body is not whole.
8. An HTTP/2 response whose client opened no flow-control window was buffered without bound: each body part
   Hypercorn took woke its sender, which found the window shut, took nothing, and counted that as the buffer having
   drained, so the app's next send went through too. The app never waited: a slow reader's whole synthesis piled
   up in memory, and no send ever fell behind (engine/capacity.py's ``Pace``). A send now waits while the buffer
   holds more than its low mark, as Hypercorn means it to.
9. A WebSocket app cannot ping nor hear pongs through ASGI, and Hypercorn drops every pong, so the server could not
   tell what a client has read: only what its own socket took, after the client's receive buffer and ours (fix 6)
   filled, tens of seconds of μ-law. Each accepted WebSocket's scope carries ``ReadReceipts``
   (``scope["extensions"]["kokoro.read_receipts"]``, engine/capacity.py): its pings go out as Hypercorn's own
   keepalive pings do, and each pong's payload is handed to it.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import socket
from typing import Any

import hypercorn.asyncio.run
import hypercorn.asyncio.task_group
import hypercorn.protocol
import hypercorn.protocol.h2
import hypercorn.protocol.h11
import hypercorn.protocol.ws_stream
from h2.errors import ErrorCodes
from h2.stream import StreamState
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.events import Closed, Event, RawData
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.events import StreamClosed
from hypercorn.protocol.h2 import BUFFER_LOW_WATER, H2Protocol, StreamBuffer
from hypercorn.protocol.ws_stream import WebsocketBuffer, WSStream
from wsproto.events import Message, Ping, Pong
from wsproto.extensions import PerMessageDeflate

from kokoro_tts.engine.capacity import READ_RECEIPTS, ReadReceipts
from kokoro_tts.sessions.core import OVERSIZE_KEY

WRITTEN_FOR = "0.18"  # the Hypercorn minor release whose private parts these fixes replace
SEND_TIMEOUT_S = 60.0  # longest wait for a client to make room for the next bytes (read at each send)
SEND_BUFFER_BYTES = 96 * 1024 // 2  # the kernel doubles what it is given (socket(7))
_DEPARTURES = ("websocket.disconnect", "http.disconnect")


class _TCPServer(TCPServer):
    async def run(self) -> None:
        sock = self.writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        await super().run()

    async def _read_data(self) -> None:
        await super()._read_data()
        await self.idle_task.stop()  # the client is gone: close now, not after keep_alive_timeout

    async def protocol_send(self, event: Event) -> None:
        if not isinstance(event, RawData):
            await super().protocol_send(event)
            return
        transport = self.writer.transport
        sending = asyncio.ensure_future(super().protocol_send(event))
        try:
            await asyncio.sleep(0)  # the write is made: what is left waits in the buffer
            left = transport.get_write_buffer_size()
            while not (await asyncio.wait({sending}, timeout=SEND_TIMEOUT_S))[0]:
                if transport.get_write_buffer_size() >= left:  # not a byte taken in all that time
                    sending.cancel()
                    await asyncio.gather(sending, return_exceptions=True)
                    transport.abort()  # the client reads nothing: reset, and tell the app it is gone
                    await self.protocol.handle(Closed())
                    return
                left = transport.get_write_buffer_size()
            await sending
        finally:
            sending.cancel()


class _H2Protocol(H2Protocol):
    async def stream_send(self, event: StreamEvent) -> None:
        buffer = self.stream_buffers.get(event.stream_id) if isinstance(event, StreamClosed) else None
        if buffer is not None and not buffer._complete:  # its app never ended the body
            stream = self.connection.streams.get(event.stream_id)
            if stream is not None and stream.state_machine.state in (StreamState.OPEN, StreamState.HALF_CLOSED_REMOTE):
                self.connection.reset_stream(event.stream_id, ErrorCodes.INTERNAL_ERROR)
                await self._flush()
        await super().stream_send(event)


class _StreamBuffer(StreamBuffer):
    async def pop(self, max_length: int) -> bytes:
        length = min(len(self.buffer), max_length)
        data = bytes(self.buffer[:length])
        del self.buffer[:length]
        if len(self.buffer) < BUFFER_LOW_WATER:  # what is left, not what was taken: a shut window takes nothing
            await self._paused.set()
        if not self.buffer:
            await self._is_empty.set()
        return data


class _ReceiptsWSStream(WSStream):
    async def _accept(self, message: Any) -> None:
        await super()._accept(message)
        receipts = ReadReceipts(self._ping)
        self.scope["extensions"][READ_RECEIPTS] = receipts  # type: ignore[assignment]
        parsed = self.connection.events

        def noting_pongs() -> Any:
            for event in parsed():
                if isinstance(event, Pong):
                    receipts.answered(bytes(event.payload))
                yield event

        self.connection.events = noting_pongs  # type: ignore[method-assign]

    async def _ping(self, payload: bytes) -> None:
        if not self.closed:
            await self._send_wsproto_event(Ping(payload=payload))


class _DeclinedDeflate(PerMessageDeflate):
    def accept(self, offer: str) -> None:
        return None


class _CappedBuffer(WebsocketBuffer):
    def extend(self, event: Message) -> None:
        if self.length + len(event.data) > self.max_length:
            self.length += len(event.data)
            self.value = None  # keep none of it: memory stays bounded by max_length
            return
        super().extend(event)

    def to_message(self) -> dict:
        if self.length > self.max_length:
            return {"type": "websocket.receive", "bytes": None, "text": None, OVERSIZE_KEY: self.length}
        return super().to_message()


class _AppQueue:
    """The messages Hypercorn hands one app: at most ``maxsize`` waiting (a client cannot run ahead of its app),
    except that the client's departure never waits for room."""

    def __init__(self, maxsize: int) -> None:
        self._items: asyncio.Queue[Any] = asyncio.Queue()  # unbounded: ``put`` keeps the bound
        self._maxsize = maxsize
        self._room = asyncio.Event()
        self._gone = False

    async def get(self) -> Any:
        item = await self._items.get()
        self._room.set()
        return item

    async def put(self, message: Any) -> None:
        if message.get("type") in _DEPARTURES:
            self._gone = True
            self._room.set()  # a put waiting for room gives up: its client is gone
            self._items.put_nowait(message)
            return
        while not self._gone and 0 < self._maxsize <= self._items.qsize():
            self._room.clear()
            await self._room.wait()
        if not self._gone:
            self._items.put_nowait(message)


async def _spawn_app(self: hypercorn.asyncio.task_group.TaskGroup, app: Any, config: Any, scope: Any, send: Any) -> Any:
    # Hypercorn's spawn_app with _AppQueue in place of its asyncio.Queue.
    queue = _AppQueue(config.max_app_queue_size)

    def call_soon(func: Any, *args: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(func(*args), self._loop).result()

    self.spawn(
        hypercorn.asyncio.task_group._handle,
        app,
        config,
        scope,
        queue.get,
        send,
        functools.partial(self._loop.run_in_executor, None),
        call_soon,
    )
    return queue.put


class UnvettedHypercorn(RuntimeError):
    """The installed Hypercorn is not the release these fixes were written against."""


def apply() -> None:
    installed = importlib.metadata.version("hypercorn")
    if installed.split(".")[:2] != WRITTEN_FOR.split("."):
        raise UnvettedHypercorn(
            f"Hypercorn {installed} is installed; kokoro_tts.server.hypercorn_hardening replaces private parts of "
            f"Hypercorn {WRITTEN_FOR}.x. Install hypercorn=={WRITTEN_FOR}.* (the lock does), or re-read the fixes "
            "against the new release and update WRITTEN_FOR."
        )
    hypercorn.protocol.ws_stream.WebsocketBuffer = _CappedBuffer  # type: ignore[misc]
    hypercorn.asyncio.run.TCPServer = _TCPServer  # type: ignore[misc]
    hypercorn.protocol.ws_stream.PerMessageDeflate = _DeclinedDeflate  # type: ignore[misc]
    hypercorn.protocol.h11.WSStream = _ReceiptsWSStream  # type: ignore[misc]
    hypercorn.protocol.h2.WSStream = _ReceiptsWSStream  # type: ignore[misc]
    hypercorn.asyncio.task_group.TaskGroup.spawn_app = _spawn_app  # type: ignore[method-assign]
    hypercorn.protocol.H2Protocol = _H2Protocol  # type: ignore[misc]
    hypercorn.protocol.h2.StreamBuffer = _StreamBuffer  # type: ignore[misc]
