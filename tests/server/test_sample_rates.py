"""Output sample rates and G.711: every rate has the right length and is audio, chunk seams are clean, and an
8 kHz μ-law stream from the real server is speech Whisper understands."""

from __future__ import annotations

import io
import json
from typing import Any

import av
import httpx
import numpy as np
import pytest
from kokoro_client.audio import SAMPLE_RATE, SAMPLE_RATES
from kokoro_tts.audio.encoding import FORMATS, audio_format, make_encoder, output_rate
from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors
from websockets.asyncio.client import connect

from scripts.speech import rms

# Speech-like test signal: a gliding tone with a syllable-rate envelope, 1.5 s at 24 kHz.
_T = np.arange(int(1.5 * SAMPLE_RATE)) / SAMPLE_RATE
SIGNAL = (8000 * np.sin(2 * np.pi * (200 * _T + 600 * _T**2)) * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * _T))).astype(
    np.int16
)
CHUNKS = [SIGNAL[i : i + 3001] for i in range(0, SIGNAL.size, 3001)]  # odd sizes: seams fall anywhere

TELEPHONE_TEXT = "Your appointment is confirmed for Tuesday at three in the afternoon."


def encode_all(fmt: str, rate: int, chunks: list[np.ndarray]) -> bytes:
    encoder = make_encoder(FORMATS[fmt], rate)
    return b"".join(encoder.encode(c) for c in chunks) + encoder.finish()


def decode(data: bytes, fmt: str, rate: int) -> tuple[np.ndarray, int]:
    """Any format we send → int16 mono samples and the rate the decoder reports, through FFmpeg."""
    raw = {"pcm": "s16le", "mulaw": "mulaw", "alaw": "alaw"}.get(fmt)
    options = {"sample_rate": str(rate), "ch_layout": "mono"} if raw else {}
    with av.open(io.BytesIO(data), format=raw, options=options) as container:
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="s16", layout="mono", rate=stream.rate)
        frames = [f for frame in container.decode(stream) for f in resampler.resample(frame)]
        frames += resampler.resample(None)
        return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]), stream.rate


@pytest.mark.parametrize(("fmt", "rate"), [(f, r) for f, spec in FORMATS.items() for r in spec.rates])
def test_every_rate_of_every_format_has_the_right_length_and_is_audio(fmt: str, rate: int) -> None:
    pcm, decoded_rate = decode(encode_all(fmt, rate, CHUNKS), fmt, rate)
    # Opus codes at 48 kHz whatever its input (RFC 7845 keeps the input rate in the header only): the rate then
    # sets the coded bandwidth.
    assert decoded_rate == (48_000 if fmt == "opus" else rate)
    expected = SIGNAL.size * decoded_rate / SAMPLE_RATE
    # Exact for uncompressed formats (the resampler's delay comes out at finish); a lossy codec adds its priming
    # and pads its last frame (at most two frames: 2 x 1152 samples for mp3), and may trim a little.
    exact = FORMATS[fmt].codec in (None, "pcm_s16le", "pcm_mulaw", "pcm_alaw")
    low, high = (2, 2) if exact else (0.02 * expected, 2 * 1152 * decoded_rate / rate)
    assert -low <= pcm.size - expected <= high, f"{pcm.size} samples, expected {expected:.0f}"
    assert rms(pcm) > 0.3 * rms(SIGNAL), "the audio came out (nearly) silent"


@pytest.mark.parametrize("rate", [r for r in SAMPLE_RATES if r != SAMPLE_RATE])
def test_chunk_seams_are_as_clean_as_resampling_the_whole(rate: int) -> None:
    chunked = np.frombuffer(encode_all("pcm", rate, CHUNKS), dtype="<i2").astype(np.int32)
    whole = np.frombuffer(encode_all("pcm", rate, [SIGNAL]), dtype="<i2").astype(np.int32)
    assert chunked.size == whole.size
    # One stateful resampler per stream: a chunk boundary changes nothing but rounding (a click would be 1000s).
    assert np.abs(chunked - whole).max() <= 2


def test_g711_round_trips_close_to_the_signal() -> None:
    for fmt in ("mulaw", "alaw"):
        pcm, _ = decode(encode_all(fmt, 16_000, CHUNKS), fmt, 16_000)
        reference = np.frombuffer(encode_all("pcm", 16_000, CHUNKS), dtype="<i2")
        error = rms(pcm.astype(np.int32) - reference.astype(np.int32))
        assert error < 0.05 * rms(reference), f"{fmt}: quantization error {error:.0f}"


