"""Derive the two stage graphs (backends/stages.py) from the shipped export, as ``make weights`` does.

``kokoro-weights derive-stages`` writes DEST/kokoro-stage-front.onnx and DEST/kokoro-stage-generator.onnx with
onnx's own extractor and lists them in the manifest with their checksums, like the derived torch weights (derive.py).
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


def derive_stage_graphs(model: Path, front: Path, decoder: Path) -> None:
    """Cut the monolithic export into the front and decoder graphs (onnx is needed at build time only)."""
    import onnx
    import onnx.utils

    extractor = onnx.utils.Extractor(onnx.load(str(model)))
    graphs = {
        front: extractor.extract_model(["tokens", "style", "speed"], [CUT[name] for name in FRONT_OUTPUTS]),
        decoder: extractor.extract_model([CUT.get(name, name) for name in DECODER_INPUTS], ["audio"]),
    }
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
