"""Three fixes to Hypercorn 0.18 that its configuration cannot express; ``apply()`` installs them (idempotent).

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
"""

from __future__ import annotations

import hypercorn.asyncio.run
import hypercorn.protocol.ws_stream
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.protocol.ws_stream import WebsocketBuffer
from wsproto.events import Message
from wsproto.extensions import PerMessageDeflate

OVERSIZE_KEY = "kokoro.oversize_bytes"


class _TCPServer(TCPServer):
    async def _read_data(self) -> None:
        await super()._read_data()
        await self.idle_task.stop()  # the client is gone: close now, not after keep_alive_timeout


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


def apply() -> None:
    hypercorn.protocol.ws_stream.WebsocketBuffer = _CappedBuffer  # type: ignore[misc]
    hypercorn.asyncio.run.TCPServer = _TCPServer  # type: ignore[misc]
    hypercorn.protocol.ws_stream.PerMessageDeflate = _DeclinedDeflate  # type: ignore[misc]
