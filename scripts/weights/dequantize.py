"""A float copy of the int8 export: each ConvInteger/MatMulInteger becomes a float Conv/MatMul.

The shipped export quantizes every activation on the fly (``DynamicQuantizeLinear``, one scale per tensor) and
runs integer kernels. Here the weights are dequantized once, ``(w - zero_point) * scale``: the same weights the
export carries, so nothing is added, but onnxruntime runs its float kernels, and the activations are no longer
rounded to 8 bits with a scale that depends on the whole tensor (which couples distant samples: see
engine/windows.py). The pattern rewritten, as the quantizer wrote it::

    DynamicQuantizeLinear(x) → xq, x_scale, x_zero
    ConvInteger(xq, wq, x_zero, w_zero) [→ Add(int32 bias)] → Cast → Mul(x_scale * w_scale) → y
    becomes Conv(x, w, bias) → y

Nodes left without consumers (the quantizers, the bias arithmetic) are pruned by onnx's extractor.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

INTEGER_OPS = {"ConvInteger": "Conv", "MatMulInteger": "MatMul"}


def dequantize(model: Any) -> Any:
    """Return a float copy of ``model`` (an onnx ModelProto) with its integer convolutions and matmuls."""
    import onnx
    import onnx.utils
    from onnx import numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)

    def array(name: str) -> np.ndarray:
        return numpy_helper.to_array(inits[name])

    def only_consumer(name: str, op: str) -> Any | None:
        nodes = consumers.get(name, [])
        return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op else None

    replaced: dict[str, Any] = {}  # name of the first node of a rewritten pattern → its float node
    dropped: set[str] = set()
    added: list[Any] = []
    for node in graph.node:
        if node.op_type not in INTEGER_OPS:
            continue
        quantizer = producer.get(node.input[0])
        weight_q = node.input[1]
        if quantizer is None or quantizer.op_type != "DynamicQuantizeLinear" or weight_q not in inits:
            continue
        bias_add = only_consumer(node.output[0], "Add")
        cast = only_consumer((bias_add or node).output[0], "Cast")
        scale_mul = cast and only_consumer(cast.output[0], "Mul")
        if cast is None or scale_mul is None:
            continue
        scales = producer.get(scale_mul.input[1])
        weight_scale = next((i for i in (scales.input if scales else []) if i in inits), scale_mul.input[1])
        if weight_scale not in inits:
            continue
        w = array(weight_q).astype(np.float32)
        zero = array(node.input[3]).astype(np.float32) if len(node.input) > 3 and node.input[3] else 0.0
        scale = array(weight_scale).astype(np.float32)
        if node.op_type == "ConvInteger":
            shape = (-1,) + (1,) * (w.ndim - 1)
            w = (w - np.reshape(zero, shape)) * np.reshape(scale, shape)
        else:
            w = (w - zero) * scale
        inputs = [quantizer.input[0], f"{weight_q}_float"]
        graph.initializer.append(numpy_helper.from_array(w.astype(np.float32), inputs[1]))
        if bias_add is not None:
            bias = _float_bias(bias_add, producer, inits)
            if bias is None:
                continue
            inputs.append(bias)
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        float_node = onnx.helper.make_node(
            INTEGER_OPS[node.op_type], inputs, [scale_mul.output[0]], name=f"{node.name}_float", **attributes
        )
        replaced[node.name] = float_node
        dropped.update(n.name for n in (bias_add, cast, scale_mul) if n is not None)
        added.append(float_node)

    kept = [replaced.get(n.name, n) for n in graph.node if n.name not in dropped]
    del graph.node[:]
    graph.node.extend(kept)
    # Prune what no output needs any more (quantizers, bias arithmetic, integer weights).
    extracted = onnx.utils.Extractor(model).extract_model(
        [i.name for i in graph.input if i.name not in inits], [o.name for o in graph.output]
    )
    used = {name for node in extracted.graph.node for name in node.input}
    kept_inits = [i for i in extracted.graph.initializer if i.name in used]
    del extracted.graph.initializer[:]
    extracted.graph.initializer.extend(kept_inits)
    return extracted


def _float_bias(bias_add: Any, producer: dict[str, Any], inits: dict[str, Any]) -> str | None:
    """The float bias behind the quantizer's int32 bias: Reshape ← Cast ← Floor ← Div(bias, scale)."""
    name = bias_add.input[1]
    for _ in range(6):
        node = producer.get(name)
        if node is None:
            return None
        if node.op_type == "Div" and node.input[0] in inits:
            return str(node.input[0])
        name = node.input[0]
    return None
