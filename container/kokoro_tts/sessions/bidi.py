"""WS /invocations-bidirectional-stream: our own session protocol (v1, docs/protocol.md) as a dialect of the session
core (sessions/core.py).

One session, many utterances: the client's synthesize messages are queued and spoken strictly in order, each as
binary audio frames framed by JSON control frames (synthesis_start, words, synthesis_complete or cancelled). A
malformed message gets an error frame and the session carries on; only {"type":"close"}, the client leaving or the
server shutting down ends it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from kokoro_client.errors import ErrorCode, TTSError
from kokoro_client.protocol import (
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
    WordTiming,
    encode,
    is_set,
    parse_client_message,
)

from kokoro_tts import metrics
from kokoro_tts.audio.encoding import AudioFormat, audio_format, output_rate
from kokoro_tts.engine.requests import literal_option
from kokoro_tts.sessions.core import Session, Spoken, Utterance


@dataclass
class _Defaults:
    voice: object = None
    speed: object = None
    format: AudioFormat = field(default_factory=lambda: audio_format("pcm"))
    sample_rate: object = None  # None: the format's own default (24 kHz; 8 kHz for mulaw and alaw)
    word_timestamps: bool = False
    literal: bool = False


class BidiDialect:
    """Protocol v1's messages and frames on a session (sessions/core.py's ``Dialect``)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._defaults = _Defaults()
        self._ids = itertools.count(1)

    @property
    def route(self) -> str:
        return metrics.route_of(self._session.path)

    async def opened(self) -> bool:
        return True

    # --- receiving -------------------------------------------------------------------------------------------

    async def received(self, raw: str | bytes) -> None:
        match parse_client_message(raw, self._session.settings.max_message_bytes):
            case Synthesize() as command:
                self._session.refuse_when_closing("close")
                await self._synthesize(command)
            case Config() as command:
                self._session.refuse_when_closing("close")
                self._configure(command)
            case Cancel(id=target):
                for dropped in self._session.cancel(target):
                    await self._send(Cancelled(dropped))
            case Close():
                self._session.close_when_spoken()

    async def _synthesize(self, command: Synthesize) -> None:
        utterance_id = command.id if command.id is not None else f"u{next(self._ids)}"
        try:
            self._enqueue(utterance_id, command)
        except TTSError as error:
            await self.refused(error, utterance_id)

    def _enqueue(self, utterance_id: str, command: Synthesize) -> None:
        session = self._session
        session.refuse_when_draining()
        queued = len(session.queued)
        if queued >= session.settings.max_queued_utterances:
            raise TTSError(
                ErrorCode.QUEUE_FULL,
                f"{queued} utterances are already queued (the limit); "
                "wait for a synthesis_complete before sending more.",
            )
        fmt = self._defaults.format
        rate = output_rate(fmt, command.sample_rate if command.sample_rate is not None else self._defaults.sample_rate)
        request = session.engine.rules.speech(
            command.text,
            command.voice if command.voice is not None else self._defaults.voice,
            command.speed if command.speed is not None else self._defaults.speed,
            literal=command.literal if command.literal is not None else self._defaults.literal,
        )
        session.enqueue(Utterance(utterance_id, request, fmt, rate, self._defaults.word_timestamps))

    def _configure(self, command: Config) -> None:
        # Validate everything before changing anything: a bad config leaves the defaults as they were.
        engine = self._session.engine
        voice, speed, fmt = self._defaults.voice, self._defaults.speed, self._defaults.format
        rate = self._defaults.sample_rate
        if is_set(command.voice):
            voice = None if command.voice is None else engine.rules.voice(command.voice).spec
        if is_set(command.speed):
            speed = None if command.speed is None else engine.rules.speed(command.speed)
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
        literal = literal_option(command.literal) if is_set(command.literal) else self._defaults.literal
        self._defaults = _Defaults(voice, speed, fmt, rate, word_timestamps, literal)

    # --- the session's events --------------------------------------------------------------------------------

    async def refused(self, error: TTSError, utterance_id: str | None = None) -> None:
        metrics.error(self._session.route, error.code)
        await self._send(Error.of(error, utterance_id))

    async def started(self, utterance: Utterance) -> None:
        await self._send(SynthesisStart(utterance.id, utterance.format.name, utterance.sample_rate))

    async def words(self, utterance: Utterance, words: tuple[WordTiming, ...]) -> None:
        await self._send(Words(utterance.id, words))

    async def audio(self, utterance: Utterance, data: bytes) -> None:
        await self._session.send_bytes(data)

    async def completed(self, utterance: Utterance, spoken: Spoken) -> None:
        await self._send(
            SynthesisComplete(utterance.id, round(spoken.audio_ms, 1), round(spoken.synth_ms, 1), spoken.sent_bytes)
        )

    async def stopped(self, utterance: Utterance) -> None:
        await self._send(Cancelled(utterance.id))

    async def finished(self, utterance: Utterance) -> None:
        pass

    async def shutting_down(self, unfinished: Sequence[Utterance]) -> None:
        error = TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; this utterance was not finished.")
        for utterance in unfinished:
            await self.refused(error, utterance.id)

    async def _send(self, frame: ServerFrame) -> None:
        await self._session.send_text(encode(frame))
