"""The AgentCore app's wiring: settings → the TTS transports, the LLM, the pipeline, the ASGI guards.

A Strands agent writes the reply; the pipeline speaks it. ``BedrockAgentCoreApp`` runs the entrypoint (an async
generator) on its worker loop and sends each event as one ``data: {json}`` SSE event; it also serves GET /ping.
The request's shape is request.py's, the hang-up watch hangup.py's, the command cli.py's.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from bedrock_agentcore.runtime import BedrockAgentCoreApp
from kokoro_client.session import BatchTTS, SessionOptions, TTSTransport
from opentelemetry import trace
from starlette.middleware import Middleware
from starlette.routing import Route
from strands import Agent
from strands.types.exceptions import MaxTokensReachedException

from . import metrics
from .conversations import Conversations, Limits, SessionBusy, SessionUnavailable, Turn
from .events import ErrorCode, Event, Events
from .hangup import Hangup, HangupMiddleware, hangup_of, until_hangup
from .models import BuiltModel, ModelUnavailable, build_model
from .pipeline import PipelineOptions, TextSource, TokenLimitReached, run_batch, run_bidi
from .request import BodyGuard, RequestError, VoiceRequest, parse_request
from .settings import AgentSettings

ModelFactory = Callable[[str | None], BuiltModel]


def agent_text(agent: Agent, prompt: str) -> TextSource:
    """The agent's reply as text deltas (the ``data`` of Strands' text stream events)."""

    async def deltas(cancel: threading.Event) -> AsyncIterator[str]:
        try:
            async for event in agent.stream_async(prompt, cancel_signal=cancel):
                data = event.get("data")
                if isinstance(data, str) and "delta" in event:
                    yield data
        except MaxTokensReachedException as exc:  # Strands' word for a reply cut at max_tokens
            raise TokenLimitReached(str(exc)) from exc

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


def make_conversations(settings: AgentSettings) -> Conversations:
    """The sessions' turns: in memory, or in S3 where AGENT_SESSION_BUCKET names a bucket."""
    limits = Limits(
        settings.session_turns,
        settings.session_chars,
        settings.sessions,
        settings.session_idle_s,
        settings.session_wait_s,
    )
    if not settings.session_bucket:
        return Conversations(limits)
    from strands.storage import S3Storage

    storage = S3Storage(settings.session_bucket, prefix=settings.session_prefix, region_name=settings.aws_region)
    return Conversations(limits, storage)


def pipeline_options(settings: AgentSettings, request: VoiceRequest) -> PipelineOptions:
    return PipelineOptions(
        # Word times tell which words the caller heard when a reply is interrupted (heard.py).
        session=SessionOptions(voice=request.voice, speed=request.speed, format=request.format, word_timestamps=True),
        tts_connect_timeout_s=settings.tts_connect_timeout_s,
        tts_idle_timeout_s=settings.tts_idle_timeout_s,
        tts_busy_retry_s=settings.tts_busy_retry_s,
        llm_idle_timeout_s=settings.llm_idle_timeout_s,
    )


async def handle(
    payload: object,
    settings: AgentSettings,
    model_factory: ModelFactory,
    transport: TTSTransport,
    batch: BatchTTS,
    conversations: Conversations,
    hangup: Hangup | None = None,
    runtime_session_id: str | None = None,
) -> AsyncIterator[Event]:
    """One invocation: validate, take the session's turn (stopping a reply still running in it), cut the last reply
    to what was heard when the caller says, build the agent on the session's history, run the pipeline."""
    events = Events()
    try:
        request = parse_request(payload, settings, runtime_session_id)
        built = model_factory(request.model_id)
    except RequestError as error:
        metrics.request_error(error.code)
        yield events.error(error.code, error.message)
        return
    except ModelUnavailable as error:
        metrics.request_error(ErrorCode.MODEL_UNAVAILABLE)
        yield events.error(ErrorCode.MODEL_UNAVAILABLE, str(error))
        return
    stop = Hangup()  # the caller hangs up, or the session's next prompt interrupts this reply
    superseded = Hangup()
    superseded.subscribe(stop.fire)
    if hangup is not None:
        hangup.subscribe(stop.fire)
    try:
        async with conversations.turn(request.session_id, superseded) as turn:
            agent = await turn.agent(built.model, settings.system_prompt)
            if request.played_ms is not None:
                cut = turn.heard(request.played_ms)
                yield events.interrupted(request.played_ms, cut.spoken, cut.remaining)
            if request.prompt is None:
                return
            async for event in _reply(request, settings, built, agent, turn, transport, batch, stop):
                yield event
    except SessionBusy as busy:
        metrics.request_error(ErrorCode.SESSION_BUSY)
        yield events.error(ErrorCode.SESSION_BUSY, str(busy))
        return
    except SessionUnavailable as unavailable:
        metrics.request_error(ErrorCode.SESSION_UNAVAILABLE)
        yield events.error(ErrorCode.SESSION_UNAVAILABLE, str(unavailable))
        return
    if superseded.fired and request.prompt is not None and not turn.ended:
        # The caller is still there: say why the reply stopped (its turn keeps the words sent).
        yield events.error(ErrorCode.SUPERSEDED, "a newer prompt in this session interrupted this reply")


async def _reply(
    request: VoiceRequest,
    settings: AgentSettings,
    built: BuiltModel,
    agent: Agent,
    turn: Turn,
    transport: TTSTransport,
    batch: BatchTTS,
    stop: Hangup,
) -> AsyncIterator[Event]:
    assert request.prompt is not None
    turn.asked()
    source = agent_text(agent, request.prompt)
    options = pipeline_options(settings, request)
    if request.mode == "bidi":
        events = run_bidi(source, transport, model_name=built.name, options=options)
    else:
        events = run_batch(source, batch, model_name=built.name, options=options)
    reply = metrics.Reply(request.mode, built.name)
    try:
        # The reply's span is current while the pipeline starts its tasks: Strands' own spans become its children.
        with trace.use_span(reply.span, end_on_exit=False):
            async for event in until_hangup(events, stop):
                reply.see(event)
                turn.see(event)
                yield event
    finally:
        await events.aclose()  # closed early (the caller left, or the SDK stopped us): stop the LLM and the TTS
        reply.end()


def create_app(
    settings: AgentSettings | None = None,
    *,
    model_factory: ModelFactory | None = None,
    transport: TTSTransport | None = None,
    batch: BatchTTS | None = None,
    conversations: Conversations | None = None,
) -> BedrockAgentCoreApp:
    settings = settings or AgentSettings()
    if transport is None or batch is None:
        default_transport, default_batch = make_tts(settings)
        transport = transport or default_transport
        batch = batch or default_batch
    factory: ModelFactory = model_factory or (lambda model_id: build_model(settings, model_id))
    app = BedrockAgentCoreApp(middleware=[Middleware(BodyGuard), Middleware(HangupMiddleware)])
    app.router.routes.append(Route("/metrics", metrics.metrics_endpoint, methods=["GET"]))
    if settings.web_page:  # the local demo page (docs/web.md); main() decides when it is unset
        from .web import web_routes

        app.router.routes.extend(web_routes())
    tts, batch_tts = transport, batch
    sessions = conversations or make_conversations(settings)

    @app.entrypoint
    async def invoke(payload: Any, context: Any) -> AsyncIterator[Event]:
        session_id = getattr(context, "session_id", None)
        async for event in handle(payload, settings, factory, tts, batch_tts, sessions, hangup_of(context), session_id):
            yield event

    return app
