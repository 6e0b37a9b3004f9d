"""The first-piece policy measured: ``python -m scripts.bench.first_piece [--trials N] [--out FILE]``.

Replies are sent to the bidirectional session as an LLM writes them (``append`` per token, the scripted model's
tokenizer: sub-word pieces, punctuation alone; steady gaps with ±30 % jitter, seeded), at 6, 15 and 60 tokens per
second, then ``flush``. Two real servers run side by side, each idle while the other is measured, trial by trial
interleaved: as shipped (``KOKORO_FIRST_PIECE_MS`` default: the policy) and sentence by sentence
(``KOKORO_FIRST_PIECE_MS=0``). Per run: the first audio after the first token, the silence a player starting then
hears before the end (``underruns``), and the whole reply's word error rate by Whisper base (scripts/listener.py)
and, where ``distillmos`` is installed, its DistillMOS.

Then the cuts alone, without the noise of windowed decoding: for each of many short replies (``CUT_REPLIES``), the
pieces the policy makes of it at 6 tokens per second and its sentences, each piece synthesized whole
(``KOKORO_WINDOWED=0``, the same audio every run), heard by Whisper and scored by DistillMOS side by side.

Writes bench/results/first_piece.json (docs/engine.md quotes it); absolute times depend on the machine and its load:
compare the two servers within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from kokoro_client.audio import BYTES_PER_SECOND, SAMPLE_RATE
from kokoro_client.local_ws import ws_url
from kokoro_client.protocol import Append, Flush, SynthesisComplete, encode, parse_server_frame
from kokoro_tts.text.fragments import EarlyCut, FragmentBuffer, TextPiece
from voice_agent.scripted_model import DEFAULT_REPLY, tokenize
from websockets.asyncio.client import connect

from scripts.listener import WhisperListener, word_errors

from .client import REPO, local_server, machine, underruns
from .texts import FIRST_PIECE_REPLY, REPLY, SEGMENTS

REPLIES = {"35-token first sentence": FIRST_PIECE_REPLY, "scripted default": DEFAULT_REPLY, "customer reply": REPLY}
QUICK = ("35-token first sentence", "scripted default")  # --quick: a loaded 2-core machine's half hour
RATES = (6.0, 15.0, 60.0)
SERVERS = {"policy": {}, "sentences": {"KOKORO_FIRST_PIECE_MS": "0"}}
JITTER = 0.3
# Two sentences each: the transport texts paired, the 35-token first sentence's reply and the customer reply.
CUT_REPLIES = (*(f"{a} {b}" for a, b in zip(SEGMENTS[::2], SEGMENTS[1::2], strict=True)), FIRST_PIECE_REPLY, REPLY)
CUT_RATE = 6.0
SHIPPED = EarlyCut(0.6)  # KOKORO_FIRST_PIECE_MS's default


class ManualClock:
    """A clock that stands where it is set: a ``FragmentBuffer``'s, to replay a stream's timing."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cut_as_streamed(fragments: list[str], tokens_per_s: float, early: EarlyCut | None) -> list[tuple[float, TextPiece]]:
    """The pieces a session makes of ``fragments`` arriving one every 1/``tokens_per_s`` s, each with when it was
    cut: its buffer is woken at its ``due`` between fragments, as a session's timer wakes it."""
    clock = ManualClock()
    buffer = FragmentBuffer(early, clock)
    out: list[tuple[float, TextPiece]] = []
    for i, fragment in enumerate(fragments):
        arrives = i / tokens_per_s
        while (due := buffer.due) is not None and due <= arrives:
            clock.now = max(clock.now, due)
            pieces = buffer.cut()
            out += [(clock.now, piece) for piece in pieces]
            if not pieces:
                break  # too few whole words yet: the next fragment decides
        clock.now = arrives
        out += [(clock.now, piece) for piece in buffer.append(fragment)]
    return out + [(clock.now, piece) for piece in buffer.end()]


