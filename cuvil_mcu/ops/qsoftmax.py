"""com.microsoft.QLinearSoftmax: X, X_scale, x_zero_point, y_scale, y_zero_point
(per tensor, int8 or uint8); attributes opset (required, as onnxruntime) and
axis. opset < 13: the input is coerced to 2-D at `axis` (default 1) and the
softmax runs over everything from `axis` on; opset >= 13: over `axis`
(default -1). Both become (outer, n, inner) slices: n elements inner apart.

Numerics, in the node's `_requant` mode:

"fixed" (TFLM's int8 SOFTMAX: micro/kernels/softmax_common.cc
CalculateSoftmaxParams with beta = 1, kernels/internal/reference/softmax.h;
integer only, gemmlowp fixed point written out here and in C):
    (mult, ls) = QuantizeMultiplier(min(x_scale * 2^26, 2^31 - 1))   (ls >= 0)
    diff_min = -floor(31 * 2^26 / 2^ls)                  (CalculateInputRadius(5, ls))
    per slice: d = x - max(x); for d >= diff_min:
      e(d) = exp_on_negative_values(SRDHM(d * 2^ls, mult) as Q5.26) as Q0.31
      sum = sum of RoundingDivideByPOT(e, 12)            (Q12.19)
    GetReciprocal: h = clz(sum); nbou = 12 - h;
      s = one_over_one_plus_x_for_x_in_0_1((sum << h) - 2^31)
    output scale 1/256 and zero point -128 (int8) or 0 (uint8), TFLM's only ones:
      y = RoundingDivideByPOT(SRDHM(s, e), nbou + 23) + zp, clamped; d < diff_min: zp
      (an exponent past 31 gives 0: the value is below half an LSB)
    other output parameters (our generalization): with (m, sh) =
      QuantizeMultiplier(2^-31 / y_scale): y = y_zp + MBQM(SRDHM(s, e), m, sh - nbou).
  The accumulator is Q12.19: slices longer than 4095 elements could overflow
  it and are rejected. exp_on_negative_values (Q5.26 in; the barrel shifter
  over exp(-1/4), exp(-1/2) ... exp(-16) and the Taylor polynomial around
  -1/8) and one_over_one_plus_x_for_x_in_0_1 (three Newton-Raphson steps from
  48/17 - 32/17 x in Q2.29) follow gemmlowp's fixedpoint.h.
"float" (onnxruntime's QLinearSoftmax): a 256-entry float table
    t[i] = float(exp((i - 255 + b) * x_scale)),  b = max(0, log(FLT_MAX / n) - 5) / x_scale
  (double arithmetic; b keeps the float sum finite); per slice the float32
  sum (in order) of t[x - max + 255], then
    y = rint(t * floor(1 / y_scale) / sum) + y_zp   (float32, half to even),
  saturated (onnxruntime 1.32 saturates as well). Exact against onnxruntime,
  except where t * floor(1 / y_scale) overflows float32 (a single-element
  slice, or a tiny y_scale): onnxruntime converts inf to an integer there
  (undefined), we saturate.
Then the fused activation's clamp, if any.
"""
from __future__ import annotations

import math

import numpy as np

from .. import quant
from . import softmax
from .base import Op, register, shape_error, unsupported
from .qelementwise import CODES, CTYPES, F32, out_range, requant_mode, unary_qparams, wrap32

INT32_MAX = 2 ** 31 - 1
INT32_MIN = -(2 ** 31)
# gemmlowp's barrel shifter: (exponent, Q0.31 of exp(-2^exponent)).
EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
              (2, 39332535), (3, 720401), (4, 242))
QSOFTMAX_FIELDS = ("outer", "n", "inner", "mult", "ls", "diff_min", "ymult", "yshift", "yzp", "lo", "hi")
MAX_FIXED_N = 4095


def slices(node, shape) -> tuple[int, int, int]:
    if node.attr("opset") is None:
        raise shape_error(node, "attribute 'opset' is required (the Softmax opset the axis refers to)")
    return softmax.slices(node, shape, int(node.attr("opset")))


# --------------------------------------------------------------------------- gemmlowp fixed point (int64 arrays holding int32 values)

