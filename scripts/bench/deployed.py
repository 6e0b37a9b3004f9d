"""--target deployed: the endpoint and runtime from Terraform's outputs, and the measurements over AWS.

Only what needs the deployment is measured there: isolated_tts over the bidirectional stream (a, b) and the
response stream (c), and end_to_end through the deployed agent itself: InvokeAgentRuntime on the AgentCore
runtime, bidi and batch interleaved, timed from this client (request sent → first audio_chunk), with Bedrock as
the LLM. The AWS transports are imported only in this mode: they pull in the AWS SDK.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from .client import Sample, pct
from .isolated import summarize
from .report import Row, Section
from .texts import FIRST_SENTENCE, REPLY, SEED_BIDI_SPEEDUP

RUNTIME_PROMPT = "Where is my order, and when will it arrive?"

TERRAFORM_DIR = "terraform/deployment"


@dataclass(frozen=True)
class Deployment:
    endpoint_name: str
    region: str
    agent_runtime_arn: str | None


def read_deployment(chdir: str = TERRAFORM_DIR) -> Deployment:
    """Terraform's outputs, or SystemExit saying what is missing (nothing here deploys anything)."""
    command = ["terraform", f"-chdir={chdir}", "output", "-json", "-no-color"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except FileNotFoundError:
        raise SystemExit("--target deployed needs terraform on PATH to read the deployment's outputs") from None
    except subprocess.TimeoutExpired:
        raise SystemExit(f"`{' '.join(command)}` did not answer within 120 s") from None
    if result.returncode != 0:
        error = result.stderr[result.stderr.find("Error:") :] if "Error:" in result.stderr else result.stderr
        raise SystemExit(f"not deployed (or terraform not initialised): `{' '.join(command)}` failed:\n{error.strip()}")
    outputs: dict[str, Any] = json.loads(result.stdout or "{}")

    def value(name: str) -> str | None:
        found = outputs.get(name, {}).get("value")
        return str(found) if found else None

    endpoint = value("endpoint_name")
    if not endpoint:
        raise SystemExit(f"not deployed: {chdir} has no endpoint_name output (deploy first, then rerun)")
    # The endpoint ARN names its region: arn:aws:sagemaker:REGION:ACCOUNT:endpoint/NAME.
    arn = value("endpoint_arn") or ""
    region = arn.split(":")[3] if arn.count(":") >= 5 else os.environ.get("AWS_REGION", "")
    if not region:
        raise SystemExit("cannot tell the endpoint's region: no endpoint_arn output and AWS_REGION is not set")
    return Deployment(endpoint, region, value("agent_runtime_arn"))


def recorded_failure(
    measure: Callable[[Deployment, int], Awaitable[Section]],
) -> Callable[[Deployment, int], Awaitable[Section]]:
    """A section that fails (AccessDenied, a throttle, a dropped stream) says why in its own data; the bench still
    writes every other section."""

    @wraps(measure)
    async def measured(deployment: Deployment, trials: int) -> Section:
        try:
            return await measure(deployment, trials)
        except Exception as e:  # whatever AWS or the network raised, recorded for this section only
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}".rstrip(": ")
            return Section(f"not measured: {reason}", {"measured": False, "reason": reason})

    return measured


def bench_session_id() -> str:
    """One AgentCore runtime session for the whole bench: its trials measure a warm microVM, not a cold start each
    (botocore: runtimeSessionId is 33 to 256 characters)."""
    return f"kokoro-tts-bench-{uuid.uuid4()}"


