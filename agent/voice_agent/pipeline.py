"""LLM text → TTS audio, as events (events.py), in the two modes the agent compares.

``run_bidi``: one task drains the LLM and hands each text delta, the moment it arrives, to a sender that appends it
to the reply's one utterance on ONE open TTS session (docs/protocol.md, ``append``/``flush``): the server decides
where pieces start (its fragment buffer is the one place for that policy) and speaks each as soon as it is
complete. Another task drains the session. They all post to one queue, and the caller gets events in real arrival
order, so the first sentence is heard while the LLM is still writing the rest.

``run_batch``: the fair baseline. It waits for the whole reply, then makes one synthesis call whose response
streams (the server still sends each chunk's audio as soon as it exists).

Both are async generators: closing one (the caller left) cancels its tasks, which stops the LLM stream, and
closes the TTS session. Every failure ends the stream with one ``error`` event (events.ErrorCode, or the TTS
transport's kokoro_client.session.TransportCode); every wait has a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from kokoro_client.errors import ErrorCode as TTSErrorCode
from kokoro_client.errors import TTSError
from kokoro_client.protocol import Cancelled, Error, SynthesisComplete, SynthesisStart, Words
from kokoro_client.session import (
    AudioEvent,
    BatchTTS,
    ControlEvent,
    SessionOptions,
    TransportCode,
    TTSSession,
    TTSTransport,
    TTSTransportError,
)
from kokoro_client.utterances import UtteranceReader

from .audio_length import AudioLength, default_rate
from .events import ErrorCode, Event, Events, Metrics

log = logging.getLogger(__name__)


# The LLM's reply as text deltas. The Event is set when the caller goes away, for providers that stream in a
# thread (Bedrock): cancelling the task alone would not stop them. A source whose LLM stopped at its token limit
# ends by raising ``TokenLimitReached``.
TextSource = Callable[[threading.Event], AsyncIterator[str]]


class TokenLimitReached(Exception):
    """The LLM stopped at its token limit: what it wrote is the reply, cut short (spoken, then an ``agent_end``
    flagged ``truncated``), not a failure."""


@dataclass(frozen=True)
class PipelineOptions:
    session: SessionOptions = field(default_factory=SessionOptions)
    tts_connect_timeout_s: float = 10.0
    tts_idle_timeout_s: float = 30.0
    # A batch request the TTS server refuses with server_busy is tried again, after its Retry-After or a doubling
    # back-off, until this long has passed since the first try; then the reply ends with tts_busy.
    tts_busy_retry_s: float = 10.0
    llm_idle_timeout_s: float = 60.0
    # Events waiting for the caller; a caller that stops reading eventually pauses the LLM and the TTS reads.
    queue_size: int = 256
    close_timeout_s: float = 5.0


class _Fail(Exception):
    """Ends the reply with an error event."""

    def __init__(self, code: ErrorCode | TransportCode, message: str, tts_code: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.tts_code = code, message, tts_code

    @classmethod
    def from_transport(cls, exc: TTSTransportError) -> _Fail:
        return cls(exc.code, exc.message, exc.tts_code)


@dataclass(frozen=True)
class _Done:
    source: str


class _Run:
    """Producer tasks post events to one queue; ``drain`` yields them in the order they arrived."""

    def __init__(self, options: PipelineOptions) -> None:
        self.options = options
        self.events = Events()
        self.metrics = Metrics()
        self.queue: asyncio.Queue[Event | _Done | _Fail] = asyncio.Queue(options.queue_size)
        self.cancel = threading.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._producers: list[str] = []
        self.truncated = False  # the LLM stopped at its token limit

    def start(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        self._tasks[name] = asyncio.create_task(self._guard(name, work), name=f"voice-{name}")
        self._producers.append(name)

    async def _guard(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except _Fail as fail:
            await self.queue.put(fail)
            return
        except Exception as exc:  # a bug: still end the reply cleanly, with a code
            log.exception("pipeline task %s failed", name)
            await self.queue.put(_Fail(ErrorCode.INTERNAL_ERROR, f"{name}: {type(exc).__name__}"))
            return
        await self.queue.put(_Done(name))

    async def post(self, event: Event) -> None:
        await self.queue.put(event)

    async def drain(self) -> AsyncIterator[Event]:
        pending = set(self._producers)
        while pending:
            item = await self.queue.get()
            if isinstance(item, _Done):
                pending.discard(item.source)
            elif isinstance(item, _Fail):
                yield self.events.error(item.code, item.message, tts_code=item.tts_code)
                return
            else:
                self.metrics.observe(item)
                yield item
        yield self.events.agent_end(self.metrics, truncated=self.truncated)

    async def aclose(self) -> None:
        self.cancel.set()
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.options.close_timeout_s)

    async def llm_text(self, source: TextSource) -> AsyncIterator[str]:
        """The LLM's text deltas; its failures and stalls become llm_failed / llm_timeout."""
        # A dedicated task reads the LLM into an unbounded queue, so it is always awaiting the LLM itself:
        # cancelling it then unwinds the provider's stream at once (a stream left suspended at a yield would
        # only be closed whenever the garbage collector gets to it).
        text: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        self._tasks["llm-reader"] = asyncio.create_task(self._read_llm(source, text), name="voice-llm-reader")
        while True:
            try:
                async with asyncio.timeout(self.options.llm_idle_timeout_s):
                    item = await text.get()
            except TimeoutError:
                raise _Fail(
                    ErrorCode.LLM_TIMEOUT, f"the LLM sent nothing for {self.options.llm_idle_timeout_s:g} s"
                ) from None
            if item is None:
                return
            if isinstance(item, TokenLimitReached):  # the reply ends here, as written so far
                self.truncated = True
                return
            if isinstance(item, BaseException):
                raise _Fail(ErrorCode.LLM_FAILED, f"the LLM stream failed: {type(item).__name__}: {item}") from item
            yield item

    async def _read_llm(self, source: TextSource, text: asyncio.Queue[str | BaseException | None]) -> None:
        try:
            async for delta in source(self.cancel):
                if delta:
                    text.put_nowait(delta)
        except Exception as exc:
            text.put_nowait(exc)
            return
        text.put_nowait(None)