async def _stream(url: str, reply: str, tokens_per_s: float, rng: random.Random) -> dict[str, Any]:
    """One reply appended token by token; its first audio, silences and audio."""
    audio, arrivals = bytearray(), []  # (ms since the first token, ms of audio) per audio frame
    async with connect(ws_url(url)) as ws:
        started = time.perf_counter()

        async def send() -> None:
            at = 0.0
            for token in tokenize(reply):
                await asyncio.sleep(max(0.0, started + at - time.perf_counter()))
                await ws.send(encode(Append(token, id="r")))
                at += rng.uniform(1 - JITTER, 1 + JITTER) / tokens_per_s
            await ws.send(encode(Flush()))

        sender = asyncio.create_task(send())
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                arrivals.append((1000 * (time.perf_counter() - started), 1000 * len(message) / BYTES_PER_SECOND))
                audio += message
            elif isinstance(parse_server_frame(message), SynthesisComplete):
                break
            elif json.loads(message).get("type") == "error":
                raise RuntimeError(f"the server refused: {message}")
        await sender
    pcm = np.frombuffer(bytes(audio), dtype="<i2")
    return {"first_audio_ms": arrivals[0][0], "silence_ms": underruns(arrivals)[1], "pcm": pcm}


def _mos_scorer() -> Any:
    """DistillMOS on 16 kHz audio, or None where ``distillmos`` is not installed."""
    try:
        import distillmos
        import torch
    except ImportError:
        return None
    model = distillmos.ConvTransformerSQAModel()
    model.eval()

    def score(pcm: np.ndarray) -> float:
        from scripts.speech import resample_16k

        wave = torch.from_numpy(resample_16k(pcm, SAMPLE_RATE).astype(np.float32) / 32768.0)[None, :]
        with torch.no_grad():
            return float(model(wave).item())

    return score


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    edits = sum(r["edits"] for r in runs)
    words = sum(r["words"] for r in runs)
    mos = [r["mos"] for r in runs if r["mos"] is not None]
    return {
        "first_audio_ms": round(statistics.median(r["first_audio_ms"] for r in runs), 1),
        "silence_ms": round(statistics.median(r["silence_ms"] for r in runs), 1),
        "wer": round(edits / words, 4),
        "distillmos": round(statistics.mean(mos), 3) if mos else None,
        "trials": len(runs),
    }


def _paired(policy: list[dict[str, Any]], sentences: list[dict[str, Any]]) -> dict[str, Any] | None:
    """DistillMOS of the policy minus sentence by sentence, trial by trial: mean, spread, standard error."""
    differences = [p["mos"] - s["mos"] for p, s in zip(policy, sentences, strict=True) if p["mos"] and s["mos"]]
    if len(differences) < 2:
        return None
    spread = statistics.stdev(differences)
    return {
        "mean": round(statistics.mean(differences), 3),
        "stdev": round(spread, 3),
        "standard_error": round(spread / len(differences) ** 0.5, 3),
        "trials": len(differences),
    }


def cuts_alone(listener: WhisperListener, mos: Any) -> dict[str, Any]:
    """Each of ``CUT_REPLIES`` as the policy cuts it at ``CUT_RATE`` and as sentences, synthesized piece by piece
    whole: Whisper's edits and DistillMOS of both."""
    rows = []
    with local_server(env={"KOKORO_WINDOWED": "0"}) as url, httpx.Client(timeout=120) as client:

        def spoken(pieces: list[str]) -> dict[str, Any]:
            audio = []
            for text in pieces:
                response = client.post(f"{url}/invocations", json={"text": text, "format": "pcm"})
                response.raise_for_status()
                audio.append(np.frombuffer(response.content, dtype="<i2"))
            pcm = np.concatenate(audio)
            edits, _ = word_errors(" ".join(pieces), listener.transcribe(pcm))
            return {"pieces": pieces, "edits": edits, "mos": mos(pcm) if mos else None}

        for reply in CUT_REPLIES:
            row = {
                server: spoken([piece.text for _, piece in cut_as_streamed(tokenize(reply), CUT_RATE, early)])
                for server, early in (("policy", SHIPPED), ("sentences", None))
            }
            rows.append(row)
            print("cuts", " / ".join(row["policy"]["pieces"]), {k: (v["edits"], v["mos"]) for k, v in row.items()})
    summary: dict[str, Any] = {
        server: {"edits": sum(row[server]["edits"] for row in rows)} for server in ("policy", "sentences")
    }
    if mos:
        differences = [row["policy"]["mos"] - row["sentences"]["mos"] for row in rows]
        summary["mos_difference"] = {
            "mean": round(statistics.mean(differences), 3),
            "median": round(statistics.median(differences), 3),
            "stdev": round(statistics.stdev(differences), 3),
        }
    return {"tokens_per_s": CUT_RATE, "summary": summary, "replies": rows}


