"""The synthesis engine: text in, int16 PCM pieces out, window by window.

``TTSEngine.stream`` splits the utterance into text chunks (a sentence or a clause) and each chunk into token
batches of at most 510 tokens. With the backend's stages (``settings.windowed``, the onnx default) a batch's
audio is then decoded in vocoder windows (engine/windows.py): the first job of a batch runs the prosody front
and a short first window (its input made from a prefix of the batch: backends/stages.py), the second makes the
whole batch's input and its window, every later job one more window, sized by the decoder's measured speed against
the audio already queued. Without stages each batch is one job (the whole chunk at once).

Every scheduler job is bounded: phonemizing one text chunk (at most ``MAX_CHUNK_CHARS``, and for English at most
``MAX_CHUNK_PIECES`` pieces in words of at most ``MAX_WORD_PIECES``: text/chunks.py), or one window (or one batch);
so no utterance holds a worker or the G2P longer than that, whatever its text. Before the first job, the text is
cleaned, normalized and chunked in a thread, never on the event loop. Each job is due when the audio before
it has finished playing (the first of an utterance: now), so another session's first window goes ahead of this
one's later windows (scheduler.py). The stream keeps one job of look-ahead: while piece i is being sent, piece
i+1 is being made. Stopping the iteration (client gone, cancel) drops the jobs not yet started: a cancel takes
effect within one window.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np
from kokoro_client.protocol import WordTiming

from kokoro_tts.audio.encoding import SAMPLE_RATE, float_to_pcm16
from kokoro_tts.engine.backends import Backend, ChunkInput, load_backend
from kokoro_tts.engine.backends.stages import SAMPLES_PER_FRAME
from kokoro_tts.engine.capacity import MEASURED, StreamSlots, waiting_room
from kokoro_tts.engine.requests import RequestRules, SpeechRequest
from kokoro_tts.engine.scheduler import Batch, DeadlineScheduler, Limit
from kokoro_tts.engine.voices import VoiceBank
from kokoro_tts.engine.windows import ChunkWindows, DecoderSpeed, WindowPlan, decode_in_windows
from kokoro_tts.engine.word_timing import TextCursor, TimedWord, batch_words, timings
from kokoro_tts.settings import Settings
from kokoro_tts.text.chunks import split_utterance
from kokoro_tts.text.normalize import ENGLISH
from kokoro_tts.text.phonemes import Phonemizer, TokenBatch

log = logging.getLogger(__name__)

TEXT_THREADS = 1  # the engine's thread for making text (see TTSEngine.__init__)

# What the scheduler tallies each job as (GET /metrics, kokoro_tts_inference_seconds): a text chunk's G2P, the job
# whose audio is an utterance's first (its first audio waits for one of each), and the jobs after it.
PHONEMES_JOB, FIRST_AUDIO_JOB, AUDIO_JOB = "phonemes", "first_audio", "audio"

# Timed rounds of the throughput measurement, the fastest kept: work outside it (requests answered not_ready during
# the warm-up, a busy neighbour) only ever slows a round, so the best is the one least disturbed.
MEASURE_ROUNDS = 3
SPEED_ROUNDS = 2  # the warm-up's passes of unpaced windows that the decoder speed is learnt from
RECHECK_IDLE_S = 300.0  # how often the measurement is taken again, when the engine is idle then


def audio_job(index: int) -> str:
    """The kind of the job making an utterance's piece ``index``."""
    return AUDIO_JOB if index else FIRST_AUDIO_JOB


@dataclass(frozen=True)
class AudioChunk:
    """One piece of an utterance's audio: a vocoder window, or a whole token batch when not windowed."""

    index: int
    text: str  # the text chunk it belongs to
    pcm: np.ndarray  # int16 mono at 24 kHz
    synth_ms: float  # compute time in the worker, queueing excluded
    # The words whose audio starts in this piece, in ms from the utterance's start (English voices; word_timing.py)
    words: tuple[WordTiming, ...] = ()

    @property
    def audio_ms(self) -> float:
        return 1000.0 * self.pcm.size / SAMPLE_RATE


