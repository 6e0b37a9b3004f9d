"""An operator's API key (KOKORO_API_KEY, server/api_keys.py): with one set, the vendor-compatible routes let
through only requests that carry it, wherever each vendor's client puts it (the real OpenAI and ElevenLabs SDKs, and
each vendor's header by hand), and refuse the rest with 401 unauthorized (a WebSocket handshake with 403); the
SageMaker contract's routes are not guarded. A request let through reaches the engine, which is still loading here
(not_ready): real Hypercorn, no model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import openai
import pytest
from elevenlabs.client import ElevenLabs
from elevenlabs.core.api_error import ApiError
from kokoro_tts.metrics import REGISTRY
from kokoro_tts.settings import Secret, Settings
from support.loading_server import loading_server
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

KEY = "sk-operator-key"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with loading_server(Settings(api_key=Secret(KEY))) as port:
        yield port


SPEECH = {"model": "kokoro", "input": "Hello.", "voice": "af_heart"}
CARTESIA = {"transcript": "Hello.", "voice": "af_heart", "output_format": {"container": "mp3", "sample_rate": 24000}}


@pytest.mark.parametrize(
    ("path", "body", "header"),
    [
        ("/v1/audio/speech", SPEECH, {"Authorization": f"Bearer {KEY}"}),
        ("/v1/text-to-speech/af_heart/stream", {"text": "Hello."}, {"xi-api-key": KEY}),
        ("/tts/bytes", CARTESIA, {"X-API-Key": KEY}),
    ],
)
async def test_each_vendors_key_lets_its_request_through_and_no_other_does(
    port: int, path: str, body: dict[str, object], header: dict[str, str]
) -> None:
    url = f"http://127.0.0.1:{port}{path}"
    async with httpx.AsyncClient(timeout=30) as client:
        let_through = await client.post(url, json=body, headers=header)
        refused = [
            await client.post(url, json=body),
            await client.post(url, json=body, headers={name: "sk-wrong" for name in header}),
            await client.post(url, json=body, headers={name: KEY[:-1] for name in header}),
        ]
    assert let_through.status_code == 503, let_through.text  # the engine's answer: it is still loading
    for response in refused:
        assert response.status_code == 401, response.text
        assert "unauthorized" in response.text


async def test_the_real_sdks_pass_with_the_key_and_fail_without(port: int) -> None:
    def elevenlabs(key: str) -> int | None:
        client = ElevenLabs(api_key=key, base_url=f"http://127.0.0.1:{port}")
        with pytest.raises(ApiError) as caught:
            b"".join(client.text_to_speech.stream("af_heart", text="Hello."))
        return caught.value.status_code

    assert await asyncio.to_thread(elevenlabs, KEY) == 503
    assert await asyncio.to_thread(elevenlabs, "sk-wrong") == 401
    base = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(openai.AuthenticationError):
        await openai.AsyncOpenAI(base_url=base, api_key="sk-wrong", max_retries=0).audio.speech.create(**SPEECH)  # type: ignore[arg-type]
    with pytest.raises(openai.InternalServerError):  # 503 not_ready: past the key
        await openai.AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0).audio.speech.create(**SPEECH)  # type: ignore[arg-type]


def refused_for_the_key(route: str) -> float:
    return REGISTRY.get_sample_value("kokoro_tts_errors_total", {"route": route, "code": "unauthorized"}) or 0.0


async def handshake(url: str, headers: dict[str, str] | None = None) -> int:
    """The handshake's answer: while the model loads, a socket let through is refused too (403, not_ready)."""
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, additional_headers=headers):
            pass
    return refused.value.response.status_code


async def test_a_socket_handshake_without_the_key_is_refused(port: int) -> None:
    speak, cartesia = f"ws://127.0.0.1:{port}/v1/speak", f"ws://127.0.0.1:{port}/tts/websocket"
    before = refused_for_the_key("deepgram"), refused_for_the_key("cartesia")
    assert await handshake(speak) == 403
    assert await handshake(cartesia, {"X-API-Key": "sk-wrong"}) == 403
    assert (refused_for_the_key("deepgram"), refused_for_the_key("cartesia")) == (before[0] + 1, before[1] + 1)
    # Deepgram's header, and Cartesia's query (a browser cannot set headers): let through to the loading engine.
    assert await handshake(speak, {"Authorization": f"Token {KEY}"}) == 403
    assert await handshake(f"{cartesia}?api_key={KEY}") == 403
    assert (refused_for_the_key("deepgram"), refused_for_the_key("cartesia")) == (before[0] + 1, before[1] + 1)


async def test_the_sagemaker_contract_is_not_guarded(port: int) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        ping = await client.get(f"http://127.0.0.1:{port}/ping")
        invocations = await client.post(f"http://127.0.0.1:{port}/invocations", json={"text": "Hello."})
    assert ping.status_code == 503 and invocations.status_code == 503  # loading, not unauthorized
