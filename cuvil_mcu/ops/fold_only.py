"""Ops that exported graphs use to compute shapes (Shape -> Cast -> Range ->
Equal -> Where -> Expand -> ...): evaluated at load time with the numpy
references below, as every input is constant there. On run-time inputs they
raise `unsupported` ("... only supported on constant inputs"), except where
a kernel is cheap: Cast float32 -> float32 (a view), Expand of a run-time
tensor (a broadcasting strided copy), and Floor/Ceil on float32.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from ..ir import C_TYPES
from .base import Op, broadcast_shape, const_ints, register, shape_error, unsupported
from .transpose import check_rank, contiguous_strides, emit_copy, move_type, tensor_ptr


class FoldOnly(Op):
    def check(self, node, ins):
        if all(t is None or t.is_const for t in ins) or self.runs(node, ins):
            return
        bad = next(t for t in ins if t is not None and not t.is_const)
        raise unsupported(node, f"{node.op_type} is only supported on constant inputs (folded at compile "
                                f"time); input '{bad.name}' is computed at run time")

    def runs(self, node, ins) -> bool:
        """True when this node on run-time inputs has a kernel."""
        return False


def _cast_dtype(node) -> str:
    to = node.attr("to")
    if to is None:
        raise shape_error(node, "needs the 'to' attribute")
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(to))).name
    except Exception:
        raise unsupported(node, f"cast to element type {to} is not supported") from None
    if dtype not in C_TYPES:
        raise unsupported(node, f"cast to {dtype} is not supported (types: {', '.join(C_TYPES)})")
    return dtype


@register("Cast")
class Cast(FoldOnly):
    # At run time only float32 -> float32 is allowed, which is a no-op view.
    view = True

    def check(self, node, ins):
        _cast_dtype(node)
        super().check(node, ins)

    def runs(self, node, ins):
        return ins[0].dtype == "float32" and _cast_dtype(node) == "float32"

    def infer(self, node, ins):
        return [(ins[0].shape, _cast_dtype(node))]

    def reference(self, node, ins, x):
        with np.errstate(all="ignore"):
            return [np.asarray(x).astype(_cast_dtype(node))]

    def emit(self, node, ins, outs, k):
        pass


@register("ConstantOfShape")
class ConstantOfShape(FoldOnly):
    @staticmethod
    def _value(node) -> np.ndarray:
        v = node.attr("value")
        if v is None:
            return np.zeros((), np.float32)
        v = np.asarray(v)
        if v.size != 1:
            raise shape_error(node, f"value has {v.size} elements (one is expected)")
        return v.reshape(())

    def infer(self, node, ins):
        shape = const_ints(node, ins[0], "shape")
        if any(d < 0 for d in shape):
            raise shape_error(node, f"negative dimension in shape {shape}")
        return [(tuple(shape), self._value(node).dtype.name)]

    def reference(self, node, ins, shape):
        v = self._value(node)
        return [np.full([int(d) for d in np.asarray(shape).reshape(-1)], v, dtype=v.dtype)]


@register("Range")
class Range(FoldOnly):
    @staticmethod
    def _scalars(node, arrays):
        vals = []
        for what, a in zip(("start", "limit", "delta"), arrays):
            a = np.asarray(a)
            if a.size != 1:
                raise shape_error(node, f"{what} has {a.size} elements (a scalar is expected)")
            vals.append(a.reshape(()))
        if vals[2] == 0:
            raise shape_error(node, "delta is 0")
        return vals

    def _values(self, node, arrays):
        start, limit, delta = self._scalars(node, arrays)
        dtype = start.dtype
        n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
        # ONNX: output[i] = start + i * delta, computed in the input type
        return (start + np.arange(n).astype(dtype) * delta).astype(dtype)

    def infer(self, node, ins):
        if not all(t is not None and t.is_const for t in ins[:3]):
            return [((0,), ins[0].dtype)]  # check() rejects this node
        v = self._values(node, [t.data for t in ins[:3]])
        return [(v.shape, v.dtype.name)]

    def reference(self, node, ins, start, limit, delta):
        return [self._values(node, [start, limit, delta])]


COMPARE = {
    "Equal": np.equal, "Less": np.less, "Greater": np.greater,
    "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}


@register(*COMPARE)
class Compare(FoldOnly):
    def infer(self, node, ins):
        return [(broadcast_shape(node, ins[0].shape, ins[1].shape), "bool")]

    def reference(self, node, ins, a, b):
        return [COMPARE[node.op_type](np.asarray(a), np.asarray(b))]


@register("Not")
class Not(FoldOnly):
    def infer(self, node, ins):
        return [(ins[0].shape, "bool")]

    def reference(self, node, ins, x):
        return [np.logical_not(np.asarray(x))]


@register("Where")
class Where(FoldOnly):
    def infer(self, node, ins):
        c, x, y = ins[:3]
        if x.dtype != y.dtype:
            raise shape_error(node, f"X '{x.name}' is {x.dtype} but Y '{y.name}' is {y.dtype}")
        return [(broadcast_shape(node, c.shape, x.shape, y.shape), x.dtype)]

    def reference(self, node, ins, c, x, y):
        return [np.where(np.asarray(c).astype(bool), x, y).astype(np.asarray(x).dtype)]


@register("Expand")
class Expand(FoldOnly):
    """Broadcast to a shape (ONNX broadcasting both ways: a 1 in the shape
    keeps the input's dimension). On a run-time input: a strided copy with
    stride 0 along the broadcast dimensions."""

    def check(self, node, ins):
        if not ins[0].is_const:
            check_rank(node, ins[0])
            const_ints(node, ins[1], "shape")
        super().check(node, ins)

    def runs(self, node, ins):
        return ins[1] is not None and ins[1].is_const and len(self.infer(node, ins)[0][0]) <= 6

    def infer(self, node, ins):
        shape = tuple(const_ints(node, ins[1], "shape"))
        return [(broadcast_shape(node, ins[0].shape, shape), ins[0].dtype)]

    def reference(self, node, ins, x, shape):
        x = np.asarray(x)
        out = broadcast_shape(node, x.shape, tuple(int(d) for d in np.asarray(shape).reshape(-1)))
        return [np.asarray(np.broadcast_to(x, out), order="C")]

    def emit(self, node, ins, outs, k):
        x, y = ins[0], outs[0]
        ctype = move_type(x.dtype)[0]
        r = len(y.shape)
        xshape = (1,) * (r - len(x.shape)) + tuple(x.shape)
        xs = contiguous_strides(xshape)
        src = [0 if d == 1 else s for d, s in zip(xshape, xs)]
        emit_copy(k, tensor_ptr(k, y, ctype), tensor_ptr(k, x, ctype), x.dtype,
                  y.shape, contiguous_strides(y.shape), src)


@register("Floor", "Ceil")
class FloorCeil(FoldOnly):
    def runs(self, node, ins):
        return ins[0].dtype == "float32"

    def infer(self, node, ins):
        return [(ins[0].shape, ins[0].dtype)]

    def reference(self, node, ins, x):
        x = np.asarray(x)
        return [(np.floor if node.op_type == "Floor" else np.ceil)(x).astype(x.dtype)]

    def emit(self, node, ins, outs, k):
        name = node.op_type.lower()
        fn = k.kernel("unary_f32", {"name": name, "expr": f"{name}f(v)"})
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(ins[0])}, {outs[0].size}, 0.0f, 0.0f);")
