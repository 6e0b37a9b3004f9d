"""end_to_end: one prompt through the agent's two pipelines, with the scripted (simulated) LLM.

``voice_agent.pipeline.run_bidi`` streams the LLM's text into one open TTS session as it is written (the server
decides where pieces start); ``run_batch`` waits for the whole reply and makes one streaming synthesis call. Both
stamp every event with ``t_ms`` since ``agent_start``; we record the first ``audio_chunk``, when the TTS could
first speak (bidi: the LLM's ``text_delta`` events, read by the client's sentence chunker, first hold a whole
sentence; batch: the whole reply's ``sentence`` event), the gap between them, and the ratio batch/bidi of the
first audio (the prototype: 2.4× local, 3.5× deployed).

Locally, with a second server whose windowed vocoding is switched off (KOKORO_WINDOWED=0), bidi also runs against
it ("bidi, windowing off"), interleaved, for the side-by-side "first sentence exists → its first audio". Then one
bidi reply per server is heard to its end to count underruns: a player that starts at the first audio chunk and
plays each chunk as it arrives runs dry (count, and the silence in all) whenever a chunk comes after the audio
before it has finished playing; an underrun during which the LLM had not yet written the next sentence is told
apart from the TTS's own.

The pipeline is another module's work: it is looked up at run time, and when it is missing (or its interface is not
the one expected) the section says "not measured" and the run goes on.
"""

from __future__ import annotations

import base64
import importlib
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kokoro_client.chunker import IncrementalSentenceChunker

from .client import gaps_of, pct, underruns
from .report import Row, Section
from .texts import SEED_BIDI_SPEEDUP

PROMPT = "Where is my order, and when will it arrive?"
NOT_AVAILABLE = "voice_agent.pipeline not available"
Settle = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class TTSTarget:
    """Where the pipelines' TTS goes: a local server's URL, or a SageMaker endpoint (deployed)."""

    kind: str  # "local" or "deployed"
    url: str | None = None
    endpoint_name: str | None = None
    region: str | None = None


def _pipeline() -> ModuleType | str:
    """The pipeline module, or why it cannot be used."""
    try:
        module = importlib.import_module("voice_agent.pipeline")
    except Exception as exc:  # not written yet, or a dependency missing: either way not measurable now
        return f"{NOT_AVAILABLE} ({type(exc).__name__}: {exc})"
    missing = [name for name in ("run_bidi", "run_batch") if not callable(getattr(module, name, None))]
    if missing:
        return f"{NOT_AVAILABLE} (no {' / '.join(missing)} yet)"
    return module


def _channels(target: TTSTarget) -> tuple[Any, Any]:
    """(bidi transport, batch TTS) for the target; imported here so a missing transport only skips this section."""
    if target.kind == "deployed":
        from kokoro_client.sagemaker_batch import SageMakerBatchTTS
        from kokoro_client.sagemaker_bidi import SageMakerBidiTransport

        assert target.endpoint_name and target.region
        bidi = SageMakerBidiTransport(target.endpoint_name, target.region)
        return bidi, SageMakerBatchTTS(target.endpoint_name, region_name=target.region)
    from kokoro_client.http_batch import HTTPBatchTTS
    from kokoro_client.local_ws import LocalWSTransport

    assert target.url
    return LocalWSTransport(target.url), HTTPBatchTTS(target.url)


def _scripted_source(model: Any, prompt: str) -> Callable[[threading.Event], AsyncIterator[str]]:
    """The model's stream as the pipeline's TextSource: its text deltas, stopped by the cancel event."""

    async def source(cancel: threading.Event) -> AsyncIterator[str]:
        messages = [{"role": "user", "content": [{"text": prompt}]}]
        async for event in model.stream(messages, cancel_signal=cancel):
            text = event.get("contentBlockDelta", {}).get("delta", {}).get("text")
            if text:
                yield text

    return source


def llm_underruns(chunks: list[tuple[float, float]], written: list[float | None]) -> tuple[int, float]:
    """The underruns of ``underruns`` during which the LLM had not yet written the text the player waited for:
    ``written[i]``, when chunk i's sentence was complete (ms, None: an earlier one's). No TTS can speak those
    sooner; the others are the TTS's."""
    gaps = [(i, gap) for i, gap in gaps_of(chunks) if (w := written[i]) is not None and w > chunks[i][0] - gap]
    return len(gaps), sum(gap for _, gap in gaps)


