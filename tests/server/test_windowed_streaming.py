"""Windowed streaming on the real server: each vocoder window is its own scheduler job, so a sentence's first
audio leaves after one window, a cancel stops within one window, and another session's first window goes ahead
of this session's later ones. Asserted through the scheduler's job log, not wall-clock ratios (shared cores)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from kokoro_tts.engine.scheduler import JobRecord
from kokoro_tts.engine.windows import WindowPlan
from support.idle import wait_idle
from support.inproc_server import RunningServer
from support.ws_client import Transcript, first_audio, receive_until
from websockets.asyncio.client import ClientConnection, connect

# One chunk (under MAX_CHUNK_CHARS, no sentence break): about 12 s of speech, so many windows.
LONG_SENTENCE = (
    "The harbour lights came on one by one along the quiet water while the last ferry of the evening turned "
    "slowly toward the pier and the people waiting there pulled their coats tighter against the wind"
)
# Small, fixed windows: many jobs per sentence whatever this machine's speed (pacing is the vocoder's own test).
PLAN = WindowPlan(first=12, growth=2.0, largest=48, frames_per_window=12)


@pytest.fixture
def small_windows(server: RunningServer) -> Iterator[None]:
    engine = server.engine
    assert engine.windowed, "the server should stream windows by default (KOKORO_WINDOWED unset)"
    plan, engine.window_plan = engine.window_plan, PLAN
    try:
        yield
    finally:
        engine.window_plan = plan


def jobs_since(engine: Any, since: float) -> list[JobRecord]:
    return [job for job in list(engine.scheduler.history) if job.started >= since]


def sentence_frames(engine: Any) -> int:
    """Aligned frames (25 ms each) of LONG_SENTENCE in the default voice: its prosody front, run here."""
    request = engine.rules.speech(LONG_SENTENCE, None, None)
    (ids,) = engine._token_batches(request.text, request)
    return int(engine.backend.stages.front(ids, request.voice.style(len(ids)), 1.0).frames)


def windows_of(jobs: list[JobRecord], tag: str) -> list[JobRecord]:
    return [job for job in jobs if job.label.startswith(f"{tag} window ")]


def utterance_tags(jobs: list[JobRecord]) -> list[str]:
    """The engine's utterance tags ("u7") in the order their first job ran."""
    tags: list[str] = []
    for job in jobs:
        if (tag := job.label.split()[0]) not in tags:
            tags.append(tag)
    return tags


@asynccontextmanager
async def long_sentence_speaking(
    server: RunningServer,
) -> AsyncIterator[tuple[ClientConnection, Transcript, float, float]]:
    """An idle engine, then a session saying LONG_SENTENCE ("long"), inside its first audio: the socket, its
    transcript so far, when it started (loop time, for ``jobs_since``) and when its first audio arrived."""
    await wait_idle(server.engine)
    since = time.monotonic()
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"text": LONG_SENTENCE, "id": "long"}))
        transcript = Transcript()
        arrived = await first_audio(ws, transcript)
        yield ws, transcript, since, arrived


async def test_first_audio_leaves_after_one_window_job(server: RunningServer, small_windows: None) -> None:
    engine = server.engine
    async with long_sentence_speaking(server) as (ws, transcript, since, arrived):
        await receive_until(ws, transcript, lambda f: f["type"] == "synthesis_complete")
    (tag,) = utterance_tags(jobs_since(engine, since))
    windows = windows_of(jobs_since(engine, since), tag)
    assert len(windows) >= 6, [w.label for w in windows]  # the whole chunk took many window jobs...
    done_before = [w for w in windows if w.finished is not None and w.finished <= arrived]
    assert len(done_before) == 1, "the first audio should wait for exactly one window job"  # ...the first, one
    # The route's contract holds: every window's audio arrived, and synthesis_complete counts all of it.
    utterance = transcript.utterances()["long"]
    assert utterance.complete is not None
    assert utterance.complete["audio_ms"] == pytest.approx(1000 * utterance.pcm().size / 24_000, abs=1)


async def test_cancel_takes_effect_within_one_window(server: RunningServer, small_windows: None) -> None:
    engine = server.engine
    async with long_sentence_speaking(server) as (ws, transcript, since, _):
        cancelled_at = time.monotonic()
        await ws.send(json.dumps({"type": "cancel"}))
        await receive_until(ws, transcript, lambda f: f["type"] == "cancelled" and f.get("id") == "long")
        await wait_idle(engine)
    (tag,) = utterance_tags(jobs_since(engine, since))
    windows = windows_of(jobs_since(engine, since), tag)
    after_cancel = [w for w in windows if w.started >= cancelled_at]
    assert len(after_cancel) <= 1, [w.label for w in after_cancel]
    assert len(windows) < len(PLAN.bounds(sentence_frames(engine))), "the cancelled sentence was decoded to its end"
    assert not transcript.json_frames("synthesis_complete")


async def long_then_short(server: RunningServer, before_short: Callable[[float], Awaitable[object]]) -> list[JobRecord]:
    """One session speaks LONG_SENTENCE; once its first audio is out and ``before_short(since)`` has returned,
    another says "Hello there."; the jobs run from the start (``since``, loop time) until both are complete."""
    second_transcript = Transcript()
    # Once its first audio is out, the long sentence streams window by window.
    async with long_sentence_speaking(server) as (first, first_transcript, since, _), connect(server.ws_url) as second:
        await before_short(since)
        await second.send(json.dumps({"text": "Hello there.", "id": "short"}))
        await asyncio.gather(
            receive_until(first, first_transcript, lambda f: f["type"] == "synthesis_complete"),
            receive_until(second, second_transcript, lambda f: f["type"] == "synthesis_complete"),
        )
    return jobs_since(server.engine, since)


async def test_a_new_sessions_first_window_goes_ahead_of_later_windows(
    server: RunningServer, small_windows: None
) -> None:
    jobs = await long_then_short(server, lambda since: asyncio.sleep(0))  # the short one at once
    since = jobs[0].started
    long_tag, short_tag = utterance_tags(jobs)
    long_windows, short_windows = windows_of(jobs, long_tag), windows_of(jobs, short_tag)
    short_first = short_windows[0]
    # Its first window is due now; the long sentence's later windows only when its audio so far has played.
    behind = [w for w in long_windows if w.started > short_first.started]
    assert len(behind) >= 2, [(w.label, w.started - since) for w in long_windows]
    assert all(w.deadline > short_first.deadline for w in behind)


async def test_a_new_utterance_does_not_wait_for_a_window_running_alone(server: RunningServer) -> None:
    """A reply decoded ahead of its playback runs its later windows alone, on every core; another caller's first
    window, due now, starts beside the one running instead of waiting for its end (scheduler.py)."""
    engine = server.engine
    running: list[JobRecord] = []

    async def while_a_window_runs_alone(since: float) -> None:
        """Until a window of the long sentence has just started alone."""
        ends = time.monotonic() + 60
        while not running:
            assert time.monotonic() < ends, "no window of the long sentence ran alone"
            await asyncio.sleep(0.002)
            running.extend(
                job
                for job in jobs_since(engine, since)
                if job.every_core and job.finished is None and time.monotonic() - job.started < 0.02
            )

    jobs = await long_then_short(server, while_a_window_runs_alone)
    long_window = running[0]
    short_first = windows_of(jobs, utterance_tags(jobs)[1])[0]
    assert long_window.finished is not None and short_first.started < long_window.finished, (
        f"{short_first.label} waited for {long_window.label}, which ran alone "
        f"{1000 * (long_window.finished - long_window.started):.0f} ms"
    )
