"""kokoro_client.elevenlabs: ElevenLabs' messages both ways, as its clients send and read them."""

from __future__ import annotations

import json

import pytest
from kokoro_client.elevenlabs import (
    Alignment,
    AudioOutput,
    CloseContext,
    CloseSocket,
    ErrorOutput,
    FinalOutput,
    SendText,
    encode,
    encode_client,
    output_format,
    parse_client_message,
    parse_server_message,
)
from kokoro_client.errors import TTSError


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pcm_16000", ("pcm", 16_000)),
        ("pcm_44100", ("pcm", 44_100)),
        ("ulaw_8000", ("mulaw", 8_000)),
        ("alaw_8000", ("alaw", 8_000)),
        ("mp3_44100_128", ("mp3", 44_100)),
        ("mp3_22050_32", ("mp3", 22_050)),
    ],
)
def test_output_formats_map_to_this_servers(name: str, expected: tuple[str, int]) -> None:
    assert output_format(name) == expected


@pytest.mark.parametrize("name", ["opus_48000_64", "wav", "pcm", "pcm_24000_x", ""])
def test_other_output_formats_are_refused(name: str) -> None:
    with pytest.raises(TTSError) as refused:
        output_format(name)
    assert refused.value.code == "unsupported_format"


def test_the_server_messages_read_as_clients_read_them() -> None:
    alignment = Alignment(("H", "i"), (0, 80), (80, 120))
    audio = json.loads(encode(AudioOutput(b"\x01\x02", "c1", alignment)))
    # Pipecat reads these keys: contextId, isFinal, audio (base64), alignment's chars/charStartTimesMs/...
    assert audio == {
        "audio": "AQI=",
        "isFinal": False,
        "alignment": {"chars": ["H", "i"], "charStartTimesMs": [0, 80], "charDurationsMs": [80, 120]},
        "normalizedAlignment": {"chars": ["H", "i"], "charStartTimesMs": [0, 80], "charDurationsMs": [80, 120]},
        "contextId": "c1",
    }
    assert json.loads(encode(FinalOutput(None))) == {"isFinal": True}  # stream-input: no contextId
    for message in (AudioOutput(b"\x01\x02", "c1", alignment), FinalOutput("c1"), ErrorOutput("no", "queue_full", "c")):
        assert parse_server_message(encode(message)) == message


def test_client_messages() -> None:
    def parse(value: object) -> object:
        return parse_client_message(json.dumps(value), 65_536)

    assert parse({"text": " ", "context_id": "a", "voice_settings": {"speed": 1.1}}) == SendText(
        " ", "a", False, {"speed": 1.1}
    )
    assert parse({"context_id": "a", "flush": True}) == SendText(None, "a", True)
    assert parse({"text": "", "xi_api_key": "k"}) == SendText("")
    assert parse({"context_id": "a", "close_context": True}) == CloseContext("a")
    assert parse({"close_socket": True}) == CloseSocket()
    for bad, code in (
        ({"text": 1}, "invalid_text"),
        ({"context_id": "a"}, "missing_text"),
        ({"close_context": True}, "invalid_message"),
        ({"text": "x", "context_id": ""}, "invalid_message"),
        ({"text": "x", "flush": "yes"}, "invalid_message"),
        ([], "invalid_message"),
    ):
        with pytest.raises(TTSError) as refused:
            parse(bad)
        assert refused.value.code == code, bad


def test_what_a_client_sends_is_what_the_server_reads() -> None:
    for message in (
        SendText(" ", "a", False, {"speed": 1.1}, {"chunk_length_schedule": [50]}),
        SendText("Hello ", "a", True),
        SendText(None, "a", True),
        SendText(""),
        CloseContext("a"),
        CloseSocket(),
    ):
        assert parse_client_message(encode_client(message), 65_536) == message
