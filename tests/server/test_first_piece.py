"""Speech before the sentence ends (text/fragments.py's EarlyCut, KOKORO_FIRST_PIECE_MS) over the bidirectional
session, against the real server and model: a slow LLM's 35-token first sentence is heard within 1.5 s of its first
token instead of after the sentence (5.8 s at 6 tokens/s), with all its words; a stream that stalls mid-sentence
is spoken at the deadline, before any flush."""

from __future__ import annotations

import asyncio
import json
import time

from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors
from support.ws_client import Transcript, completes, first_audio, receive_until
from voice_agent.scripted_model import tokenize
from websockets.asyncio.client import connect

from scripts.bench.texts import FIRST_PIECE_REPLY


async def test_a_slow_first_sentence_is_heard_within_a_second_and_a_half(server: RunningServer) -> None:
    tokens = tokenize(FIRST_PIECE_REPLY)
    transcript = Transcript()
    async with connect(server.ws_url) as ws:
        started = time.monotonic()
        heard = asyncio.create_task(first_audio(ws, transcript))
        for i, token in enumerate(tokens):  # 6 tokens/s to absolute deadlines, as the scripted model sends them
            await asyncio.sleep(max(0.0, started + i / 6.0 - time.monotonic()))
            await ws.send(json.dumps({"type": "append", "id": "slow", "text": token}))
        await ws.send(json.dumps({"type": "flush"}))
        first_audio_s = await heard - started
        await receive_until(ws, transcript, completes(1))
    assert first_audio_s <= 1.5, f"first audio {first_audio_s:.2f} s after the first token"
    text = WhisperListener.shared().transcribe(transcript.utterances()["slow"].pcm())
    errors, count = word_errors(FIRST_PIECE_REPLY, text)
    assert errors <= 1, f"{errors} of {count} words wrong: {text!r}"


async def test_a_stalled_stream_is_spoken_at_the_deadline(server: RunningServer) -> None:
    transcript = Transcript()
    async with connect(server.ws_url) as ws:
        started = time.monotonic()
        await ws.send(json.dumps({"type": "append", "id": "stalled", "text": "Let me check that order for you"}))
        # No more text, no flush: the server speaks what it has once the first sentence end is overdue.
        first_audio_s = await first_audio(ws, transcript, limit_s=10.0) - started
        await ws.send(json.dumps({"type": "flush"}))
        await receive_until(ws, transcript, completes(1))
    wait_s = server.engine.settings.first_piece_ms / 1000
    assert wait_s <= first_audio_s <= wait_s + 5.0, f"first audio {first_audio_s:.2f} s after the text"
    text = WhisperListener.shared().transcribe(transcript.utterances()["stalled"].pcm())
    assert word_errors("Let me check that order for you", text)[0] == 0, text
