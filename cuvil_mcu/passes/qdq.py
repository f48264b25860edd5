"""QDQ -> QOperator: rewrite DequantizeLinear -> float op -> QuantizeLinear
patterns into integer ops, so one set of integer kernels serves QDQ models
(onnxruntime's quantize_static, tf2onnx's TFLite conversions) and QOperator
models alike.

A float node is rewritten when every float data input comes from a
DequantizeLinear (of a run-time tensor or of a constant), and its output —
possibly through one Relu/Clip, which becomes the fused clamp — is read only by
QuantizeLinear nodes with identical parameters. Whatever does not match stays
float between its DQ and Q: mixed precision, listed in the graph notes.

Conventions seen in real models (handled here):
- Relu disappears when the activation zero point is the type minimum: the
  integer kernel's saturation is that Relu.
- tf2onnx writes FULLY_CONNECTED as MatMul + Add(bias): the pair becomes a
  com.microsoft.QGemm with the int32 bias.
- MaxPool / Reshape & co. keep their input's scale: they run on the integer
  tensor directly (MaxPool as cuvil.QMaxPool).
- Unary float functions (Sigmoid, Tanh, HardSwish, ...) become a 256-entry
  lookup table (cuvil.QLut).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from . import qdq_rnn, qdq_upsample

INT_TYPES = ("int8", "uint8")
# Ops that move or select integer values without changing scale.
PASS_THROUGH = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "MaxPool",
                "Slice", "Gather", "Split", "Pad"}
LUT_FNS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "HardSwish": "hardswish", "HardSigmoid": "hardsigmoid",
           "Erf": "erf", "Exp": "exp", "Relu": "relu", "LeakyRelu": "leaky_relu", "Clip": "clip",
           "Gelu": "gelu"}


class _Ctx:
    def __init__(self, g: Graph):
        self.g = g
        self.prod = g.producers()
        self.cons = g.consumers()
        self.new_nodes: dict[str, list[Node]] = {}   # name of replaced node -> replacements
        self.removed: set[str] = set()

    def dq(self, name: str) -> Node | None:
        n = self.prod.get(name)
        return n if n is not None and n.op_type == "DequantizeLinear" and n.name not in self.removed else None

    def const(self, name: str) -> np.ndarray | None:
        t = self.g.tensors.get(name) if name else None
        return t.data if t is not None and t.is_const else None

    def same_params(self, a: Node, b: Node) -> bool:
        """Two Q/DQ nodes with identical scale, zero point and axis."""
        for i in (1, 2):
            x, y = self.const(a.input(i)), self.const(b.input(i))
            if (x is None) != (y is None):
                return False
            if x is not None and (x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y)):
                return False
        return a.attr("axis", 1) == b.attr("axis", 1) or self.const(a.input(1)).size == 1


def _act(n: Node, ctx: _Ctx) -> tuple[float, float] | None:
    if n.op_type == "Relu":
        return (0.0, float("inf"))
    if n.op_type == "Clip":
        lo = n.attr("min", -np.inf)
        hi = n.attr("max", np.inf)
        for i, what in ((1, "lo"), (2, "hi")):
            if n.input(i):
                v = ctx.const(n.input(i))
                if v is None:
                    return None
                if what == "lo":
                    lo = float(v.reshape(-1)[0])
                else:
                    hi = float(v.reshape(-1)[0])
        return (float(lo), float(hi))
    return None


def _output_q(n: Node, ctx: _Ctx, allow_act: bool):
    """(act, [Q nodes], [nodes absorbed]) when n's output reaches only Q nodes
    with one parameter set (through at most one Relu/Clip if allow_act)."""
    out = n.outputs[0]
    if out in ctx.g.outputs:
        return None
    users = ctx.cons.get(out, [])
    act, absorbed = None, []
    if allow_act and len(users) == 1 and users[0].op_type in ("Relu", "Clip"):
        a = _act(users[0], ctx)
        if a is not None and users[0].outputs[0] not in ctx.g.outputs:
            act, absorbed = a, [users[0]]
            users = ctx.cons.get(users[0].outputs[0], [])
    if not users or any(u.op_type != "QuantizeLinear" for u in users):
        return None
    if any(not ctx.same_params(users[0], u) for u in users[1:]):
        return None
    if ctx.const(users[0].input(1)) is None or ctx.const(users[0].input(1)).size != 1:
        return None
    if ctx.g.tensors[users[0].outputs[0]].dtype not in INT_TYPES:
        return None
    return act, users, absorbed


def _in_dq(name: str, ctx: _Ctx, per_tensor: bool = True, channel_axis: int | None = None):
    """The DQ node feeding a float input, if it dequantizes int8/uint8 with
    constant params (per-tensor when asked; per-axis only along
    `channel_axis`, the axis the integer kernel scales by)."""
    d = ctx.dq(name)
    if d is None:
        return None
    src = ctx.g.tensors[d.inputs[0]]
    if src.dtype not in INT_TYPES or ctx.const(d.input(1)) is None:
        return None
    if d.input(2) and ctx.const(d.input(2)) is None:
        return None
    if per_tensor and ctx.const(d.input(1)).size != 1:
        return None
    if ctx.const(d.input(1)).size != 1 and channel_axis is not None:
        axis = int(d.attr("axis", 1))
        if (axis + len(src.shape) if axis < 0 else axis) != channel_axis:
            return None    # per-axis along another axis (e.g. input channels): stays float
    return d


def _zp_name(d: Node, ctx: _Ctx) -> str:
    """Zero-point input of a DQ/Q node; a zero of its type when absent."""
    if d.input(2):
        return d.input(2)
    dtype = ctx.g.tensors[d.inputs[0]].dtype if d.op_type == "DequantizeLinear" else "uint8"
    return ctx.g.add_const(f"{d.name}_zp", np.zeros((), dtype=dtype))


def _bias(name: str, ctx: _Ctx, in_scale: np.ndarray, w_scale: np.ndarray, channels: int) -> str | None:
    """An int32 bias at scale in_scale * w_scale: taken as is from
    DQ(int32) when its scale is that product (to float32 rounding), else
    requantized from its real value."""
    if not name:
        return ""
    d = ctx.dq(name)
    target = (np.float32(in_scale) * np.asarray(w_scale, np.float32)).astype(np.float64)
    if d is not None and ctx.g.tensors[d.inputs[0]].dtype == "int32" and ctx.const(d.inputs[0]) is not None:
        q = ctx.const(d.inputs[0]).astype(np.int64).reshape(-1)
        s = ctx.const(d.input(1)).astype(np.float64).reshape(-1)
        zp = ctx.const(d.input(2)).astype(np.int64).reshape(-1) if d.input(2) else np.zeros(1, np.int64)
        if np.all(zp == 0) and np.allclose(s, target, rtol=1e-6, atol=0):
            q = np.broadcast_to(q, (channels,)) if q.size == 1 else q
            return ctx.g.add_const(f"{name}_q", q.astype(np.int32))
        real = (q - zp) * s
    else:
        real = ctx.const(name)
        if real is None:
            return None
        real = real.astype(np.float64).reshape(-1)
    real = np.broadcast_to(real, (channels,)) if real.size == 1 else real
    if real.size != channels:
        return None
    q = np.rint(real / np.broadcast_to(target, (channels,)))
    return ctx.g.add_const(f"{name}_q", np.clip(q, -2 ** 31, 2 ** 31 - 1).astype(np.int32))


def _fc_bias_add(n: Node, ctx: _Ctx) -> Node | None:
    """tf2onnx's FULLY_CONNECTED: MatMul -> Add(constant bias) -> [Relu] -> Q.
    The Add when it is the MatMul's only reader and its other operand is a
    constant (or DQ of one) broadcasting over the output columns."""
    out = n.outputs[0]
    users = ctx.cons.get(out, [])
    if out in ctx.g.outputs or len(users) != 1 or users[0].op_type != "Add":
        return None
    add = users[0]
    other = add.inputs[1] if add.inputs[0] == out else add.inputs[0]
    d = ctx.dq(other)
    src = d.inputs[0] if d is not None else other
    t = ctx.g.tensors[src]
    if not t.is_const or len(t.shape) > 2 or (len(t.shape) == 2 and t.shape[0] != 1):
        return None
    return add


def _replace(n: Node, new: list[Node], qs: list[Node], absorbed: list[Node], ctx: _Ctx) -> None:
    """new[-1] writes qs[0]'s output; other Q outputs are renamed to it."""
    out = qs[0].outputs[0]
    for q in qs[1:]:
        ctx.g.rename_uses(q.outputs[0], out)
        ctx.removed.add(q.name)
    ctx.new_nodes[n.name] = new
    ctx.removed.add(qs[0].name)
    for a in absorbed:
        ctx.removed.add(a.name)


