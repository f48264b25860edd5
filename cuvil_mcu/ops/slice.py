"""Slice (attribute form, opset 1-9; input form, opset >= 10) and Gather with
constant indices.

Slice bounds follow ONNX: negative starts/ends count from the end; starts are
clamped to [0, dim] for positive steps and [0, dim - 1] for negative ones,
ends to [0, dim] and [-1, dim - 1] (so INT64_MAX / INT64_MIN mean "to the
end"). The copy is one strided copy whose source strides are the steps.

Gather with constant indices whose flattened values form an arithmetic
progression (one index, a range, a reversed range) is a strided copy as well;
any other index list uses a kernel reading a table of precomputed offsets.
"""
from __future__ import annotations

import numpy as np

from .base import Op, const_ints, norm_axis, register, shape_error, unsupported
from .transpose import check_rank, contiguous_strides, emit_copy, move_type, tensor_ptr


def slice_params(node, ins) -> list[tuple[int, int, int]]:
    """(start, step, count) for every axis of the input."""
    x = ins[0]
    r = len(x.shape)
    if len(ins) > 1:  # opset >= 10: starts, ends, axes, steps as inputs
        starts = const_ints(node, ins[1], "starts")
        ends = const_ints(node, ins[2] if len(ins) > 2 else None, "ends")
        axes = const_ints(node, ins[3] if len(ins) > 3 else None, "axes")
        steps = const_ints(node, ins[4] if len(ins) > 4 else None, "steps")
    else:  # opset 1-9: attributes, no steps
        starts, ends, axes, steps = node.attr("starts"), node.attr("ends"), node.attr("axes"), None
    if starts is None or ends is None:
        raise shape_error(node, "needs starts and ends")
    starts, ends = [int(v) for v in starts], [int(v) for v in ends]
    if len(ends) != len(starts):
        raise shape_error(node, f"starts {starts} and ends {ends} differ in length")
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if len(axes) != len(starts) or len(steps) != len(starts):
        raise shape_error(node, f"starts, ends, axes {axes} and steps {steps} differ in length")
    axes = [norm_axis(node, a, r) for a in axes]
    if len(set(axes)) != len(axes):
        raise shape_error(node, f"axes {axes} repeat an axis")
    params = [(0, 1, d) for d in x.shape]
    for a, start, end, step in zip(axes, starts, ends, steps):
        dim = x.shape[a]
        if step == 0:
            raise shape_error(node, f"step 0 on axis {a}")
        if start < 0:
            start += dim
        if end < 0:
            end += dim
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            count = max(0, -(-(end - start) // step))
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            count = max(0, -(-(start - end) // -step)) if dim > 0 else 0
        params[a] = (start if count else 0, step, count)
    return params


@register("Slice")
class Slice(Op):
    def check(self, node, ins):
        check_rank(node, ins[0])
        for i, what in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")):
            if len(ins) > i and ins[i] is not None and not ins[i].is_const:
                raise unsupported(node, f"{what} '{ins[i].name}' must be a constant (computed at run time here)")

    def infer(self, node, ins):
        return [(tuple(c for _, _, c in slice_params(node, ins)), ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        x = np.asarray(x)
        for a, (start, step, count) in enumerate(slice_params(node, ins)):
            x = np.take(x, np.arange(count, dtype=np.int64) * step + start, axis=a)
        return [np.asarray(x, order="C")]

    def emit(self, node, ins, outs, k):
        x, y = ins[0], outs[0]
        ctype = move_type(x.dtype)[0]
        params = slice_params(node, ins)
        xs = contiguous_strides(x.shape)
        base = sum(start * s for (start, _, _), s in zip(params, xs))
        emit_copy(k, tensor_ptr(k, y, ctype), tensor_ptr(k, x, ctype, base), x.dtype,
                  y.shape, contiguous_strides(y.shape), [step * s for (_, step, _), s in zip(params, xs)])


def gather_indices(node, ins, indices=None) -> tuple[int, np.ndarray]:
    """The axis and the indices (made non-negative, range-checked)."""
    x = ins[0]
    if not x.shape:
        raise shape_error(node, f"data '{x.name}' is a scalar; Gather needs rank >= 1")
    axis = norm_axis(node, int(node.attr("axis", 0)), len(x.shape))
    idx = np.asarray(ins[1].data if indices is None else indices).astype(np.int64)
    dim = x.shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        bad = idx[(idx < -dim) | (idx >= dim)].reshape(-1)[0]
        raise shape_error(node, f"index {int(bad)} out of range for axis {axis} of size {dim}")
    return axis, np.where(idx < 0, idx + dim, idx)


@register("Gather")
class Gather(Op):
    def check(self, node, ins):
        check_rank(node, ins[0])
        idx = ins[1]
        if not idx.is_const:
            lookup = f" (a lookup into the constant '{ins[0].name}')" if ins[0].is_const else ""
            raise unsupported(node, f"indices '{idx.name}' are computed at run time{lookup}; only constant "
                                    f"indices are supported")
        if not np.issubdtype(np.asarray(idx.data).dtype, np.integer):
            raise shape_error(node, f"indices '{idx.name}' are {idx.dtype}, not integers")

    def infer(self, node, ins):
        x = ins[0]
        axis, idx = gather_indices(node, ins)
        return [(tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:]), x.dtype)]

    def reference(self, node, ins, x, indices):
        axis, idx = gather_indices(node, ins, indices)
        return [np.asarray(np.take(np.asarray(x), idx, axis=axis), order="C")]

    def emit(self, node, ins, outs, k):
        x, y = ins[0], outs[0]
        if y.size == 0:
            return
        axis, idx = gather_indices(node, ins)
        flat = [int(i) for i in idx.reshape(-1)]
        ctype, vname = move_type(x.dtype)
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
        dim = x.shape[axis]
        step = flat[1] - flat[0] if len(flat) > 1 else 0
        if all(b - a == step for a, b in zip(flat, flat[1:])):
            # one index or an arithmetic progression: a strided copy
            emit_copy(k, tensor_ptr(k, y, ctype), tensor_ptr(k, x, ctype, flat[0] * inner), x.dtype,
                      [outer, len(flat), inner], [len(flat) * inner, inner, 1], [dim * inner, step * inner, 1])
            return
        fn = k.kernel("gather", {"name": vname, "ctype": ctype})
        offs = k.const(np.array(flat, np.int32) * np.int32(inner), "gather_offsets")
        k.line(f"{fn}({tensor_ptr(k, y, ctype)}, {tensor_ptr(k, x, ctype)}, {offs}, "
               f"{outer}, {len(flat)}, {dim * inner}, {inner});")
