"""OpenAI's speech API as its users drive it: the official `openai` client (every format, streaming and SSE), a
LiveKit-style raw SSE request, the voice and model lists, OpenAI-shaped errors, blends and the 0.25–4.0 speeds,
against the real model on the real Hypercorn server."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import openai
import pytest
from kokoro_client.errors import ErrorCode, TTSError
from kokoro_tts.engine.backends.stages import SAMPLES_PER_FRAME
from kokoro_tts.engine.voices import VoiceBank
from kokoro_tts.routes.openai import MODELS, OPENAI_VOICES
from kokoro_tts.text.phonemes import LANGUAGE_CODES
from kokoro_tts.weights.layout import WeightLayout
from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors

from scripts.speech import rms

RATE = 24_000
TEXT = "Thanks for waiting."
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac"}
MEDIA_TYPES |= {"wav": "audio/wav", "pcm": "audio/pcm"}
FORMATS = tuple(MEDIA_TYPES)  # every response_format OpenAI lists


@pytest.fixture(scope="module")
def client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)


def decode(data: bytes, fmt: str) -> tuple[np.ndarray, int]:
    """int16 mono samples and their rate: raw ``pcm`` as it is, any container through FFmpeg."""
    if fmt == "pcm":
        return np.frombuffer(data, dtype="<i2"), RATE
    with av.open(io.BytesIO(data)) as container:
        rate = container.streams.audio[0].rate
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    if samples.dtype.kind == "f":
        samples = np.clip(samples, -1.0, 1.0) * 32767
    return samples.astype(np.int16), rate


def assert_speech(pcm: np.ndarray, rate: int, seconds: tuple[float, float]) -> float:
    """Non-silent audio of a plausible duration; returns the duration."""
    duration = pcm.size / rate
    assert seconds[0] < duration < seconds[1], duration
    assert rms(pcm) > 300, rms(pcm)  # speech is well above -40 dBFS; silence or noise floor is not
    return duration


def sse_events(body: str) -> list[dict[str, Any]]:
    """OpenAI's stream: bare ``data: {json}`` lines, each event ended by a blank line."""
    assert body.endswith("\n\n")
    events = []
    for block in body.strip("\n").split("\n\n"):
        (line,) = block.split("\n")
        assert line.startswith("data: "), line
        events.append(json.loads(line.removeprefix("data: ")))
    return events


def joined_audio(events: list[dict[str, Any]]) -> bytes:
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    assert events[-1]["type"] == "speech.audio.done"
    return b"".join(base64.b64decode(e["audio"], validate=True) for e in events[:-1])


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_through_the_official_client(client: openai.OpenAI, fmt: str) -> None:
    whole = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format=fmt)
    assert_speech(*decode(whole.content, fmt), seconds=(0.6, 4.0))
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="coral", input=TEXT, response_format=fmt
    ) as response:
        assert response.headers["content-type"].split(";")[0] == MEDIA_TYPES[fmt]
        pieces = list(response.iter_bytes())
    assert_speech(*decode(b"".join(pieces), fmt), seconds=(0.6, 4.0))


@pytest.mark.parametrize("fmt", FORMATS)
def test_sse_through_the_official_client(client: openai.OpenAI, fmt: str) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="nova", input=TEXT, response_format=fmt, stream_format="sse"
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = "".join(response.iter_text())
    events = sse_events(body)
    pcm, rate = decode(joined_audio(events), fmt)
    duration = assert_speech(pcm, rate, seconds=(0.6, 4.0))
    usage = events[-1]["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens"] == len(TEXT)
    # output_tokens: the decoder's 25 ms frames; the encoder may pad its last frame (mp3: up to ~50 ms).
    assert abs(usage["output_tokens"] * SAMPLES_PER_FRAME / RATE - duration) < 0.1


