"""Ops that only reinterpret bytes (Reshape, Flatten, Squeeze, Unsqueeze,
Identity, Dropout at inference): views, planned into the same arena bytes as
their input, no code. And ops that only read shapes or hold constants
(Shape, Size, Constant): always folded at load time."""
from __future__ import annotations

import numpy as np

from .. import limits
from .base import Op, const_ints, norm_axis, register, shape_error, unsupported


class View(Op):
    view = True

    def reference(self, node, ins, x, *rest):
        out_shape = self.infer(node, ins)[0][0]
        return [np.asarray(x).reshape(out_shape)]

    def emit(self, node, ins, outs, k):
        pass


def _axes(node, ins, rank):
    """Axes from the attribute (opset < 13) or the optional input 1."""
    axes = node.attr("axes")
    if len(ins) > 1 and ins[1] is not None:
        axes = const_ints(node, ins[1], "axes")
    if axes is None:
        return None
    return sorted(norm_axis(node, int(a), rank) for a in axes)


@register("Reshape")
class Reshape(View):
    def infer(self, node, ins):
        x = ins[0]
        target = const_ints(node, ins[1], "shape")
        if target is None:
            raise shape_error(node, "missing shape input")
        allowzero = int(node.attr("allowzero", 0))
        out = []
        for i, d in enumerate(target):
            if d == 0 and not allowzero:
                if i >= len(x.shape):
                    raise shape_error(node, f"shape {target}: 0 at position {i} copies a dimension input {list(x.shape)} lacks")
                out.append(x.shape[i])
            else:
                out.append(d)
        if out.count(-1) > 1:
            raise shape_error(node, f"shape {target} has more than one -1")
        if -1 in out:
            known = limits.elements(d for d in out if d != -1)
            if known == 0 or x.size % known:
                raise shape_error(node, f"cannot reshape {list(x.shape)} to {target}")
            out[out.index(-1)] = x.size // known
        if any(d < 0 for d in out) or limits.elements(out) != x.size:
            raise shape_error(node, f"cannot reshape {list(x.shape)} ({x.size} elements) to {out}")
        return [(tuple(out), x.dtype)]


@register("Flatten")
class Flatten(View):
    def infer(self, node, ins):
        x = ins[0]
        r = len(x.shape)
        axis = int(node.attr("axis", 1))
        axis = axis + r if axis < 0 else axis
        if not 0 <= axis <= r:
            raise shape_error(node, f"axis {node.attr('axis')} out of range for rank {r}")
        outer = limits.elements(x.shape[:axis])
        return [((outer, x.size // outer if outer else 0), x.dtype)]


@register("Squeeze")
class Squeeze(View):
    def infer(self, node, ins):
        x = ins[0]
        axes = _axes(node, ins, len(x.shape))
        if axes is None:
            shape = tuple(d for d in x.shape if d != 1)
        else:
            for a in axes:
                if x.shape[a] != 1:
                    raise shape_error(node, f"cannot squeeze axis {a} of size {x.shape[a]}")
            shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return [(shape, x.dtype)]


@register("Unsqueeze")
class Unsqueeze(View):
    def infer(self, node, ins):
        x = ins[0]
        raw = node.attr("axes")
        if len(ins) > 1 and ins[1] is not None:
            raw = const_ints(node, ins[1], "axes")
        if raw is None:
            raise shape_error(node, "missing axes")
        r = len(x.shape) + len(raw)
        axes = sorted(norm_axis(node, int(a), r) for a in raw)
        if len(set(axes)) != len(axes):
            raise shape_error(node, f"repeated axes {raw}")
        dims = iter(x.shape)
        return [(tuple(1 if i in axes else next(dims) for i in range(r)), x.dtype)]


@register("Identity")
class Identity(View):
    def infer(self, node, ins):
        return [(ins[0].shape, ins[0].dtype)]


@register("Dropout")
class Dropout(View):
    """Inference: output = input. The optional mask output is all ones
    (known_outputs): a constant, dropped when nothing reads it."""

    def check(self, node, ins):
        training = ins[2] if len(ins) > 2 else None
        if training is not None:
            if not training.is_const:
                raise unsupported(node, "training_mode computed at run time (inference only)")
            ratio = float(np.asarray(ins[1].data).reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None \
                and ins[1].is_const else 0.5
            if bool(np.asarray(training.data).reshape(-1)[0]) and ratio > 0:
                raise unsupported(node, "training_mode=True drops values at random; only inference is compiled")

    def infer(self, node, ins):
        outs = [(ins[0].shape, ins[0].dtype)]
        if len(node.outputs) > 1:
            # opset < 10 typed the mask like the data; opset >= 10 as bool
            outs.append((ins[0].shape, "bool" if (node.opset or 13) >= 10 else ins[0].dtype))
        return outs

    def known_outputs(self, node, ins):
        if len(node.outputs) > 1 and node.outputs[1]:
            shape, dtype = self.infer(node, ins)[1]
            return {1: np.ones(shape, dtype=dtype)}
        return {}

    def reference(self, node, ins, x, *rest):
        return [np.asarray(x)] + list(self.known_outputs(node, ins).values())


@register("Constant")
class Constant(Op):
    def infer(self, node, ins):
        v = self._value(node)
        return [(tuple(v.shape), v.dtype.name)]

    def reference(self, node, ins, *arrays):
        return [self._value(node)]

    @staticmethod
    def _value(node):
        for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
            if key in node.attrs:
                v = node.attrs[key]
                if key == "value":
                    return np.asarray(v)
                dtype = np.float32 if "float" in key else np.int64
                return np.asarray(v, dtype=dtype)
        raise unsupported(node, f"Constant with {sorted(node.attrs)} (only value/value_float(s)/value_int(s))")


@register("Shape")
class Shape(Op):
    shape_only = True

    def infer(self, node, ins):
        return [((len(self._dims(node, ins)),), "int64")]

    def reference(self, node, ins, *arrays):
        return [np.array(self._dims(node, ins), dtype=np.int64)]

    @staticmethod
    def _dims(node, ins):
        shape = list(ins[0].shape)
        r = len(shape)
        start = int(node.attr("start", 0))
        end = node.attr("end")
        start = min(max(start + r if start < 0 else start, 0), r)
        end = r if end is None else int(end)
        end = min(max(end + r if end < 0 else end, 0), r)
        return shape[start:end]


@register("Size")
class Size(Op):
    shape_only = True

    def infer(self, node, ins):
        return [((), "int64")]

    def reference(self, node, ins, *arrays):
        return [np.array(ins[0].size, dtype=np.int64)]
