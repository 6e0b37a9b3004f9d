"""The Starlette application: routes, and the model loaded in the background so /ping can say 503 meanwhile."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from .engine import TTSEngine
from .http_api import health, invocations, openai_speech, ping
from .settings import Settings
from .ws_session import BidiSession

log = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None, load_engine: Callable[[Settings], TTSEngine] = TTSEngine.load
) -> Starlette:
    settings = settings or Settings()

    async def bidirectional_stream(websocket: WebSocket) -> None:
        engine: TTSEngine | None = websocket.app.state.engine
        if engine is None:
            await websocket.close(code=1013, reason="model loading; retry when GET /ping answers 200")
            return
        await BidiSession(websocket, engine).run()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.engine = None
        loading = asyncio.create_task(_load(app, settings, load_engine))
        try:
            yield
        finally:
            loading.cancel()
            await asyncio.gather(loading, return_exceptions=True)
            if app.state.engine is not None:
                await app.state.engine.stop()

    return Starlette(
        routes=[
            Route("/ping", ping, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/invocations", invocations, methods=["POST"]),
            Route("/v1/audio/speech", openai_speech, methods=["POST"]),
            WebSocketRoute("/invocations-bidirectional-stream", bidirectional_stream),
        ],
        lifespan=lifespan,
    )


async def _load(app: Starlette, settings: Settings, load_engine: Callable[[Settings], TTSEngine]) -> None:
    loop = asyncio.get_running_loop()
    try:
        engine = await loop.run_in_executor(None, load_engine, settings)
        await loop.run_in_executor(None, engine.warm_up)
    except Exception:
        log.exception("loading the model from %s failed; /ping stays 503", settings.model_dir)
        return
    engine.start()
    app.state.engine = engine
    log.info("model ready: backend=%s device=%s", engine.backend.name, engine.backend.device)