async def run(
    trials: int, replies: dict[str, str], rates: tuple[float, ...] = RATES, cuts: bool = True
) -> dict[str, Any]:
    listener, mos = WhisperListener.shared(), _mos_scorer()
    rng = random.Random(36)
    results: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    with local_server(env=SERVERS["policy"]) as policy, local_server(env=SERVERS["sentences"]) as sentences:
        urls = {"policy": policy, "sentences": sentences}
        for name, reply in replies.items():
            for rate in rates:
                cell = results.setdefault(name, {}).setdefault(f"{rate:g}", {"policy": [], "sentences": []})
                for _ in range(trials):
                    seed = rng.random()
                    for server, url in urls.items():  # the same jitter for both, one after the other
                        run_ = await _stream(url, reply, rate, random.Random(seed))
                        pcm = run_.pop("pcm")
                        heard = listener.transcribe(pcm)
                        edits, words = word_errors(reply, heard)
                        run_.update(edits=edits, words=words, mos=mos(pcm) if mos else None)
                        if edits:  # what was misheard, to tell the policy's cut from the listener's noise
                            run_["heard"] = heard
                        cell[server].append(run_)
                        print(name, rate, server, {k: v for k, v in run_.items()}, flush=True)
    table = {
        name: {rate: {server: _summary(runs) for server, runs in cell.items()} for rate, cell in by_rate.items()}
        for name, by_rate in results.items()
    }
    # Each trial streams the same reply with the same jitter to both servers: the per-trial difference is the
    # policy's effect with the windowed decoding's run-to-run noise in it, and its spread says how much that is.
    paired = {
        name: {rate: _paired(cell["policy"], cell["sentences"]) for rate, cell in by_rate.items()}
        for name, by_rate in results.items()
    }
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "about": __doc__,
        "jitter": JITTER,
        "servers": SERVERS,
        "results": table,
        "paired_mos_difference": paired,
        "runs": results,
        "cuts": cuts_alone(listener, mos) if cuts else None,
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "| reply | tokens/s | first audio, policy | first audio, sentences | silence after it, policy | sentences "
        "| WER policy | WER sentences | DistillMOS policy | DistillMOS sentences |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, by_rate in report["results"].items():
        for rate, cell in by_rate.items():
            p, s = cell["policy"], cell["sentences"]

            def mos(x: dict[str, Any]) -> str:
                return "n/a" if x["distillmos"] is None else f"{x['distillmos']:.2f}"

            lines.append(
                f"| {name} | {rate} | {p['first_audio_ms']:.0f} ms | {s['first_audio_ms']:.0f} ms "
                f"| {p['silence_ms']:.0f} ms | {s['silence_ms']:.0f} ms | {100 * p['wer']:.1f} % "
                f"| {100 * s['wer']:.1f} % | {mos(p)} | {mos(s)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help=f"one trial of {' and '.join(QUICK)} only")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "first_piece.json")
    parser.add_argument(
        "--only", metavar="REPLY@RATE", help=f"one cell, more trials, no cut study (e.g. '{QUICK[0]}@6'); --out apart"
    )
    args = parser.parse_args()
    if args.only:
        name, _, rate = args.only.rpartition("@")
        if name not in REPLIES or not rate.replace(".", "", 1).isdigit():
            parser.error(f"--only takes REPLY@RATE, REPLY one of: {', '.join(REPLIES)}")
        report = asyncio.run(run(args.trials, {name: REPLIES[name]}, (float(rate),), cuts=False))
    else:
        replies = {name: REPLIES[name] for name in QUICK} if args.quick else REPLIES
        report = asyncio.run(run(1 if args.quick else args.trials, replies))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    print(report["machine"])


if __name__ == "__main__":
    main()
