"""Element-wise ops: binary with numpy broadcasting (Add, Sub, Mul, Div, Pow
with a tensor exponent, Max, Min) and unary activations/math (Relu, LeakyRelu,
Clip, Sigmoid, Tanh, HardSigmoid, HardSwish, Erf, Sqrt, Exp, Neg, Abs, Pow
with a constant exponent).

Binary kernels take broadcast strides computed here: the shapes are padded to
MAX_DIMS and neighbouring dimensions that broadcast the same way are merged,
so the common cases (same shape, scalar, per-channel) become one or two loops.
"""
from __future__ import annotations

import math

import numpy as np

from .base import (Op, apply_act, broadcast_shape, const_float, invalid, register, require_float, shape_error,
                   unsupported)

MAX_DIMS = 6

# Binary: ONNX op -> (numpy function, C expression over x (a) and y (b)).
BINARY = {
    "Add": (np.add, "x + y"),
    "Sub": (np.subtract, "x - y"),
    "Mul": (np.multiply, "x * y"),
    "Div": (np.divide, "x / y"),
    "Pow": (np.power, "powf(x, y)"),
    # NaN in either operand gives NaN, as numpy and onnxruntime
    "Max": (np.maximum, "(x > y || x != x) ? x : y"),
    "Min": (np.minimum, "(x < y || x != x) ? x : y"),
}


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(np.float32)


def _hard_sigmoid(x, a, b):
    return np.maximum(np.float32(0), np.minimum(np.float32(1), x * np.float32(a) + np.float32(b)))


# Unary: ONNX op -> (reference(x, p0, p1), C expression over v, p0, p1, attribute defaults p0/p1).
UNARY = {
    "Relu": (lambda x, p0, p1: np.maximum(x, np.float32(0)), "v < 0.0f ? 0.0f : v"),
    "LeakyRelu": (lambda x, p0, p1: np.where(x >= 0, x, x * np.float32(p0)), "v >= 0.0f ? v : v * p0"),
    # min(max(v, lo), hi) as ONNX and numpy define it: hi wins when lo > hi,
    # NaN stays NaN.
    "Clip": (lambda x, p0, p1: np.minimum(np.maximum(x, np.float32(p0)), np.float32(p1)),
             "((v < p0 ? p0 : v) > p1) ? p1 : (v < p0 ? p0 : v)"),
    "Sigmoid": (lambda x, p0, p1: (np.float32(1) / (np.float32(1) + np.exp(-x))), "1.0f / (1.0f + expf(-v))"),
    "Tanh": (lambda x, p0, p1: np.tanh(x), "tanhf(v)"),
    "HardSigmoid": (lambda x, p0, p1: _hard_sigmoid(x, p0, p1), "fmaxf(0.0f, fminf(1.0f, v * p0 + p1))"),
    "HardSwish": (lambda x, p0, p1: x * _hard_sigmoid(x, 1.0 / 6.0, 0.5),
                  "v * fmaxf(0.0f, fminf(1.0f, v * (1.0f / 6.0f) + 0.5f))"),
    "Erf": (lambda x, p0, p1: _erf(x), "erff(v)"),
    "Sqrt": (lambda x, p0, p1: np.sqrt(x), "sqrtf(v)"),
    "Exp": (lambda x, p0, p1: np.exp(x), "expf(v)"),
    "Neg": (lambda x, p0, p1: -x, "-v"),
    "Abs": (lambda x, p0, p1: np.abs(x), "fabsf(v)"),
    "Reciprocal": (lambda x, p0, p1: np.float32(1) / x, "1.0f / v"),
    # Pow with a constant scalar exponent p0; exact squares stay multiplies.
    "PowConst": (lambda x, p0, p1: np.power(x, np.float32(p0)), "powf(v, p0)"),
}

POW_SPECIAL = {2.0: "v * v", 3.0: "v * v * v", 1.0: "v", 0.5: "sqrtf(v)", -1.0: "1.0f / v"}


