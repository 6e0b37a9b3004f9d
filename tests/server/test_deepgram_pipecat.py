"""The real pipecat-ai package's Deepgram TTS services pointed at our server in a minimal Pipecat pipeline: an LLM
reply arrives as tokens, the service sends Speak per token and Flush at the reply's end, and our server's sentence
chunker, Flushed and raw linear16 at the rate Pipecat asks for carry it through to audio a listener understands.

``DeepgramTTSService`` (a WebSocket to ``/v1/speak``) runs unchanged but for its base URL. Pipecat's
``DeepgramSageMakerTTSService`` is not run here: pipecat-ai[sagemaker] needs aws-sdk-sagemaker-runtime-http2 < 0.10
and the agent pins 0.12.0 (another client class); what it makes the container see, Deepgram's query on the session
path in binary frames, is tested in test_deepgram_session.py."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.services.deepgram.tts import DeepgramTTSService
from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors
from support.pipecat_pipeline import PATIENT, Collector, speak_reply

REPLY = "Sure, I can help with that. Your order shipped this morning and should arrive on Thursday."
RATE = 16_000


def assert_understood(sink: Collector) -> None:
    assert not sink.errors, sink.errors
    assert sink.rates == {RATE}
    pcm = np.frombuffer(bytes(sink.audio), dtype="<i2")
    assert 3.0 < pcm.size / RATE < 15.0, f"{pcm.size / RATE:.1f} s of audio"
    heard = WhisperListener.shared().transcribe(pcm, rate=RATE)
    errors, words = word_errors(REPLY, heard)
    assert errors / words <= 0.1, f"heard {heard!r}"


@pytest.mark.slow
async def test_pipecat_deepgram_service_speaks_an_llm_reply_through_our_route(server: RunningServer) -> None:
    tts = DeepgramTTSService(
        api_key="not-used-by-this-server",
        base_url=f"ws://127.0.0.1:{server.port}",
        sample_rate=RATE,
        settings=DeepgramTTSService.Settings(voice="aura-2-helena-en"),
        **PATIENT,
    )
    assert_understood(await speak_reply(tts, REPLY, RATE))
