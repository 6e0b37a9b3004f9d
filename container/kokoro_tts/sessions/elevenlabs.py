"""WS /v1/text-to-speech/{voice_id}/stream-input and .../multi-stream-input: ElevenLabs' sockets as a dialect of the
session core (sessions/core.py).

The vocabulary is kokoro_client.elevenlabs'; everything else is the session core's (one speaker, the caps, the end
when the client vanishes, the drain on shutdown). A context (the one of ``stream-input``, or each ``context_id``) is
one utterance written as it comes (sessions/writing.py): its text goes through the fragment buffer, so an LLM's tokens
may be sent as they arrive; ``flush`` speaks what is buffered and the context stays open. Contexts are spoken in the
order they were opened, each to its end. What differs from ElevenLabs, and why, is in docs/elevenlabs.md:
- ``close_context`` after the context's text was flushed speaks what is left, then sends its final message (as
  Pipecat ends a turn: flush, then close); closing a context with text never flushed, or closing it again, is a
  barge-in: it stops at once (as Pipecat interrupts a turn), and its final message follows.
- ``stream-input`` ends its input with ``{"text": ""}``: what is left is spoken, the final message sent, then the
  socket closes with 1000; on ``multi-stream-input`` that message keeps a context alive and does nothing here.
- Each audio message carries the characters whose sound starts in it (``alignment``, the same in
  ``normalizedAlignment``), timed in ms from the message's start from the server's word timestamps (a word's time
  spread over its characters, the text between words over the gap), so the spans of a context's messages add up
  to its audio, as clients that keep a running clock (Pipecat) expect.
- Bad query parameters or an unknown voice get an error message and close 1008; a refused message gets an error
  message and the socket carries on.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

from kokoro_client.elevenlabs import (
    DEFAULT_OUTPUT_FORMAT,
    Alignment,
    AudioOutput,
    CloseContext,
    CloseSocket,
    ErrorOutput,
    FinalOutput,
    SendText,
    ServerMessage,
    encode,
    output_format,
    parse_client_message,
)
from kokoro_client.errors import ErrorCode, TTSError
from kokoro_client.protocol import WordTiming

from kokoro_tts.audio.encoding import AudioFormat, audio_format, output_rate
from kokoro_tts.engine.character_timing import CharacterTimes, TimedChar
from kokoro_tts.engine.events import Audio, Refused, Words
from kokoro_tts.engine.utterances import Pieces, Utterance
from kokoro_tts.sessions.contexts import Contexts
from kokoro_tts.sessions.core import Finished, Session, SessionEvent, ShuttingDown
from kokoro_tts.sessions.writing import WrittenUtterance

CLOSE_POLICY_VIOLATION = 1008  # as ElevenLabs closes a socket it cannot serve


class _Aligner:
    """A context's characters, timed from the words spoken, handed out with the audio their sound starts in."""

    def __init__(self) -> None:
        self.characters = CharacterTimes()
        self._timed: deque[TimedChar] = deque()  # timed and not yet sent
        self._sent_ms = 0.0  # the audio handed out so far

    def words(self, words: tuple[WordTiming, ...]) -> None:
        self._timed.extend(self.characters.words(words))

    def audio(self, seconds: float) -> Alignment | None:
        """The characters whose sound starts in the next ``seconds`` of audio, timed from its start (the last one's
        duration running to its end)."""
        start_ms, end_ms = self._sent_ms, self._sent_ms + seconds * 1000.0
        self._sent_ms = end_ms
        taken: list[tuple[str, float]] = []
        while self._timed and self._timed[0].start_ms < end_ms:
            timed = self._timed.popleft()
            taken.append((timed.char, max(timed.start_ms - start_ms, 0.0)))
        if not taken:
            return None
        starts = [round(at) for _, at in taken]
        ends = [*starts[1:], round(end_ms - start_ms)]
        durations = tuple(max(end - start, 0) for start, end in zip(starts, ends, strict=True))
        return Alignment(tuple(char for char, _ in taken), tuple(starts), durations)


@dataclass(eq=False)
class _Context:
    """One context: an utterance written as it comes, and the state of its messages."""

    id: str | None  # None: stream-input's one context (its messages carry no contextId)
    written: WrittenUtterance
    aligner: _Aligner = field(default_factory=_Aligner)
    flushed: bool = True  # no text came since the last flush (or none at all)


@dataclass(frozen=True)
class _Options:
    voice: str
    format: AudioFormat
    sample_rate: int


