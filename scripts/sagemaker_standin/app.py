"""The stand-in's ASGI app: InvokeEndpointWithBidirectionalStream in front of a container's WebSocket.

``POST /endpoints/{EndpointName}/invocations-bidirectional-stream`` over HTTP/2; the request body is an
``application/vnd.amazon.eventstream`` of SigV4-signed envelopes, each wrapping one ``PayloadPart`` event. Each
part's bytes go to the container as one binary WebSocket frame; each frame the container sends comes back as a
``PayloadPart`` event with ``DataType`` ``UTF8`` (text frame) or ``BINARY`` (binary frame). Framing, CRCs and the
event (de)serialization are the AWS libraries' own (smithy-aws-event-stream, the SDK's models).

Signatures are not verified (there is no secret to check them against): a request must carry a SigV4
``Authorization`` header, and its event envelopes are counted, signed or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any
from urllib.parse import unquote

from aws_sdk_sagemaker_runtime_http2.models import (
    ModelStreamError,
    ResponsePayloadPart,
    ResponseStreamEventModelStreamError,
    ResponseStreamEventPayloadPart,
)
from kokoro_client.protocol import WS_PATH
from smithy_aws_event_stream.aio import AWSEventPublisher
from smithy_aws_event_stream.events import Event, EventMessage
from smithy_core.aio.types import AsyncBytesReader
from smithy_json import JSONCodec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_PATH = re.compile(r"^/endpoints/(?P<name>[^/]+)/invocations-bidirectional-stream$")
_EVENT_STREAM = "application/vnd.amazon.eventstream"
_DEFAULT_INVOCATION_PATH = WS_PATH
_MAX_FRAME = 16 * 1024 * 1024  # an event's payload limit: no WebSocket frame the container sends is refused


@dataclass
class StreamRecord:
    """What the stand-in saw of one stream (for logs and tests)."""

    endpoint_name: str
    authorization: str
    http_version: str
    signed_envelopes: int = 0
    unsigned_events: int = 0
    forwarded_frames: int = 0
    relayed_frames: int = 0
    ended_by_client: bool = False


class _Disconnected(Exception):
    pass


class _MalformedInput(Exception):
    pass


class StandIn:
    """The ASGI app. ``tts_url`` is the container's base URL (``ws://127.0.0.1:8080``)."""

    def __init__(self, tts_url: str, *, endpoint_name: str | None = None, variant: str = "AllTraffic") -> None:
        self.tts_url = tts_url.rstrip("/")
        self.endpoint_name = endpoint_name
        self.variant = variant
        self.streams: list[StreamRecord] = []
        self._open: set[asyncio.Task[Any]] = set()

    async def aclose(self) -> None:
        """End the open streams (their clients see the stream reset), as the endpoint going away would."""
        for task in list(self._open):
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
        elif scope["type"] == "http":
            await self._invoke(scope, receive, send)

    async def _invoke(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        match = _PATH.match(scope["path"])
        if scope["method"] != "POST" or match is None:
            return await _error(send, 404, "UnknownOperationException", f"no such operation: {scope['path']}")
        name = unquote(match["name"])
        if self.endpoint_name is not None and name != self.endpoint_name:
            return await _error(send, 400, "InputValidationError", f"Endpoint {name} not found.")
        authorization = headers.get("authorization", "")
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            log.warning("refused a stream to %s: no SigV4 Authorization header", name)
            return await _error(send, 403, "MissingAuthenticationTokenException", "Missing Authentication Token")
        if scope["http_version"] != "2":
            return await _error(send, 400, "InputValidationError", "bidirectional streams need HTTP/2")
        if not headers.get("content-type", "").startswith(_EVENT_STREAM):
            return await _error(send, 400, "InputValidationError", f"the body must be {_EVENT_STREAM}")
        # Log who signed, never the signature.
        log.info("stream to %s, %s", name, authorization.split(",")[0])
        record = StreamRecord(name, authorization, scope["http_version"])
        self.streams.append(record)

        path = "/" + headers.get("x-amzn-sagemaker-model-invocation-path", _DEFAULT_INVOCATION_PATH).lstrip("/")
        if query := headers.get("x-amzn-sagemaker-model-query-string"):
            path += f"?{query}"
        try:
            ws = await connect(self.tts_url + path, max_size=_MAX_FRAME, open_timeout=10)
        except (OSError, TimeoutError, InvalidStatus) as e:
            status = e.response.status_code if isinstance(e, InvalidStatus) else None
            return await _model_error(send, f"could not open a WebSocket to the model container: {e}", status)
        async with ws:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", _EVENT_STREAM.encode()),
                        (b"x-amzn-invoked-production-variant", self.variant.encode()),
                        (b"x-amzn-requestid", str(uuid.uuid4()).encode()),
                    ],
                }
            )
            task = asyncio.current_task()
            assert task is not None
            self._open.add(task)
            try:
                await _Relay(ws, receive, send, record).run()
            finally:
                self._open.discard(task)


