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


def pipeline_options(settings: AgentSettings, request: VoiceRequest) -> PipelineOptions:
    return PipelineOptions(
        session=SessionOptions(voice=request.voice, speed=request.speed, format=request.format),
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
    hangup: Hangup | None = None,
) -> AsyncIterator[Event]:
    """One invocation: validate, build the agent, run the pipeline in the requested mode."""
    try:
        request = parse_request(payload, settings)
        built = model_factory(request.model_id)
    except RequestError as error:
        metrics.request_error(error.code)
        yield Events().error(error.code, error.message)
        return
    except ModelUnavailable as error:
        metrics.request_error(ErrorCode.MODEL_UNAVAILABLE)
        yield Events().error(ErrorCode.MODEL_UNAVAILABLE, str(error))
        return
    agent = Agent(model=built.model, system_prompt=settings.system_prompt, callback_handler=None)
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
            async for event in until_hangup(events, hangup):
                reply.see(event)
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

    @app.entrypoint
    async def invoke(payload: Any, context: Any) -> AsyncIterator[Event]:
        async for event in handle(payload, settings, factory, tts, batch_tts, hangup_of(context)):
            yield event

    return app
