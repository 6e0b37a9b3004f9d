"""The synthesis engine: text in, int16 PCM chunks out, one chunk per sentence or clause.

``TTSEngine.stream`` plans the utterance, then keeps one chunk of look-ahead: while chunk i is being sent,
chunk i+1 is being synthesized. Chunks are scheduled by deadline (see scheduler.py) so sessions share cores
fairly. Stopping the iteration (client gone, cancel) drops the chunks not yet started.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import numpy as np

from .audio import SAMPLE_RATE, float_to_pcm16
from .backends import Backend, load_backend
from .errors import ErrorCode, TTSError
from .phonemes import Phonemizer, clean_text
from .scheduler import DeadlineScheduler
from .settings import Settings
from .text_chunks import split_utterance
from .voices import Voice, VoiceBank

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpeechRequest:
    """A validated utterance: build it with ``TTSEngine.request`` so every field has been checked."""

    text: str
    voice: Voice
    speed: float


@dataclass(frozen=True)
class AudioChunk:
    index: int
    text: str
    pcm: np.ndarray  # int16 mono at 24 kHz
    synth_ms: float  # compute time in the worker, queueing excluded

    @property
    def audio_ms(self) -> float:
        return 1000.0 * self.pcm.size / SAMPLE_RATE


class TTSEngine:
    def __init__(self, settings: Settings, backend: Backend, voices: VoiceBank, phonemizer: Phonemizer) -> None:
        self.settings = settings
        self.backend = backend
        self.voices = voices
        self.phonemizer = phonemizer
        self.scheduler = DeadlineScheduler(settings.workers)

    @classmethod
    def load(cls, settings: Settings) -> TTSEngine:
        from .weights.layout import WeightLayout

        layout = WeightLayout(settings.model_dir)
        return cls(settings, load_backend(settings), VoiceBank(layout), Phonemizer(layout.config()["vocab"]))

    def start(self) -> None:
        self.scheduler.start()

    async def stop(self) -> None:
        await self.scheduler.stop()

    def warm_up(self) -> None:
        """Build the default language's G2P and run the model once, so the first request is not the slow one."""
        request = self.request(self.settings.warmup_text, self.settings.default_voice, 1.0)
        for text in split_utterance(request.text):
            self._synthesize_chunk(text, request)

    def request(self, text: object, voice: object | None, speed: object | None) -> SpeechRequest:
        """Validate a client's fields; raises ``TTSError`` naming the first bad one."""
        if text is None:
            raise TTSError(ErrorCode.MISSING_TEXT, "The request has no 'text' to speak.")
        if not isinstance(text, str):
            raise TTSError(ErrorCode.INVALID_TEXT, f"'text' must be a string, not {type(text).__name__}.")
        if len(text) > self.settings.max_text_chars:
            raise TTSError(
                ErrorCode.TEXT_TOO_LONG,
                f"'text' has {len(text)} characters; the limit is {self.settings.max_text_chars}. "
                "Split it into several utterances.",
            )
        if not text.strip():
            raise TTSError(ErrorCode.EMPTY_TEXT, "'text' is empty: send at least one word to speak.")
        cleaned = clean_text(text)
        if not cleaned:
            raise TTSError(
                ErrorCode.NOTHING_TO_SPEAK,
                "'text' holds only characters that are not read aloud (emoji, control characters).",
            )
        resolved = self.voices.resolve(self.settings.default_voice if voice is None else voice)
        self.phonemizer.check_language(resolved.lang)
        return SpeechRequest(cleaned, resolved, self.check_speed(speed))

    def check_speed(self, speed: object | None) -> float:
        if speed is None:
            return 1.0
        lo, hi = self.settings.min_speed, self.settings.max_speed
        if isinstance(speed, bool) or not isinstance(speed, int | float) or not lo <= float(speed) <= hi:
            raise TTSError(ErrorCode.INVALID_SPEED, f"'speed' must be a number from {lo} to {hi}, not {speed!r}.")
        return float(speed)

    async def stream(self, request: SpeechRequest) -> AsyncGenerator[AudioChunk]:
        """Audio chunk by chunk; a chunk with nothing speakable (emoji only, say) is skipped."""
        loop = asyncio.get_running_loop()
        chunks = split_utterance(request.text)

        def schedule(index: int, due: float) -> asyncio.Task[AudioChunk] | None:
            if index >= len(chunks):
                return None
            return asyncio.create_task(self._chunk_job(index, chunks[index], request, due))

        deadline = loop.time()
        pending = schedule(0, deadline)
        try:
            while pending is not None:
                chunk = await pending
                # Due when the audio sent so far has played: new first chunks elsewhere go ahead of this one.
                deadline = max(deadline, loop.time()) + chunk.audio_ms / 1000.0
                pending = schedule(chunk.index + 1, deadline)
                if chunk.pcm.size:
                    yield chunk
        finally:
            if pending is not None:
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)

    async def _chunk_job(self, index: int, text: str, request: SpeechRequest, deadline: float) -> AudioChunk:
        def job() -> tuple[np.ndarray, float]:
            started = time.perf_counter()
            pcm = self._synthesize_chunk(text, request)
            return pcm, 1000.0 * (time.perf_counter() - started)

        pcm, synth_ms = await self.scheduler.run(job, deadline)
        return AudioChunk(index, text, pcm, synth_ms)

    def _synthesize_chunk(self, text: str, request: SpeechRequest) -> np.ndarray:
        phonemes = self.phonemizer.phonemes(text, request.voice.lang)
        pieces = [
            self.backend.synthesize(tokens, request.voice.style(len(tokens)), request.speed)
            for tokens in self.phonemizer.token_batches(phonemes)
        ]
        if not pieces:
            return np.zeros(0, dtype=np.int16)
        return float_to_pcm16(np.concatenate(pieces))
