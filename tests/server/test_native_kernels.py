"""The native kernels (container/native, engine/backends/kernels.py), built here. The fused Snake kernel: the same
function as the five operators it replaces, an option the server runs without, and the speech it makes as good as
before. The direct convolution: the same integers as the graph's own operators, bit for bit, wherever it runs."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from kokoro_tts.audio.encoding import float_to_pcm16
from kokoro_tts.engine.backends import kernels
from kokoro_tts.engine.backends.ort_sessions import exact_int8_dot_products, session
from kokoro_tts.engine.backends.stages import OnnxStages
from kokoro_tts.engine.voices import VoiceBank
from kokoro_tts.text.phonemes import Phonemizer
from kokoro_tts.weights.layout import (
    DECODER_GRAPH,
    NORM_PRIORS,
    WeightLayout,
)
from onnx import TensorProto, helper
from support.audio_metrics import log_mel_l1_db
from support.listener import WhisperListener, word_errors

from scripts.weights.stage_graphs import conv_integer_as_matmul, snake_as_function


def one_snake(channels: int | None, opset: int = 17, fuse: bool = True) -> bytes:
    """A graph of one Snake activation, as the export writes it, made a kokoro.Snake node (``fuse``)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, channels, None])
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, None)
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, None)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [
        helper.make_node("Mul", ["x", "a"], ["ax"]),
        helper.make_node("Sin", ["ax"], ["sine"]),
        helper.make_node("Pow", ["sine", "two"], ["squared"]),
        helper.make_node("Mul", ["squared", "b"], ["weighed"]),
        helper.make_node("Add", ["x", "weighed"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "snake", [x, a, b], [y], [two]), opset_imports=[helper.make_opsetid("", opset)]
    )
    if not fuse:
        return model.SerializeToString()
    assert snake_as_function(model) == 1
    assert [node.op_type for node in model.graph.node] == ["Snake"] and not model.graph.initializer
    return model.SerializeToString()


def run(graph: bytes, fused: bool, threads: int = 2, **feeds: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    if fused:
        assert kernels.register(options)
    made = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    (y,) = made.run(None, feeds)
    return np.asarray(y)


def activation(channels: int, frames: int, scale: float, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.1, 4.0, (1, channels, 1)).astype(np.float32)
    return {
        "x": (scale * rng.standard_normal((2, channels, frames))).astype(np.float32),
        "a": a,
        "b": (1.0 / a).astype(np.float32),
    }


def test_the_kernel_is_built_here() -> None:
    # make install builds it where a C compiler is (scripts/check_prerequisites.sh); CI proves the build.
    assert kernels.LIBRARY.is_file(), "container/native/build.py did not run (make install)"
    assert kernels.register(ort.SessionOptions())


@pytest.mark.parametrize("scale", [0.01, 1.0, 30.0, 1000.0])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernel_computes_the_five_operators(scale: float, threads: int) -> None:
    graph = one_snake(channels=None)
    feeds = activation(channels=5, frames=301, scale=scale)
    exact = run(graph, fused=False, **feeds)
    x, a, b = (feeds[name].astype(np.float64) for name in "xab")
    assert np.abs(exact - (x + b * np.sin(a * x) ** 2)).max() <= 1e-5 * max(1.0, scale)
    fused = run(graph, fused=True, threads=threads, **feeds)
    assert fused.shape == exact.shape == feeds["x"].shape
    # sin to a few ulps (glibc's vector sinf): its square, scaled by b, added to x
    assert np.abs(fused - exact).max() <= 4e-6 * (1.0 + np.abs(x).max())


def test_without_the_kernel_the_graph_is_the_exports_arithmetic() -> None:
    feeds = activation(channels=3, frames=40, scale=2.0)
    export = run(one_snake(channels=3, fuse=False), fused=False, **feeds)
    assert np.array_equal(run(one_snake(channels=3), fused=False, **feeds), export)


def test_empty_input_and_a_wrong_parameter_count() -> None:
    graph = one_snake(channels=None)
    empty = activation(channels=4, frames=0, scale=1.0)
    assert run(graph, fused=True, **empty).shape == (2, 4, 0)
    wrong = activation(channels=4, frames=10, scale=1.0) | {"a": np.ones((1, 3, 1), np.float32)}
    with pytest.raises(Exception, match=r"kokoro\.Snake: x must be \[N, C, T\], a and b C values each"):
        run(graph, fused=True, **wrong)


def test_without_the_library_the_server_says_so_once_and_runs_the_graph(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing, broken = tmp_path / "libkokoro_kernels.so", tmp_path / "broken.so"
    broken.write_bytes(b"not a library")
    with caplog.at_level(logging.WARNING, logger=kernels.__name__):
        assert not kernels.register(ort.SessionOptions(), missing)
        assert not kernels.register(ort.SessionOptions(), missing)
        assert not kernels.register(ort.SessionOptions(), broken)
    said = [record.getMessage() for record in caplog.records]
    assert len([line for line in said if "not built" in line]) == 1, said
    assert len([line for line in said if "did not load" in line]) == 1, said


def test_the_derived_generators_hold_every_snake_as_one_node(model_dir: Path) -> None:
    layout = WeightLayout(model_dir)
    for int8 in (False, True):
        front, features, generator = layout.stage_graphs(int8=int8)
        model = onnx.load(str(generator))
        ops = [node.op_type for node in model.graph.node]
        assert ops.count("Snake") == 48 and "Pow" not in ops, generator.name
        assert [(f.domain, f.name) for f in model.functions if f.name == kernels.SNAKE] == [
            (kernels.DOMAIN, kernels.SNAKE)
        ]
        for path in (front, features):  # the Snake activations are the generator's alone
            assert "Snake" not in {node.op_type for node in onnx.load(str(path)).graph.node}, path.name


SENTENCES = [
    "Scientists discovered a new species of frog in the rainforest last year.",
    "Thank you for your patience; your refund will be processed within three business days.",
]


def test_the_fused_generator_speaks_as_the_graph_does(model_dir: Path) -> None:
    """Whole sentences through the graphs the server runs on this CPU, with and without the kernel: within the int8
    model's own noise floor of each other (its audio moves 0.5 dB log-mel with a 1e-7 nudge of its input;
    docs/engine.md), and Whisper hears every word of both."""
    layout = WeightLayout(model_dir)
    paths = layout.stage_graphs(int8=exact_int8_dot_products())
    fused = OnnxStages(*paths, threads=2, priors=model_dir / NORM_PRIORS)
    plain = OnnxStages(*paths, threads=2, priors=model_dir / NORM_PRIORS, fused_snake=False)
    voices, phonemizer = VoiceBank(layout), Phonemizer(layout.config()["vocab"])
    listener = WhisperListener.shared()
    for text in SENTENCES:
        for name in ("af_heart", "am_michael"):
            voice = voices.resolve(name)
            (tokens,) = phonemizer.token_batches(phonemizer.phonemes(text, voice.lang))
            prosody = plain.front(tokens, voice.style(len(tokens)), 1.0)
            ours, before = fused.decode(prosody), plain.decode(prosody)
            assert ours.size == before.size
            assert log_mel_l1_db(before, ours) <= 0.9, name  # measured 0.50-0.74 dB over 24 sentences
            assert word_errors(text, listener.transcribe(float_to_pcm16(ours)))[0] == 0, name


def test_the_stages_say_whether_the_generator_runs_the_kernel(model_dir: Path) -> None:
    # The kernel is a CPU one: with a GPU provider the graph's own operators run where the provider puts them.
    assert kernels.usable(("CPUExecutionProvider",))
    assert not kernels.usable(("CUDAExecutionProvider", "CPUExecutionProvider"))
    graphs = WeightLayout(model_dir).stage_graphs()
    assert OnnxStages(*graphs, threads=1).fused_snake
    assert not OnnxStages(*graphs, threads=1, fused_snake=False).fused_snake


def test_a_session_asked_for_the_kernel_it_cannot_load_stops(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "register", lambda options, direct_conv=False: False)
    with pytest.raises(RuntimeError, match="did not register"):
        session(model_dir / DECODER_GRAPH, threads=1, fused_snake=True)


def exported_conv(
    weight: np.ndarray, w_zero: int, dilation: int, pads: tuple[int, int], bias: np.ndarray | None = None
) -> onnx.ModelProto:
    """A graph of one ConvInteger as the export writes it ([O, C, K] uint8 weights), with ``bias`` its output's
    requantization after it (an Add of the int32 bias reshaped [O, 1], a Cast to float, a Mul by the input
    ``scale``)."""
    channels = weight.shape[1]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.UINT8, [None, channels, None]),
        helper.make_tensor_value_info("x_zero", TensorProto.UINT8, []),
    ]
    initializers = [
        helper.make_tensor("w", TensorProto.UINT8, weight.shape, weight.tobytes(), raw=True),
        helper.make_tensor("w_zero", TensorProto.UINT8, [], [w_zero]),
    ]
    nodes = [
        helper.make_node(
            "ConvInteger", ["x", "w", "x_zero", "w_zero"], ["conv"], "conv", dilations=[dilation], pads=list(pads)
        )
    ]
    if bias is None:
        y = helper.make_tensor_value_info("conv", TensorProto.INT32, None)
    else:
        inputs.append(helper.make_tensor_value_info("scale", TensorProto.FLOAT, []))
        initializers += [
            helper.make_tensor("bias", TensorProto.INT32, bias.shape, bias.tolist()),
            helper.make_tensor("column", TensorProto.INT64, [2], [-1, 1]),
        ]
        nodes += [
            helper.make_node("Reshape", ["bias", "column"], ["bias_column"]),
            helper.make_node("Add", ["conv", "bias_column"], ["biased"]),
            helper.make_node("Cast", ["biased"], ["floats"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["floats", "scale"], ["y"]),
        ]
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return helper.make_model(
        helper.make_graph(nodes, "conv", inputs, [y], initializers), opset_imports=[helper.make_opsetid("", 20)]
    )


def one_conv(
    weight: np.ndarray, w_zero: int, dilation: int, pads: tuple[int, int], bias: np.ndarray | None = None
) -> bytes:
    """``exported_conv``'s graph made a kokoro.ConvInteger1d node, or ConvInteger1dScaled, by the derivation's own
    rewrite."""
    model = exported_conv(weight, w_zero, dilation, pads, bias)
    assert conv_integer_as_matmul(model, direct=True) == 1
    assert [node.op_type for node in model.graph.node] == [kernels.CONV if bias is None else kernels.CONV_SCALED]
    assert [f.name for f in model.functions] == [kernels.CONV if bias is None else kernels.CONV_SCALED]
    return model.SerializeToString()


def convolve(graph: bytes, direct: bool, feeds: dict[str, np.ndarray], threads: int = 2) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    assert kernels.register(options, direct_conv=direct)
    made = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    (y,) = made.run(None, feeds)
    return np.asarray(y)


def reference(
    x: np.ndarray, x_zero: int, weight: np.ndarray, w_zero: int, dilation: int, pads: tuple[int, int]
) -> np.ndarray:
    """The convolution in int64 numpy, from its definition."""
    padded = np.pad(x.astype(np.int64) - x_zero, ((0, 0), (0, 0), pads))
    taps = weight.shape[2]
    frames = padded.shape[2] - dilation * (taps - 1)
    w = weight.astype(np.int64) - w_zero
    y = np.zeros((x.shape[0], weight.shape[0], max(frames, 0)), np.int64)
    for k in range(taps):
        y += np.einsum("oc,nct->not", w[:, :, k], padded[:, :, k * dilation : k * dilation + max(frames, 0)])
    return y


@pytest.mark.parametrize(
    ("outs", "channels", "taps", "dilation", "pads", "frames"),
    [
        (8, 4, 1, 1, (0, 0), 1),
        (16, 8, 3, 1, (1, 1), 47),
        (8, 12, 3, 3, (3, 3), 48),
        (24, 16, 7, 5, (15, 15), 49),
        (8, 4, 11, 1, (5, 5), 200),
        (16, 128, 11, 5, (25, 25), 301),
        (8, 4, 3, 2, (0, 1), 3),  # shorter than the kernel's reach: no frames out
        (8, 4, 3, 1, (1, 1), 0),
    ],
)
def test_the_direct_convolution_is_the_graphs_integers(
    outs: int, channels: int, taps: int, dilation: int, pads: tuple[int, int], frames: int
) -> None:
    """Every shape the kernel's blocks meet: one frame, the tails of its 48-frame blocks, dilations and pads, none
    out. The kernel (where this CPU is one it serves) and the op's function give the same integers as the
    definition, whatever the zero points; and with the output's bias and scale, the same floats as the export's
    Add, Cast and Mul."""
    rng = np.random.default_rng(frames + 31 * taps)
    w_zero = int(rng.integers(100, 156))
    weight = rng.integers(max(0, w_zero - 128), min(256, w_zero + 128), (outs, channels, taps)).astype(np.uint8)
    x = rng.integers(0, 256, (2, channels, frames)).astype(np.uint8)
    x_zero = int(rng.integers(0, 256))
    bias = rng.integers(-(2**20), 2**20, outs).astype(np.int32)
    scale = np.float32(rng.uniform(1e-6, 1e-3))
    integers = reference(x, x_zero, weight, w_zero, dilation, pads)
    scaled = ((integers + bias[:, None]).astype(np.int32).astype(np.float32) * scale).astype(np.float32)
    feeds = {"x": x, "x_zero": np.array(x_zero, np.uint8)}
    for graph, graph_feeds, expected in (
        (one_conv(weight, w_zero, dilation, pads), feeds, integers),
        (one_conv(weight, w_zero, dilation, pads, bias), feeds | {"scale": np.array(scale)}, scaled),
    ):
        for threads in (1, 2):
            direct = convolve(graph, direct=True, feeds=graph_feeds, threads=threads)
            assert direct.shape == expected.shape and np.array_equal(direct, expected)
        assert np.array_equal(convolve(graph, direct=False, feeds=graph_feeds), expected)


def test_weights_that_do_not_fit_the_kernel_keep_the_graphs_operators() -> None:
    """Outputs not in eights, channels not in fours, a weight further than int8 from its zero point: the derivation
    leaves those convolutions to the integer product (the kernel's register blocks could not take them)."""
    rng = np.random.default_rng(0)
    for shape, w_zero in (((6, 4, 3), 128), ((8, 6, 3), 128), ((8, 4, 3), 0)):
        weight = rng.integers(0, 256, shape).astype(np.uint8)
        weight.flat[0] = 255  # 255 less a zero point of 0 is no int8
        model = exported_conv(weight, w_zero, dilation=1, pads=(1, 1))
        assert conv_integer_as_matmul(model, direct=True) == 0
        assert "MatMulInteger" in {node.op_type for node in model.graph.node} and not model.functions


def test_the_int8_generator_convolves_directly_where_the_cpu_suits_it(model_dir: Path) -> None:
    """The int8 generator's 48 convolutions of its residual blocks are kernel nodes; the stages run the kernels
    where this CPU is one it serves (AVX-512 VNNI, no AMX) and KOKORO_DIRECT_CONV leaves it on, and the audio is
    the graph's own, bit for bit."""
    layout = WeightLayout(model_dir)
    graphs = layout.stage_graphs(int8=True)
    model = onnx.load(str(graphs[2]))
    ops = [node.op_type for node in model.graph.node]
    assert ops.count(kernels.CONV) + ops.count(kernels.CONV_SCALED) == 48 and "Cast" in ops
    assert {f.name for f in model.functions} == {
        kernels.SNAKE,
        *(op for op in (kernels.CONV, kernels.CONV_SCALED) if op in ops),
    }
    if not exact_int8_dot_products():
        return  # the int8 build does not run here
    direct = OnnxStages(*graphs, threads=2, priors=model_dir / NORM_PRIORS)
    graph_ops = OnnxStages(*graphs, threads=2, priors=model_dir / NORM_PRIORS, direct_conv=False)
    assert (direct.direct_conv, graph_ops.direct_conv) == (kernels.direct_conv_runs(), False)
    voice = VoiceBank(layout).resolve("af_heart")
    phonemizer = Phonemizer(layout.config()["vocab"])
    (tokens,) = phonemizer.token_batches(phonemizer.phonemes(SENTENCES[1], voice.lang))
    prosody = graph_ops.front(tokens, voice.style(len(tokens)), 1.0)
    assert np.array_equal(direct.decode(prosody), graph_ops.decode(prosody))
