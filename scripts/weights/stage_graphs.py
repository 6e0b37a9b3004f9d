"""Derive the three stage graphs (backends/stages.py) from the shipped export, as ``make weights`` does.

``kokoro-weights derive-stages`` writes the front, features and generator graphs (``WeightLayout.stage_graphs``) with
onnx's own extractor, and each voice's priors for the pooled statistics (layout.NORM_PRIORS), and lists them in the
manifest with their checksums, like the derived torch weights (derive.py); an earlier derivation's files leave the
layout. The harmonic source's STFT becomes a convolution on the way (``stft_as_conv``). A second set (the ``_VNNI``
names) has every 1-D ConvInteger as the same integer arithmetic in a MatMulInteger (``conv_integer_as_matmul``): bit for
bit the same on a CPU with 8-bit dot products, faster. onnx is needed here only, at build time; the server runs the
derived files with onnxruntime alone.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kokoro_tts.engine.backends import kernels
from kokoro_tts.engine.backends.ort_sessions import exact_int8_dot_products
from kokoro_tts.engine.backends.stages import (
    DECODER_INPUTS,
    FEATURES_INPUTS,
    FEATURES_OUTPUTS,
    FEATURES_PER_FRAME,
    FEATURES_PRIOR,
    FRONT_OUTPUTS,
    HARMONIC_PER_FRAME,
    NORM_INPUTS,
    NORM_OUTPUT,
    PRIORS_FINGERPRINT,
    SILENT_TOKENS,
    ChunkPool,
    NormPool,
    OnnxStages,
    silent_fraction,
)
from kokoro_tts.weights.layout import (
    EARLIER_STAGE_GRAPHS,
    MANIFEST,
    NORM_PRIORS,
    VOICES,
    Manifest,
    WeightLayout,
    hash_file,
)

from .transfer import write_atomic

# Where the shipped export (PyTorch module names kept) makes the decoder's inputs, the generator's, and the durations.
CUT = {
    "aligned": "/encoder/MatMul_1_output_0",  # the text features, repeated per aligned frame
    "f0": "/encoder/Reshape_output_0",
    "energy": "/encoder/Reshape_1_output_0",
    "durations": "/encoder/Clip_output_0",
    "features": "/decoder/decoder/decode.3/Div_4_output_0",  # the last frame-rate block's output
    "harmonics": "/decoder/decoder/generator/Concat_3_output_0",
}


@dataclass(frozen=True)
class StagesResult:
    front: Path
    features: Path
    decoder: Path
    front_vnni: Path  # the same three, their convolutions as int8 matrix products (``conv_integer_as_matmul``)
    features_vnni: Path
    decoder_vnni: Path
    derived: bool

    @property
    def priors(self) -> Path:
        return self.front.with_name(NORM_PRIORS)

    @property
    def graphs(self) -> tuple[Path, Path, Path]:
        return self.front, self.features, self.decoder

    @property
    def graphs_vnni(self) -> tuple[Path, Path, Path]:
        return self.front_vnni, self.features_vnni, self.decoder_vnni

    @property
    def paths(self) -> tuple[Path, ...]:
        return *self.graphs, *self.graphs_vnni, self.priors


def derive_stages(dest: str | Path, force: bool = False) -> StagesResult:
    """Write the stage graphs beside DEST/kokoro.onnx and list them in the manifest (a no-op when listed); an
    earlier derivation's stage graphs are removed from both."""
    layout = WeightLayout(dest)
    manifest = layout.read_manifest()
    result = StagesResult(*layout.stage_graphs(), *layout.stage_graphs(int8=True), derived=True)
    listed = all(
        (entry := manifest.files.get(path.name)) is not None and path.is_file() and path.stat().st_size == entry.bytes
        for path in result.paths
    )
    if listed and not force:
        return replace(result, derived=False)
    layout.verify(full=False)
    derive_stage_graphs(layout.onnx_path, result.graphs)
    derive_stage_graphs(layout.onnx_path, result.graphs_vnni, conv_as_matmul=True)
    exact = exact_int8_dot_products()  # the faster build measures the same statistics, to float rounding
    derive_norm_priors(layout, result.graphs_vnni if exact else result.graphs, result.priors)
    files = {name: entry for name, entry in manifest.files.items() if name not in EARLIER_STAGE_GRAPHS}
    files |= {path.name: hash_file(path) for path in result.paths}
    write_atomic(layout.root / MANIFEST, Manifest(source=manifest.source, files=files, model=manifest.model).to_json())
    for name in EARLIER_STAGE_GRAPHS:  # unlisted first: a layout is never left listing a file it lacks
        (layout.root / name).unlink(missing_ok=True)
    return result