# --- bidi ------------------------------------------------------------------------------------------------------


# The reply is one utterance on the TTS session, written as the LLM writes it.
REPLY_ID = "0"


class _Bidi:
    def __init__(self, run: _Run, transport: TTSTransport) -> None:
        self.run = run
        self.transport = transport
        self.session: TTSSession | None = None
        self.ready = asyncio.Event()
        # The LLM's deltas waiting for the sender, then None for the end of the reply.
        self.outbox: asyncio.Queue[str | None] = asyncio.Queue()
        self.total = 0  # utterances sent (the reply's, once it has text to say)
        self.completed: set[int] = set()
        self.finished = False  # the flush and the close went out
        self.timer: asyncio.Timeout | None = None

    # The TTS read times out only once the whole reply is sent: before, a silent server may be waiting for the end
    # of a sentence the LLM is still writing.
    def _deadline(self) -> float | None:
        owed = self.finished and len(self.completed) < self.total
        return asyncio.get_running_loop().time() + self.run.options.tts_idle_timeout_s if owed else None

    def _arm(self) -> None:
        if self.timer is not None and self.timer.when() is None:
            self.timer.reschedule(self._deadline())

    async def llm(self, source: TextSource) -> None:
        parts: list[str] = []
        async for delta in self.run.llm_text(source):
            await self.run.post(self.run.events.text_delta(delta))
            parts.append(delta)
            self.outbox.put_nowait(delta)
        self.outbox.put_nowait(None)
        if text := " ".join("".join(parts).split()):
            await self.run.post(self.run.events.sentence(0, text))  # the reply's whole text, as in batch mode

    async def send(self) -> None:
        """Appends each delta as soon as it exists (those that queued up while a send was under way, as one), then
        ends the utterance and the session; never holds up the text: that is the LLM task's, and never waits here."""
        await self.ready.wait()  # if opening fails, the reply ends and this task is cancelled
        session = self.session
        assert session is not None
        ended = False
        while not ended:
            batch = [await self.outbox.get()]
            while not self.outbox.empty():
                batch.append(self.outbox.get_nowait())
            ended = batch[-1] is None
            text = "".join(part for part in batch if part is not None)
            if not self.total and not text.strip():
                continue  # nothing to say yet: no utterance until there is
            self.total = 1
            await self._sending(session.append_text(text, REPLY_ID), "appending to the reply")
        if self.total:
            await self._sending(session.flush(REPLY_ID), "ending the reply")
        await self._sending(session.finish(), "closing the session")
        self.finished = True
        self._arm()

    @staticmethod
    async def _sending(step: Coroutine[Any, Any, None], what: str) -> None:
        try:
            await step
        except TTSTransportError as exc:
            raise _Fail.from_transport(exc) from exc
        except Exception as exc:
            raise _Fail(TransportCode.TTS_SESSION_DROPPED, f"{what} failed: {exc!r}") from exc

    def _complete(self, index: int) -> None:
        self.completed.add(index)

    async def tts(self) -> None:
        options = self.run.options
        try:
            async with asyncio.timeout(options.tts_connect_timeout_s):
                self.session = await self.transport.open_session(options.session)
        except TimeoutError:
            raise _Fail(
                TransportCode.TTS_UNAVAILABLE, f"no TTS session within {options.tts_connect_timeout_s:g} s"
            ) from None
        except TTSTransportError as exc:
            raise _Fail.from_transport(exc) from exc
        except Exception as exc:
            raise _Fail(TransportCode.TTS_UNAVAILABLE, f"cannot open a TTS session: {exc!r}") from exc
        self.ready.set()
        stream = aiter(self.session.events())
        try:
            await self._read(stream)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        if not self.finished or len(self.completed) < self.total:
            raise _Fail(
                TransportCode.TTS_SESSION_DROPPED,
                "the TTS session ended before the reply was spoken",
            )

    async def _read(self, stream: AsyncIterator[AudioEvent | ControlEvent]) -> None:
        options = self.run.options
        events = self.run.events
        reader, current, seq = UtteranceReader(), 0, 0
        while True:
            try:
                async with asyncio.timeout(self._deadline()) as self.timer:
                    event = await anext(stream, None)
            except TimeoutError:
                raise _Fail(TransportCode.TTS_TIMEOUT, f"no audio for {options.tts_idle_timeout_s:g} s") from None
            except TTSTransportError as exc:
                raise _Fail.from_transport(exc) from exc
            except Exception as exc:
                raise _Fail(TransportCode.TTS_SESSION_DROPPED, f"the TTS session failed: {exc!r}") from exc
            finally:
                self.timer = None
            if event is None:
                return
            if isinstance(event, AudioEvent):
                try:
                    start = reader.audio(event.data)
                except TTSError as exc:
                    raise _Fail(TransportCode.TTS_ERROR, exc.message) from None
                await self.run.post(events.audio_chunk(event.data, start.format, start.sample_rate, current, seq))
                seq += 1
                continue
            try:
                frame = reader.frame(event.frame)
            except TTSError as exc:
                if exc.code == TTSErrorCode.UNKNOWN_TYPE:
                    continue  # a frame type from a later protocol version: nothing this reader needs
                raise _Fail(TransportCode.TTS_ERROR, exc.message) from None
            match frame:
                case SynthesisStart():
                    current = self._index(frame.id)
                case Words():
                    await self.run.post(events.words(frame.words))
                case SynthesisComplete():
                    index = self._index(frame.id)
                    self._complete(index)
                    await self.run.post(events.sentence_complete(index, frame.audio_ms))
                case Cancelled():
                    self._complete(self._index(frame.id))
                case Error():
                    failed = None if frame.id is None else self._index(frame.id)
                    if failed is not None and frame.code == TTSErrorCode.NOTHING_TO_SPEAK:
                        # "..." or an emoji: nothing to say in this sentence is no reason to stop the reply.
                        self._complete(failed)
                        await self.run.post(events.sentence_complete(failed, 0.0, skipped=frame.code))
                        continue
                    where = f"sentence {failed}" if failed is not None else "the session"
                    # server_busy mid-reply is not retried: the rest of the reply is on the server already.
                    code = TransportCode.TTS_BUSY if frame.code == TTSErrorCode.SERVER_BUSY else TransportCode.TTS_ERROR
                    raise _Fail(code, f"the TTS server refused {where}: {frame.message}", frame.code)

    def _index(self, utterance_id: str) -> int:
        try:
            return int(str(utterance_id))
        except ValueError:
            raise _Fail(
                TransportCode.TTS_ERROR, f"unknown utterance id from the TTS server: {utterance_id!r}"
            ) from None


