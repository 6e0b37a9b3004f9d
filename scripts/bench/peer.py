"""peer: kokoro-onnx (PyPI) against our engine, same model file, voice and text, in one process, one run.

Both run the same ONNX file through onnxruntime sessions built with the same options (ours: OnnxBackend's), so
what differs is the library around the model: G2P (kokoro-onnx: espeak-ng via phonemizer; ours: misaki, with
espeak-ng only for unknown words), batching, trimming. kokoro-onnx reads every voice from one .npz of
(510, 1, 256) arrays; we build that from models/kokoro/voices/*.bin into a temporary file.
"""

from __future__ import annotations

import importlib.metadata
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from kokoro_client.audio import SAMPLE_RATE
from kokoro_tts.engine.backends import kernels
from kokoro_tts.engine.backends.onnx import OnnxBackend
from kokoro_tts.text.chunks import split_utterance
from kokoro_tts.weights.layout import WeightLayout

from .client import model_dir
from .inproc import InProcess
from .report import Row, Section
from .texts import REPLY

VOICE = "af_heart"
G2P_NOTE = "kokoro-onnx phonemizes with espeak-ng, ours with misaki (espeak-ng only for unknown words)"


def _kernels(inproc: InProcess) -> list[str]:
    """The native kernels ours runs here (engine/backends/kernels.py)."""
    return [kernels.SNAKE, *([kernels.CONV] if inproc.engine.direct_conv else [])]


def build_voices_npz(layout: WeightLayout, path: Path) -> Path:
    """Every voice pack as kokoro-onnx's loader wants it: np.load(path)[name] → (510, 1, 256) float32."""
    packs = {name: layout.load_voice(name)[:, np.newaxis, :] for name in layout.voice_names()}
    np.savez(path, **packs)  # type: ignore[arg-type]
    return path


def _peer(layout: WeightLayout, voices: Path, device: str, threads: int) -> Any:
    from kokoro_onnx import Kokoro

    # The same session options as ours (threads, graph optimizations): the comparison is of the libraries.
    session = OnnxBackend(layout.onnx_path, device=device, threads=threads).session
    return Kokoro.from_session(session, str(voices), vocab_config=str(layout.config_path))


async def _peer_first_audio_ms(peer: Any, text: str) -> float:
    started = time.perf_counter()
    first: float | None = None
    async for _audio, _rate in peer.create_stream(text, voice=VOICE, speed=1.0, lang="en-us"):
        # Consumed to the end: an abandoned stream leaves its running batch in the executor, delaying the next
        # measurement (and for this text the first batch is the last: all of it fits 510 phonemes).
        first = first or 1000 * (time.perf_counter() - started)
    assert first is not None
    return first


