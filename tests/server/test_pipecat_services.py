"""The real pipecat-ai package's TTS services, each pointed at our server by its URL alone, in a minimal Pipecat
pipeline: an LLM reply arrives as tokens, the service sends them on its vendor's socket, and what comes back is
audio a listener understands, at the rate Pipecat asks for, first heard within 2 s of the first token. Where the
service reports words from the vendor's timing data (ElevenLabs' alignment, Cartesia's timestamps), they are the
words sent. An interruption (the frame Pipecat pushes when the caller speaks) stops the server's synthesis, and the
next reply does not wait behind what was left of the first.

``DeepgramSageMakerTTSService`` is not run here: pipecat-ai[sagemaker] needs aws-sdk-sagemaker-runtime-http2 < 0.10
and the agent pins 0.12.0 (another client class); what it makes the container see, Deepgram's query on the session
path in binary frames, is tested in test_deepgram_session.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pipecat.services.cartesia.tts import CartesiaTTSService
from pipecat.services.deepgram.tts import DeepgramTTSService
from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
from pipecat.services.tts_service import TTSService
from support.inproc_server import RunningServer
from support.listener import word_errors
from support.pipecat_pipeline import PATIENT, REPLY, Collector, interrupt_then_reply, speak_reply

RATE = 16_000
KEY = "not-used-by-this-server"


def origin(server: RunningServer) -> str:
    return f"ws://127.0.0.1:{server.port}"


def deepgram(server: RunningServer) -> TTSService:
    settings = DeepgramTTSService.Settings(voice="aura-2-helena-en")  # Deepgram's voice: the server's default
    return DeepgramTTSService(api_key=KEY, base_url=origin(server), sample_rate=RATE, settings=settings, **PATIENT)


def elevenlabs(server: RunningServer) -> TTSService:
    settings = ElevenLabsTTSService.Settings(voice="af_heart", model="eleven_flash_v2_5")
    return ElevenLabsTTSService(api_key=KEY, url=origin(server), sample_rate=RATE, settings=settings, **PATIENT)


def cartesia(server: RunningServer) -> TTSService:
    settings = CartesiaTTSService.Settings(voice="af_heart", model="sonic-3")
    url = f"{origin(server)}/tts/websocket"
    return CartesiaTTSService(api_key=KEY, url=url, sample_rate=RATE, settings=settings, **PATIENT)


Service = Callable[[RunningServer], TTSService]
WITH_WORDS: set[Service] = {elevenlabs, cartesia}


def assert_heard(sink: Collector) -> None:
    assert not sink.errors, sink.errors
    assert sink.rates == {RATE}
    assert sink.first_audio_wait_s is not None and sink.first_audio_wait_s < 2.0, sink.first_audio_wait_s
    errors, words = word_errors(REPLY, sink.heard())
    assert errors / words <= 0.05, sink.heard()


@pytest.mark.slow
@pytest.mark.parametrize("service", [deepgram, elevenlabs, cartesia], ids=lambda s: s.__name__)
async def test_a_pipecat_service_speaks_a_streamed_reply(server: RunningServer, service: Service) -> None:
    sink = await speak_reply(service(server), REPLY, RATE)
    assert_heard(sink)
    if service in WITH_WORDS:
        assert sink.words == REPLY.split(), sink.words


@pytest.mark.slow
@pytest.mark.parametrize("service", [elevenlabs, cartesia], ids=lambda s: s.__name__)
async def test_a_pipecat_interruption_stops_the_reply_and_the_next_is_spoken(
    server: RunningServer, service: Service
) -> None:
    assert_heard(await interrupt_then_reply(service(server), RATE, server.engine.scheduler))