async def run_bidi(
    source: TextSource, transport: TTSTransport, *, model_name: str, options: PipelineOptions
) -> AsyncGenerator[Event]:
    run = _Run(options)
    yield run.events.agent_start("bidi", model_name, options.session.voice)
    bidi = _Bidi(run, transport)
    # The session opens while the LLM thinks about its first token: the connection costs nothing then.
    run.start("tts", bidi.tts())
    run.start("send", bidi.send())
    run.start("llm", bidi.llm(source))
    try:
        async for event in run.drain():
            yield event
    finally:
        await run.aclose()
        if bidi.session is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(options.close_timeout_s):
                    await bidi.session.aclose()


# --- batch -----------------------------------------------------------------------------------------------------


async def _batch(run: _Run, source: TextSource, batch: BatchTTS) -> None:
    options = run.options
    events = run.events
    parts: list[str] = []
    async for delta in run.llm_text(source):
        parts.append(delta)
        await run.post(events.text_delta(delta))
    # Spaces collapsed, lines kept: a markdown heading or list item is read as its own line (the server's markup.py).
    text = "\n".join(" ".join(line.split()) for line in "".join(parts).splitlines() if line.strip())
    if not text:
        return
    # The whole reply is the one utterance: sentence 0.
    await run.post(events.sentence(0, text))
    fmt = options.session.format
    retry = BusyRetry(options.tts_busy_retry_s)
    while True:  # until the server takes the request (its first bytes arrive) or refuses it for good
        stream = aiter(batch.synthesize(text, options.session))
        try:
            data = await _read_batch(stream, options)
            break
        except TTSTransportError as exc:
            await _aclose(stream)
            wait = retry.wait_s(exc.retry_after_s) if exc.code == TransportCode.TTS_BUSY else None
            if wait is None:
                if exc.code == TransportCode.TTS_BUSY and retry.tries > 1:
                    exc.message += f" (still busy after {retry.tries} tries in {retry.elapsed_s():.1f} s)"
                raise _Fail.from_transport(exc) from exc
            log.info("the TTS server is busy; trying again in %.1f s (try %d)", wait, retry.tries + 1)
            await asyncio.sleep(wait)
        except BaseException:
            await _aclose(stream)
            raise
    pending = bytearray()
    seq = n_bytes = 0
    rate = default_rate(fmt)  # the batch request names no rate: the server sends the format's own
    length = AudioLength(fmt, rate)
    try:
        while data is not None:
            length.feed(data)
            pending += data
            # HTTP cuts the body anywhere: keep PCM chunks to whole 16-bit samples so each decodes alone.
            cut = len(pending) - len(pending) % 2 if fmt == "pcm" else len(pending)
            if cut:
                await run.post(events.audio_chunk(bytes(pending[:cut]), fmt, rate, 0, seq))
                del pending[:cut]
                seq += 1
                n_bytes += cut
            try:
                data = await _read_batch(stream, options)
            except TTSTransportError as exc:
                raise _Fail.from_transport(exc) from exc
    finally:
        await _aclose(stream)
    if n_bytes == 0:
        raise _Fail(TransportCode.TTS_ERROR, "the TTS server answered with no audio")
    await run.post(events.sentence_complete(0, length.ms()))


