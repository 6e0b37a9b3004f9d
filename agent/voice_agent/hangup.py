"""The caller hung up: stop the LLM and the TTS session at once (an ASGI workaround for the AgentCore SDK).

bedrock-agentcore (1.25.0, pinned) runs the entrypoint on its own worker loop and relays events through a thread;
when the caller leaves, it stops the entrypoint only once that relay is closed, which Starlette's threadpool
iteration never does: the relay sits in a reference cycle until the garbage collector happens to reach it, and until
then the LLM and the TTS run on with the reply for nobody.
tests/agent/test_hangup.py holds both halves: with this module a hang-up cancels the reply, and without it (the SDK
alone, no collection in between) the reply still runs to its end; when that second test fails, the SDK handles
hang-ups and this can go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .events import Event

log = logging.getLogger(__name__)

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


def hangup_of(context: Any) -> Hangup | None:
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