def _rewrite(n: Node, ctx: _Ctx) -> bool:
    g = ctx.g
    t = n.op_type
    if t in qdq_rnn.OPS:   # recurrent layers: their own patterns
        return qdq_rnn.rewrite(n, ctx)
    if t in qdq_upsample.OPS:   # ConvTranspose, Resize / Upsample
        return qdq_upsample.rewrite(n, ctx)
    if t in ("Conv", "MatMul", "Gemm", "Add", "Mul", "Sum", "BatchNormalization"):
        allow_act = True
    elif t == "LRN":
        allow_act = False
    elif t in ("AveragePool", "GlobalAveragePool", "Softmax", "Concat") or t in LUT_FNS:
        allow_act = t in ("AveragePool", "GlobalAveragePool", "Concat")
    elif t in PASS_THROUGH:
        allow_act = False
    else:
        return False
    bias_add = _fc_bias_add(n, ctx) if t == "MatMul" else None
    found = _output_q(bias_add or n, ctx, allow_act)
    if found is None:
        return False
    act, qs, absorbed = found
    if n.act is not None:  # a clamp fused earlier (e.g. when re-run after PTQ) stays
        act = n.act if act is None else (max(act[0], n.act[0]), min(act[1], n.act[1]))
        if t not in ("Conv", "MatMul", "Gemm", "Add", "Mul", "AveragePool", "GlobalAveragePool", "Concat", "Sum",
                     "BatchNormalization"):
            return False
    if bias_add is not None:
        absorbed = [bias_add] + absorbed
    q = qs[0]
    y_s, y_zp = q.input(1), _zp_name(q, ctx)
    out = q.outputs[0]

    if t == "Conv":
        x, w = _in_dq(n.inputs[0], ctx), _in_dq(n.inputs[1], ctx, per_tensor=False, channel_axis=0)
        if x is None or w is None or ctx.const(w.inputs[0]) is None:
            return False
        m = g.tensors[w.inputs[0]].shape[0]
        ws = ctx.const(w.input(1)).reshape(-1)
        if ws.size not in (1, m):
            return False
        b = _bias(n.input(2), ctx, ctx.const(x.input(1)).reshape(-1)[0], ws, m)
        if b is None:
            return False
        node = Node(n.name, "QLinearConv",
                    [x.inputs[0], x.input(1), _zp_name(x, ctx), w.inputs[0], w.input(1), _zp_name(w, ctx),
                     y_s, y_zp] + ([b] if b else []), [out], dict(n.attrs), act, [f"{a.op_type} '{a.name}'" for a in absorbed])
        _replace(n, [node], qs, absorbed, ctx)
        return True

    if t in ("MatMul", "Gemm"):
        # per-axis B only along its output columns (a 2-D B; QLinearMatMul takes per-tensor only)
        cols = 0 if t == "Gemm" and int(n.attr("transB", 0)) else 1
        a, bq = _in_dq(n.inputs[0], ctx), _in_dq(n.inputs[1], ctx, per_tensor=False, channel_axis=cols)
        if a is None or bq is None:
            return False
        bconst = ctx.const(bq.inputs[0]) is not None
        bs = ctx.const(bq.input(1)).reshape(-1)
        if t == "Gemm":
            attrs = {k: v for k, v in n.attrs.items() if k in ("transA", "transB", "alpha", "_requant")}
            if n.input(2) and float(n.attr("beta", 1.0)) == 0.0:
                cname = ""
            else:
                trans_b = int(n.attr("transB", 0))
                ncols = g.tensors[bq.inputs[0]].shape[0 if trans_b else 1]
                if float(n.attr("beta", 1.0)) != 1.0 or int(n.attr("transA", 0)):
                    return False
                alpha = float(n.attr("alpha", 1.0))
                cname = _bias(n.input(2), ctx, ctx.const(a.input(1)).reshape(-1)[0] * alpha, bs, ncols)
                if cname is None:
                    return False
            node = Node(n.name, "com.microsoft.QGemm",
                        [a.inputs[0], a.input(1), _zp_name(a, ctx), bq.inputs[0], bq.input(1), _zp_name(bq, ctx),
                         cname, y_s, y_zp], [out], attrs, act, [f"{x.op_type} '{x.name}'" for x in absorbed])
            _replace(n, [node], qs, absorbed, ctx)
            return True
        # MatMul: per-tensor B for QLinearMatMul; with a constant 2-D B and a
        # 2-D A it is a fully-connected layer (QGemm), bias from a following Add.
        if g.tensors[bq.inputs[0]].shape and len(g.tensors[bq.inputs[0]].shape) == 2 and bconst and \
                len(g.tensors[a.inputs[0]].shape) == 2:
            cname = ""
            if bias_add is not None:
                other = bias_add.inputs[1] if bias_add.inputs[0] == n.outputs[0] else bias_add.inputs[0]
                ncols = g.tensors[bq.inputs[0]].shape[1]
                cname = _bias(other, ctx, ctx.const(a.input(1)).reshape(-1)[0], bs, ncols)
                if cname is None:
                    return False
            node = Node(n.name, "com.microsoft.QGemm",
                        [a.inputs[0], a.input(1), _zp_name(a, ctx), bq.inputs[0], bq.input(1), _zp_name(bq, ctx),
                         cname, y_s, y_zp], [out], {}, act, [f"{x.op_type} '{x.name}'" for x in absorbed])
            _replace(n, [node], qs, absorbed, ctx)
            return True
        if bs.size != 1 or bias_add is not None:
            return False
        node = Node(n.name, "QLinearMatMul",
                    [a.inputs[0], a.input(1), _zp_name(a, ctx), bq.inputs[0], bq.input(1), _zp_name(bq, ctx),
                     y_s, y_zp], [out], {}, act, [f"{x.op_type} '{x.name}'" for x in absorbed])
        _replace(n, [node], qs, absorbed, ctx)
        return True

    if t in ("Add", "Mul"):
        node = _affine_q(n, ctx, y_s, y_zp, out, act, absorbed)
        if node is not None:
            _replace(n, [node], qs, absorbed, ctx)
            return True
        a, b = _in_dq(n.inputs[0], ctx), _in_dq(n.inputs[1], ctx)
        if a is None or b is None:
            return False
        node = Node(n.name, f"com.microsoft.QLinear{t}",
                    [a.inputs[0], a.input(1), _zp_name(a, ctx), b.inputs[0], b.input(1), _zp_name(b, ctx),
                     y_s, y_zp], [out], {}, act, [f"{x.op_type} '{x.name}'" for x in absorbed])
        _replace(n, [node], qs, absorbed, ctx)
        return True

    if t in ("AveragePool", "GlobalAveragePool", "Softmax"):
        x = _in_dq(n.inputs[0], ctx)
        if x is None:
            return False
        op = {"AveragePool": "com.microsoft.QLinearAveragePool",
              "GlobalAveragePool": "com.microsoft.QLinearGlobalAveragePool",
              "Softmax": "com.microsoft.QLinearSoftmax"}[t]
        attrs = dict(n.attrs)
        if t == "Softmax":
            attrs.setdefault("axis", -1 if g.opset >= 13 else 1)
            attrs["opset"] = g.opset
        node = Node(n.name, op, [x.inputs[0], x.input(1), _zp_name(x, ctx), y_s, y_zp], [out], attrs, act,
                    [f"{a.op_type} '{a.name}'" for a in absorbed])
        _replace(n, [node], qs, absorbed, ctx)
        return True

    if t in LUT_FNS:
        x = _in_dq(n.inputs[0], ctx)
        if x is None:
            return False
        attrs = {"fn": LUT_FNS[t]}
        if t == "LeakyRelu":
            attrs["alpha"] = float(n.attr("alpha", 0.01))
        if t == "HardSigmoid":
            attrs["alpha"], attrs["beta"] = float(n.attr("alpha", 0.2)), float(n.attr("beta", 0.5))
        if t == "Gelu":
            attrs["approximate"] = n.attr("approximate", "none")
        if t == "Clip":
            bounds = _act(n, ctx)
            if bounds is None:
                return False
            attrs["lo"], attrs["hi"] = bounds
        node = Node(n.name, "cuvil.QLut", [x.inputs[0], x.input(1), _zp_name(x, ctx), y_s, y_zp], [out], attrs)
        _replace(n, [node], qs, absorbed, ctx)
        return True

    if t == "Concat":
        dqs = [_in_dq(i, ctx) for i in n.inputs]
        if any(d is None for d in dqs):
            return False
        ins = [y_s, y_zp]
        for d in dqs:
            ins += [d.inputs[0], d.input(1), _zp_name(d, ctx)]
        node = Node(n.name, "com.microsoft.QLinearConcat", ins, [out], {"axis": n.attr("axis")}, act)
        _replace(n, [node], qs, absorbed, ctx)
        return True

    if t == "Sum":
        dqs = [_in_dq(i, ctx) for i in n.inputs]
        if not dqs or any(d is None or g.tensors[d.inputs[0]].dtype != g.tensors[out].dtype for d in dqs):
            return False
        ins = [y_s, y_zp]
        for d in dqs:
            ins += [d.inputs[0], d.input(1), _zp_name(d, ctx)]
        node = Node(n.name, "cuvil.QSum", ins, [out], {}, act, [f"{a.op_type} '{a.name}'" for a in absorbed])
        _replace(n, [node], qs, absorbed, ctx)
        return True

    if t == "LRN":
        x = _in_dq(n.inputs[0], ctx)
        if x is None or g.tensors[x.inputs[0]].dtype != g.tensors[out].dtype:
            return False
        attrs = {k: n.attrs[k] for k in ("size", "alpha", "beta", "bias") if k in n.attrs}
        node = Node(n.name, "cuvil.QLRN", [x.inputs[0], x.input(1), _zp_name(x, ctx), y_s, y_zp], [out], attrs)
        _replace(n, [node], qs, absorbed, ctx)
        return True

    if t == "BatchNormalization":
        node = _affine_q(n, ctx, y_s, y_zp, out, act, absorbed)
        if node is None:
            return False
        _replace(n, [node], qs, absorbed, ctx)
        return True

    if t in PASS_THROUGH:
        x = _in_dq(n.inputs[0], ctx)
        if x is None or not ctx.same_params(x, q) or g.tensors[x.inputs[0]].dtype != g.tensors[out].dtype:
            return False
        if len(n.outputs) != 1:
            return False
        if t == "Pad":
            mode = n.attr("mode", "constant")
            value = ctx.const(n.input(2)) if n.input(2) else None
            if mode != "constant" or (value is not None and float(value.reshape(-1)[0]) != 0.0) or \
                    float(n.attr("value", 0.0)) != 0.0:
                return False
            # the quantized zero is the zero point
            zp = ctx.const(x.input(2)) if x.input(2) else np.zeros((), g.tensors[x.inputs[0]].dtype)
            vname = g.add_const(f"{n.name}_pad_zp", np.asarray(zp, dtype=g.tensors[x.inputs[0]].dtype).reshape(()))
            ins = [x.inputs[0], n.input(1) or "", vname] + n.inputs[3:]
            if g.opset < 11:
                return False
            node = Node(n.name, "Pad", ins, [out], dict(n.attrs))
        else:
            op = "cuvil.QMaxPool" if t == "MaxPool" else t
            node = Node(n.name, op, [x.inputs[0]] + n.inputs[1:], [out], dict(n.attrs))
        _replace(n, [node], qs, absorbed, ctx)
        return True
    return False


