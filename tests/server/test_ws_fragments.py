"""An utterance sent as it is written (``append`` ... ``flush``) on the bidirectional session, against the real
server and model: token streams shaped like an LLM's (sub-word pieces, spaces and punctuation as tokens of their own,
a price across five tokens), at a bursty cadence; the server cuts the pieces and speaks the first one before the
reply is complete; one utterance on the wire whose words index the concatenated text."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors
from support.ws_client import Transcript, completes, receive_until
from websockets.asyncio.client import ClientConnection, connect

# An LLM's tokens: words split into sub-word pieces, the leading space with the word or alone, punctuation alone,
# and "$42.50" as "$", "4", "2", ".", "50".
FIRST = ["Your", " order", " total", " is", " $", "4", "2", ".", "50", ",", " including", " tax", "."]
SECOND = [" It", " ship", "s", " tom", "orrow", " morning", " at", " 9", ":", "30", "."]
THIRD = [" Thank", " you", " for", " wait", "ing", "!"]
TEXT = "".join(FIRST + SECOND + THIRD)


async def _append(ws: ClientConnection, tokens: list[str], **first: Any) -> None:
    for i, token in enumerate(tokens):
        await ws.send(json.dumps({"type": "append", "text": token, **(first if i == 0 else {})}))
        if i % 4 == 3:  # bursts of four tokens, then a pause, as a streaming API delivers them
            await asyncio.sleep(0.02)


async def test_tokens_appended_are_one_utterance_spoken_before_the_reply_ends(server: RunningServer) -> None:
    transcript = Transcript()
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "config", "word_timestamps": True}))
        await _append(ws, FIRST, id="r1")
        await _append(ws, SECOND[:1])  # " It": what decides that the first sentence has ended
        # The first sentence is spoken while the reply is still being written: no flush yet.
        await receive_until(ws, transcript, lambda frame: frame["type"] == "synthesis_start", limit_s=60)
        await _append(ws, SECOND[1:] + THIRD)
        await ws.send(json.dumps({"type": "flush", "id": "r1"}))
        await receive_until(ws, transcript, completes(1))
    control = [f["type"] for f in transcript.json_frames() if f["type"] != "words"]
    assert control == ["synthesis_start", "synthesis_complete"]
    utterance = transcript.utterances()["r1"]
    assert utterance.complete is not None and utterance.complete["bytes"] == len(utterance.audio)
    # Words point into everything the client appended, joined, and run forward in time across the pieces.
    words = [w for frame in transcript.json_frames("words") for w in frame["words"]]
    assert [TEXT[w["char_start"] : w["char_end"]] for w in words] == [w["word"] for w in words]
    said = [w["word"] for w in words]
    assert said[0] == "Your" and said[-1] == "waiting" and "$42.50" in said and "tomorrow" in said
    starts = [w["start_ms"] for w in words]
    assert starts == sorted(starts) and starts[-1] < utterance.complete["audio_ms"]
    heard = WhisperListener.shared().transcribe(utterance.pcm())
    errors, count = word_errors(TEXT, heard)  # words only: Whisper writes the price and the time in digits
    assert errors <= 1 and "42" in heard, f"{errors} of {count} words wrong: {heard!r}"


async def test_the_same_text_whole_or_appended_says_the_same(server: RunningServer) -> None:
    transcript = Transcript()
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "synthesize", "id": "whole", "text": TEXT}))
        for char in TEXT:  # the hardest cut: one character at a time
            await ws.send(json.dumps({"type": "append", "id": "cut", "text": char}))
        await ws.send(json.dumps({"type": "flush"}))
        await receive_until(ws, transcript, completes(2))
    utterances = transcript.utterances()
    whole, cut = len(utterances["whole"].audio), len(utterances["cut"].audio)
    assert abs(whole - cut) <= 0.05 * whole, f"{whole} bytes whole, {cut} appended"


async def test_misuse_gets_stable_codes_and_the_session_goes_on(server: RunningServer) -> None:
    transcript = Transcript()
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "flush"}))  # nothing open
        await ws.send(json.dumps({"type": "append", "id": "a", "text": "Hello"}))
        await ws.send(json.dumps({"type": "append", "id": "b", "text": "other"}))  # a is open
        await ws.send(json.dumps({"type": "append", "text": " there", "voice": "am_adam"}))  # voice is set at open
        await ws.send(json.dumps({"type": "append", "text": 5}))
        await ws.send(json.dumps({"type": "append", "id": "a"}))
        await ws.send(json.dumps({"type": "append", "text": " friend. " + "x " * 2600}))  # over 5,000 unspoken
        await ws.send(json.dumps({"type": "flush", "id": "b"}))  # not the open one
        await ws.send(json.dumps({"type": "flush", "id": "a"}))
        await receive_until(ws, transcript, lambda frame: frame["type"] == "synthesis_complete")
    errors = [(f["code"], f.get("id")) for f in transcript.json_frames("error")]
    assert errors == [
        ("invalid_message", None),
        ("invalid_message", None),
        ("invalid_message", None),
        ("invalid_text", None),
        ("missing_text", None),
        ("text_too_long", "a"),
        ("invalid_message", None),
    ]
    assert [f["id"] for f in transcript.json_frames("synthesis_complete")] == ["a"]
    heard = WhisperListener.shared().transcribe(transcript.utterances()["a"].pcm())
    assert word_errors("Hello", heard)[0] == 0


async def test_cancel_and_close_end_an_open_utterance(server: RunningServer) -> None:
    transcript = Transcript()
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "append", "id": "a", "text": "This reply is cancelled before it ends"}))
        await ws.send(json.dumps({"type": "cancel", "id": "a"}))
        await receive_until(ws, transcript, completes(1))
        # A cancelled utterance is no longer open: the next append opens another; an emoji-only piece says nothing.
        await ws.send(json.dumps({"type": "append", "id": "b", "text": "🙂\nSee you soon"}))
        await ws.send(json.dumps({"type": "close"}))  # ends b, speaks it, then closes with 1000
        await receive_until(ws, transcript, completes(1))
        await ws.wait_closed()
    assert ws.close_code == 1000
    assert transcript.json_frames("cancelled") == [{"type": "cancelled", "id": "a"}]
    assert not transcript.json_frames("error")
    heard = WhisperListener.shared().transcribe(transcript.utterances()["b"].pcm())
    assert word_errors("See you soon", heard)[0] == 0