# The sentence each voice's priors are measured on (backends/stages.py: NormPool): ordinary English, about 5 s;
# its first frames (the leading pad) are the silence.
PRIOR_TEXT = "Thanks for calling. I can check on your order, and tell you when it will arrive at your door."
PRIOR_SILENCE_FRAMES = 12
SILENT_MARKS = ',.!?;:—…"()“”'  # punctuation: Kokoro pauses on it
# Raise when the measurement changes in a way its inputs do not show (how a prior is computed from the pools).
PRIORS_VERSION = 1


def derive_norm_priors(layout: WeightLayout, graphs: tuple[Path, Path, Path], dest: Path) -> None:
    """Each voice's priors for the pooled statistics of the features stage and the generator: their instance-norm
    statistics over silence (the reference's leading frames) and over speech (the reference made whole, less its
    silent share), [2, 2, C] per voice and graph in ``dest`` (an .npz, with the silent tokens; English phonemes for
    every voice: a prior only). Kept when ``dest`` was measured from the same inputs (its fingerprint: the graphs,
    the voices, the reference's tokens), as when the graphs are derived again unchanged: measuring takes a minute."""
    import numpy as np
    from kokoro_tts.engine.voices import VoiceBank

    fingerprint = priors_fingerprint(layout, graphs)
    if measured_from(dest) == fingerprint:
        return
    tokens, silent = _reference(layout)
    voices = VoiceBank(layout)
    stages = OnnxStages(*graphs, fused_snake=False)  # the export's arithmetic, wherever the kernel is built
    priors: dict[str, Any] = {
        SILENT_TOKENS: np.array(silent, dtype=np.int64),
        PRIORS_FINGERPRINT: np.array(fingerprint),
    }

    def prior(silence: NormPool, whole: NormPool, share: float) -> Any:
        assert silence.moments is not None and whole.moments is not None
        speech = (whole.moments - share * silence.moments) / (1.0 - share)
        return np.stack([silence.moments, speech])

    for name in voices.names:
        prosody = stages.front(tokens, voices.resolve(name).style(len(tokens)), 1.0)
        share = silent_fraction(tokens, prosody.durations, silent)
        silence, whole = NormPool(), NormPool()  # empty: each normalises by its own statistics, and keeps them
        stages.features(prosody, PRIOR_SILENCE_FRAMES, silence)
        stages.features(prosody, None, whole)
        priors[FEATURES_PRIOR + name] = prior(silence, whole, share)
        stages.complete(prosody)  # the generator's, on the whole chunk's features
        silence, whole = NormPool(), NormPool()
        stages.decode(prosody, 0, PRIOR_SILENCE_FRAMES, ChunkPool(generator=silence))
        stages.decode(prosody, pool=ChunkPool(generator=whole))
        priors[name] = prior(silence, whole, share)
    tmp = dest.with_name(f".{dest.name}.part.npz")
    try:
        np.savez(tmp, **priors)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _reference(layout: WeightLayout) -> tuple[list[int], list[int]]:
    """The reference's tokens (the G2P's reading of ``PRIOR_TEXT``) and the tokens spoken as silence."""
    from kokoro_tts.text.phonemes import Phonemizer

    vocab = layout.config()["vocab"]
    phonemizer = Phonemizer(vocab)
    (tokens,) = phonemizer.token_batches(phonemizer.phonemes(PRIOR_TEXT, "a"))
    return [int(token) for token in tokens], [vocab[mark] for mark in SILENT_MARKS if mark in vocab]


