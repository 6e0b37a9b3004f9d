"""The smoke test: one InvokeEndpointWithBidirectionalStream session, two sentences, both spoken.

It goes through the agent's own transport (SageMakerBidiTransport: the real AWS SDK, SigV4, HTTP/2), so a pass
means the endpoint works the way the agent runtime will call it, not just that it answers /ping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from voice_agent.transports.base import AudioEvent, ControlEvent, SessionOptions, TTSEvent, TTSTransportError

from .errors import DeployError

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

    Audio belongs to the utterance between its synthesis_start and synthesis_complete (the server speaks one
    utterance at a time, docs/protocol.md).
    """
    audio: dict[str | None, int] = {}
    completed: dict[str, int | None] = {}
    problems: list[str] = []
    current: str | None = None
    first_audio: float | None = None
    for at, event in events:
        if isinstance(event, AudioEvent):
            audio[current] = audio.get(current, 0) + len(event.data)
            if event.data and first_audio is None:
                first_audio = at
            continue
        assert isinstance(event, ControlEvent)
        message = event.message
        utterance = message.get("id")
        match event.type:
            case "synthesis_start":
                current = str(utterance)
            case "synthesis_complete":
                reported = message.get("bytes")
                completed[str(utterance)] = reported if isinstance(reported, int) else None
                current = None
            case "error":
                problems.append(f"error event {message.get('code', '?')}: {message.get('message', message)}")
            case "cancelled":
                problems.append(f"utterance {utterance} was cancelled")
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
        raise SmokeFailure(f"{e.code}{detail}: {e.message}", retryable=e.code == "tts_unavailable") from e
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
    from voice_agent.transports.sagemaker_bidi import SageMakerBidiTransport  # the SDK: only this command needs it

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
