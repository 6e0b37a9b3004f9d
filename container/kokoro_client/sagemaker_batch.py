"""Batch transport on SageMaker: InvokeEndpointWithResponseStream with the whole reply (boto3).

boto3 blocks, so the call and the event stream are read in a worker thread and handed to the event loop one
PayloadPart at a time; closing the async iterator closes the HTTP stream, which ends the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, EventStreamError

from .http_batch import request_body
from .session import SessionOptions, TransportCode, TTSTransportError

_END = object()


async def aiter_blocking[T](open_stream: Callable[[], tuple[Iterable[T], Callable[[], None]]]) -> AsyncGenerator[T]:
    """Iterate a blocking stream in a thread. ``open_stream`` (run in the thread) returns (items, close)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
    stop = threading.Event()
    closer: list[Callable[[], None]] = []

    def put(item: Any) -> None:
        # Blocks the worker (not the loop) while the queue is full: backpressure down to the socket.
        if not stop.is_set():
            asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

    def work() -> None:
        try:
            items, close = open_stream()
            closer.append(close)
            iterator: Iterator[T] = iter(items)
            for item in iterator:
                if stop.is_set():
                    break
                put(item)
            put(_END)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put(exc)

    worker = loop.run_in_executor(None, work)
    try:
        while True:
            item = await queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        for close in closer:
            close()  # unblocks a read in flight
        while not queue.empty():  # a worker blocked in put() finishes its last put
            queue.get_nowait()
        await asyncio.wait([worker], timeout=5)


class SageMakerBatchTTS:
    def __init__(self, endpoint_name: str, *, client: Any = None, region_name: str | None = None) -> None:
        if client is None:
            import boto3

            client = boto3.client("sagemaker-runtime", region_name=region_name)
        self._client = client
        self.endpoint_name = endpoint_name

    async def synthesize(self, text: str, options: SessionOptions) -> AsyncIterator[bytes]:
        body = json.dumps(request_body(text, options)).encode("utf-8")

        def open_stream() -> tuple[Iterable[bytes], Callable[[], None]]:
            response = self._client.invoke_endpoint_with_response_stream(
                EndpointName=self.endpoint_name, Body=body, ContentType="application/json"
            )
            stream = response["Body"]
            parts = (event["PayloadPart"]["Bytes"] for event in stream if "PayloadPart" in event)
            return parts, stream.close

        answered = False
        try:
            async with contextlib.aclosing(aiter_blocking(open_stream)) as parts:
                async for data in parts:
                    answered = True
                    yield data
        except EventStreamError as exc:  # ModelStreamError / InternalStreamFailure after the stream started
            raise TTSTransportError(
                TransportCode.TTS_SESSION_DROPPED, f"the SageMaker response stream failed: {exc}"
            ) from exc
        except ClientError as exc:
            error = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            message = f"SageMaker refused the request ({error.get('Code')}): {error.get('Message')}"
            tts_code = _server_code(error.get("Message", ""))
            if tts_code == "server_busy":  # the container's admission control: retry later
                raise TTSTransportError(TransportCode.TTS_BUSY, message, tts_code) from exc
            if status >= 500 or error.get("Code") in ("ServiceUnavailable", "InternalFailure"):
                raise TTSTransportError(TransportCode.TTS_UNAVAILABLE, message, tts_code) from exc
            raise TTSTransportError(TransportCode.TTS_ERROR, message, tts_code) from exc
        except BotoCoreError as exc:
            code = TransportCode.TTS_SESSION_DROPPED if answered else TransportCode.TTS_UNAVAILABLE
            raise TTSTransportError(code, f"the SageMaker request failed: {exc}") from exc


def _server_code(message: str) -> str | None:
    """ModelError messages carry the container's JSON error body; pull its stable code out when present."""
    start = message.find("{")
    if start < 0:
        return None
    try:
        code = json.loads(message[start:]).get("error", {}).get("code")
    except (ValueError, AttributeError):
        return None
    return str(code) if code else None
