"""The pipeline on its own, with fake LLMs and TTS transports: ordering, every fault's code, teardown."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from typing import Any

import pytest
from kokoro_client.session import TransportCode, TTSTransportError
from support.agent_fixtures import FakeBatch, FakeSource, FakeTTS, cancel_once_seen, index_of, types
from support.eventually import eventually
from voice_agent.events import Event
from voice_agent.pipeline import BusyRetry, PipelineOptions, run_batch, run_bidi

TOKENS = ["Hello", " there", "!", " This", " is", " the", " second", " one", ".", " And", " a", " third", "."]
OPTIONS = PipelineOptions(tts_connect_timeout_s=2, tts_idle_timeout_s=2, llm_idle_timeout_s=2)


async def collect(events: Any, timeout_s: float = 10) -> list[Event]:
    async with asyncio.timeout(timeout_s):
        return [event async for event in events]


def bidi(source: FakeSource, tts: FakeTTS, options: PipelineOptions = OPTIONS) -> Any:
    return run_bidi(source, tts, model_name="fake", options=options)


def batch(source: FakeSource, tts: FakeBatch, options: PipelineOptions = OPTIONS) -> Any:
    return run_batch(source, tts, model_name="fake", options=options)


async def close_at_first_audio(pipeline: Any) -> None:
    """Reads ``pipeline`` to its first audio, then closes it, as a consumer that stops reading does."""
    async with asyncio.timeout(10):
        async for event in pipeline:
            if event["type"] == "audio_chunk":
                break
    await pipeline.aclose()


def assert_well_formed(events: list[Event]) -> None:
    assert events[0]["type"] == "agent_start"
    assert [e for e in events if e["type"] in ("agent_end", "error")] == [events[-1]], "one terminal event, last"
    times = [e["t_ms"] for e in events]
    assert times == sorted(times), "t_ms never goes back"


async def test_bidi_sends_the_tokens_as_they_come_and_is_heard_while_the_llm_is_still_writing() -> None:
    source, tts = FakeSource(TOKENS, gap_s=0.05), FakeTTS(delay_s=0.01)
    events = await collect(bidi(source, tts))
    assert_well_formed(events)
    assert events[-1]["type"] == "agent_end"
    # The reply is one utterance, its deltas appended as they came: where pieces start is the server's call.
    session = tts.sessions[0]
    assert session.texts == {"0": "".join(TOKENS)} and session.appends == len(TOKENS)
    assert [e["text"] for e in events if e["type"] == "sentence"] == [
        "Hello there! This is the second one. And a third."
    ]
    assert index_of(events, "audio_chunk") < index_of(events, "text_delta", last=True)
    chunks = [e for e in events if e["type"] == "audio_chunk"]
    assert [c["seq"] for c in chunks] == list(range(3))  # one frame per sentence, from the fake server
    assert [c["sentence"] for c in chunks] == [0, 0, 0]
    assert base64.b64decode(chunks[0]["audio"]) == tts.frames[0]
    assert [e["index"] for e in events if e["type"] == "sentence_complete"] == [0]
    metrics = events[-1]["metrics"]
    assert metrics["first_audio_ms"] < metrics["text_done_ms"] <= metrics["total_ms"]
    assert metrics["sentences"] == 1 and metrics["audio_chunks"] == 3
    assert session.finished and session.closed


async def test_bidi_never_holds_up_the_text_for_the_tts() -> None:
    tokens = [f" Sentence {n}." for n in range(12)]
    tts = FakeTTS(delay_s=0.05)
    events = await collect(bidi(FakeSource(tokens, gap_s=0.001), tts))
    assert events[-1]["type"] == "agent_end"
    assert tts.sessions[0].texts == {"0": "".join(tokens)}
    assert sum(e["type"] == "audio_chunk" for e in events) == 12
    # Every fragment reached the caller long before the TTS caught up.
    assert index_of(events, "text_delta", last=True) < index_of(events, "audio_chunk") + 3


async def test_batch_waits_for_the_whole_reply_then_streams_whole_samples() -> None:
    source, tts = FakeSource(TOKENS), FakeBatch()
    events = await collect(batch(source, tts))
    assert_well_formed(events)
    assert events[-1]["type"] == "agent_end"
    assert tts.texts == ["Hello there! This is the second one. And a third."]
    assert index_of(events, "audio_chunk") > index_of(events, "text_delta", last=True)
    audio = [base64.b64decode(e["audio"]) for e in events if e["type"] == "audio_chunk"]
    assert all(len(a) % 2 == 0 for a in audio), "PCM chunks cut mid-sample"
    assert b"".join(audio) == b"".join(tts.chunks)[: len(b"".join(audio))]
    assert len(b"".join(audio)) == 206  # 207 bytes: the odd last byte is not a sample
    assert events[-2] == {**events[-2], "type": "sentence_complete", "index": 0}


@pytest.mark.parametrize("mode", ["bidi", "batch"])
async def test_llm_failing_mid_stream_is_llm_failed_after_the_text_so_far(mode: str) -> None:
    source = FakeSource(TOKENS, fail_at=5)
    events = await collect(bidi(source, FakeTTS()) if mode == "bidi" else batch(source, FakeBatch()))
    assert_well_formed(events)
    assert events[-1]["code"] == "llm_failed" and "the LLM broke" in events[-1]["message"]
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == "".join(TOKENS[:5])


@pytest.mark.parametrize("mode", ["bidi", "batch"])
async def test_a_stalled_llm_times_out(mode: str) -> None:
    source = FakeSource(TOKENS, stall_at=2)
    options = PipelineOptions(llm_idle_timeout_s=0.3)
    events = await collect(bidi(source, FakeTTS(), options) if mode == "bidi" else batch(source, FakeBatch(), options))
    assert events[-1]["code"] == "llm_timeout"
    await eventually(lambda: source.cancelled, "the stalled LLM stream to be cancelled")


async def test_bidi_with_the_tts_down_is_tts_unavailable_and_stops_the_llm() -> None:
    source = FakeSource(TOKENS, gap_s=0.05)
    events = await collect(bidi(source, FakeTTS(refuse=True)))
    assert_well_formed(events)
    assert events[-1]["code"] == "tts_unavailable"
    await eventually(lambda: source.stopped, "the LLM stream to be cancelled")
    assert not source.finished


async def test_batch_with_the_tts_down_is_tts_unavailable_after_all_the_text() -> None:
    fail = TTSTransportError(TransportCode.TTS_UNAVAILABLE, "refused")
    events = await collect(batch(FakeSource(TOKENS), FakeBatch(fail=fail)))
    assert events[-1]["code"] == "tts_unavailable"
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == "".join(TOKENS)


async def test_bidi_session_dropping_mid_reply_is_tts_session_dropped() -> None:
    tts = FakeTTS(drop_after=1)
    events = await collect(bidi(FakeSource(TOKENS), tts))
    assert_well_formed(events)
    assert events[-1]["code"] == "tts_session_dropped"
    assert sum(e["type"] == "audio_chunk" for e in events) == 1


async def test_bidi_session_ending_early_without_an_error_is_still_a_drop() -> None:
    tts = FakeTTS()
    source = FakeSource(TOKENS, gap_s=0.05)
    pipeline = bidi(source, tts)
    events: list[Event] = []
    async with asyncio.timeout(10):
        async for event in pipeline:
            events.append(event)
            if event["type"] == "audio_chunk":
                tts.sessions[0]._queue.put_nowait(None)  # the server closed cleanly, mid-reply
    assert events[-1]["code"] == "tts_session_dropped"


async def test_bidi_audio_that_never_comes_is_tts_timeout() -> None:
    options = PipelineOptions(tts_idle_timeout_s=0.3)
    events = await collect(bidi(FakeSource(TOKENS), FakeTTS(stall=True), options))
    assert events[-1]["code"] == "tts_timeout"


async def test_bidi_idle_timeout_does_not_fire_while_the_llm_thinks() -> None:
    # No audio owed for longer than the TTS idle timeout: that is the LLM's time, not a TTS stall.
    source = FakeSource(TOKENS[:5], gap_s=0.15)
    events = await collect(bidi(source, FakeTTS(), PipelineOptions(tts_idle_timeout_s=0.12)))
    assert events[-1]["type"] == "agent_end"


async def test_a_reply_with_nothing_to_speak_is_skipped_not_fatal() -> None:
    tts = FakeTTS(errors={"0": "nothing_to_speak"})
    events = await collect(bidi(FakeSource(["🙂", "..."]), tts))
    assert events[-1]["type"] == "agent_end"
    complete = [e for e in events if e["type"] == "sentence_complete"]
    assert [(e["index"], e.get("skipped")) for e in complete] == [(0, "nothing_to_speak")]


async def test_a_tts_error_on_the_reply_is_tts_error_with_the_servers_code() -> None:
    events = await collect(bidi(FakeSource(TOKENS), FakeTTS(errors={"0": "unknown_voice"})))
    assert events[-1]["code"] == "tts_error" and events[-1]["tts_code"] == "unknown_voice"


async def test_closing_the_bidi_pipeline_cancels_the_llm_and_closes_the_session() -> None:
    source, tts = FakeSource(TOKENS, gap_s=0.2), FakeTTS()
    await close_at_first_audio(bidi(source, tts))
    assert source.cancelled and not source.finished
    assert source.cancel_signal is not None and source.cancel_signal.is_set()
    assert tts.sessions[0].closed


async def test_cancelling_the_consumer_task_tears_the_pipeline_down() -> None:
    # What AgentCore does when the caller disconnects: it cancels the task iterating the generator.
    source, tts = FakeSource(TOKENS, gap_s=0.2), FakeTTS()
    await cancel_once_seen(bidi(source, tts), lambda event: event["type"] == "audio_chunk")
    assert source.cancelled and tts.sessions[0].closed


async def test_closing_the_batch_pipeline_mid_audio_closes_the_synthesis_stream() -> None:
    source, tts = FakeSource(TOKENS, gap_s=0.0), FakeBatch(delay_s=0.2)
    await close_at_first_audio(batch(source, tts))
    assert tts.closed


async def test_an_empty_reply_ends_cleanly_with_no_audio() -> None:
    for run in (
        bidi(FakeSource([]), FakeTTS()),
        bidi(FakeSource([" "]), FakeTTS()),  # nothing to say: no utterance is opened
        batch(FakeSource([" "]), FakeBatch()),
    ):
        events = await collect(run)
        assert types(events) in (["agent_start", "agent_end"], ["agent_start", "text_delta", "agent_end"])
        assert events[-1]["metrics"]["audio_ms"] == 0


class BusyBatch(FakeBatch):
    """Refuses the first ``refusals`` requests as a busy server does (server_busy, Retry-After), then speaks."""

    def __init__(self, refusals: int, retry_after_s: float | None = None) -> None:
        super().__init__()
        self.refusals, self.retry_after_s, self.tries = refusals, retry_after_s, 0

    async def synthesize(self, text: str, options: Any) -> Any:
        self.tries += 1
        if self.tries <= self.refusals:
            raise TTSTransportError(TransportCode.TTS_BUSY, "busy", "server_busy", self.retry_after_s)
        async for chunk in super().synthesize(text, options):
            yield chunk


async def test_batch_tries_a_busy_server_again_and_speaks_when_it_takes_the_request() -> None:
    tts = BusyBatch(refusals=2, retry_after_s=0.1)
    events = await collect(batch(FakeSource(TOKENS), tts, dataclasses.replace(OPTIONS, tts_busy_retry_s=5)))
    assert events[-1]["type"] == "agent_end" and tts.tries == 3
    assert sum(e["type"] == "audio_chunk" for e in events) > 0


async def test_batch_still_refused_as_busy_ends_in_tts_busy_within_the_retry_budget() -> None:
    tts = BusyBatch(refusals=1000, retry_after_s=0.3)
    started = time.monotonic()
    events = await collect(batch(FakeSource(TOKENS, gap_s=0), tts, dataclasses.replace(OPTIONS, tts_busy_retry_s=1.5)))
    assert_well_formed(events)
    assert (events[-1]["code"], events[-1]["tts_code"]) == ("tts_busy", "server_busy")
    assert 2 <= tts.tries <= 5 and time.monotonic() - started < 1.5 + 1.0  # never waits past its budget


def test_busy_retry_backs_off_doubling_takes_retry_after_and_stops_at_its_budget() -> None:
    now = [0.0]
    retry = BusyRetry(budget_s=6.0, clock=lambda: now[0])
    waits = []
    while (wait := retry.wait_s(None)) is not None:
        waits.append(wait)
        now[0] += wait
    for wait, backoff in zip(waits, [0.5, 1.0, 2.0], strict=False):  # doubling, stretched by up to a quarter
        assert backoff <= wait <= backoff * 1.25
    assert len(waits) >= 3 and now[0] <= 6.0
    assert BusyRetry(budget_s=6.0).wait_s(retry_after_s=4.0) >= 4.0
    assert BusyRetry(budget_s=3.0).wait_s(retry_after_s=4.0) is None  # the server's wait is past the budget


async def test_bidi_utterance_refused_as_busy_is_tts_busy() -> None:
    events = await collect(bidi(FakeSource(TOKENS), FakeTTS(errors={"0": "server_busy"})))
    assert_well_formed(events)
    assert (events[-1]["code"], events[-1]["tts_code"]) == ("tts_busy", "server_busy")
