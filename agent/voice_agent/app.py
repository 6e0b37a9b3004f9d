"""The AgentCore app: POST /invocations {"prompt", "mode"?, "voice"?, "speed"?} → SSE events (events.py).

A Strands agent writes the reply; the pipeline speaks it. ``BedrockAgentCoreApp`` runs the entrypoint (an async
generator) on its worker loop and sends each event as one ``data: {json}`` SSE event; it also serves GET /ping.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from bedrock_agentcore.runtime import BedrockAgentCoreApp
from kokoro_client.audio import FORMAT_NAMES, MAX_SPEED, MIN_SPEED
from kokoro_client.session import BatchTTS, SessionOptions, TTSTransport
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strands import Agent

from .events import ErrorCode, Event, Events
from .models import BuiltModel, ModelUnavailable, build_model
from .pipeline import PipelineOptions, TextSource, run_batch, run_bidi
from .settings import AgentSettings

log = logging.getLogger(__name__)

MODES = ("bidi", "batch")
# A prompt is at most max_prompt_chars (8,000 by default): a body of 1 MiB is generous, and is all that is read.
MAX_BODY_BYTES = 1024 * 1024

ModelFactory = Callable[[str | None], BuiltModel]


class RequestError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class VoiceRequest:
    prompt: str
    mode: str = "bidi"
    voice: str | None = None
    speed: float | None = None
    format: str = "pcm"
    model_id: str | None = None


def _optional_str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is not None and not isinstance(value, str):
        raise RequestError(ErrorCode.INVALID_REQUEST, f"'{key}' must be a string")
    return value or None


def parse_request(payload: object, settings: AgentSettings) -> VoiceRequest:
    """Check the request; the TTS server checks the voice itself (it knows which packs it has)."""
    if not isinstance(payload, dict):
        raise RequestError(ErrorCode.INVALID_REQUEST, "the request body must be a JSON object")
    prompt = payload.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise RequestError(ErrorCode.INVALID_REQUEST, "'prompt' must be a string")
    if not prompt or not prompt.strip():
        raise RequestError(ErrorCode.EMPTY_PROMPT, "'prompt' is missing or blank")
    if len(prompt) > settings.max_prompt_chars:
        raise RequestError(ErrorCode.PROMPT_TOO_LONG, f"'prompt' is over {settings.max_prompt_chars} characters")
    mode = payload.get("mode", "bidi")
    if mode not in MODES:
        raise RequestError(ErrorCode.UNKNOWN_MODE, f"'mode' must be one of {', '.join(MODES)}, not {mode!r}")
    speed = payload.get("speed", settings.speed)
    if speed is not None and (
        isinstance(speed, bool) or not isinstance(speed, int | float) or not MIN_SPEED <= speed <= MAX_SPEED
    ):
        raise RequestError(ErrorCode.INVALID_SPEED, f"'speed' must be a number from {MIN_SPEED} to {MAX_SPEED}")
    fmt = payload.get("format", "pcm")
    if fmt not in FORMAT_NAMES:
        raise RequestError(ErrorCode.INVALID_REQUEST, f"'format' must be one of {', '.join(FORMAT_NAMES)}")
    return VoiceRequest(
        prompt=prompt.strip(),
        mode=mode,
        voice=_optional_str(payload, "voice") or settings.voice,
        speed=None if speed is None else float(speed),
        format=fmt,
        model_id=_optional_str(payload, "model_id"),
    )


def agent_text(agent: Agent, prompt: str) -> TextSource:
    """The agent's reply as text deltas (the ``data`` of Strands' text stream events)."""

    async def deltas(cancel: threading.Event) -> AsyncIterator[str]:
        async for event in agent.stream_async(prompt, cancel_signal=cancel):
            data = event.get("data")
            if isinstance(data, str) and "delta" in event:
                yield data

    return deltas


def make_tts(settings: AgentSettings) -> tuple[TTSTransport, BatchTTS]:
    """The session transport (bidi) and the batch transport, for a local server or a SageMaker endpoint."""
    if settings.tts_endpoint_name:
        from kokoro_client.sagemaker_batch import SageMakerBatchTTS
        from kokoro_client.sagemaker_bidi import SageMakerBidiTransport

        region = settings.aws_region or _default_region()
        return (
            SageMakerBidiTransport(settings.tts_endpoint_name, region),
            SageMakerBatchTTS(settings.tts_endpoint_name, region_name=region),
        )
    from kokoro_client.http_batch import HTTPBatchTTS
    from kokoro_client.local_ws import LocalWSTransport

    return (
        LocalWSTransport(settings.tts_url, open_timeout_s=settings.tts_connect_timeout_s),
        HTTPBatchTTS(
            settings.tts_url, connect_timeout_s=settings.tts_connect_timeout_s, timeout_s=settings.tts_idle_timeout_s
        ),
    )


def _default_region() -> str:
    import boto3

    region = boto3.session.Session().region_name  # AWS_REGION, AWS_DEFAULT_REGION or the profile
    if not region:
        raise ValueError("TTS_ENDPOINT_NAME is set but no AWS region is: set AWS_REGION")
    return str(region)


def pipeline_options(settings: AgentSettings, request: VoiceRequest) -> PipelineOptions:
    return PipelineOptions(
        session=SessionOptions(voice=request.voice, speed=request.speed, format=request.format),
        tts_connect_timeout_s=settings.tts_connect_timeout_s,
        tts_idle_timeout_s=settings.tts_idle_timeout_s,
        llm_idle_timeout_s=settings.llm_idle_timeout_s,
        chunk_min_chars=settings.chunk_min_chars,
        chunk_eager=settings.chunk_eager,
    )


# --- hanging up ---------------------------------------------------------------------------------------------------
# The SDK runs the entrypoint on its own worker loop and relays events through a thread; when the caller leaves, it
# stops the entrypoint only once that relay is garbage-collected (a reference cycle keeps it alive until a full GC,
# so in practice the LLM and the TTS ran to the end). The middleware below sees the disconnect itself and tells the
# entrypoint through the request's ASGI scope, which the SDK hands over as ``context.request``.

HANGUP_SCOPE_KEY = "voice_agent.hangup"


class Hangup:
    """Fired (on the server's loop) when the caller of one invocation goes away; callbacks run once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.fired = False

    def subscribe(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self.fired:
                self._callbacks.append(callback)
                return
        callback()

    def fire(self) -> None:
        with self._lock:
            if self.fired:
                return
            self.fired = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            with contextlib.suppress(Exception):
                callback()


class HangupMiddleware:
    """Pure ASGI (no task of its own): watches POST /invocations for the client's disconnect."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != "/invocations":
            await self.app(scope, receive, send)
            return
        hangup = Hangup()
        scope[HANGUP_SCOPE_KEY] = hangup

        async def watched_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                hangup.fire()
            return message

        async def watched_send(message: Message) -> None:
            try:
                await send(message)
            except OSError:  # servers that report a gone client on send (ASGI spec 2.4)
                hangup.fire()
                raise

        try:
            await self.app(scope, watched_receive, watched_send)
        finally:
            hangup.fire()  # the response is over either way: nothing of this request may keep running


class BodyGuard:
    """Pure ASGI, before the SDK: POST /invocations bodies are read up to ``MAX_BODY_BYTES`` (413 past it, without
    reading the rest) and must be JSON (400 invalid_json), each answered ``{"error": {"code", "message"}}``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != "/invocations" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        more = True
        declared = dict(scope.get("headers", [])).get(b"content-length", b"0")
        too_large = declared.isdigit() and int(declared) > MAX_BODY_BYTES
        while more and not too_large:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            too_large = len(body) > MAX_BODY_BYTES
        if too_large:
            too_long = f"the body is over {MAX_BODY_BYTES} bytes"
            await _error(scope, receive, send, 413, ErrorCode.BODY_TOO_LARGE, too_long)
            return
        try:
            json.loads(body)
        except (ValueError, RecursionError):
            await _error(scope, receive, send, 400, ErrorCode.INVALID_JSON, "the body is not JSON")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _error(scope: Scope, receive: Receive, send: Send, status: int, code: ErrorCode, message: str) -> None:
    response = JSONResponse({"error": {"code": code.value, "message": message}}, status_code=status)
    response.headers["connection"] = "close"  # the rest of an unread body is never read
    await response(scope, receive, send)


def _hangup_of(context: Any) -> Hangup | None:
    request = getattr(context, "request", None)
    hangup = getattr(request, "scope", {}).get(HANGUP_SCOPE_KEY)
    return hangup if isinstance(hangup, Hangup) else None


async def until_hangup(events: AsyncGenerator[Event], hangup: Hangup | None) -> AsyncIterator[Event]:
    """``events`` until they end or the caller hangs up; then the pipeline is closed and this simply ends."""
    if hangup is None:
        async for event in events:
            yield event
        return
    loop = asyncio.get_running_loop()
    gone = asyncio.Event()

    def on_hangup() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is already closed: nothing left to stop
            loop.call_soon_threadsafe(gone.set)

    hangup.subscribe(on_hangup)
    waiter = asyncio.create_task(gone.wait())

    async def step() -> Event:
        return await anext(events)

    try:
        while True:
            next_event = asyncio.create_task(step())
            try:
                await asyncio.wait({next_event, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not next_event.done():  # hung up (or we are cancelled): unwind the pipeline inside its step
                    next_event.cancel()
                    with contextlib.suppress(BaseException):
                        await next_event
            if next_event.cancelled():
                log.info("the caller hung up: the LLM and the TTS session are stopped")
                return
            try:
                event = next_event.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        waiter.cancel()


async def handle(
    payload: object,
    settings: AgentSettings,
    model_factory: ModelFactory,
    transport: TTSTransport,
    batch: BatchTTS,
    hangup: Hangup | None = None,
) -> AsyncIterator[Event]:
    """One invocation: validate, build the agent, run the pipeline in the requested mode."""
    try:
        request = parse_request(payload, settings)
        built = model_factory(request.model_id)
    except RequestError as error:
        yield Events().error(error.code, error.message)
        return
    except ModelUnavailable as error:
        yield Events().error(ErrorCode.MODEL_UNAVAILABLE, str(error))
        return
    agent = Agent(model=built.model, system_prompt=settings.system_prompt, callback_handler=None)
    source = agent_text(agent, request.prompt)
    options = pipeline_options(settings, request)
    if request.mode == "bidi":
        events = run_bidi(source, transport, model_name=built.name, options=options)
    else:
        events = run_batch(source, batch, model_name=built.name, options=options)
    try:
        async for event in until_hangup(events, hangup):
            yield event
    finally:
        await events.aclose()  # closed early (the caller left, or the SDK stopped us): stop the LLM and the TTS


def create_app(
    settings: AgentSettings | None = None,
    *,
    model_factory: ModelFactory | None = None,
    transport: TTSTransport | None = None,
    batch: BatchTTS | None = None,
) -> BedrockAgentCoreApp:
    settings = settings or AgentSettings()
    if transport is None or batch is None:
        default_transport, default_batch = make_tts(settings)
        transport = transport or default_transport
        batch = batch or default_batch
    factory: ModelFactory = model_factory or (lambda model_id: build_model(settings, model_id))
    app = BedrockAgentCoreApp(middleware=[Middleware(BodyGuard), Middleware(HangupMiddleware)])
    if settings.web_page:  # the local demo page (docs/web.md); main() decides when it is unset
        from .web import web_routes

        app.router.routes.extend(web_routes())
    tts, batch_tts = transport, batch

    @app.entrypoint
    async def invoke(payload: Any, context: Any) -> AsyncIterator[Event]:
        async for event in handle(payload, settings, factory, tts, batch_tts, _hangup_of(context)):
            yield event

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="voice-agent serve", description="The voice agent (AgentCore app)")
    # Loopback unless told otherwise; the container passes --host 0.0.0.0 (AgentCore calls it on port 8080).
    parser.add_argument("--host", default=os.environ.get("AGENT_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("AGENT_PORT", "8080")))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    settings = AgentSettings()
    if settings.web_page is None:  # AGENT_WEB_PAGE unset: the page only on loopback (local runs, not the container)
        from .web import is_loopback

        settings = dataclasses.replace(settings, web_page=is_loopback(args.host))
    log.info(
        "voice agent on %s:%d: model %s, TTS %s",
        args.host,
        args.port,
        settings.model,
        settings.tts_endpoint_name or settings.tts_url,
    )
    if settings.web_page:
        log.info("web page: http://%s:%d/", args.host if ":" not in args.host else f"[{args.host}]", args.port)
    create_app(settings).run(port=args.port, host=args.host)


if __name__ == "__main__":
    main()