class TTSEngine:
    def __init__(self, settings: Settings, backend: Backend, voices: VoiceBank, phonemizer: Phonemizer) -> None:
        self.settings = settings
        self.backend = backend
        self.voices = voices
        self.phonemizer = phonemizer
        self.rules = RequestRules(settings, voices)
        self.scheduler = DeadlineScheduler(backend.parallel_jobs)
        # Whole token batches of several streams, queued together, go to the backend in one call (its limit).
        self._whole_chunks = Batch(self._synthesize_batch, backend.batch_limit)
        # Server-wide caps: past them a client reads server_busy at once, never a queue minutes long.
        self.sessions = Limit("WebSocket sessions", settings.max_sessions)
        self.slots = StreamSlots(settings.streams)  # measured by ``warm_up``
        waiting = waiting_room(settings.max_waiting_first_chunks, self.slots.ceiling)  # again once measured
        self.waiting = Limit("utterances waiting for their first audio", waiting)
        self.http_streams = Limit("HTTP syntheses in flight", settings.max_http_streams)
        self.window_plan = WindowPlan()
        # The decoder's speed, learnt from the windows of every stream: a new chunk's first window is planned from
        # it (unknown until the warm-up has decoded one); and what making a chunk's input takes, which the job of
        # its second window does first (backends/stages.py).
        self.decoder_speed = DecoderSpeed()
        self.input_speed = DecoderSpeed()
        self.side_speed = DecoderSpeed()  # the decoder's speed in a job side by side with others (engine/windows.py)
        self._utterances = itertools.count(1)  # names each stream's jobs in the scheduler's history: "u7 window 2"
        # Text is made in pure Python, which holds the GIL: one thread for it, so a burst of long texts is a queue
        # there, not a crowd of threads the event loop must win the GIL from for every /ping.
        self._text_thread = ThreadPoolExecutor(max_workers=TEXT_THREADS, thread_name_prefix="kokoro-text")
        self._rechecks: asyncio.Task[None] | None = None  # recheck_while_idle, once started

    @property
    def windowed(self) -> bool:
        return self.settings.windowed and self.backend.stages is not None

    @property
    def fused_snake(self) -> bool:
        """Whether the generator runs the fused Snake kernel (engine/backends/kernels.py)."""
        return self.backend.stages is not None and self.backend.stages.fused_snake

    @property
    def direct_conv(self) -> bool:
        """Whether the generator's convolutions run the direct kernel (engine/backends/kernels.py)."""
        return self.backend.stages is not None and self.backend.stages.direct_conv

    @classmethod
    def load(cls, settings: Settings) -> TTSEngine:
        from kokoro_tts.weights.layout import WeightLayout

        layout = WeightLayout(settings.model_dir)
        if problems := layout.problems():  # cheap (sizes only): says which file, not onnxruntime's NO_SUCHFILE
            raise FileNotFoundError(f"incomplete weight layout: {'; '.join(problems)[:300]}")
        return cls(settings, load_backend(settings), VoiceBank(layout), Phonemizer(layout.config()["vocab"]))

    def start(self) -> None:
        self.scheduler.start()
        if self.settings.streams == MEASURED:  # a fixed count (or none) has nothing to re-check
            self._rechecks = asyncio.create_task(self.recheck_while_idle())

    async def stop(self) -> None:
        if self._rechecks is not None:
            self._rechecks.cancel()
            await asyncio.gather(self._rechecks, return_exceptions=True)
        await self.scheduler.stop()
        self._text_thread.shutdown(wait=False, cancel_futures=True)

    def warm_up(self) -> None:
        """Build the default language's G2P and run the model once, so the first request is not the slow one; then
        measure what the workers make side by side, which sizes the stream slots (engine/capacity.py)."""
        request = self.rules.speech(self.settings.warmup_text, self.settings.default_voice, 1.0)
        texts = self._text_chunks(request)
        for text in texts:
            self._synthesize_chunk(text, request, every_core=True)
        # Windows of growing sizes, alone on the machine: the decoder speed's line, which the first streams are planned
        # by, is fitted to more than one sentence's two or three paced windows (docs/engine.md).
        for _ in range(SPEED_ROUNDS if self.windowed else 0):
            for text in texts:
                self._synthesize_chunk(text, request, every_core=True, paced=False)
        # The one-thread sessions' first run is slow (backends/ort_sessions.py), as is a GPU's first batch: untimed.
        if self.backend.parallel_jobs > 1 or self._copies > 1:
            self._as_under_load(texts, request)
        self._size_slots(*self.measure_throughput())
        log.info(
            "stream slots: %g (the workers make %.2f s of audio per second side by side)",
            self.slots.ceiling,
            self.slots.throughput,
        )

    def measure_throughput(self) -> tuple[float, float]:
        """Seconds of audio the workers make side by side and the wall time it took: the fastest of
        ``MEASURE_ROUNDS`` rounds (blocking: a thread's job)."""
        request = self.rules.speech(self.settings.warmup_text, self.settings.default_voice, 1.0)
        texts = self._text_chunks(request)
        rounds = []
        for _ in range(MEASURE_ROUNDS):
            started = time.perf_counter()
            samples = self._as_under_load(texts, request)
            rounds.append((samples / SAMPLE_RATE, time.perf_counter() - started))
        return max(rounds, key=lambda r: r[0] / r[1] if r[1] > 0 else 0.0)

    async def recheck_while_idle(self, idle_s: float = RECHECK_IDLE_S) -> None:
        """Takes the throughput again every ``idle_s`` when no stream and no job is there, so a figure a disturbed
        warm-up got wrong (or a host that got slower) does not size the slots for the life of the process. A
        measurement that any work overlapped is dropped."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(idle_s)
            if not self._idle:
                continue
            jobs = self.scheduler.started
            measured = await loop.run_in_executor(None, self.measure_throughput)
            if not self._idle or self.scheduler.started != jobs:
                continue
            before = self.slots.throughput
            self._size_slots(*measured)
            log.info(
                "stream slots re-checked while idle: %g (%.2f s of audio per second, was %.2f)",
                self.slots.ceiling,
                self.slots.throughput,
                before,
            )

    def _size_slots(self, audio_s: float, wall_s: float) -> None:
        """The stream slots, and the server-wide cap on first chunks waiting (sized from them), from a measurement."""
        self.slots.measured(audio_s, wall_s)
        self.waiting.ceiling = waiting_room(self.settings.max_waiting_first_chunks, self.slots.ceiling)

    @property
    def _idle(self) -> bool:
        scheduler = self.scheduler
        return self.slots.idle and not scheduler.pending and not scheduler.running and not self.waiting.count

    @property
    def _copies(self) -> int:
        """How many streams' chunks one call makes under load: the backend's batch limit when chunks are whole."""
        return 1 if self.windowed else self.backend.batch_limit

    def _as_under_load(self, texts: list[str], request: SpeechRequest) -> int:
        """Every worker makes the texts at once, as under load (one job at a time alone where there is one worker;
        in full batches where the backend batches): the samples made."""
        jobs, copies = self.backend.parallel_jobs, self._copies

        def worker(_: int) -> int:
            if copies > 1:
                return sum(self._synthesize_copies(text, request, copies) for text in texts)
            return sum(self._synthesize_chunk(text, request, every_core=jobs == 1).size for text in texts)

        with ThreadPoolExecutor(jobs) as pool:
            return sum(pool.map(worker, range(jobs)))

    async def stream(self, request: SpeechRequest, due: float | None = None) -> AsyncGenerator[AudioChunk]:
        """Audio window by window (batch by batch when not windowed); a chunk with nothing speakable (emoji only,
        say) is skipped. ``due``: when the first audio is needed (loop time; default now), later for a session
        whose earlier audio is still playing."""
        loop = asyncio.get_running_loop()
        tag = f"u{next(self._utterances)}"
        # Cleaning, normalizing, their maps and the chunking: linear, but off the loop all the same.
        texts = deque(await loop.run_in_executor(self._text_thread, self._text_chunks, request))
        batches: deque[tuple[str, TokenBatch]] = deque()  # phonemized, not yet synthesized
        decoding: _Decoding | None = None  # the batch whose windows are being decoded
        cursor = TextCursor(request.text, request.source)
        made = 0  # samples of audio made so far: where the next batch starts
        count = 0

        async def next_chunk(index: int, due: float) -> AudioChunk | None:
            nonlocal made
            chunk = await make_chunk(index, due)
            made += chunk.pcm.size if chunk is not None else 0
            return chunk

        async def make_chunk(index: int, due: float) -> AudioChunk | None:
            nonlocal decoding
            if decoding is not None and not decoding.done:
                return await self._window_job(index, decoding, due, f"{tag} window {index}")
            while not batches and texts:
                text = texts.popleft()
                for batch in await self._phonemize(text, request, due, f"{tag} phonemes"):
                    batches.append((text, batch))
            if not batches:
                return None
            text, batch = batches.popleft()
            if not self.windowed:
                return await self._batch_job(
                    index, text, batch, request, _Timing(cursor, made), due, f"{tag} batch {index}"
                )
            decoding = _Decoding(text, batch, request, _Timing(cursor, made))
            return await self._window_job(index, decoding, due, f"{tag} window {index}")

        deadline = loop.time() if due is None else max(due, loop.time())
        pending: asyncio.Task[AudioChunk | None] | None = asyncio.create_task(next_chunk(0, deadline))
        try:
            while pending is not None:
                chunk = await pending
                pending = None
                if chunk is None:
                    break
                count += 1
                # Due when the audio sent so far has played: new first windows elsewhere go ahead of this one.
                deadline = max(deadline, loop.time()) + chunk.audio_ms / 1000.0
                pending = asyncio.create_task(next_chunk(count, deadline))
                if chunk.pcm.size:
                    yield chunk
        finally:
            if pending is not None:
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
            if decoding is not None:
                decoding.end()
            texts.clear()
            batches.clear()

    async def _batch_job(
        self,
        index: int,
        text: str,
        batch: TokenBatch,
        request: SpeechRequest,
        timing: _Timing,
        deadline: float,
        label: str,
    ) -> AudioChunk:
        def finish(audio: np.ndarray, durations: np.ndarray | None) -> tuple[np.ndarray, tuple[WordTiming, ...]]:
            words = batch_words(batch, durations, timing.cursor) if durations is not None else []
            return float_to_pcm16(audio), timings(words, timing.offset, request.sent)

        ids = batch.ids
        job = _WholeChunk(ChunkInput(ids, request.voice.style(len(ids)), request.speed), finish)
        pcm, words, synth_ms = await self.scheduler.run_batched(
            self._whole_chunks, job, deadline, label, audio_job(index)
        )
        return AudioChunk(index, text, pcm, synth_ms, words)

    def _synthesize_batch(
        self, jobs: list[_WholeChunk], every_core: bool
    ) -> list[tuple[np.ndarray, tuple[WordTiming, ...], float]]:
        """Whole token batches, of one stream or several (``_whole_chunks``), in one backend call: each job's PCM,
        words, and the call's compute time."""
        started = time.perf_counter()
        made = self.backend.synthesize_batch([job.input for job in jobs], every_core=every_core)
        synth_ms = 1000.0 * (time.perf_counter() - started)
        return [(*job.finish(audio, durations), synth_ms) for job, (audio, durations) in zip(jobs, made, strict=True)]

    async def _window_job(self, index: int, decoding: _Decoding, deadline: float, label: str) -> AudioChunk:
        """The batch's next window (its first also runs the prosody front), as large as the audio queued ahead of
        it (``deadline``: when that audio has played) lets the decoder finish in time."""
        stages = self.backend.stages
        assert stages is not None

        def job(every_core: bool) -> tuple[np.ndarray, float, tuple[WordTiming, ...]]:
            started = time.perf_counter()
            request, timing = decoding.request, decoding.timing
            if decoding.ended:  # its stream ended as this job began: nothing to make
                return np.zeros(0, np.int16), 0.0, ()
            windows = decoding.windows
            if windows is None:
                ids = decoding.batch.ids
                prosody = stages.front(ids, request.voice.style(len(ids)), request.speed, every_core=every_core)
                windows = ChunkWindows(
                    partial(stages.decode, prosody, pool=stages.norm_pool(request.voice.spec, ids, prosody)),
                    prosody.frames,
                    self.window_plan,
                    self.decoder_speed,
                    inputs=self.input_speed,
                    complete=partial(stages.complete, prosody),
                    side=self.side_speed,
                )
                if not decoding.ended:  # else kept by nothing once this job returns
                    decoding.windows = windows
                    decoding.words = batch_words(decoding.batch, prosody.durations, timing.cursor)
            # The loop's clock is time.monotonic: the seconds of audio still queued ahead of this window.
            pcm = float_to_pcm16(
                windows.next_window(
                    lambda: deadline - time.monotonic(),
                    self.scheduler.share(),
                    every_core=every_core,
                    workers=self.scheduler.workers,
                )
            )
            # The words starting in this window (the last window takes the rest).
            ends = windows.start * SAMPLES_PER_FRAME if not windows.done else None
            words = [w for w in decoding.words if ends is None or w.start < ends]
            decoding.words = decoding.words[len(words) :]
            return pcm, 1000.0 * (time.perf_counter() - started), timings(words, timing.offset, request.sent)

        pcm, synth_ms, words = await self.scheduler.run(job, deadline, label, audio_job(index))
        return AudioChunk(index, decoding.text, pcm, synth_ms, words)

    @staticmethod
    def _text_chunks(request: SpeechRequest) -> list[str]:
        return split_utterance(request.prepare().text, english=request.voice.lang in ENGLISH)

    def _token_batches(self, text: str, request: SpeechRequest) -> list[list[int]]:
        return [batch.ids for batch in self._batches(text, request)]

    def _batches(self, text: str, request: SpeechRequest) -> list[TokenBatch]:
        return self.phonemizer.batches(self.phonemizer.spoken(text, request.voice.lang))

    def _phonemes(self, text: str, request: SpeechRequest, every_core: bool) -> list[TokenBatch]:
        """``_batches`` as a scheduler job: the G2P is Python, on one core whether the job runs alone or not."""
        return self._batches(text, request)

    async def _phonemize(self, text: str, request: SpeechRequest, due: float, label: str) -> list[TokenBatch]:
        """A text chunk's token batches: a scheduler job where the workers are the CPU's cores, earliest deadline
        first among the others; in the text thread where the backend batches, whose worker must take only model
        calls: a G2P job there runs just before its own chunk's job, so each stream's chunk would come due alone
        and no two would ever be queued together to share a call."""
        if self.backend.batch_limit > 1:
            return await asyncio.get_running_loop().run_in_executor(self._text_thread, self._batches, text, request)
        return await self.scheduler.run(partial(self._phonemes, text, request), due, label, PHONEMES_JOB)

    def _synthesize_chunk(
        self, text: str, request: SpeechRequest, every_core: bool = True, paced: bool = True
    ) -> np.ndarray:
        """A text chunk's whole audio, as the server makes it (in paced windows when windowed; ``paced`` False: in
        the plan's growing windows), in this thread (``every_core``: with every core to itself, or side by side with
        others)."""
        pieces: list[np.ndarray] = []
        for tokens in self._token_batches(text, request):
            style = request.voice.style(len(tokens))
            if self.windowed and (stages := self.backend.stages) is not None:
                prosody = stages.front(tokens, style, request.speed, every_core=every_core)
                pool = stages.norm_pool(request.voice.spec, tokens, prosody)
                pieces += decode_in_windows(
                    partial(stages.decode, prosody, pool=pool),
                    prosody.frames,
                    self.window_plan,
                    paced=paced,
                    speed=self.decoder_speed,
                    inputs=self.input_speed,
                    complete=partial(stages.complete, prosody),
                    every_core=every_core,
                    side=self.side_speed,
                )
            else:
                pieces.append(self.backend.synthesize(tokens, style, request.speed, every_core=every_core))
        if not pieces:
            return np.zeros(0, dtype=np.int16)
        return float_to_pcm16(np.concatenate(pieces))

    def _synthesize_copies(self, text: str, request: SpeechRequest, copies: int) -> int:
        """A text chunk's token batches, each as ``copies`` streams' at once in one backend call: the samples made."""
        samples = 0
        for tokens in self._token_batches(text, request):
            item = ChunkInput(tokens, request.voice.style(len(tokens)), request.speed)
            samples += sum(audio.size for audio, _ in self.backend.synthesize_batch([item] * copies))
        return samples


