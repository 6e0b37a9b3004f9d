"""The roofline's work count (scripts/bench/roofline.py) against onnxruntime's own profile of a graph whose
multiply-accumulates are known by hand: a convolution, a transposed one and a matrix product in float, and an
8-bit matrix product with packed weights. The whole measurement on the real stage graphs runs in the quick bench
(tests/scripts/test_bench_smoke.py)."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from scripts.bench.roofline import NodeInputs, Roofline, StageWork, product_peak, profiled_sessions, stage_work


def known_graph(path: Path) -> Path:
    """Unnamed nodes, as the derived graphs have some: the count finds their packed weights by index."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.standard_normal((16, 4, 4)).astype(np.float32), "up_w"),
        numpy_helper.from_array(rng.standard_normal((50, 20)).astype(np.float32), "mm_w"),
        numpy_helper.from_array(rng.integers(-128, 128, (64, 32), dtype=np.int8), "int_w"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w"], ["conv"], pads=[1, 1]),  # (1, 16, 50)
        helper.make_node("ConvTranspose", ["conv", "up_w"], ["up"], strides=[2]),  # (1, 4, 102)
        helper.make_node("MatMul", ["conv", "mm_w"], ["mm"]),  # (1, 16, 20)
        helper.make_node("MatMulInteger", ["u", "int_w"], ["int"]),  # (30, 32)
    ]
    graph = helper.make_graph(
        nodes,
        "known",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 50]),
            helper.make_tensor_value_info("u", TensorProto.UINT8, [30, 64]),
        ],
        [
            helper.make_tensor_value_info("up", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("mm", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("int", TensorProto.INT32, None),
        ],
        weights,
    )
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def test_the_count_is_the_hand_count_for_each_kind_of_product(tmp_path: Path) -> None:
    source = known_graph(tmp_path / "known.onnx")
    with profiled_sessions(tmp_path):
        session = ort.InferenceSession(str(source), ort.SessionOptions(), providers=["CPUExecutionProvider"])
    feeds = {"x": np.ones((1, 8, 50), np.float32), "u": np.ones((30, 64), np.uint8)}
    for _ in range(3):
        session.run(None, feeds)
    del session
    gc.collect()
    (profile,) = tmp_path.glob("s0_*.json")
    work = stage_work(profile, NodeInputs(tmp_path / "s0.onnx", source), skip_runs=1)
    conv, up, mm = 16 * 50 * 8 * 3, 16 * 50 * 4 * 4, 16 * 20 * 50
    assert work.float_macs == 2 * (conv + up + mm)  # two runs counted, the first left out
    assert work.int8_macs == 2 * 30 * 32 * 64
    assert work.product_ms > 0 and work.other_ms == 0 and not work.other_by_op


def test_the_ceiling_is_every_mac_at_its_peak() -> None:
    stages = {name: StageWork() for name in ("front", "features", "generator")}
    stages["generator"].int8_macs, stages["generator"].float_macs = 20e9, 1e9
    roofline = Roofline(audio_s=2.0, stages=stages, int8_peak=100e9, float_peak=10e9, engine=1.0)
    # per second of audio: 10 G int8 MACs at 100 G/s and 0.5 G float at 10 G/s: 0.15 s
    assert abs(roofline.ceiling - 1 / 0.15) < 1e-9
    assert abs(roofline.fraction - 0.15) < 1e-9


def test_the_peaks_are_measured_on_this_cpu() -> None:
    assert product_peak(integer=True, runs=2) > 1e9
    assert product_peak(integer=False, runs=2) > 1e9
