"""The fused Snake kernel (container/native/snake_op.c, engine/backends/snake.py): built here, the same function as
the five operators it replaces, an option the server runs without, and the speech it makes as good as before."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from kokoro_tts.audio.encoding import float_to_pcm16
from kokoro_tts.engine.backends import snake
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

from scripts.weights.stage_graphs import snake_as_function


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
        assert snake.register(options)
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
    assert snake.LIBRARY.is_file(), "container/native/build.py did not run (make install)"
    assert snake.register(ort.SessionOptions())


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
    missing, broken = tmp_path / "libkokoro_snake.so", tmp_path / "broken.so"
    broken.write_bytes(b"not a library")
    with caplog.at_level(logging.WARNING, logger=snake.__name__):
        assert not snake.register(ort.SessionOptions(), missing)
        assert not snake.register(ort.SessionOptions(), missing)
        assert not snake.register(ort.SessionOptions(), broken)
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
        assert [(f.domain, f.name) for f in model.functions] == [(snake.DOMAIN, snake.OP)]
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
    assert snake.usable(("CPUExecutionProvider",))
    assert not snake.usable(("CUDAExecutionProvider", "CPUExecutionProvider"))
    graphs = WeightLayout(model_dir).stage_graphs()
    assert OnnxStages(*graphs, threads=1).fused_snake
    assert not OnnxStages(*graphs, threads=1, fused_snake=False).fused_snake


def test_a_session_asked_for_the_kernel_it_cannot_load_stops(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snake, "register", lambda options: False)
    with pytest.raises(RuntimeError, match="did not register"):
        session(model_dir / DECODER_GRAPH, threads=1, fused_snake=True)
