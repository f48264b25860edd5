"""BatchNormalization in inference form (float32): per channel (axis 1)
y = x * s + t with s = scale / sqrt(var + epsilon) and t = B - mean * s,
both computed here at compile time (`bn_coeffs`, which the reference, the
kernel's constants and passes.fold_affine all share). Usually folded into
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


# --------------------------------------------------------------------------- integer

def qaffine_params(node, ins):
    """(dtype, A int32[C], B int32[C], k, zx, zy, lo, hi, channels-last) of a cuvil.QAffine node.

    cuvil.QAffine (inputs X, X_scale, X_zero_point, Y_scale, Y_zero_point,
    S, T: float32 per channel, one value or C) is the integer form of a
    per-channel affine map y = x * S[c] + T[c] (passes/qdq.py makes it of
    DequantizeLinear -> BatchNormalization / Mul / Add by a per-channel
    constant -> QuantizeLinear). With d = x - zx, in both requantization
    modes:
        a = sx * S / sy, b = T / sy                            (double)
        A = round(a * 2^k), B = round(b * 2^k) + 2^(k-1)       (int32)
        y = clamp(zy + ((d * A[c] + B[c]) >> k))               (int32, one rounding)
    k is the largest shift (<= 30) that keeps d * A + B within int32 for
    every code; b is first clipped to +-(256 + 256 |a|), beyond which the
    output saturates anyway. One rounding at 2^-k of an output step: the
    real affine map rounded to nearest (halves up) except within 2^-k of a
    tie, where a conv-style int8 weight (+-127) and int32 bias, or TFLM's
    double-rounding MUL, are off by one step in about 1 output in 200."""
    if len(ins) < 7:
        raise shape_error(node, f"has {len(ins)} inputs; expected X, X_scale, X_zero_point, Y_scale, "
                                f"Y_zero_point, S, T")
    from .. import quant
    from .qelementwise import out_range, unary_qparams
    dt, xs, xz, ys, yz = unary_qparams(node, ins)
    x = ins[0]
    if len(x.shape) < 2:
        raise shape_error(node, f"input {list(x.shape)} needs rank >= 2 (N x C x ...)")
    last = int(node.attr("_channels_last", 0))
    c = x.shape[-1] if last else x.shape[1]
    st, tt = ins[5], ins[6]
    for t, what in ((st, "S"), (tt, "T")):
        if t is None or not t.is_const:
            raise unsupported(node, f"{what} must be a constant")
        if t.size not in (1, c):
            raise shape_error(node, f"{what} '{t.name}' has {t.size} values for {c} channels")
    s = np.broadcast_to(np.asarray(st.data, np.float64).reshape(-1), (c,))
    t = np.broadcast_to(np.asarray(tt.data, np.float64).reshape(-1), (c,))
    lo, hi = out_range(node, ys, yz, dt)
    a = float(xs) / float(ys) * s
    lim = 256.0 + 256.0 * np.abs(a)
    b = np.clip(t / float(ys), -lim, lim)
    qmin, qmax = quant.QRANGE[dt]
    dmax = max(qmax - xz, xz - qmin)
    mag = float(np.max(dmax * np.abs(a) + np.abs(b) + 1.0))
    k = min(30, int(np.floor(np.log2((2.0 ** 31 - 1024) / mag))))
    if not np.all(np.isfinite(a)) or k < 4:
        raise unsupported(node, f"per-channel scale up to {float(np.max(np.abs(a))):g} output steps per input "
                                f"step is too large for the integer kernel")
    A = np.rint(a * 2.0 ** k).astype(np.int64)
    B = np.rint(b * 2.0 ** k).astype(np.int64) + (1 << (k - 1))
    return dt, A.astype(np.int32), B.astype(np.int32), k, int(xz), int(yz), lo, hi, last


def _affine_layout(shape, last: bool) -> tuple[int, int, int]:
    """(outer, channels, inner) of NCHW, or of NHWC (channels innermost)."""
    if last:
        return int(np.prod(shape[:-1], dtype=np.int64)), shape[-1], 1
    return shape[0], shape[1], int(np.prod(shape[2:], dtype=np.int64))


@register("cuvil.QAffine")
class QAffine(Op):
    inplace = True
    fuses_act = True

    def check(self, node, ins):
        qaffine_params(node, ins)

    def infer(self, node, ins):
        return [(ins[0].shape, ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        from .. import quant
        dt, A, B, k, zx, zy, lo, hi, last = qaffine_params(node, ins)
        x = np.asarray(x)
        shape = [1] * x.ndim
        shape[-1 if last else 1] = A.size
        d = x.astype(np.int64) - zx
        y = zy + ((d * A.astype(np.int64).reshape(shape) + B.astype(np.int64).reshape(shape)) >> k)
        return [quant.saturate(y, dt, lo, hi)]

    def macs(self, node, ins, outs):
        return ins[0].size

    def emit(self, node, ins, outs, k):
        from .qelementwise import CODES, CTYPES
        dt, A, B, shift, zx, zy, lo, hi, last = qaffine_params(node, ins)
        x, y = ins[0], outs[0]
        if not y.size:
            return
        outer, ch, inner = _affine_layout(x.shape, bool(last))
        fn = k.kernel("qaffine_s8", {"name": CODES[dt], "xt": CTYPES[dt]})
        a = k.const(A, f"{node.name}_mult")
        b = k.const(B, f"{node.name}_add")
        q = k.const(np.array([zx, zy, shift, lo, hi], np.int32), f"{node.name}_q")
        k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {outer}, {ch}, {inner}, {a}, {b}, {q});")
