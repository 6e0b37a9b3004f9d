"""Local transport: one WebSocket to the container's /invocations-bidirectional-stream (docs/protocol.md).

Audio and control are told apart by the frame's own type (binary = audio, text = JSON control), never by
peeking at the bytes: raw PCM may begin with 0x7b ("{").
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidStatus

from .errors import ErrorCode
from .protocol import CLOSE_TRY_AGAIN_LATER, WS_PATH, Append, Cancel, Close, Command, Flush, Synthesize, encode
from .session import AudioEvent, SessionOptions, TransportCode, TTSEvent, TTSTransportError, classify_chunk

BUSY = ErrorCode.SERVER_BUSY.value


def ws_url(base_url: str) -> str:
    """``http://host:port`` (or ws://, or a full session URL) → the session's ws:// URL."""
    url = base_url.rstrip("/")
    if url.startswith("http://"):
        url = "ws://" + url.removeprefix("http://")
    elif url.startswith("https://"):
        url = "wss://" + url.removeprefix("https://")
    return url if url.endswith(WS_PATH) else url + WS_PATH


class LocalWSSession:
    """One open session; every utterance of a reply goes through it, in order."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws

    async def _send(self, message: Command) -> None:
        try:
            await self._ws.send(encode(message))
        except ConnectionClosed as exc:
            raise _closed(exc, "the TTS session closed") from exc

    async def configure(self, options: SessionOptions) -> None:
        await self._send(options.config())

    async def send_text(self, text: str, utterance_id: str) -> None:
        await self._send(Synthesize(text, utterance_id))

    async def append_text(self, text: str, utterance_id: str) -> None:
        await self._send(Append(text, utterance_id))

    async def flush(self, utterance_id: str) -> None:
        await self._send(Flush(utterance_id))

    async def finish(self) -> None:
        await self._send(Close())

    async def cancel(self) -> None:
        await self._send(Cancel())

    async def events(self) -> AsyncIterator[TTSEvent]:
        try:
            while True:
                message = await self._ws.recv()
                if isinstance(message, bytes):
                    yield AudioEvent(message)
                    continue
                try:
                    yield classify_chunk(message.encode("utf-8"), is_text=True)
                except ValueError as exc:
                    raise TTSTransportError(
                        TransportCode.TTS_ERROR, f"unexpected text frame: {message[:200]!r}"
                    ) from exc
        except ConnectionClosedOK:
            return  # the server finished (after our close) or went away cleanly: the pipeline checks what is missing
        except ConnectionClosed as exc:
            raise _closed(exc, "the TTS session was lost") from exc

    async def aclose(self) -> None:
        # Closing the socket is what tells the server to stop synthesizing (docs/protocol.md).
        await self._ws.close()


def _closed(exc: ConnectionClosed, what: str) -> TTSTransportError:
    """``tts_busy`` when the server refused the session (accepted, then closed with 1013 "server_busy: …", as at
    its session cap: docs/protocol.md), else ``tts_session_dropped``."""
    if exc.rcvd is not None and exc.rcvd.code == CLOSE_TRY_AGAIN_LATER and exc.rcvd.reason.startswith(BUSY):
        return TTSTransportError(TransportCode.TTS_BUSY, f"the TTS server is busy: {exc.rcvd.reason}", BUSY)
    return TTSTransportError(TransportCode.TTS_SESSION_DROPPED, f"{what}: {exc}")


class LocalWSTransport:
    """Opens sessions on a TTS server reachable directly (the container on this machine, or a sidecar)."""

    def __init__(self, base_url: str, *, open_timeout_s: float = 10.0, close_timeout_s: float = 2.0) -> None:
        self.url = ws_url(base_url)
        self._open_timeout = open_timeout_s
        self._close_timeout = close_timeout_s

    async def open_session(self, options: SessionOptions) -> LocalWSSession:
        try:
            ws = await connect(
                self.url,
                open_timeout=self._open_timeout,
                close_timeout=self._close_timeout,
                max_size=8 * 1024 * 1024,  # one frame is one sentence's audio: ~1 MB for 20 s of PCM
                compression=None,  # audio does not compress; deflate would only cost CPU
                proxy=None,  # the TTS server is local or in the same network
            )
        except InvalidStatus as exc:
            # 403 while the model loads (the server closes with 1013 before accepting), 404 on a wrong URL.
            raise TTSTransportError(
                TransportCode.TTS_UNAVAILABLE, f"the TTS server refused the session ({exc.response.status_code})"
            ) from exc
        except Exception as exc:  # refused, DNS, timeout, bad handshake: all mean no session
            raise TTSTransportError(
                TransportCode.TTS_UNAVAILABLE, f"cannot reach the TTS server at {self.url}: {exc}"
            ) from exc
        session = LocalWSSession(ws)
        try:
            await session.configure(options)
        except BaseException:
            await ws.close()
            raise
        return session
