"""Our engine in this process: the naive no-chunking baseline, and "ours" in the comparison with kokoro-onnx.

In-process timings leave out the server and the wire, so they compare the synthesis paths themselves.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
from kokoro_client.audio import SAMPLE_RATE
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.settings import Settings

from .client import model_dir


@dataclass
class InProcess:
    engine: TTSEngine

    @classmethod
    def load(cls, fused_snake: bool = True) -> InProcess:
        engine = TTSEngine.load(Settings(model_dir=model_dir(), fused_snake=fused_snake))
        engine.warm_up()  # builds the G2P and runs the model once, as the server does before /ping says ok
        return cls(engine)

    @property
    def backend(self) -> str:
        return f"{self.engine.backend.name} ({self.engine.backend.device})"

    def naive_whole(self, text: str, voice: str = "af_heart") -> tuple[float, float]:
        """(ms, audio s): G2P of the whole text, then ONE backend call on all of its phonemes: no chunking,
        so the first audio exists only when the whole reply does."""
        request = self.engine.rules.speech(text, voice, 1.0)
        started = time.perf_counter()
        phonemes = self.engine.phonemizer.phonemes(request.text, request.voice.lang)
        batches = self.engine.phonemizer.token_batches(phonemes)
        # The baseline is one call: a text whose phonemes exceed the model's 510 tokens cannot be one.
        assert len(batches) == 1, f"{len(batches)} batches: the text does not fit one model call"
        tokens = batches[0]
        audio = self.engine.backend.synthesize(tokens, request.voice.style(len(tokens)), request.speed)
        elapsed = 1000 * (time.perf_counter() - started)
        return elapsed, audio.size / SAMPLE_RATE

    def synth_chunk(self, text: str, voice: str = "af_heart") -> tuple[float, np.ndarray]:
        """(ms, pcm) for one chunk exactly as the server's worker does it: G2P, token batches, the model."""
        request = self.engine.rules.speech(text, voice, 1.0)
        started = time.perf_counter()
        pcm = self.engine._synthesize_chunk(request.text, request)  # the worker's own job, not a copy of it
        return 1000 * (time.perf_counter() - started), pcm

    async def first_chunk_ms(self, text: str, voice: str = "af_heart") -> float:
        """Time to the first chunk of ``TTSEngine.stream`` (chunking, scheduling, G2P, inference).

        The rest is dropped; the look-ahead chunk already in the worker thread cannot be stopped, so an empty job
        queued behind it marks the moment the worker is free again (one worker: the default)."""
        request = self.engine.rules.speech(text, voice, 1.0)
        started = time.perf_counter()
        stream = self.engine.stream(request)
        try:
            await anext(stream)
            first = 1000 * (time.perf_counter() - started)
        finally:
            await stream.aclose()
        await self.engine.scheduler.run(lambda _alone: None, asyncio.get_running_loop().time())
        return first
