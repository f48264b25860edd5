"""Integer arithmetic shared by the int8 reference ops and the kernels.

Two requantization modes (design.md, Numerics):

- "fixed": a real multiplier M = in_scale * w_scale / out_scale (computed in
  double, as TFLM's PopulateConvolutionQuantizationParams does) is stored as a
  Q31 mantissa and a power-of-two exponent (`quantize_multiplier`); an int32
  accumulator is scaled with a saturating rounding doubling high multiply and
  a rounding right shift (gemmlowp / TFLM's MultiplyByQuantizedMultiplier).
  Integer-only: runs on cores without an FPU and matches TFLM bit for bit.
- "float": the multiplier is a float32 computed as (in_scale * w_scale) /
  out_scale in float32 (onnxruntime's QLinearConv / MLAS order), acc is
  converted to float, multiplied, rounded half to even. Matches onnxruntime.

Every function here is vectorized numpy working in int64 so overflow in the
reference cannot hide: the kernels use the same formulas in C.
"""
from __future__ import annotations

import math

import numpy as np

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
QRANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (INT32_MIN, INT32_MAX)}


def quantize_multiplier(real: float) -> tuple[int, int]:
    """M -> (q31, shift) with M ~= q31 * 2^(shift - 31) (TFLM QuantizeMultiplier)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    # std::round: half away from zero (exact in double: |q| * 2^31 < 2^31)
    q_fixed = int(math.copysign(math.floor(abs(q) * (1 << 31) + 0.5), q))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    if shift > 30:  # TFLM caps at 30 (multipliers >= 2^30 do not occur in practice)
        shift, q_fixed = 30, INT32_MAX
    return q_fixed, shift


def quantize_multipliers(reals) -> tuple[np.ndarray, np.ndarray]:
    pairs = [quantize_multiplier(float(r)) for r in np.asarray(reals, dtype=np.float64).reshape(-1)]
    return (np.array([p[0] for p in pairs], dtype=np.int32), np.array([p[1] for p in pairs], dtype=np.int32))


def srdhm(a, b) -> np.ndarray:
    """Saturating rounding doubling high multiply of int32 values (gemmlowp)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    s = ab + nudge
    # C integer division truncates toward zero
    q = np.where(s >= 0, s >> 31, -((-s) >> 31))
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    return np.where(overflow, INT32_MAX, q).astype(np.int64)


def rdbpot(x, exponent) -> np.ndarray:
    """Rounding divide by power of two, round half away from zero (gemmlowp)."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def requantize_fixed(acc, mult, shift) -> np.ndarray:
    """TFLM MultiplyByQuantizedMultiplier on int32 acc (broadcasting)."""
    acc = np.asarray(acc, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = acc * (np.int64(1) << left)
    shifted = np.clip(shifted, INT32_MIN, INT32_MAX)  # the C code works in int32
    return rdbpot(srdhm(shifted, mult), right)


def div_even(a, c) -> np.ndarray:
    """a / c for integers a and c > 0, rounded half to even (ONNX's
    QuantizeLinear rounding of an exact quotient)."""
    a = np.asarray(a, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    q = a // c                     # floor
    r = a - q * c
    return q + ((2 * r > c) | ((2 * r == c) & (q % 2 == 1)))


def requantize_single(acc, mult, shift) -> np.ndarray:
    """acc * mult * 2^(shift - 31) rounded once, half to even, saturated to
    int32: the int64 product of one rounding, where TFLM's
    MultiplyByQuantizedMultiplier rounds twice (mult and shift as
    quantize_multiplier gives them: shift in [-31, 30], so the divisor
    2^(31 - shift) is 2^1 .. 2^62 and the product of two int32 fits)."""
    acc = np.asarray(acc, dtype=np.int64)
    e = 31 - np.asarray(shift, dtype=np.int64)
    p = acc * np.asarray(mult, dtype=np.int64)
    q = p >> e                     # numpy's >> on int64 is a floor
    r = p - (q << e)
    half = np.int64(1) << (e - 1)
    q = q + ((r > half) | ((r == half) & (q % 2 == 1)))
    return np.clip(q, INT32_MIN, INT32_MAX)


def float_multiplier(in_scale, w_scale, out_scale) -> np.ndarray:
    """onnxruntime's per-channel float32 requant scale: (in * w) / out in float32."""
    with np.errstate(over="ignore"):
        m = ((np.float32(in_scale) * np.asarray(w_scale, dtype=np.float32)).astype(np.float32)
             / np.float32(out_scale)).astype(np.float32)
    # an absurd scale ratio overflows float32: FLT_MAX saturates as well and
    # never makes 0 * inf = NaN
    return np.minimum(m, np.finfo(np.float32).max).astype(np.float32)


