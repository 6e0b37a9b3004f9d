"""The hang-up workaround (voice_agent/hangup.py) against the pinned bedrock-agentcore.

tests/agent/test_agent_app.py shows that with it a caller who leaves stops the LLM and the TTS session. This shows
why it is still there: without it, the SDK alone lets the reply run on for nobody until the cyclic garbage collector
happens to reach the SDK's relay (when collections come is up to the process: in this one, the in-process TTS server
froze its long-lived objects, so they come often). With collections off, as between two, the LLM stream runs to its
end, never cancelled. When this test fails, the SDK stops the entrypoint on a disconnect by itself: delete
hangup.py and this test.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
import voice_agent.app as agent_app
from support.agent_fixtures import AgentServer, agent_settings, make_model
from support.eventually import eventually
from support.inproc_server import RunningServer

from scripts.sse import post_sse


class PassThrough:
    """The app without the hang-up watch."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


@pytest.mark.slow
async def test_without_the_workaround_the_sdk_lets_a_hung_up_reply_run_to_its_end(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_app, "HangupMiddleware", PassThrough)
    monkeypatch.setattr(agent_app, "hangup_of", lambda context: None)
    model = make_model()
    gc.collect()
    gc.disable()
    try:
        with AgentServer(agent_settings(server.base_url), model).running() as agent_:
            stream = post_sse(f"{agent_.url}/invocations", {"prompt": "Hi", "mode": "bidi"})
            async with asyncio.timeout(60):
                async for event in stream:
                    if event["type"] == "audio_chunk":
                        break
            await stream.aclose()  # type: ignore[attr-defined]  # hangs up: the connection closes here
            await eventually(lambda: model.streams and model.streams[0].closed, "the LLM stream", within_s=30)
    finally:
        gc.enable()
    record = model.streams[0]
    assert record.completed and not record.cancelled, record
