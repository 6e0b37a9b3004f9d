"""A small test client for the session protocol: collects each utterance's frames in arrival order."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kokoro_client.protocol import Cancelled, Error, SynthesisComplete, SynthesisStart, server_frame
from kokoro_client.utterances import UtteranceReader
from websockets.asyncio.client import ClientConnection


@dataclass
class Utterance:
    id: str
    start: dict[str, Any] | None = None
    complete: dict[str, Any] | None = None
    audio: bytearray = field(default_factory=bytearray)

    def pcm(self) -> np.ndarray:
        return np.frombuffer(bytes(self.audio), dtype="<i2")


@dataclass
class Transcript:
    """Every frame received, in order: ("audio", bytes) or ("json", dict)."""

    frames: list[tuple[str, Any]] = field(default_factory=list)

    def json_frames(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [f for k, f in self.frames if k == "json" and (kind is None or f["type"] == kind)]

    def utterances(self) -> dict[str, Utterance]:
        """Audio is attributed to the utterance whose synthesis_start came last."""
        result: dict[str, Utterance] = {}
        reader = UtteranceReader()
        for kind, frame in self.frames:
            if kind == "audio":
                result[reader.audio(frame).id].audio += frame
                continue
            typed = reader.frame(server_frame(frame))
            if isinstance(typed, SynthesisStart):
                result.setdefault(typed.id, Utterance(typed.id)).start = frame
            elif isinstance(typed, SynthesisComplete):
                result[typed.id].complete = frame
        return result


async def receive_until(ws: ClientConnection, transcript: Transcript, done: Any, limit_s: float = 120.0) -> None:
    """Receive frames into ``transcript`` until ``done(frame)`` is true for a JSON frame."""

    async with asyncio.timeout(limit_s):
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                transcript.frames.append(("audio", message))
                continue
            frame = json.loads(message)
            transcript.frames.append(("json", frame))
            if done(frame):
                return


async def first_audio(ws: ClientConnection, transcript: Transcript, limit_s: float = 120.0) -> float:
    """Receive into ``transcript`` until the first binary frame; when it arrived (monotonic: the clock of the server's
    loop and scheduler, in-process)."""
    async with asyncio.timeout(limit_s):
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                transcript.frames.append(("audio", message))
                return time.monotonic()
            transcript.frames.append(("json", json.loads(message)))


def completes(n: int) -> Any:
    """A ``done`` predicate: true once ``n`` utterances have ended (complete, cancelled or error with id)."""
    seen: set[str] = set()

    def done(frame: dict[str, Any]) -> bool:
        typed = server_frame(frame)
        if isinstance(typed, SynthesisComplete | Cancelled | Error) and typed.id is not None:
            seen.add(typed.id)
        return len(seen) >= n

    return done


async def assert_synthesis_stopped(scheduler: Any, started: int) -> None:
    """After a client left (``started``: the scheduler's job count then), no job starts beyond the one in flight and
    the look-ahead (the next window, or the next sentence's phonemes and first window)."""
    await asyncio.sleep(3.0)  # time for several more sentences, had synthesis gone on
    settled = scheduler.started
    await asyncio.sleep(2.0)
    assert scheduler.started == settled, "synthesis continued after the client left"
    assert settled - started <= 3, "more jobs than the one in flight and the look-ahead"