async def _read_batch(stream: AsyncIterator[bytes], options: PipelineOptions) -> bytes | None:
    """The response's next bytes (None at its end); a transport's coded error is raised as it is."""
    try:
        async with asyncio.timeout(options.tts_idle_timeout_s):
            return await anext(stream, None)
    except TimeoutError:
        raise _Fail(TransportCode.TTS_TIMEOUT, f"no audio for {options.tts_idle_timeout_s:g} s") from None
    except TTSTransportError:
        raise
    except Exception as exc:
        raise _Fail(TransportCode.TTS_SESSION_DROPPED, f"the TTS response failed: {exc!r}") from exc


async def _aclose(stream: AsyncIterator[bytes]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


class BusyRetry:
    """When to try a request the server refused as busy again: after a doubling back-off (0.5 s, 1 s, 2 s, up to
    4 s) or the server's Retry-After if longer, stretched by up to a quarter at random so that clients refused
    together do not come back together; never past ``budget_s`` from the first try (then ``wait_s`` says None:
    give up now rather than wait in vain)."""

    FIRST_S = 0.5
    LONGEST_S = 4.0

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget_s, self._clock = budget_s, clock
        self._start = clock()
        self.tries = 1

    def elapsed_s(self) -> float:
        return self._clock() - self._start

    def wait_s(self, retry_after_s: float | None) -> float | None:
        backoff = min(self.LONGEST_S, self.FIRST_S * 2 ** (self.tries - 1))
        wait = max(backoff, retry_after_s or 0.0) * random.uniform(1.0, 1.25)
        if self.elapsed_s() + wait > self.budget_s:
            return None
        self.tries += 1
        return wait


async def run_batch(
    source: TextSource, batch: BatchTTS, *, model_name: str, options: PipelineOptions
) -> AsyncGenerator[Event]:
    run = _Run(options)
    yield run.events.agent_start("batch", model_name, options.session.voice)
    run.start("batch", _batch(run, source, batch))
    try:
        async for event in run.drain():
            yield event
    finally:
        await run.aclose()
