"""POST /dev/captioned_speech reads the /v1/audio/speech body with the same parser: the same
models, speeds (0.25–4.0), formats and sample rates, and its pieces name the media type at the rate they are sent.
Real Hypercorn and model, loopback."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import av
import httpx
import pytest
from support.inproc_server import RunningServer

PATH = "/dev/captioned_speech"
TEXT = "Hello there, friend."


def post(server: RunningServer, **fields: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}{PATH}", json={"input": TEXT, "stream": False, **fields}, timeout=120)


@pytest.mark.parametrize(
    ("fmt", "rate", "media_type", "bytes_per_sample"),
    [
        ("mulaw", None, "audio/PCMU;rate=8000", 1),
        ("alaw", 16_000, "audio/PCMA;rate=16000", 1),
        ("pcm", 16_000, "audio/pcm;rate=16000;encoding=signed-int;bits=16;channels=1", 2),
    ],
)
def test_raw_formats_come_at_their_rate_and_say_it(
    server: RunningServer, fmt: str, rate: int | None, media_type: str, bytes_per_sample: int
) -> None:
    response = post(server, response_format=fmt, sample_rate=rate)
    assert response.status_code == 200, response.text
    piece = response.json()
    assert piece["audio_format"] == media_type
    seconds = len(base64.b64decode(piece["audio"])) / bytes_per_sample / (rate or 8000)
    last_word_end = piece["timestamps"][-1]["end_time"]
    assert last_word_end < seconds < last_word_end + 2.0, (seconds, last_word_end)


@pytest.mark.parametrize(("fmt", "rate"), [("wav_mulaw", None), ("wav_alaw", 16_000)])
def test_g711_wavs_are_8_or_16_khz_in_their_header(server: RunningServer, fmt: str, rate: int | None) -> None:
    response = post(server, response_format=fmt, sample_rate=rate)
    assert response.status_code == 200, response.text
    with av.open(io.BytesIO(base64.b64decode(response.json()["audio"]))) as container:
        assert container.streams.audio[0].rate == (rate or 8000)


@pytest.mark.parametrize("speed", [0.25, 4.0])
def test_the_speech_route_s_speeds_are_taken_and_timestamps_follow_the_stretch(
    server: RunningServer, speed: float
) -> None:
    response = post(server, response_format="pcm", speed=speed)
    assert response.status_code == 200, response.text
    piece = response.json()
    seconds = len(base64.b64decode(piece["audio"])) / 2 / 24_000
    assert piece["timestamps"][-1]["end_time"] < seconds < piece["timestamps"][-1]["end_time"] + 2.0 / speed


@pytest.mark.parametrize(
    ("fields", "status", "code"),
    [
        ({"model": "nope"}, 404, "unknown_model"),
        ({"response_format": "mulaw", "sample_rate": 24_000}, 400, "unsupported_sample_rate"),
        ({"sample_rate": 11_025, "response_format": "opus"}, 400, "unsupported_sample_rate"),
        ({"speed": 4.5}, 400, "invalid_speed"),
        ({"stream": "yes"}, 400, "invalid_message"),
    ],
)
def test_bad_fields_get_the_speech_route_s_errors(
    server: RunningServer, fields: dict[str, Any], status: int, code: str
) -> None:
    response = post(server, **fields)
    assert response.status_code == status, response.text
    assert json.loads(response.content)["error"]["code"] == code
