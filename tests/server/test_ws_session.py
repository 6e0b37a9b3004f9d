"""The bidirectional session (WS /invocations-bidirectional-stream) against the real server and model."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from support.inproc_server import RunningServer
from support.listener import WhisperListener, word_errors
from support.ws_client import Transcript, assert_synthesis_stopped, completes, receive_until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from scripts.speech import rms

SENTENCES = [
    "The weather is nice today.",
    "Please call me back this afternoon.",
    "She opened the door and walked into the room.",
]


async def test_three_utterances_as_binary_frames_arrive_in_order_and_are_speech(server: RunningServer) -> None:
    async with connect(server.ws_url) as ws:
        for i, text in enumerate(SENTENCES):
            await ws.send(json.dumps({"type": "synthesize", "id": f"s{i}", "text": text}).encode())
        transcript = Transcript()
        await receive_until(ws, transcript, completes(3))

    control = [(f["type"], f["id"]) for f in transcript.json_frames()]
    assert control == [(kind, f"s{i}") for i in range(3) for kind in ("synthesis_start", "synthesis_complete")]
    utterances = transcript.utterances()
    errors = words = 0
    for i, text in enumerate(SENTENCES):
        u = utterances[f"s{i}"]
        assert u.start == {"type": "synthesis_start", "id": f"s{i}", "format": "pcm", "sample_rate": 24000}
        assert u.complete is not None and u.complete["bytes"] == len(u.audio) > 0
        assert u.complete["audio_ms"] == pytest.approx(len(u.audio) / 2 / 24, abs=1)
        assert u.complete["synth_ms"] > 0
        e, n = word_errors(text, WhisperListener.shared().transcribe(u.pcm()))
        errors, words = errors + e, words + n
    assert errors / words <= 0.05, f"word error rate {errors}/{words}"


async def test_plain_text_and_text_frames_are_utterances(server: RunningServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send("Thank you for your patience.")  # a text frame that is not JSON: the text itself
        await ws.send(b"  I would like a cup of coffee.")  # the same, as a binary frame
        await ws.send(json.dumps({"text": "The train leaves at noon."}))  # an object with text and no type
        transcript = Transcript()
        await receive_until(ws, transcript, completes(3))
    assert [f["id"] for f in transcript.json_frames("synthesis_complete")] == ["u1", "u2", "u3"]
    heard = WhisperListener.shared().transcribe(transcript.utterances()["u1"].pcm())
    assert word_errors("Thank you for your patience.", heard)[0] <= 1


async def test_mandarin_is_non_silent_speech_of_plausible_length(server: RunningServer) -> None:
    text = "你好，欢迎使用语音助手。今天天气很好。"
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"text": text, "voice": "zf_xiaobei", "id": "zh"}))
        transcript = Transcript()
        await receive_until(ws, transcript, completes(1))
    pcm = transcript.utterances()["zh"].pcm()
    seconds = pcm.size / 24000
    hanzi = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    assert 0.12 * hanzi <= seconds <= 0.6 * hanzi, f"{seconds:.2f} s for {hanzi} characters"
    assert rms(pcm) > 500, "near-silent audio"
    frames = pcm[: pcm.size // 240 * 240].reshape(-1, 240).astype(int)  # 10 ms frames
    voiced = (abs(frames).mean(axis=1) > 300).mean()
    assert voiced > 0.4


async def test_config_sets_format_voice_and_speed_for_later_utterances(server: RunningServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"text": "Hello there.", "id": "a"}))
        await ws.send(json.dumps({"type": "config", "format": "wav", "voice": "am_adam", "speed": 1.5}))
        await ws.send(json.dumps({"text": "Hello there.", "id": "b"}))
        transcript = Transcript()
        await receive_until(ws, transcript, completes(2))
    a, b = transcript.utterances()["a"], transcript.utterances()["b"]
    assert a.start is not None and a.start["format"] == "pcm"
    assert b.start is not None and b.start["format"] == "wav"
    assert bytes(b.audio[:4]) == b"RIFF" and bytes(b.audio[8:12]) == b"WAVE"
    assert b.complete is not None and a.complete is not None
    assert b.complete["audio_ms"] < a.complete["audio_ms"] * 0.85  # spoken faster


async def test_cancel_drops_queued_and_stops_in_flight(server: RunningServer) -> None:
    long_text = " ".join(f"This is sentence number {n} of a long reply." for n in range(1, 13))
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"text": long_text, "id": "long"}))
        await ws.send(json.dumps({"text": "Never spoken.", "id": "queued"}))
        transcript = Transcript()
        await receive_until(ws, transcript, lambda f: f["type"] == "synthesis_start")
        await ws.send(json.dumps({"type": "cancel"}))
        await receive_until(ws, transcript, completes(2))
        # The session still works after a cancel.
        await ws.send(json.dumps({"text": "Still here.", "id": "after"}))
        await receive_until(ws, transcript, lambda f: f["type"] == "synthesis_complete")
    cancelled = {f["id"] for f in transcript.json_frames("cancelled")}
    assert cancelled == {"long", "queued"}
    assert [f["id"] for f in transcript.json_frames("synthesis_complete")] == ["after"]
    long_audio = transcript.utterances()["long"].audio
    assert 0 < len(long_audio) < 2 * 24000 * 30  # stopped well before the ~30 s the whole text takes


async def test_cancel_by_id_leaves_the_others(server: RunningServer) -> None:
    async with connect(server.ws_url) as ws:
        for uid in ("one", "two", "three"):
            await ws.send(json.dumps({"text": f"Number {uid}.", "id": uid}))
        await ws.send(json.dumps({"type": "cancel", "id": "three"}))
        transcript = Transcript()
        await receive_until(ws, transcript, completes(3))
    assert [f["id"] for f in transcript.json_frames("synthesis_complete")] == ["one", "two"]
    assert [f["id"] for f in transcript.json_frames("cancelled")] == ["three"]


async def test_close_finishes_the_queue_then_closes_with_1000(server: RunningServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"text": "First.", "id": "1"}))
        await ws.send(json.dumps({"text": "Second.", "id": "2"}))
        await ws.send(json.dumps({"type": "close"}))
        transcript = Transcript()
        with pytest.raises(ConnectionClosed) as closed:
            await receive_until(ws, transcript, lambda f: False)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    assert [f["id"] for f in transcript.json_frames("synthesis_complete")] == ["1", "2"]


async def test_websocket_pings_are_answered(server: RunningServer) -> None:
    async with connect(server.ws_url, ping_interval=None) as ws:
        for _ in range(3):
            pong = await ws.ping()
            await asyncio.wait_for(pong, timeout=5)


async def test_disconnect_mid_utterance_stops_its_synthesis(server: RunningServer) -> None:
    scheduler = server.engine.scheduler  # counts the inference jobs (phonemes, vocoder windows) handed to a worker
    long_text = " ".join(f"Here is sentence {n} of something long." for n in range(1, 21))
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"text": long_text}))
        transcript = Transcript()
        await receive_until(ws, transcript, lambda f: f["type"] == "synthesis_start")
        started = scheduler.started
    await assert_synthesis_stopped(scheduler, started)


async def test_a_new_utterance_is_not_stuck_behind_other_sessions_long_replies(
    server: RunningServer, frame_per_window: None
) -> None:
    long_text = " ".join(f"Sentence {n} of a reply that goes on for quite a while." for n in range(1, 13))
    async with connect(server.ws_url) as long_a, connect(server.ws_url) as long_b, connect(server.ws_url) as short:
        for ws in (long_a, long_b):
            await ws.send(json.dumps({"text": long_text}))
        for ws in (long_a, long_b):
            assert json.loads(await ws.recv())["type"] == "synthesis_start"
        frames_after = {"a": 0, "b": 0}

        async def count(name: str, ws: Any) -> None:
            while True:
                if isinstance(await ws.recv(), bytes):
                    frames_after[name] += 1

        counters = [asyncio.create_task(count("a", long_a)), asyncio.create_task(count("b", long_b))]
        await short.send(json.dumps({"text": "Quick question.", "id": "q"}))
        transcript = Transcript()
        await receive_until(short, transcript, lambda f: f["type"] == "synthesis_complete")
        for task in counters:
            task.cancel()
        await asyncio.gather(*counters, return_exceptions=True)
    # One vocoder window per PCM frame: besides each long reply's first window (it follows synthesis_start), the
    # short utterance waited for at most the one look-ahead job each long reply had queued (due already: its audio
    # is playing), not for the dozens of windows the two long replies still had to go. With workers side by side,
    # the long replies also go on beside each of the short utterance's jobs: up to that many frames per worker, and
    # one or two more since a window's decoding is capped at 1 s (vocoder_windows.WindowPlan.longest_s): smaller
    # windows, more of them in the same time. Stuck behind the long replies, it would see dozens (12 sentences each).
    assert sum(frames_after.values()) <= 6 * server.engine.backend.parallel_jobs, frames_after


async def test_a_session_the_server_fails_to_serve_is_told_and_closed_with_1011(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a dialect's frames (here: the ``synthesis_complete`` frame cannot be written) ends the session with
    an ``internal_error`` frame and close 1011, where it used to leave the client waiting on an open, silent socket."""
    from kokoro_client.protocol import ServerFrame, SynthesisComplete, encode
    from kokoro_tts.sessions import bidi

    def failing_encode(frame: ServerFrame) -> str:
        if isinstance(frame, SynthesisComplete):
            raise RuntimeError("a frame the dialect cannot write")
        return encode(frame)

    monkeypatch.setattr(bidi, "encode", failing_encode)
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"text": "Hello there.", "id": "1"}))
        transcript = Transcript()
        with pytest.raises(ConnectionClosed) as closed:
            await receive_until(ws, transcript, lambda f: False, limit_s=60)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011, closed.value
    assert closed.value.rcvd.reason.startswith("internal_error: ")
    assert any(kind == "audio" for kind, _ in transcript.frames)
    assert [f["code"] for f in transcript.json_frames("error")] == ["internal_error"]