def _audio_ms(event: dict[str, Any]) -> float | None:
    if event.get("format") != "pcm":
        return None  # compressed: its length is not its byte count
    return 1000.0 * len(base64.b64decode(event["audio"])) / 2 / int(event["sample_rate"])


def _sentences_ended(event: dict[str, Any], mode: str, chunker: IncrementalSentenceChunker) -> int:
    """How many sentences the TTS could speak that ``event`` completed: in bidi, those the LLM's text as it came
    finished (the agent streams the text into one utterance, the server cuts it); in batch, the whole reply, once it
    is there (the agent's one "sentence" event)."""
    if mode == "bidi" and event["type"] == "text_delta":
        return len(chunker.feed(event["text"]))
    return int(mode == "batch" and event["type"] == "sentence")


async def _one(pipeline: ModuleType, mode: str, channel: Any, settle: Settle | None, label: str | None = None) -> Row:
    """One reply; with ``settle``, stopped at its first audio (then ``settle`` waits for an idle server), else
    heard to its end (its underruns counted)."""
    from voice_agent.scripted_model import ScriptedModel

    model = ScriptedModel()  # the default cadence (0.6 s to the first token, 15 tokens/s), seeded: same every run
    run = pipeline.run_bidi if mode == "bidi" else pipeline.run_batch
    events = run(_scripted_source(model, PROMPT), channel, model_name=model.name, options=pipeline.PipelineOptions())
    first_sentence = first_audio = None
    chunker, completed = IncrementalSentenceChunker(), 0
    metrics: dict[str, Any] = {}
    chunks: list[tuple[float, float]] = []
    sentences: dict[int, float] = {}  # sentence index → when the LLM completed it
    written: list[float | None] = []  # per chunk: its sentence's completion when it is that sentence's first chunk
    measurable = True
    async with aclosing(events) as stream:  # closing it cancels the LLM and hangs up the TTS
        async for event in stream:
            kind, t_ms = event["type"], float(event["t_ms"])
            if ended := _sentences_ended(event, mode, chunker):
                sentences |= dict.fromkeys(range(completed, completed + ended), t_ms)
                completed += ended
                first_sentence = t_ms if first_sentence is None else first_sentence
            elif kind == "audio_chunk":
                audio_ms = _audio_ms(event)
                measurable = measurable and audio_ms is not None
                chunks.append((t_ms, audio_ms or 0.0))
                written.append(sentences.pop(int(event.get("sentence", -1)), None))
                if first_audio is None:
                    first_audio = t_ms
                    if settle is not None:
                        break
            elif kind == "error":
                raise RuntimeError(f"{mode} ended with {event.get('code')}: {event.get('message')}")
            elif kind == "agent_end":
                metrics = dict(event.get("metrics") or {})
    if settle is not None:
        await settle()
    if first_sentence is None or first_audio is None:
        raise RuntimeError(f"{mode}: no sentence or no audio before agent_end")
    row: Row = {
        "mode": label or mode,
        "first_sentence_ms": first_sentence,
        "first_audio_ms": first_audio,
        "sentence_to_audio_ms": first_audio - first_sentence,
        "total_ms": metrics.get("total_ms"),  # only when the reply was heard to its end
    }
    if settle is None and measurable:
        row["underruns"], row["underrun_ms"] = underruns(chunks)
        row["waiting_for_llm"], row["waiting_for_llm_ms"] = llm_underruns(chunks, written)
    return row


OFF = "bidi, windowing off"


