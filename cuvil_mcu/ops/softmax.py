"""Softmax and LogSoftmax.

Opset >= 13: over one axis (default -1). Opset < 13: the input is coerced to
2-D at `axis` (default 1) and the softmax runs over everything from `axis` to
the end. Both become (outer, n, inner): n elements inner apart, outer x inner
independent slices. The kernel subtracts the slice maximum before expf
(numerically stable) and multiplies by the reciprocal of the sum.
"""
from __future__ import annotations

import numpy as np

from .base import Op, register, require_float, shape_error


def slices(node, shape, opset: int | None = None) -> tuple[int, int, int]:
    """(outer, n, inner) of the softmax over shape. opset: the Softmax opset
    the axis refers to (default: the node's); below 13 the input is coerced
    to 2-D at the axis."""
    r = len(shape)
    opset = node.opset if opset is None else opset
    legacy = opset is not None and opset < 13
    axis = int(node.attr("axis", 1 if legacy else -1))
    if not -r <= axis < max(r, 1):
        raise shape_error(node, f"axis {axis} out of range for rank {r}")
    axis = axis + r if axis < 0 else axis
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    if legacy:
        return outer, int(np.prod(shape[axis:], dtype=np.int64)), 1
    return outer, int(shape[axis]) if r else 1, int(np.prod(shape[axis + 1:], dtype=np.int64))


@register("Softmax", "LogSoftmax")
class Softmax(Op):
    inplace = True

    def check(self, node, ins):
        if all(t is None or t.is_const for t in ins):
            return
        require_float(node, ins, 0)

    def infer(self, node, ins):
        slices(node, ins[0].shape)
        return [(ins[0].shape, ins[0].dtype)]

    def reference(self, node, ins, x):
        x = np.asarray(x)
        outer, n, inner = slices(node, x.shape)
        v = x.astype(np.float64).reshape(outer, n, inner)
        v = v - v.max(axis=1, keepdims=True)
        if node.op_type == "LogSoftmax":
            y = v - np.log(np.exp(v).sum(axis=1, keepdims=True))
        else:
            e = np.exp(v)
            y = e / e.sum(axis=1, keepdims=True)
        return [y.reshape(x.shape).astype(x.dtype)]

    def macs(self, node, ins, outs):
        return 2 * ins[0].size

    def emit(self, node, ins, outs, k):
        outer, n, inner = slices(node, ins[0].shape)
        log = node.op_type == "LogSoftmax"
        fn = k.kernel("softmax_f32", {"name": "log" if log else "", "log": log})
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(ins[0])}, {outer}, {n}, {inner});")
