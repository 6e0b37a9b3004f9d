"""WS /v1/speak, and the session path with Deepgram's query: Deepgram's TTS WebSocket as a dialect of the session
core (sessions/core.py).

The vocabulary is kokoro_client.deepgram's; everything else is the session core's: one speaker task per
session speaks queued utterances in order, the same caps (text, queue, message size, server-wide waiting), the same
end when the client vanishes, the same drain on shutdown. What differs:
- Speak text goes through the fragment buffer (text/fragments.py, as bidi's append), so a client may send an LLM's
  tokens as they come: each piece is queued as an utterance the moment it is complete.
- Flush queues what is buffered; ``Flushed`` follows the last audio of everything queued before it.
- Clear drops the buffer, the queue and the utterance in flight (at once, as a cancel does: the speaker stops
  waiting for the window being made); ``Cleared`` follows the last audio sent, so no audio of the cleared text
  comes after it. A
  Flush whose audio a Clear dropped is not answered: the Cleared stands for it.
- Close queues what is buffered, speaks it all and closes with 1000.
- A refused message gets a ``Warning`` with the stable code and the session carries on; bad query parameters get
  an ``Error`` and close 1008; a shutdown that leaves work undone sends an ``Error`` (shutting_down) and closes 1001.
Audio frames are raw samples (linear16, mulaw or alaw) at the requested rate, no container, no start/end frames.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from kokoro_client.deepgram import (
    CLOSE_INVALID_PARAMETERS,
    DEFAULT_ENCODING,
    ENCODINGS,
    Clear,
    Cleared,
    Close,
    ErrorMessage,
    Flush,
    Flushed,
    Metadata,
    ServerMessage,
    Speak,
    WarningMessage,
    encode,
    parse_command,
)
from kokoro_client.errors import ErrorCode, TTSError, quoted

from kokoro_tts.audio.encoding import AudioFormat, audio_format, output_rate
from kokoro_tts.engine.events import Audio, Refused
from kokoro_tts.engine.requests import literal_option
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.engine.utterances import Pieces, Utterance
from kokoro_tts.sessions.core import Finished, Session, SessionEvent, ShuttingDown
from kokoro_tts.text.fragments import FragmentBuffer

MODEL_VERSION = "kokoro-82m-v1.0"


@dataclass(frozen=True)
class SpeakOptions:
    """A connection's query parameters, checked: Deepgram's ``model``, ``encoding``, ``sample_rate``, ``speed``,
    and our ``literal`` (``true``: markup is read as written)."""

    voice: str
    speed: float
    format: AudioFormat
    sample_rate: int
    literal: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, str], engine: TTSEngine) -> SpeakOptions:
        encoding = query.get("encoding", DEFAULT_ENCODING)
        if encoding not in ENCODINGS:
            raise TTSError(
                ErrorCode.UNSUPPORTED_FORMAT,
                f"'encoding' {quoted(encoding)} is not one this route sends; use one of: {', '.join(ENCODINGS)}.",
            )
        fmt = audio_format(ENCODINGS[encoding])
        rate = query.get("sample_rate")
        sample_rate = output_rate(fmt, None if rate is None else _integer(rate))
        speed = query.get("speed")
        return cls(
            _voice(query.get("model"), engine),
            engine.rules.speed(None if speed is None else _number(speed)),
            fmt,
            sample_rate,
            literal_option(_flag(query.get("literal"))),
        )


def _flag(text: str | None) -> object:
    return {"true": True, "false": False}.get(text, text) if text is not None else None


def _integer(text: str) -> object:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else text


def _number(text: str) -> object:
    try:
        return float(text)
    except ValueError:
        return text


def _voice(model: str | None, engine: TTSEngine) -> str:
    """``model`` names a Kokoro voice or blend (``af_heart``, ``af_bella+af_sky``); Deepgram's own model names
    (``aura-2-helena-en``) speak the server's default voice, so a Pipecat configuration works unchanged."""
    if model is None or model.startswith("aura"):
        return engine.rules.voice(engine.settings.default_voice).spec
    return engine.rules.voice(model).spec


