"""TTS over SageMaker's InvokeEndpointWithBidirectionalStream: one HTTP/2 stream per session.

Each sentence goes out as one ``RequestPayloadPart`` (SageMaker turns it into one binary WebSocket frame to the
container, docs/protocol.md); each frame the container sends comes back as a ``ResponsePayloadPart`` whose
``DataType`` tells audio (``BINARY``) from control (``UTF8``).

The AWS SDK (aws-sdk-sagemaker-runtime-http2 0.12, with its ``awscrt`` extra) does it all: serializing, SigV4
signing of the request and of every event, event stream framing, and HTTP/2 through its CRT client
(``smithy_http.aio.crt.AWSCRTHTTPClient``), the one that streams both ways at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal

from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config
from aws_sdk_sagemaker_runtime_http2.models import (
    InputValidationError,
    InternalServerError,
    InternalStreamFailure,
    InvokeEndpointWithBidirectionalStreamInput,
    ModelError,
    ModelStreamError,
    RequestPayloadPart,
    RequestStreamEventPayloadPart,
    ResponsePayloadPart,
    ResponseStreamEventPayloadPart,
    ServiceUnavailableError,
)
from awscrt.exceptions import AwsCrtError
from smithy_aws_event_stream.exceptions import UnmodeledEventError
from smithy_core.aio.types import AsyncBytesProvider
from smithy_core.exceptions import CallError, ClientTimeoutError, SmithyIdentityError
from smithy_core.interceptors import Interceptor, RequestContext, ResponseContext
from smithy_http.aio.crt import AWSCRTHTTPClient, AWSCRTHTTPClientConfig
from smithy_http.aio.interfaces import HTTPRequest, HTTPResponse

from .aws_credentials import Boto3CredentialsResolver
from .json_messages import json_text
from .protocol import encode
from .session import (
    AudioEvent,
    SessionOptions,
    TransportCode,
    TTSEvent,
    TTSTransportError,
    classify_chunk,
)

log = logging.getLogger(__name__)

# The service's endpoint rules (in the SDK's schema) put the bidirectional API on port 8443; the SDK's
# StandardRegionalEndpointsResolver drops the port, so the transport states it.
DEFAULT_ENDPOINT = "https://runtime.sagemaker.{region}.amazonaws.com:8443"

# How long a stream may take to complete after its response ended (our END_STREAM's round trip, in practice).
_COMPLETION_TIMEOUT = 5.0

type CredentialsResolver = Any  # IdentityResolver[AWSCredentialsIdentity, AWSIdentityProperties]


class SageMakerBidiTransport:
    """Opens TTS sessions on a SageMaker endpoint, each one InvokeEndpointWithBidirectionalStream call.

    ``credentials=None`` uses boto3's credential chain (see aws_credentials.py). ``endpoint_uri``
    overrides the regional endpoint (the local stand-in, a VPC endpoint). TLS trusts what awscrt trusts: the
    system CA bundle, and the file ``SSL_CERT_FILE`` names if set (docs/sagemaker-standin.md).
    """

    def __init__(
        self,
        endpoint_name: str,
        region: str,
        *,
        endpoint_uri: str | None = None,
        credentials: CredentialsResolver | None = None,
        target_variant: str | None = None,
    ) -> None:
        self.endpoint_name = endpoint_name
        self.region = region
        self.endpoint_uri = endpoint_uri or DEFAULT_ENDPOINT.format(region=region)
        self.target_variant = target_variant
        self._credentials = credentials if credentials is not None else Boto3CredentialsResolver()
        # Each session gets a copy (the SDK's own __deepcopy__: same CRT event loop, a connection of its own), so
        # closing a session ends its HTTP/2 connection and nobody else's. HTTP/2 or nothing: over HTTP/1.1 the CRT
        # client would buffer the whole request body before sending it.
        self._http = AWSCRTHTTPClient(client_config=AWSCRTHTTPClientConfig(force_http_2=True))
        self._client: AsyncSageMakerRuntimeHTTP2Client | None = None
        self._client_lock = asyncio.Lock()

    async def _sdk_client(self) -> AsyncSageMakerRuntimeHTTP2Client:
        # One SDK client for all sessions: config and credentials are resolved once. Its own transport stays the
        # SDK default (aiohttp), which the credential chain uses for plain HTTP/1.1 (IMDS, container
        # credentials); each call swaps in a CRT client of its own (see open_session).
        async with self._client_lock:
            if self._client is None:
                overrides: dict[str, Any] = {
                    "region": self.region,
                    "endpoint_uri": self.endpoint_uri,
                    "aws_credentials_identity_resolver": self._credentials,
                }
                config = await AsyncSageMakerRuntimeHTTP2Config.resolve(**overrides)
                self._client = AsyncSageMakerRuntimeHTTP2Client(config=config)
            return self._client

    async def open_session(self, options: SessionOptions) -> SageMakerBidiSession:
        """A session in this server's protocol (docs/protocol.md), configured with ``options``."""
        session = await self.open_stream()
        if options != SessionOptions():
            await session.send_raw(encode(options.config()).encode())
        return session

    async def open_stream(
        self, invocation_path: str | None = None, query_string: str | None = None
    ) -> SageMakerBidiSession:
        """An open bidirectional stream to the container's ``invocation_path`` (SageMaker's ``ModelInvocationPath``,
        default its session path) with ``query_string`` (``ModelQueryString``): another vocabulary than this
        server's own, such as ElevenLabs' socket (docs/elevenlabs.md), speaks through ``send_json`` and ``events``."""
        client = await self._sdk_client()
        http = copy.deepcopy(self._http)
        call = _CallRecorder()

        def use_session_client(config: AsyncSageMakerRuntimeHTTP2Config) -> None:
            config.transport = http
            config.interceptors = [*config.interceptors, call]

        request = InvokeEndpointWithBidirectionalStreamInput(
            endpoint_name=self.endpoint_name,
            target_variant=self.target_variant,
            model_invocation_path=invocation_path,
            model_query_string=query_string,
        )
        try:
            stream = await client.invoke_endpoint_with_bidirectional_stream(request, plugins=[use_session_client])
        except Exception as e:
            await _close_quietly(http)
            raise transport_error(e, opened=False) from e
        return SageMakerBidiSession(stream, http, call)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
        await self._http.close()


