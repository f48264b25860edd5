"""LRN (local response normalization across channels: AlexNet, ZFNet,
Inception v1), float32 and int8 (cuvil.QLRN).

    square_sum[c] = sum of x[j]^2 for j in [c - (size-1)//2, c + size-1 - (size-1)//2] within [0, C)
    y[c] = x[c] * (bias + alpha / size * square_sum[c]) ^ -beta

Float: float32 throughout, the squares summed in channel order; the power
as sqrtf for beta 0.5 / 0.75 (1 / (sqrt(b) * sqrt(sqrt(b))), the common
case, no powf call), a division for beta 1, else powf.

cuvil.QLRN (passes/qdq.py's form of DequantizeLinear -> LRN ->
QuantizeLinear; inputs X, X_scale, X_zp, Y_scale, Y_zp, per tensor, int8 or
uint8) is integer-only, the same in both requantization modes. With
d = x - zx and S = sum of d^2 over the window (int32),
    y = zy + round(d * G(S)),  G(S) = sx / sy * (bias + alpha / size * sx^2 * S) ^ -beta
G is tabulated at compile time in Q-format (G * 2^qs, below 2^30) on a grid
whose spacing doubles every 32 points (S = 0..63 exactly, then 32 points
per octave) and interpolated linearly:
    e = smallest e >= 0 with S >> e < 64;  i = 32 e + (S >> e)
    g = T[i] + (((T[i+1] - T[i]) * (S mod 2^e) + 2^(e-1)) >> e)     (e > 0; int64)
    y = clamp(zy + ((d * g + 2^(qs-1)) >> qs))                        (int64)
The interpolation error of G is below 2e-4 relative (beta(beta+1)/8 / 32^2
for a function like S^-beta), a few hundredths of an output step: within
one step of DequantizeLinear -> float LRN -> QuantizeLinear.

The integer kernel runs in either layout (`_channels_last`: NHWC, which
passes/layout.py gives it among the other integer spatial ops).
"""
from __future__ import annotations

import math

import numpy as np

from .. import quant
from .base import Op, register, require_float, shape_error, unsupported
from .qelementwise import CODES, CTYPES, unary_qparams

F32 = np.float32
SEG = 32          # grid points per octave of S


