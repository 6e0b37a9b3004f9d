"""kokoro_client.cartesia: Cartesia's messages both ways, as its clients send and read them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kokoro_client.cartesia import (
    BytesRequest,
    Cancel,
    Chunk,
    Done,
    ErrorMessage,
    Generate,
    Timestamps,
    encode,
    encode_client,
    parse_bytes_request,
    parse_client_message,
    parse_server_message,
)
from kokoro_client.errors import TTSError

RAW = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}


def parse(value: Any) -> object:
    return parse_client_message(json.dumps(value), 65_536)


def test_a_request_as_pipecat_sends_it() -> None:
    request = {
        "transcript": "Hello ",
        "continue": True,
        "context_id": "c1",
        "model_id": "sonic-3",
        "voice": {"mode": "id", "id": "af_heart"},
        "output_format": RAW,
        "add_timestamps": True,
        "use_normalized_timestamps": False,
        "language": "en",
        "generation_config": {"speed": 1.1, "volume": 1.0},
    }
    assert parse(request) == Generate("Hello ", "c1", True, "af_heart", "pcm", 16000, True, 1.1)
    legacy = {**request, "generation_config": None, "speed": "fast", "continue": False}
    assert parse(legacy) == Generate("Hello ", "c1", False, "af_heart", "pcm", 16000, True, None)
    assert parse({"context_id": "c1", "cancel": True}) == Cancel("c1")


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"transcript": None}, "invalid_text"),
        ({"voice": {"mode": "embedding", "embedding": [0.0]}}, "invalid_voice"),
        ({"output_format": {"container": "wav", "encoding": "pcm_s16le", "sample_rate": 16000}}, "unsupported_format"),
        ({"output_format": {**RAW, "encoding": "pcm_f32le"}}, "unsupported_format"),
        ({"output_format": {**RAW, "sample_rate": "16000"}}, "unsupported_sample_rate"),
        ({"continue": "yes"}, "invalid_message"),
        ({"context_id": ""}, "invalid_id"),
        ({"generation_config": {"speed": "fast"}}, "invalid_speed"),
    ],
)
def test_a_bad_request_is_refused_with_its_code(change: dict[str, Any], code: str) -> None:
    request = {"transcript": "Hi.", "voice": {"mode": "id", "id": "af_heart"}, "output_format": RAW, **change}
    with pytest.raises(TTSError) as refused:
        parse(request)
    assert refused.value.code == code


def test_the_server_messages_read_as_clients_read_them() -> None:
    chunk = json.loads(encode(Chunk("c1", b"\x01\x02")))
    # Pipecat reads type, context_id, data (base64) and word_timestamps' words and start.
    assert chunk == {"type": "chunk", "data": "AQI=", "done": False, "status_code": 206, "context_id": "c1"}
    stamps = json.loads(encode(Timestamps("c1", ("Hi,", "there."), (0.1, 0.4), (0.35, 0.8))))
    assert stamps["word_timestamps"] == {"words": ["Hi,", "there."], "start": [0.1, 0.4], "end": [0.35, 0.8]}
    for message in (
        Chunk("c1", b"\x00"),
        Timestamps("c1", ("a",), (0.0,), (0.1,)),
        Done("c1"),
        ErrorMessage(None, "invalid_json", "no"),
    ):
        assert parse_server_message(encode(message)) == message


def test_a_bytes_request_takes_a_container_and_the_voice_id_alone() -> None:
    body = {"transcript": "Hi.", "voice": "af_heart", "model_id": "sonic-3"}
    wav = {"container": "wav", "encoding": "pcm_mulaw", "sample_rate": 8000}
    expected = BytesRequest("Hi.", "af_heart", "wav_mulaw", 8000, None)
    assert parse_bytes_request({**body, "output_format": wav}) == expected
    mp3 = {"container": "mp3", "sample_rate": 44100, "bit_rate": 128000}
    assert parse_bytes_request({**body, "output_format": mp3}).format == "mp3"
    with pytest.raises(TTSError) as refused:
        parse({**body, "output_format": wav, "context_id": "c"})  # a socket sends raw samples only
    assert refused.value.code == "unsupported_format"


def test_what_a_client_sends_is_what_the_server_reads() -> None:
    for message in (
        Generate("Hello ", "c1", True, "af_heart", "mulaw", 8000, True, 1.2),
        Generate("", None, False, "af_heart", "pcm", 24000, False, None),
        Cancel("c1"),
    ):
        assert parse_client_message(encode_client(message), 65_536) == message