class _CallRecorder(Interceptor[Any, Any, HTTPRequest, HTTPResponse]):
    """An SDK interceptor that keeps the call's HTTP request and response (it only reads them)."""

    request: HTTPRequest | None = None
    response: HTTPResponse | None = None

    def read_before_transmit(self, context: RequestContext[Any, HTTPRequest]) -> None:
        self.request = context.transport_request

    def read_after_transmit(self, context: ResponseContext[Any, HTTPRequest, HTTPResponse]) -> None:
        self.response = context.transport_response


class SageMakerBidiSession:
    """One open bidirectional stream. Sends are serialized: each event's signature chains on the previous one."""

    def __init__(self, stream: Any, http: AWSCRTHTTPClient, call: _CallRecorder) -> None:
        self._stream = stream  # DuplexEventStream[RequestStreamEvent, ResponseStreamEvent, ...]
        self._http = http  # this session's own: closing it ends the session's connection
        self._call = call
        self._send_lock = asyncio.Lock()
        # Started now so that a refused stream (HTTP 4xx/5xx) is seen as early as possible.
        self._output = asyncio.ensure_future(stream.await_output())
        self._output.add_done_callback(lambda task: task.cancelled() or task.exception())  # retrieved: no warning
        self._closed = False

    async def send_text(self, text: str, utterance_id: str) -> None:
        await self.send_json({"type": "synthesize", "text": text, "id": utterance_id})

    async def append_text(self, text: str, utterance_id: str) -> None:
        await self.send_json({"type": "append", "text": text, "id": utterance_id})

    async def flush(self, utterance_id: str) -> None:
        await self.send_json({"type": "flush", "id": utterance_id})

    async def finish(self) -> None:
        await self.send_json({"type": "close"})
        async with self._send_lock:
            try:
                await self._stream.input_stream.close()
            except Exception as e:
                raise self._send_failure(e) from e

    async def cancel(self) -> None:
        await self.send_json({"type": "cancel"})

    async def send_json(self, message: dict[str, Any]) -> None:
        await self.send_raw(json_text(message).encode())

    async def send_raw(self, data: bytes, data_type: Literal["UTF8", "BINARY"] | None = "UTF8") -> None:
        """Send one payload part as is (the container receives it as one binary WebSocket frame)."""
        part = RequestPayloadPart(bytes_=data, data_type=data_type)
        async with self._send_lock:
            if self._closed:
                raise TTSTransportError(TransportCode.TTS_SESSION_DROPPED, "the session is closed")
            try:
                await self._stream.input_stream.send(RequestStreamEventPayloadPart(value=part))
            except Exception as e:
                raise self._send_failure(e) from e

    async def events(self) -> AsyncIterator[TTSEvent]:
        opened = False
        try:
            _, receiver = await self._output
            opened = True
            while (event := await receiver.receive()) is not None:
                if isinstance(event, ResponseStreamEventPayloadPart):
                    yield event_from_payload_part(event.value)
                else:  # a union member this SDK version does not know: nothing to play
                    log.warning("ignoring an unknown response stream event: %r", event)
            await self._response_completed()
        except TTSTransportError:
            raise
        except Exception as e:
            raise transport_error(e, opened=opened) from e
        finally:
            await self.aclose()

    async def _response_completed(self) -> None:
        """Raise what broke the HTTP/2 stream if the response ended with it rather than with the server's END_STREAM.

        smithy_http's ``AWSCRTHTTPResponse`` (0.6) ends its body quietly either way, so a connection cut between two
        events would pass for the end of the session. awscrt's stream, which that response keeps as ``_stream``,
        tells: once our side has ended too (the server may end first, e.g. after a cancel), ``wait_for_completion``
        returns, or raises the ``AwsCrtError`` that failed it.
        """
        crt_stream = getattr(self._call.response, "_stream", None)
        if crt_stream is None or self._closed:  # closed here (aclose): our doing, not a failure
            return
        await self._end_request_body()
        try:
            async with asyncio.timeout(_COMPLETION_TIMEOUT):
                await crt_stream.wait_for_completion()
        except TimeoutError:
            # awscrt completes a failed stream before it ends the body, so this one ended with END_STREAM.
            log.warning("the HTTP/2 stream did not complete %s s after the response ended", _COMPLETION_TIMEOUT)

    async def _end_request_body(self) -> None:
        """Close the request body (the SDK's buffer that its event publisher writes to) without flushing: awscrt's
        writer then ends the request (END_STREAM), and a send blocked on a full buffer fails instead of waiting."""
        body = self._call.request.body if self._call.request is not None else None
        if isinstance(body, AsyncBytesProvider):
            await body.close(flush=False)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._output.cancel()
        await self._end_request_body()
        with contextlib.suppress(Exception):  # fails at once now, but marks the SDK's input stream closed
            await self._stream.input_stream.close()
        if self._stream.output_stream is not None:
            with contextlib.suppress(Exception):
                await self._stream.output_stream.close()
        await _close_quietly(self._http)

    def _send_failure(self, error: Exception) -> TTSTransportError:
        # A write fails because the stream is gone; the response usually says why (e.g. a ModelError).
        if self._output.done() and not self._output.cancelled():
            if (refusal := self._output.exception()) is not None:
                return transport_error(refusal, opened=False)
            return transport_error(error, opened=True)
        return transport_error(error, opened=False)


