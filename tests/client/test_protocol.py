"""kokoro_client.protocol both ways: what the server encodes a client parses back, and the reading rule."""

from __future__ import annotations

import json

import pytest
from kokoro_client.errors import ErrorCode, TTSError
from kokoro_client.protocol import (
    Append,
    Cancel,
    Cancelled,
    Close,
    Config,
    Error,
    Flush,
    SynthesisComplete,
    SynthesisStart,
    Synthesize,
    encode,
    parse_client_message,
    parse_server_frame,
)
from kokoro_client.utterances import UtteranceReader


@pytest.mark.parametrize(
    "frame",
    [
        SynthesisStart("u1", "pcm", 24000),
        SynthesisComplete("u1", 1200.5, 80.0, 57600),
        Cancelled("7"),
        Error("queue_full", "too many", "u3"),
        Error("invalid_json", "bad"),
    ],
)
def test_server_frames_round_trip(frame: object) -> None:
    assert parse_server_frame(encode(frame)) == frame  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "message",
    [
        Synthesize("Hello.", "1", "af_heart", 1.2),
        Synthesize("Hi."),
        Append("Hel", "r1", "af_heart", 1.2, 16000),
        Append("**Hi**", "r2", literal=True),
        Append("lo"),
        Flush("r1"),
        Flush(),
        Config(format="wav"),
        Cancel("2"),
        Close(),
    ],
)
def test_client_messages_round_trip(message: object) -> None:
    assert parse_client_message(encode(message), 65536) == message  # type: ignore[arg-type]


def test_config_null_restores_the_default_and_unset_fields_stay_out() -> None:
    assert json.loads(encode(Config(voice=None))) == {"type": "config", "voice": None}


@pytest.mark.parametrize("raw", ["[]", "nope", '{"type":"synthesis_start"}', '{"type":"later_frame","id":"1"}'])
def test_bad_server_frames_raise_only_tts_error(raw: str) -> None:
    with pytest.raises(TTSError) as caught:
        parse_server_frame(raw)
    assert caught.value.code in (ErrorCode.INVALID_MESSAGE, ErrorCode.UNKNOWN_TYPE)


def test_audio_belongs_to_the_last_synthesis_start() -> None:
    reader = UtteranceReader()
    with pytest.raises(TTSError):
        reader.audio(b"\0\0")
    reader.frame(SynthesisStart("a", "pcm", 24000))
    assert reader.audio(b"\0\0").id == "a"
    reader.frame(Error("nothing_to_speak", "-", "other"))  # about another utterance: "a" stays in flight
    assert reader.audio(b"\0\0").id == "a"
    reader.frame(SynthesisComplete("a", 1.0, 1.0, 2))
    with pytest.raises(TTSError):
        reader.audio(b"\0\0")
    reader.frame(SynthesisStart("b", "wav", 24000))
    reader.frame(Cancelled("b"))
    assert reader.current is None