class _Relay:
    """One open stream: client events → WebSocket frames, and frames → response events, concurrently."""

    def __init__(self, ws: ClientConnection, receive: Receive, send: Send, record: StreamRecord) -> None:
        self._ws, self._receive, self._send, self._record = ws, receive, send, record
        self._send_lock = asyncio.Lock()
        self._publisher = AWSEventPublisher[Any](payload_codec=JSONCodec(), async_writer=self, is_client_mode=False)

    async def run(self) -> None:
        upstream = asyncio.create_task(self._upstream())
        downstream = asyncio.create_task(self._downstream())
        try:
            await asyncio.wait({upstream, downstream}, return_when=asyncio.FIRST_COMPLETED)
            if not upstream.done() or isinstance(upstream.exception(), ConnectionClosed):
                # The container ended the session (or broke): what it sent is all there is. A send that failed
                # on a closed WebSocket means the same, so wait for the relay to tell how it closed.
                await downstream
                return await self._end()
            error = upstream.exception()
            if isinstance(error, _Disconnected):  # the client left: nobody to answer
                self._record.ended_by_client = True
                return
            if isinstance(error, _MalformedInput):
                # The response union has no event for bad input, so this is an unmodeled `error` message.
                log.warning("malformed request event stream: %s", error)
                headers = {":message-type": "error", ":error-code": "InvalidEventStream", ":error-message": str(error)}
                await self.write(EventMessage(headers=headers).encode())
                return await self._end()
            if error is not None:
                raise error
        finally:
            for task in (upstream, downstream):
                task.cancel()
            await asyncio.gather(upstream, downstream, return_exceptions=True)

    async def _upstream(self) -> None:
        """Forward each payload part; after the client's end-of-stream, wait for it to leave."""
        reader = AsyncBytesReader(self._body_chunks())
        pending: list[bytes] = []
        while (part := await self._next_part(reader)) is not None:
            data, completion_state = part
            pending.append(data)
            if completion_state == "PARTIAL":  # the rest of this message follows in later parts
                continue
            await self._ws.send(b"".join(pending))  # bytes: a binary frame, as SageMaker sends them
            self._record.forwarded_frames += 1
            pending.clear()
        while (await self._receive())["type"] != "http.disconnect":
            pass
        raise _Disconnected

    async def _next_part(self, reader: AsyncBytesReader) -> tuple[bytes, str | None] | None:
        """The next PayloadPart (bytes, CompletionState), or None at the end of the input stream."""
        while True:
            try:
                event = await Event.decode_async(reader)
            except _Disconnected:
                raise
            except Exception as e:
                raise _MalformedInput(f"{type(e).__name__}: {e}") from e
            if event is None:
                return None
            message = event.message
            if ":chunk-signature" in message.headers:
                self._record.signed_envelopes += 1
                if not message.payload:  # the signed empty envelope closes the input stream
                    return None
                inner = Event.decode(BytesIO(message.payload))
                if inner is None:
                    raise _MalformedInput("an empty signed envelope with headers")
                message = inner.message
            else:
                self._record.unsigned_events += 1
            headers = message.headers
            if headers.get(":message-type") != "event" or headers.get(":event-type") != "PayloadPart":
                log.warning("ignoring a request event that is not a PayloadPart: %s", dict(headers))
                continue
            state = headers.get("CompletionState")
            return message.payload, state if isinstance(state, str) else None

    async def _body_chunks(self) -> AsyncIterator[bytes]:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            yield message.get("body", b"")
            if not message.get("more_body", False):
                return

    async def _downstream(self) -> None:
        """Relay each frame as a payload part; a close other than normal becomes a ModelStreamError event."""
        try:
            async for frame in self._ws:
                text = isinstance(frame, str)
                part = ResponsePayloadPart(
                    bytes_=frame.encode() if isinstance(frame, str) else frame,
                    data_type="UTF8" if text else "BINARY",
                    completion_state="COMPLETE",
                )
                await self._publisher.send(ResponseStreamEventPayloadPart(value=part))
                self._record.relayed_frames += 1
        except ConnectionClosed:
            pass
        code, reason = self._ws.close_code, self._ws.close_reason
        if code not in (1000, 1001):
            message = f"The model container closed the stream with WebSocket code {code}: {reason or 'no reason'}"
            error = ModelStreamError(message=message, error_code="ModelStreamError")
            await self._publisher.send(ResponseStreamEventModelStreamError(value=error))

    async def write(self, data: bytes) -> None:
        """The publisher's writer: one event, one chunk of the HTTP/2 response body."""
        async with self._send_lock:
            await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def _end(self) -> None:
        with contextlib.suppress(Exception):
            async with self._send_lock:
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})


async def _error(send: Send, status: int, error_type: str, message: str, **members: Any) -> None:
    """An error response as the service sends one: the type in x-amzn-errortype, members as JSON."""
    body = json.dumps({"Message": message, **members}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"x-amzn-errortype", error_type.encode()),
        (b"x-amzn-requestid", str(uuid.uuid4()).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _model_error(send: Send, message: str, original_status: int | None) -> None:
    log.warning("%s", message)
    members: dict[str, Any] = {"ErrorCode": "ModelError", "OriginalMessage": message}
    if original_status is not None:
        members["OriginalStatusCode"] = original_status
    await _error(send, 424, "ModelError", "Received an error from the model container.", **members)
