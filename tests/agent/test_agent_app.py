"""The agent end to end: the AgentCore app over HTTP (uvicorn), the scripted model, the real TTS server and model,
read through the SSE consumer. Faults: TTS down, LLM failing, TTS connection lost mid-reply, caller leaving."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from support.agent_fixtures import (
    FAST,
    TEST_REPLY,
    AgentServer,
    TCPProxy,
    agent_settings,
    free_port,
    index_of,
    invoke,
    make_model,
    types,
)
from support.eventually import eventually
from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors
from voice_agent.events import Event
from voice_agent.scripted_model import SIMULATED_NAME, tokenize

from scripts.speech import rms, words
from scripts.sse import post_sse

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def agent(server: RunningServer) -> Iterator[AgentServer]:
    with AgentServer(agent_settings(server.base_url), make_model()).running() as running:
        yield running


@pytest.fixture(scope="module")
def fast_agent(server: RunningServer) -> Iterator[AgentServer]:
    """For tests that time nothing: the same reply, written 12 times as fast."""
    with AgentServer(agent_settings(server.base_url), make_model(**FAST)).running() as running:
        yield running


@pytest.fixture(scope="module")
def replies(server: RunningServer, agent: AgentServer) -> dict[str, list[Event]]:
    """One bidi and one batch reply, shared by the assertions below (the real model is the slow part)."""

    async def both() -> dict[str, list[Event]]:
        # A first request pays for cold paths (the G2P's lexicons, imports, the agent's worker loop): warm them
        # up so timing-based assertions see the steady state, leaving no synthesis in flight to delay the next.
        async with httpx.AsyncClient(timeout=60) as client:
            warm = await client.post(f"{server.base_url}/invocations", json={"text": "Hello there! Warming up."})
            warm.raise_for_status()
        async for event in post_sse(f"{agent.url}/invocations", {"prompt": "Warm up.", "mode": "bidi"}):
            if event["type"] in ("text_delta", "error", "agent_end"):
                break
        return {mode: await invoke(agent.url, {"prompt": "Say hello.", "mode": mode}) for mode in ("bidi", "batch")}

    return asyncio.run(both())


def pcm_of(events: list[Event]) -> np.ndarray:
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "audio_chunk")
    return np.frombuffer(audio, dtype="<i2")


def text_of(events: list[Event]) -> str:
    return "".join(e["text"] for e in events if e["type"] == "text_delta")


@pytest.mark.parametrize("mode", ["bidi", "batch"])
def test_a_reply_is_well_formed_speech(replies: dict[str, list[Event]], mode: str) -> None:
    events = replies[mode]
    assert events[0]["type"] == "agent_start", events[0]
    assert events[0]["mode"] == mode and events[0]["model"] == SIMULATED_NAME
    assert events[-1]["type"] == "agent_end", events[-1]
    assert events[-1]["truncated"] is False
    assert not [e for e in events if e["type"] == "error"]
    assert text_of(events) == TEST_REPLY
    times = [e["t_ms"] for e in events]
    assert times == sorted(times)
    chunks = [e for e in events if e["type"] == "audio_chunk"]
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    assert {(c["format"], c["sample_rate"]) for c in chunks} == {("pcm", 24000)}
    pcm = pcm_of(events)
    assert rms(pcm) > 300, "near-silent audio"
    heard = WhisperListener.shared().transcribe(pcm)
    errors, words = word_errors(TEST_REPLY, heard)
    assert errors / words <= 0.1, f"the audio does not say the reply: {errors}/{words} words wrong in {heard!r}"
    metrics = events[-1]["metrics"]
    assert metrics["audio_ms"] == pytest.approx(len(pcm) / 24, abs=50)
    assert 0 < metrics["first_text_ms"] <= metrics["first_sentence_ms"] <= metrics["total_ms"]
    assert metrics["first_audio_ms"] <= metrics["total_ms"]


def test_bidi_speaks_before_the_llm_is_done_and_batch_after(replies: dict[str, list[Event]]) -> None:
    bidi, batch = replies["bidi"], replies["batch"]
    assert index_of(bidi, "audio_chunk") < index_of(bidi, "text_delta", last=True)
    assert index_of(batch, "audio_chunk") > index_of(batch, "text_delta", last=True)
    # Both send the reply as one utterance: bidi token by token as the LLM writes (the server cuts the pieces),
    # batch once it is complete.
    for events in (bidi, batch):
        assert [e["text"] for e in events if e["type"] == "sentence"] == [TEST_REPLY]
        assert [e["index"] for e in events if e["type"] == "sentence_complete"] == [0]
    assert bidi[-1]["metrics"]["first_audio_ms"] < batch[-1]["metrics"]["first_audio_ms"]


async def test_a_bursty_reply_with_prices_and_times_is_spoken_as_written(server: RunningServer) -> None:
    """The scripted LLM's tokens are sub-word pieces with "$", "42", ".", "50" apart, at a slow and bursty cadence
    (gaps from 0.01 to 0.19 s): the server's cuts wait for each number to be whole, so the reply is heard as
    written."""
    reply = "Your total is $42.50, due Jan 5. Dr. Smith sees you at 3:30 pm. Thanks!"
    model = make_model(reply=reply, tokens_per_s=10.0, jitter=0.9)
    with AgentServer(agent_settings(server.base_url), model).running() as agent:
        events = await invoke(agent.url, {"prompt": "Bill?", "mode": "bidi"})
    assert events[-1]["type"] == "agent_end", events[-1]
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == reply
    heard = WhisperListener.shared().transcribe(pcm_of(events))
    # As a listener writes it down (Whisper writes numbers in digits): "Jan 5" is read as "January fifth".
    written = "Your total is $42.50, due January 5th. Dr. Smith sees you at 3:30 pm. Thanks!"
    assert word_errors(written, heard)[0] <= 2 and "42" in heard, heard


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"prompt": "   "}, "empty_prompt"),
        ({"mode": "bidi"}, "empty_prompt"),
        ({"prompt": "Hi", "mode": "stream"}, "unknown_mode"),
        ({"prompt": "Hi", "mode": "m" * 60_000}, "unknown_mode"),  # quoted cut short, not echoed whole
        ({"prompt": "Hi", "speed": 9}, "invalid_speed"),
        ({"prompt": 42}, "invalid_request"),
        ([1, 2], "invalid_request"),
    ],
)
async def test_bad_requests_end_in_one_error_event(agent: AgentServer, payload: Any, code: str) -> None:
    events = await invoke(agent.url, payload, timeout_s=10)
    assert types(events) == ["error"] and events[0]["code"] == code
    assert len(json.dumps(events[0])) < 600, events[0]


# A reply as a hosted LLM writes it: markdown split across tokens, a word in sub-word pieces, cut at the limit.
MARKDOWN_REPLY = (
    "## Quick answer\nWait *ten* seconds, then press the **green** button. "
    "Unfortunately the door opens slowly, so please be patient with it."
)
WRITTEN = "Quick answer. Wait ten seconds, then press the green button. Unfortunately the door opens slowly"


@pytest.mark.parametrize("mode", ["bidi", "batch"])
async def test_a_reply_cut_at_the_token_limit_is_spoken_up_to_the_cut_and_flagged_truncated(
    server: RunningServer, mode: str
) -> None:
    tokens = tokenize(MARKDOWN_REPLY)
    limit = next(n for n in range(len(tokens)) if "".join(tokens[:n]).endswith("slowly"))
    assert " Unfortunat" in tokens and "**" not in tokens  # sub-word pieces; markdown split across tokens
    model = make_model(reply=MARKDOWN_REPLY, max_tokens=limit, **FAST)
    with AgentServer(agent_settings(server.base_url), model).running() as agent_:
        events = await invoke(agent_.url, {"prompt": "How do I get in?", "mode": mode}, timeout_s=60)
    assert events[-1]["type"] == "agent_end" and events[-1]["truncated"] is True, events[-1]
    assert not [e for e in events if e["type"] == "error"]
    assert text_of(events) == "".join(tokens[:limit])
    heard = WhisperListener.shared().transcribe(pcm_of(events))
    errors, words_ = word_errors(WRITTEN, heard)
    assert errors <= words_ // 10, f"{errors}/{words_} words wrong in {heard!r}"
    assert not {"hash", "asterisk", "asterisks", "star"} & set(words(heard)), heard


@pytest.mark.parametrize("mode", ["bidi", "batch"])
async def test_tts_down_is_tts_unavailable(mode: str) -> None:
    model = make_model(**FAST)
    with AgentServer(agent_settings(f"http://127.0.0.1:{free_port()}"), model).running() as down:
        events = await invoke(down.url, {"prompt": "Hi", "mode": mode}, timeout_s=30)
    assert events[-1]["type"] == "error" and events[-1]["code"] == "tts_unavailable", events[-1]
    if mode == "batch":  # batch only calls the TTS once the reply is written: all of it reached the caller
        assert text_of(events) == TEST_REPLY
    await eventually(lambda: all(s.closed for s in model.streams), "the LLM stream to end")


@pytest.mark.parametrize("mode", ["bidi", "batch"])
async def test_llm_failing_mid_stream_is_llm_failed_after_the_text_so_far(
    server: RunningServer, tts_sessions: dict[str, int], mode: str
) -> None:
    model = make_model(fail_after_tokens=6, **FAST)
    with AgentServer(agent_settings(server.base_url), model).running() as failing:
        events = await invoke(failing.url, {"prompt": "Hi", "mode": mode}, timeout_s=30)
    assert events[-1]["type"] == "error" and events[-1]["code"] == "llm_failed", events[-1]
    assert "simulated LLM failure" in events[-1]["message"]
    assert text_of(events) == "Hello there! This reply is"
    if mode == "bidi":  # the session opened for the reply is closed with it
        await eventually(lambda: tts_sessions["ended"] == tts_sessions["started"] == 1, "the TTS session")
    else:  # batch never got as far as calling the TTS
        assert tts_sessions["started"] == 0


@pytest.mark.parametrize(("mode", "graceful"), [("bidi", False), ("batch", True)])
async def test_tts_connection_lost_mid_reply_is_tts_session_dropped(
    server: RunningServer, mode: str, graceful: bool
) -> None:
    # The proxy stands for the TTS server's process: cut() resets its connections as a crash would (or closes
    # them without a goodbye: graceful), after the first audio has reached the caller.
    with TCPProxy(server.port) as proxy:
        with AgentServer(agent_settings(proxy.url), make_model(**FAST)).running() as agent_:
            events: list[Event] = []
            async with asyncio.timeout(60):
                async for event in post_sse(f"{agent_.url}/invocations", {"prompt": "Hi", "mode": mode}):
                    events.append(event)
                    if event["type"] == "audio_chunk" and event["seq"] == 0:
                        proxy.cut(graceful=graceful)
    assert events[-1]["type"] == "error" and events[-1]["code"] == "tts_session_dropped", events[-1]
    assert "audio_chunk" in types(events) and "agent_end" not in types(events)


@pytest.mark.parametrize(("mode", "leave_after"), [("bidi", "audio_chunk"), ("batch", "text_delta")])
async def test_a_caller_leaving_stops_the_llm_and_the_tts_session(
    server: RunningServer, tts_sessions: dict[str, int], mode: str, leave_after: str
) -> None:
    model = make_model()
    with AgentServer(agent_settings(server.base_url), model).running() as agent_:
        stream = post_sse(f"{agent_.url}/invocations", {"prompt": "Hi", "mode": mode})
        async with asyncio.timeout(60):
            async for event in stream:
                if event["type"] == leave_after:
                    break
        await stream.aclose()  # type: ignore[attr-defined]  # hangs up: the connection closes here
        await eventually(lambda: model.streams and model.streams[0].closed, "the LLM stream to stop")
        record = model.streams[0]
        assert record.cancelled and not record.completed
        if mode == "bidi":
            await eventually(lambda: tts_sessions["ended"] == tts_sessions["started"] == 1, "the TTS session")


@pytest.mark.parametrize("fmt", ["mulaw", "alaw", "wav_mulaw", "wav", "mp3"])
async def test_batch_audio_says_its_rate_and_length_in_every_format(
    fast_agent: AgentServer, replies: dict[str, list[Event]], fmt: str
) -> None:
    events = await invoke(fast_agent.url, {"prompt": "Say hello.", "mode": "batch", "format": fmt})
    assert events[-1]["type"] == "agent_end", events[-1]
    rates = {event["sample_rate"] for event in events if event["type"] == "audio_chunk"}
    assert rates == {8000 if fmt in ("mulaw", "alaw", "wav_mulaw") else 24_000}
    pcm_ms = replies["batch"][-1]["metrics"]["audio_ms"]  # the same reply as pcm: its length, counted exactly
    assert pcm_ms > 500
    assert abs(events[-1]["metrics"]["audio_ms"] - pcm_ms) < 0.02 * pcm_ms + 100, (events[-1]["metrics"], pcm_ms)