async def run_end_to_end(
    target: TTSTarget, trials: int, settle: Settle | None = None, whole: TTSTarget | None = None
) -> Section:
    """Both pipelines ``trials`` times each, alternating; "not measured" when the pipeline is not there.

    ``settle``: stop each reply at its first audio, then await this (local: ``client.drain``) before the next one;
    without it every reply plays to its end (deployed: an endpoint's instances cannot be drained from here).
    ``whole``: the same server with windowing off; bidi runs on it too. With ``settle``, one bidi reply per
    server is then heard to its end, for its underruns.
    """
    pipeline = _pipeline()
    if isinstance(pipeline, str):
        return Section(f"not measured: {pipeline}", {"measured": False, "reason": pipeline})
    bidi_transport: Any = None
    try:
        bidi_transport, batch_tts = _channels(target)
        off_transport = _channels(whole)[0] if whole is not None else None
        runs: dict[str, list[Row]] = {"bidi": [], "batch": []}
        if off_transport is not None:
            runs[OFF] = []
        for _ in range(trials):
            runs["bidi"].append(await _one(pipeline, "bidi", bidi_transport, settle))
            runs["batch"].append(await _one(pipeline, "batch", batch_tts, settle))
            if off_transport is not None:
                runs[OFF].append(await _one(pipeline, "bidi", off_transport, settle, OFF))
        heard: list[Row] = []
        if settle is not None:
            heard.append(await _one(pipeline, "bidi", bidi_transport, None))
            if off_transport is not None:
                heard.append(await _one(pipeline, "bidi", off_transport, None, OFF))
    except Exception as exc:  # the pipeline is being written: a failure is reported, the other sections still run
        print(f"end_to_end failed: {exc!r}", file=sys.stderr)
        reason = f"the pipeline failed: {type(exc).__name__}: {exc}"
        return Section(f"not measured: {reason}", {"measured": False, "reason": reason})
    finally:
        aclose = getattr(bidi_transport, "aclose", None)  # the SageMaker transport holds an SDK client
        if aclose is not None:
            await aclose()
    return _summary(target, trials, runs, heard)


def _summary(target: TTSTarget, trials: int, runs: dict[str, list[Row]], heard: list[Row]) -> Section:
    modes: dict[str, Row] = {}
    for mode, rows in runs.items():
        modes[mode] = {
            "mode": mode,
            "trials": len(rows),
            **{
                f"{key}_p50": pct([float(r[key]) for r in rows], 0.5)
                for key in ("first_sentence_ms", "first_audio_ms", "sentence_to_audio_ms")
            },
        }
    speedup = float(modes["batch"]["first_audio_ms_p50"]) / float(modes["bidi"]["first_audio_ms_p50"])
    seed = SEED_BIDI_SPEEDUP[target.kind]
    headline = (
        f"first audio after agent_start (p50, scripted LLM): bidi {modes['bidi']['first_audio_ms_p50']:.0f} ms, "
        f"batch {modes['batch']['first_audio_ms_p50']:.0f} ms: bidi is {speedup:.2f}× sooner "
        f"(the prototype measured {seed}× {'locally' if target.kind == 'local' else 'deployed'}); from the first "
        f"complete sentence to its first audio: bidi "
        f"{modes['bidi']['sentence_to_audio_ms_p50']:.0f} ms, batch {modes['batch']['sentence_to_audio_ms_p50']:.0f} ms"
    )
    if OFF in modes:
        ratio = float(modes["bidi"]["sentence_to_audio_ms_p50"]) / float(modes[OFF]["sentence_to_audio_ms_p50"])
        headline += (
            f"; with windowing off, bidi's first sentence → first audio "
            f"{modes[OFF]['sentence_to_audio_ms_p50']:.0f} ms (windowed: {ratio:.2f}× that)"
        )
    for row in heard:
        if "underruns" in row:
            headline += (
                f"; {row['mode']} heard to its end: {row['underruns']} underrun(s), {row['underrun_ms']:.0f} ms "
                f"({row['underruns'] - row['waiting_for_llm']} the TTS's, {row['waiting_for_llm']} waiting for the "
                "LLM's next sentence)"
            )
    return Section(
        headline,
        {
            "measured": True,
            "heard_to_end": heard,
            "target": target.kind,
            "prompt": PROMPT,
            "llm": "scripted (simulated LLM): 0.6 s to the first token, 15 tokens/s",
            "trials": trials,
            "modes": modes,
            "batch_over_bidi_first_audio": speedup,
            "seed_speedup": SEED_BIDI_SPEEDUP,
            "runs": runs,
        },
        [
            ("Per mode, ms after agent_start (p50)", list(modes.values())),
            ("Every run", [row for rows in runs.values() for row in rows]),
        ]
        + ([("Heard to the end: underruns (the player ran dry after it started)", heard)] if heard else []),
    )
