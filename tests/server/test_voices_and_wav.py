"""The voice list a client is told about, and the streamed WAV header players get."""

from __future__ import annotations

import io
import struct
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest
from kokoro_tts.audio.encoding import FORMATS, make_encoder
from kokoro_tts.engine.voices import VoiceBank
from kokoro_tts.text.phonemes import LANGUAGE_CODES
from kokoro_tts.weights.layout import WeightLayout
from support.inproc_server import RunningServer


def test_unknown_voice_lists_only_voices_this_server_can_speak(server: RunningServer) -> None:
    response = httpx.post(f"{server.base_url}/invocations", json={"text": "hi", "voice": "af_nobody"}, timeout=60)
    error = response.json()["error"]
    assert (response.status_code, error["code"]) == (400, "unknown_voice")
    listed = error["message"].split("Available voices: ")[1].rstrip(".").split(", ")
    assert "af_heart" in listed and "zf_xiaobei" in listed
    assert all(name[0] in LANGUAGE_CODES for name in listed), listed
    assert not any(name.startswith("j") for name in listed)
    # Every voice it lists speaks.
    for name in ("bm_george", "ef_dora", listed[-1]):
        spoken = httpx.post(f"{server.base_url}/invocations", json={"text": "Hola.", "voice": name}, timeout=60)
        assert spoken.status_code == 200, (name, spoken.text)


def test_the_unlisted_packs_still_say_why_they_cannot_speak(server: RunningServer, model_dir: Path) -> None:
    every_pack = WeightLayout(model_dir).voice_names()
    unlisted = sorted(set(every_pack) - set(VoiceBank(WeightLayout(model_dir)).names))
    assert unlisted and all(name.startswith("j") for name in unlisted), unlisted
    response = httpx.post(f"{server.base_url}/invocations", json={"text": "hi", "voice": unlisted[0]}, timeout=60)
    assert response.json()["error"]["code"] == "unsupported_language"


def _streamed_wav(samples: int) -> bytes:
    encoder = make_encoder(FORMATS["wav"])
    head = encoder.encode(np.full(samples, 1000, dtype=np.int16))
    return head + encoder.finish()


def test_streamed_wav_header_is_the_canonical_44_bytes_with_unknown_sizes() -> None:
    """What OpenAI's speech API streams and FFmpeg writes to a pipe: RIFF/data sizes 0xFFFFFFFF, data at byte 44."""
    data = _streamed_wav(2400)
    riff, riff_size, wave_id, fmt_id, fmt_size = struct.unpack_from("<4sI4s4sI", data, 0)
    assert (riff, riff_size, wave_id, fmt_id, fmt_size) == (b"RIFF", 0xFFFFFFFF, b"WAVE", b"fmt ", 16)
    tag, channels, rate, byte_rate, align, bits = struct.unpack_from("<HHIIHH", data, 20)
    assert (tag, channels, rate, byte_rate, align, bits) == (1, 1, 24000, 48000, 2, 16)
    assert struct.unpack_from("<4sI", data, 36) == (b"data", 0xFFFFFFFF)
    assert len(data) == 44 + 2400 * 2
    assert data[44:46] == struct.pack("<h", 1000)


@pytest.mark.parametrize("samples", [1, 24000])
def test_streamed_wav_reads_to_its_end(samples: int) -> None:
    """A reader that trusts the size still gets exactly the samples sent (Python's wave stops at the end)."""
    with wave.open(io.BytesIO(_streamed_wav(samples))) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 24000)
        assert len(wav.readframes(wav.getnframes())) == samples * 2


@pytest.mark.parametrize(
    ("voice", "code"),
    [
        ("af_heart\n", "invalid_voice"),  # "$" matched before a trailing newline: the name looked valid
        ("af_heart,jf_alpha", "unsupported_language"),  # every part's language, not only the first one's
        ("af_heart(2)+jf_alpha(1)", "unsupported_language"),
        ("af_heart:1_000,af_bella:1", "invalid_voice"),  # float() reads "1_000"
        ("af_heart:\u0661,af_bella:1", "invalid_voice"),  # and "١" (Arabic-Indic one)
        ("af_heart(\u0661)+af_bella(1)", "invalid_voice"),
        ("af_heart:infinity,af_bella:1", "invalid_voice"),
    ],
)
def test_voice_names_and_weights_are_checked_whole(server: RunningServer, voice: str, code: str) -> None:
    response = httpx.post(f"{server.base_url}/invocations", json={"text": "hi", "voice": voice}, timeout=60)
    assert (response.status_code, response.json()["error"]["code"]) == (400, code), response.text


@pytest.mark.parametrize("voice", ["af_heart:0.7,af_bella:0.3", "af_heart:.5,af_bella:1.", "af_bella(2)+af_sky(1)"])
def test_ascii_decimal_weights_still_blend(server: RunningServer, voice: str) -> None:
    response = httpx.post(f"{server.base_url}/invocations", json={"text": "hi", "voice": voice}, timeout=60)
    assert response.status_code == 200, response.text
