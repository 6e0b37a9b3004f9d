"""The session core every WebSocket wire protocol shares, and the interface of the dialect that speaks one.

A ``Session`` holds one client's queue of utterances and speaks them strictly in order, each through the session's
stream (engine/runs.py, which admits, runs and meters it): two tasks, a receiver that hands each incoming message to
the dialect and a speaker that speaks the queue; cancel, close-when-spoken, the send lock, the end when the client
vanishes and the drain on shutdown. It knows no wire protocol's frames: a ``Dialect`` (bidi.py, deepgram.py,
elevenlabs.py, cartesia.py; writing.py is what they share) turns messages into calls on the session's public
methods and renders events (a run's, and the session's own: an utterance finished, a shutdown) into its own frames.
The receiver keeps reading after a close, so a client that vanishes while its queue is spoken stops that work at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from kokoro_client.errors import INTERNAL_ERROR_MESSAGE, ErrorCode, TTSError
from kokoro_client.logs import bind_ids
from kokoro_client.protocol import CLOSE_GOING_AWAY, CLOSE_INTERNAL_ERROR, CLOSE_NORMAL
from starlette.websockets import WebSocket, WebSocketDisconnect

from kokoro_tts import metrics
from kokoro_tts.engine.capacity import READ_RECEIPTS
from kokoro_tts.engine.events import Ending, Event, Refused
from kokoro_tts.engine.runs import Stream
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.engine.utterances import Utterance
from kokoro_tts.settings import Settings

# The ASGI receive message key the server sets (server/hypercorn_hardening.py) on a frame over the size limit
# it dropped: the session answers message_too_large and goes on.
OVERSIZE_KEY = "kokoro.oversize_bytes"

log = logging.getLogger(__name__)  # every dialect's session lines


@dataclass(frozen=True)
class Finished:
    """After each utterance the session took, however it ended (spoken, refused, stopped)."""

    utterance: Utterance


@dataclass(frozen=True)
class ShuttingDown:
    """The server is stopping with ``unfinished`` (stopped in flight, then queued) not spoken; the session then drops
    its queue and closes with 1001."""

    unfinished: tuple[Utterance, ...]


# Everything a dialect renders: a run's events and endings (engine/events.py), and the session's own.
SessionEvent = Event | Ending | Finished | ShuttingDown


class Dialect(Protocol):
    """One wire protocol on a ``Session``: made with the session (``dialect(session)``), it calls only the session's
    public methods. The session calls these, each awaited before the session goes on."""

    @property
    def route(self) -> str:
        """The route label its metrics carry."""
        ...

    async def opened(self) -> bool:
        """The socket is accepted; False ends the session (the dialect has closed the socket)."""
        ...

    async def received(self, raw: str | bytes) -> None:
        """One client message. A ``TTSError`` raised here is answered with ``Refused`` and the session goes on."""
        ...

    async def render(self, event: SessionEvent) -> None:
        """Sends what ``event`` means in the dialect's frames (nothing, where it has none)."""
        ...