def _affine_q(n: Node, ctx: _Ctx, y_s: str, y_zp: str, out: str, act, absorbed) -> Node | None:
    """DQ -> BatchNormalization -> Q, or DQ(x) -> Mul / Add by a per-channel
    constant (BatchNorm as Caffe2 writes it) -> Q: a per-channel affine map,
    as one integer cuvil.QAffine (ops/batchnorm.py: one rounding, within
    2^-k of a step of the real map). None when it does not apply (run-time
    statistics; a scalar constant, which stays TFLM's MUL / ADD recipe)."""
    from ..ops.batchnorm import bn_coeffs
    from .fold_affine import _per_channel
    g = ctx.g
    if n.op_type == "BatchNormalization":
        x = _in_dq(n.inputs[0], ctx)
        params = [ctx.const(i) for i in n.inputs[1:5]]
        if x is None or any(o for o in n.outputs[1:]) or len(params) != 4 or any(p is None for p in params):
            return None
        s, t = bn_coeffs(n, *params)
        what = f"BatchNormalization '{n.name}'"
    else:
        consts = [i for i in (0, 1) if ctx.const(n.input(i)) is not None]
        if len(n.inputs) != 2 or len(consts) != 1:
            return None
        x = _in_dq(n.inputs[1 - consts[0]], ctx)
        if x is None or g.tensors[out].shape != g.tensors[x.inputs[0]].shape:
            return None
        v = _per_channel(ctx.const(n.input(consts[0])), g.tensors[x.inputs[0]].shape)
        if v is None or v.size < 2 or np.all(v == v[0]):
            return None
        s, t = (v, np.zeros_like(v)) if n.op_type == "Mul" else (np.ones_like(v), v)
        what = f"{n.op_type} '{n.name}' by a per-channel constant"
    src = g.tensors[x.inputs[0]]
    if len(src.shape) < 2 or src.dtype != g.tensors[out].dtype or s.size != src.shape[1]:
        return None
    ins = [x.inputs[0], x.input(1), _zp_name(x, ctx), y_s, y_zp,
           g.add_const(f"{n.name}_S", np.asarray(s, np.float32)), g.add_const(f"{n.name}_T", np.asarray(t, np.float32))]
    return Node(n.name, "cuvil.QAffine", ins, [out], {}, act,
                [f"{what} (per-channel affine)"] + [f"{a.op_type} '{a.name}'" for a in absorbed])


