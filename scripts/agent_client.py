"""A client of the agent app: invoke one (a URL or a deployed AgentCore runtime) in both modes and compare.

    python -m scripts.agent_client (--url URL | --arn ARN) [--prompt P] [--trials N] [--mode M] [--out DIR]

The demo (scripts/demo.py), the deployed bench and the deploy's smoke test use its trials.

The demo times each invocation from the client's side (request sent → first audio_chunk received), which is
what a caller hears; the agent's own metrics (agent_end) are shown next to it. Its WAVs are what a caller hears
from the moment the request was sent: silence for the measured wait, each chunk played from when it arrived.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import base64
import contextlib
import json
import math
import statistics
import sys
import time
import uuid
import wave
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kokoro_client.audio import SAMPLE_RATE

from .sse import iter_sse_json, post_sse

DEFAULT_PROMPT = "Explain in a few sentences why streaming speech makes a voice assistant feel faster."

Invoker = Callable[[dict[str, Any]], AsyncIterator[dict[str, Any]]]


@dataclass
class Trial:
    mode: str
    events: list[dict[str, Any]] = field(default_factory=list)
    first_audio_s: float | None = None  # client side: request sent → first audio_chunk
    total_s: float = 0.0
    pcm: bytearray = field(default_factory=bytearray)
    sample_rate: int = SAMPLE_RATE
    audio_format: str = "pcm"
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # per audio_chunk: (s since sent, offset in pcm)

    @property
    def error(self) -> dict[str, Any] | None:
        for event in self.events:
            if event.get("type") == "error" or ("error" in event and "type" not in event):
                return event
        return None

    @property
    def metrics(self) -> dict[str, Any]:
        for event in self.events:
            if event.get("type") == "agent_end":
                return dict(event.get("metrics") or {})
        return {}

    @property
    def model(self) -> str:
        return next((str(e.get("model")) for e in self.events if e.get("type") == "agent_start"), "?")

    @property
    def text(self) -> str:
        return "".join(e.get("text", "") for e in self.events if e.get("type") == "text_delta")

    @property
    def audio_s(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate if self.audio_format == "pcm" else 0.0

    def as_heard(self) -> tuple[bytes, list[tuple[float, float]]]:
        """The audio as a caller hears it, from the moment the request was sent: silence until the first chunk
        arrived (the measured wait), then each chunk from when it arrived or the one before it ended, whichever is
        later. Returns the 16-bit PCM and the underruns: (when, how long) in s, where the audio ran out before the
        next chunk came."""
        out = bytearray()
        underruns: list[tuple[float, float]] = []
        bounds = [offset // 2 for _, offset in self.arrivals] + [len(self.pcm) // 2]
        for (arrived, _), start, end in zip(self.arrivals, bounds, bounds[1:], strict=False):
            due, played = round(arrived * self.sample_rate), len(out) // 2
            if due > played:
                if played:
                    underruns.append((played / self.sample_rate, (due - played) / self.sample_rate))
                out += bytes(2 * (due - played))
            out += self.pcm[2 * start : 2 * end]
        return bytes(out), underruns


def url_invoker(url: str, *, timeout_s: float = 120.0) -> Invoker:
    endpoint = url.rstrip("/")
    endpoint = endpoint if endpoint.endswith("/invocations") else endpoint + "/invocations"

    def invoke(payload: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        return post_sse(endpoint, payload, timeout_s=timeout_s)

    return invoke


def arn_invoker(
    arn: str, *, region: str | None = None, qualifier: str | None = None, session_id: str | None = None
) -> Invoker:
    """A deployed AgentCore runtime, through boto3's bedrock-agentcore InvokeAgentRuntime (a streamed SSE body).
    Every call opens a new runtime session (a new microVM) unless ``session_id`` (>= 33 characters) is given."""
    import boto3
    from kokoro_client.sagemaker_batch import aiter_blocking

    # The runtime's region is in its ARN: arn:aws:bedrock-agentcore:REGION:ACCOUNT:runtime/NAME
    region = region or (arn.split(":")[3] if arn.count(":") >= 5 else None)
    client = boto3.client("bedrock-agentcore", region_name=region)

    async def invoke(payload: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        def open_stream() -> tuple[Iterable[bytes], Callable[[], None]]:
            kwargs: dict[str, Any] = {
                "agentRuntimeArn": arn,
                "runtimeSessionId": session_id or f"voice-agent-demo-{uuid.uuid4()}",  # >= 33 characters
                "payload": json.dumps(payload).encode("utf-8"),
                "contentType": "application/json",
                "accept": "text/event-stream",
            }
            if qualifier:
                kwargs["qualifier"] = qualifier
            body = client.invoke_agent_runtime(**kwargs)["response"]
            return body.iter_chunks(chunk_size=16 * 1024), body.close

        async with contextlib.aclosing(aiter_blocking(open_stream)) as chunks:
            async for event in iter_sse_json(chunks):
                yield event

    return invoke


async def run_trial(invoke: Invoker, payload: dict[str, Any]) -> Trial:
    trial = Trial(mode=str(payload.get("mode", "bidi")))
    start = time.perf_counter()
    try:
        async for event in invoke(payload):
            trial.events.append(event)
            if event.get("type") != "audio_chunk":
                continue
            arrived = time.perf_counter() - start
            if trial.first_audio_s is None:
                trial.first_audio_s = arrived
                trial.sample_rate = int(event.get("sample_rate", trial.sample_rate))
                trial.audio_format = str(event.get("format", "pcm"))
            trial.arrivals.append((arrived, len(trial.pcm)))
            trial.pcm += base64.b64decode(event["audio"])
    except Exception as exc:  # a transport failure is a result too: report it like an error event
        trial.events.append({"type": "error", "code": "client_error", "message": f"{type(exc).__name__}: {exc}"})
    trial.total_s = time.perf_counter() - start
    return trial


def write_wav(path: Path, pcm: bytes, sample_rate: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm)


def with_beep(pcm: bytes, sample_rate: int, hz: float = 880.0, seconds: float = 0.12) -> bytes:
    """``pcm`` with a short tone mixed into its first ``seconds``: "the request is sent now"."""
    samples = array.array("h", pcm[: len(pcm) - len(pcm) % 2])
    n = int(seconds * sample_rate)
    samples.extend([0] * max(0, n - len(samples)))
    for i in range(n):
        fade = min(1.0, i / 120, (n - i) / 120)  # 5 ms ramps: no click
        tone = 0.3 * 32767 * fade * math.sin(2 * math.pi * hz * i / sample_rate)
        samples[i] = max(-32768, min(32767, samples[i] + int(tone)))
    return samples.tobytes()


def write_heard(out: Path, trials: list[Trial]) -> list[str]:
    """OUT/demo-<mode>.wav (the last good trial of each mode, as heard) and, with both modes, OUT/demo-compare.wav:
    bidi, a pause, then batch, each starting with a beep at the moment its request was sent. One after the other,
    not left and right: a phone or laptop speaker mixes stereo into two voices talking at once."""
    lines, heard, rate = [], {}, SAMPLE_RATE
    for mode in ("bidi", "batch"):
        good = [t for t in trials if t.mode == mode and not t.error and t.audio_format == "pcm" and t.pcm]
        if not good:
            continue
        trial = good[-1]
        pcm, underruns = trial.as_heard()
        heard[mode], rate = pcm, trial.sample_rate
        path = out / f"demo-{mode}.wav"
        write_wav(path, pcm, trial.sample_rate)
        gaps = (
            f"{len(underruns)} underrun(s), {sum(g for _, g in underruns):.1f} s of silence in all"
            if underruns
            else "no underruns"
        )
        lines.append(
            f"{mode:5} as heard: {path} ({len(pcm) / 2 / trial.sample_rate:.1f} s: "
            f"{trial.first_audio_s or 0:.2f} s of silence while waiting, then {trial.audio_s:.1f} s of speech; {gaps})"
        )
    if len(heard) == 2:
        pause = bytes(2 * int(1.5 * rate))
        path = out / "demo-compare.wav"
        write_wav(path, with_beep(heard["bidi"], rate) + pause + with_beep(heard["batch"], rate), rate)
        lines.append(f"side by side: {path} (bidi, then batch; each starts with a beep when its request was sent)")
    return lines


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:7.0f} ms"


def describe(trial: Trial) -> str:
    if trial.error:
        error = trial.error
        return f"{trial.mode:5}  ERROR {error.get('code', error.get('error_type'))}: {error.get('message')}"
    m = trial.metrics
    return (
        f"{trial.mode:5}  first audio {_ms(trial.first_audio_s)} (agent {m.get('first_audio_ms')} ms)  "
        f"LLM done {m.get('text_done_ms')} ms  total {_ms(trial.total_s)}  audio {trial.audio_s:.1f} s"
    )


def summarize(trials: list[Trial]) -> list[str]:
    lines, means = [], {}
    for mode in ("bidi", "batch"):
        values = [t.first_audio_s * 1000 for t in trials if t.mode == mode and t.first_audio_s and not t.error]
        if not values:
            continue
        means[mode] = statistics.fmean(values)
        spread = f" ± {statistics.stdev(values):.0f} (sd)" if len(values) > 1 else ""
        lines.append(
            f"{mode:5}  time to first audio: mean {means[mode]:.0f} ms{spread}, "
            f"min {min(values):.0f}, max {max(values):.0f}, n={len(values)}"
        )
    if "bidi" in means and "batch" in means:
        lines.append(f"batch / bidi = {means['batch'] / means['bidi']:.1f}x sooner first audio with bidi")
    return lines


async def collect(invoke: Invoker, args: argparse.Namespace) -> list[Trial]:
    modes = ["bidi", "batch"] if args.mode == "both" else [args.mode]
    trials: list[Trial] = []
    for n in range(args.trials):
        for mode in modes:  # interleaved, so drift (a cold start, a noisy neighbour) hits both modes alike
            payload: dict[str, Any] = {"prompt": args.prompt, "mode": mode}
            if args.voice:
                payload["voice"] = args.voice
            if args.speed:
                payload["speed"] = args.speed
            trial = await run_trial(invoke, payload)
            trials.append(trial)
            if not n and mode == modes[0]:
                print(f"model: {trial.model}")
            print(f"[{n + 1}/{args.trials}] {describe(trial)}", flush=True)
    return trials


def report(trials: list[Trial], out: str | None) -> int:
    """Print the summary, write the WAVs as heard (write_heard); 1 if any trial failed."""
    for line in summarize(trials):
        print(line)
    if out:
        for line in write_heard(Path(out).resolve(), trials):
            print(line)
    return 1 if any(t.error for t in trials) else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scripts.agent_client", description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="the agent's base URL, e.g. http://127.0.0.1:8081")
    target.add_argument("--arn", help="a deployed AgentCore runtime's ARN (boto3, default credentials)")
    parser.add_argument("--qualifier", help="the runtime endpoint (with --arn)")
    parser.add_argument("--region", help="with --arn; defaults to the ARN's region")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--mode", choices=("bidi", "batch", "both"), default="both")
    parser.add_argument("--voice")
    parser.add_argument("--speed", type=float)
    parser.add_argument("--out", help="write OUT/demo-<mode>.wav as heard (from the request on) and demo-compare.wav")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each event (--url)")
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    invoke = (
        url_invoker(args.url, timeout_s=args.timeout)
        if args.url
        else arn_invoker(args.arn, region=args.region, qualifier=args.qualifier)
    )
    sys.exit(report(asyncio.run(collect(invoke, args)), args.out))


if __name__ == "__main__":
    main()
