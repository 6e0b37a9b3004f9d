"""Server-sent events, client side: a buffered decoder and a POST that yields the events' JSON.

Transport chunks cut events anywhere (mid-line, mid-UTF-8 character, between the CR and LF of one line
ending), so the decoder buffers bytes and acts only on complete events: a blank line ends one. It follows the
WHATWG event-stream rules: CRLF, LF or CR line endings, ``:`` comments, ``data`` lines joined with "\\n", an
optional single space after the colon, a leading BOM, and a last event without its blank line is dropped.
(No SSE client library is in the lock; sse-starlette there is a server-side library.)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class SSEMessage:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


@dataclass
class SSEDecoder:
    _buffer: bytes = b""
    _data: list[str] = field(default_factory=list)
    _event: str = ""
    _id: str | None = None
    _retry: int | None = None
    _started: bool = False

    def feed(self, chunk: bytes) -> list[SSEMessage]:
        """Add bytes; return the events they completed."""
        self._buffer += chunk
        out: list[SSEMessage] = []
        while True:
            line = self._next_line()
            if line is None:
                return out
            message = self._line(line)
            if message is not None:
                out.append(message)

    def close(self) -> list[SSEMessage]:
        """End of stream. A line held back for a possible LF after its CR is complete now; anything else left
        (a line or an event without its ending) is dropped, as WHATWG says."""
        buf, self._buffer = self._buffer, b""
        if buf.endswith(b"\r") and (message := self._line(buf[:-1])) is not None:
            return [message]
        return []

    def _next_line(self) -> bytes | None:
        buf = self._buffer
        if not self._started:
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                return None  # maybe the start of a BOM: wait
            self._started = True
            if buf.startswith(b"\xef\xbb\xbf"):
                buf = self._buffer = buf[3:]
        cr, lf = buf.find(b"\r"), buf.find(b"\n")
        if cr < 0 and lf < 0:
            return None
        if cr >= 0 and (lf < 0 or cr < lf):
            if cr == len(buf) - 1:
                return None  # a CR at the end: its LF may be in the next chunk
            end = cr + 2 if buf[cr + 1 : cr + 2] == b"\n" else cr + 1
            line = buf[:cr]
        else:
            end, line = lf + 1, buf[:lf]
        self._buffer = buf[end:]
        return line

    def _line(self, raw: bytes) -> SSEMessage | None:
        line = raw.decode("utf-8", "replace")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> SSEMessage | None:
        data, event, self._data, self._event = self._data, self._event, [], ""
        if not data:
            return None
        return SSEMessage(data="\n".join(data), event=event or "message", id=self._id, retry=self._retry)


async def iter_sse(chunks: AsyncIterable[bytes]) -> AsyncIterator[SSEMessage]:
    decoder = SSEDecoder()
    async for chunk in chunks:
        for message in decoder.feed(chunk):
            yield message
    for message in decoder.close():
        yield message


async def iter_sse_json(chunks: AsyncIterable[bytes]) -> AsyncIterator[dict[str, Any]]:
    """Each event's data parsed as JSON; data that is not a JSON object comes back as {"type": "invalid", ...}."""
    async for message in iter_sse(chunks):
        try:
            value = json.loads(message.data)
        except ValueError:
            value = None
        yield value if isinstance(value, dict) else {"type": "invalid", "data": message.data}


class SSEHTTPError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status, self.body = status, body


async def post_sse(
    url: str,
    payload: dict[str, Any],
    *,
    timeout_s: float = 120.0,
    client: httpx.AsyncClient | None = None,
    headers: dict[str, str] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """POST ``payload`` as JSON and yield the JSON of each SSE event in the response, as it arrives.

    ``timeout_s`` bounds each read. Closing the iterator closes the connection (the server sees the caller
    leave). A non-2xx answer raises SSEHTTPError; a non-SSE 2xx answer (a JSON body) is yielded as one event.
    """
    own = client is None
    http = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), trust_env=False)
    try:
        request_headers = {"Accept": "text/event-stream", **(headers or {})}
        async with http.stream("POST", url, json=payload, headers=request_headers) as response:
            if response.status_code >= 300:
                body = (await response.aread()).decode("utf-8", "replace")
                raise SSEHTTPError(response.status_code, body)
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                value = json.loads(await response.aread())
                yield value if isinstance(value, dict) else {"type": "invalid", "data": value}
                return
            async for event in iter_sse_json(response.aiter_bytes()):
                yield event
    finally:
        if own:
            await http.aclose()