def requantize_float(acc, scale) -> np.ndarray:
    """acc * scale in float32, rounded half to even (as MLAS does)."""
    with np.errstate(over="ignore"):
        v = np.asarray(acc, dtype=np.int64).astype(np.float32) * np.asarray(scale, dtype=np.float32)
    v = np.clip(v.astype(np.float32), np.float32(-2147483648.0), np.float32(2147483520.0))   # as the C kernels
    return np.rint(v).astype(np.int64)


def saturate(x, dtype: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    qmin, qmax = QRANGE[dtype]
    lo = qmin if lo is None else max(lo, qmin)
    hi = qmax if hi is None else min(hi, qmax)
    return np.clip(np.asarray(x, dtype=np.int64), lo, hi).astype(dtype)


def act_range(act: tuple[float, float] | None, scale: float, zp: int, dtype: str) -> tuple[int, int]:
    """Quantized clamp bounds for a fused activation given in the real domain
    (TFLM CalculateActivationRangeQuantized: round(bound / scale) + zp)."""
    qmin, qmax = QRANGE[dtype]
    if act is None:
        return qmin, qmax
    lo, hi = act
    qlo = qmin if not math.isfinite(lo) else max(qmin, zp + int(_round_away(lo / scale)))
    qhi = qmax if not math.isfinite(hi) else min(qmax, zp + int(_round_away(hi / scale)))
    return qlo, qhi


def _round_away(x: float) -> float:
    return math.copysign(math.floor(abs(x) + 0.5), x)


def quantize(x, scale, zp, dtype: str, rounding: str = "even") -> np.ndarray:
    """Float -> integer: ONNX QuantizeLinear rounds half to even; TFLM's
    AffineQuantize rounds half away from zero."""
    v = np.asarray(x, dtype=np.float32) / np.asarray(scale, dtype=np.float32)
    v = np.clip(np.nan_to_num(v, nan=0.0), -65536.0, 65536.0)  # as the C kernel
    r = np.rint(v) if rounding == "even" else np.sign(v) * np.floor(np.abs(v) + 0.5)
    return saturate(r.astype(np.int64) + np.asarray(zp, dtype=np.int64), dtype)


def dequantize(q, scale, zp) -> np.ndarray:
    return ((np.asarray(q, dtype=np.int64) - np.asarray(zp, dtype=np.int64)).astype(np.float32)
            * np.asarray(scale, dtype=np.float32)).astype(np.float32)


def qparams(node, scale_t, zp_t, what: str, channels: int | None = None, dtype: str | None = None):
    """Validated (scale float32 array, zero point int64 array) of a QOperator
    input pair. scale must be constant, finite and > 0; per-channel arrays
    must have `channels` entries. zero point absent = 0 of `dtype`."""
    from .ops.base import unsupported
    if scale_t is None or not scale_t.is_const:
        raise unsupported(node, f"{what} scale must be a constant")
    scale = np.asarray(scale_t.data, dtype=np.float32).reshape(-1)
    if scale.size == 0 or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        bad = scale[~(np.isfinite(scale) & (scale > 0))] if scale.size else scale
        raise unsupported(node, f"{what} scale '{scale_t.name}' must be finite and > 0, has {bad[:4].tolist() or 'no values'}")
    if zp_t is None:
        zp = np.zeros(scale.shape, dtype=np.int64)
    else:
        if not zp_t.is_const:
            raise unsupported(node, f"{what} zero point must be a constant")
        zp = np.asarray(zp_t.data).astype(np.int64).reshape(-1)
    if zp.size not in (1, scale.size):
        raise unsupported(node, f"{what}: zero point '{zp_t.name}' has {zp.size} values, scale has {scale.size}")
    if scale.size > 1 and channels is not None and scale.size != channels:
        raise unsupported(node, f"{what}: per-channel scale '{scale_t.name}' has {scale.size} values, "
                                f"the tensor has {channels} channels")
    return scale, zp
