"""roofline: the most audio this CPU could make if every multiply-accumulate ran at its best matrix-product speed,
and the share of it the engine makes (issue 39).

- **Work**: the stage graphs the server runs on this CPU (weights/layout.py) are profiled by onnxruntime on the
  reply's sentences, each stage on whole chunks; every matrix product, convolution and LSTM the profile shows is
  counted in multiply-accumulates (MACs) from its shapes (weights from the optimized graph onnxruntime saves beside
  the profile), split into 8-bit and float ones, per second of the audio made. The profile's times also say how
  much of each stage is matrix products and how much everything else.
- **Peak**: onnxruntime's own 8-bit (uint8 × int8) and float matrix products on one large square-ish problem, on
  every core, best of several runs: what its kernels (MLAS: AMX, AVX-512 VNNI, AVX2 ...) reach on this CPU at best.
- **Roofline**: seconds of audio per second if every MAC ran at that peak and nothing else cost anything;
  **fraction**: what the engine's workers make side by side (the warm-up's measurement, taken again) over it.

Run: ``.venv/bin/python -m scripts.bench.roofline``; ``make bench`` runs it as its ``roofline`` section.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import onnx
import onnxruntime as ort
from kokoro_client.audio import SAMPLE_RATE
from kokoro_tts.engine.backends import kernels
from kokoro_tts.engine.backends.ort_sessions import exact_int8_dot_products
from kokoro_tts.engine.backends.stages import SAMPLES_PER_FRAME, OnnxStages
from kokoro_tts.engine.synthesis import TTSEngine
from kokoro_tts.text.chunks import split_utterance
from kokoro_tts.weights.layout import NORM_PRIORS, WeightLayout
from onnx import TensorProto, helper, numpy_helper

from .client import table
from .inproc import InProcess
from .report import Row, Section
from .texts import REPLY

STAGES = ("front", "features", "generator")
VOICE = "af_heart"
INT8 = frozenset({"uint8", "int8"})
# Products in 8-bit arithmetic whatever their first input's type (the dynamic ones quantize a float input inside).
INTEGER_OPS = frozenset(
    {
        "MatMulInteger",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
        "DynamicQuantizeLSTM",
        "ConvInteger",
        "QLinearConv",
        kernels.CONV,
        kernels.CONV_SCALED,
    }
)
# Operators whose work is matrix products, by how their MACs follow from the shapes (``_macs``). A Gemm counts as a
# MatMul: output × depth (the graphs have none with a transposed first input).
MATMUL = frozenset(
    {"MatMul", "MatMulInteger", "FusedMatMul", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "Gemm", "FusedGemm"}
)
CONV = frozenset({"Conv", "ConvInteger", "FusedConv", "QLinearConv"})
CONV_TRANSPOSE = frozenset({"ConvTranspose"})
LSTM = frozenset({"LSTM", "DynamicQuantizeLSTM"})
# The peak's problem: tall like the generator's (time × channels), large enough that each core runs long.
PEAK_M, PEAK_K, PEAK_N = 4096, 1024, 1024


@dataclass
class StageWork:
    """One stage over the profiled sentences: MACs by kind, and milliseconds in matrix products and in the rest."""

    int8_macs: float = 0.0
    float_macs: float = 0.0
    product_ms: float = 0.0
    other_ms: float = 0.0
    other_by_op: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def per(self, runs: int) -> StageWork:
        """This work as one run's, of ``runs`` alike."""
        return StageWork(
            self.int8_macs / runs,
            self.float_macs / runs,
            self.product_ms / runs,
            self.other_ms / runs,
            {op: ms / runs for op, ms in self.other_by_op.items()},
        )


@dataclass
class Roofline:
    audio_s: float  # of the profiled sentences
    stages: dict[str, StageWork]
    int8_peak: float  # MACs per second, every core
    float_peak: float
    engine: float  # seconds of audio per second, the workers side by side

    def macs_per_audio_s(self, stage: str) -> tuple[float, float]:
        work = self.stages[stage]
        return work.int8_macs / self.audio_s, work.float_macs / self.audio_s

    @property
    def ceiling(self) -> float:
        """Seconds of audio per second with every MAC at its peak and nothing else costing anything."""
        seconds = sum(
            int8 / self.int8_peak + floats / self.float_peak
            for int8, floats in (self.macs_per_audio_s(stage) for stage in STAGES)
        )
        return 1.0 / seconds

    @property
    def fraction(self) -> float:
        return self.engine / self.ceiling

    def rows(self) -> list[Row]:
        rows = []
        for stage in STAGES:
            work, (int8, floats) = self.stages[stage], self.macs_per_audio_s(stage)
            total_ms = work.product_ms + work.other_ms
            rows.append(
                {
                    "stage": stage,
                    "int8_gmacs_per_audio_s": int8 / 1e9,
                    "float_gmacs_per_audio_s": floats / 1e9,
                    "int8_share_pct": 100 * int8 / max(int8 + floats, 1.0),
                    "ms_per_audio_s": total_ms / self.audio_s,
                    "products_pct_of_time": 100 * work.product_ms / max(total_ms, 1e-9),
                    "top_other_ops": ", ".join(
                        f"{op} {ms / self.audio_s:.0f}"
                        for op, ms in sorted(work.other_by_op.items(), key=lambda kv: -kv[1])[:4]
                    ),
                }
            )
        return rows

    def as_data(self) -> dict[str, Any]:
        return {
            "measured": True,
            "audio_s": self.audio_s,
            "int8_peak_gmacs_per_s": self.int8_peak / 1e9,
            "float_peak_gmacs_per_s": self.float_peak / 1e9,
            "ceiling_audio_s_per_s": self.ceiling,
            "engine_audio_s_per_s": self.engine,
            "fraction": self.fraction,
            "stages": self.rows(),
        }

    def headline(self) -> str:
        total = sum(sum(self.macs_per_audio_s(stage)) for stage in STAGES)
        return (
            f"the engine makes {self.engine:.1f} s of audio per second, {100 * self.fraction:.0f} % of this CPU's "
            f"roofline ({self.ceiling:.1f} s/s: {total / 1e9:.1f} G MACs per second of audio at onnxruntime's best "
            f"{self.int8_peak / 1e9:.0f} G int8 / {self.float_peak / 1e9:.0f} G float MACs per second)"
        )