def _fix_shapes(g: Graph, nodes: list[Node]) -> None:
    """New nodes write the Q outputs, whose tensors already have the right
    shape and dtype; make sure each output tensor exists."""
    for n in nodes:
        for o in n.outputs:
            assert not o or o in g.tensors, o   # "": an absent optional output


def run(g: Graph) -> Graph:
    ctx = _Ctx(g)
    rewrote = False
    for n in list(g.nodes):
        if n.name in ctx.removed:
            continue
        if _rewrite(n, ctx):
            rewrote = True
            ctx.removed.add(n.name)
            ctx.cons = g.consumers()
    if not rewrote:
        return g
    nodes = []
    for n in g.nodes:
        if n.name in ctx.new_nodes:
            nodes.extend(ctx.new_nodes[n.name])
        elif n.name not in ctx.removed:
            nodes.append(n)
    g.nodes = _reorder(nodes, g)
    _fix_shapes(g, nodes)
    return g


def _reorder(nodes: list[Node], g: Graph) -> list[Node]:
    """New nodes may read tensors produced later in the old order (a Q output
    renamed); restore a topological order, stable otherwise."""
    from ..frontend.onnx_loader import _topo_sort
    return _topo_sort(nodes, set(g.inputs) | {k for k, t in g.tensors.items() if t.is_const})
