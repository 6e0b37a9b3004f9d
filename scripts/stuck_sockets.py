"""A client that floods a WebSocket session with bad frames without reading the replies, until its own send blocks,
then aborts the TCP connection (SO_LINGER 0: a reset, no closing handshake) — issue 28's wedge, for `make soak`.

Blocking sockets and wsproto (Hypercorn's own WebSocket state machine) rather than an asyncio client: an asyncio
client keeps reading into its buffers, and this one must leave every reply unread so the server's send to it fills
up. Small socket buffers make that happen after a few kilobytes.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import dataclass

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Message, RejectConnection, Request

BUFFER_BYTES = 4096  # SO_RCVBUF and SO_SNDBUF: the kernel doubles it, and the server's replies fill it at once


@dataclass
class Stuck:
    path: str
    frames_sent: int = 0
    ended: str = ""  # "send blocked", "closed by the server", "never blocked" or "refused: ..."


def bad_frame(index: int) -> str:
    """A frame each protocol refuses with an error (or Warning) that names what it was sent: an unknown type."""
    return json.dumps({"type": f"stuck-{index}-" + "x" * 200})


def flood_and_vanish(host: str, port: int, path: str, blocked_after_s: float = 2.0, within_s: float = 60.0) -> Stuck:
    """Open ``path``, send bad frames without reading until a send makes no progress for ``blocked_after_s`` (or
    ``within_s`` passes), then reset the connection."""
    stuck = Stuck(path)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)
    try:
        sock.settimeout(10)
        sock.connect((host, port))
        ws = WSConnection(ConnectionType.CLIENT)
        sock.sendall(ws.send(Request(host=f"{host}:{port}", target=path)))
        if refusal := _refusal(sock, ws, path):
            stuck.ended = f"refused: {refusal}"
            return stuck
        sock.settimeout(blocked_after_s)
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            sock.sendall(ws.send(Message(data=bad_frame(stuck.frames_sent))))
            stuck.frames_sent += 1
        stuck.ended = "never blocked"
    except TimeoutError:
        stuck.ended = "send blocked"
    except (ConnectionError, BrokenPipeError):
        stuck.ended = "closed by the server"
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    return stuck


def _refusal(sock: socket.socket, ws: WSConnection, path: str) -> str | None:
    """None once the handshake is accepted; else why not."""
    while True:
        data = sock.recv(BUFFER_BYTES)
        if not data:
            return "closed during the handshake"
        ws.receive_data(data)
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                return None
            if isinstance(event, RejectConnection):
                return f"HTTP {event.status_code}"
