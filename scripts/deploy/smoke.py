"""The smoke tests after deploy: the endpoint's health (the device it really runs on), one
InvokeEndpointWithBidirectionalStream session (two sentences, both spoken), and one reply of the agent runtime
(Bedrock's words, spoken).

The session goes through the agent's own transport (SageMakerBidiTransport: the real AWS SDK, SigV4, HTTP/2) and
the runtime through the demo client's InvokeAgentRuntime invoker, so a pass means both work the way a caller uses
them, not just that they answer a ping.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kokoro_client.errors import TTSError
from kokoro_client.protocol import Cancelled, Error, SynthesisComplete
from kokoro_client.session import AudioEvent, ControlEvent, SessionOptions, TransportCode, TTSEvent, TTSTransportError
from kokoro_client.utterances import UtteranceReader

from .errors import DeployError
from .instances import is_gpu_instance

SENTENCES = ("Hello from Kokoro on SageMaker.", "This is the second sentence of the smoke test.")


class SmokeFailure(DeployError):
    def __init__(self, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class Utterance:
    id: str
    audio_bytes: int
    reported_bytes: int | None  # synthesis_complete's "bytes"


@dataclass(frozen=True)
class SmokeResult:
    utterances: tuple[Utterance, ...]
    open_s: float  # open_session: the HTTP/2 request sent
    first_audio_s: float  # from sending the first sentence to its first audio
    total_s: float  # from sending the first sentence to the end of the session

    def summary(self) -> str:
        audio = ", ".join(f"{u.id} {u.audio_bytes} bytes" for u in self.utterances)
        return (
            f"smoke test passed: {len(self.utterances)} sentences spoken ({audio}); time to first audio "
            f"{self.first_audio_s * 1000:.0f} ms after the first sentence was sent (stream opened in "
            f"{self.open_s * 1000:.0f} ms, session done in {self.total_s:.2f} s)"
        )


def check_events(events: Sequence[tuple[float, TTSEvent]], ids: Sequence[str]) -> tuple[tuple[Utterance, ...], float]:
    """The utterances and the time of the first audio, or SmokeFailure naming everything that is wrong.

    Audio belongs to the utterance whose synthesis_start came last (kokoro_client.utterances).
    """
    audio: dict[str | None, int] = {}
    completed: dict[str, int | None] = {}
    problems: list[str] = []
    reader = UtteranceReader()
    first_audio: float | None = None
    for at, event in events:
        if isinstance(event, AudioEvent):
            try:
                owner: str | None = reader.audio(event.data).id
            except TTSError:
                owner = None  # reported below as an utterance without its audio
            audio[owner] = audio.get(owner, 0) + len(event.data)
            if event.data and first_audio is None:
                first_audio = at
            continue
        assert isinstance(event, ControlEvent)
        try:
            frame = reader.frame(event.frame)
        except TTSError as exc:
            problems.append(f"a frame that is not the protocol's: {exc.message}")
            continue
        match frame:
            case SynthesisComplete():
                completed[frame.id] = frame.bytes
            case Error():
                problems.append(f"error event {frame.code}: {frame.message}")
            case Cancelled():
                problems.append(f"utterance {frame.id} was cancelled")
    utterances = []
    for utterance_id in ids:
        got = audio.get(utterance_id, 0)
        if utterance_id not in completed:
            problems.append(f"no synthesis_complete for {utterance_id}")
            continue
        reported = completed[utterance_id]
        if got == 0:
            problems.append(f"no audio for {utterance_id}")
        elif reported is not None and reported != got:
            problems.append(f"{utterance_id}: synthesis_complete says {reported} bytes, {got} arrived")
        utterances.append(Utterance(utterance_id, got, reported))
    if problems:
        kinds = sorted({e.type if isinstance(e, ControlEvent) else "audio" for _, e in events})
        raise SmokeFailure(f"{'; '.join(problems)} (events seen: {', '.join(kinds) or 'none'})")
    assert first_audio is not None  # every utterance has audio
    return tuple(utterances), first_audio


async def run_smoke(
    transport: Any,
    sentences: Sequence[str] = SENTENCES,
    *,
    timeout_s: float = 120.0,
    clock: Callable[[], float] = time.monotonic,
) -> SmokeResult:
    """Open one session on ``transport`` (a TTSTransport), send ``sentences``, close it, check what came back."""
    ids = [f"smoke-{i}" for i in range(len(sentences))]
    events: list[tuple[float, TTSEvent]] = []
    start = clock()
    try:
        async with asyncio.timeout(timeout_s):
            session = await transport.open_session(SessionOptions())
            opened = clock()
            try:
                # Both sentences, then close: the server speaks what is queued and then ends the session.
                for utterance_id, text in zip(ids, sentences, strict=True):
                    await session.send_text(text, utterance_id)
                await session.finish()
                async for event in session.events():
                    events.append((clock() - opened, event))
            finally:
                await session.aclose()
    except TimeoutError:
        raise SmokeFailure(f"the session did not end within {timeout_s:.0f} s ({len(events)} events)") from None
    except TTSTransportError as e:
        detail = f" [{e.tts_code}]" if e.tts_code else ""
        raise SmokeFailure(f"{e.code}{detail}: {e.message}", retryable=e.code == TransportCode.TTS_UNAVAILABLE) from e
    utterances, first_audio = check_events(events, ids)
    return SmokeResult(utterances, opened - start, first_audio, clock() - opened)


async def smoke_endpoint(
    endpoint_name: str,
    region: str,
    *,
    endpoint_uri: str | None = None,
    attempts: int = 3,
    retry_delay_s: float = 15.0,
    timeout_s: float = 120.0,
    credentials: Any = None,
    log: Callable[[str], Any] = print,
) -> SmokeResult:
    """The smoke test against a SageMaker endpoint; a stream that cannot be opened (the endpoint just became
    InService, a container still warming up) is tried again, anything else fails at once."""
    from kokoro_client.sagemaker_bidi import SageMakerBidiTransport  # the SDK: only this command needs it

    for attempt in range(1, attempts + 1):
        transport = SageMakerBidiTransport(endpoint_name, region, endpoint_uri=endpoint_uri, credentials=credentials)
        try:
            return await run_smoke(transport, timeout_s=timeout_s)
        except SmokeFailure as e:
            if not e.retryable or attempt == attempts:
                raise
            log(f"  attempt {attempt}/{attempts} failed ({e}); trying again in {retry_delay_s:.0f} s")
        finally:
            await transport.aclose()
        await asyncio.sleep(retry_delay_s)
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------------------------
# The endpoint's health: InvokeEndpoint with CustomAttributes "health", which SageMaker forwards to the container
# as X-Amzn-SageMaker-Custom-Attributes; the container answers its backend, device, model checksum and version.

HEALTH_ATTRIBUTE = "health"
HEALTH_FIELDS = ("status", "backend", "device", "model_sha256", "version")


@dataclass(frozen=True)
class Health:
    status: str
    backend: str
    device: str
    model_sha256: str
    version: str

    def summary(self) -> str:
        return (
            f"endpoint health: {self.status}, backend {self.backend} on {self.device}, "
            f"model sha256 {self.model_sha256[:12]}…, server {self.version}"
        )


def endpoint_health(client: Any, endpoint_name: str, instance_type: str | None) -> Health:
    """Ask the container what it runs on; SmokeFailure unless it answers every field, says ok, and runs on the
    device the instance type implies (cuda on ml.g*/ml.p*: a GPU endpoint that fell back to the CPU is a failure),
    and a CPU endpoint with the fused Snake kernel, which its autoscaling target assumes (docs/deploy.md)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        answer = client.invoke_endpoint(
            EndpointName=endpoint_name,
            CustomAttributes=HEALTH_ATTRIBUTE,
            ContentType="application/json",
            Accept="application/json",
            Body=b"{}",
        )
        body = answer["Body"].read()
    except (BotoCoreError, ClientError) as e:
        raise SmokeFailure(f"InvokeEndpoint (CustomAttributes={HEALTH_ATTRIBUTE}) failed: {e}") from e
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise SmokeFailure(f"the health answer is not a JSON object: {body[:200]!r}")
    missing = [f for f in HEALTH_FIELDS if not isinstance(doc.get(f), str) or not doc[f]]
    if missing:
        raise SmokeFailure(f"the health answer lacks {', '.join(missing)}: {doc}")
    health = Health(**{f: str(doc[f]) for f in HEALTH_FIELDS})
    if health.status != "ok":
        raise SmokeFailure(f"the endpoint says it is not ok: {doc}")
    if instance_type:
        want = "cuda" if is_gpu_instance(instance_type) else "cpu"
        if health.device.split(":")[0] != want:
            raise SmokeFailure(
                f"the endpoint runs {health.backend} on {health.device}, but {instance_type} should run it on {want}"
            )
        if want == "cpu" and doc.get("fused_snake") is False:  # an image from before the field says nothing
            raise SmokeFailure(
                f"the endpoint runs without the fused Snake kernel, so slower than {instance_type}'s autoscaling "
                'target assumes: its log says why ("fused Snake kernel"); the image\'s build stage makes it'
            )
    return health