class Session:
    """One client's WebSocket session, speaking the wire protocol of the dialect it is made with. Made before the
    socket is accepted: ``server_busy`` when the server has all the sessions it takes."""

    def __init__(self, websocket: WebSocket, engine: TTSEngine, dialect: Callable[[Session], Dialect]) -> None:
        self._ws = websocket
        self.engine: Final = engine
        self.dialect: Final = dialect(self)
        self.route: Final = self.dialect.route
        self._stream = Stream.for_session(engine, metrics.RouteMeter(self.route))
        self._queue: deque[Utterance] = deque()
        self._wakeup = asyncio.Event()
        self._closing = False
        self._in_flight: Utterance | None = None
        self._send_lock = asyncio.Lock()
        self._closed = False  # the server has sent its close: nothing more can reach the client
        self._draining = False
        self._speaker: asyncio.Task[None] | None = None

    # --- what a dialect reads ----------------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.engine.settings

    @property
    def path(self) -> str:
        path: str = self._ws.scope.get("path", "")
        return path

    @property
    def path_params(self) -> Mapping[str, str]:
        """The route's path parameters (ElevenLabs' ``voice_id``)."""
        params: Mapping[str, str] = self._ws.path_params
        return params

    @property
    def query_params(self) -> Mapping[str, str]:
        return self._ws.query_params

    @property
    def queued(self) -> Sequence[Utterance]:
        """The utterances waiting to be spoken, in order (a copy)."""
        return tuple(self._queue)

    @property
    def in_flight(self) -> Utterance | None:
        return self._in_flight

    @property
    def closing(self) -> bool:
        """The client asked to close: no new utterances, the queue is spoken, then the socket closes."""
        return self._closing

    def refuse_when_closing(self, close: str) -> None:
        """For a message that adds work: ``invalid_message`` once the client has asked to close (with the dialect's
        message ``close``)."""
        if self._closing:
            raise TTSError(ErrorCode.INVALID_MESSAGE, f"The session is closing: it takes nothing new after {close}.")

    def refuse_when_full(self, wait_for: str) -> None:
        """For a message that adds an utterance: ``queue_full`` once the queue holds as many as a session may
        (``wait_for``: the dialect's message that says one has been spoken)."""
        queued = len(self._queue)
        if queued >= self.settings.max_queued_utterances:
            raise TTSError(
                ErrorCode.QUEUE_FULL,
                f"{queued} utterances are already queued (the limit); wait for a {wait_for} before sending more.",
            )

    def refuse_when_draining(self) -> None:
        """For a message that adds an utterance: ``shutting_down`` once the server is stopping."""
        if self._draining:
            raise TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; send this to another instance.")

    # --- what a dialect does -----------------------------------------------------------------------------------

    def enqueue(self, utterance: Utterance) -> None:
        """Queues ``utterance`` to be spoken after those before it (the dialect checks the count cap first);
        ``queue_full`` when it would take the queue past its seconds of audio (estimated from the text), so one
        session cannot reserve an hour of a stream slot. An empty queue takes any utterance."""
        queued_s = sum(u.pieces.estimated_audio_s for u in self._queue)
        limit = self.settings.max_queued_audio_s
        if self._queue and queued_s + utterance.pieces.estimated_audio_s > limit:
            raise TTSError(
                ErrorCode.QUEUE_FULL,
                f"About {queued_s:.0f} s of audio is already queued and this would take it past {limit:g} s; "
                "wait for what is queued to be spoken before sending more.",
            )
        self._queue.append(utterance)
        self._wakeup.set()

    def cancel(self, target: str | None) -> list[str]:
        """Drops matching queued utterances (returned, each counted as cancelled) and stops a matching one in
        flight (its ``Stopped`` follows); None matches every one."""
        dropped = [u for u in self._queue if target is None or u.id == target]
        for utterance in dropped:
            self._queue.remove(utterance)
            metrics.utterance_cancelled(self.route)
        in_flight = self._in_flight
        if in_flight is not None and (target is None or in_flight.id == target):
            in_flight.cancel()  # the run stops waiting for its next chunk at once and reports it
        return [u.id for u in dropped]

    def clear(self) -> None:
        """Drops the whole queue (not counted as cancelled, as a shutdown's drop) and stops the utterance in
        flight, if any."""
        self._queue.clear()
        if self._in_flight is not None:
            self._in_flight.cancel()

    def close_when_spoken(self) -> None:
        """Takes no new utterances; once the queue is spoken the socket closes with 1000."""
        self._closing = True
        self._wakeup.set()

    async def refuse(self, error: TTSError, utterance_id: str | None = None) -> None:
        """Answers ``error`` (counted under the session's route) in the dialect's frames."""
        metrics.error(self.route, error.code)
        await self.dialect.render(Refused(error, utterance_id))

    async def send_text(self, text: str) -> None:
        """Sends ``text``; dropped once the server has closed the socket (the answer to a message the client sent
        after its close has nobody to reach)."""
        async with self._send_lock:
            if not self._closed:
                await self._ws.send_text(text)

    async def send_bytes(self, data: bytes) -> None:
        async with self._send_lock:
            if not self._closed:
                await self._ws.send_bytes(data)

    async def close(self, code: int, reason: str | None = None) -> None:
        async with self._send_lock:
            if not self._closed:
                self._closed = True
                await self._ws.close(code, reason)

    # --- the session's life ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Serves the session to its end; its stream (and its cap) is given back however it ends."""
        try:
            await self._ws.accept()
            # Set at accept by the server (server/hypercorn_hardening.py); None where it has none.
            self._stream.receipts = self._ws.scope.get("extensions", {}).get(READ_RECEIPTS)
            log.info("session opened")
            if not await self.dialect.opened():
                return
            self._speaker = asyncio.create_task(self._speak_or_close())
            try:
                await self._receive()
            except WebSocketDisconnect:
                pass
            finally:
                self._speaker.cancel()  # the client left: stop synthesis, drop what is queued
                await asyncio.gather(self._speaker, return_exceptions=True)
                log.info("session closed")
        finally:
            self._stream.close()

    async def shutdown(self, grace_s: float) -> None:
        """The server is stopping: refuse new utterances, let the one in flight finish within ``grace_s`` (else stop
        it), tell the dialect what is left unspoken, and close with 1001."""
        self._draining = True
        self._wakeup.set()
        speaker = self._speaker
        if speaker is None or speaker.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(speaker), grace_s)
            return
        except TimeoutError:
            stopped = [self._in_flight] if self._in_flight is not None else []
            speaker.cancel()
            await asyncio.gather(speaker, return_exceptions=True)
        with contextlib.suppress(Exception):  # the client may be gone already
            await self._end_for_shutdown(stopped)

    # --- receiving -------------------------------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:  # until the client leaves, also after a close: its queue is dropped the moment it vanishes
            message = await self._ws.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            raw = message.get("bytes")
            if raw is None:
                raw = message.get("text") or ""
            try:
                if oversize := message.get(OVERSIZE_KEY):
                    raise TTSError(
                        ErrorCode.MESSAGE_TOO_LARGE,
                        f"The message has {oversize} bytes; the limit is {self.settings.max_message_bytes}.",
                    )
                await self.dialect.received(raw)
            except TTSError as error:
                await self.refuse(error)
            except Exception:
                log.exception("unexpected failure handling a client message")
                await self.refuse(TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE))

    # --- speaking --------------------------------------------------------------------------------------------

    async def _speak_or_close(self) -> None:
        """Speaks the queue for the session's life; a failure nothing else handles (a bug) ends the session, said to
        the client and then closing with 1011, instead of leaving it open and silent."""
        try:
            await self._speak()
        except Exception:
            log.exception("unexpected failure speaking")
            error = TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE)
            with contextlib.suppress(Exception):  # the failure may be in the dialect's own frames
                await self.refuse(error)
            with contextlib.suppress(Exception):
                await self.close(CLOSE_INTERNAL_ERROR, f"{error.code}: {error.message}")

    async def _speak(self) -> None:
        while True:
            if self._draining:
                await self._end_for_shutdown([])
                return
            while not self._queue:
                if self._closing:
                    await self.close(CLOSE_NORMAL)
                    return
                if self._draining:
                    break
                self._wakeup.clear()
                await self._stream.idle(self._wakeup)
            if not self._queue:
                continue
            utterance = self._queue.popleft()
            self._in_flight = utterance
            bind_ids(utterance_id=utterance.id)
            try:
                ending = await self._stream.speak(utterance, self.dialect.render)
            finally:
                self._in_flight = None
            if isinstance(ending, Refused):
                await self.refuse(ending.error, ending.utterance_id)
            else:
                await self.dialect.render(ending)
            await self.dialect.render(Finished(utterance))

    async def _end_for_shutdown(self, stopped: list[Utterance]) -> None:
        unfinished = (*stopped, *self._queue)
        for _ in unfinished:
            metrics.error(self.route, ErrorCode.SHUTTING_DOWN)
        await self.dialect.render(ShuttingDown(unfinished))
        self._queue.clear()
        await self.close(CLOSE_GOING_AWAY)
