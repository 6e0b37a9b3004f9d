"""WS /invocations-bidirectional-stream: one session, many utterances (protocol v1, docs/protocol.md).

Two tasks per session: the receiver parses messages and queues utterances; the speaker synthesizes them
strictly in order and streams each as binary audio frames framed by JSON control frames. A malformed message
gets an error frame and the session carries on; only {"type":"close"}, the client leaving or the server shutting
down ends it. The receiver keeps reading after a close, so a client that vanishes while its queue is spoken
stops that work at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from kokoro_client.errors import INTERNAL_ERROR_MESSAGE, ErrorCode, TTSError
from kokoro_client.logs import bind_ids
from kokoro_client.protocol import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    Cancel,
    Cancelled,
    Close,
    Config,
    Error,
    ServerFrame,
    SynthesisComplete,
    SynthesisStart,
    Synthesize,
    Words,
    encode,
    is_set,
    parse_client_message,
)
from starlette.websockets import WebSocket, WebSocketDisconnect

from kokoro_tts import metrics
from kokoro_tts.audio.encoding import AudioFormat, audio_format, off_loop_encoder, output_rate
from kokoro_tts.engine.scheduler import Interrupted, unless
from kokoro_tts.engine.synthesis import SpeechRequest, TTSEngine

# The ASGI receive message key the server sets (server/hypercorn_hardening.py) on a frame over the size limit
# it dropped: the session answers message_too_large and goes on.
OVERSIZE_KEY = "kokoro.oversize_bytes"

log = logging.getLogger(__name__)


@dataclass
class Utterance:
    id: str
    request: SpeechRequest
    format: AudioFormat
    sample_rate: int
    word_timestamps: bool = False
    cancelled: bool = False
    received: float = field(default_factory=time.perf_counter)  # when its synthesize message arrived
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # set with ``cancelled``: wakes the speaker

    def cancel(self) -> None:
        self.cancelled = True
        self.stopping.set()


@dataclass
class _Defaults:
    voice: object = None
    speed: object = None
    format: AudioFormat = field(default_factory=lambda: audio_format("pcm"))
    sample_rate: object = None  # None: the format's own default (24 kHz; 8 kHz for mulaw and alaw)
    word_timestamps: bool = False


class BidiSession:
    """The session protocol. Another wire protocol on the same machinery (sessions/deepgram.py) overrides the
    hooks: ``_opened``, ``_parse``, ``_handle``, and ``_started``/``_completed``/``_stopped``/``_finished`` around
    each utterance's audio, ``_send_error``, ``_end_for_shutdown``."""

    def __init__(self, websocket: WebSocket, engine: TTSEngine) -> None:
        self._ws = websocket
        self._route = metrics.route_of(websocket.scope.get("path", ""))
        self._engine = engine
        self._settings = engine.settings
        self._defaults = _Defaults()
        self._queue: deque[Utterance] = deque()
        self._wakeup = asyncio.Event()
        self._closing = False
        self._in_flight: Utterance | None = None
        self._send_lock = asyncio.Lock()
        self._ids = itertools.count(1)

        self._draining = False
        # When the audio sent so far will have finished playing (loop time): a sentence queued while earlier ones
        # still play is not needed now, so it yields to other clients' first audio (HTTP batch replies included,
        # which would otherwise wait behind every sentence of every session and time out).
        self._played_until = 0.0
        self._speaker: asyncio.Task[None] | None = None

    async def run(self) -> None:
        await self._ws.accept()
        log.info("session opened")
        if not await self._opened():
            return
        self._speaker = asyncio.create_task(self._speak())
        try:
            await self._receive()
        except WebSocketDisconnect:
            pass
        finally:
            self._speaker.cancel()  # the client left: stop synthesis, drop what is queued
            await asyncio.gather(self._speaker, return_exceptions=True)
            log.info("session closed")

    async def _opened(self) -> bool:
        """Called once the socket is accepted; False ends the session (the hook has closed the socket)."""
        return True

    async def shutdown(self, grace_s: float) -> None:
        """The server is stopping: refuse new utterances, let the one in flight finish within ``grace_s`` (else end
        it with a shutting_down error), answer each queued one with shutting_down, and close with 1001."""
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
                        f"The message has {oversize} bytes; the limit is {self._settings.max_message_bytes}.",
                    )
                await self._handle(self._parse(raw))
            except TTSError as error:
                await self._send_error(error)
            except Exception:
                log.exception("unexpected failure handling a client message")
                await self._send_error(TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE))

    def _parse(self, raw: str | bytes) -> Any:
        return parse_client_message(raw, self._settings.max_message_bytes)

    async def _handle(self, command: Any) -> None:
        if self._closing and isinstance(command, Synthesize | Config):
            raise TTSError(ErrorCode.INVALID_MESSAGE, "The session is closing: it takes no new utterances after close.")
        match command:
            case Synthesize():
                utterance_id = command.id if command.id is not None else f"u{next(self._ids)}"
                try:
                    self._enqueue(utterance_id, command)
                except TTSError as error:
                    await self._send_error(error, utterance_id)
            case Config():
                self._configure(command)
            case Cancel(id=target):
                for dropped in self._cancel(target):
                    await self._send_frame(Cancelled(dropped))
            case Close():
                self._closing = True
                self._wakeup.set()

    def _enqueue(self, utterance_id: str, command: Synthesize) -> None:
        if self._draining:
            raise TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; send this to another instance.")
        if len(self._queue) >= self._settings.max_queued_utterances:
            raise TTSError(
                ErrorCode.QUEUE_FULL,
                f"{len(self._queue)} utterances are already queued (the limit); "
                "wait for a synthesis_complete before sending more.",
            )
        fmt = self._defaults.format
        rate = output_rate(fmt, command.sample_rate if command.sample_rate is not None else self._defaults.sample_rate)
        request = self._engine.request(
            command.text,
            command.voice if command.voice is not None else self._defaults.voice,
            command.speed if command.speed is not None else self._defaults.speed,
        )
        self._queue.append(Utterance(utterance_id, request, fmt, rate, self._defaults.word_timestamps))
        self._wakeup.set()

    def _configure(self, command: Config) -> None:
        # Validate everything before changing anything: a bad config leaves the defaults as they were.
        voice, speed, fmt = self._defaults.voice, self._defaults.speed, self._defaults.format
        rate = self._defaults.sample_rate
        if is_set(command.voice):
            voice = None if command.voice is None else self._engine.voice(command.voice).spec
        if is_set(command.speed):
            speed = None if command.speed is None else self._engine.check_speed(command.speed)
        if is_set(command.format):
            fmt = audio_format("pcm" if command.format is None else command.format)
        if is_set(command.sample_rate):
            rate = command.sample_rate
        output_rate(fmt, rate)  # the pair must fit: mulaw at 24 kHz is refused here, not at the next utterance
        word_timestamps = self._defaults.word_timestamps
        if is_set(command.word_timestamps):
            if command.word_timestamps is not None and not isinstance(command.word_timestamps, bool):
                raise TTSError(ErrorCode.INVALID_MESSAGE, "'word_timestamps' must be true or false.")
            word_timestamps = bool(command.word_timestamps)
        self._defaults = _Defaults(voice, speed, fmt, rate, word_timestamps)

    def _cancel(self, target: str | None) -> list[str]:
        """Drops matching queued utterances (returned) and flags a matching one in flight."""
        dropped = [u for u in self._queue if target is None or u.id == target]
        for utterance in dropped:
            self._queue.remove(utterance)
            metrics.utterance_cancelled(self._route)
        in_flight = self._in_flight
        if in_flight is not None and (target is None or in_flight.id == target):
            in_flight.cancel()  # the speaker stops waiting for its next chunk at once and reports it
        return [u.id for u in dropped]

    # --- speaking --------------------------------------------------------------------------------------------

    async def _speak(self) -> None:
        while True:
            if self._draining:
                await self._end_for_shutdown([])
                return
            while not self._queue:
                if self._closing:
                    await self._close(CLOSE_NORMAL)
                    return
                if self._draining:
                    break
                self._wakeup.clear()
                await self._wakeup.wait()
            if not self._queue:
                continue
            utterance = self._queue.popleft()
            self._in_flight = utterance
            try:
                await self._speak_one(utterance)
            finally:
                self._in_flight = None
            await self._finished(utterance)

    async def _speak_one(self, utterance: Utterance) -> None:
        bind_ids(utterance_id=utterance.id)
        try:
            await self._speak_one_counted(utterance)
        except asyncio.CancelledError:  # the client left, or the server stopped it
            metrics.utterance_cancelled(self._route)
            raise

    async def _speak_one_counted(self, utterance: Utterance) -> None:
        encoder = off_loop_encoder(utterance.format, utterance.sample_rate)
        sent_bytes, audio_ms, synth_ms, started, first_audio_s = 0, 0.0, 0.0, False, None
        loop = asyncio.get_running_loop()
        async with aclosing(self._engine.stream(utterance.request, due=self._played_until)) as stream:
            while not utterance.cancelled:
                try:
                    if started:
                        chunk = await _unless_stopped(anext(stream, None), utterance)
                    else:
                        with self._engine.waiting.hold():  # server_busy rather than a wait behind every session
                            chunk = await _unless_stopped(anext(stream, None), utterance)
                except TTSError as error:
                    await self._send_error(error, utterance.id)
                    return
                except Exception:
                    log.exception("synthesis failed for utterance %s", utterance.id)
                    await self._send_error(TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE), utterance.id)
                    return
                if chunk is None or utterance.cancelled:
                    break
                if not started:
                    first_audio_s = time.perf_counter() - utterance.received
                    metrics.first_audio(self._route, first_audio_s)
                    await self._started(utterance)
                    started = True
                if utterance.word_timestamps and chunk.words:
                    await self._send_frame(Words(utterance.id, chunk.words))
                data = await encoder.encode(chunk.pcm)
                if data:
                    await self._send_bytes(data)
                self._played_until = max(self._played_until, loop.time()) + chunk.audio_ms / 1000.0
                sent_bytes += len(data)
                audio_ms += chunk.audio_ms
                synth_ms += chunk.synth_ms
        metrics.audio_sent(self._route, audio_ms)
        if utterance.cancelled:
            metrics.utterance_cancelled(self._route)
            await self._stopped(utterance)
            return
        if not started:
            await self._send_error(
                TTSError(ErrorCode.NOTHING_TO_SPEAK, "The text has nothing that can be spoken in this voice."),
                utterance.id,
            )
            return
        tail = await encoder.finish()
        if tail:
            await self._send_bytes(tail)
            sent_bytes += len(tail)
        metrics.utterance_completed(self._route, audio_ms, synth_ms, first_audio_s)
        await self._completed(
            utterance, SynthesisComplete(utterance.id, round(audio_ms, 1), round(synth_ms, 1), sent_bytes)
        )

    async def _started(self, utterance: Utterance) -> None:
        await self._send_frame(SynthesisStart(utterance.id, utterance.format.name, utterance.sample_rate))

    async def _completed(self, utterance: Utterance, complete: SynthesisComplete) -> None:
        await self._send_frame(complete)

    async def _stopped(self, utterance: Utterance) -> None:
        """A cancel stopped ``utterance`` in flight."""
        await self._send_frame(Cancelled(utterance.id))

    async def _finished(self, utterance: Utterance) -> None:
        """Called after each utterance the speaker took, however it ended (spoken, failed, stopped)."""

    async def _end_for_shutdown(self, stopped: list[Utterance]) -> None:
        error = TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; this utterance was not finished.")
        for utterance in [*stopped, *self._queue]:
            await self._send_error(error, utterance.id)
        self._queue.clear()
        await self._close(CLOSE_GOING_AWAY)

    # --- sending ---------------------------------------------------------------------------------------------

    async def _send_error(self, error: TTSError, utterance_id: str | None = None) -> None:
        metrics.error(self._route, error.code)
        await self._send_frame(Error.of(error, utterance_id))

    async def _send_frame(self, frame: ServerFrame) -> None:
        text = encode(frame)
        async with self._send_lock:
            await self._ws.send_text(text)

    async def _send_bytes(self, data: bytes) -> None:
        async with self._send_lock:
            await self._ws.send_bytes(data)

    async def _close(self, code: int) -> None:
        async with self._send_lock:
            await self._ws.close(code)


async def _unless_stopped[T](step: Awaitable[T], utterance: Utterance) -> T | None:
    """``step``'s result, or None as soon as ``utterance`` is cancelled: a cancel does not wait for the window being
    made (nor for one still queued behind other sessions' work)."""
    try:
        return await unless(step, utterance.stopping.wait())
    except Interrupted:
        return None