def event_from_payload_part(part: ResponsePayloadPart) -> TTSEvent:
    """The DataType header decides; without one, a chunk is control only if all of it is a JSON object."""
    data = part.bytes_ or b""
    match part.data_type:
        case "BINARY":
            return AudioEvent(data)
        case "UTF8":
            try:
                return classify_chunk(data, is_text=True)
            except ValueError as e:  # the protocol is broken: nothing later can be trusted either
                message = f"a UTF8 payload part that is not a JSON object: {data[:80]!r}"
                raise TTSTransportError(TransportCode.TTS_SESSION_DROPPED, message, "invalid_control_frame") from e
        case _:
            return classify_chunk(data)


_SERVICE_ERRORS = (
    ModelStreamError,
    ModelError,
    InternalStreamFailure,
    ServiceUnavailableError,
    InputValidationError,
    InternalServerError,
)


def transport_error(error: BaseException, *, opened: bool) -> TTSTransportError:
    """Map what the SDK or its CRT HTTP client raised to the pipeline's TTSTransportError codes.

    Before the stream opened: ``tts_error`` if the service refused the request (a 4xx: bad input, signature,
    endpoint name), else ``tts_unavailable``. After: ``tts_session_dropped``. ``tts_code`` names the SageMaker
    error (``ModelStreamError``, ``ModelError``, …, or the service's ErrorCode) where there is one.
    """
    if isinstance(error, TTSTransportError):
        return error
    chain = _cause_chain(error)
    deepest = chain[-1]
    tts_code: str | None = None
    refused = False
    if isinstance(error, _SERVICE_ERRORS):
        tts_code = getattr(error, "error_code", None) or type(error).__name__
        details = [f"{type(error).__name__}: {getattr(error, 'message', '') or error}"]
        if (status := getattr(error, "original_status_code", None)) is not None:
            details.append(f"model status {status}")
        if original := getattr(error, "original_message", None):
            details.append(f"model said: {original}")
        message = "; ".join(details)
        refused = isinstance(error, InputValidationError)
    elif isinstance(error, UnmodeledEventError):  # an event stream `error` message
        tts_code, message = error.code, str(error)
    elif isinstance(error, CallError) and not isinstance(error, ClientTimeoutError):
        # An HTTP error the API does not model: 403 for a bad signature, 404 for no such endpoint, …
        message, refused = str(error), error.fault == "client"
    elif isinstance(error, SmithyIdentityError):
        message = f"no AWS credentials: {error}"
    elif isinstance(deepest, AwsCrtError):  # the CRT client's: connection refused, TLS failed, connection closed, …
        message = f"{deepest.name}: {deepest.message}"
    else:
        message = f"{type(deepest).__name__}: {deepest}"
    if opened:
        return TTSTransportError(TransportCode.TTS_SESSION_DROPPED, f"the SageMaker stream failed: {message}", tts_code)
    if refused:
        return TTSTransportError(TransportCode.TTS_ERROR, f"SageMaker refused the stream: {message}", tts_code)
    return TTSTransportError(TransportCode.TTS_UNAVAILABLE, f"could not open the SageMaker stream: {message}", tts_code)


def _cause_chain(error: BaseException) -> list[BaseException]:
    # The SDK wraps transport failures (SmithyError(e), OSError("Failed to read from stream.")): the root says why.
    chain = [error]
    while (cause := chain[-1].__cause__) is not None and cause not in chain:
        chain.append(cause)
    return chain


async def _close_quietly(http: AWSCRTHTTPClient) -> None:
    with contextlib.suppress(Exception):
        await http.close()
