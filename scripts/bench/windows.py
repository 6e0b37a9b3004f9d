"""Windowed vocoding side by side (issue 9): per sentence of the reply, in one process, interleaved:

- ``whole``: the derived stages on the whole chunk (the engine with windowing off, KOKORO_WINDOWED=0), in the
  build the server runs on this CPU (weights/layout.py);
- ``first`` and ``windowed``: the same stages, the decoder in windows (vocoder_windows.WindowPlan): time to the
  first window's audio (front + first window) and the total;
- ``shipped``: the shipped monolithic int8 graph (a layout without the derived stages);
- ``float``: the monolithic graph with dequantized float weights (scripts/weights/dequantize.py);
- ``kokoro-onnx``: the peer library on the shipped file (its ``create``).

Run: ``.venv/bin/python -m scripts.bench.windows [--trials N]``. Prints a table and the per-trial ratios; the
machine may be shared, so only ratios within one run mean anything (each trial runs every variant in turn).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import onnx
from kokoro_tts.engine.backends.onnx import OnnxBackend
from kokoro_tts.engine.backends.ort_sessions import exact_int8_dot_products
from kokoro_tts.engine.backends.stages import SAMPLES_PER_FRAME, ChunkPool, Prosody
from kokoro_tts.engine.voices import VoiceBank
from kokoro_tts.engine.windows import Decode, DecoderSpeed, WindowPlan, decode_in_windows
from kokoro_tts.text.chunks import split_utterance
from kokoro_tts.text.phonemes import Phonemizer
from kokoro_tts.weights.layout import WeightLayout

from scripts.weights.dequantize import dequantize
from scripts.weights.stage_graphs import derive_stage_graphs

from .client import model_dir, underruns
from .peer import VOICE, _peer, build_voices_npz
from .texts import REPLY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    layout = WeightLayout(model_dir())
    voices, phonemizer = VoiceBank(layout), Phonemizer(layout.config()["vocab"])
    voice = voices.resolve(VOICE)
    plan = WindowPlan()
    with tempfile.TemporaryDirectory(prefix="kokoro-stages-") as tmp:
        graphs = (Path(tmp) / "front.onnx", Path(tmp) / "features.onnx", Path(tmp) / "decoder.onnx")
        floats = Path(tmp) / "float.onnx"
        derive_stage_graphs(layout.onnx_path, graphs, conv_as_matmul=exact_int8_dot_products())
        onnx.save(dequantize(onnx.load(str(layout.onnx_path))), str(floats))
        whole = OnnxBackend(layout.onnx_path, device="cpu", threads=args.threads, stage_paths=graphs)
        shipped = OnnxBackend(layout.onnx_path, device="cpu", threads=args.threads)
        floating = OnnxBackend(floats, device="cpu", threads=args.threads)
        stages = whole.stages  # the same sessions the whole decode runs
        assert stages is not None
        peer = _peer(layout, build_voices_npz(layout, Path(tmp) / "voices.npz"), "cpu", args.threads)

        sentences = split_utterance(REPLY)
        inputs = []
        for text in sentences:
            (tokens,) = phonemizer.token_batches(phonemizer.phonemes(text, voice.lang))
            inputs.append((text, tokens, voice.style(len(tokens))))
        times: dict[str, list[float]] = {k: [] for k in ("whole", "first", "windowed", "shipped", "float", "peer")}
        audio_s = 0.0
        gaps: list[float] = []
        decoded = [0, 0]  # frames the decoder ran on (context included), frames of audio
        speed = DecoderSpeed()
        peer.create(sentences[0], voice=VOICE, speed=1.0, lang="en-us")
        whole.synthesize(inputs[0][1], inputs[0][2], 1.0)
        shipped.synthesize(inputs[0][1], inputs[0][2], 1.0)
        making = DecoderSpeed()  # what making a chunk's whole input takes, learnt as the engine does

        def windowed(prosody: Prosody, decode: Decode) -> Iterator[np.ndarray]:
            """The chunk's windows as the engine makes them: the whole chunk's input made after the first."""
            complete = partial(stages.complete, prosody)
            return decode_in_windows(decode, prosody.frames, plan, speed=speed, inputs=making, complete=complete)

        warm = stages.front(inputs[0][1], inputs[0][2], 1.0)  # the engine's warm-up: the decoder's speed is known
        warm_pool = stages.norm_pool(VOICE, inputs[0][1], warm)
        list(windowed(warm, partial(stages.decode, warm, pool=warm_pool)))
        for _ in range(args.trials):
            for text, tokens, style in inputs:
                started = time.perf_counter()
                audio = whole.synthesize(tokens, style, 1.0)
                times["whole"].append(time.perf_counter() - started)
                audio_s += audio.size / 24_000
                started = time.perf_counter()
                prosody = stages.front(tokens, style, 1.0)
                arrivals = []  # (seconds since the request, seconds of audio) per window

                pool = stages.norm_pool(VOICE, tokens, prosody)

                def decode(
                    start: int, stop: int, *, every_core: bool, prosody: Prosody = prosody, pool: ChunkPool = pool
                ) -> np.ndarray:
                    decoded[0] += stop - start
                    return stages.decode(prosody, start, stop, pool, every_core=every_core)

                decoded[1] += prosody.frames
                # As the engine does: the first window is planned from the speed learnt on the chunks before.
                for piece in windowed(prosody, decode):
                    arrivals.append((time.perf_counter() - started, piece.size / 24_000))
                times["first"].append(arrivals[0][0])
                times["windowed"].append(time.perf_counter() - started)
                gaps.append(underruns(arrivals)[1])
                started = time.perf_counter()
                shipped.synthesize(tokens, style, 1.0)
                times["shipped"].append(time.perf_counter() - started)
                started = time.perf_counter()
                floating.synthesize(tokens, style, 1.0)
                times["float"].append(time.perf_counter() - started)
                started = time.perf_counter()
                peer.create(text, voice=VOICE, speed=1.0, lang="en-us")
                times["peer"].append(time.perf_counter() - started)
        w = np.array(times["whole"])
        print(f"{len(sentences)} sentences x {args.trials} trials, {audio_s / args.trials:.1f} s of audio per trial")
        for name, values in times.items():
            ratio = np.array(values) / w
            print(
                f"{name:9s} median {1000 * statistics.median(values):7.0f} ms per sentence; / whole: median "
                f"{np.median(ratio):.2f} (p10 {np.percentile(ratio, 10):.2f}, p90 {np.percentile(ratio, 90):.2f}); "
                f"sum ratio {sum(values) / sum(times['whole']):.3f}"
            )
        print(
            f"underruns within a sentence (playback from its first window): {sum(g > 0 for g in gaps)} of "
            f"{len(gaps)} sentences, {1000 * sum(gaps):.0f} ms of silence in all, worst {1000 * max(gaps):.0f} ms"
        )
        print(
            f"decoded frames / chunk frames (the context's cost, paced windows): {decoded[0] / decoded[1]:.3f}; "
            f"smallest first window {plan.first * SAMPLES_PER_FRAME / 24:.0f} ms of audio"
        )


if __name__ == "__main__":
    main()