def _attrs(node) -> tuple[int, float, float, float]:
    size = node.attr("size")
    if size is None:
        raise shape_error(node, "attribute 'size' is required")
    size = int(size)
    if size < 1:
        raise shape_error(node, f"size {size} must be >= 1")
    alpha, beta, bias = (float(node.attr(k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    if not all(math.isfinite(v) for v in (alpha, beta, bias)):
        raise unsupported(node, f"alpha {alpha}, beta {beta}, bias {bias} must be finite")
    return size, alpha, beta, bias


def _window(size: int) -> tuple[int, int]:
    lo = (size - 1) // 2
    return lo, size - 1 - lo


def _layout(node, shape) -> tuple[int, int, int, int, int]:
    """(outer, channels, inner, channel stride, inner stride) of the tensor:
    NCHW, or NHWC when the layout pass set _channels_last."""
    if len(shape) < 2:
        raise shape_error(node, f"input {list(shape)} needs rank >= 2 (N x C x ...)")
    if int(node.attr("_channels_last", 0)):
        ch = shape[-1]
        inner = int(np.prod(shape[1:-1], dtype=np.int64))
        return shape[0], ch, inner, 1, ch
    ch = shape[1]
    inner = int(np.prod(shape[2:], dtype=np.int64))
    return shape[0], ch, inner, inner, 1


def _channels_axis(node, ndim: int) -> int:
    return ndim - 1 if int(node.attr("_channels_last", 0)) else 1


def _window_sum(node, v: np.ndarray, size: int) -> np.ndarray:
    """sum of v over each channel's window, in channel order."""
    axis = _channels_axis(node, v.ndim)
    lo, hi = _window(size)
    c = v.shape[axis]
    vm = np.moveaxis(v, axis, 0)
    out = np.zeros_like(vm)
    for k in range(c):
        for j in range(max(0, k - lo), min(c - 1, k + hi) + 1):
            out[k] = out[k] + vm[j]
    return np.moveaxis(out, 0, axis)


POWER = {0.75: ("1.0f / (sqrtf(b) * sqrtf(sqrtf(b)))", lambda b: F32(1) / (np.sqrt(b) * np.sqrt(np.sqrt(b)))),
         0.5: ("1.0f / sqrtf(b)", lambda b: F32(1) / np.sqrt(b)),
         1.0: ("1.0f / b", lambda b: F32(1) / b)}


@register("LRN")
class LRN(Op):
    def check(self, node, ins):
        _attrs(node)
        if ins[0].is_const:
            return
        require_float(node, ins, 0)

    def infer(self, node, ins):
        _layout(node, ins[0].shape)
        return [(ins[0].shape, ins[0].dtype)]

    def reference(self, node, ins, x):
        size, alpha, beta, bias = _attrs(node)
        x = np.asarray(x, F32)
        sq = _window_sum(node, (x * x).astype(F32), size)
        with np.errstate(all="ignore"):
            b = (F32(bias) + F32(alpha / size) * sq).astype(F32)
            f = POWER[beta][1](b) if beta in POWER else np.power(b, F32(-beta))
        return [(x * f.astype(F32)).astype(F32)]

    def macs(self, node, ins, outs):
        return outs[0].size * (_attrs(node)[0] + 1)

    def emit(self, node, ins, outs, k):
        size, alpha, beta, bias = _attrs(node)
        x, y = ins[0], outs[0]
        if not y.size:
            return
        outer, ch, inner, cs, st = _layout(node, x.shape)
        lo, hi = _window(size)
        expr = POWER[beta][0] if beta in POWER else "powf(b, p)"
        fn = k.kernel("lrn", {"name": "f32_" + {0.75: "p75", 0.5: "p50", 1.0: "p100"}.get(beta, "pow"),
                               "mode": "f32", "xt": "float", "expr": expr})
        k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {outer}, {ch}, {inner}, {cs}, {st}, {lo}, {hi}, "
               f"{k.f32(bias)}, {k.f32(float(F32(alpha / size)))}, {k.f32(-beta)});")


def qlrn_table(node, ins):
    """(table int32, qs, dtype, zx, zy, lo, hi) of a cuvil.QLRN node."""
    size, alpha, beta, bias = _attrs(node)
    dt, xs, xz, ys, yz = unary_qparams(node, ins)
    lo, hi = quant.act_range(None, float(ys), int(yz), dt)
    qmin, qmax = quant.QRANGE[dt]
    dmax = max(qmax - xz, xz - qmin)
    smax = size * dmax * dmax
    emax = max(0, smax.bit_length() - 6)
    grid = np.array([s for e in range(emax + 1) for s in ((range(64) if e == 0 else range(SEG << e, 64 << e, 1 << e)))]
                    + [64 << emax], np.float64)
    base = bias + alpha / size * float(xs) * float(xs) * grid
    if np.any(base <= 0):
        raise unsupported(node, f"bias {bias} + alpha/size * square sum reaches {base.min():g} <= 0 "
                                f"(a negative power of it is undefined)")
    g = float(xs) / float(ys) * base ** -beta
    top = float(g.max())
    qs = min(62, int(math.floor(math.log2((1 << 30) / top)))) if top > 0 else 30
    if qs < 1:
        raise unsupported(node, f"scale ratio {float(xs) / float(ys):g} too large for the integer LRN")
    table = np.floor(g * 2.0 ** qs + 0.5).astype(np.int64)
    return table.astype(np.int32), qs, dt, int(xz), int(yz), lo, hi


def qlrn_apply(table: np.ndarray, qs: int, d: np.ndarray, s: np.ndarray) -> np.ndarray:
    """y - zy for codes d = x - zx and window square sums s (int64 arrays)."""
    e = np.zeros_like(s)
    while np.any((s >> e) >= 64):
        e = e + ((s >> e) >= 64)
    i = SEG * e + (s >> e)
    t = table.astype(np.int64)
    g = t[i]
    nxt = t[np.minimum(i + 1, t.size - 1)]
    frac = s & ((np.int64(1) << e) - 1)
    half = np.where(e > 0, np.int64(1) << np.maximum(e - 1, 0), 0)
    g = g + np.where(e > 0, ((nxt - g) * frac + half) >> e, 0)
    return (d * g + (np.int64(1) << (qs - 1))) >> qs


@register("cuvil.QLRN")
class QLRN(Op):
    def check(self, node, ins):
        qlrn_table(node, ins)

    def infer(self, node, ins):
        _layout(node, ins[0].shape)
        return [(ins[0].shape, ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        size = _attrs(node)[0]
        table, qs, dt, xz, yz, lo, hi = qlrn_table(node, ins)
        d = np.asarray(x).astype(np.int64) - xz
        s = _window_sum(node, d * d, size)
        return [quant.saturate(qlrn_apply(table, qs, d, s) + yz, dt, lo, hi)]

    def macs(self, node, ins, outs):
        return outs[0].size * (_attrs(node)[0] + 1)

    def emit(self, node, ins, outs, k):
        size = _attrs(node)[0]
        table, qs, dt, xz, yz, lo, hi = qlrn_table(node, ins)
        x, y = ins[0], outs[0]
        if not y.size:
            return
        outer, ch, inner, cs, st = _layout(node, x.shape)
        wlo, whi = _window(size)
        fn = k.kernel("lrn", {"name": CODES[dt], "mode": "int", "xt": CTYPES[dt]})
        tsym = k.const(table, f"{node.name}_gain")
        qsym = k.const(np.array([xz, yz, qs, lo, hi], np.int32), f"{node.name}_q")
        k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {outer}, {ch}, {inner}, {cs}, {st}, {wlo}, {whi}, {tsym}, {qsym});")
