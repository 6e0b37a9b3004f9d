"""More prompts than the TTS server can take: every reply ends in its full audio or, promptly,
in ``tts_busy``; none waits for a timeout. The real agent app and the real TTS server and model, on loopback.

The server's bound on a new request's first-audio wait is lowered so that a burst a few prompts wide is over it
on any machine; the agent's retry budget is short so the test stays short.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from kokoro_tts.engine.capacity import StreamSlots
from support.agent_fixtures import FAST, AgentServer, agent_settings, invoke, make_model, types
from support.eventually import eventually
from support.inproc_server import RunningServer
from voice_agent.events import Event
from websockets.asyncio.client import connect

pytestmark = pytest.mark.slow

BUSY_RETRY_S = 3.0  # the agent's retry budget for a busy server
IDLE_TIMEOUT_S = 20.0  # the agent's wait for owed audio: an accepted reply must never come near it
BIDI, BATCH = 3, 8


def spoke_in_full(events: list[Event]) -> bool:
    """agent_end, every sentence complete with audio, and audio chunks received."""
    sentences = {e["index"] for e in events if e["type"] == "sentence"}
    complete = {e["index"] for e in events if e["type"] == "sentence_complete" and e["audio_ms"] > 0}
    return events[-1]["type"] == "agent_end" and bool(sentences) and sentences == complete


async def test_a_burst_past_capacity_ends_in_full_audio_or_a_prompt_tts_busy(
    server: RunningServer, tight_admission: None
) -> None:
    async with httpx.AsyncClient(timeout=60) as client:  # measured jobs for the scheduler's estimate
        (await client.post(f"{server.base_url}/invocations", json={"text": "Warming up."})).raise_for_status()
    settings = agent_settings(server.base_url, tts_busy_retry_s=BUSY_RETRY_S, tts_idle_timeout_s=IDLE_TIMEOUT_S)
    with AgentServer(settings, make_model(**FAST)).running() as agent:
        started = time.monotonic()
        modes = ["bidi"] * BIDI + ["batch"] * BATCH
        replies = await asyncio.gather(*(invoke(agent.url, {"prompt": "Hi.", "mode": m}, 120) for m in modes))
        took = time.monotonic() - started

    outcomes = []
    for mode, events in zip(modes, replies, strict=True):
        last = events[-1]
        if spoke_in_full(events):
            outcomes.append("spoken")
            continue
        # Anything else must be the busy error, with the code that says so, and soon after the text was ready.
        assert last["type"] == "error" and last["code"] == "tts_busy", (mode, last, types(events))
        text_ready = next(e["t_ms"] for e in events if e["type"] == "sentence") / 1000
        assert last["t_ms"] / 1000 - text_ready < BUSY_RETRY_S + 5, (mode, last)
        outcomes.append("busy")
    print(f"\n{BIDI} bidi + {BATCH} batch prompts: {outcomes} in {took:.1f} s")
    assert outcomes[:BIDI] == ["spoken"] * BIDI  # sessions are not refused below their caps
    assert "busy" in outcomes[BIDI:], "the burst was over the bound, yet every batch request was taken"


async def test_a_bidi_reply_past_the_stream_slots_ends_in_tts_busy_and_the_next_is_spoken(
    server: RunningServer, one_stream: StreamSlots, short_wait: None
) -> None:
    """The TTS server plays one stream and another session holds it: the agent's reply waits its bounded wait for
    a slot, then ends in ``tts_busy`` (never a start and then a stutter); once the slot is free, a reply is spoken."""
    settings = agent_settings(server.base_url, tts_busy_retry_s=BUSY_RETRY_S, tts_idle_timeout_s=IDLE_TIMEOUT_S)
    with AgentServer(settings, make_model(**FAST)).running() as agent:
        async with connect(server.ws_url) as holder:
            await holder.send(json.dumps({"text": "This session holds the only stream slot while it speaks."}))
            await eventually(lambda: one_stream.count, "the other session holds the slot", 60)
            refused = await invoke(agent.url, {"prompt": "Hi.", "mode": "bidi"}, 120)
        await eventually(lambda: not one_stream.count, "the slot given back", 30)
        spoken = await invoke(agent.url, {"prompt": "Hi.", "mode": "bidi"}, 120)
    last = refused[-1]
    assert last["type"] == "error" and last["code"] == "tts_busy", types(refused)
    assert last["tts_code"] == "server_busy"
    assert "audio_chunk" not in types(refused) and "audio_chunk" in types(spoken)
    assert spoke_in_full(spoken), types(spoken)
