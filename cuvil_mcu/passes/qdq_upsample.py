"""The QDQ patterns around ConvTranspose and Resize / Upsample, called by
passes/qdq.py for those ops.

- DequantizeLinear(x) -> ConvTranspose(DequantizeLinear(constant int8 w),
  [bias]) -> [Relu / Clip] -> QuantizeLinear becomes cuvil.QConvTranspose
  (ops/convtranspose.py), as a Conv becomes QLinearConv: per-tensor x and
  y, weights per tensor or per output channel. onnxruntime's quantize_static
  quantizes ConvTranspose weights along axis 1 (the output channels of a
  group): with groups, those M / group scales are repeated per group, so the
  integer op sees one scale per output channel.
- DequantizeLinear(x) -> Resize / Upsample -> QuantizeLinear with the same
  scale and zero point on both sides (quantize_static gives a Resize its
  input's parameters) becomes cuvil.QResize (ops/resize.py) when the resize
  has an integer form (nearest; linear on a rank-4 NCHW tensor). Other
  Resizes stay float between their DequantizeLinear and QuantizeLinear.
"""
from __future__ import annotations

import numpy as np

from ..ir import Node
from ..ops import resize

OPS = ("ConvTranspose", "Resize", "Upsample")


def rewrite(n: Node, ctx) -> bool:
    return _convt(n, ctx) if n.op_type == "ConvTranspose" else _resize(n, ctx)


def _convt(n: Node, ctx) -> bool:
    from .qdq import _bias, _in_dq, _output_q, _replace, _zp_name
    g = ctx.g
    found = _output_q(n, ctx, allow_act=True)
    if found is None:
        return False
    act, qs, absorbed = found
    if n.act is not None:   # a clamp fused earlier (the QDQ pass run again after PTQ) stays
        act = n.act if act is None else (max(act[0], n.act[0]), min(act[1], n.act[1]))
    x, w = _in_dq(n.inputs[0], ctx), _in_dq(n.inputs[1], ctx, per_tensor=False)
    if x is None or w is None or ctx.const(w.inputs[0]) is None:
        return False
    wt = g.tensors[w.inputs[0]]
    if len(wt.shape) < 3:
        return False
    group = int(n.attr("group", 1))
    mg = int(wt.shape[1])
    ws = np.asarray(ctx.const(w.input(1)), np.float32).reshape(-1)
    if ws.size == 1:
        s_name, z_name, w_scale = w.input(1), _zp_name(w, ctx), ws
    else:
        axis = int(w.attr("axis", 1))
        axis = axis + len(wt.shape) if axis < 0 else axis
        if axis != 1 or ws.size != mg:
            return False
        wz = ctx.const(w.input(2)) if w.input(2) else np.zeros(1, wt.dtype)
        wz = np.broadcast_to(np.asarray(wz).reshape(-1), (mg,))
        w_scale = np.tile(ws, group)
        s_name = g.add_const(f"{w.input(1)}_per_channel", w_scale)
        z_name = g.add_const(f"{w.name}_zp_per_channel", np.tile(wz, group).astype(wt.dtype))
    b = _bias(n.input(2), ctx, ctx.const(x.input(1)).reshape(-1)[0], w_scale, mg * group)
    if b is None:
        return False
    q = qs[0]
    node = Node(n.name, "cuvil.QConvTranspose",
                [x.inputs[0], x.input(1), _zp_name(x, ctx), w.inputs[0], s_name, z_name, q.input(1),
                 _zp_name(q, ctx)] + ([b] if b else []),
                [q.outputs[0]], dict(n.attrs), act, [f"{a.op_type} '{a.name}'" for a in absorbed])
    _replace(n, [node], qs, absorbed, ctx)
    return True


def _resize(n: Node, ctx) -> bool:
    from .qdq import _in_dq, _output_q, _replace, _zp_name
    g = ctx.g
    found = _output_q(n, ctx, allow_act=False)
    if found is None or n.act is not None:
        return False
    _, qs, absorbed = found
    q = qs[0]
    x = _in_dq(n.inputs[0], ctx)
    if x is None or not ctx.same_params(x, q) or g.tensors[x.inputs[0]].dtype != g.tensors[q.outputs[0]].dtype:
        return False
    attrs = resize.int8_attrs(n, [g.tensors[i] if i else None for i in n.inputs])
    if attrs is None:
        return False
    node = Node(n.name, "cuvil.QResize", [x.inputs[0], x.input(1), _zp_name(x, ctx), q.input(1), _zp_name(q, ctx)],
                [q.outputs[0]], attrs)
    _replace(n, [node], qs, absorbed, ctx)
    return True