def stop_session(arn: str, session_id: str) -> str | None:
    """StopRuntimeSession, so the bench leaves no idle session billed behind; the error, if any, as text."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    region = arn.split(":")[3] if arn.count(":") >= 5 else None
    factory: Any = boto3.client  # boto3's stubs only know the services whose stubs are installed
    try:
        factory("bedrock-agentcore", region_name=region).stop_runtime_session(
            agentRuntimeArn=arn, runtimeSessionId=session_id
        )
    except (BotoCoreError, ClientError) as e:
        return f"{type(e).__name__}: {e}"
    return None


async def bidi_once(transport: Any, text: str) -> Sample:
    """One utterance on a fresh bidirectional stream; the clock starts when the text is sent, after the open."""
    from kokoro_client.session import AudioEvent, SessionOptions

    session = await transport.open_session(SessionOptions())
    try:
        started = time.perf_counter()
        await session.send_text(text, "1")
        await session.finish()
        ttfa, size, synth_ms = None, 0, None
        async for event in session.events():
            if isinstance(event, AudioEvent):
                ttfa = ttfa or time.perf_counter() - started
                size += len(event.data)
            elif event.type == "error":
                raise RuntimeError(f"the endpoint refused the text: {event.message}")
            elif event.type == "synthesis_complete":
                synth_ms = float(event.message.get("synth_ms") or 0.0)
                break
        total = time.perf_counter() - started
    finally:
        await session.aclose()
    return Sample(1000 * (ttfa or total), 1000 * total, size / 48_000, synth_ms)


async def batch_once(batch: Any, text: str) -> Sample:
    from kokoro_client.session import SessionOptions

    started = time.perf_counter()
    ttfa, size = None, 0
    async for data in batch.synthesize(text, SessionOptions()):
        ttfa = ttfa or time.perf_counter() - started
        size += len(data)
    total = time.perf_counter() - started
    return Sample(1000 * (ttfa or total), 1000 * total, size / 48_000)


@recorded_failure
async def run_isolated_deployed(deployment: Deployment, trials: int) -> Section:
    from kokoro_client.sagemaker_batch import SageMakerBatchTTS
    from kokoro_client.sagemaker_bidi import SageMakerBidiTransport

    bidi = SageMakerBidiTransport(deployment.endpoint_name, deployment.region)
    batch = SageMakerBatchTTS(deployment.endpoint_name, region_name=deployment.region)
    samples: dict[str, list[Sample]] = {"a": [], "b": [], "c": []}
    try:
        await bidi_once(bidi, FIRST_SENTENCE)  # not timed: credentials, the SDK client and a warm instance
        for _ in range(trials):
            samples["a"].append(await bidi_once(bidi, REPLY))
            samples["b"].append(await bidi_once(bidi, FIRST_SENTENCE))
            samples["c"].append(await batch_once(batch, REPLY))
    finally:
        await bidi.aclose()
    section = summarize(samples, trials, naive_how=None)
    section.data["endpoint"] = deployment.endpoint_name
    section.data["transport"] = "SageMaker InvokeEndpointWithBidirectionalStream (a, b); response stream (c)"
    section.headline += f" (SageMaker endpoint {deployment.endpoint_name}; the one-call baseline runs only locally)"
    return section


def _runtime_row(mode: str, trial: Any) -> Row:
    metrics = trial.metrics
    return {
        "mode": mode,
        "model": trial.model,
        "client_first_audio_ms": 1000 * trial.first_audio_s if trial.first_audio_s is not None else None,
        "agent_first_text_ms": metrics.get("first_text_ms"),
        "agent_first_audio_ms": metrics.get("first_audio_ms"),
        "agent_text_done_ms": metrics.get("text_done_ms"),
        "total_ms": 1000 * trial.total_s,
        "audio_s": trial.audio_s,
    }


@recorded_failure
async def run_runtime_deployed(deployment: Deployment, trials: int) -> Section:
    """The deployed agent end to end through its AgentCore runtime: bidi and batch, ``trials`` each, alternating
    (so drift hits both alike), after one untimed warm-up reply, all in one runtime session, stopped at the end.
    A failed reply fails the section, never a mean."""
    if not deployment.agent_runtime_arn:
        reason = "no agent_runtime_arn output (enable_runtime_outputs is false?)"
        return Section(f"not measured: {reason}", {"measured": False, "reason": reason})
    arn, session_id = deployment.agent_runtime_arn, bench_session_id()
    try:
        section = await _measure_runtime(arn, session_id, trials, RUNTIME_PROMPT)
    finally:
        stop_error = await asyncio.to_thread(stop_session, arn, session_id)
    section.data["runtime_session_id"] = session_id
    section.data["session_stopped"] = stop_error is None
    if stop_error:
        section.data["session_stop_error"] = stop_error
    return section


async def _measure_runtime(arn: str, session_id: str, trials: int, prompt: str) -> Section:
    from scripts.agent_client import arn_invoker, run_trial

    invoke = arn_invoker(arn, session_id=session_id)
    warm = await run_trial(invoke, {"prompt": prompt, "mode": "bidi"})  # a cold runtime, the first Bedrock call
    runs: dict[str, list[Row]] = {"bidi": [], "batch": []}
    for _ in range(trials):
        for mode in ("bidi", "batch"):
            trial = await run_trial(invoke, {"prompt": prompt, "mode": mode})
            if trial.error or trial.first_audio_s is None:
                reason = f"a {mode} reply failed: {trial.error or 'no audio'}"
                return Section(f"not measured: {reason}", {"measured": False, "reason": reason})
            runs[mode].append(_runtime_row(mode, trial))
    modes: dict[str, Row] = {
        mode: {
            "mode": mode,
            "trials": len(rows),
            "client_first_audio_ms_p50": pct([float(r["client_first_audio_ms"]) for r in rows], 0.5),
            "agent_first_audio_ms_p50": pct([float(r["agent_first_audio_ms"] or 0.0) for r in rows], 0.5),
            "agent_text_done_ms_p50": pct([float(r["agent_text_done_ms"] or 0.0) for r in rows], 0.5),
        }
        for mode, rows in runs.items()
    }
    speedup = float(modes["batch"]["client_first_audio_ms_p50"]) / float(modes["bidi"]["client_first_audio_ms_p50"])
    model = runs["bidi"][0]["model"]
    headline = (
        f"first audio through the AgentCore runtime (p50, client side, {model}): bidi "
        f"{modes['bidi']['client_first_audio_ms_p50']:.0f} ms, batch {modes['batch']['client_first_audio_ms_p50']:.0f}"
        f" ms: bidi is {speedup:.2f}× sooner (the seed: {SEED_BIDI_SPEEDUP['deployed']}× deployed)"
    )
    return Section(
        headline,
        {
            "measured": True,
            "target": "deployed",
            "through": f"InvokeAgentRuntime {arn}",
            "prompt": prompt,
            "llm": model,
            "warm_up_model": warm.model,
            "trials": trials,
            "modes": modes,
            "batch_over_bidi_first_audio": speedup,
            "seed_speedup": SEED_BIDI_SPEEDUP,
            "runs": runs,
        },
        [
            ("Per mode through the runtime, ms (p50)", list(modes.values())),
            ("Every reply", runs["bidi"] + runs["batch"]),
        ],
    )
