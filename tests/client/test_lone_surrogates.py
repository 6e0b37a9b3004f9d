"""A lone surrogate in text: JSON can escape one ("\\ud800") and Python reads it back into a str, but UTF-8 cannot
carry it, so a WebSocket text frame holding it cannot be sent. Every vocabulary's encoder, client and server side,
writes it as a JSON escape again, and its parser reads back the same text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kokoro_client import cartesia, deepgram, elevenlabs, protocol

TEXT = "Hel\ud800lo there."
MAX_BYTES = 65_536

ROUND_TRIPS: dict[str, tuple[Any, Callable[[Any], str], Callable[[str], object]]] = {
    "bidi client": (
        protocol.Synthesize(TEXT, id="a"),
        protocol.encode,
        lambda raw: protocol.parse_client_message(raw, MAX_BYTES),
    ),
    "bidi server": (
        protocol.Words("a", (protocol.WordTiming(TEXT, 0, 120, 0, len(TEXT)),)),
        protocol.encode,
        protocol.parse_server_frame,
    ),
    "deepgram client": (
        deepgram.Speak(TEXT),
        deepgram.encode,
        lambda raw: deepgram.parse_command(raw, MAX_BYTES),
    ),
    "elevenlabs client": (
        elevenlabs.SendText(TEXT, "a"),
        elevenlabs.encode_client,
        lambda raw: elevenlabs.parse_client_message(raw, MAX_BYTES),
    ),
    "elevenlabs server": (
        elevenlabs.AudioOutput(b"\x01", "a", elevenlabs.Alignment(tuple(TEXT[:4]), (0, 1, 2, 3), (1, 1, 1, 1))),
        elevenlabs.encode,
        elevenlabs.parse_server_message,
    ),
    "cartesia client": (
        cartesia.Generate(TEXT, "a", False, "af_heart", "pcm", 24_000, False, None),
        cartesia.encode_client,
        lambda raw: cartesia.parse_client_message(raw, MAX_BYTES),
    ),
    "cartesia server": (
        cartesia.Timestamps("a", (TEXT,), (0.0,), (0.1,)),
        cartesia.encode,
        cartesia.parse_server_message,
    ),
}


@pytest.mark.parametrize("name", list(ROUND_TRIPS))
def test_a_lone_surrogate_travels_escaped_and_reads_back(name: str) -> None:
    message, encode, parse = ROUND_TRIPS[name]
    raw = encode(message)
    raw.encode("utf-8")  # what a WebSocket text frame needs: raised UnicodeEncodeError before
    assert "\\ud800" in raw
    assert parse(raw) == message


def test_other_text_keeps_its_characters() -> None:
    assert (
        protocol.encode(protocol.Synthesize("Héllo 😀", id="a"))
        == '{"type": "synthesize", "text": "Héllo 😀", "id": "a"}'
    )