def test_a_livekit_style_sse_request(server: RunningServer) -> None:
    """What LiveKit's openai.TTS sends for a model other than tts-1 (livekit/agents#6184): raw pcm in SSE."""
    request = {
        "model": "gpt-4o-mini-tts",
        "voice": "ash",
        "input": "Please call me back this afternoon.",
        "response_format": "pcm",
        "speed": 1.0,
        "instructions": "Speak in a calm, friendly tone.",
        "stream_format": "sse",
    }
    with (
        httpx.Client(timeout=120) as http,
        http.stream("POST", f"{server.base_url}/v1/audio/speech", json=request) as r,
    ):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        body = "".join(r.iter_text())
    events = sse_events(body)
    assert len(events) >= 3  # audio leaves in several deltas as it is made, not in one at the end
    pcm = np.frombuffer(joined_audio(events), dtype="<i2")
    assert pcm.size == events[-1]["usage"]["output_tokens"] * SAMPLES_PER_FRAME
    assert_speech(pcm, RATE, seconds=(1.2, 5.0))
    heard = WhisperListener.shared().transcribe(pcm)
    assert word_errors(request["input"], heard)[0] <= 1, heard


def test_an_error_after_the_stream_started_is_its_last_event(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The synthesis fails after its first chunk: the stream has started, so the error is its last event."""
    engine = server.engine
    stream = engine.stream

    async def failing_after_the_first(request: Any, due: float | None = None) -> AsyncGenerator[Any]:
        async with aclosing(stream(request, due)) as chunks:
            yield await anext(chunks)
        raise TTSError(ErrorCode.SHUTTING_DOWN, "The server is shutting down; retry on another instance.")

    monkeypatch.setattr(engine, "stream", failing_after_the_first)
    body = {"input": "Thanks for waiting. Your order shipped today.", "response_format": "pcm", "stream_format": "sse"}
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200
    events = sse_events(response.text)
    assert [e["type"] for e in events] == ["speech.audio.delta", "error"]
    assert events[-1]["error"]["code"] == "shutting_down" and events[-1]["error"]["type"] == "server_error"


LANGUAGE_SAMPLES = {"a": "Hello.", "b": "Hello.", "e": "Hola.", "f": "Bonjour.", "h": "नमस्ते।", "i": "Ciao."}
LANGUAGE_SAMPLES |= {"p": "Olá.", "z": "你好。"}


@pytest.mark.slow  # one synthesis per listed voice (47)
def test_the_voice_list_is_every_voice_the_server_speaks(server: RunningServer, model_dir: Path) -> None:
    listed = httpx.get(f"{server.base_url}/v1/audio/voices", timeout=30).json()["voices"]
    every_pack = WeightLayout(model_dir).voice_names()
    assert listed and set(listed) <= set(every_pack)
    # The packs left out are exactly those whose language has no G2P here (Japanese), and they cannot speak.
    unlisted = sorted(set(every_pack) - set(listed))
    assert unlisted and all(name[0] not in LANGUAGE_CODES for name in unlisted), unlisted
    refused = httpx.post(
        f"{server.base_url}/v1/audio/speech", json={"model": "kokoro", "input": "hi", "voice": unlisted[0]}, timeout=60
    )
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "unsupported_language")
    # Every listed voice speaks, in its own language.
    for name in listed:
        response = httpx.post(
            f"{server.base_url}/v1/audio/speech",
            json={"model": "kokoro", "input": LANGUAGE_SAMPLES[name[0]], "voice": name, "response_format": "pcm"},
            timeout=60,
        )
        assert response.status_code == 200, (name, response.text)
        assert_speech(np.frombuffer(response.content, dtype="<i2"), RATE, seconds=(0.2, 4.0))


def test_every_openai_voice_name_is_a_voice_the_server_speaks(client: openai.OpenAI, server: RunningServer) -> None:
    documented = {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse"}
    assert set(OPENAI_VOICES) == documented | {"marin", "cedar"}
    # Each maps to a listed voice (and every listed voice speaks: the test above); the names added last, end to end.
    assert set(OPENAI_VOICES.values()) <= set(server.engine.voices.names)
    for name in ("ballad", "verse", "marin", "cedar"):
        audio = client.audio.speech.create(model="tts-1", voice=name, input="Hi there.", response_format="pcm")
        assert_speech(np.frombuffer(audio.content, dtype="<i2"), RATE, seconds=(0.3, 3.0))


def test_models_in_openai_s_list_shape(client: openai.OpenAI, server: RunningServer) -> None:
    assert [m.id for m in client.models.list()] == list(MODELS)
    listed = httpx.get(f"{server.base_url}/v1/models", timeout=30).json()
    assert listed["object"] == "list"
    assert {tuple(sorted(m)) for m in listed["data"]} == {("created", "id", "object", "owned_by")}
    assert client.models.retrieve("kokoro").id == "kokoro"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("whisper-1")
    assert missing.value.code == "unknown_model" and missing.value.param == "model"


def test_null_fields_are_the_defaults(server: RunningServer) -> None:
    body = {"input": "Hi there.", "model": None, "voice": None, "speed": None, "stream_format": None}
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/mpeg"
    assert_speech(*decode(response.content, "mp3"), seconds=(0.3, 3.0))


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        ({"model": "tts-1", "voice": "alloy"}, 400, "missing_text", "input"),
        ({"input": "", "voice": "alloy"}, 400, "empty_text", "input"),
        ({"input": "word " * 1001}, 413, "text_too_long", "input"),
        ({"input": "hi", "speed": 4.5}, 400, "invalid_speed", "speed"),
        ({"input": "hi", "speed": 0.2}, 400, "invalid_speed", "speed"),
        ({"input": "hi", "speed": "fast"}, 400, "invalid_speed", "speed"),
        ({"input": "hi", "response_format": "ogg"}, 400, "unsupported_format", "response_format"),
        ({"input": "hi", "stream_format": "chunks"}, 400, "unsupported_format", "stream_format"),
        ({"input": "hi", "model": "whisper-1"}, 404, "unknown_model", "model"),
        ({"input": "hi", "voice": "af_nobody"}, 400, "unknown_voice", "voice"),
        ({"input": "hi", "voice": "af_bella(0)+af_sky"}, 400, "invalid_voice", "voice"),
        ({"input": "hi", "voice": "af_bella+af_sky:1"}, 400, "invalid_voice", "voice"),
        (["hi"], 400, "invalid_message", None),
    ],
)
def test_errors_are_shaped_as_openai_s(
    server: RunningServer, body: Any, status: int, code: str, param: str | None
) -> None:
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == status
    error = response.json()["error"]
    assert error == {"message": error["message"], "type": "invalid_request_error", "param": param, "code": code}
    assert len(error["message"]) > 15 and "'text'" not in error["message"]


def test_the_client_raises_with_our_code_and_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.audio.speech.create(model="tts-1", voice="alloy", input="hi", speed=5.0)
    assert (bad.value.code, bad.value.param, bad.value.type) == ("invalid_speed", "speed", "invalid_request_error")
    assert "0.25 to 4.0" in bad.value.message


def test_kokoro_fastapi_blends_are_ours_normalised(model_dir: Path, client: openai.OpenAI) -> None:
    bank = VoiceBank(WeightLayout(model_dir))
    pairs = [("af_bella+af_sky", "af_bella:1,af_sky:1"), ("af_bella(2)+af_sky(1)", "af_bella:0.6667,af_sky:0.3333")]
    for theirs, ours in pairs:
        np.testing.assert_allclose(bank.resolve(theirs).pack, bank.resolve(ours).pack, atol=1e-4)
    for theirs, _ in pairs:
        audio = client.audio.speech.create(model="kokoro", voice=theirs, input="Hi there.", response_format="pcm")
        assert_speech(np.frombuffer(audio.content, dtype="<i2"), RATE, seconds=(0.3, 3.0))


@pytest.mark.parametrize(
    "spec", ["af_bella(x)", "af_bella(2", "af_bella+", "af_bella(inf)+af_sky", "af_bella(-1)+af_sky(1)", "af(1)"]
)
def test_a_bad_kokoro_fastapi_blend_is_invalid_voice(model_dir: Path, spec: str) -> None:
    with pytest.raises(TTSError) as bad:
        VoiceBank(WeightLayout(model_dir)).resolve(spec)
    assert bad.value.code == ErrorCode.INVALID_VOICE
    assert re.search(r"'af_\w+\(\d\)\+af_\w+\(\d\)'", bad.value.message), bad.value.message  # shows the syntax


def test_speeds_beyond_the_model_s_range_are_time_stretched(client: openai.OpenAI) -> None:
    """0.5–2.0 is the model's own speed; 0.25 and 4.0 are the model at 0.5 and 2.0, then stretched by exactly
    2× and ½× by FFmpeg's atempo."""
    text = "Your order shipped today."
    seconds = {}
    for speed in (0.25, 0.5, 1.0, 2.0, 4.0):
        audio = client.audio.speech.create(
            model="kokoro", voice="af_heart", input=text, response_format="pcm", speed=speed
        )
        seconds[speed] = assert_speech(np.frombuffer(audio.content, dtype="<i2"), RATE, seconds=(0.3, 20.0))
    assert seconds[0.5] > seconds[1.0] > seconds[2.0]
    assert seconds[0.25] / seconds[0.5] == pytest.approx(2.0, rel=0.03)
    assert seconds[4.0] / seconds[2.0] == pytest.approx(0.5, rel=0.03)


def test_sse_word_timestamps_are_opt_in_and_precede_their_audio(server: RunningServer) -> None:
    """Our extension: ``word_timestamps`` adds ``speech.audio.words`` events (each before the delta holding the
    audio of its words, times divided by the time-stretch); without it the stream is OpenAI's events only."""
    text = "Your table for two is booked at seven."
    request = {"input": text, "response_format": "pcm", "stream_format": "sse", "word_timestamps": True, "speed": 2.5}
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json=request, timeout=120)
    assert response.status_code == 200, response.text
    events = sse_events(response.text)
    assert events[0]["type"] == "speech.audio.words" and events[-1]["type"] == "speech.audio.done"
    words = [w for e in events if e["type"] == "speech.audio.words" for w in e["words"]]
    assert [w["word"] for w in words] == text.rstrip(".").split()
    assert all(text[w["char_start"] : w["char_end"]] == w["word"] for w in words)
    starts = [w["start_ms"] for w in words]
    assert starts == sorted(starts) and all(w["end_ms"] > w["start_ms"] for w in words)
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    audio_ms = 1000 * len(audio) / 2 / RATE  # the stretched audio: the words' times are in its clock
    assert words[-1]["end_ms"] <= audio_ms + 50 and words[-1]["end_ms"] > 0.6 * audio_ms, (words[-1], audio_ms)

    plain = httpx.post(f"{server.base_url}/v1/audio/speech", json={**request, "word_timestamps": False}, timeout=120)
    assert {e["type"] for e in sse_events(plain.text)} == {"speech.audio.delta", "speech.audio.done"}
    refused = httpx.post(f"{server.base_url}/v1/audio/speech", json={**request, "stream_format": "audio"}, timeout=10)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "word_timestamps"


LONG = "x" * 60_000  # a client's 60 KB string: errors quote a short prefix of it, never all of it


@pytest.mark.parametrize(
    ("field", "code"),
    [
        ("response_format", "unsupported_format"),
        ("stream_format", "unsupported_format"),
        ("model", "unknown_model"),
        ("speed", "invalid_speed"),
        ("sample_rate", "unsupported_sample_rate"),
        ("voice", "invalid_voice"),
    ],
)
def test_errors_quote_a_client_s_long_string_cut_short(server: RunningServer, field: str, code: str) -> None:
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json={"input": "hi", field: LONG}, timeout=60)
    error = response.json()["error"]
    assert error["code"] == code
    assert len(response.content) < 600 and "'xxxxxxxxxx" in error["message"], error["message"]


def test_usage_counts_the_characters_of_input_as_sent(server: RunningServer) -> None:
    text = "Hi there 🙂🙂, friend\u0001!"  # emoji and a control character: dropped before speech, counted here
    body = {"input": text, "stream_format": "sse", "response_format": "pcm"}
    response = httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=120)
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    assert events[-1]["usage"]["input_tokens"] == len(text)