@dataclass(frozen=True)
class _WholeChunk:
    """A token batch to synthesize whole, and what its stream makes of the audio and durations (PCM, its words)."""

    input: ChunkInput
    finish: Callable[[np.ndarray, np.ndarray | None], tuple[np.ndarray, tuple[WordTiming, ...]]]


@dataclass(frozen=True)
class _Timing:
    """What a batch's word timings need: the utterance's text cursor, and the samples made before the batch."""

    cursor: TextCursor
    offset: int


class _Decoding:
    """A token batch being decoded window by window; its windows exist once the first job has run the front."""

    def __init__(self, text: str, batch: TokenBatch, request: SpeechRequest, timing: _Timing) -> None:
        self.text, self.batch, self.request, self.timing = text, batch, request, timing
        self.windows: ChunkWindows | None = None
        self.words: list[TimedWord] = []  # the batch's words not yet sent with a window
        self.ended = False

    def end(self) -> None:
        """The stream has ended: drop the chunk's features and input (tens of MB for a long chunk) now. A stream
        cancelled mid-job stays in a reference cycle (its CancelledError's traceback holds its frames) until a full
        garbage collection, which can be minutes away; eight long streams abandoned at once held ~130 MB."""
        self.ended = True
        self.windows, self.words = None, []

    @property
    def done(self) -> bool:
        return self.windows is not None and self.windows.done
