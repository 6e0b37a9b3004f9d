"""Whatever a client sends after its session has closed (Deepgram ``Close`` then more, the bidi ``close`` then more)
writes no ERROR line and no traceback into the server's log: the server has nobody left to answer and drops it.
And on the Deepgram socket, a ``Clear`` after ``Close`` drops nothing already accepted: the close was a promise to
speak it all (docs/protocol.md)."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging

import pytest
from kokoro_client.deepgram import SPEAK_PATH
from support.inproc_server import RunningServer
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

SENTENCE = "The order shipped this morning."


def faults(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def keep_sending(ws: ClientConnection, messages: list[str]) -> None:
    """Sends ``messages`` in turn until the server's close reaches this client (then nothing more can be sent)."""
    async with asyncio.timeout(120):
        for n in itertools.count():
            try:
                await ws.send(messages[n % len(messages)])
            except ConnectionClosed:
                return
            await asyncio.sleep(0.002)


async def drain(ws: ClientConnection) -> tuple[int, list[dict[str, object]]]:
    """Reads to the close: the audio bytes and the JSON messages."""
    audio, frames = 0, []
    try:
        async with asyncio.timeout(120):
            async for message in ws:
                if isinstance(message, bytes):
                    audio += len(message)
                else:
                    frames.append(json.loads(message))
    except ConnectionClosed:
        pass
    return audio, frames


@pytest.mark.parametrize("kind", ["deepgram", "bidi"])
async def test_messages_after_the_close_log_no_error(
    server: RunningServer, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    caplog.set_level(logging.INFO)
    if kind == "deepgram":
        url, speak = f"ws://127.0.0.1:{server.port}{SPEAK_PATH}", {"type": "Speak", "text": SENTENCE}
        close, more = {"type": "Close"}, [{"type": "Speak", "text": "More."}, {"type": "Flush"}, {"oops": 1}]
    else:
        url, speak = server.ws_url, {"type": "synthesize", "text": SENTENCE}
        close, more = {"type": "close"}, [{"type": "synthesize", "text": "More."}, {"type": "config"}, {"oops": 1}]
    for _ in range(3):  # the close races the messages after it differently each time
        async with connect(url) as ws:
            await ws.send(json.dumps(speak))
            await ws.send(json.dumps(close))
            reading = asyncio.create_task(drain(ws))
            await keep_sending(ws, [json.dumps(message) for message in more])
            audio, _ = await reading
            assert audio > 0  # what was accepted before the close is spoken
    await asyncio.sleep(0.5)  # the server's side of the last session has ended
    assert not faults(caplog), faults(caplog)


async def test_deepgram_clear_after_close_drops_the_rest_answers_cleared_and_closes(server: RunningServer) -> None:
    text = " ".join(f"This is sentence number {n} of a long answer." for n in range(1, 9))
    async with connect(f"ws://127.0.0.1:{server.port}{SPEAK_PATH}?encoding=linear16&sample_rate=24000") as ws:
        json.loads(await ws.recv())  # Metadata
        await ws.send(json.dumps({"type": "Speak", "text": text}))
        await ws.send(json.dumps({"type": "Close"}))
        first = await asyncio.wait_for(ws.recv(), 120)
        assert isinstance(first, bytes)  # speaking
        await ws.send(json.dumps({"type": "Clear"}))
        audio, frames = await drain(ws)
        assert ws.close_code == 1000
    # Eight sentences are about 20 s of audio (960 KB): the Clear dropped most of it, and said so.
    assert audio < 480_000, audio
    assert [f["type"] for f in frames] == ["Cleared"], frames