class ElevenLabsDialect:
    """ElevenLabs' messages on a session (sessions/core.py's ``Dialect``): ``multi`` for ``multi-stream-input``."""

    def __init__(self, session: Session, *, multi: bool) -> None:
        self._session = session
        self._multi = multi
        self._options: _Options | None = None
        self._contexts: Contexts[str | None, _Context] = Contexts(session)  # None: stream-input's one context
        self._ids = itertools.count(1)

    @classmethod
    def single(cls, session: Session) -> ElevenLabsDialect:
        return cls(session, multi=False)

    @classmethod
    def multiple(cls, session: Session) -> ElevenLabsDialect:
        return cls(session, multi=True)

    @property
    def route(self) -> str:
        return "elevenlabs"

    async def opened(self) -> bool:
        engine, query = self._session.engine, self._session.query_params
        try:
            name, rate = output_format(query.get("output_format", DEFAULT_OUTPUT_FORMAT))
            fmt = audio_format(name)
            # In the path; on SageMaker's one path, in the query (kokoro_client.elevenlabs.PROTOCOL_NAME).
            voice = engine.rules.voice(self._session.path_params.get("voice_id") or query.get("voice_id"))
            self._options = _Options(voice.spec, fmt, output_rate(fmt, rate))
        except TTSError as error:
            await self._send(ErrorOutput.of(error))
            await self._session.close(CLOSE_POLICY_VIOLATION, reason=f"{error.code}: {error.message}"[:120])
            return False
        return True

    @property
    def options(self) -> _Options:
        assert self._options is not None, "used before the session opened"
        return self._options

    # --- receiving -------------------------------------------------------------------------------------------

    async def received(self, raw: str | bytes) -> None:
        match parse_client_message(raw, self._session.settings.max_message_bytes):
            case SendText() as message:
                await self._text(message)
            case CloseContext(context_id=context_id):
                await self._close(context_id)
            case CloseSocket():
                for name in list(self._contexts.open):
                    await self._contexts.end(name)
                self._session.close_when_spoken()

    async def _text(self, message: SendText) -> None:
        context_id = message.context_id if self._multi else None
        text = message.text or ""
        context = self._contexts.open.get(context_id)
        if text == "" and not message.flush:
            if not self._multi and context is not None:  # stream-input's end of input
                await self._contexts.end(context_id)
                self._session.close_when_spoken()
            return  # multi-stream-input's keep-alive: nothing times out here
        if context is None:
            if text.strip() == "" and message.flush:
                return  # a flush of a context that has nothing
            context = self._open_context(context_id, message)
        if text:
            if too_long := context.written.too_long(len(text)):
                await self._session.refuse(too_long, context.written.utterance.id)
                return
            context.aligner.characters.received(text)
            await context.written.append(text)
            context.flushed = context.flushed and not text.strip()
        if message.flush:
            await context.written.flush()
            context.flushed = True

    def _open_context(self, context_id: str | None, message: SendText) -> _Context:
        session = self._session
        session.refuse_when_closing("close_socket")
        session.refuse_when_draining()
        session.refuse_when_full("final message (isFinal)")
        settings = message.voice_settings or {}
        speed = session.engine.rules.speed(settings.get("speed"))
        options = self.options
        utterance = Utterance.in_format(
            f"{context_id or 'stream'}#{next(self._ids)}",
            Pieces(),
            options.format,
            options.sample_rate,
            word_timestamps=True,
        )
        session.enqueue(utterance)
        context = _Context(context_id, WrittenUtterance(session, utterance, options.voice, speed, literal=False))
        self._contexts.add(context_id, context)
        return context

    async def _close(self, context_id: str) -> None:
        context = self._contexts.open.get(context_id)
        if context is not None and context.flushed:
            await self._contexts.end(context_id)  # the turn's end: what was flushed is spoken, then the final message
            return
        stopped = self._contexts.named(context_id)
        if stopped is None:
            return  # closed and finished already, or never opened
        if self._contexts.stop(stopped):  # it was still queued: no run will finish it, so its final message is now
            await self._send(FinalOutput(stopped.id))

    # --- the session's events -----------------------------------------------------------------------------------

    async def render(self, event: SessionEvent) -> None:
        match event:
            case Words(utterance=u, words=words):
                if (context := self._contexts.speaking.get(u.id)) is not None:
                    context.aligner.words(words)
            case Audio(utterance=u, data=data, seconds=seconds):
                if (context := self._contexts.speaking.get(u.id)) is not None:
                    await self._send(AudioOutput(data, context.id, context.aligner.audio(seconds)))
            case Refused(error=error, utterance_id=utterance_id):
                context = self._contexts.speaking.get(utterance_id) if utterance_id is not None else None
                await self._send(ErrorOutput.of(error, context.id if context is not None else None))
            case Finished(utterance=u):
                if (context := self._contexts.finished(u.id)) is not None:
                    await self._send(FinalOutput(context.id))
            case ShuttingDown():
                if self._contexts.speaking:
                    error = TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; this text was not spoken.")
                    for context in self._contexts.speaking.values():
                        await self._send(ErrorOutput.of(error, context.id))

    async def _send(self, message: ServerMessage) -> None:
        await self._session.send_text(encode(message))