@pytest.mark.parametrize(
    ("fmt", "rate"),
    [("pcm", 12_000), ("pcm", "8000"), ("pcm", 8000.0), ("pcm", True), ("opus", 44_100), ("mulaw", 24_000)],
)
def test_a_rate_the_format_does_not_take_is_a_coded_error(fmt: str, rate: object) -> None:
    from kokoro_client.errors import ErrorCode, TTSError

    with pytest.raises(TTSError) as caught:
        output_rate(audio_format(fmt), rate)
    assert caught.value.code is ErrorCode.UNSUPPORTED_SAMPLE_RATE
    assert str(FORMATS[fmt].rates[0]) in caught.value.message


def test_g711_defaults_to_8k_and_everything_else_to_24k() -> None:
    assert output_rate(audio_format("mulaw")) == output_rate(audio_format("alaw")) == 8000
    assert {output_rate(audio_format(f)) for f in FORMATS if "law" not in f} == {SAMPLE_RATE}


# --- through the real server ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_8k_mulaw_from_the_server_is_speech_whisper_understands(server: RunningServer) -> None:
    response = httpx.post(
        f"{server.base_url}/invocations", json={"text": TELEPHONE_TEXT, "format": "mulaw"}, timeout=120
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/PCMU;rate=8000"
    assert response.headers["x-sample-rate"] == "8000"
    pcm, _ = decode(response.content, "mulaw", 8000)
    assert len(response.content) == pcm.size  # one byte a sample
    heard = WhisperListener.shared().transcribe(pcm, rate=8000)
    errors, words = word_errors(TELEPHONE_TEXT, heard)
    assert errors / words <= 0.1, f"heard {heard!r}"


@pytest.mark.parametrize("fmt", ["wav", "wav_alaw"])
def test_invocations_sends_the_rate_asked_for(server: RunningServer, fmt: str) -> None:
    rate = 16_000
    response = httpx.post(
        f"{server.base_url}/invocations", json={"text": "Hello there.", "format": fmt, "sample_rate": rate}, timeout=60
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-sample-rate"] == str(rate)
    pcm, decoded_rate = decode(response.content, fmt, rate)
    assert decoded_rate == rate and rms(pcm) > 100


def test_invocations_refuses_a_bad_rate_with_its_code(server: RunningServer) -> None:
    response = httpx.post(f"{server.base_url}/invocations", json={"text": "Hello.", "sample_rate": 11025}, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_sample_rate"


async def test_session_config_and_synthesize_choose_the_rate(server: RunningServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "config", "format": "mulaw"}))
        await ws.send(json.dumps({"type": "synthesize", "id": "a", "text": "Hello there."}))
        await ws.send(json.dumps({"type": "synthesize", "id": "b", "text": "Hello there.", "sample_rate": 16000}))
        await ws.send(json.dumps({"type": "config", "format": "pcm", "sample_rate": 44100}))
        await ws.send(json.dumps({"type": "synthesize", "id": "c", "text": "Hello there."}))
        await ws.send(json.dumps({"type": "config", "sample_rate": 12345}))  # refused: the defaults stay
        await ws.send(json.dumps({"type": "synthesize", "id": "d", "text": "Hi.", "sample_rate": 24000.5}))
        await ws.send(json.dumps({"type": "close"}))
        starts: dict[str, dict[str, Any]] = {}
        sizes: dict[str, int] = {}
        errors: list[dict[str, Any]] = []
        current = None
        async for message in ws:
            if isinstance(message, bytes):
                assert current is not None
                sizes[current] = sizes.get(current, 0) + len(message)
                continue
            frame = json.loads(message)
            if frame["type"] == "synthesis_start":
                starts[frame["id"]], current = frame, frame["id"]
            elif frame["type"] == "synthesis_complete":
                assert frame["bytes"] == sizes[frame["id"]]
                sizes[frame["id"] + "_ms"] = frame["audio_ms"]
            elif frame["type"] == "error":
                errors.append(frame)
    assert [(starts[i]["format"], starts[i]["sample_rate"]) for i in "abc"] == [
        ("mulaw", 8000),
        ("mulaw", 16000),
        ("pcm", 44100),
    ]
    # The byte count is the audio's duration at the rate sent (mulaw: 1 byte a sample, pcm: 2).
    for utterance, rate, width in (("a", 8000, 1), ("b", 16000, 1), ("c", 44100, 2)):
        seconds = sizes[utterance] / width / rate
        assert abs(seconds - sizes[utterance + "_ms"] / 1000) < 0.01, utterance
    assert [(e["code"], e.get("id")) for e in errors] == [
        ("unsupported_sample_rate", None),
        ("unsupported_sample_rate", "d"),
    ]
