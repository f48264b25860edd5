"""Concat and Split along any axis.

Concat copies each input (run-time or constant, the latter straight from
flash) into its range of the output; Split copies each range of the input
into its output. Both are strided copies (`transpose.emit_copy`); along the
outermost non-trivial axis they are single memcpy calls.
"""
from __future__ import annotations

import numpy as np

from .base import Op, const_ints, norm_axis, register, shape_error
from .transpose import check_rank, contiguous_strides, emit_copy, move_type, tensor_ptr


def concat_shape(node, ins, axis: int) -> tuple[int, ...]:
    """Shape of the inputs joined along axis; every other dimension must agree."""
    first = ins[0]
    total = 0
    for t in ins:
        if len(t.shape) != len(first.shape) or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise shape_error(node, f"input '{t.name}' {list(t.shape)} does not match "
                                    f"'{first.name}' {list(first.shape)} outside axis {axis}")
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return tuple(shape)


@register("Concat")
class Concat(Op):
    def check(self, node, ins):
        for t in ins:
            check_rank(node, t)

    @staticmethod
    def _axis(node, ins) -> int:
        if not ins or any(t is None for t in ins):
            raise shape_error(node, "needs at least one input and no empty input names")
        # Concat-1 defaulted the axis to 1; from opset 4 it is required.
        return norm_axis(node, int(node.attr("axis", 1)), len(ins[0].shape))

    def infer(self, node, ins):
        axis = self._axis(node, ins)
        for t in ins:
            if t.dtype != ins[0].dtype:
                raise shape_error(node, f"input '{t.name}' is {t.dtype}, input '{ins[0].name}' is {ins[0].dtype}")
        return [(concat_shape(node, ins, axis), ins[0].dtype)]

    def reference(self, node, ins, *arrays):
        return [np.concatenate([np.asarray(a) for a in arrays], axis=self._axis(node, ins))]

    def emit(self, node, ins, outs, k):
        y = outs[0]
        axis = self._axis(node, ins)
        ctype = move_type(y.dtype)[0]
        ys = contiguous_strides(y.shape)
        pos = 0
        for t in ins:
            if t.size:
                emit_copy(k, tensor_ptr(k, y, ctype, pos * ys[axis]), tensor_ptr(k, t, ctype), y.dtype,
                          t.shape, ys, contiguous_strides(t.shape))
            pos += t.shape[axis]


def split_sizes(node, ins) -> list[int]:
    """Sizes of the chunks along the axis: the `split` input (opset >= 13) or
    attribute (opset < 13); else `num_outputs` (opset 18; the last chunk is
    smaller when the axis does not divide evenly); else equal chunks, one
    per output."""
    x = ins[0]
    axis = norm_axis(node, int(node.attr("axis", 0)), len(x.shape))
    dim = x.shape[axis]
    n_out = len(node.outputs)
    sizes = const_ints(node, ins[1] if len(ins) > 1 else None, "split")
    if sizes is None and node.attr("split") is not None:
        sizes = [int(s) for s in node.attr("split")]
    if sizes is not None:
        if node.attr("num_outputs") is not None:
            raise shape_error(node, "has both the split input and the num_outputs attribute")
        if len(sizes) != n_out:
            raise shape_error(node, f"split {sizes} has {len(sizes)} entries for {n_out} outputs")
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            raise shape_error(node, f"split {sizes} does not add up to {dim}, the size of axis {axis}")
        return sizes
    num = node.attr("num_outputs")
    if num is not None:
        num = int(num)
        if num != n_out:
            raise shape_error(node, f"num_outputs is {num} but the node has {n_out} outputs")
        if num < 1:
            raise shape_error(node, f"num_outputs {num} must be >= 1")
        chunk = -(-dim // num)
        last = dim - chunk * (num - 1)
        if last < 0:
            raise shape_error(node, f"cannot split axis {axis} of size {dim} into {num} chunks of "
                                    f"{chunk} (the last one would have {last} elements)")
        return [chunk] * (num - 1) + [last]
    if n_out == 0 or dim % n_out:
        raise shape_error(node, f"axis {axis} of size {dim} does not split evenly into {n_out} outputs "
                                f"(give split sizes)")
    return [dim // n_out] * n_out


@register("Split")
class Split(Op):
    def check(self, node, ins):
        check_rank(node, ins[0])
        if len(ins) > 1 and ins[1] is not None:
            const_ints(node, ins[1], "split")

    def infer(self, node, ins):
        x = ins[0]
        axis = norm_axis(node, int(node.attr("axis", 0)), len(x.shape))
        out = []
        for s in split_sizes(node, ins):
            shape = list(x.shape)
            shape[axis] = s
            out.append((tuple(shape), x.dtype))
        return out

    def reference(self, node, ins, x, *rest):
        x = np.asarray(x)
        axis = norm_axis(node, int(node.attr("axis", 0)), x.ndim)
        cuts = np.cumsum(split_sizes(node, ins))[:-1]
        return [np.asarray(p, order="C") for p in np.split(x, cuts, axis=axis)]

    def emit(self, node, ins, outs, k):
        x = ins[0]
        axis = norm_axis(node, int(node.attr("axis", 0)), len(x.shape))
        ctype = move_type(x.dtype)[0]
        xs = contiguous_strides(x.shape)
        pos = 0
        for name, s in zip(node.outputs, split_sizes(node, ins)):
            if name:
                y = k.graph.tensors[name]
                emit_copy(k, tensor_ptr(k, y, ctype), tensor_ptr(k, x, ctype, pos * xs[axis]), x.dtype,
                          y.shape, contiguous_strides(y.shape), xs)
            pos += s
