"""The ``words`` frame and the config's ``word_timestamps`` flag: encoded and parsed back as typed values."""

from __future__ import annotations

import json

import pytest
from kokoro_client.errors import ErrorCode, TTSError
from kokoro_client.protocol import Config, Words, WordTiming, encode, is_set, parse_client_message, parse_server_frame


def test_words_frame_round_trips() -> None:
    frame = Words("u1", (WordTiming("$1.2M", 375.0, 1825.0, 4, 9), WordTiming("café", 1900.0, 2300.5, 10, 14)))
    text = encode(frame)
    assert json.loads(text) == {
        "type": "words",
        "id": "u1",
        "words": [
            {"word": "$1.2M", "start_ms": 375.0, "end_ms": 1825.0, "char_start": 4, "char_end": 9},
            {"word": "café", "start_ms": 1900.0, "end_ms": 2300.5, "char_start": 10, "char_end": 14},
        ],
    }
    assert parse_server_frame(text) == frame


@pytest.mark.parametrize(
    "raw",
    [
        '{"type":"words","id":"u1"}',
        '{"type":"words","id":"u1","words":[{"word":"a"}]}',
        '{"type":"words","id":"u1","words":[7]}',
        '{"type":"words","id":"u1","words":7}',
    ],
)
def test_malformed_words_frames_are_invalid_messages(raw: str) -> None:
    with pytest.raises(TTSError) as caught:
        parse_server_frame(raw)
    assert caught.value.code == ErrorCode.INVALID_MESSAGE


def test_config_carries_word_timestamps_only_when_given() -> None:
    on = parse_client_message('{"type":"config","word_timestamps":true}', 1000)
    assert isinstance(on, Config) and on.word_timestamps is True
    plain = parse_client_message('{"type":"config","voice":"af_bella"}', 1000)
    assert isinstance(plain, Config) and not is_set(plain.word_timestamps)