def _unary_params(node, ins) -> tuple[float, float]:
    t = node.op_type
    if t == "LeakyRelu":
        return float(node.attr("alpha", 0.01)), 0.0
    if t == "HardSigmoid":
        return float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    if t == "Clip":
        # opset < 11: attributes; opset >= 11: optional inputs 1 and 2.
        lo = node.attr("min", -3.4028234663852886e38)
        hi = node.attr("max", 3.4028234663852886e38)
        lo = const_float(node, ins[1] if len(ins) > 1 else None, "Clip min", lo)
        hi = const_float(node, ins[2] if len(ins) > 2 else None, "Clip max", hi)
        return float(lo), float(hi)
    return 0.0, 0.0


def _pow_exponent(ins) -> float | None:
    """The exponent of a Pow, when it is one constant scalar."""
    e = ins[1]
    if e is not None and e.is_const and e.data.size == 1:
        return float(np.asarray(e.data).reshape(-1)[0])
    return None


@register(*BINARY)
class Binary(Op):
    inplace = True
    fuses_act = True

    def can_inplace(self, node):
        return len(node.inputs) == 2  # a variadic chain reads its inputs after the first write

    def check(self, node, ins):
        if node.op_type == "Pow" and _pow_exponent(ins) is not None:
            require_float(node, ins, 0)
            return
        if any(t is not None and t.is_const for t in ins) and all(t is not None and t.is_const for t in ins):
            return  # folded at load time, any dtype
        require_float(node, ins, 0, 1)

    def infer(self, node, ins):
        if len(ins) != 2 and node.op_type not in ("Max", "Min"):
            raise shape_error(node, f"takes 2 inputs, has {len(ins)}")
        return [(broadcast_shape(node, *[t.shape for t in ins]), ins[0].dtype)]

    def reference(self, node, ins, a, *rest):
        if len(rest) != 1:  # variadic Max/Min: fold pairwise (1 input: a copy)
            y = np.asarray(a)
            for b in rest:
                y = BINARY[node.op_type][0](y, b)
            return [apply_act(np.broadcast_to(y, self.infer(node, ins)[0][0]).astype(np.asarray(a).dtype), node.act)]
        b = rest[0]
        if node.op_type == "Pow" and np.issubdtype(np.asarray(a).dtype, np.floating):
            y = np.power(a, np.asarray(b, dtype=np.asarray(a).dtype))
        elif node.op_type == "Div" and np.issubdtype(np.asarray(a).dtype, np.integer):
            if np.any(np.asarray(b) == 0):
                raise invalid(node, f"integer division by zero (divisor '{node.input(1)}' holds 0)")
            with np.errstate(all="ignore"):
                y = np.trunc(np.asarray(a) / np.asarray(b)).astype(np.asarray(a).dtype)
        else:
            y = BINARY[node.op_type][0](a, b)
        y = np.asarray(y).astype(np.asarray(a).dtype)
        return [apply_act(y, node.act)]

    def emit(self, node, ins, outs, k):
        from ..codegen import act_bounds
        lo, hi = act_bounds(node)
        if node.op_type == "Pow" and _pow_exponent(ins) is not None:
            e = _pow_exponent(ins)
            expr = POW_SPECIAL.get(e, "powf(v, p0)")
            name = "pow_" + {2.0: "sq", 3.0: "cube", 1.0: "id", 0.5: "sqrt", -1.0: "recip"}.get(e, "const")
            fn = k.kernel("unary_f32", {"name": name, "expr": expr})
            k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(ins[0])}, {outs[0].size}, {k.f32(e)}, 0.0f);")
            return
        fn = k.kernel("binary_f32", {"name": node.op_type.lower(), "expr": BINARY[node.op_type][1]})
        # Variadic Max/Min: y = op(x0, x0) broadcast to the output, then
        # y = op(y, xi) in place; only the last step applies the fused clamp.
        if len(ins) == 2:
            steps = [(ins[0], ins[1])]
        else:
            steps = [(ins[0], ins[0])] + [(outs[0], t) for t in ins[1:]]
        for j, (a, b) in enumerate(steps):
            last = j == len(steps) - 1
            shape, sa, sb = broadcast_strides(a.shape, b.shape, outs[0].shape)
            dims = k.const(np.array(shape, np.int32), "bcast_shape")
            stra = k.const(np.array(sa, np.int32), "bcast_stride")
            strb = k.const(np.array(sb, np.int32), "bcast_stride")
            k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(a)}, {k.ptr(b)}, {dims}, {stra}, {strb}, "
                   f"{lo if last else '-INFINITY'}, {hi if last else 'INFINITY'});")