@contextmanager
def profiled_sessions(folder: Path) -> Iterator[None]:
    """Every onnxruntime session made inside profiles its runs and saves its optimized graph into ``folder`` (the
    server's own session options otherwise: engine/backends/ort_sessions.py)."""
    made = itertools.count()

    class Profiled(ort.SessionOptions):
        def __init__(self) -> None:
            super().__init__()
            n = next(made)
            self.enable_profiling = True
            self.profile_file_prefix = str(folder / f"s{n}")
            self.optimized_model_filepath = str(folder / f"s{n}.onnx")

    with mock.patch.object(ort, "SessionOptions", Profiled):
        yield


def _shapes(event: dict[str, Any], key: str) -> list[tuple[str, list[int]]]:
    return [next(iter(item.items())) for item in event["args"].get(key, [])]


def _macs(op: str, inputs: list[list[int]], output: list[int]) -> float:
    """Multiply-accumulates of one run of a node, from its inputs' shapes (in order, weights included) and its
    output's."""
    if op in MATMUL:
        return float(np.prod(output)) * inputs[0][-1]
    if op in CONV:
        weight = inputs[3] if op == "QLinearConv" else inputs[1]
        return float(np.prod(output)) * float(np.prod(weight[1:]))
    if op in (kernels.CONV, kernels.CONV_SCALED):  # the direct kernel's weights: [taps · channels, outputs]
        return float(np.prod(output)) * inputs[1][0]
    if op in CONV_TRANSPOSE:
        return float(np.prod(inputs[0])) * float(np.prod(inputs[1][1:]))
    if op in LSTM:
        (steps, batch, width), (directions, gates, _), (_, _, hidden) = inputs[:3]
        return float(steps * batch * directions * gates * (width + hidden))
    return 0.0


class NodeInputs:
    """Each node's input shapes in order. The profile lists only the inputs a node did not pack ahead of its runs (a
    product's constant weights are packed), so those come from the graph onnxruntime optimized (by node name) or,
    for a node the graph left unnamed (onnxruntime profiles it as ``<op>_<index>``), from the source graph at that
    index, which the optimizer did not change if it kept the node."""

    def __init__(self, optimized: Path, source: Path) -> None:
        self._named = self._inputs(onnx.load(str(optimized), load_external_data=False).graph, by_name=True)
        self._unnamed = self._inputs(onnx.load(str(source), load_external_data=False).graph, by_name=False)

    @staticmethod
    def _inputs(graph: onnx.GraphProto, *, by_name: bool) -> dict[str, tuple[list[str], dict[str, list[int]]]]:
        shapes = {init.name: list(init.dims) for init in graph.initializer}
        return {
            (node.name if by_name else f"{node.op_type}_{index}"): (list(node.input), shapes)
            for index, node in enumerate(graph.node)
            if node.name or not by_name
        }

    def shapes(self, node: str, profiled: list[tuple[str, list[int]]]) -> list[list[int]]:
        names, initializers = self._named.get(node) or self._unnamed.get(node) or ([], {})
        if not names:
            return [shape for _, shape in profiled]
        seen = iter(shape for _, shape in profiled)
        return [initializers[name] if name in initializers else next(seen, []) for name in names if name]


def stage_work(profile: Path, graph: NodeInputs, skip_runs: int) -> StageWork:
    """A session's profile summed over its runs after the first ``skip_runs`` (a session's first runs are slow)."""
    events = json.loads(profile.read_text())
    starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e["name"] == "model_run")
    after = starts[skip_runs] if len(starts) > skip_runs else 0
    work = StageWork()
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time") or event["ts"] < after:
            continue
        op = event["args"]["op_name"]
        profiled = _shapes(event, "input_type_shape")
        outputs = _shapes(event, "output_type_shape")
        inputs = graph.shapes(event["name"].removesuffix("_kernel_time"), profiled)
        macs = _macs(op, inputs, outputs[0][1] if outputs else [])
        ms = event["dur"] / 1000
        if macs > 0:
            if op in INTEGER_OPS or (profiled and profiled[0][0] in INT8):
                work.int8_macs += macs
            else:
                work.float_macs += macs
            work.product_ms += ms
        else:
            work.other_ms += ms
            work.other_by_op[op] += ms
    return work