# ---------------------------------------------------------------------------------------------------------------
# The agent runtime: one InvokeAgentRuntime (bedrock-agentcore, an SSE body), through the demo client's invoker.

RUNTIME_PROMPT = "Say hello and tell me, in two short sentences, what you can do."
BEDROCK_PREFIX = "bedrock:"  # agent_start's model: voice_agent.models names Bedrock models bedrock:<model id>


@dataclass(frozen=True)
class RuntimeResult:
    model: str
    first_audio_s: float
    audio_s: float
    text: str

    def summary(self) -> str:
        words = self.text.split()
        said = " ".join(words[:12]) + (" …" if len(words) > 12 else "")
        return (
            f"runtime smoke test passed: model {self.model}, first audio {self.first_audio_s * 1000:.0f} ms after "
            f"the request, {self.audio_s:.1f} s of speech: “{said}”"
        )


def check_trial(trial: Any, expect_model_id: str | None = None) -> RuntimeResult:
    """The agent's reply must come from Bedrock (agent_start's model) and carry speech: 16-bit PCM that decodes
    to at least a quarter second that is not silence."""
    import array

    if trial.error:
        error = trial.error
        raise SmokeFailure(f"the runtime answered an error: {error.get('code')}: {error.get('message', error)}")
    problems = []
    model = trial.model
    want = f"{BEDROCK_PREFIX}{expect_model_id}" if expect_model_id else None
    if not model.startswith(BEDROCK_PREFIX) or (want and model != want):
        problems.append(f"the agent ran model {model!r}, not {want or 'a Bedrock model'} (AGENT_MODEL=bedrock?)")
    if not any(e.get("type") == "agent_end" for e in trial.events):
        problems.append("no agent_end event")
    if trial.audio_format != "pcm" or len(trial.pcm) % 2:
        problems.append(f"the audio is not 16-bit PCM (format {trial.audio_format}, {len(trial.pcm)} bytes)")
    else:
        samples = array.array("h", bytes(trial.pcm))
        loud = sum(1 for s in samples if abs(s) > 500)
        if len(samples) < trial.sample_rate // 4 or loud < len(samples) // 50:
            problems.append(f"no speech in the audio ({len(samples)} samples, {loud} above the noise floor)")
    if problems:
        kinds = sorted({str(e.get("type")) for e in trial.events})
        raise SmokeFailure(f"{'; '.join(problems)} (events seen: {', '.join(kinds) or 'none'})")
    assert trial.first_audio_s is not None
    return RuntimeResult(model, trial.first_audio_s, trial.audio_s, trial.text)


async def smoke_runtime(
    runtime_arn: str,
    *,
    expect_model_id: str | None = None,
    qualifier: str | None = None,
    attempts: int = 2,
    retry_delay_s: float = 15.0,
    log: Callable[[str], Any] = print,
) -> RuntimeResult:
    """One reply in mode bidi through the deployed runtime; a failed invocation (a cold runtime) is tried again."""
    from scripts.agent_client import arn_invoker, run_trial

    invoke = arn_invoker(runtime_arn, qualifier=qualifier)
    for attempt in range(1, attempts + 1):
        trial = await run_trial(invoke, {"prompt": RUNTIME_PROMPT, "mode": "bidi"})
        try:
            return check_trial(trial, expect_model_id)
        except SmokeFailure as e:
            client_error = trial.error is not None and trial.error.get("code") == "client_error"
            if not client_error or attempt == attempts:
                raise
            log(f"  attempt {attempt}/{attempts} failed ({e}); trying again in {retry_delay_s:.0f} s")
        await asyncio.sleep(retry_delay_s)
    raise AssertionError("unreachable")
