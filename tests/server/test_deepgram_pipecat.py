"""The real pipecat-ai package's Deepgram TTS services pointed at our server in a minimal Pipecat pipeline: an LLM
reply arrives as tokens, the service sends Speak per token and Flush at the reply's end, and our server's sentence
chunker, Flushed and raw linear16 at the rate Pipecat asks for carry it through to audio a listener understands.

``DeepgramTTSService`` (a WebSocket to ``/v1/speak``) runs unchanged but for its base URL. Pipecat's
``DeepgramSageMakerTTSService`` is not run here: pipecat-ai[sagemaker] needs aws-sdk-sagemaker-runtime-http2 < 0.10
and the agent pins 0.12.0 (another client class); what it makes the container see, Deepgram's query on the session
path in binary frames, is tested in test_deepgram_session.py."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.deepgram.tts import DeepgramTTSService
from pipecat.services.tts_service import TTSService
from pipecat.workers.runner import WorkerRunner
from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors

REPLY = "Sure, I can help with that. Your order shipped this morning and should arrive on Thursday."
RATE = 16_000


class Collector(FrameProcessor):
    """The end of the pipeline: keeps what the TTS service sends downstream, and says when a reply is done."""

    def __init__(self) -> None:
        super().__init__()
        self.audio = bytearray()
        self.rates: set[int] = set()
        self.errors: list[str] = []
        self.stopped = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.audio += frame.audio
            self.rates.add(frame.sample_rate)
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


async def speak_reply(tts: TTSService) -> Collector:
    """Run ``tts`` in a pipeline, send it one LLM reply as tokens, and return what came out once it stopped."""
    sink = Collector()
    worker = PipelineWorker(
        Pipeline([tts, sink]), params=PipelineParams(audio_out_sample_rate=RATE), cancel_on_idle_timeout=False
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: Any, frame: Frame) -> None:
        started.set()

    async def converse() -> None:
        await asyncio.wait_for(started.wait(), 30)
        await worker.queue_frames(
            [LLMFullResponseStartFrame(), *(LLMTextFrame(t) for t in tokens(REPLY)), LLMFullResponseEndFrame()]
        )
        try:
            await asyncio.wait_for(sink.stopped.wait(), 180)  # the server's Flushed ends the reply
        finally:
            await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(asyncio.gather(runner.run(), converse()), 240)
    return sink


def assert_understood(sink: Collector) -> None:
    assert not sink.errors, sink.errors
    assert sink.rates == {RATE}
    pcm = np.frombuffer(bytes(sink.audio), dtype="<i2")
    assert 3.0 < pcm.size / RATE < 15.0, f"{pcm.size / RATE:.1f} s of audio"
    heard = WhisperListener.shared().transcribe(pcm, rate=RATE)
    errors, words = word_errors(REPLY, heard)
    assert errors / words <= 0.1, f"heard {heard!r}"


# Pipecat ends a reply's audio context after 3 s without audio; a shared 2-core CI machine can take longer than that
# to its first window, and the audio would then have no context to go to.
PATIENT = {"stop_frame_timeout_s": 60}


@pytest.mark.slow
async def test_pipecat_deepgram_service_speaks_an_llm_reply_through_our_route(server: RunningServer) -> None:
    tts = DeepgramTTSService(
        api_key="not-used-by-this-server",
        base_url=f"ws://127.0.0.1:{server.port}",
        sample_rate=RATE,
        settings=DeepgramTTSService.Settings(voice="aura-2-helena-en"),
        **PATIENT,
    )
    assert_understood(await speak_reply(tts))
