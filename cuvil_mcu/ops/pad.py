"""Pad, constant mode: the attribute form (`paddings`/`pads` and `value`,
opset < 11), the input form (pads and constant_value inputs, opset >= 11)
and the `axes` input (opset 18). Negative pads crop, as ONNX specifies.

Other modes (reflect, edge, wrap) raise `unsupported`. The kernel fills the
output with the value and copies the (possibly cropped) input into its
interior with a strided copy; a pure crop skips the fill.
"""
from __future__ import annotations

import math

import numpy as np

from .base import Op, const_ints, norm_axis, register, shape_error, unsupported
from .transpose import check_rank, contiguous_strides, emit_copy, move_type, tensor_ptr


def pad_mode(node) -> str:
    mode = node.attr("mode", "constant")
    return mode.decode() if isinstance(mode, bytes) else str(mode)


def pad_amounts(node, ins) -> tuple[list[int], list[int]]:
    """(begin, end) pads for every axis of the input; negative values crop."""
    x = ins[0]
    r = len(x.shape)
    if len(ins) > 1 and ins[1] is not None:
        pads = const_ints(node, ins[1], "pads")
    else:
        pads = node.attr("pads", node.attr("paddings"))
        if pads is None:
            raise shape_error(node, "needs pads")
        pads = [int(p) for p in pads]
    axes = const_ints(node, ins[3] if len(ins) > 3 else None, "axes")
    if axes is None:
        axes = list(range(r))
    axes = [norm_axis(node, a, r) for a in axes]
    if len(set(axes)) != len(axes):
        raise shape_error(node, f"axes {axes} repeat an axis")
    if len(pads) != 2 * len(axes):
        raise shape_error(node, f"pads {pads} must have 2 x {len(axes)} entries (begin and end for each "
                                f"padded axis)")
    begin, end = [0] * r, [0] * r
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    return begin, end


def pad_value(node, ins, dtype: str):
    """The fill value as a numpy scalar of dtype."""
    if len(ins) > 2 and ins[2] is not None:
        t = ins[2]
        if not t.is_const:
            raise unsupported(node, f"constant_value '{t.name}' must be a constant")
        if t.size != 1:
            raise shape_error(node, f"constant_value '{t.name}' has {t.size} elements (a scalar is expected)")
        return np.asarray(t.data).reshape(-1)[0].astype(dtype)
    return np.asarray(node.attr("value", 0.0)).astype(dtype)


def _regions(x_shape, begin, end):
    """Per axis: (first input index copied, first output index written, count)."""
    out = []
    for d, b, e in zip(x_shape, begin, end):
        src0, dst0 = max(-b, 0), max(b, 0)
        out.append((src0, dst0, max(d - src0 - max(-e, 0), 0)))
    return out


@register("Pad")
class Pad(Op):
    def check(self, node, ins):
        mode = pad_mode(node)
        if mode != "constant":
            raise unsupported(node, f"mode '{mode}' is not supported (only mode 'constant')")
        check_rank(node, ins[0])
        for i, what in ((1, "pads"), (2, "constant_value"), (3, "axes")):
            if len(ins) > i and ins[i] is not None and not ins[i].is_const:
                raise unsupported(node, f"{what} '{ins[i].name}' must be a constant (computed at run time here)")

    def infer(self, node, ins):
        x = ins[0]
        begin, end = pad_amounts(node, ins)
        shape = tuple(d + b + e for d, b, e in zip(x.shape, begin, end))
        if any(d < 0 for d in shape):
            raise shape_error(node, f"pads {begin + end} crop more than input {list(x.shape)} has "
                                    f"(output would be {list(shape)})")
        return [(shape, x.dtype)]

    def reference(self, node, ins, x, *rest):
        x = np.asarray(x)
        begin, end = pad_amounts(node, ins)
        shape = tuple(d + b + e for d, b, e in zip(x.shape, begin, end))
        y = np.full(shape, pad_value(node, ins, x.dtype.name), dtype=x.dtype)
        regions = _regions(x.shape, begin, end)
        if all(c > 0 for _, _, c in regions):
            y[tuple(slice(o, o + c) for _, o, c in regions)] = x[tuple(slice(s, s + c) for s, _, c in regions)]
        return [y]

    def emit(self, node, ins, outs, k):
        x, y = ins[0], outs[0]
        if y.size == 0:
            return
        begin, end = pad_amounts(node, ins)
        regions = _regions(x.shape, begin, end)
        ctype, vname = move_type(x.dtype)
        interior = int(np.prod([c for _, _, c in regions], dtype=np.int64))
        if interior < y.size:
            fn = k.kernel("pad_fill", {"name": vname, "ctype": ctype})
            k.line(f"{fn}({tensor_ptr(k, y, ctype)}, {y.size}, {_literal(pad_value(node, ins, x.dtype), ctype)});")
        if interior:
            xs, ys = contiguous_strides(x.shape), contiguous_strides(y.shape)
            src = sum(s * st for (s, _, _), st in zip(regions, xs))
            dst = sum(o * st for (_, o, _), st in zip(regions, ys))
            emit_copy(k, tensor_ptr(k, y, ctype, dst), tensor_ptr(k, x, ctype, src), x.dtype,
                      [c for _, _, c in regions], ys, xs)


def _literal(v, ctype: str) -> str:
    """C literal of the fill value, as the move type ctype holds it."""
    from ..codegen.carray import c_float
    if ctype == "float":
        return c_float(float(v))
    if ctype == "double":
        f = float(v)
        if math.isnan(f):
            return "NAN"
        if math.isinf(f):
            return "INFINITY" if f > 0 else "-INFINITY"
        return repr(f)
    size = np.asarray(v).dtype.itemsize
    bits = int(np.asarray(v).reshape(1).view(f"u{size}")[0])
    return f"({ctype}){bits}ull" if size == 8 else f"({ctype}){bits}u"
