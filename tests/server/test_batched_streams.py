"""Streams whose whole chunks are due together share one torch call (engine/scheduler.py ``Batch``), and each hears
its own words: the engine on the torch backend (CPU) with batches of three, its real scheduler, three streams."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
from kokoro_tts.engine.backends import torch_weights
from kokoro_tts.engine.backends.torch import TorchBackend
from kokoro_tts.engine.synthesis import AudioChunk, TTSEngine
from kokoro_tts.engine.voices import VoiceBank
from kokoro_tts.settings import Settings
from kokoro_tts.text.phonemes import Phonemizer
from kokoro_tts.weights.layout import WeightLayout
from support.listener import WhisperListener, word_error_rate

pytestmark = pytest.mark.slow

REPLIES = (
    "The train leaves at noon. Bring a warm coat. We will be back by six.",
    "Please water the plants. The red ones need more sun. Thank you for your help.",
    "My brother plays the violin. He practices every morning. The neighbours like it.",
)


@pytest.fixture(scope="module")
def engine(torch_layout: WeightLayout) -> TTSEngine:
    layout = torch_layout
    settings = dataclasses.replace(Settings(), model_dir=layout.root, backend="torch", device="cpu", batch=3)
    backend = TorchBackend(layout.config_path, torch_weights(layout), device="cpu", threads=2, batch=3)
    return TTSEngine(settings, backend, VoiceBank(layout), Phonemizer(layout.config()["vocab"]))


async def _speak(engine: TTSEngine, text: str) -> list[AudioChunk]:
    request = engine.rules.speech(text, "af_heart", 1.0)
    return [chunk async for chunk in engine.stream(request)]


async def test_concurrent_streams_share_calls_and_each_hears_its_own_words(engine: TTSEngine) -> None:
    engine.start()
    try:
        replies = await asyncio.wait_for(asyncio.gather(*(_speak(engine, text) for text in REPLIES)), 240)
    finally:
        await engine.stop()
    calls = [record.label for record in engine.scheduler.history if "batch" in record.label]
    assert any(" + " in label for label in calls), calls  # some calls took several streams' chunks
    assert all(label.count(" + ") < 3 for label in calls), calls  # never more than the limit of three
    assert sum(label.count(" + ") + 1 for label in calls) == 9  # every chunk of every stream, once
    listener = WhisperListener.shared()
    pairs = []
    for text, chunks in zip(REPLIES, replies, strict=True):
        assert [chunk.index for chunk in chunks] == [0, 1, 2]  # a piece per sentence, in order, none lost
        assert all(chunk.words for chunk in chunks)  # the durations reached each stream's own words
        pairs.append((text, listener.transcribe(np.concatenate([chunk.pcm for chunk in chunks]))))
    assert word_error_rate(pairs) <= 0.05, pairs
