"""The agent measures a batch reply's audio from its bytes: every format the server's own
encoders write, cut anywhere by the transport, counts to the audio's length (compressed formats within a frame or
two of encoder padding)."""

from __future__ import annotations

import numpy as np
import pytest
from kokoro_tts.audio.encoding import FORMATS, make_encoder
from voice_agent.audio_length import AudioLength, default_rate

SECONDS = 2.0
PADDING_MS = {"mp3": 100.0, "aac": 100.0}  # the encoders' priming and last partial frame


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("cut", [1, 777, 1 << 20])
def test_every_format_counts_to_its_length_however_the_bytes_are_cut(fmt: str, cut: int) -> None:
    rate = default_rate(fmt)
    pcm = (np.sin(np.arange(int(24_000 * SECONDS)) / 24_000 * 2 * np.pi * 440) * 8000).astype(np.int16)
    encoder = make_encoder(FORMATS[fmt], rate)
    data = b"".join(encoder.encode(pcm[i : i + 3000]) for i in range(0, pcm.size, 3000)) + encoder.finish()
    length = AudioLength(fmt, rate)
    for at in range(0, len(data), cut):
        length.feed(data[at : at + cut])
    assert 0 <= length.ms() - SECONDS * 1000 <= PADDING_MS.get(fmt, 0.5), length.ms()


def test_g711_defaults_to_8_khz_and_everything_else_to_24() -> None:
    assert {fmt: default_rate(fmt) for fmt in ("mulaw", "wav_alaw", "pcm", "mp3")} == {
        "mulaw": 8000,
        "wav_alaw": 8000,
        "pcm": 24_000,
        "mp3": 24_000,
    }
