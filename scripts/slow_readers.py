"""The slow-reader attack (issue 41), for `make soak`: against a `serve` with N stream slots, N clients each take a
stream and read it at a fifth of real time, WebSocket sessions in one round (μ-law, 32 utterances of 4,900
characters queued, read at 1,500 B/s) and HTTP syntheses in the next (`POST /v1/audio/speech`, 4,900 characters of
mp3, read at 400 B/s). Meanwhile honest sessions arrive one at a time, and each must hear its first audio within
the documented wait (`KOKORO_MAX_FIRST_AUDIO_WAIT_S`). Then the slow readers are accounted for: a session cancels
what is left and every utterance it sent must have ended with a frame (spoken, refused, stopped: a slow_reader
error is how it is told), and an HTTP body, read on at full speed, must end: whole (its stream lent its slot while
its client held plenty, and took one back to finish) or visibly cut off (no last chunk). The server's log must hold
no ERROR line.

    python -m scripts.slow_readers [--slots 2] [--probes 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kokoro_client import protocol
from kokoro_client.local_ws import ws_url
from kokoro_client.protocol import Cancel, Cancelled, Config, Error, SynthesisComplete, Synthesize
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from scripts.servers import free_port, serve_command, started, wait_ready

LONG = ("The attacker's utterance goes on and on, one sentence after another, to hold its stream. " * 60)[:4900]
HONEST = "Hello, how can I help you today?"
WS_READ_BPS = 1_500  # a fifth of μ-law's 8,000 B/s
HTTP_READ_BPS = 400
QUEUED = 32
LEAD_IN_S = 5.0  # the slow readers take every slot before the first honest session
PROBE_GAP_S = 2.0
DRAIN_S = 60.0  # how long a slow reader reads at full speed at the end, to see how its stream ended
HTTP_DRAIN_S = 240.0  # a body holds minutes of audio, made at a few times real time beside the other reader's


@dataclass
class Round:
    transport: str
    readers: int
    probes_first_audio_s: list[float | None] = field(default_factory=list)  # None: refused, or no audio
    served_within_wait: int = 0
    ends: dict[str, int] = field(default_factory=dict)  # how the slow readers' utterances (or bodies) ended
    silently_cut: int = 0  # utterances with no end frame, HTTP bodies short but looking whole


@dataclass
class SlowReaders:
    slots: int
    wait_s: float
    rounds: list[Round] = field(default_factory=list)
    error_lines: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        found = []
        for r in self.rounds:
            tries = len(r.probes_first_audio_s)
            if r.served_within_wait < 0.9 * tries:
                found.append(
                    f"{r.transport}: {r.served_within_wait} of {tries} honest sessions heard audio within "
                    f"{self.wait_s:g} s beside {r.readers} slow readers"
                )
            if r.silently_cut:
                found.append(f"{r.transport}: {r.silently_cut} slow readers' utterances cut without a word")
            if r.ends.get("still streaming"):
                found.append(f"{r.transport}: {r.ends['still streaming']} bodies not ended {HTTP_DRAIN_S:g} s later")
        if self.error_lines:
            found.append(f"{len(self.error_lines)} ERROR lines in the server's log: {self.error_lines[:2]}")
        return found


async def honest_first_audio(url: str, within_s: float) -> float | None:
    """An honest session's first audio (s after its text left), or None if refused; it then hangs up."""
    async with connect(url) as ws:
        sent = time.monotonic()
        await ws.send(protocol.encode(Synthesize(HONEST, "honest")))
        async with asyncio.timeout(within_s + 60):
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    return time.monotonic() - sent
                if isinstance(protocol.parse_server_frame(message), Error):
                    return None


async def ws_slow_reader(url: str, stop: asyncio.Event, ends: Counter[str]) -> int:
    """One slow session; returns how many of its utterances ended without a frame."""
    async with connect(url, max_queue=1) as ws:
        await ws.send(protocol.encode(Config(format="mulaw")))
        ids = {f"s{n}" for n in range(QUEUED)}
        for utterance_id in sorted(ids):
            await ws.send(protocol.encode(Synthesize(LONG, utterance_id)))
        ended: set[str] = set()

        def note(message: str | bytes) -> None:
            frame = protocol.parse_server_frame(message) if isinstance(message, str) else None
            if isinstance(frame, SynthesisComplete | Cancelled | Error) and frame.id in ids:
                assert frame.id is not None
                ended.add(frame.id)
                if isinstance(frame, Error):
                    ends[f"error {frame.code}"] += 1
                else:
                    ends["synthesis_complete" if isinstance(frame, SynthesisComplete) else "cancelled"] += 1

        while not stop.is_set():
            try:  # once caught with nothing left queued, nothing more comes until it sends
                async with asyncio.timeout(1.0):
                    message = await ws.recv()
            except TimeoutError:
                continue
            note(message)
            await asyncio.sleep(len(message) / WS_READ_BPS)
        await ws.send(protocol.encode(Cancel()))
        try:
            async with asyncio.timeout(DRAIN_S):
                while ended != ids:
                    note(await ws.recv())
        except (TimeoutError, ConnectionClosed):
            pass
        return len(ids - ended)


