"""A minimal Pipecat pipeline around one real Pipecat TTS service: an LLM reply goes in as tokens, and what the
service sends downstream (audio, the words it says were spoken, errors) is kept, as an app's transport would get it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.tts_service import TTSService
from pipecat.workers.runner import WorkerRunner

from support.listener import WhisperListener
from support.ws_client import assert_synthesis_stopped

REPLY = "Sure, I can help with that. Your order shipped this morning and should arrive on Thursday."
LONG_REPLY = (
    "Let me walk you through every step of the return, one at a time. First, print the label we emailed you this "
    "morning. Then pack the shoes in their original box, with the receipt on top. Tape the box shut and stick the "
    "label on its largest side. Finally, drop it at any post office before the end of next week."
)

# Pipecat ends a reply's audio context after 3 s without audio; a shared 2-core CI machine can take longer than that
# to its first window, and the audio would then have no context to go to.
PATIENT = {"stop_frame_timeout_s": 60}


class Collector(FrameProcessor):
    """The end of the pipeline: keeps what the TTS service sends downstream, and says when a reply is done."""

    def __init__(self) -> None:
        super().__init__()
        self.audio = bytearray()
        self.rates: set[int] = set()
        self.words: list[str] = []  # TTSTextFrames: the words the service says were spoken, in order
        self.errors: list[str] = []
        self.first_audio = asyncio.Event()
        self.first_audio_wait_s: float | None = None  # from the last reply's first token (``first_audio_s``)
        self.stopped = asyncio.Event()

    def heard(self) -> str:
        """What Whisper hears in the audio kept (16-bit PCM at the one rate sent)."""
        (rate,) = self.rates
        return WhisperListener.shared().transcribe(np.frombuffer(bytes(self.audio), dtype="<i2"), rate=rate)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.audio += frame.audio
            self.rates.add(frame.sample_rate)
            self.first_audio.set()
        elif isinstance(frame, TTSTextFrame):
            self.words.append(frame.text)
        elif isinstance(frame, TTSStoppedFrame):
            self.stopped.set()
        elif isinstance(frame, ErrorFrame):
            self.errors.append(frame.error)
        await self.push_frame(frame, direction)


def tokens(text: str) -> list[str]:
    """An LLM's way of sending text: pieces of words, spaces attached to the front."""
    words = text.split(" ")
    pieces = [words[0]] + [" " + w for w in words[1:]]
    return [p[i : i + 4] for p in pieces for i in range(0, len(p), 4)]


def reply_frames(text: str) -> list[Frame]:
    return [LLMFullResponseStartFrame(), *(LLMTextFrame(t) for t in tokens(text)), LLMFullResponseEndFrame()]


async def run_pipeline(
    tts: TTSService, rate: int, converse: Callable[[PipelineWorker, Collector], Awaitable[None]]
) -> Collector:
    """Runs ``tts`` in a pipeline at ``rate`` while ``converse`` queues frames into it; what came out."""
    sink = Collector()
    worker = PipelineWorker(
        Pipeline([tts, sink]), params=PipelineParams(audio_out_sample_rate=rate), cancel_on_idle_timeout=False
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: Any, frame: Frame) -> None:
        started.set()

    async def conversation() -> None:
        await asyncio.wait_for(started.wait(), 30)
        try:
            await converse(worker, sink)
        finally:
            await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(asyncio.gather(runner.run(), conversation()), 240)
    return sink


async def first_audio_s(worker: PipelineWorker, sink: Collector, text: str) -> float:
    """Queues ``text`` as an LLM reply; seconds from its first token to its first audio."""
    sink.first_audio.clear()
    sent = time.perf_counter()
    await worker.queue_frames(reply_frames(text))
    await asyncio.wait_for(sink.first_audio.wait(), 60)
    sink.first_audio_wait_s = time.perf_counter() - sent
    return sink.first_audio_wait_s


async def speak_reply(tts: TTSService, text: str, rate: int) -> Collector:
    """Sends ``tts`` one LLM reply as tokens; what came out once it stopped."""

    async def converse(worker: PipelineWorker, sink: Collector) -> None:
        await first_audio_s(worker, sink, text)
        await asyncio.wait_for(sink.stopped.wait(), 120)

    return await run_pipeline(tts, rate, converse)


async def interrupt_then_reply(tts: TTSService, rate: int, scheduler: Any) -> Collector:
    """``LONG_REPLY``, interrupted at its first audio (the ``InterruptionFrame`` Pipecat pushes when the caller
    speaks), then ``REPLY``: what came out of the second. The interruption must stop the server's synthesis
    (``scheduler``: the engine's)."""

    async def converse(worker: PipelineWorker, sink: Collector) -> None:
        await first_audio_s(worker, sink, LONG_REPLY)
        started = scheduler.started
        await worker.queue_frame(InterruptionFrame())
        await assert_synthesis_stopped(scheduler, started)
        sink.audio.clear()
        sink.stopped.clear()
        await first_audio_s(worker, sink, REPLY)  # timed: it must not wait behind what was left of the first
        await asyncio.wait_for(sink.stopped.wait(), 120)

    return await run_pipeline(tts, rate, converse)
