"""Server-sent events, client side, on httpx-sse: the JSON of each event of a response, or of any byte stream.

Transport chunks cut events anywhere (mid-line, mid-UTF-8 character, between the CR and LF of one line ending);
httpx decodes the text and httpx-sse the lines and events, so a caller sees whole events only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent

EVENT_STREAM = "text/event-stream"


async def iter_sse(chunks: AsyncIterable[bytes]) -> AsyncIterator[ServerSentEvent]:
    """The events of an event stream that arrives as ``chunks`` (an AgentCore or SageMaker response body)."""
    stream = _Chunks(chunks)
    response = httpx.Response(200, headers={"content-type": EVENT_STREAM}, stream=stream)
    async for event in _events(response):
        yield event


async def iter_sse_json(chunks: AsyncIterable[bytes]) -> AsyncIterator[dict[str, Any]]:
    """Each event's data parsed as JSON; data that is not a JSON object comes back as {"type": "invalid", ...}."""
    async for event in iter_sse(chunks):
        yield _json_object(event.data)


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
        request_headers = {"Accept": EVENT_STREAM, **(headers or {})}
        async with http.stream("POST", url, json=payload, headers=request_headers) as response:
            if response.status_code >= 300:
                body = (await response.aread()).decode("utf-8", "replace")
                raise SSEHTTPError(response.status_code, body)
            if not response.headers.get("content-type", "").startswith(EVENT_STREAM):
                yield _json_object((await response.aread()).decode("utf-8", "replace"))
                return
            async for event in _events(response):
                yield _json_object(event.data)
    finally:
        if own:
            await http.aclose()


def _events(response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    # An event stream is UTF-8 and may open with a BOM, which is not part of its first field's name (WHATWG).
    response.encoding = "utf-8-sig"
    return EventSource(response).aiter_sse()


def _json_object(data: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"type": "invalid", "data": data}


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk
