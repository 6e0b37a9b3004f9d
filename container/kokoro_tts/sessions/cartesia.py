"""WS /tts/websocket: Cartesia's socket as a dialect of the session core (sessions/core.py).

The vocabulary is kokoro_client.cartesia's; everything else is the session core's (one speaker, the caps, the end
when the client vanishes, the drain on shutdown). A context is one utterance written as it comes
(sessions/writing.py): each request's ``transcript`` goes through the fragment buffer, so an LLM's tokens may be sent
as they arrive with ``continue: true``; a request with ``continue: false`` (an empty transcript will do) ends the
context, and ``done`` follows its last audio. Contexts are spoken in the order they were opened, each to its end.
What differs from Cartesia, and why, is in docs/cartesia.md:
- The voice, format, speed and ``add_timestamps`` are the context's first request's; later ones only add text.
- ``cancel`` stops the context at once (its queued text dropped, its audio in flight stopped within a window); no
  message of it follows.
- ``timestamps`` (when asked for) come before the chunk their words start in, in seconds from the context's start,
  from the server's word timestamps; each word is given with the punctuation it is written with, as Cartesia's are.
- A refused request gets an ``error`` message naming its context, with the stable ``code``; the socket carries on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kokoro_client.cartesia import (
    Cancel,
    Chunk,
    Done,
    ErrorMessage,
    Generate,
    ServerMessage,
    Timestamps,
    encode,
    parse_client_message,
)
from kokoro_client.errors import ErrorCode, TTSError

from kokoro_tts.audio.encoding import audio_format, output_rate
from kokoro_tts.engine.character_timing import SentText
from kokoro_tts.engine.events import Audio, Refused, Words
from kokoro_tts.engine.utterances import Pieces, Utterance
from kokoro_tts.sessions.contexts import Contexts
from kokoro_tts.sessions.core import Finished, Session, SessionEvent, ShuttingDown
from kokoro_tts.sessions.writing import WrittenUtterance


@dataclass(eq=False)
class _Context:
    written: WrittenUtterance
    sent: SentText = field(default_factory=SentText)  # its words are reported as written in it
    cancelled: bool = False

    @property
    def id(self) -> str:
        return self.written.utterance.id  # a context's utterance is named by its context_id


class CartesiaDialect:
    """Cartesia's messages on a session (sessions/core.py's ``Dialect``)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._contexts: Contexts[str, _Context] = Contexts(session)  # a context's utterance id is its context_id
        self._unnamed = 0  # requests without a context_id: each its own context

    @property
    def route(self) -> str:
        return "cartesia"

    async def opened(self) -> bool:
        return True  # the API key and Cartesia-Version are accepted and ignored: nothing to check at open

    # --- receiving -------------------------------------------------------------------------------------------

    async def received(self, raw: str | bytes) -> None:
        match parse_client_message(raw, self._session.settings.max_message_bytes):
            case Generate() as request:
                await self._generate(request)
            case Cancel(context_id=context_id):
                await self._cancel(context_id)

    async def _generate(self, request: Generate) -> None:
        if request.context_id is None:
            self._unnamed += 1
        context_id = request.context_id or f"unnamed-{self._unnamed}"
        context = self._contexts.open.get(context_id)
        if context is None:
            try:
                context = self._open_context(context_id, request)
            except TTSError as error:
                await self._session.refuse(error, context_id)
                return
        if too_long := context.written.too_long(len(request.transcript)):
            await self._session.refuse(too_long, context_id)  # this text only: the context goes on, or ends below
        else:
            context.sent.received(request.transcript)
            await context.written.append(request.transcript)
        if not request.more:
            await self._contexts.end(context_id)

    def _open_context(self, context_id: str, request: Generate) -> _Context:
        session = self._session
        if context_id in self._contexts.speaking:
            raise TTSError(
                ErrorCode.INVALID_ID,
                f"Context {context_id!r} has ended (its last request had continue false); use a new context_id.",
            )
        session.refuse_when_draining()
        session.refuse_when_full("done")
        rules = session.engine.rules
        voice, speed = rules.voice(request.voice), rules.speed(request.speed)
        fmt = audio_format(request.format)
        utterance = Utterance.in_format(
            context_id, Pieces(), fmt, output_rate(fmt, request.sample_rate), word_timestamps=request.add_timestamps
        )
        session.enqueue(utterance)
        context = _Context(WrittenUtterance(session, utterance, voice.spec, speed, literal=False))
        self._contexts.add(context_id, context)
        return context

    async def _cancel(self, context_id: str) -> None:
        context = self._contexts.named(context_id)
        if context is None:
            return  # finished already, or never opened
        context.cancelled = True
        self._contexts.stop(context)

    # --- the session's events -----------------------------------------------------------------------------------

    async def render(self, event: SessionEvent) -> None:
        match event:
            case Words(utterance=u, words=words):
                if (context := self._contexts.speaking.get(u.id)) is not None:
                    start = tuple(round(w.start_ms / 1000, 3) for w in words)
                    end = tuple(round(w.end_ms / 1000, 3) for w in words)
                    await self._send(Timestamps(u.id, tuple(context.sent.as_written(w) for w in words), start, end))
            case Audio(utterance=u, data=data):
                await self._send(Chunk(u.id, data))
            case Refused(error=error, utterance_id=context_id):
                await self._send(ErrorMessage.of(error, context_id))
            case Finished(utterance=u):
                context = self._contexts.finished(u.id)
                if context is not None and not context.cancelled:
                    await self._send(Done(u.id))
            case ShuttingDown():
                error = TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; this text was not spoken.")
                for context_id in self._contexts.speaking:
                    await self._send(ErrorMessage.of(error, context_id))

    async def _send(self, message: ServerMessage) -> None:
        await self._session.send_text(encode(message))