def priors_fingerprint(layout: WeightLayout, graphs: tuple[Path, Path, Path]) -> str:
    """What the priors are measured from: the graphs' and the voices' checksums, the reference's tokens, the
    silent tokens and frames, and ``PRIORS_VERSION``."""
    tokens, silent = _reference(layout)
    voices = {
        name: entry.sha256 for name, entry in layout.read_manifest().files.items() if name.startswith(f"{VOICES}/")
    }
    inputs = {
        "graphs": [hash_file(path).sha256 for path in graphs],
        "voices": voices,
        "tokens": tokens,
        "silent": silent,
        "silence_frames": PRIOR_SILENCE_FRAMES,
        "version": PRIORS_VERSION,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def measured_from(priors: Path) -> str | None:
    """The fingerprint ``priors`` were measured from; None for a missing file or one measured before fingerprints."""
    import numpy as np

    try:
        with np.load(priors) as saved:
            return str(saved[PRIORS_FINGERPRINT]) if PRIORS_FINGERPRINT in saved.files else None
    except (OSError, ValueError):
        return None


def derive_stage_graphs(
    model: Path, dest: tuple[Path, Path, Path], dft_as_conv: bool = True, conv_as_matmul: bool = False
) -> None:
    """Cut the monolithic export into the front, features and generator graphs at ``dest`` (onnx is needed at
    build time only); ``dft_as_conv``: the harmonic source's STFT computed by a convolution (that one changes the
    rounding: ``stft_as_conv``); ``conv_as_matmul``: the convolutions as integer matrix products
    (``conv_integer_as_matmul``), the generator's as ``kokoro.ConvInteger1dScaled`` nodes. The generator's Snake
    activations become ``kokoro.Snake`` nodes either way (``snake_as_function``: the same arithmetic until the fused
    kernel is registered)."""
    import numpy as np
    import onnx
    import onnx.utils

    front, features, decoder = dest
    extractor = onnx.utils.Extractor(onnx.load(str(model)))
    graphs = {
        front: extractor.extract_model(["tokens", "style", "speed"], [CUT[name] for name in FRONT_OUTPUTS]),
        features: extractor.extract_model(
            [CUT.get(name, name) for name in FEATURES_INPUTS], [CUT[name] for name in FEATURES_OUTPUTS]
        ),
        decoder: extractor.extract_model([CUT.get(name, name) for name in DECODER_INPUTS], ["audio"]),
    }
    if dft_as_conv:
        stft_as_conv(graphs[features].graph)
    frames = 4  # what the norms' channel counts are probed with
    probes = {
        features: {
            "aligned": np.zeros((1, 512, frames), np.float32),
            "f0": np.zeros((1, FEATURES_PER_FRAME * frames), np.float32),
            "energy": np.zeros((1, FEATURES_PER_FRAME * frames), np.float32),
            "style": np.zeros((1, 256), np.float32),
        },
        decoder: {
            "features": np.zeros((1, 512, FEATURES_PER_FRAME * frames), np.float32),
            "harmonics": np.zeros((1, 22, HARMONIC_PER_FRAME * frames + 1), np.float32),
            "style": np.zeros((1, 256), np.float32),
        },
    }
    for path, graph in graphs.items():
        if conv_as_matmul:
            conv_integer_as_matmul(graph, direct=path == decoder)
        for name, tensor in CUT.items():
            _rename(graph.graph, tensor, name)
        if path in probes:
            norm_statistics_as_inputs(graph, probes[path])
            _sort_topologically(graph.graph)
        if path == decoder:
            snake_as_function(graph)
        tmp = path.with_name(f".{path.name}.part")
        try:
            onnx.save(graph, str(tmp))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


class _Uses:
    """Which node makes each value of ``graph`` and which nodes read it, as the graph was when looked at."""

    def __init__(self, graph: Any) -> None:
        self.made_by = {output: node for node in graph.node for output in node.output}
        self.used_by: dict[str, list[Any]] = {}
        for node in graph.node:
            for name in node.input:
                self.used_by.setdefault(name, []).append(node)

    def only_use(self, name: str, op_type: str) -> Any:
        """The one node reading ``name``, where there is one and it is an ``op_type``; else None."""
        users = self.used_by.get(name, [])
        return users[0] if len(users) == 1 and users[0].op_type == op_type else None


def snake_as_function(model: Any) -> int:
    """Replace each Snake activation, x + sin²(a·x)·b as the export computes it (Mul, Sin, Pow 2, Mul, Add; b = 1/a
    per channel), by one ``kokoro.Snake(x, a, b)`` node, and give the model that op as a local function of the same
    five operators: onnxruntime inlines it (the export's arithmetic, bit for bit) unless the fused kernel is
    registered (engine/backends/kernels.py), which runs the chain as one pass. Returns the count replaced."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    uses = _Uses(graph)
    made_by, used_by, only_use = uses.made_by, uses.used_by, uses.only_use

    chains = []
    for sin in [node for node in graph.node if node.op_type == "Sin"]:
        scale = made_by.get(sin.input[0])
        square = only_use(sin.output[0], "Pow")
        weigh = square and only_use(square.output[0], "Mul")
        add = weigh and only_use(weigh.output[0], "Add")
        if scale is None or scale.op_type != "Mul" or add is None or len(used_by[scale.output[0]]) != 1:
            continue
        exponent = constants.get(square.input[1])
        x = next((name for name in add.input if name != weigh.output[0]), "")
        if exponent is None or exponent.size != 1 or exponent.reshape(()).item() != 2.0 or x not in scale.input:
            continue
        a = next(name for name in scale.input if name != x)
        b = next(name for name in weigh.input if name != square.output[0])
        chains.append(((scale, sin, square, weigh, add), x, a, b))
    for (scale, sin, square, weigh, add), x, a, b in chains:
        at = list(graph.node).index(add)  # the activation's value is ready where the chain's last node was
        graph.node.insert(
            at, helper.make_node(kernels.SNAKE, [x, a, b], list(add.output), add.name + "/snake", domain=kernels.DOMAIN)
        )
        for node in (scale, sin, square, weigh, add):
            graph.node.remove(node)
    if not chains:
        return 0
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    two = numpy_helper.from_array(np.array(2.0, np.float32))
    body = [
        helper.make_node("Mul", ["x", "a"], ["ax"]),
        helper.make_node("Sin", ["ax"], ["sine"]),
        helper.make_node("Constant", [], ["two"], value=two),
        helper.make_node("Pow", ["sine", "two"], ["squared"]),
        helper.make_node("Mul", ["squared", "b"], ["weighed"]),
        helper.make_node("Add", ["x", "weighed"], ["y"]),
    ]
    _add_kernel_function(
        model,
        helper.make_function(
            kernels.DOMAIN, kernels.SNAKE, ["x", "a", "b"], ["y"], body, [helper.make_opsetid("", opset)]
        ),
    )
    exponents = {square.input[1] for (_, _, square, _, _), *_ in chains}
    used = {name for node in graph.node for name in node.input}  # onnxruntime warns of unused initializers
    for init in [i for i in graph.initializer if i.name in exponents - used]:
        graph.initializer.remove(init)
    return len(chains)


def _rename(graph: Any, old: str, new: str) -> None:
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.name == old:
            value.name = new
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]


def stft_as_conv(graph: Any) -> None:
    """Replace each STFT node (real signal, constant frame step, window and length, one-sided) by the same transform
    as a convolution with a fixed DFT basis: onnxruntime's STFT kernel took a third of the front's time (a 5 s
    sentence: 239 ms for the whole front, 155 ms with the convolution).

    The two agree to float rounding (the spectra within 1e-5 of the largest bin). The graph then takes the phase
    of every bin, and in bins of near-zero magnitude that phase is rounding noise, to which the int8 generator is
    sensitive: its audio moves 3-4 dB log-mel L1 with either kernel, and as far from a float64 transform
    (docs/weights.md).
    """
    import numpy as np
    from onnx import helper, numpy_helper

    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for index, node in reversed(list(enumerate(graph.node))):
        if node.op_type != "STFT":
            continue
        signal, step_name, window_name, length_name = node.input
        step, window, length = int(constants[step_name]), constants[window_name], int(constants[length_name])
        bins = length // 2 + 1
        turns = (np.arange(bins)[:, None] * np.arange(length)[None, :]) % length  # k·n mod N: exact zeros stay 0
        angle = 2 * np.pi * turns / length
        imaginary = np.where(turns % (length // 2) == 0, 0.0, -np.sin(angle))
        basis = np.stack([np.cos(angle), imaginary], axis=1) * window + 0.0  # (bins, re/im, N); no negative zero
        name = node.name or node.output[0]
        graph.initializer.extend(
            [
                numpy_helper.from_array(basis.reshape(2 * bins, 1, length).astype(np.float32), f"{name}/dft_basis"),
                numpy_helper.from_array(np.array([0, 1, -1], np.int64), f"{name}/signal_shape"),
                numpy_helper.from_array(np.array([0, bins, 2, -1], np.int64), f"{name}/spectrum_shape"),
            ]
        )
        replacement = [  # [B, L(, 1)] → [B, 1, L] → conv → [B, 2·bins, F] → [B, bins, 2, F] → STFT's [B, F, bins, 2]
            helper.make_node("Reshape", [signal, f"{name}/signal_shape"], [f"{name}/signal"]),
            helper.make_node("Conv", [f"{name}/signal", f"{name}/dft_basis"], [f"{name}/dft"], strides=[step]),
            helper.make_node("Reshape", [f"{name}/dft", f"{name}/spectrum_shape"], [f"{name}/spectrum"]),
            helper.make_node("Transpose", [f"{name}/spectrum"], [node.output[0]], perm=[0, 3, 1, 2]),
        ]
        del graph.node[index]
        for offset, new_node in enumerate(replacement):
            graph.node.insert(index + offset, new_node)
        # The STFT's own constants, now unused: onnxruntime would warn about each on stderr (a JSON log's stream).
        used = {name for other in graph.node for name in other.input}
        for init in [i for i in graph.initializer if i.name in (step_name, window_name, length_name)]:
            if init.name not in used:
                graph.initializer.remove(init)


def conv_integer_as_matmul(model: Any, direct: bool = False) -> int:
    """Replace each 1-D ``ConvInteger`` (uint8 input and weights, per-tensor zero points) by the same integer
    arithmetic as a ``MatMulInteger`` of uint8 activations by int8 weights: onnxruntime runs ConvInteger on its
    uint8 x uint8 path only, where uint8 x int8 has a kernel built on the CPU's dot-product instructions (VNNI),
    with the weights packed once at load. Measured on 2 cores (AVX512-VNNI): the generator 1.6-1.75x faster, the
    front 1.4x. ``direct``: each convolution the direct kernel takes (``_direct``) becomes one
    ``kokoro.ConvInteger1d`` node instead (``kokoro.ConvInteger1dScaled`` where its output's requantization follows:
    ``_scaled_outputs``), with that arithmetic as the op's model-local function (the kernel:
    container/native/conv_op.c); returns how many.

    Per convolution: the input transposed to [B, T, C] and padded with its zero point (as ConvInteger pads), its
    frames gathered per output frame and kernel tap (im2col: [B, T', K·C]; one Gather: 5-11 % faster than a Slice
    per tap and a Concat), times the weights as [K·C, O] less 128, with their zero point less 128
    (q - z = (q - 128) - (z - 128): the same integers), and the int32 product transposed back to [B, O, T'].
    The result is the convolution's, bit for bit (tests/server/test_vocoder_windows.py).
    """
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    replaced: set[str] = set()
    kernel_nodes = 0
    for index, node in reversed(list(enumerate(graph.node))):
        if node.op_type != "ConvInteger" or len(node.input) != 4:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight, w_zero = constants.get(node.input[1]), constants.get(node.input[3])
        if (
            weight is None
            or w_zero is None
            or weight.dtype != np.uint8
            or weight.ndim != 3
            or w_zero.size != 1
            or attrs.get("group", 1) != 1
            or attrs.get("auto_pad", b"NOTSET") != b"NOTSET"
        ):
            continue
        replaced |= {node.input[1], node.input[3]}
        zero = int(w_zero.reshape(()))
        if direct and _direct(weight, zero, attrs):
            nodes = [_conv_integer_1d(graph, node, weight, zero, attrs)]
            kernel_nodes += 1
        else:
            nodes = _integer_matmul(graph, node, weight, zero, attrs)
        del graph.node[index]
        for offset, new_node in enumerate(nodes):
            graph.node.insert(index + offset, new_node)
    used = {name for node in graph.node for name in node.input}  # a zero point may be shared with other nodes
    for init in [i for i in graph.initializer if i.name in replaced - used]:
        graph.initializer.remove(init)
    if kernel_nodes:
        _scaled_outputs(graph)
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        ops = {node.op_type for node in graph.node if node.domain == kernels.DOMAIN}
        for op in (kernels.CONV, kernels.CONV_SCALED):
            if op in ops:
                _add_kernel_function(model, _conv_integer_1d_function(op, opset))
    return kernel_nodes


def _add_kernel_function(model: Any, function: Any) -> None:
    """``function`` (an op of the kernels' domain) into ``model``, which then imports that domain."""
    from onnx import helper

    model.functions.append(function)
    if not any(o.domain == kernels.DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(kernels.DOMAIN, 1))


def _scaled_outputs(graph: Any) -> int:
    """Each ``kokoro.ConvInteger1d`` whose int32 output only goes through the export's requantization (an Add of its
    int32 bias, quantized each run by the input's scale, reshaped [O, 1]; a Cast to float; a Mul by the scale)
    becomes one ``kokoro.ConvInteger1dScaled`` taking that bias and scale: the same arithmetic, without three passes
    over the output. Returns how many."""
    from onnx import TensorProto, helper, numpy_helper

    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    uses = _Uses(graph)
    made_by, used_by, only_use = uses.made_by, uses.used_by, uses.only_use

    folded = 0
    for conv in [node for node in graph.node if node.op_type == kernels.CONV and node.domain == kernels.DOMAIN]:
        add = only_use(conv.output[0], "Add")
        cast = add and only_use(add.output[0], "Cast")
        scale = cast and only_use(cast.output[0], "Mul")
        if scale is None or helper.get_attribute_value(cast.attribute[0]) != TensorProto.FLOAT:
            continue
        column = made_by.get(next(name for name in add.input if name != conv.output[0]))
        if column is None or column.op_type != "Reshape":
            continue
        shape = constants.get(column.input[1])
        outs = constants[conv.input[1]].shape[1]
        if shape is None or shape.tolist() not in ([-1, 1], [outs, 1], [1, -1, 1], [1, outs, 1]):
            continue  # the bias [O] as a column: the function's Unsqueeze adds to the output as it did
        factor = next(name for name in scale.input if name != cast.output[0])
        at = list(graph.node).index(scale)
        graph.node.insert(
            at,
            helper.make_node(
                kernels.CONV_SCALED,
                [*conv.input, column.input[0], factor],
                list(scale.output),
                conv.name + "/scaled",
                domain=kernels.DOMAIN,
                **{a.name: helper.get_attribute_value(a) for a in conv.attribute},
            ),
        )
        for node in (conv, add, cast, scale):
            graph.node.remove(node)
        if len(used_by[column.output[0]]) == 1:
            graph.node.remove(column)
        folded += 1
    return folded


def _signed_weights(weight: Any, w_zero: int) -> tuple[Any, int]:
    """``weight`` [O, C, K] (uint8) as the product's [K·C, O] int8 less 128, and its zero point likewise: the same
    integers, q - z = (q - 128) - (z - 128)."""
    import numpy as np

    _, channels, taps = weight.shape
    signed = (weight.astype(np.int16) - 128).astype(np.int8).transpose(2, 1, 0).reshape(taps * channels, -1)
    return signed, w_zero - 128


def _direct(weight: Any, w_zero: int, attrs: dict[str, Any]) -> bool:
    """Whether the direct kernel takes this convolution: stride 1, channels in fours, outputs in eights (its
    register blocks), and each weight less its zero point an int8 (the kernel subtracts it once, at load)."""
    import numpy as np

    outs, channels, _ = weight.shape
    spread = weight.astype(np.int16) - w_zero
    return (
        attrs.get("strides", [1]) == [1]
        and channels % 4 == 0
        and outs % 8 == 0
        and int(spread.min()) >= -128
        and int(spread.max()) <= 127
    )


def _conv_integer_1d(graph: Any, conv: Any, weight: Any, w_zero: int, attrs: dict[str, Any]) -> Any:
    """``conv`` (a ConvInteger) as one ``kokoro.ConvInteger1d`` node; its weights are added to ``graph``."""
    import numpy as np
    from onnx import helper, numpy_helper

    x, _, x_zero, _ = conv.input
    name = conv.name or conv.output[0]
    _, _, taps = weight.shape
    signed, signed_zero = _signed_weights(weight, w_zero)
    graph.initializer.append(numpy_helper.from_array(signed, f"{name}/weight_s8"))
    graph.initializer.append(numpy_helper.from_array(np.array(signed_zero, np.int8), f"{name}/weight_zero_s8"))
    return helper.make_node(
        kernels.CONV,
        [x, f"{name}/weight_s8", x_zero, f"{name}/weight_zero_s8"],
        list(conv.output),
        f"{name}/direct",
        domain=kernels.DOMAIN,
        taps=taps,
        dilation=attrs.get("dilations", [1])[0],
        pads=list(attrs.get("pads", [0, 0])),
    )


def _conv_integer_1d_function(op: str, opset: int) -> Any:
    """``kokoro.ConvInteger1d`` (or ``ConvInteger1dScaled``) as a model-local function: ``_integer_matmul``'s
    arithmetic (pad with the zero point, gather every tap's frames, the integer product, channel-major again; then
    the bias added, made float and scaled), its constants from the node's attributes, for a session that has no
    kernel for the op. The same arithmetic as the kernel's, bit for bit."""
    from onnx import AttributeProto, TensorProto, helper

    def from_attribute(output: str, kind: str, attribute: str) -> Any:
        node = helper.make_node("Constant", [], [output])
        node.attribute.append(
            AttributeProto(
                name=kind,
                ref_attr_name=attribute,
                type=AttributeProto.INTS if kind == "value_ints" else AttributeProto.INT,
            )
        )
        return node

    def constant(output: str, **value: Any) -> Any:
        return helper.make_node("Constant", [], [output], **value)

    body = [
        from_attribute("pads", "value_ints", "pads"),
        from_attribute("taps", "value_int", "taps"),
        from_attribute("dilation", "value_int", "dilation"),
        constant("time_axis", value_ints=[2]),
        constant("zero", value_int=0),
        constant("one", value_int=1),
        constant("column_axis", value_ints=[1]),
        constant("batch_and_frames", value_ints=[0, 0]),  # Reshape's 0: as the input has them
        helper.make_node("Pad", ["x", "pads", "x_zero", "time_axis"], ["padded"]),
        helper.make_node("Transpose", ["padded"], ["time_major"], perm=[0, 2, 1]),
        helper.make_node("Shape", ["time_major"], ["length"], start=1, end=2),
        helper.make_node("Sub", ["taps", "one"], ["last_tap"]),
        helper.make_node("Mul", ["last_tap", "dilation"], ["span"]),
        helper.make_node("Squeeze", ["length"], ["frames_in"]),
        helper.make_node("Sub", ["frames_in", "span"], ["frames_out"]),
        helper.make_node("Range", ["zero", "frames_out", "one"], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "column_axis"], ["column"]),
        helper.make_node("Range", ["zero", "taps", "one"], ["tap"]),
        helper.make_node("Mul", ["tap", "dilation"], ["offsets"]),
        helper.make_node("Add", ["column", "offsets"], ["frames"]),
        helper.make_node("Gather", ["time_major", "frames"], ["gathered"], axis=1),  # [B, T', K, C]
        helper.make_node("Shape", ["weight"], ["columns"], end=1),  # K·C, where -1 could not tell with no frames
        helper.make_node("Concat", ["batch_and_frames", "columns"], ["im2col_shape"], axis=0),
        helper.make_node("Reshape", ["gathered", "im2col_shape"], ["im2col"]),
        helper.make_node("MatMulInteger", ["im2col", "weight", "x_zero", "weight_zero"], ["product"]),
    ]
    inputs = ["x", "weight", "x_zero", "weight_zero"]
    if op == kernels.CONV:
        body.append(helper.make_node("Transpose", ["product"], ["y"], perm=[0, 2, 1]))
    else:
        inputs += ["bias", "scale"]
        body += [
            helper.make_node("Transpose", ["product"], ["integers"], perm=[0, 2, 1]),
            helper.make_node("Unsqueeze", ["bias", "column_axis"], ["bias_column"]),
            helper.make_node("Add", ["integers", "bias_column"], ["biased"]),
            helper.make_node("Cast", ["biased"], ["floats"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["floats", "scale"], ["y"]),
        ]
    return helper.make_function(
        kernels.DOMAIN,
        op,
        inputs,
        ["y"],
        body,
        [helper.make_opsetid("", opset)],
        attributes=["taps", "dilation", "pads"],
    )


def _integer_matmul(graph: Any, conv: Any, weight: Any, w_zero: int, attrs: dict[str, Any]) -> list[Any]:
    """The nodes that compute ``conv`` (a ConvInteger) as a MatMulInteger (``conv_integer_as_matmul``); their
    constants are added to ``graph``."""
    import numpy as np
    from onnx import helper, numpy_helper

    x, _, x_zero, _ = conv.input
    name = conv.name or conv.output[0]
    taps = weight.shape[2]
    (dilation,), (stride,) = attrs.get("dilations", [1]), attrs.get("strides", [1])
    pad_before, pad_after = attrs.get("pads", [0, 0])
    nodes: list[Any] = []

    def constant(label: str, value: Any, dtype: Any = np.int64) -> str:
        graph.initializer.append(numpy_helper.from_array(np.array(value, dtype), f"{name}/{label}"))
        return f"{name}/{label}"

    def add(op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [f"{name}/{output}"], **attributes))
        return f"{name}/{output}"

    columns = add("Transpose", [x], "time_major", perm=[0, 2, 1])
    if pad_before or pad_after:
        columns = add("Pad", [columns, constant("pads", [0, pad_before, 0, 0, pad_after, 0]), x_zero], "padded")
    if taps > 1 or stride > 1:  # im2col in one Gather: output frame t takes input frames t·stride + tap·dilation
        length = add("Shape", [columns], "length", start=1, end=2)
        last = add("Squeeze", [add("Sub", [length, constant("span", [dilation * (taps - 1)])], "reach")], "last")
        rows = add("Range", [constant("zero", 0), last, constant("stride", stride)], "rows")
        rows = add("Unsqueeze", [rows, constant("axis", [1])], "column")
        frames = add("Add", [rows, constant("taps", [[tap * dilation for tap in range(taps)]])], "frames")
        gathered = add("Gather", [columns, frames], "gathered", axis=1)  # [B, T', K, C]
        columns = add("Reshape", [gathered, constant("im2col_shape", [0, 0, -1])], "im2col")
    signed, signed_zero = _signed_weights(weight, w_zero)
    w_signed, w_zero_signed = constant("weight_s8", signed, np.int8), constant("weight_zero_s8", signed_zero, np.int8)
    product = add("MatMulInteger", [columns, w_signed, x_zero, w_zero_signed], "product")
    return [*nodes, helper.make_node("Transpose", [product], [conv.output[0]], perm=[0, 2, 1])]


def norm_statistics_as_inputs(model: Any, probe_feeds: dict[str, Any]) -> int:
    """Let a graph's AdaIN layers normalise with statistics pooled over more than the frames they are given: a window
    of a chunk (engine/windows.py) then normalises nearly as the whole chunk does. Returns the channels in all
    (``C``: the layers' channel counts summed, in graph order); ``probe_feeds``: a few frames of the graph's inputs,
    which it is run on once to count them.

    Every instance norm of the export is ``m = ReduceMean(x)``, ``d = x - m``, ``s = ReduceMean(d * d)``,
    ``d / Sqrt(s + eps)`` over time. Given ``norm_moments`` [2, C] (the mean and the mean square of ``x`` over what
    came before: a voice's prior, earlier windows) and ``norm_share`` [1] (this window's weight in the pool), each
    layer uses ``u = share·m + (1 - share)·mean_before`` for ``m`` and the pooled mean square about ``u`` for ``s``;
    ``window_moments`` [2, C] returns the window's own mean and mean square for the next pool. With ``norm_share`` 1
    every layer computes what the export does, bit for bit (x·1 + 0 is x).
    """
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in dict.fromkeys(node.input):  # a node squaring its input is its consumer once
            consumers.setdefault(name, []).append(node)
    layers = []  # (mean node, its Sub, the variance node, the Add of eps)
    for node in graph.node:
        if node.op_type != "ReduceMean":
            continue
        subs = [c for c in consumers.get(node.output[0], []) if c.op_type == "Sub" and c.input[1] == node.output[0]]
        if len(subs) != 1 or subs[0].input[0] != node.input[0]:
            continue
        deviation = subs[0].output[0]
        squares = [c for c in consumers[deviation] if c.op_type == "Mul" and list(c.input) == [deviation, deviation]]
        spread = [c for s in squares for c in consumers[s.output[0]] if c.op_type == "ReduceMean"]
        eps = [c for s in spread for c in consumers[s.output[0]] if c.op_type == "Add"]
        if len(squares) == len(spread) == len(eps) == 1:
            layers.append((node, subs[0], spread[0], eps[0]))
    # The channels of each layer: one run of the graph on a few frames (``probe``), the means as outputs.
    probe = type(model)()
    probe.CopyFrom(model)
    probe.graph.output.extend(
        helper.make_tensor_value_info(mean.output[0], TensorProto.FLOAT, None) for mean, *_ in layers
    )
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    means = session.run([mean.output[0] for mean, *_ in layers], probe_feeds)
    channels = [int(m.shape[1]) for m in means]

    nodes: list[Any] = []

    def add(op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def constant(name: str, value: Any, dtype: Any = np.int64) -> str:
        graph.initializer.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    moments_in, share = NORM_INPUTS
    graph.input.extend(
        [
            helper.make_tensor_value_info(moments_in, TensorProto.FLOAT, [2, sum(channels)]),
            helper.make_tensor_value_info(share, TensorProto.FLOAT, [1]),
        ]
    )
    rest = add("Sub", [constant("norms/one", [1.0], np.float32), share], "norms/rest")
    two, zero = constant("norms/two", 2.0, np.float32), constant("norms/zero", 0.0, np.float32)
    axes = constant("norms/axes", [0, 1])

    def layer_row(p: str, row: int, offset: int, count: int) -> str:
        """Row ``row`` of norm_moments, the layer's ``count`` channels from ``offset``, as [1, C, 1]."""
        starts, ends = (
            constant(f"{p}/starts{row}", [row, offset]),
            constant(f"{p}/ends{row}", [row + 1, offset + count]),
        )
        sliced = add("Slice", [moments_in, starts, ends, axes], f"{p}/slice{row}")
        return add("Reshape", [sliced, constant(f"{p}/shape{row}", [1, count, 1])], f"{p}/before{row}")

    own_means: list[str] = []
    own_squares: list[str] = []
    offset = 0
    for index, ((mean, sub, spread, eps), count) in enumerate(zip(layers, channels, strict=True)):
        p = f"norms/{index}"
        flat = constant(f"{p}/flat", [1, count])
        before_mean, before_square = (layer_row(p, row, offset, count) for row in (0, 1))
        m, s = mean.output[0], spread.output[0]  # the window's own mean; its mean square about ``used``
        # used = share·m + rest·mean_before: the layer subtracts it instead of its own mean.
        own_part = add("Mul", [m, share], f"{p}/own_part")
        used = add("Add", [own_part, add("Mul", [before_mean, rest], f"{p}/before_part")], f"{p}/used")
        sub.input[1] = used
        # What came before, its mean square about ``used``: square_before - used·(2·mean_before - used).
        lever = add("Sub", [add("Mul", [before_mean, two], f"{p}/twice_before"), used], f"{p}/lever")
        before_spread = add("Sub", [before_square, add("Mul", [used, lever], f"{p}/cross")], f"{p}/before_spread")
        # The pool's: share·s + rest·before_spread, in place of s under the square root.
        own_spread = add("Mul", [s, share], f"{p}/own_spread")
        pooled = add("Add", [own_spread, add("Mul", [before_spread, rest], f"{p}/rest_spread")], f"{p}/pooled")
        pooled = add("Max", [pooled, zero], f"{p}/pooled_at_least_0")  # float rounding must not reach the sqrt
        eps.input[:] = [pooled if name == s else name for name in eps.input]
        # The window's own mean square: s + used·(2·m - used).
        own_lever = add("Sub", [add("Mul", [m, two], f"{p}/twice_own"), used], f"{p}/own_lever")
        own_square = add("Add", [s, add("Mul", [used, own_lever], f"{p}/own_cross")], f"{p}/own_square")
        own_means.append(add("Reshape", [m, flat], f"{p}/own_mean_row"))
        own_squares.append(add("Reshape", [own_square, flat], f"{p}/own_square_row"))
        offset += count
    rows = [add("Concat", own_means, "norms/means", axis=1), add("Concat", own_squares, "norms/squares", axis=1)]
    add("Concat", rows, NORM_OUTPUT, axis=0)
    graph.node.extend(nodes)
    graph.output.append(helper.make_tensor_value_info(NORM_OUTPUT, TensorProto.FLOAT, [2, sum(channels)]))
    return sum(channels)


def _sort_topologically(graph: Any) -> None:
    """Order ``graph``'s nodes so each comes after the nodes making its inputs (rewrites append theirs at the end)."""
    made_by = {output: index for index, node in enumerate(graph.node) for output in node.output}
    nodes, placed, order = list(graph.node), set(), []

    def place(index: int) -> None:
        stack = [(index, False)]
        while stack:
            at, ready = stack.pop()
            if at in placed:
                continue
            if ready:
                placed.add(at)
                order.append(nodes[at])
                continue
            stack.append((at, True))
            stack.extend(
                (made_by[name], False) for name in nodes[at].input if name in made_by and made_by[name] not in placed
            )

    for index in range(len(nodes)):
        place(index)
    del graph.node[:]
    graph.node.extend(order)