def http_slow_reader(port: int, stop: asyncio.Event, ends: Counter[str]) -> int:
    """One slow HTTP synthesis (blocking: a thread's); how it ended goes into ``ends``. Returns 0: a body cannot end
    short and look whole (a cut one has no last chunk)."""
    body = json.dumps({"model": "tts-1", "voice": "alloy", "input": LONG, "response_format": "mp3"}).encode()
    head = (
        f"POST /v1/audio/speech HTTP/1.1\r\nhost: soak\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    data = bytearray()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head + body)
        sock.settimeout(DRAIN_S)
        while not stop.is_set():
            part = sock.recv(HTTP_READ_BPS)
            if not part:
                break
            data += part
            time.sleep(1.0)
        deadline = time.monotonic() + HTTP_DRAIN_S
        try:
            while time.monotonic() < deadline and (part := sock.recv(65536)):
                data += part
        except TimeoutError:
            pass
        if part and time.monotonic() >= deadline:
            ends["still streaming"] += 1
            return 0
    whole = data.endswith(b"\r\n0\r\n\r\n")
    ends["whole" if whole else "cut off"] += 1
    return 0


async def attack_round(base_url: str, port: int, transport: str, readers: int, probes: int, wait_s: float) -> Round:
    result, stop, ends = Round(transport, readers), asyncio.Event(), Counter[str]()
    url = ws_url(base_url)
    if transport == "ws":
        attackers = [asyncio.create_task(ws_slow_reader(url, stop, ends)) for _ in range(readers)]
    else:
        attackers = [asyncio.create_task(asyncio.to_thread(http_slow_reader, port, stop, ends)) for _ in range(readers)]
    await asyncio.sleep(LEAD_IN_S)
    try:
        for _ in range(probes):
            first = await honest_first_audio(url, wait_s)
            result.probes_first_audio_s.append(None if first is None else round(first, 2))
            result.served_within_wait += first is not None and first <= wait_s
            await asyncio.sleep(PROBE_GAP_S)
    finally:
        stop.set()
        cut = await asyncio.gather(*attackers, return_exceptions=True)
    result.silently_cut = sum(c for c in cut if isinstance(c, int))
    result.ends = dict(ends) | {f"failed: {type(c).__name__}": 1 for c in cut if isinstance(c, BaseException)}
    return result


def run(model_dir: Path, slots: int, probes: int, log_path: Path) -> SlowReaders:
    port = free_port()
    env = {**os.environ, "PORT": str(port), "KOKORO_MODEL_DIR": str(model_dir), "KOKORO_STREAMS": str(slots)}
    env.pop("HOST", None)
    wait_s = float(env.get("KOKORO_MAX_FIRST_AUDIO_WAIT_S") or 4.0)
    base_url = f"http://127.0.0.1:{port}"
    report = SlowReaders(slots, wait_s)
    with log_path.open("wb") as log, started(serve_command(), env, output=log, stop_timeout_s=30) as process:
        wait_ready(base_url, process, timeout_s=600)

        async def rounds() -> None:
            for transport in ("ws", "http"):
                report.rounds.append(await attack_round(base_url, port, transport, slots, probes, wait_s))

        asyncio.run(rounds())
    report.error_lines = [line for line in log_path.read_text(errors="replace").splitlines() if " ERROR " in line]
    return report


def report_dict(report: SlowReaders) -> dict[str, Any]:
    return asdict(report) | {"problems": report.problems()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", type=int, default=2, help="the server's stream slots, and the slow readers")
    parser.add_argument("--probes", type=int, default=10, help="honest sessions per round")
    parser.add_argument("--model-dir", type=Path, default=Path(os.environ.get("KOKORO_MODEL_DIR", "models/kokoro")))
    parser.add_argument("--log", type=Path, default=Path("out/slow-readers-server.log"))
    args = parser.parse_args()
    args.log.parent.mkdir(parents=True, exist_ok=True)
    report = run(args.model_dir, args.slots, args.probes, args.log)
    print(json.dumps(report_dict(report), indent=2))
    raise SystemExit(1 if report.problems() else 0)


if __name__ == "__main__":
    main()
