"""The QDQ patterns around recurrent layers (LSTM, GRU, RNN), called by
passes/qdq.py for those ops.

Integer form. A node ptq.py quantized (marked `_integer`, see
cuvil_mcu/ptq_rnn.py) between DequantizeLinear(int8 x), DequantizeLinear
weights and QuantizeLinear readers of Y / Y_h (one parameter set) becomes
cuvil.QLSTM / QGRU / QRNN (ops/qrnn.py). QDQ models from other tools keep
their recurrent layers in float between the DQ and Q nodes, as onnxruntime
runs them (its outputs are the reference there), with the weight-only
form below.

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


def _readers_q(name: str, ctx) -> list[Node] | None:
    """The QuantizeLinear readers of `name` (int8, per tensor, one
    parameter set); [] when nothing reads it; None when another op does."""
    g = ctx.g
    if not name:
        return []
    if name in g.outputs:
        return None
    users = ctx.cons.get(name, [])
    if any(u.op_type != "QuantizeLinear" for u in users):
        return None
    for u in users:
        sc = ctx.const(u.input(1))
        if sc is None or sc.size != 1 or g.tensors[u.outputs[0]].dtype != "int8" or \
                not ctx.same_params(users[0], u) or (u.input(2) and ctx.const(u.input(2)) is None):
            return None
    return users


def _qp(q: Node, ctx) -> tuple[float, int]:
    zp = ctx.const(q.input(2)) if q.input(2) else np.zeros(1)
    return float(np.asarray(ctx.const(q.input(1))).reshape(-1)[0]), int(np.asarray(zp).reshape(-1)[0])


def integer_form(n: Node, ctx) -> bool:
    g = ctx.g
    if not n.attrs.get("_integer"):
        return False
    x = ctx.dq(n.input(0))
    if x is None or g.tensors[x.inputs[0]].dtype != "int8" or ctx.const(x.input(1)) is None or \
            ctx.const(x.input(1)).size != 1 or (x.input(2) and ctx.const(x.input(2)) is None):
        return False
    ws = []
    for i in (IW, IR):
        d = ctx.dq(n.input(i))
        s = _row_scales(d, ctx, g.tensors[n.input(i)].shape) if d is not None else None
        if s is None:
            return False
        ws.append((d.inputs[0], s))
    readers = [_readers_q(n.outputs[j] if len(n.outputs) > j else "", ctx) for j in range(len(n.outputs))]
    if any(r is None for r in readers[:2]) or (len(readers) > 2 and readers[2] != []):
        return False
    qs = [r[0] for r in readers[:2] if r]
    if not qs or any(_qp(q, ctx) != _qp(qs[0], ctx) for q in qs):
        return False
    hs, hz = _qp(qs[0], ctx)
    xs, xz = _qp(x, ctx)
    ins = list(n.inputs) + [""] * (IWS - len(n.inputs))
    ins[0], ins[IW], ins[IR] = x.inputs[0], ws[0][0], ws[1][0]
    ins[IWS:] = [g.add_const(f"{n.name}_W_scale", ws[0][1]), g.add_const(f"{n.name}_R_scale", ws[1][1])]
    attrs = {k: v for k, v in n.attrs.items() if not k.startswith("_")}
    attrs.update(x_scale=xs, x_zp=xz, h_scale=hs, h_zp=hz)
    if n.op_type == "LSTM":
        attrs["cell_pow"] = int(n.attrs.get("_cell_pow", 15))
    outs = []
    for j, r in enumerate(readers[:2]):
        if not r:
            outs.append("")
            continue
        out = r[0].outputs[0]
        for q in r[1:]:
            g.rename_uses(q.outputs[0], out)
            ctx.removed.add(q.name)
        ctx.removed.add(r[0].name)
        outs.append(out)
    while outs and outs[-1] == "":
        outs.pop()
    ctx.new_nodes[n.name] = [Node(n.name, f"cuvil.Q{n.op_type}", ins, outs, attrs, None, list(n.fused), n.opset)]
    return True


def rewrite(n: Node, ctx) -> bool:
    return integer_form(n, ctx) or weights_only(n, ctx)



