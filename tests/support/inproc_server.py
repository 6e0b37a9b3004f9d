"""The shared in-process server a test receives from the ``server`` fixture (tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass

from kokoro_client.local_ws import ws_url
from kokoro_tts.engine.synthesis import TTSEngine
from starlette.applications import Starlette


@dataclass
class RunningServer:
    app: Starlette
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return ws_url(f"http://127.0.0.1:{self.port}")

    @property
    def engine(self) -> TTSEngine:
        engine: TTSEngine = self.app.state.engine
        return engine