async def run_peer(inproc: InProcess, trials: int, *, n_sentences: int | None, ttfa_trials: int) -> Section:
    try:
        version = importlib.metadata.version("kokoro-onnx")
    except importlib.metadata.PackageNotFoundError:
        return Section.skipped("kokoro-onnx is not installed (it is in the dev extra)")
    layout = WeightLayout(model_dir())
    sentences = split_utterance(REPLY)[:n_sentences]
    settings = inproc.engine.settings
    # Ours again without the native kernels (engine/backends/kernels.py), interleaved: what the kernels gain.
    plain = InProcess.load(fused_snake=False) if inproc.engine.fused_snake else None
    with tempfile.TemporaryDirectory(prefix="kokoro-onnx-voices-") as tmp:
        peer = _peer(layout, build_voices_npz(layout, Path(tmp) / "voices.npz"), settings.device, settings.threads)
        peer.create(sentences[0], voice=VOICE, speed=1.0, lang="en-us")  # espeak-ng and the session's first run

        ours_ms: list[list[float]] = [[] for _ in sentences]
        plain_ms: list[list[float]] = [[] for _ in sentences]
        theirs_ms: list[list[float]] = [[] for _ in sentences]
        audio_s: list[tuple[float, float]] = [(0.0, 0.0) for _ in sentences]
        for _ in range(trials):
            for i, sentence in enumerate(sentences):  # alternating, so load from elsewhere hits both alike
                ms, pcm = inproc.synth_chunk(sentence, VOICE)
                ours_ms[i].append(ms)
                if plain is not None:
                    plain_ms[i].append(plain.synth_chunk(sentence, VOICE)[0])
                started = time.perf_counter()
                audio, rate = peer.create(sentence, voice=VOICE, speed=1.0, lang="en-us")
                theirs_ms[i].append(1000 * (time.perf_counter() - started))
                audio_s[i] = (pcm.size / SAMPLE_RATE, len(audio) / rate)

        ttfa_ours: list[float] = []
        ttfa_theirs: list[float] = []
        for _ in range(ttfa_trials):
            ttfa_ours.append(await inproc.first_chunk_ms(REPLY, VOICE))
            ttfa_theirs.append(await _peer_first_audio_ms(peer, REPLY))

    rows: list[Row] = []
    for i, sentence in enumerate(sentences):
        ours, theirs = statistics.median(ours_ms[i]), statistics.median(theirs_ms[i])
        rows.append(
            {
                "sentence": f"{i + 1}: {sentence[:32]}… ({len(sentence)} chars)",
                "ours_ms": ours,
                "kokoro_onnx_ms": theirs,
                "ratio_theirs_over_ours": theirs / ours,
                **({"ours_without_kernel_ms": statistics.median(plain_ms[i])} if plain is not None else {}),
                "ours_audio_s": audio_s[i][0],
                "kokoro_onnx_audio_s": audio_s[i][1],
            }
        )
    per_sentence = statistics.fmean(float(r["ratio_theirs_over_ours"]) for r in rows)
    total_ratio = sum(float(r["kokoro_onnx_ms"]) for r in rows) / sum(float(r["ours_ms"]) for r in rows)
    data: dict[str, Any] = {
        "library": f"kokoro-onnx {version}",
        "native_kernels": _kernels(inproc) if plain is not None else [],
        "voice": VOICE,
        "session": "onnxruntime session with the same options as ours (OnnxBackend), same model file",
        "g2p": G2P_NOTE,
        "trials": trials,
        "per_sentence": rows,
        "per_sentence_ratio_mean": per_sentence,
        "all_sentences_ratio": total_ratio,
    }
    headline = (
        f"kokoro-onnx {version} vs ours, same model file, voice {VOICE} and session options ({G2P_NOTE}): engine "
        f"time per sentence theirs/ours {per_sentence:.2f}× (mean over {len(rows)} sentences)"
    )
    if plain is not None:
        gain = statistics.fmean(float(r["ours_without_kernel_ms"]) / float(r["ours_ms"]) for r in rows)
        data["native_kernels_gain_mean"] = gain
        names = " and ".join(data["native_kernels"])
        headline += f"; the native kernels ({names}): ours {gain:.2f}× faster than without them (mean per sentence)"
    else:
        headline += "; without the native kernels (not built, or KOKORO_FUSED_SNAKE=0)"
    ttfa_rows: list[Row] = []
    if ttfa_ours:
        ours_p50, theirs_p50 = statistics.median(ttfa_ours), statistics.median(ttfa_theirs)
        data["first_audio_267"] = {
            "trials": ttfa_trials,
            "ours_p50_ms": ours_p50,
            "kokoro_onnx_p50_ms": theirs_p50,
            "ratio_theirs_over_ours": theirs_p50 / ours_p50,
            "ours": "TTSEngine.stream: the first sentence chunk",
            "kokoro_onnx": "create_stream: its first batch (up to 510 phonemes: here the whole text)",
        }
        headline += (
            f"; time to first audio for the 267-char reply {theirs_p50 / ours_p50:.1f}× "
            f"({theirs_p50:.0f} vs {ours_p50:.0f} ms: create_stream's first batch is the whole text)"
        )
        ttfa_rows.append(
            {
                "text": f"{len(REPLY)} chars",
                "ours_p50_ms": ours_p50,
                "kokoro_onnx_p50_ms": theirs_p50,
                "ratio_theirs_over_ours": theirs_p50 / ours_p50,
            }
        )
    else:
        headline += "; time to first audio for the 267-char reply not measured in --quick"
    return Section(
        headline,
        data,
        [("Engine time per sentence (ms, p50 over trials)", rows), ("Time to first audio, in-process (ms)", ttfa_rows)],
    )
