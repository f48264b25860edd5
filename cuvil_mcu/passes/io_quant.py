"""Record the quantization of the graph's inputs and outputs on their
tensors (Tensor.quant), so the header can state each I/O tensor's scale and
zero point and give float <-> integer helpers:
- an integer input/output: the parameters of the integer op reading/writing it;
- a float input read by a QuantizeLinear / a float output written by a
  DequantizeLinear: that node's parameters (the integer view of the tensor)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, QuantParams

# op -> (index of its data input's scale, zero point) and (output scale, zero point)
_IN = {"QLinearConv": (1, 2), "QLinearMatMul": (1, 2), "com.microsoft.QGemm": (1, 2),
       "com.microsoft.QLinearAdd": (1, 2), "com.microsoft.QLinearMul": (1, 2),
       "com.microsoft.QLinearAveragePool": (1, 2), "com.microsoft.QLinearGlobalAveragePool": (1, 2),
       "com.microsoft.QLinearSoftmax": (1, 2), "com.microsoft.QLinearSigmoid": (1, 2),
       "com.microsoft.QLinearLeakyRelu": (1, 2), "cuvil.QLut": (1, 2), "DequantizeLinear": (1, 2),
       "QuantizeLinear": (1, 2)}
_OUT = {"QLinearConv": (6, 7), "QLinearMatMul": (6, 7), "com.microsoft.QGemm": (7, 8),
        "com.microsoft.QLinearAdd": (6, 7), "com.microsoft.QLinearMul": (6, 7),
        "com.microsoft.QLinearAveragePool": (3, 4), "com.microsoft.QLinearGlobalAveragePool": (3, 4),
        "com.microsoft.QLinearSoftmax": (3, 4), "com.microsoft.QLinearSigmoid": (3, 4),
        "com.microsoft.QLinearLeakyRelu": (3, 4), "cuvil.QLut": (3, 4), "com.microsoft.QLinearConcat": (0, 1),
        "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2)}
_VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "cuvil.QMaxPool"}


def _params(g: Graph, n, pair) -> QuantParams | None:
    s_i, z_i = pair
    s = g.tensors.get(n.input(s_i)) if n.input(s_i) else None
    if s is None or not s.is_const or s.size != 1:
        return None
    z = g.tensors.get(n.input(z_i)) if n.input(z_i) else None
    # the zero point keeps its integer type: it is the type of the quantized view
    zp = np.asarray(z.data).reshape(1) if z is not None and z.is_const else np.zeros(1, np.uint8)
    return QuantParams(np.asarray(s.data, np.float32).reshape(1), zp)


def _reader(g: Graph, name: str, cons, depth: int = 4):
    for n in cons.get(name, []):
        if n.op_type in _IN and n.inputs[0] == name:
            return _params(g, n, _IN[n.op_type])
        if n.op_type in _VIEWS and n.inputs[0] == name and depth:
            q = _reader(g, n.outputs[0], cons, depth - 1)
            if q is not None:
                return q
    return None


def _writer(g: Graph, name: str, prod, depth: int = 4):
    n = prod.get(name)
    if n is None:
        return None
    if n.op_type in _OUT:
        return _params(g, n, _OUT[n.op_type])
    if n.op_type in _VIEWS and depth:
        return _writer(g, n.inputs[0], prod, depth - 1)
    return None


def run(g: Graph) -> Graph:
    cons, prod = g.consumers(), g.producers()
    for name in g.inputs:
        t = g.tensors[name]
        if t.quant is None:
            t.quant = _reader(g, name, cons)
    for name in g.outputs:
        t = g.tensors[name]
        if t.quant is None and not t.is_const:
            t.quant = _writer(g, name, prod)
    return g
