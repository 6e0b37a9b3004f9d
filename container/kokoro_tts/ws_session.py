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
from collections import deque
from contextlib import aclosing
from dataclasses import dataclass, field

from kokoro_client.errors import INTERNAL_ERROR_MESSAGE, ErrorCode, TTSError
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

from .audio import SAMPLE_RATE, AudioFormat, audio_format, make_encoder
from .engine import SpeechRequest, TTSEngine
from .hypercorn_hardening import OVERSIZE_KEY

log = logging.getLogger(__name__)


@dataclass
class _Utterance:
    id: str
    request: SpeechRequest
    format: AudioFormat
    word_timestamps: bool = False
    cancelled: bool = False


@dataclass
class _Defaults:
    voice: object = None
    speed: object = None
    format: AudioFormat = field(default_factory=lambda: audio_format("pcm"))
    word_timestamps: bool = False


class BidiSession:
    def __init__(self, websocket: WebSocket, engine: TTSEngine) -> None:
        self._ws = websocket
        self._engine = engine
        self._settings = engine.settings
        self._defaults = _Defaults()
        self._queue: deque[_Utterance] = deque()
        self._wakeup = asyncio.Event()
        self._closing = False
        self._in_flight: _Utterance | None = None
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
        self._speaker = asyncio.create_task(self._speak())
        try:
            await self._receive()
        except WebSocketDisconnect:
            pass
        finally:
            self._speaker.cancel()  # the client left: stop synthesis, drop what is queued
            await asyncio.gather(self._speaker, return_exceptions=True)

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
                await self._handle(parse_client_message(raw, self._settings.max_message_bytes))
            except TTSError as error:
                await self._send_error(error)
            except Exception:
                log.exception("unexpected failure handling a client message")
                await self._send_error(TTSError(ErrorCode.INTERNAL_ERROR, INTERNAL_ERROR_MESSAGE))

    async def _handle(self, command: Synthesize | Config | Cancel | Close) -> None:
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
        request = self._engine.request(
            command.text,
            command.voice if command.voice is not None else self._defaults.voice,
            command.speed if command.speed is not None else self._defaults.speed,
        )
        self._queue.append(_Utterance(utterance_id, request, self._defaults.format, self._defaults.word_timestamps))
        self._wakeup.set()

    def _configure(self, command: Config) -> None:
        # Validate everything before changing anything: a bad config leaves the defaults as they were.
        voice, speed, fmt = self._defaults.voice, self._defaults.speed, self._defaults.format
        if is_set(command.voice):
            voice = None if command.voice is None else self._engine.voice(command.voice).spec
        if is_set(command.speed):
            speed = None if command.speed is None else self._engine.check_speed(command.speed)
        if is_set(command.format):
            fmt = audio_format("pcm" if command.format is None else command.format)
        word_timestamps = self._defaults.word_timestamps
        if is_set(command.word_timestamps):
            if command.word_timestamps is not None and not isinstance(command.word_timestamps, bool):
                raise TTSError(ErrorCode.INVALID_MESSAGE, "'word_timestamps' must be true or false.")
            word_timestamps = bool(command.word_timestamps)
        self._defaults = _Defaults(voice, speed, fmt, word_timestamps)

    def _cancel(self, target: str | None) -> list[str]:
        """Drops matching queued utterances (returned) and flags a matching one in flight."""
        dropped = [u for u in self._queue if target is None or u.id == target]
        for utterance in dropped:
            self._queue.remove(utterance)
        in_flight = self._in_flight
        if in_flight is not None and (target is None or in_flight.id == target):
            in_flight.cancelled = True  # the speaker stops it at its next chunk and reports it
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

    async def _speak_one(self, utterance: _Utterance) -> None:
        encoder = make_encoder(utterance.format)
        sent_bytes, audio_ms, synth_ms, started = 0, 0.0, 0.0, False
        loop = asyncio.get_running_loop()
        async with aclosing(self._engine.stream(utterance.request, due=self._played_until)) as stream:
            while not utterance.cancelled:
                try:
                    if started:
                        chunk = await anext(stream, None)
                    else:
                        with self._engine.waiting.hold():  # server_busy rather than a wait behind every session
                            chunk = await anext(stream, None)
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
                    await self._send_frame(SynthesisStart(utterance.id, utterance.format.name, SAMPLE_RATE))
                    started = True
                if utterance.word_timestamps and chunk.words:
                    await self._send_frame(Words(utterance.id, chunk.words))
                data = encoder.encode(chunk.pcm)
                if data:
                    await self._send_bytes(data)
                self._played_until = max(self._played_until, loop.time()) + chunk.audio_ms / 1000.0
                sent_bytes += len(data)
                audio_ms += chunk.audio_ms
                synth_ms += chunk.synth_ms
        if utterance.cancelled:
            await self._send_frame(Cancelled(utterance.id))
            return
        if not started:
            await self._send_error(
                TTSError(ErrorCode.NOTHING_TO_SPEAK, "The text has nothing that can be spoken in this voice."),
                utterance.id,
            )
            return
        tail = encoder.finish()
        if tail:
            await self._send_bytes(tail)
            sent_bytes += len(tail)
        await self._send_frame(SynthesisComplete(utterance.id, round(audio_ms, 1), round(synth_ms, 1), sent_bytes))

    async def _end_for_shutdown(self, stopped: list[_Utterance]) -> None:
        error = TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; this utterance was not finished.")
        for utterance in [*stopped, *self._queue]:
            await self._send_error(error, utterance.id)
        self._queue.clear()
        await self._close(CLOSE_GOING_AWAY)

    # --- sending ---------------------------------------------------------------------------------------------

    async def _send_error(self, error: TTSError, utterance_id: str | None = None) -> None:
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
