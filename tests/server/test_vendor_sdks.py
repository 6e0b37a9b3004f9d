"""The vendors' own Python SDKs, pointed at our server by a base URL, stream a reply written as tokens and get
speech Whisper hears right, the sockets' first audio within 2 s of the first token: ElevenLabs' ``convert_realtime``
(its ``stream-input`` socket; the SDK speaks wss:// only, so the server is reached through TLS as behind a load
balancer) and its HTTP ``stream`` and timed routes, whose characters are the text sent; and Cartesia's
``websocket_connect`` contexts, whose word timestamps are the words sent, and its ``tts.generate`` bytes."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import numpy as np
import pytest
from cartesia import AsyncCartesia
from elevenlabs.client import ElevenLabs
from elevenlabs.core.api_error import ApiError
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

        def speak() -> tuple[bytes, float]:
            began = time.perf_counter()
            chunks = client.text_to_speech.convert_realtime(
                voice_id=VOICE, text=iter(tokens(REPLY)), model_id="eleven_flash_v2_5", output_format="pcm_24000"
            )
            first = next(chunks)
            return first + b"".join(chunks), time.perf_counter() - began

        pcm, first_audio_s = await asyncio.wait_for(asyncio.to_thread(speak), 120)
    assert first_audio_s < 2.0, f"first audio {first_audio_s:.2f} s after the first token"
    assert_heard(pcm)


@pytest.mark.slow
async def test_the_cartesia_sdk_streams_a_reply_with_its_words(server: RunningServer) -> None:
    client = AsyncCartesia(
        api_key="not-used-by-this-server",
        base_url=f"http://127.0.0.1:{server.port}",
        websocket_base_url=f"ws://127.0.0.1:{server.port}",
    )
    audio, words, first_audio_s = bytearray(), [], None
    async with asyncio.timeout(120), client.tts.websocket_connect() as connection:
        context = connection.context(
            model_id="sonic-3",
            voice={"mode": "id", "id": VOICE},
            output_format={"container": "raw", "encoding": "pcm_s16le", "sample_rate": RATE},
            add_timestamps=True,
        )
        began = time.perf_counter()
        for token in tokens(REPLY):
            await context.push(token)
        await context.no_more_inputs()
        async for response in context.receive():
            if response.type == "chunk" and response.audio:
                first_audio_s = first_audio_s or time.perf_counter() - began
                audio += response.audio
            elif response.type == "timestamps" and response.word_timestamps is not None:
                words += response.word_timestamps.words
            assert response.type != "error", response
    assert first_audio_s is not None and first_audio_s < 2.0, f"first audio {first_audio_s} s after the first token"
    assert_heard(bytes(audio))
    assert words == REPLY.split()


def elevenlabs_http(server: RunningServer) -> ElevenLabs:
    return ElevenLabs(api_key="not-used-by-this-server", base_url=f"http://127.0.0.1:{server.port}")


@pytest.mark.slow
async def test_the_elevenlabs_sdk_streams_speech_and_its_timestamps_over_http(server: RunningServer) -> None:
    client = elevenlabs_http(server)

    def streamed() -> bytes:
        return b"".join(client.text_to_speech.stream(VOICE, text=REPLY, output_format="pcm_24000"))

    def timed() -> Any:
        return client.text_to_speech.convert_with_timestamps(VOICE, text=REPLY, output_format="pcm_24000")

    def timed_stream() -> list[Any]:
        return list(client.text_to_speech.stream_with_timestamps(VOICE, text=REPLY, output_format="pcm_24000"))

    assert_heard(await asyncio.to_thread(streamed))
    whole = await asyncio.to_thread(timed)
    assert_heard(base64.b64decode(whole.audio_base_64))
    assert "".join(whole.alignment.characters) == REPLY  # every character sent, in order
    starts = whole.alignment.character_start_times_seconds
    assert (
        starts == sorted(starts)
        and whole.alignment.character_end_times_seconds[-1]
        <= len(base64.b64decode(whole.audio_base_64)) / 2 / RATE + 0.01
    )
    pieces = await asyncio.to_thread(timed_stream)
    assert len(pieces) > 1 and "".join(c for p in pieces if p.alignment for c in p.alignment.characters) == REPLY
    assert_heard(b"".join(base64.b64decode(p.audio_base_64) for p in pieces))


async def test_an_elevenlabs_http_refusal_is_in_elevenlabs_shape(server: RunningServer) -> None:
    client = elevenlabs_http(server)

    def refused() -> ApiError:
        with pytest.raises(ApiError) as caught:
            b"".join(client.text_to_speech.stream("af_nobody", text="Hello."))
        return caught.value

    error = await asyncio.to_thread(refused)
    assert error.status_code is not None and 400 <= error.status_code < 500
    assert error.body["detail"]["status"] == "unknown_voice", error.body


@pytest.mark.slow
@pytest.mark.parametrize(
    ("output_format", "wav"),
    [
        ({"container": "raw", "encoding": "pcm_s16le", "sample_rate": RATE}, False),
        ({"container": "wav", "encoding": "pcm_s16le", "sample_rate": RATE}, True),
    ],
)
async def test_the_cartesia_sdk_gets_the_bytes_of_a_reply(
    server: RunningServer, output_format: dict[str, Any], wav: bool
) -> None:
    client = AsyncCartesia(api_key="not-used-by-this-server", base_url=f"http://127.0.0.1:{server.port}")
    response = await client.tts.generate(
        model_id="sonic-3",
        transcript=REPLY,
        voice={"id": VOICE},
        output_format=output_format,  # type: ignore[arg-type]
    )
    data = await response.read()
    if wav:
        assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
        data = data[44:]
    assert_heard(data)
