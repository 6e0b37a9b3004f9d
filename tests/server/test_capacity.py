"""The server plays no more streams than its slots (engine/capacity.py) and never starts one it would starve: with
one slot, a newcomer's first audio waits until the playing session's audio has played out, and neither runs dry;
past the bounded wait the newcomer is told server_busy (WS error frame with its id and retry_after, the session
goes on; HTTP 503 with Retry-After). Real Hypercorn and model on loopback, the shared server given one slot."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
from kokoro_client.audio import BYTES_PER_SECOND
from kokoro_tts.engine.capacity import StreamSlots
from support.eventually import eventually
from support.inproc_server import RunningServer
from websockets.asyncio.client import ClientConnection, connect

from scripts.bench.client import ran_dry, underruns

REPLY = "Your order shipped this morning from Ohio. It should arrive by Thursday afternoon."


@dataclass
class Heard:
    """One utterance as a player hears it: when each audio frame arrived (s after the text left), and its ending."""

    sent: float
    arrivals: list[tuple[float, float]] = field(default_factory=list)  # (ms after sent, ms of audio)
    ended: dict[str, object] | None = None

    @property
    def completed(self) -> bool:
        return self.ended is not None and self.ended["type"] == "synthesis_complete"

    @property
    def first_audio_s(self) -> float:
        return self.arrivals[0][0] / 1000

    @property
    def played_out_s(self) -> float:
        """When a player starting at the first audio has played the last (s after the text left)."""
        played = 0.0
        for arrived, audio_ms in self.arrivals:
            played = max(played, arrived) + audio_ms
        return played / 1000

    @property
    def silence_ms(self) -> float:
        return underruns(self.arrivals)[1]


async def speak(ws: ClientConnection, utterance_id: str, text: str = REPLY) -> Heard:
    """Sends one utterance and hears it to its end (complete, or an error frame about it)."""
    heard = Heard(time.perf_counter())
    await ws.send(json.dumps({"type": "synthesize", "id": utterance_id, "text": text}))
    async with asyncio.timeout(120):
        while heard.ended is None:
            message = await ws.recv()
            if isinstance(message, bytes):
                arrived_ms = 1000 * (time.perf_counter() - heard.sent)
                heard.arrivals.append((arrived_ms, 1000 * len(message) / BYTES_PER_SECOND))
                continue
            frame = json.loads(message)
            if frame["type"] in ("synthesis_complete", "error") and frame.get("id") == utterance_id:
                heard.ended = frame
    return heard


@asynccontextmanager
async def holding_the_slot(server: RunningServer, slots: StreamSlots) -> AsyncIterator[asyncio.Task[Heard]]:
    """A session speaking the reply, once it holds the one slot (its first audio is on its way)."""
    async with connect(server.ws_url) as ws:
        playing = asyncio.create_task(speak(ws, "playing"))
        await eventually(lambda: slots.count, "the first session holds the slot", 60)
        yield playing
        await playing


async def all_given_back(slots: StreamSlots) -> None:
    """Returns once no stream holds a slot: a session keeps its slot until its audio has played out (the last frame
    arrives up to a few seconds earlier), or until it has closed."""
    await eventually(lambda: not slots.count, "every slot given back", 30)


async def test_a_newcomer_starts_when_the_playing_stream_has_played_out_and_neither_runs_dry(
    server: RunningServer, one_stream: StreamSlots, long_wait: None
) -> None:
    async with holding_the_slot(server, one_stream) as playing, connect(server.ws_url) as ws:
        newcomer = await speak(ws, "newcomer")
        first = await playing
    assert first.completed and newcomer.completed, (first.ended, newcomer.ended)
    # The newcomer's first audio came once the first session's audio had played out (both clocks are this
    # process's; the newcomer's text left a little after the first's).
    assert newcomer.sent + newcomer.first_audio_s >= first.sent + first.played_out_s - 0.05
    assert not ran_dry(first.silence_ms) and not ran_dry(newcomer.silence_ms), (first.silence_ms, newcomer.silence_ms)
    assert one_stream.refused == 0
    await all_given_back(one_stream)


async def test_past_the_bounded_wait_the_utterance_is_refused_and_the_session_goes_on(
    server: RunningServer, one_stream: StreamSlots, short_wait: None
) -> None:
    async with holding_the_slot(server, one_stream) as playing, connect(server.ws_url) as ws:
        refused = await speak(ws, "newcomer")
        assert refused.ended is not None and refused.ended["code"] == "server_busy", refused.ended
        assert isinstance(refused.ended["retry_after"], int) and refused.ended["retry_after"] >= 1
        assert not refused.arrivals
        first = await playing
        assert first.completed and not ran_dry(first.silence_ms), first
        await all_given_back(one_stream)
        again = await speak(ws, "again")  # the slot is free now: the same session is served
    assert again.completed, again.ended
    assert one_stream.refused == 1


async def test_http_past_the_bounded_wait_is_503_with_retry_after(
    server: RunningServer, one_stream: StreamSlots, short_wait: None
) -> None:
    async with holding_the_slot(server, one_stream), httpx.AsyncClient(timeout=60) as client:
        response = await client.post(f"{server.base_url}/invocations", json={"text": REPLY})
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "server_busy"
        assert int(response.headers["retry-after"]) >= 1
    await all_given_back(one_stream)
    async with httpx.AsyncClient(timeout=60) as client:  # the slot given back: served
        response = await client.post(f"{server.base_url}/invocations", json={"text": REPLY})
        assert response.status_code == 200 and len(response.content) > BYTES_PER_SECOND
    await all_given_back(one_stream)
    assert one_stream.refused == 1


async def test_a_waiting_newcomer_that_cancels_leaves_the_queue(
    server: RunningServer, one_stream: StreamSlots, long_wait: None
) -> None:
    async with holding_the_slot(server, one_stream) as playing, connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "synthesize", "id": "waits", "text": REPLY}))
        await eventually(lambda: one_stream.waiting, "the newcomer waits for the slot", 30)
        await ws.send(json.dumps({"type": "cancel", "id": "waits"}))
        frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert frame == {"type": "cancelled", "id": "waits"}
        assert one_stream.waiting == 0 and not playing.done()  # cancelled at once, not after the reply played
    await all_given_back(one_stream)
    assert one_stream.refused == 0
