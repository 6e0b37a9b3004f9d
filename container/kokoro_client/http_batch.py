"""Batch transport: one POST /invocations with the whole reply, its audio body read as it streams.

This is the fair baseline for the bidi pipeline: same server, same engine, same streaming response; the only
difference is that it cannot start before the LLM has finished.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx

from .session import SessionOptions, TransportCode, TTSTransportError


def request_body(text: str, options: SessionOptions) -> dict[str, Any]:
    body: dict[str, Any] = {"text": text, "format": options.format}
    if options.voice is not None:
        body["voice"] = options.voice
    if options.speed is not None:
        body["speed"] = options.speed
    if options.literal:
        body["literal"] = True
    return body


def error_from_response(status: int, body: bytes, retry_after: str | None = None) -> TTSTransportError:
    """The server's ``{"error": {"code", "message"}}`` (docs/protocol.md) → a transport error with a stable code;
    ``retry_after``: the Retry-After header (seconds), which comes with ``server_busy``."""
    code, message = None, body[:300].decode("utf-8", "replace")
    try:
        error = json.loads(body).get("error", {})
        code, message = str(error["code"]), str(error.get("message", ""))
    except (ValueError, AttributeError, KeyError, TypeError):
        pass
    if code == "server_busy":
        return TTSTransportError(
            TransportCode.TTS_BUSY, f"the TTS server is busy ({status}): {message}", code, _seconds(retry_after)
        )
    if status == 503 or code == "not_ready":
        return TTSTransportError(
            TransportCode.TTS_UNAVAILABLE, f"the TTS server is not ready ({status}): {message}", code
        )
    return TTSTransportError(
        TransportCode.TTS_ERROR, f"the TTS server refused the text ({status} {code}): {message}", code
    )


def _seconds(retry_after: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not one this server sends)."""
    try:
        return max(0.0, float(retry_after)) if retry_after else None
    except ValueError:
        return None


class HTTPBatchTTS:
    """POST {base_url}/invocations; ``timeout_s`` bounds each read, the first one included (the server answers
    once the first chunk is synthesized)."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout_s: float = 10.0,
        timeout_s: float = 60.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/invocations"
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._client = client

    async def synthesize(self, text: str, options: SessionOptions) -> AsyncIterator[bytes]:
        client = self._client or httpx.AsyncClient(timeout=self._timeout, trust_env=False)
        try:
            # aclosing: a caller that stops early must close the response now, not when the GC finds it.
            async with contextlib.aclosing(self._post(client, text, options)) as body:
                async for data in body:
                    yield data
        finally:
            if self._client is None:
                await client.aclose()

    async def _post(self, client: httpx.AsyncClient, text: str, options: SessionOptions) -> AsyncGenerator[bytes]:
        answered = False  # the server sent its status line: from here on a failure is a drop, not an outage
        try:
            async with client.stream("POST", self.url, json=request_body(text, options)) as response:
                answered = True
                if response.status_code != 200:
                    body = await response.aread()
                    raise error_from_response(response.status_code, body, response.headers.get("retry-after"))
                async for data in response.aiter_bytes():
                    yield data
        except httpx.ConnectTimeout as exc:
            raise TTSTransportError(
                TransportCode.TTS_UNAVAILABLE, f"cannot reach the TTS server at {self.url}: {exc!r}"
            ) from exc
        except httpx.TimeoutException as exc:
            raise TTSTransportError(TransportCode.TTS_TIMEOUT, f"the TTS server stopped answering: {exc!r}") from exc
        except httpx.TransportError as exc:
            code = TransportCode.TTS_SESSION_DROPPED if answered else TransportCode.TTS_UNAVAILABLE
            raise TTSTransportError(code, f"the TTS request to {self.url} failed: {exc!r}") from exc
