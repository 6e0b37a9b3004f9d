"""TLS in front of a plain local server, as a load balancer terminates it: clients that only speak wss:// (the
ElevenLabs SDK's socket) reach the server through it. Bytes are relayed both ways untouched."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from support.sagemaker import Certs


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, ssl.SSLError, RuntimeError):
        writer.close()


@asynccontextmanager
async def tls_front(port: int, certs: Certs) -> AsyncIterator[int]:
    """A TLS port on 127.0.0.1 relaying each connection to ``port``; its certificate names localhost and
    127.0.0.1 (``certs``, trusted through ``SSL_CERT_FILE`` by the ``certs`` fixture)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.certfile, certs.keyfile)
    relays: set[asyncio.Task[None]] = set()

    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))

    def track(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(relay(reader, writer))
        relays.add(task)
        task.add_done_callback(relays.discard)

    server = await asyncio.start_server(track, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in list(relays):
            task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)
