"""Derive the two stage graphs (backends/stages.py) from the shipped export, as ``make weights`` does.

``kokoro-weights derive-stages`` writes DEST/kokoro-stage-front-dft.onnx and DEST/kokoro-stage-generator.onnx with
onnx's own extractor and lists them in the manifest with their checksums, like the derived torch weights (derive.py).
The front's STFT becomes a convolution on the way (``stft_as_conv``).
onnx is needed here only, at build time; the server runs the derived files with onnxruntime alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kokoro_tts.backends.stages import DECODER_INPUTS, FRONT_OUTPUTS
from kokoro_tts.weights.layout import DECODER_GRAPH, FRONT_GRAPH, MANIFEST, Manifest, WeightLayout, hash_file

from .transfer import write_atomic

# Where the shipped export (PyTorch module names kept) makes the generator's inputs, and the durations.
CUT = {
    "features": "/decoder/decoder/decode.3/Div_4_output_0",  # the last frame-rate block's output
    "durations": "/encoder/Clip_output_0",
    "harmonics": "/decoder/decoder/generator/Concat_3_output_0",
}


@dataclass(frozen=True)
class StagesResult:
    front: Path
    decoder: Path
    derived: bool


def derive_stages(dest: str | Path, force: bool = False) -> StagesResult:
    """Write the stage graphs beside DEST/kokoro.onnx and list them in the manifest (a no-op when listed)."""
    layout = WeightLayout(dest)
    manifest = layout.read_manifest()
    front, decoder = layout.root / FRONT_GRAPH, layout.root / DECODER_GRAPH
    listed = all(
        (entry := manifest.files.get(name)) is not None and path.is_file() and path.stat().st_size == entry.bytes
        for name, path in ((FRONT_GRAPH, front), (DECODER_GRAPH, decoder))
    )
    if listed and not force:
        return StagesResult(front, decoder, derived=False)
    layout.verify(full=False)
    derive_stage_graphs(layout.onnx_path, front, decoder)
    files = {**manifest.files, FRONT_GRAPH: hash_file(front), DECODER_GRAPH: hash_file(decoder)}
    write_atomic(layout.root / MANIFEST, Manifest(source=manifest.source, files=files, model=manifest.model).to_json())
    return StagesResult(front, decoder, derived=True)


def derive_stage_graphs(model: Path, front: Path, decoder: Path, dft_as_conv: bool = True) -> None:
    """Cut the monolithic export into the front and decoder graphs (onnx is needed at build time only);
    ``dft_as_conv``: the front's STFT computed by a convolution (``stft_as_conv``)."""
    import onnx
    import onnx.utils

    extractor = onnx.utils.Extractor(onnx.load(str(model)))
    graphs = {
        front: extractor.extract_model(["tokens", "style", "speed"], [CUT[name] for name in FRONT_OUTPUTS]),
        decoder: extractor.extract_model([CUT.get(name, name) for name in DECODER_INPUTS], ["audio"]),
    }
    if dft_as_conv:
        stft_as_conv(graphs[front].graph)
    for path, graph in graphs.items():
        for name, tensor in CUT.items():
            _rename(graph.graph, tensor, name)
        tmp = path.with_name(f".{path.name}.part")
        try:
            onnx.save(graph, str(tmp))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


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