def sat_lshift(x, e: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT<e> for e > 0: x * 2^e saturated to int32."""
    x = np.asarray(x, np.int64)
    thr = (1 << (31 - e)) - 1
    return np.where(x > thr, INT32_MAX, np.where(x < -thr, INT32_MIN, x * (1 << e)))


def exp_on_interval(a) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), Q0.31 in and out."""
    x = wrap32(np.asarray(a, np.int64) + (1 << 28))
    x2 = quant.srdhm(x, x)
    x3 = quant.srdhm(x2, x)
    x4 = quant.srdhm(x2, x2)
    x4_over_4 = quant.rdbpot(x4, 2)
    poly = quant.rdbpot(wrap32(quant.srdhm(wrap32(x4_over_4 + x3), 715827883) + x2), 1)
    return wrap32(1895147668 + quant.srdhm(1895147668, wrap32(x + poly)))


def exp_on_negative_values(a) -> np.ndarray:
    """exp(a) for a <= 0 given in Q5.26; result Q0.31."""
    a = np.asarray(a, np.int64)
    a_mod = wrap32((a & ((1 << 24) - 1)) - (1 << 24))
    result = exp_on_interval(sat_lshift(a_mod, 5))
    remainder = wrap32(a_mod - a)
    for e, m in EXP_BARREL:
        result = np.where(remainder & (1 << (26 + e)), quant.srdhm(result, m), result)
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x(a) -> np.ndarray:
    """1 / (1 + a) for a in [0, 1), Q0.31 in and out."""
    a = np.asarray(a, np.int64)
    s = a + INT32_MAX
    half = np.where(s >= 0, (s + 1) // 2, -((-s + 1) // 2))   # RoundingHalfSum (C division)
    x = wrap32(1515870810 + quant.srdhm(half, -1010580540))
    for _ in range(3):
        one_minus = wrap32((1 << 29) - quant.srdhm(half, x))
        x = wrap32(x + sat_lshift(quant.srdhm(x, one_minus), 2))
    return sat_lshift(x, 1)


def clz32(v) -> np.ndarray:
    v = np.asarray(v, np.int64) & 0xFFFFFFFF
    bits = np.zeros(v.shape, np.int64)
    t = v.copy()
    for s in (16, 8, 4, 2, 1):
        big = t >= (1 << s)
        bits += np.where(big, s, 0)
        t = np.where(big, t >> s, t)
    return 32 - (bits + (t > 0))


def reciprocal(total) -> tuple[np.ndarray, np.ndarray]:
    """GetReciprocal(total, 12): (Q0.31 scale, num_bits_over_unit)."""
    total = np.asarray(total, np.int64)
    h = clz32(total)
    shifted = ((total << h) & 0xFFFFFFFF) - (1 << 31)
    return one_over_one_plus_x(shifted), 12 - h


def fixed_params(node, xs, n: int):
    """TFLM's (input multiplier, left shift, diff_min); the limits of the
    recipe are checked here (the mode is known from the passes on, not at
    load time)."""
    if n > MAX_FIXED_N:
        raise unsupported(node, f"softmax over {n} elements: TFLM's Q12.19 sum of exponentials "
                                f"holds at most {MAX_FIXED_N} (use --requant float)")
    real = min(float(xs) * float(1 << 26), float(INT32_MAX))
    mult, ls = quant.quantize_multiplier(real)
    if ls < 0:
        raise unsupported(node, f"x_scale {float(xs):g} is below 2^-26: TFLM's softmax input scaling needs a "
                                f"multiplier >= 1")
    diff_min = -int(math.floor(31.0 * float(1 << 26) / float(1 << ls)))
    return mult, ls, diff_min


def softmax_fixed(x: np.ndarray, mult, ls, diff_min, out) -> np.ndarray:
    """x: int64 [slices, n]. out: ("std", qmin) or ("gen", ymult, yshift, yzp).
    Returns int64 [slices, n] before the clamp."""
    mx = x.max(axis=1, keepdims=True)
    d = x - mx
    valid = d >= diff_min
    e = exp_on_negative_values(quant.srdhm(np.where(valid, d, 0) * (1 << ls), mult))
    total = np.where(valid, quant.rdbpot(e, 12), 0).sum(axis=1, keepdims=True)
    scale, nbou = reciprocal(total)
    p = quant.srdhm(scale, e)
    if out[0] == "std":
        y = quant.rdbpot(p, nbou + 23) + out[1]
        return np.where(valid, y, out[1])
    _, ym, ysh, yzp = out
    return np.where(valid, quant.requantize_fixed(p, ym, ysh - nbou), 0) + yzp


# --------------------------------------------------------------------------- onnxruntime's float rule

def ort_table(xs, n: int) -> np.ndarray:
    fmax_over_n = F32(np.finfo(np.float32).max) / F32(n)
    b = max(0.0, math.log(float(fmax_over_n)) - 5.0) / float(F32(xs))
    return np.array([math.exp((i - 255 + b) * float(F32(xs))) for i in range(256)], np.float64).astype(F32)


def softmax_float(x: np.ndarray, table, yscale, yzp) -> np.ndarray:
    mx = x.max(axis=1, keepdims=True)
    t = table[x - mx + 255]
    s = np.zeros((x.shape[0], 1), F32)
    for j in range(x.shape[1]):      # float32, in order
        s = (s + t[:, j:j + 1]).astype(F32)
    with np.errstate(over="ignore"):
        q = ((t * F32(yscale)).astype(F32) / s).astype(F32)
    # t * yscale can overflow to inf (one element, tiny y_scale), where
    # onnxruntime's integer conversion is undefined: saturate instead
    q = np.minimum(q, F32(2.0 ** 30))
    return np.rint(q).astype(np.int64) + yzp


def _params(node, ins):
    return unary_qparams(node, ins, "X", "y")


def _out_rule(dt, ys, yz):
    qmin = quant.QRANGE[dt][0]
    if F32(ys) == F32(1.0 / 256.0) and yz == qmin:
        return ("std", qmin)
    m, s = quant.quantize_multiplier(2.0 ** -31 / float(ys))
    return ("gen", m, s, yz)


@register("com.microsoft.QLinearSoftmax")
class QLinearSoftmax(Op):
    inplace = True
    fuses_act = True

    def check(self, node, ins):
        _params(node, ins)
        slices(node, ins[0].shape)
        requant_mode(node)

    def infer(self, node, ins):
        slices(node, ins[0].shape)
        return [(ins[0].shape, ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        dt, xs, xz, ys, yz = _params(node, ins)
        lo, hi = out_range(node, ys, yz, dt)
        x = np.asarray(x)
        outer, n, inner = slices(node, x.shape)
        v = np.asarray(x, np.int64).reshape(outer, n, inner).transpose(0, 2, 1).reshape(-1, n)
        if requant_mode(node) == "fixed":
            mult, ls, diff_min = fixed_params(node, xs, n)
            y = softmax_fixed(v, mult, ls, diff_min, _out_rule(dt, ys, yz))
        else:
            y = softmax_float(v, ort_table(xs, n), F32(math.floor(F32(1.0) / F32(ys))), yz)
        y = quant.saturate(y, dt, lo, hi)
        return [y.reshape(outer, inner, n).transpose(0, 2, 1).reshape(x.shape)]

    def macs(self, node, ins, outs):
        return 2 * ins[0].size

    def emit(self, node, ins, outs, k):
        dt, xs, xz, ys, yz = _params(node, ins)
        lo, hi = out_range(node, ys, yz, dt)
        outer, n, inner = slices(node, ins[0].shape)
        x, y = ins[0], outs[0]
        if x.size == 0:
            return
        vals = dict(outer=outer, n=n, inner=inner, mult=0, ls=0, diff_min=0, ymult=0, yshift=0, yzp=yz,
                    lo=lo, hi=hi)
        extra = ""
        if requant_mode(node) == "fixed":
            mult, ls, diff_min = fixed_params(node, xs, n)
            rule = _out_rule(dt, ys, yz)
            vals.update(mult=mult, ls=ls, diff_min=diff_min)
            if rule[0] == "std":
                vals["yzp"] = rule[1]
            else:
                vals.update(ymult=rule[1], yshift=rule[2])
            kind = "tflm" if rule[0] == "std" else "tflm_gen"
            k.kernel("requant_fixed")
            k.kernel("qfixedpoint")
        else:
            kind = "float"
            table = k.const(ort_table(xs, n), f"{node.name}_exp")
            extra = f", {table}, {k.f32(F32(math.floor(F32(1.0) / F32(ys))))}"
        g = k.const(np.array([vals[f] for f in QSOFTMAX_FIELDS], np.int32), "qsoftmax_geo")
        fn = k.kernel("qsoftmax_s8", {"name": f"{kind}_{CODES[dt]}", "kind": kind, "fields": QSOFTMAX_FIELDS,
                                      "xt": CTYPES[dt], "yt": CTYPES[dt]})
        k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {g}{extra});")
