"""Every malformed message gets an error frame with a stable code, and the session keeps working after it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from support.inproc_server import RunningServer
from support.ws_client import Transcript, receive_until
from websockets.asyncio.client import connect

BAD_MESSAGES: list[tuple[str, str | bytes, str]] = [
    ("binary not utf-8", b"\xff\xfe\x00hello", "invalid_utf8"),
    ("truncated json", '{"type": "synthesize", "text": "hi"', "invalid_json"),
    ("json trailing garbage", '{"text": "hi"} x', "invalid_json"),
    ("deeply nested json", '{"a":' * 100_000 + "1" + "}" * 100_000, "message_too_large"),
    ("nested json under the size limit", '{"a":' * 5000 + "1" + "}" * 5000, "invalid_json"),
    ("unknown type", '{"type": "sing", "text": "hi"}', "unknown_type"),
    ("type not a string", '{"type": 5}', "unknown_type"),
    ("no type and no text", '{"voice": "af_heart"}', "invalid_message"),
    ("missing text", '{"type": "synthesize"}', "missing_text"),
    ("empty text", '{"type": "synthesize", "text": ""}', "empty_text"),
    ("blank text", '{"text": "   \\n\\t "}', "empty_text"),
    ("blank plain message", "   ", "empty_text"),
    ("text not a string", '{"text": 42}', "invalid_text"),
    ("text is a list", '{"text": ["a", "b"]}', "invalid_text"),
    ("text null", '{"text": null}', "missing_text"),
    ("text over the limit", json.dumps({"text": "word " * 1001}), "text_too_long"),
    ("unknown voice", '{"text": "hi", "voice": "xx_nobody"}', "unknown_voice"),
    ("voice not a string", '{"text": "hi", "voice": 7}', "invalid_voice"),
    ("malformed blend", '{"text": "hi", "voice": "af_heart:abc,af_bella"}', "invalid_voice"),
    ("negative blend weight", '{"text": "hi", "voice": "af_heart:-1,af_bella:2"}', "invalid_voice"),
    ("unsupported language", '{"text": "hi", "voice": "jf_alpha"}', "unsupported_language"),
    ("speed too high", '{"text": "hi", "speed": 9}', "invalid_speed"),
    ("speed too low", '{"text": "hi", "speed": 0.1}', "invalid_speed"),
    ("speed not a number", '{"text": "hi", "speed": "fast"}', "invalid_speed"),
    ("speed boolean", '{"text": "hi", "speed": true}', "invalid_speed"),
    ("speed NaN", '{"text": "hi", "speed": NaN}', "invalid_speed"),
    ("config bad format", '{"type": "config", "format": "aiff"}', "unsupported_format"),
    ("config bad voice", '{"type": "config", "voice": "zz_top"}', "unknown_voice"),
    ("config bad speed", '{"type": "config", "speed": -1}', "invalid_speed"),
    ("id of the wrong type", '{"text": "hi", "id": {"a": 1}}', "invalid_id"),
    ("emoji only", '{"text": "😀🎉👍"}', "nothing_to_speak"),
    ("control characters only", '{"text": "\\u0001\\u0002"}', "nothing_to_speak"),
    ("punctuation only", '{"text": "?! ... --"}', "nothing_to_speak"),
    ("message over 64 KiB", "x" * 70_000, "message_too_large"),
    ("message over 4 MiB", "x" * (5 * 1024 * 1024), "message_too_large"),  # past Hypercorn's own limit
    ("speed of 400 digits", '{"text": "hi", "speed": ' + "9" * 400 + "}", "invalid_speed"),
    ("a 4,301-digit number", json.dumps({"text": "1" * 4301}), "number_too_long"),
    ("a 101-digit number", json.dumps({"text": f"Call {'7' * 101} now."}), "number_too_long"),
    ("id with a lone surrogate", '{"text": "hi", "id": "\\ud800"}', "invalid_id"),
    ("integer id of 4,000 digits", '{"text": "hi", "id": ' + "9" * 4000 + "}", "invalid_id"),
    ("string id of 129 characters", json.dumps({"text": "hi", "id": "x" * 129}), "invalid_id"),
    ("blend weights that overflow", '{"text": "hi", "voice": "af_heart:1e308,af_bella:1e308"}', "invalid_voice"),
    ("voice with a lone surrogate", '{"text": "hi", "voice": "\\ud800"}', "invalid_voice"),
]


@pytest.mark.parametrize(("message", "code"), [(m, c) for _, m, c in BAD_MESSAGES], ids=[n for n, _, _ in BAD_MESSAGES])
async def test_bad_message_gets_an_error_frame_and_the_session_goes_on(
    server: RunningServer, message: str | bytes, code: str
) -> None:
    async with connect(server.ws_url, max_size=None) as ws:
        await ws.send(message)
        error = json.loads(await asyncio.wait_for(ws.recv(), 30))  # a message taken as valid gets no reply
        assert error["type"] == "error"
        assert error["code"] == code
        _assert_readable(error["message"])
        await _assert_still_speaks(ws)


async def test_bad_config_changes_nothing(server: RunningServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "config", "format": "wav", "speed": 99}))
        assert json.loads(await ws.recv())["code"] == "invalid_speed"
        await ws.send(json.dumps({"text": "Fine.", "id": "x"}))
        start = json.loads(await ws.recv())
        assert start["type"] == "synthesis_start" and start["format"] == "pcm"


async def test_config_format_null_restores_the_default(server: RunningServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "config", "format": "wav"}))
        await ws.send(json.dumps({"type": "config", "format": None}))
        await ws.send(json.dumps({"text": "Fine.", "id": "x"}))
        start = json.loads(await ws.recv())
        assert start["type"] == "synthesis_start" and start["format"] == "pcm"


async def test_queue_full_is_an_error_for_that_utterance_only(server: RunningServer) -> None:
    limit = server.engine.settings.max_queued_utterances
    async with connect(server.ws_url) as ws:
        for i in range(limit + 3):
            await ws.send(json.dumps({"text": "Hi.", "id": f"q{i}"}))
        await ws.send(json.dumps({"type": "cancel"}))
        transcript = Transcript()
        await receive_until(ws, transcript, lambda f: f["type"] == "cancelled" and f["id"] == f"q{limit}")
        errors = transcript.json_frames("error")
        assert errors and all(e["code"] == "queue_full" for e in errors)
        assert {e["id"] for e in errors} <= {f"q{i}" for i in range(limit, limit + 3)}
        await _assert_still_speaks(ws, drain=True)


@pytest.mark.parametrize(
    "text",
    ["Hello\u0000 there\u0007, friend.", "Tab\tand\r\nnewlines.", "Lone \ud800 surrogate here.", "Hi 😀 there."],
    ids=["control characters", "whitespace controls", "lone surrogate", "emoji in words"],
)
async def test_odd_characters_speak_what_can_be_spoken(server: RunningServer, text: str) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"text": text, "id": "odd"}))  # json.dumps escapes the surrogate as \ud800
        transcript = Transcript()
        await receive_until(ws, transcript, lambda f: f.get("id") == "odd" and f["type"] != "synthesis_start")
        (end,) = [f for f in transcript.json_frames() if f["type"] != "synthesis_start"]
        assert end["type"] == "synthesis_complete" and end["bytes"] > 0
        await _assert_still_speaks(ws)


def _assert_readable(message: str) -> None:
    # A sentence for a person, never an exception's repr (the seed sent KeyError('text') as "'text'").
    assert len(message) > 20 and " " in message
    assert "Error(" not in message and "Traceback" not in message


async def _assert_still_speaks(ws: Any, drain: bool = False) -> None:
    await ws.send(json.dumps({"text": "OK.", "id": "check"}))
    transcript = Transcript()
    await receive_until(ws, transcript, lambda f: f.get("id") == "check" and f["type"] == "synthesis_complete")
    if not drain:
        assert [f["type"] for f in transcript.json_frames()] == ["synthesis_start", "synthesis_complete"]
    assert len(transcript.utterances()["check"].audio) > 0


async def test_an_error_quotes_a_long_type_cut_short(server: RunningServer) -> None:
    async with connect(server.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "s" * 60_000}))
        error = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert error["type"] == "error" and error["code"] == "unknown_type" and "'ssssssssss" in error["message"]
        assert len(json.dumps(error)) < 600, error
