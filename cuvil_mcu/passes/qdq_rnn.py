"""The QDQ patterns around recurrent layers (LSTM, GRU, RNN), called by
passes/qdq.py for those ops.

onnxruntime's quantize_static leaves recurrent layers in float; other
quantizers (and weight-only schemes) feed them DequantizeLinear weights.
Such a node keeps running in float, but when W and R are symmetric int8
constants (zero point 0) with one scale per gate row or per tensor, the
node reads the int8 constants directly, with per-row scales as inputs 8
and 9 (ops/rnn.py): the weights stay int8 in flash (a quarter of the
float bytes) and the kernel scales each row's partial sums. Other
DequantizeLinear weights (uint8, non-zero zero points, scales varying
along the input axis) are folded to float constants as usual.
"""
from __future__ import annotations

import numpy as np

from ..ir import Node
from ..ops.rnn import GATES, IR, IW, IWS

OPS = tuple(GATES)


def _row_scales(d: Node, ctx, shape) -> np.ndarray | None:
    """[D, rows] float32 scales when DequantizeLinear d dequantizes a
    constant int8 tensor of `shape` [D, rows, cols] with zero point 0 and a
    scale constant along cols; else None."""
    src = ctx.g.tensors[d.inputs[0]]
    scale = ctx.const(d.input(1))
    if src.dtype != "int8" or not src.is_const or scale is None or tuple(src.shape) != tuple(shape):
        return None
    zp = ctx.const(d.input(2)) if d.input(2) else np.zeros(1, np.int8)
    if zp is None or np.any(zp != 0):
        return None
    scale = np.asarray(scale, np.float32)
    if scale.size == 1:
        full = np.broadcast_to(scale.reshape(()), shape)
    else:
        axis = int(d.attr("axis", 1))
        axis = axis + 3 if axis < 0 else axis
        if scale.ndim != 1 or not 0 <= axis < 3 or scale.size != shape[axis]:
            return None
        view = [1, 1, 1]
        view[axis] = scale.size
        full = np.broadcast_to(scale.reshape(view), shape)
    if not np.all(full == full[:, :, :1]):
        return None
    return np.ascontiguousarray(full[:, :, 0], np.float32)


def weights_only(n: Node, ctx) -> bool:
    """Point n's W and R at their int8 constants (see the module doc)."""
    g = ctx.g
    found = []
    for i in (IW, IR):
        d = ctx.dq(n.input(i))
        if d is None:
            return False
        s = _row_scales(d, ctx, g.tensors[n.input(i)].shape)
        if s is None:
            return False
        found.append((d.inputs[0], s))
    ins = list(n.inputs) + [""] * (IWS - len(n.inputs))
    ins[IW], ins[IR] = found[0][0], found[1][0]
    ins[IWS:] = [g.add_const(f"{n.name}_W_scale", found[0][1]), g.add_const(f"{n.name}_R_scale", found[1][1])]
    ctx.new_nodes[n.name] = [Node(n.name, n.op_type, ins, list(n.outputs), dict(n.attrs), n.act, list(n.fused),
                                  n.opset)]
    return True


def rewrite(n: Node, ctx) -> bool:
    return weights_only(n, ctx)



