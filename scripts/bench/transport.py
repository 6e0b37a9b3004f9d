"""transport: what each audio format and each framing costs on the wire, and proof that quality holds.

24 sentences are synthesized once (raw PCM from one WS session), then each is encoded as every format the server
offers, with the server's own encoders (kokoro_tts.audio.encoding), one complete stream per segment as the server
sends it.
Framing: the agent's SSE (``data: {json}\\n\\n`` per audio_chunk event, the audio base64 inside) against WebSocket
binary frames (the bytes plus a 2-10 byte frame header). Quality: each encoded segment is decoded with PyAV and
transcribed by pocketsphinx; the word error rate per format should match PCM's.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import av
import numpy as np
from kokoro_client.audio import SAMPLE_RATE
from kokoro_tts.audio.encoding import FORMATS, audio_format, make_encoder
from voice_agent.events import Events

from scripts.speech import transcribe, word_errors

from .client import ws_utterances
from .report import Row, Section
from .texts import SEGMENTS

# PyAV names demuxers, not muxers: ADTS frames are read by the "aac" demuxer.
_DEMUXER = {"adts": "aac"}
# The formats an agent streams at the model's rate; 8 kHz G.711 (telephony) is not one of these choices.
_FORMATS = [name for name, spec in FORMATS.items() if spec.default_rate == SAMPLE_RATE]


def encode(fmt: str, pcm: np.ndarray) -> bytes:
    encoder = make_encoder(audio_format(fmt))
    return encoder.encode(pcm) + encoder.finish()


def decode(fmt: str, data: bytes) -> np.ndarray:
    """int16 mono at 24 kHz from one encoded segment."""
    container = audio_format(fmt).container
    if container is None:
        return np.frombuffer(data, dtype="<i2")
    out: list[np.ndarray] = []
    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    with av.open(io.BytesIO(data), mode="r", format=_DEMUXER.get(container, container)) as source:
        for frame in source.decode(audio=0):
            out += [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
    out += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    return np.concatenate(out) if out else np.zeros(0, np.int16)


def sse_bytes(data: bytes, fmt: str, index: int) -> int:
    """One audio_chunk event as the agent streams it: BedrockAgentCoreApp frames a yielded dict as
    ``data: `` + json.dumps(event, ensure_ascii=False) + a blank line."""
    event = Events().audio_chunk(data, fmt, SAMPLE_RATE, index, index)
    return len(f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode())


def ws_frame_bytes(size: int) -> int:
    """A server-to-client binary frame (unmasked, RFC 6455): 2 header bytes, +2 past 125, +8 past 65535."""
    return size + (2 if size < 126 else 4 if size < 65_536 else 10)


def _transcribe(pcm: np.ndarray) -> str:
    return transcribe(pcm, SAMPLE_RATE)


async def run_transport(url: str, n_segments: int) -> Section:
    texts = list(SEGMENTS[:n_segments])
    utterances = await ws_utterances(url, texts, fmt="pcm")
    pcms = [np.frombuffer(audio, dtype="<i2") for audio, _ in utterances]
    audio_s = sum(p.size for p in pcms) / SAMPLE_RATE

    encoded = {fmt: [encode(fmt, pcm) for pcm in pcms] for fmt in _FORMATS}
    decoded = {fmt: [decode(fmt, data) for data in encoded[fmt]] for fmt in _FORMATS}
    # WAV carries the very samples PCM does: checked, and then not transcribed twice.
    wav_identical = all(np.array_equal(a, b) for a, b in zip(decoded["wav"], pcms, strict=True))
    to_transcribe = [fmt for fmt in _FORMATS if not (fmt == "wav" and wav_identical)]

    # pocketsphinx uses one core: a process per core (spawned, not forked from a process with onnxruntime threads).
    jobs = [(fmt, i) for fmt in to_transcribe for i in range(len(texts))]
    workers = max(1, min(os.cpu_count() or 1, 4))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        hypotheses = list(pool.map(_transcribe, [decoded[fmt][i] for fmt, i in jobs]))
    transcripts: dict[str, list[str]] = {fmt: [""] * len(texts) for fmt in to_transcribe}
    for (fmt, i), hypothesis in zip(jobs, hypotheses, strict=True):
        transcripts[fmt][i] = hypothesis
    if wav_identical:
        transcripts["wav"] = transcripts["pcm"]

    rows: list[Row] = []
    for fmt, segments in encoded.items():
        payload = sum(len(d) for d in segments)
        sse = sum(sse_bytes(d, fmt, i) for i, d in enumerate(segments))
        ws = sum(ws_frame_bytes(len(d)) for d in segments)
        errors = [word_errors(ref, hyp) for ref, hyp in zip(texts, transcripts[fmt], strict=True)]
        rows.append(
            {
                "format": fmt,
                "bytes": payload,
                "kbit_s": payload * 8 / audio_s / 1000,
                "vs_pcm_pct": 100 * payload / sum(len(d) for d in encoded["pcm"]),
                "ws_binary_bytes": ws,
                "sse_base64_bytes": sse,
                "sse_over_ws_pct": 100 * (sse - ws) / ws,
                "wer_pct": 100 * sum(e for e, _ in errors) / sum(n for _, n in errors),
            }
        )
    by_format = {str(r["format"]): r for r in rows}
    pcm_row, opus_row = by_format["pcm"], by_format["opus"]
    wers = [float(r["wer_pct"]) for r in rows]
    headline = (
        f"{len(texts)} segments, {audio_s:.1f} s of audio: base64 in SSE costs "
        f"+{pcm_row['sse_over_ws_pct']:.1f}% bytes over WS binary frames (PCM; "
        f"{min(float(r['sse_over_ws_pct']) for r in rows):.1f}-{max(float(r['sse_over_ws_pct']) for r in rows):.1f}% "
        f"across formats); Opus is {opus_row['vs_pcm_pct']:.1f}% of PCM's bytes ({opus_row['kbit_s']:.0f} vs "
        f"{pcm_row['kbit_s']:.0f} kbit/s); word error rate (pocketsphinx) {min(wers):.1f}-{max(wers):.1f}% "
        f"across formats "
        f"(PCM {pcm_row['wer_pct']:.1f}%): the same speech"
    )
    return Section(
        headline,
        {
            "segments": len(texts),
            "audio_s": audio_s,
            "wav_samples_identical_to_pcm": wav_identical,
            "formats": by_format,
            "transcripts": {"reference": texts, **transcripts},
        },
        [("Bytes, framing overhead and word error rate per format", rows)],
    )
