"""LayerNormalization (opset 17).

Normalizes over the dimensions axis..last (axis default -1): the input is
`outer` rows of n = prod(shape[axis:]) elements; each row gets
y = (x - mean) / sqrt(var + epsilon) * Scale + B, with the population
variance. Scale and B broadcast to shape[axis:]; constant ones are stored
broadcast to n floats, run-time ones must already hold n elements. The
optional Mean and InvStdDev outputs (shape[:axis] + 1s) are written when the
model names them. Only stash_type 1 (float32 statistics) is supported.

The kernel makes two passes per row (mean, then the sum of squared
deviations: more accurate than E[x^2] - mean^2) and a third to write y.
"""
from __future__ import annotations

import numpy as np

from .base import Op, norm_axis, register, require_float, shape_error, unsupported


def _axis(node, shape) -> int:
    return norm_axis(node, int(node.attr("axis", -1)), len(shape))


def _param_shape_ok(node, t, norm_shape, what):
    if t is None:
        return
    try:
        b = np.broadcast_shapes(tuple(t.shape), tuple(norm_shape))
    except ValueError:
        b = None
    if b != tuple(norm_shape):
        raise shape_error(node, f"{what} '{t.name}' shape {list(t.shape)} does not broadcast to the "
                                f"normalized shape {list(norm_shape)}")


@register("LayerNormalization")
class LayerNorm(Op):
    # In place is safe: a row's statistics are taken before it is written, and
    # y[j] is written after x[j], scale[j], bias[j] are read.
    inplace = True

    def check(self, node, ins):
        if int(node.attr("stash_type", 1)) != 1:
            raise unsupported(node, f"stash_type {node.attr('stash_type')} (only 1, float32 statistics)")
        if all(t is None or t.is_const for t in ins):
            return
        require_float(node, ins)
        n = 1
        for d in ins[0].shape[_axis(node, ins[0].shape):]:
            n *= d
        for i, what in ((1, "Scale"), (2, "B")):
            t = ins[i] if len(ins) > i else None
            if t is not None and not t.is_const and t.size != n:
                raise unsupported(node, f"run-time {what} '{t.name}' {list(t.shape)} must hold all {n} "
                                        f"elements of the normalized shape (no broadcasting at run time)")

    def infer(self, node, ins):
        x = ins[0]
        if len(ins) < 2 or ins[1] is None:
            raise shape_error(node, "Scale input is required")
        axis = _axis(node, x.shape)
        norm = x.shape[axis:]
        _param_shape_ok(node, ins[1], norm, "Scale")
        _param_shape_ok(node, ins[2] if len(ins) > 2 else None, norm, "B")
        stat = (tuple(x.shape[:axis]) + (1,) * len(norm), x.dtype)
        return [(x.shape, x.dtype), stat, stat]

    def reference(self, node, ins, x, scale, bias=None):
        x = np.asarray(x)
        axis = _axis(node, x.shape)
        eps = float(node.attr("epsilon", 1e-5))
        ax = tuple(range(axis, x.ndim))
        v = x.astype(np.float64)
        mean = v.mean(axis=ax, keepdims=True)
        var = np.square(v - mean).mean(axis=ax, keepdims=True)
        inv = 1.0 / np.sqrt(var + np.float64(np.float32(eps)))
        y = (v - mean) * inv * np.asarray(scale, np.float64)
        if bias is not None:
            y = y + np.asarray(bias, np.float64)
        return [y.astype(x.dtype), mean.astype(x.dtype), inv.astype(x.dtype)]

    def macs(self, node, ins, outs):
        return 3 * ins[0].size

    def emit(self, node, ins, outs, k):
        x = ins[0]
        axis = _axis(node, x.shape)
        norm = x.shape[axis:]
        n = int(np.prod(norm, dtype=np.int64))
        outer = x.size // n if n else 0

        def param(t, what):
            if t.is_const:
                full = np.broadcast_to(np.asarray(t.data, np.float32), norm).reshape(-1)
                return k.const(np.ascontiguousarray(full), f"{node.name}_{what}")
            return k.ptr(t)

        scale = param(ins[1], "scale")
        has_b = len(ins) > 2 and ins[2] is not None
        bias = param(ins[2], "bias") if has_b else "(const float *)0"
        stats = []
        for j in (1, 2):
            o = node.outputs[j] if len(node.outputs) > j else ""
            stats.append(k.ptr(o) if o else "(float *)0")
        fn = k.kernel("layernorm_f32", {"name": "b" if has_b else "", "bias": has_b})
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {scale}, {bias}, {outer}, {n}, "
               f"{k.f32(float(node.attr('epsilon', 1e-5)))}, {stats[0]}, {stats[1]});")
