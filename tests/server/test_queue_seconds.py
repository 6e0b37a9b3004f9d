"""A session's queue is bounded in seconds of audio (estimated from the text), not only in utterances: 32 long
utterances would reserve hours of a stream slot. Past the bound each utterance is refused with queue_full and its
id (bidi) or a Warning (Deepgram), and the session goes on."""

from __future__ import annotations

import asyncio
import json

from kokoro_client.deepgram import SPEAK_PATH
from support.inproc_server import RunningServer
from websockets.asyncio.client import connect

LONG = ("Sentence after sentence of a long reading that goes on and on. " * 76)[:4900]


async def test_long_utterances_past_the_queued_seconds_are_refused_with_their_ids(server: RunningServer) -> None:
    limit_s = server.engine.settings.max_queued_audio_s
    assert limit_s < 4 * len(LONG) / 15  # four of these are past it at any speaking rate the estimate uses
    async with connect(server.ws_url) as ws:
        for n in range(6):
            await ws.send(json.dumps({"text": LONG, "id": f"long{n}"}))
        await ws.send(json.dumps({"type": "cancel"}))
        refused, ended = set(), set()
        async with asyncio.timeout(120):
            while len(refused | ended) < 6:
                message = await ws.recv()
                if isinstance(message, bytes):
                    continue
                frame = json.loads(message)
                if frame["type"] == "error":
                    assert frame["code"] == "queue_full", frame
                    refused.add(frame["id"])
                elif frame["type"] == "cancelled":
                    ended.add(frame["id"])
    assert refused and "long0" not in refused, refused  # an empty queue takes any one


async def test_deepgram_sentences_past_the_queued_seconds_get_a_warning(server: RunningServer) -> None:
    async with connect(f"ws://127.0.0.1:{server.port}{SPEAK_PATH}") as ws:
        json.loads(await ws.recv())  # Metadata
        for _ in range(6):
            await ws.send(json.dumps({"type": "Speak", "text": LONG}))
            await ws.send(json.dumps({"type": "Flush"}))
        warnings = []
        async with asyncio.timeout(60):
            while not warnings:
                message = await ws.recv()
                if isinstance(message, str) and json.loads(message)["type"] == "Warning":
                    warnings.append(json.loads(message))
        await ws.send(json.dumps({"type": "Clear"}))
    assert warnings[0]["code"] == "queue_full", warnings