def profile_stages(engine: TTSEngine, runs: int, sentences: int | None = None) -> tuple[float, dict[str, StageWork]]:
    """(seconds of audio made per run, each stage's work per run) over the reply's first ``sentences`` (None: all),
    whole chunks, tokens and voice from ``engine``'s own G2P."""
    layout = WeightLayout(engine.settings.model_dir)
    voice = engine.voices.resolve(VOICE)
    inputs = []
    for text in split_utterance(REPLY)[:sentences]:
        for tokens in engine.phonemizer.token_batches(engine.phonemizer.phonemes(text, voice.lang)):
            inputs.append((tokens, voice.style(len(tokens))))
    with tempfile.TemporaryDirectory(prefix="kokoro-roofline-") as tmp:
        folder = Path(tmp)
        graphs = layout.stage_graphs(int8=exact_int8_dot_products())
        with profiled_sessions(folder):
            stages = OnnxStages(*graphs, threads=0, priors=layout.root / NORM_PRIORS)
        for _ in range(1 + runs):  # the first run is the sessions' slow one: left out of the times
            frames = 0
            for tokens, style in inputs:
                prosody = stages.front(tokens, style, 1.0)
                stages.decode(prosody)  # the whole chunk: its features, then the generator on all of it
                frames += prosody.frames
        del stages  # a session writes its profile as it closes
        gc.collect()
        # One session per graph (one pair on one worker), made in the stages' order.
        profiles = sorted(folder.glob("s*.json"), key=lambda p: int(p.name[1:].split("_")[0]))
        optimized = sorted(folder.glob("s*.onnx"), key=lambda p: int(p.stem[1:]))
        assert len(profiles) == len(STAGES) == len(optimized), (profiles, optimized)
        work = {}
        for stage, profile, graph, source in zip(STAGES, profiles, optimized, graphs, strict=True):
            work[stage] = stage_work(profile, NodeInputs(graph, source), skip_runs=len(inputs)).per(runs)
    return frames * SAMPLES_PER_FRAME / SAMPLE_RATE, work


def _product_graph(integer: bool) -> bytes:
    kind = TensorProto.UINT8 if integer else TensorProto.FLOAT
    rng = np.random.default_rng(0)
    if integer:
        b = rng.integers(-128, 128, (PEAK_K, PEAK_N), dtype=np.int8)
    else:
        b = rng.standard_normal((PEAK_K, PEAK_N)).astype(np.float32)
    out = TensorProto.INT32 if integer else TensorProto.FLOAT
    node = helper.make_node("MatMulInteger" if integer else "MatMul", ["a", "b"], ["y"])
    graph = helper.make_graph(
        [node],
        "peak",
        [helper.make_tensor_value_info("a", kind, [PEAK_M, PEAK_K])],
        [helper.make_tensor_value_info("y", out, [PEAK_M, PEAK_N])],
        [numpy_helper.from_array(b, "b")],
    )
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def product_peak(integer: bool, runs: int = 8) -> float:
    """MACs per second of onnxruntime's matrix product on every core, the best of ``runs``."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    session = ort.InferenceSession(_product_graph(integer), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    a = (
        rng.integers(0, 256, (PEAK_M, PEAK_K), dtype=np.uint8)
        if integer
        else rng.standard_normal((PEAK_M, PEAK_K)).astype(np.float32)
    )
    session.run(None, {"a": a})
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        session.run(None, {"a": a})
        best = min(best, time.perf_counter() - started)
    return PEAK_M * PEAK_K * PEAK_N / best


def measure(engine: TTSEngine, runs: int = 3, sentences: int | None = None) -> Roofline:
    """The roofline of ``engine``'s machine, and where the engine stands under it (blocking: a thread's job). The
    engine's throughput is the median of ``runs`` measurements as its warm-up takes them (each the best of its own
    rounds), the work is profiled over ``runs`` runs of the reply's first ``sentences``."""
    measured = (engine.measure_throughput() for _ in range(runs))
    throughput = statistics.median(audio / wall for audio, wall in measured)
    audio_s, stages = profile_stages(engine, runs, sentences)
    return Roofline(audio_s, stages, product_peak(integer=True), product_peak(integer=False), throughput)


async def run_roofline(engine: TTSEngine, runs: int, sentences: int | None) -> Section:
    """The bench's section, with the servers idle."""
    roofline = await asyncio.to_thread(measure, engine, runs, sentences)
    return Section(roofline.headline(), roofline.as_data(), [("Per stage, per second of audio", roofline.rows())])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="profiled runs of the reply (after one untimed)")
    args = parser.parse_args()
    roofline = measure(InProcess.load().engine, args.runs)
    print(table(roofline.rows()))
    print(roofline.headline())


if __name__ == "__main__":
    main()