@register("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish",
          "Erf", "Sqrt", "Exp", "Neg", "Abs", "Reciprocal")
class Unary(Op):
    inplace = True

    def check(self, node, ins):
        if all(t is None or t.is_const for t in ins):
            return
        require_float(node, ins, 0)
        if node.op_type == "Clip":
            for i, what in ((1, "min"), (2, "max")):
                if len(ins) > i and ins[i] is not None and not ins[i].is_const:
                    raise unsupported(node, f"Clip {what} '{ins[i].name}' must be a constant")
            if any(np.isnan(v) for v in _unary_params(node, ins)):
                raise invalid(node, f"a bound is NaN {list(_unary_params(node, ins))}")

    def infer(self, node, ins):
        return [(ins[0].shape, ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        p0, p1 = _unary_params(node, ins)
        fn = UNARY[node.op_type][0]
        x = np.asarray(x)
        if node.op_type in ("Relu", "Neg", "Abs", "Clip") and not np.issubdtype(x.dtype, np.floating):
            y = fn(x, p0, p1) if node.op_type != "Clip" else np.clip(x, p0, p1)
            return [np.asarray(y).astype(x.dtype)]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            y = fn(x.astype(np.float32), p0, p1)
        return [np.asarray(y).astype(np.float32)]

    def emit(self, node, ins, outs, k):
        p0, p1 = _unary_params(node, ins)
        fn = k.kernel("unary_f32", {"name": node.op_type.lower(), "expr": UNARY[node.op_type][1]})
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(ins[0])}, {outs[0].size}, "
               f"{k.f32(p0) if abs(p0) < 3e38 else ('-FLT_MAX' if p0 < 0 else 'FLT_MAX')}, "
               f"{k.f32(p1) if abs(p1) < 3e38 else ('-FLT_MAX' if p1 < 0 else 'FLT_MAX')});")


def broadcast_strides(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...] | None = None):
    """Output shape and element strides of a and b (0 where broadcast) over
    the output shape `out` (default: a and b broadcast), with mergeable
    neighbouring dimensions merged, padded to MAX_DIMS."""
    dims, (sa, sb) = broadcast_strides_n([a, b], out)
    return dims, sa, sb


def broadcast_strides_n(shapes, out: tuple[int, ...] | None = None):
    """broadcast_strides for any number of operands: (dims, [strides per
    operand]), each list MAX_DIMS long, outer first."""
    out = tuple(np.broadcast_shapes(*shapes, *([out] if out is not None else [])))
    r = len(out)

    def strides(s):
        s = (1,) * (r - len(s)) + tuple(s)
        st, acc = [0] * r, 1
        for i in range(r - 1, -1, -1):
            st[i] = acc if s[i] != 1 else 0
            acc *= s[i]
        return st

    ss = [strides(s) for s in shapes]
    merged: list[list[int]] = []
    for i in range(r):
        if out[i] == 1:
            continue
        d, xs = out[i], [st[i] for st in ss]
        # the previous (outer) dim merges if each operand is contiguous across both or broadcast in both
        if merged and all(px == x * d for px, x in zip(merged[-1][1], xs)):
            merged[-1] = [merged[-1][0] * d, xs]
            continue
        merged.append([d, xs])
    if len(merged) > MAX_DIMS:
        raise ValueError(f"broadcast over {len(merged)} dimensions (at most {MAX_DIMS})")
    merged = [[1, [0] * len(shapes)]] * (MAX_DIMS - len(merged)) + merged
    return [m[0] for m in merged], [[m[1][j] for m in merged] for j in range(len(shapes))]
