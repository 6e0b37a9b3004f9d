"""The vendors' own Python SDKs, pointed at our server by a base URL, stream a reply written as tokens and get
speech Whisper hears right: ElevenLabs' ``convert_realtime`` (its ``stream-input`` socket; the SDK speaks wss://
only, so the server is reached through TLS as behind a load balancer) and Cartesia's ``websocket_connect`` contexts,
whose word timestamps are the words sent."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from cartesia import AsyncCartesia
from elevenlabs.client import ElevenLabs
from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors
from support.pipecat_pipeline import REPLY, tokens
from support.sagemaker import Certs
from support.tls_front import tls_front

VOICE = "af_heart"
RATE = 24_000


def assert_heard(pcm: bytes) -> None:
    heard = WhisperListener.shared().transcribe(np.frombuffer(pcm, dtype="<i2"), rate=RATE)
    errors, words = word_errors(REPLY, heard)
    assert errors / words <= 0.05, heard


@pytest.mark.slow
async def test_the_elevenlabs_sdk_streams_a_reply_over_its_socket(server: RunningServer, certs: Certs) -> None:
    async with tls_front(server.port, certs) as port:
        client = ElevenLabs(api_key="not-used-by-this-server", base_url=f"https://localhost:{port}")

        def speak() -> bytes:
            chunks = client.text_to_speech.convert_realtime(
                voice_id=VOICE, text=iter(tokens(REPLY)), model_id="eleven_flash_v2_5", output_format="pcm_24000"
            )
            return b"".join(chunks)

        pcm = await asyncio.wait_for(asyncio.to_thread(speak), 120)
    assert_heard(pcm)


@pytest.mark.slow
async def test_the_cartesia_sdk_streams_a_reply_with_its_words(server: RunningServer) -> None:
    client = AsyncCartesia(
        api_key="not-used-by-this-server",
        base_url=f"http://127.0.0.1:{server.port}",
        websocket_base_url=f"ws://127.0.0.1:{server.port}",
    )
    audio, words = bytearray(), []
    async with asyncio.timeout(120), client.tts.websocket_connect() as connection:
        context = connection.context(
            model_id="sonic-3",
            voice={"mode": "id", "id": VOICE},
            output_format={"container": "raw", "encoding": "pcm_s16le", "sample_rate": RATE},
            add_timestamps=True,
        )
        for token in tokens(REPLY):
            await context.push(token)
        await context.no_more_inputs()
        async for response in context.receive():
            if response.type == "chunk" and response.audio:
                audio += response.audio
            elif response.type == "timestamps" and response.word_timestamps is not None:
                words += response.word_timestamps.words
            assert response.type != "error", response
    assert_heard(bytes(audio))
    assert words == REPLY.split()
