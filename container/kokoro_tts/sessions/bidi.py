"""WS /invocations-bidirectional-stream: our own session protocol (v1, docs/protocol.md) as a dialect of the session
core (sessions/core.py).

One session, many utterances: the client's synthesize messages are queued and spoken strictly in order, each as
binary audio frames framed by JSON control frames (synthesis_start, words, synthesis_complete or cancelled). An
utterance may also come as it is written: ``append`` opens it (queued in order, as a synthesize) and adds text, which
the fragment buffer cuts into pieces spoken as they are complete (sessions/writing.py); ``flush`` ends it. A
malformed message gets an error frame and the session carries on; only {"type":"close"}, the client leaving or the
server shutting down ends it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from kokoro_client.errors import ErrorCode, TTSError
from kokoro_client.protocol import (
    Append,
    Cancel,
    Cancelled,
    Close,
    Config,
    Error,
    Flush,
    ServerFrame,
    SynthesisComplete,
    SynthesisStart,
    Synthesize,
    Words,
    encode,
    is_set,
    parse_client_message,
)

from kokoro_tts import metrics
from kokoro_tts.audio.encoding import AudioFormat, audio_format, output_rate
from kokoro_tts.engine.events import Audio, Completed, Refused, Started, Stopped
from kokoro_tts.engine.events import Words as WordsSpoken
from kokoro_tts.engine.requests import literal_option
from kokoro_tts.engine.utterances import Pieces, Utterance
from kokoro_tts.sessions.core import Finished, Session, SessionEvent, ShuttingDown
from kokoro_tts.sessions.writing import WrittenUtterance


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
        self._open: WrittenUtterance | None = None

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
            case Append() as command:
                self._session.refuse_when_closing("close")
                await self._append(command)
            case Flush(id=target):
                self._session.refuse_when_closing("close")
                await self._flush(self._opened(target, "flush"))
            case Cancel(id=target):
                if self._open is not None and target in (None, self._open.utterance.id):
                    self._open.stop()
                    self._open = None  # its pieces are dropped with it; a later append opens a new utterance
                for dropped in self._session.cancel(target):
                    await self._send(Cancelled(dropped))
            case Close():
                if self._open is not None:
                    await self._flush(self._open)
                self._session.close_when_spoken()

    async def _synthesize(self, command: Synthesize) -> None:
        utterance_id = command.id if command.id is not None else f"u{next(self._ids)}"
        try:
            self._enqueue(utterance_id, command)
        except TTSError as error:
            await self._session.refuse(error, utterance_id)

    def _enqueue(self, utterance_id: str, command: Synthesize) -> None:
        session = self._session
        session.refuse_when_draining()
        session.refuse_when_full("synthesis_complete")
        fmt = self._defaults.format
        rate = output_rate(fmt, command.sample_rate if command.sample_rate is not None else self._defaults.sample_rate)
        request = session.engine.rules.speech(
            command.text,
            command.voice if command.voice is not None else self._defaults.voice,
            command.speed if command.speed is not None else self._defaults.speed,
            literal=command.literal if command.literal is not None else self._defaults.literal,
        )
        session.enqueue(
            Utterance.in_format(
                utterance_id, Pieces.whole(request), fmt, rate, word_timestamps=self._defaults.word_timestamps
            )
        )

    async def _append(self, command: Append) -> None:
        if not isinstance(command.text, str):
            raise TTSError(ErrorCode.INVALID_TEXT, f"'text' must be a string, not {type(command.text).__name__}.")
        if self._open is None:
            utterance_id = command.id if command.id is not None else f"u{next(self._ids)}"
            try:
                self._open = self._open_utterance(utterance_id, command)
            except TTSError as error:
                await self._session.refuse(error, utterance_id)
                return
        elif command.id not in (None, self._open.utterance.id):
            raise TTSError(
                ErrorCode.INVALID_MESSAGE,
                f"Utterance {self._open.utterance.id!r} is open: flush it before appending to another.",
            )
        elif (command.voice, command.speed, command.sample_rate, command.literal) != (None, None, None, None):
            raise TTSError(
                ErrorCode.INVALID_MESSAGE,
                "'voice', 'speed', 'sample_rate' and 'literal' belong to the append that opens an utterance.",
            )
        open_ = self._open
        if too_long := open_.too_long(len(command.text)):
            await self._session.refuse(too_long, open_.utterance.id)
            return
        await open_.append(command.text)

    def _open_utterance(self, utterance_id: str, command: Append) -> WrittenUtterance:
        session = self._session
        session.refuse_when_draining()
        session.refuse_when_full("synthesis_complete")
        rules = session.engine.rules
        voice = command.voice if command.voice is not None else self._defaults.voice
        voice = rules.voice(voice if voice is not None else session.settings.default_voice)
        speed = rules.speed(command.speed if command.speed is not None else self._defaults.speed)
        literal = literal_option(command.literal) if command.literal is not None else self._defaults.literal
        fmt = self._defaults.format
        rate = output_rate(fmt, command.sample_rate if command.sample_rate is not None else self._defaults.sample_rate)
        utterance = Utterance.in_format(
            utterance_id, Pieces(), fmt, rate, word_timestamps=self._defaults.word_timestamps
        )
        session.enqueue(utterance)
        return WrittenUtterance(session, utterance, voice.spec, speed, literal)

    def _opened(self, target: str | None, message: str) -> WrittenUtterance:
        if self._open is None or target not in (None, self._open.utterance.id):
            what = "no utterance is open" if self._open is None else f"{self._open.utterance.id!r} is the open one"
            raise TTSError(ErrorCode.INVALID_MESSAGE, f"Nothing to {message}: {what}.")
        return self._open

    async def _flush(self, open_: WrittenUtterance) -> None:
        self._open = None
        await open_.end()

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

    # --- the session's events -----------------------------------------------------------------------------------

    async def render(self, event: SessionEvent) -> None:
        match event:
            case Started(utterance=u):
                await self._send(SynthesisStart(u.id, u.format.name, u.sample_rate))
            case WordsSpoken(utterance=u, words=words):
                await self._send(Words(u.id, words))
            case Audio(data=data):
                await self._session.send_bytes(data)
            case Completed(utterance=u):
                await self._send(
                    SynthesisComplete(u.id, round(event.audio_ms, 1), round(event.synth_ms, 1), event.sent_bytes)
                )
            case Stopped(utterance=u):
                await self._send(Cancelled(u.id))
            case Refused(error=error, utterance_id=utterance_id):
                await self._send(Error.of(error, utterance_id))
            case Finished(utterance=u):
                if self._open is not None and self._open.utterance is u:  # it ended early (an error): not open now
                    self._open.stop()
                    self._open = None
            case ShuttingDown(unfinished=unfinished):
                error = TTSError(
                    ErrorCode.SHUTTING_DOWN, "The server is shutting down; this utterance was not finished."
                )
                for u in unfinished:
                    await self._send(Error.of(error, u.id))

    async def _send(self, frame: ServerFrame) -> None:
        await self._session.send_text(encode(frame))