class DeepgramDialect:
    """Deepgram's messages on a session (sessions/core.py's ``Dialect``)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._buffer = FragmentBuffer()
        self._ids = itertools.count(1)
        self._sequence = itertools.count()  # one count over Flush and Clear: each answer names its own
        self._options: SpeakOptions | None = None
        # Flushed and Cleared answers to send once an utterance's audio is sent (or stopped), in order.
        self._after: dict[Utterance, list[Flushed | Cleared]] = {}

    @property
    def route(self) -> str:
        return "deepgram"  # on its own path or selected on SageMaker's

    @property
    def options(self) -> SpeakOptions:
        assert self._options is not None, "used before the session opened"
        return self._options

    async def opened(self) -> bool:
        try:
            self._options = SpeakOptions.from_query(self._session.query_params, self._session.engine)
        except TTSError as error:
            await self._send(ErrorMessage.of(error))
            await self._session.close(CLOSE_INVALID_PARAMETERS, reason=f"{error.code}: bad query parameters")
            return False
        name = f"kokoro-82m:{self.options.voice}"
        await self._send(Metadata(str(uuid.uuid4()), name, MODEL_VERSION, str(uuid.uuid5(uuid.NAMESPACE_URL, name))))
        return True

    # --- receiving -------------------------------------------------------------------------------------------

    async def received(self, raw: str | bytes) -> None:
        match parse_command(raw, self._session.settings.max_message_bytes):
            case Speak(text=text):
                self._session.refuse_when_closing("Close")
                await self._take_text(text)
            case Flush():
                self._session.refuse_when_closing("Close")
                await self._flush()
            case Clear():
                await self._clear()
            case Close():
                if not self._session.closing:
                    await self._queue_rest()
                    self._session.close_when_spoken()

    async def _take_text(self, text: object) -> None:
        if not isinstance(text, str):
            raise TTSError(ErrorCode.INVALID_TEXT, f"'text' must be a string, not {type(text).__name__}.")
        self._session.refuse_when_draining()
        settings = self._session.settings
        limit = settings.max_text_chars
        if self._buffer.pending_chars + len(text) > limit:
            raise TTSError(
                ErrorCode.TEXT_TOO_LONG,
                f"At most {limit} characters may wait for a sentence end; this Speak would make "
                f"{self._buffer.pending_chars + len(text)}. End sentences, or send a Flush.",
            )
        queued = len(self._session.queued)
        room = settings.max_queued_utterances - queued
        if room <= 0:
            raise TTSError(
                ErrorCode.QUEUE_FULL,
                f"{queued} sentences are already queued (the limit); wait for a Flushed before sending more.",
            )
        sentences = [piece.text for piece in self._buffer.append(text)]
        if len(sentences) > room:  # one Speak holding many sentences: the last utterance takes the overflow
            sentences = [*sentences[: room - 1], " ".join(sentences[room - 1 :])]
        for sentence in sentences:
            await self._queue_sentence(sentence)

    async def _queue_sentence(self, text: str) -> None:
        try:
            request = self._session.engine.rules.speech(
                text, self.options.voice, self.options.speed, literal=self.options.literal
            )
        except TTSError as error:  # this sentence only (emoji alone, say): the rest is still spoken
            await self._session.refuse(error)
            return
        pieces, options = Pieces.whole(request), self.options
        self._session.enqueue(Utterance.in_format(f"s{next(self._ids)}", pieces, options.format, options.sample_rate))

    async def _queue_rest(self) -> None:
        for rest in self._buffer.end():
            await self._queue_sentence(rest.text)

    async def _flush(self) -> None:
        answer = Flushed(next(self._sequence))
        await self._queue_rest()
        queued = self._session.queued
        last = queued[-1] if queued else self._session.in_flight
        if last is not None:
            self._after.setdefault(last, []).append(answer)
        else:
            await self._send(answer)

    async def _clear(self) -> None:
        answer = Cleared(next(self._sequence))
        self._buffer.end()
        in_flight = self._session.in_flight
        self._session.clear()  # the speaker stops waiting for its next window at once, then sends the answer
        if in_flight is not None:
            kept: list[Flushed | Cleared] = [m for m in self._after.get(in_flight, []) if isinstance(m, Cleared)]
            self._after[in_flight] = [*kept, answer]
        else:
            await self._send(answer)

    # --- the session's events: audio frames only; the answers wait for the audio before them -------------------

    async def render(self, event: SessionEvent) -> None:
        match event:
            case Audio(data=data):
                await self._session.send_bytes(data)
            case Refused(error=error):
                await self._send(WarningMessage.of(error))
            case Finished(utterance=utterance):
                for answer in self._after.pop(utterance, []):
                    await self._send(answer)
            case ShuttingDown(unfinished=unfinished):
                if unfinished or self._buffer.pending_chars:
                    error = TTSError(
                        ErrorCode.SHUTTING_DOWN, "The server is shutting down; the text not yet spoken is dropped."
                    )
                    await self._send(ErrorMessage.of(error))

    async def _send(self, message: ServerMessage) -> None:
        await self._session.send_text(encode(message))
