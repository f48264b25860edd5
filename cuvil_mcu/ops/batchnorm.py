"""BatchNormalization in inference form (float32): per channel (axis 1)
y = x * s + t with s = scale / sqrt(var + epsilon) and t = B - mean * s,
both computed here at compile time (`bn_coeffs`, which the reference, the
kernel's constants and passes.fold_batchnorm all share). Usually folded into
the Conv/Gemm before it; this kernel runs the ones that cannot be folded.
"""
from __future__ import annotations

import numpy as np

from .base import Op, apply_act, invalid, register, require_float, shape_error, unsupported

PARAMS = ("scale", "B", "mean", "var")


def bn_coeffs(node, scale, bias, mean, var) -> tuple[np.ndarray, np.ndarray]:
    """(s, t) as float32 vectors: y = x * s + t. Computed in float64 and
    rounded once, so every user of the folded form sees the same numbers."""
    eps = float(node.attr("epsilon", 1e-5))
    scale, bias, mean, var = (np.asarray(a, np.float64).reshape(-1) for a in (scale, bias, mean, var))
    s = scale / np.sqrt(var + eps)
    t = bias - mean * s
    return s.astype(np.float32), t.astype(np.float32)


def _outputs_beyond_y(node) -> list[str]:
    return [o for o in node.outputs[1:] if o]


@register("BatchNormalization")
class BatchNormalization(Op):
    inplace = True
    fuses_act = True

    def check(self, node, ins):
        eps = float(node.attr("epsilon", 1e-5))
        if not eps >= 0 or eps == float("inf"):
            raise invalid(node, f"epsilon={eps} (it must be a finite number >= 0)")
        if int(node.attr("training_mode", 0)) != 0:
            raise unsupported(node, "training_mode=1 (only inference BatchNormalization is supported)")
        if _outputs_beyond_y(node):
            raise unsupported(node, f"training outputs {_outputs_beyond_y(node)} requested "
                                    f"(only inference BatchNormalization, output Y, is supported)")
        if int(node.attr("spatial", 1)) != 1:
            raise unsupported(node, "spatial=0 (per-activation statistics) is not supported")
        if node.attr("is_test") is not None and int(node.attr("is_test")) == 0:
            raise unsupported(node, "is_test=0 (training) is not supported")
        if len(ins) < 5 or any(t is None for t in ins[:5]):
            raise shape_error(node, "needs inputs X, scale, B, mean, var")
        if all(t.is_const for t in ins[:5]):
            return
        require_float(node, ins, 0, 1, 2, 3, 4)
        for t, what in zip(ins[1:5], PARAMS):
            if not t.is_const:
                raise unsupported(node, f"{what} '{t.name}' is computed at run time; it must be a constant")

    def infer(self, node, ins):
        x = ins[0]
        if len(x.shape) < 2:
            raise shape_error(node, f"input {list(x.shape)} needs rank >= 2 (N x C x ...)")
        c = x.shape[1]
        for t, what in zip(ins[1:5], PARAMS):
            if tuple(t.shape) != (c,):
                raise shape_error(node, f"{what} '{t.name}' is {list(t.shape)}; it must be [{c}] "
                                        f"(channels of input {list(x.shape)})")
        return [(x.shape, x.dtype)]

    def reference(self, node, ins, x, scale, bias, mean, var):
        x = np.asarray(x)
        s, t = bn_coeffs(node, scale, bias, mean, var)
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        y = x.astype(np.float32) * s.reshape(shape) + t.reshape(shape)
        return [apply_act(y.astype(x.dtype), node.act)]

    def macs(self, node, ins, outs):
        return ins[0].size

    def emit(self, node, ins, outs, k):
        from ..codegen import act_bounds
        x = ins[0]
        if x.size == 0:
            return
        s, t = bn_coeffs(node, *(a.data for a in ins[1:5]))
        n, c = x.shape[0], x.shape[1]
        p = x.size // (n * c)
        lo, hi = act_bounds(node)
        fn = k.kernel("batchnorm_f32")
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {k.const(s, node.name + '_s')}, "
               f"{k.const(t, node.name + '_t')}, {n}, {c}, {p}, {lo}, {hi});")
