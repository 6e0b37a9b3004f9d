"""The Starlette application: routes, and the model loaded in the background so /ping can say 503 meanwhile.

A model that cannot load is fatal: one log line says why and how to fix it, and ``on_fatal`` (``serve`` passes
one) stops the process; /ping never turns 200. On shutdown ``begin_shutdown`` drains the sessions (sessions/core.py).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from kokoro_client import cartesia as cartesia_wire
from kokoro_client import elevenlabs as elevenlabs_wire
from kokoro_client.deepgram import PROTOCOL_PARAM, SPEAK_PATH, selects_deepgram
from kokoro_client.errors import TTSError
from kokoro_client.protocol import CLOSE_GOING_AWAY, CLOSE_TRY_AGAIN_LATER, INVOCATIONS_PATH, PING_PATH, WS_PATH
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from kokoro_tts import metrics
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.routes import cartesia as cartesia_api
from kokoro_tts.routes import elevenlabs as elevenlabs_api
from kokoro_tts.routes import errors
from kokoro_tts.routes import openai as openai_api
from kokoro_tts.routes.captioned import CAPTIONED_PATH, captioned_speech
from kokoro_tts.routes.sagemaker import health, invocations, ping
from kokoro_tts.server.api_keys import ApiKeys
from kokoro_tts.server.request_ids import RequestIds
from kokoro_tts.sessions.bidi import BidiDialect
from kokoro_tts.sessions.cartesia import CartesiaDialect
from kokoro_tts.sessions.core import Dialect, Session
from kokoro_tts.sessions.deepgram import DeepgramDialect
from kokoro_tts.sessions.elevenlabs import ElevenLabsDialect
from kokoro_tts.settings import Settings

log = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None,
    load_engine: Callable[[Settings], TTSEngine] = TTSEngine.load,
    on_fatal: Callable[[str], None] | None = None,
) -> Starlette:
    settings = settings or Settings()
    sessions: set[Session] = set()

    async def bidirectional_stream(websocket: WebSocket) -> None:
        await serve_session(websocket, _session_dialect(websocket.query_params))

    async def deepgram_speak(websocket: WebSocket) -> None:
        await serve_session(websocket, DeepgramDialect)

    async def cartesia_websocket(websocket: WebSocket) -> None:
        await serve_session(websocket, CartesiaDialect)

    async def elevenlabs_stream_input(websocket: WebSocket) -> None:
        await serve_session(websocket, ElevenLabsDialect.single)

    async def elevenlabs_multi_stream_input(websocket: WebSocket) -> None:
        await serve_session(websocket, ElevenLabsDialect.multiple)

    async def serve_session(websocket: WebSocket, dialect: Callable[[Session], Dialect]) -> None:
        if websocket.app.state.draining:
            await websocket.accept()  # accepted first, so that the client reads the code and the reason
            await websocket.close(code=CLOSE_GOING_AWAY, reason="shutting_down: the server is stopping")
            return
        engine: TTSEngine | None = websocket.app.state.engine
        if engine is None:
            await asyncio.sleep(errors.NOT_READY_HOLD_S)  # as an HTTP not_ready is held
            await websocket.close(code=CLOSE_TRY_AGAIN_LATER, reason="model loading; retry when GET /ping answers 200")
            return
        try:
            session = Session(websocket, engine, dialect)  # server_busy when the server has all its sessions
        except TTSError as error:  # the close reason starts with the stable code
            metrics.error("ws", error.code)
            await websocket.accept()
            await websocket.close(
                code=CLOSE_TRY_AGAIN_LATER, reason=f"{error.code}: too many sessions; retry in a few seconds"
            )
            return
        sessions.add(session)
        try:
            await session.run()
        finally:
            sessions.discard(session)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.engine = None
        app.state.draining = False
        app.state.sessions = sessions
        loading = asyncio.create_task(_load(app, settings, load_engine, on_fatal))
        try:
            yield
        finally:
            loading.cancel()
            await asyncio.gather(loading, return_exceptions=True)
            if app.state.engine is not None:
                metrics.unwatch(app.state.engine)
                await app.state.engine.stop()

    return Starlette(
        routes=[
            Route(PING_PATH, ping, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route(INVOCATIONS_PATH, invocations, methods=["POST"]),
            Route("/v1/audio/speech", openai_api.speech, methods=["POST"]),
            Route("/v1/audio/voices", openai_api.voices, methods=["GET"]),
            Route("/v1/models", openai_api.models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", openai_api.model, methods=["GET"]),
            Route(CAPTIONED_PATH, captioned_speech, methods=["POST"]),
            *(Route(path, elevenlabs_api.text_to_speech, methods=["POST"]) for path in elevenlabs_api.PATHS),
            Route(cartesia_wire.BYTES_PATH, cartesia_api.tts_bytes, methods=["POST"]),
            WebSocketRoute(WS_PATH, bidirectional_stream),
            Route("/metrics", metrics.metrics_endpoint, methods=["GET"]),
            WebSocketRoute(SPEAK_PATH, deepgram_speak),
            WebSocketRoute(elevenlabs_wire.STREAM_INPUT_PATH, elevenlabs_stream_input),
            WebSocketRoute(elevenlabs_wire.MULTI_STREAM_INPUT_PATH, elevenlabs_multi_stream_input),
            WebSocketRoute(cartesia_wire.WEBSOCKET_PATH, cartesia_websocket),
        ],
        middleware=[Middleware(RequestIds), Middleware(ApiKeys, key=settings.api_key)],
        exception_handlers=errors.HANDLERS,
        lifespan=lifespan,
    )


def _session_dialect(query: Mapping[str, str]) -> Callable[[Session], Dialect]:
    """The vocabulary on SageMaker's one session path, where a client's own path may not reach the container but its
    query does (``ModelQueryString``): ``?protocol=`` names a vendor's socket; Deepgram's own query parameters (as
    Pipecat's SageMaker service sends them) select Deepgram's; else the session protocol."""
    match query.get(PROTOCOL_PARAM):
        case elevenlabs_wire.PROTOCOL_NAME:
            return ElevenLabsDialect.multiple
        case cartesia_wire.PROTOCOL_NAME:
            return CartesiaDialect
    return DeepgramDialect if selects_deepgram(query) else BidiDialect


def begin_shutdown(app: Starlette, grace_s: float) -> list[asyncio.Task[None]]:
    """Refuse new work (HTTP and sessions answer shutting_down, /ping 503) and drain every session: the utterance
    in flight may finish within ``grace_s``; then each session closes with 1001."""
    app.state.draining = True
    return [asyncio.create_task(session.shutdown(grace_s)) for session in list(app.state.sessions)]


async def _load(
    app: Starlette,
    settings: Settings,
    load_engine: Callable[[Settings], TTSEngine],
    on_fatal: Callable[[str], None] | None,
) -> None:
    loop = asyncio.get_running_loop()
    try:
        engine = await loop.run_in_executor(None, load_engine, settings)
        await loop.run_in_executor(None, engine.warm_up)
        await loop.run_in_executor(None, _freeze_long_lived)
    except Exception as exc:
        message = load_failure(exc, settings)
        log.error("%s", message)
        log.debug("the load failure in full", exc_info=True)
        if on_fatal is not None:
            on_fatal(message)
        return
    engine.start()
    app.state.engine = engine
    metrics.watch(engine)
    log.info("model ready: backend=%s device=%s", engine.backend.name, engine.backend.device)


def _freeze_long_lived() -> None:
    """Take what lives as long as the process (the model, the G2P's lexicons, the warm-up's objects) out of the
    cyclic garbage collector. Its full collections then scan only what requests made since, not the lexicons'
    hundreds of thousands of objects (a long pause on the event loop), and they run often enough that the state of
    a stream its client abandoned (kept in a cycle by the CancelledError's traceback) is freed within seconds, not
    minutes (docs/engine.md)."""
    gc.collect()
    gc.freeze()
    gc.collect()  # counts what is left, which is what the next full collection waits for a quarter more of


def load_failure(exc: BaseException, settings: Settings) -> str:
    """One line: why the model cannot load, and what to change."""
    where = f"KOKORO_BACKEND={settings.backend}, KOKORO_DEVICE={settings.device}"
    if isinstance(exc, ModuleNotFoundError):
        return (
            f"cannot load the model: the Python package {exc.name!r} is not installed ({where}); "
            "install the image built for this backend, or set KOKORO_BACKEND=onnx"
        )
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, OSError) or type(exc).__name__ in ("LayoutError", "ChecksumMismatch"):
        return (
            f"cannot load the model: the weights in {settings.model_dir} are missing or incomplete ({text}); "
            "fetch them with `make weights` (or `python -m scripts.weights fetch`), or point KOKORO_MODEL_DIR "
            "at a complete layout"
        )
    if any(word in text.lower() for word in ("cuda", "gpu", "nvidia", "driver")):
        return f"cannot load the model: no usable GPU ({text}; {where}); run on a GPU host or set KOKORO_DEVICE=cpu"
    return f"cannot load the model ({where}): {type(exc).__name__}: {text}"
