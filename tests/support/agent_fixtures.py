"""Helpers for the agent tests: the agent app served over HTTP in a thread, a cuttable TCP proxy, fakes."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from kokoro_client.session import AudioEvent, ControlEvent, SessionOptions, TransportCode, TTSEvent, TTSTransportError
from voice_agent.app import create_app
from voice_agent.events import Event
from voice_agent.models import BuiltModel
from voice_agent.scripted_model import SIMULATED_NAME, ScriptedModel
from voice_agent.settings import AgentSettings

from scripts.servers import free_port
from scripts.sse import post_sse

# Four short sentences, slow tokens: the LLM takes ~5.8 s, far longer than the first sentence's synthesis
# (0.7 s on two cores, 2-3 s when they are busy with other work), while the audio stays short (~6 s).
TEST_REPLY = "Hello there! This reply is simulated. It is short. Goodbye now."
TEST_CADENCE: dict[str, Any] = {"ttft_s": 0.2, "tokens_per_s": 2.5, "jitter": 0.0}
FAST: dict[str, Any] = {"tokens_per_s": 30.0}  # for tests that do not time anything


@dataclass
class AgentServer:
    """The real AgentCore app on uvicorn (what app.run() uses) on a free loopback port, in a thread."""

    settings: AgentSettings
    model: ScriptedModel
    transport: Any = None  # stand-ins for the TTS transports; None: the real ones, from the settings
    batch: Any = None
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @contextlib.contextmanager
    def running(self) -> Iterator[AgentServer]:
        app = create_app(
            self.settings,
            model_factory=lambda _id: BuiltModel(self.model, SIMULATED_NAME),
            transport=self.transport,
            batch=self.batch,
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="agent-uvicorn", daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while not server.started:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise RuntimeError("the agent app did not start")
                time.sleep(0.05)
            assert httpx.get(f"{self.url}/ping", timeout=5).status_code == 200
            yield self
        finally:
            server.should_exit = True
            thread.join(timeout=15)


def agent_settings(tts_url: str, **overrides: Any) -> AgentSettings:
    defaults: dict[str, Any] = {
        "model": "scripted",
        "tts_url": tts_url,
        "tts_endpoint_name": None,
        "voice": None,
        "speed": None,
        "tts_connect_timeout_s": 5.0,
        "tts_idle_timeout_s": 30.0,
        "llm_idle_timeout_s": 10.0,
    }
    return AgentSettings(**{**defaults, **overrides})


def make_model(**config: Any) -> ScriptedModel:
    return ScriptedModel(**{"reply": TEST_REPLY, **TEST_CADENCE, **config})


async def invoke(url: str, payload: dict[str, Any], timeout_s: float = 90.0) -> list[Event]:
    """All events of one invocation, through the SSE consumer."""
    async with asyncio.timeout(timeout_s):
        return [event async for event in post_sse(f"{url}/invocations", payload, timeout_s=timeout_s)]


async def cancel_once_seen[T](stream: AsyncIterator[T], seen: Callable[[T], bool], timeout_s: float = 10) -> None:
    """Iterates ``stream`` in a task until an item ``seen`` accepts, then cancels the task, as AgentCore does when
    the caller goes away; the cancel must end the task."""
    got_one = asyncio.Event()

    async def consume() -> None:
        async for item in stream:
            if seen(item):
                got_one.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_one.wait(), timeout_s)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def types(events: list[Event]) -> list[str]:
    return [e["type"] for e in events]


def index_of(events: list[Event], kind: str, last: bool = False) -> int:
    positions = [i for i, e in enumerate(events) if e["type"] == kind]
    assert positions, f"no {kind} event in {types(events)}"
    return positions[-1] if last else positions[0]


class TCPProxy:
    """Forwards a loopback port to the TTS server; ``cut()`` resets every connection (a server that died)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.connections = 0
        self._writers: list[asyncio.StreamWriter] = []
        self._stop: asyncio.Event
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> TCPProxy:
        ready = threading.Event()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            await self._stop.wait()
            server.close()
            for writer in self._writers:
                writer.transport.abort()

        self._thread = threading.Thread(target=asyncio.run, args=(main(),), name="tcp-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def cut(self, graceful: bool = False) -> None:
        """End every connection now, as a killed server process would: a reset, or (graceful) a plain FIN
        with no WebSocket close frame and no end to the HTTP body."""
        if self._loop is None or self._loop.is_closed():
            return

        def abort() -> None:
            for writer in self._writers:
                if graceful:
                    writer.close()
                else:
                    writer.transport.abort()
            self._writers.clear()

        self._loop.call_soon_threadsafe(abort)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


# --- fakes for the pipeline's unit tests --------------------------------------------------------------------------


@dataclass
class FakeSource:
    """A TextSource: yields ``tokens`` with ``gap_s`` between them; can fail or stall; records how it ended."""

    tokens: list[str]
    gap_s: float = 0.01
    fail_at: int | None = None
    stall_at: int | None = None
    yielded: int = 0
    started: bool = False
    finished: bool = False
    cancelled: bool = False
    cancel_signal: threading.Event | None = None

    async def __call__(self, cancel: threading.Event) -> AsyncIterator[str]:
        self.cancel_signal = cancel
        self.started = True
        try:
            for i, token in enumerate(self.tokens):
                if i == self.fail_at:
                    raise RuntimeError("the LLM broke")
                if i == self.stall_at:
                    await asyncio.sleep(3600)
                await asyncio.sleep(self.gap_s)
                self.yielded += 1
                yield token
            self.finished = True
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled = True
            raise

    @property
    def stopped(self) -> bool:
        """Not running: cancelled mid-stream, or never started."""
        return self.cancelled or not self.started


@dataclass
class FakeTTS:
    """A TTSTransport whose sessions take each utterance's text as it is appended and 'speak' every sentence end in
    it (".", "!", "?"), after ``delay_s``, as one audio frame (the first after a ``synthesis_start``); at the
    utterance's flush, the rest of its text as one more frame, then ``synthesis_complete``. (The real server's cuts
    are tested against it: tests/server/test_ws_fragments.py, tests/agent/test_agent_app.py.)

    Faults: ``refuse`` (open_session fails), ``drop_after`` (the session breaks after N audio frames),
    ``stall`` (audio never comes), ``errors`` (utterance id → error code sent instead of its audio).
    """

    delay_s: float = 0.02
    frames: tuple[bytes, ...] = (b"\x01\x00" * 100, b"\x02\x00" * 100)
    refuse: bool = False
    drop_after: int | None = None
    stall: bool = False
    errors: dict[str, str] = field(default_factory=dict)
    sessions: list[FakeSession] = field(default_factory=list)

    async def open_session(self, options: SessionOptions) -> FakeSession:
        if self.refuse:
            raise TTSTransportError(TransportCode.TTS_UNAVAILABLE, "connection refused")
        session = FakeSession(self)
        self.sessions.append(session)
        return session


_SENTENCE_END = re.compile(r"[.!?]+\s")


class FakeSession:
    def __init__(self, tts: FakeTTS) -> None:
        self.tts = tts
        self.texts: dict[str, str] = {}  # utterance id → everything appended to it
        self.appends = 0
        self.finished = False
        self.closed = False
        self._queue: asyncio.Queue[TTSEvent | BaseException | None] = asyncio.Queue()
        # (utterance id, sentence ends heard, flushed) for the speaker; None after the close.
        self._work: asyncio.Queue[tuple[str, int, bool] | None] = asyncio.Queue()
        self._speaker = asyncio.create_task(self._speak())

    async def _speak(self) -> None:
        frames, started, audio_ms = 0, set[str](), dict[str, float]()
        while (item := await self._work.get()) is not None:
            utterance_id, ends, flushed = item
            if self.tts.stall:
                await asyncio.sleep(3600)
            if utterance_id in self.tts.errors:
                if flushed:
                    error = {"type": "error", "code": self.tts.errors[utterance_id], "message": "no"}
                    self._queue.put_nowait(ControlEvent({**error, "id": utterance_id}))
                continue
            for _ in range(ends):
                await asyncio.sleep(self.tts.delay_s)
                if self.tts.drop_after is not None and frames >= self.tts.drop_after:
                    self._queue.put_nowait(TTSTransportError(TransportCode.TTS_SESSION_DROPPED, "connection reset"))
                    return
                if utterance_id not in started:
                    started.add(utterance_id)
                    start = {"type": "synthesis_start", "id": utterance_id, "format": "pcm", "sample_rate": 24000}
                    self._queue.put_nowait(ControlEvent(start))
                frame = self.tts.frames[frames % len(self.tts.frames)]
                self._queue.put_nowait(AudioEvent(frame))
                audio_ms[utterance_id] = audio_ms.get(utterance_id, 0.0) + len(frame) / 48
                frames += 1
            if flushed:
                await asyncio.sleep(self.tts.delay_s)
                complete = {"type": "synthesis_complete", "id": utterance_id, "audio_ms": audio_ms.get(utterance_id, 0)}
                self._queue.put_nowait(ControlEvent(complete))
        self._queue.put_nowait(None)

    def _check_open(self) -> None:
        if self.closed:
            raise TTSTransportError(TransportCode.TTS_SESSION_DROPPED, "closed")

    async def send_text(self, text: str, utterance_id: str) -> None:
        await self.append_text(text, utterance_id)
        await self.flush(utterance_id)

    async def append_text(self, text: str, utterance_id: str) -> None:
        self._check_open()
        before = self.texts.get(utterance_id, "")
        self.texts[utterance_id] = before + text
        self.appends += 1
        # A sentence end is heard once the space after it has come: the ends this text decided, one frame each.
        ends = len(_SENTENCE_END.findall(self.texts[utterance_id])) - len(_SENTENCE_END.findall(before))
        self._work.put_nowait((utterance_id, ends, False))

    async def flush(self, utterance_id: str) -> None:
        self._check_open()
        rest = _SENTENCE_END.split(self.texts.get(utterance_id, ""))[-1]
        self._work.put_nowait((utterance_id, int(any(c.isalnum() for c in rest)), True))

    async def finish(self) -> None:
        self.finished = True
        self._work.put_nowait(None)

    async def cancel(self) -> None:
        pass

    async def events(self) -> AsyncIterator[TTSEvent]:
        while (item := await self._queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item

    async def aclose(self) -> None:
        self.closed = True
        self._speaker.cancel()


@dataclass
class FakeBatch:
    """A BatchTTS yielding ``chunks`` (odd sizes on purpose) after ``delay_s``; records the text and closing."""

    chunks: tuple[bytes, ...] = (b"\x01" * 101, b"\x02" * 99, b"\x03" * 7)
    delay_s: float = 0.02
    fail: TTSTransportError | None = None
    texts: list[str] = field(default_factory=list)
    closed: bool = False

    async def synthesize(self, text: str, options: SessionOptions) -> AsyncIterator[bytes]:
        self.texts.append(text)
        try:
            await asyncio.sleep(self.delay_s)
            if self.fail is not None:
                raise self.fail
            for chunk in self.chunks:
                yield chunk
                await asyncio.sleep(self.delay_s)
        finally:
            self.closed = True
