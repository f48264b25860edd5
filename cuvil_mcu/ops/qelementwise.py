"""Integer element-wise ops: com.microsoft.QLinearAdd / QLinearMul (numpy
broadcasting) and the 256-entry lookup-table ops com.microsoft.QLinearSigmoid,
com.microsoft.QLinearLeakyRelu and cuvil.QLut (any unary float function, the
form passes/qdq.py gives Sigmoid, Tanh, HardSwish, ... between DQ and Q).

Inputs: A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp (binary) and
X, X_scale, X_zp, Y_scale, Y_zp (lookup tables); per-tensor parameters,
absent zero points are 0; int8 or uint8 activations (all of one type).

Numerics, per element, in the node's `_requant` mode:

QLinearAdd, "fixed" (TFLM's int8 ADD, reference_integer_ops/add.h with the
parameters of micro/kernels/add_common.cc):
    left_shift = 20; twice_max = 2 * max(sa, sb)             (double)
    (m1, s1) = QuantizeMultiplier(sa / twice_max)
    (m2, s2) = QuantizeMultiplier(sb / twice_max)
    (mo, so) = QuantizeMultiplier(twice_max / (2^20 * sc))
    v1 = MBQM((a - za) * 2^20, m1, s1);  v2 = MBQM((b - zb) * 2^20, m2, s2)
    y  = clamp(MBQM(v1 + v2, mo, so) + zc)
  (MBQM = MultiplyByQuantizedMultiplier, double rounding: quant.requantize_fixed;
  the clamp is the fused activation's range, TFLM fuses Relu/Relu6 here.)
QLinearAdd, "float" (onnxruntime's x86-64 AVX2 kernel, MlasQLinearAddKernelAvx2
as compiled: FMA contractions included):
    ra = sa / sc; rb = sb / sc                                (float32)
    fixed = zc - fma(ra, za, rb * zb)
    y = sat(rint(fma(a, ra, fma(b, rb, fixed))))              (round half even)
  onnxruntime swaps the operands when A is the broadcast one (stride 0) in the
  innermost run of the broadcast; so do we (the sums are not associative).
  This matches onnxruntime bit for bit on x86-64 with AVX2/FMA; its NEON and
  SSE2-only kernels round differently.
QLinearMul, "fixed" (TFLM's int8 MUL, reference_integer_ops/mul.h):
    (m, s) = QuantizeMultiplier(sa * sb / sc)                 (double)
    y = clamp(MBQM((a - za) * (b - zb), m, s) + zc)
QLinearMul, "float" (MlasQLinearMul): ratio = (sa * sb) / sc in float32,
    y = sat(rint(float((a - za) * (b - zb)) * ratio + zc))    (two float32 roundings)
Lookup tables (both modes, compile time, over all 256 codes q):
    x = sx * float(q - zx); y = f(x) in float32 (computed in double, rounded);
    table[q] = sat(rint(y / sy) + zy)   (onnxruntime's QlinearBuildLookupTable
    and MlasQuantizeLinear). A NaN f(x) (sqrt/log of a negative code) maps to
    the lowest code, as onnxruntime's QuantizeLinear does on x86. LeakyRelu is exact against onnxruntime; Sigmoid
    differs by at most 1 LSB on rare codes (onnxruntime evaluates a rational
    approximation of the logistic function, we the function itself).

The kernels: `qbinary_s8` walks the broadcast like binary_f32 (strides from
elementwise.broadcast_strides), `qlut_s8` is y[i] = table[(uint8_t)x[i]].
The helpers at the top are shared with ops/qpool.py, qsoftmax.py, qconcat.py.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from .. import isa, quant
from .base import Op, broadcast_shape, register, shape_error, unsupported
from .elementwise import broadcast_strides

INT8_TYPES = ("int8", "uint8")
CTYPES = {"int8": "int8_t", "uint8": "uint8_t"}
CODES = {"int8": "s8", "uint8": "u8"}
F32 = np.float32


# --------------------------------------------------------------------------- shared helpers

def requant_mode(node) -> str:
    mode = node.attrs.get("_requant", "fixed")
    if mode not in ("fixed", "float"):
        raise unsupported(node, f"_requant={mode!r}: expected 'fixed' or 'float'")
    return mode


def rounding(node) -> str:
    """The node's "fixed"-mode rounding conventions (passes/stamp_requant.py):
    "tflm" (models tf2onnx wrote) or "onnx" (the rest)."""
    r = node.attrs.get("_rounding", "tflm")
    if r not in ("tflm", "onnx"):
        raise unsupported(node, f"_rounding={r!r}: expected 'tflm' or 'onnx'")
    return r


def int8_input(node, t, what: str) -> str:
    """dtype of an int8/uint8 activation input, or a clear error."""
    if t is None:
        raise shape_error(node, f"input {what} is missing")
    if t.dtype not in INT8_TYPES:
        raise unsupported(node, f"{what} '{t.name}' is {t.dtype}; expected int8 or uint8")
    return t.dtype


def qpair(node, ins, si: int, zi: int, what: str, dtype: str) -> tuple[np.float32, int]:
    """Validated per-tensor (scale float32, zero point int) of inputs si/zi;
    an absent zero point is 0. Scales must be constant, finite and > 0."""
    st = ins[si] if si < len(ins) else None
    zt = ins[zi] if zi < len(ins) else None
    if st is None:
        raise unsupported(node, f"{what} scale is missing")
    if st.dtype != "float32":
        raise unsupported(node, f"{what} scale '{st.name}' is {st.dtype}; expected float32")
    for t, kind in ((st, "scale"), (zt, "zero point")):
        if t is not None and not t.is_const:
            raise unsupported(node, f"{what} {kind} '{t.name}' is computed at run time; it must be a constant")
    s, z = quant.qparams(node, st, zt, what)
    if s.size != 1:
        raise unsupported(node, f"{what} scale '{st.name}' has {s.size} values; this op takes one (per tensor)")
    if z.size != 1:
        raise unsupported(node, f"{what} zero point '{zt.name}' has {z.size} values; this op takes one")
    if zt is not None and zt.dtype != dtype:
        raise unsupported(node, f"{what} zero point '{zt.name}' is {zt.dtype}; its tensor is {dtype}")
    zp = int(z[0])
    lo, hi = quant.QRANGE[dtype]
    if not lo <= zp <= hi:
        raise unsupported(node, f"{what} zero point {zp} is outside the {dtype} range")
    return F32(s[0]), zp


def qvariadic_params(node, ins):
    """(dtype, (ys, yz), [(x tensor, xs, xz)]) of a quantized op with any
    number of inputs, laid out Y_scale, Y_zero_point, then (X, X_scale,
    X_zero_point) triples (QLinearConcat, cuvil.QSum), validated."""
    if len(ins) < 5 or (len(ins) - 2) % 3:
        raise shape_error(node, f"has {len(ins)} inputs; expected Y_scale, Y_zero_point, then "
                                f"(X, X_scale, X_zero_point) triples")
    xs = [ins[i] for i in range(2, len(ins), 3)]
    dt = int8_input(node, xs[0], "input 0")
    for i, t in enumerate(xs):
        if int8_input(node, t, f"input {i}") != dt:
            raise unsupported(node, f"input {i} '{t.name}' is {t.dtype}, input 0 '{xs[0].name}' is {dt}")
    ys, yz = qpair(node, ins, 0, 1, "Y", dt)
    parts = [(xs[i], *qpair(node, ins, 3 + 3 * i, 4 + 3 * i, f"input {i}", dt)) for i in range(len(xs))]
    return dt, (ys, yz), parts


def out_range(node, ys, yzp, dtype) -> tuple[int, int]:
    """Integer clamp of the output: the fused activation within the dtype."""
    lo, hi = quant.act_range(node.act, float(ys), int(yzp), dtype)
    if lo > hi:
        raise unsupported(node, f"fused activation {node.act} leaves no representable output value")
    return lo, hi


def fma32(x, y, z) -> np.ndarray:
    """float32 fused multiply-add, correctly rounded (as fmaf / vfmadd):
    the product is exact in double; TwoSum gives the exact error of the
    double sum, which decides the rare double-rounding ties."""
    x, y, z = (np.asarray(v, F32) for v in (x, y, z))
    p = x.astype(np.float64) * y.astype(np.float64)
    zz = z.astype(np.float64)
    s = p + zz
    bp = s - p
    err = (p - (s - bp)) + (zz - bp)
    r = s.astype(F32)
    rd = r.astype(np.float64)
    towards = np.where(s > rd, np.inf, -np.inf).astype(F32)
    nb = np.nextafter(r, towards)
    tie = (s != rd) & ((rd + nb.astype(np.float64)) * 0.5 == s) & (err != 0)
    fix = np.where(err > 0, np.maximum(r, nb), np.minimum(r, nb))
    return np.where(tie, fix, r).astype(F32)


def wrap32(v) -> np.ndarray:
    """int64 -> the int32 two's-complement wrap of it (as int64)."""
    v = np.asarray(v, np.int64)
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def lut_index(dtype: str) -> np.ndarray:
    """The 256 codes in table order: entry i holds the code whose byte is i
    ((uint8_t)x indexes the table for int8 and uint8 alike)."""
    return np.arange(256, dtype=np.int64).astype(np.uint8).view(np.int8).astype(np.int64) \
        if dtype == "int8" else np.arange(256, dtype=np.int64)


def lut_apply(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Reference of the table lookup: table[(uint8)x]."""
    x = np.asarray(x)
    return table[x.view(np.uint8) if x.dtype == np.int8 else x.astype(np.uint8)]


def emit_lut(k, y, x, table: np.ndarray, name: str, n: int | None = None, x_off: int = 0, y_off: int = 0):
    """One call of the lookup kernel: y[i] = table[(uint8_t)x[i]] for n elements."""
    fn = k.kernel("qlut_s8", {"name": CODES[x.dtype] + CODES[y.dtype],
                              "xt": CTYPES[x.dtype], "yt": CTYPES[y.dtype]})
    tsym = k.const(np.asarray(table).astype(y.dtype), name)
    n = y.size if n is None else n
    xp = k.ptr(x) if not x_off else f"{k.ptr(x)} + {x_off}"
    yp = k.ptr(y) if not y_off else f"{k.ptr(y)} + {y_off}"
    k.line(f"{fn}({yp}, {xp}, {tsym}, {n});")


# --------------------------------------------------------------------------- QLinearAdd / QLinearMul

def _binary_params(node, ins):
    if len(ins) < 7:
        raise shape_error(node, f"has {len(ins)} inputs; expected A, A_scale, A_zero_point, B, B_scale, "
                                f"B_zero_point, C_scale[, C_zero_point]")
    dt = int8_input(node, ins[0], "A")
    if int8_input(node, ins[3], "B") != dt:
        raise unsupported(node, f"A '{ins[0].name}' is {dt} but B '{ins[3].name}' is {ins[3].dtype}")
    sa, za = qpair(node, ins, 1, 2, "A", dt)
    sb, zb = qpair(node, ins, 4, 5, "B", dt)
    sc, zc = qpair(node, ins, 6, 7, "C", dt)
    return dt, (sa, za), (sb, zb), (sc, zc)


def _strides(node, a_shape, b_shape):
    """elementwise.broadcast_strides, or a clear error past its 6 dimensions."""
    try:
        return broadcast_strides(a_shape, b_shape)
    except ValueError as e:
        raise unsupported(node, str(e)) from None


def _a_is_inner_scalar(node, a_shape, b_shape) -> bool:
    """onnxruntime's broadcaster calls its 'input 0 is a scalar' kernel when A
    does not move along the innermost merged run (stride 0 there)."""
    return _strides(node, a_shape, b_shape)[1][-1] == 0


def add_fixed_params(sa, sb, sc):
    """TFLM CalculateOpDataAdd for 8-bit: (m1, s1, m2, s2, mo, so)."""
    twice_max = 2.0 * float(max(F32(sa), F32(sb)))
    m1, s1 = quant.quantize_multiplier(float(sa) / twice_max)
    m2, s2 = quant.quantize_multiplier(float(sb) / twice_max)
    mo, so = quant.quantize_multiplier(twice_max / ((1 << 20) * float(sc)))
    return m1, s1, m2, s2, mo, so


def add_float_params(sa, za, sb, zb, sc, zc):
    """onnxruntime AVX2 QLinearAdd constants: (ra, rb, fixed) float32."""
    ra = F32(F32(sa) / F32(sc))
    rb = F32(F32(sb) / F32(sc))
    fixed = F32(F32(zc) - fma32(ra, F32(za), F32(rb * F32(zb))))
    return ra, rb, fixed


def _fits32(v) -> bool:
    v = np.asarray(v, np.int64)
    return bool(v.size == 0 or (v.min() >= -(1 << 31) and v.max() < (1 << 31)))


def _input_plan(codes, zp, m, s):
    """Exact 32-bit form of v(q) = MBQM((q - zp) * 2^20, m, s) over the 256
    codes q: v(q) = q * mh + ((q * ml + r) >> n) + k, or None.

    Why it exists: (q - zp) * 2^20 needs no saturation and s <= 0 (the TFLM
    ratio is at most 1/2), so SRDHM is floor(((q - zp) * m + 2^10) / 2^11)
    and the rounding divide by 2^-s (halves away from zero) folds into one
    floor((q * m + c) / 2^n), n = 11 - s, with c depending only on the sign
    of q - zp. A c valid for every code is searched (the intersection of the
    per-code intervals); when there is none (the halves-away ties of the
    second rounding), c holds for the codes q >= zp and dc = c_neg - c is
    added for q < zp. m = mh * 2^n + ml keeps every product within int32.
    The caller checks the result against the reference on all codes."""
    if s > 0:
        return None
    v = quant.requantize_fixed((codes - zp) * (1 << 20), m, s)
    n = 11 - s
    if n > 23:
        return None
    neg = codes < zp

    def window(sel):   # the c with floor((q * m + c) / 2^n) == v(q) for the selected codes
        if not sel.any():
            return None
        lo_c = int(np.max(v[sel] * (1 << n) - codes[sel] * m))
        hi_c = int(np.min((v[sel] + 1) * (1 << n) - codes[sel] * m))      # exclusive
        return lo_c if lo_c < hi_c else None

    c, dc = window(np.ones_like(neg)), 0
    if c is None:      # the halves-away rounding makes negative codes need their own c
        c, cn = window(~neg), window(neg)
        if c is None or cn is None:
            return None
        dc = cn - c
    mh, ml = m >> n, m & ((1 << n) - 1)
    k, r = c >> n, c & ((1 << n) - 1)
    return {"mh": mh, "ml": ml, "r": r, "n": n, "k": k, "dc": dc, "zp": int(zp)}


def add_all_pairs(dt, za, zb, zc, params, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """(codes, y): the fixed-mode QLinearAdd reference on every pair of
    codes, y[i, j] for A = codes[i], B = codes[j] (byte order, lut_index),
    clamped to [lo, hi]: what the compile-time kernel plans are checked on."""
    m1, s1, m2, s2, mo, so = params
    codes = lut_index(dt)
    v1 = quant.requantize_fixed((codes - za) * (1 << 20), m1, s1)
    v2 = quant.requantize_fixed((codes - zb) * (1 << 20), m2, s2)
    return codes, np.clip(quant.requantize_fixed(v1[:, None] + v2[None, :], mo, so) + zc, lo, hi)


def add_fast_plan(dt, za, zb, zc, params, lo, hi):
    """Constants of the per-node specialised fixed-mode QLinearAdd kernel
    (qadd_s8: literals, 32-bit arithmetic and one 32x32->64 multiply), or
    None when the exact form does not apply. Per element:
        s = a*mh1 + ((a*ml1 + r1) >> n1) + b*mh2 + ((b*ml2 + r2) >> n2)
        w = ((int64)(s * 2^(L+1)) * mo + nudge) >> 32         (= SRDHM((s + k) << L, mo))
        y = clamp(e ? (w + (w >> 31) + c) >> e : w + zc)      (c = 2^(e-1) + zc * 2^e)
    with L = max(so, 0), e = max(-so, 0), k = k1 + k2 (the constant parts of
    the scaled inputs), nudge = k * 2^(L+1) * mo + 2^31. It is verified here,
    at compile time, against the reference recipe on all 256 x 256 input
    pairs (and every intermediate against int32 range); any difference or
    overflow (e.g. zc * 2^e past int32 for extreme scale ratios) -> None."""
    m1, s1, m2, s2, mo, so = params
    codes = lut_index(dt)
    p1, p2 = _input_plan(codes, za, m1, s1), _input_plan(codes, zb, m2, s2)
    if p1 is None or p2 is None or mo <= 0:
        return None
    # k1 + k2 is folded into the 64-bit rounding constant of the output multiply
    r1 = p1["r"]
    kk = p1["k"] + p2["k"]
    a = codes[:, None]
    b = codes[None, :]
    ta = a * p1["ml"] + r1 + np.where(a < za, p1["dc"], 0)
    tb = b * p2["ml"] + p2["r"] + np.where(b < zb, p2["dc"], 0)
    ua, ub = a * p1["mh"] + (ta >> p1["n"]), b * p2["mh"] + (tb >> p2["n"])
    s = ua + ub
    big = 1 << (max(so, 0) + 1)
    d = s * big
    nudge = kk * big * mo + (1 << 31)
    w = (d * mo + nudge) >> 32
    e = max(-so, 0)
    c = ((1 << (e - 1)) + zc * (1 << e)) if e else zc
    t = (w + (w >> 31) + c) if e else w + c
    y = np.clip(t >> e, lo, hi)
    if not all(_fits32(x) for x in (ta, tb, a * p1["mh"], b * p2["mh"], ua, ub, s, d, w, t)) \
            or abs(nudge) >= 1 << 62:
        return None
    ref = add_all_pairs(dt, za, zb, zc, params, lo, hi)[1]
    if not np.array_equal(y, ref):
        return None
    plan = {"mh1": p1["mh"], "ml1": p1["ml"], "r1": r1, "n1": p1["n"], "dc1": p1["dc"], "z1": int(za),
            "mh2": p2["mh"], "ml2": p2["ml"], "r2": p2["r"], "n2": p2["n"], "dc2": p2["dc"], "z2": int(zb),
            "big": big, "mo": mo, "nh": nudge >> 31, "nl": nudge & ((1 << 31) - 1), "e": e, "c": c, "lo": lo, "hi": hi,
            "mmr": False}
    # One rounding multiply (SMMULR on Arm) instead of a 64-bit multiply-add: the constant
    # parts (k1 + k2) * big are added to the scaled sum, so the output multiply's nudge
    # is just 2^31.
    d_k = (s + kk) * big
    w_k = (d_k * mo + (1 << 31)) >> 32
    t_k = (w_k + (w_k >> 31) + c) if e else w_k + c
    if all(_fits32(x) for x in (s * big, kk * big, d_k, w_k, t_k)) and \
            np.array_equal(np.clip(t_k >> e, lo, hi), ref):
        plan.update(mmr=True, kkb=kk * big)
    return plan


@register("com.microsoft.QLinearAdd", "com.microsoft.QLinearMul")
class QLinearBinary(Op):
    inplace = True
    fuses_act = True

    def check(self, node, ins):
        _binary_params(node, ins)
        requant_mode(node)
        if len(node.outputs) != 1:
            raise shape_error(node, f"has {len(node.outputs)} outputs; expected 1")

    def infer(self, node, ins):
        shape = broadcast_shape(node, ins[0].shape, ins[3].shape)
        _strides(node, ins[0].shape, ins[3].shape)
        return [(shape, ins[0].dtype)]

    def reference(self, node, ins, a, sa_, za_, b, *rest):
        dt, (sa, za), (sb, zb), (sc, zc) = _binary_params(node, ins)
        lo, hi = out_range(node, sc, zc, dt)
        a64, b64 = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
        add = node.op_type.endswith("Add")
        if requant_mode(node) == "fixed":
            if add:
                m1, s1, m2, s2, mo, so = add_fixed_params(sa, sb, sc)
                v1 = quant.requantize_fixed((a64 - za) * (1 << 20), m1, s1)
                v2 = quant.requantize_fixed((b64 - zb) * (1 << 20), m2, s2)
                y = quant.requantize_fixed(v1 + v2, mo, so) + zc
            else:
                m, s = quant.quantize_multiplier(float(sa) * float(sb) / float(sc))
                y = quant.requantize_fixed((a64 - za) * (b64 - zb), m, s) + zc
        elif add:
            if _a_is_inner_scalar(node, ins[0].shape, ins[3].shape):
                a64, b64, (sa, za), (sb, zb) = b64, a64, (sb, zb), (sa, za)
            ra, rb, fixed = add_float_params(sa, za, sb, zb, sc, zc)
            r = fma32(a64.astype(F32), ra, fma32(b64.astype(F32), rb, fixed))
            y = np.rint(np.clip(r, F32(lo), F32(hi)))
        else:
            ratio = F32(F32(sa * sb) / F32(sc))
            p = ((a64 - za) * (b64 - zb)).astype(F32) * ratio
            p = np.clip(p.astype(F32), F32(lo - zc), F32(hi - zc))
            y = np.rint((p + F32(zc)).astype(F32))
        return [quant.saturate(np.asarray(y, np.int64), dt, lo, hi)]

    def macs(self, node, ins, outs):
        return outs[0].size

    def emit(self, node, ins, outs, k):
        dt, (sa, za), (sb, zb), (sc, zc) = _binary_params(node, ins)
        lo, hi = out_range(node, sc, zc, dt)
        a, b, y = ins[0], ins[3], outs[0]
        mode = requant_mode(node)
        add = node.op_type.endswith("Add")
        if mode == "float" and add and _a_is_inner_scalar(node, a.shape, b.shape):
            a, b, (sa, za), (sb, zb) = b, a, (sb, zb), (sa, za)
        if mode == "fixed" and add and isa.emit("qadd", self, node, ins, outs, k, dict(
                dt=dt, a=a, b=b, y=y, za=za, zb=zb, zc=zc, params=add_fixed_params(sa, sb, sc), lo=lo, hi=hi)):
            return
        if mode == "fixed" and add and tuple(a.shape) == tuple(b.shape) == tuple(y.shape):
            plan = add_fast_plan(dt, za, zb, zc, add_fixed_params(sa, sb, sc), lo, hi)
            if plan is not None:
                key = "_".join(str(plan[k_]) for k_ in sorted(plan))
                tag = hashlib.sha1(key.encode()).hexdigest()[:10]
                fn = k.kernel("qadd_s8", {"name": f"{CODES[dt]}_{tag}", "xt": CTYPES[dt], **plan})
                k.line(f"{fn}({k.ptr(y)}, {k.ptr(a)}, {k.ptr(b)}, {y.size});")
                return
        shape, sta, stb = _strides(node, a.shape, b.shape)
        fparams = None
        if mode == "fixed" and add:
            iparams = [za, zb, *add_fixed_params(sa, sb, sc), zc, lo, hi]
        elif mode == "fixed":
            m, s = quant.quantize_multiplier(float(sa) * float(sb) / float(sc))
            iparams = [za, zb, m, s, zc, lo, hi]
        elif add:
            iparams = [lo, hi]
            fparams = np.array(add_float_params(sa, za, sb, zb, sc, zc), F32)
        else:
            iparams = [za, zb, zc, lo, hi]
            fparams = np.array([F32(F32(sa * sb) / F32(sc))], F32)
        op = "add" if add else "mul"
        if mode == "fixed":
            k.kernel("requant_fixed")
        elif not add:
            k.kernel("fp_exact")
        fn = k.kernel("qbinary_s8", {"name": f"{op}_{mode}_{CODES[dt]}", "op": op, "mode": mode,
                                     "xt": CTYPES[dt]})
        dims = k.const(np.array(shape, np.int32), "bcast_shape")
        s_a = k.const(np.array(sta, np.int32), "bcast_stride")
        s_b = k.const(np.array(stb, np.int32), "bcast_stride")
        ip = k.const(np.array(iparams, np.int32), f"{node.name}_q")
        fp = k.const(fparams, f"{node.name}_f") if fparams is not None else "0"
        k.line(f"{fn}({k.ptr(y)}, {k.ptr(a)}, {k.ptr(b)}, {dims}, {s_a}, {s_b}, {ip}, {fp});")


# --------------------------------------------------------------------------- lookup tables

def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _hard_sigmoid(x, alpha, beta):
    return np.maximum(F32(0), np.minimum(F32(1), (F32(alpha) * x + F32(beta)).astype(F32)))


# Unary functions of cuvil.QLut's `fn` attribute: name -> (attribute defaults,
# f(x float32 array, attrs) -> values; float32 arithmetic where the float op
# is float32 arithmetic, else float64 rounded once).
LUT_FUNCTIONS = {
    "identity": ({}, lambda x, a: x),
    "relu": ({}, lambda x, a: np.maximum(x, F32(0))),
    "relu6": ({}, lambda x, a: np.minimum(np.maximum(x, F32(0)), F32(6))),
    "clip": ({"lo": -np.inf, "hi": np.inf},
             lambda x, a: np.minimum(np.maximum(x, F32(a["lo"])), F32(a["hi"]))),
    "leaky_relu": ({"alpha": 0.01}, lambda x, a: np.where(x >= 0, x, (F32(a["alpha"]) * x).astype(F32))),
    "sigmoid": ({}, lambda x, a: 1.0 / (1.0 + np.exp(-x.astype(np.float64)))),
    "tanh": ({}, lambda x, a: np.tanh(x.astype(np.float64))),
    "hardsigmoid": ({"alpha": 0.2, "beta": 0.5}, lambda x, a: _hard_sigmoid(x, a["alpha"], a["beta"])),
    "hardswish": ({}, lambda x, a: (x * _hard_sigmoid(x, 1.0 / 6.0, 0.5)).astype(F32)),
    "gelu": ({"approximate": "none"}, lambda x, a: _gelu(x, a["approximate"])),
    "erf": ({}, lambda x, a: _erf(x.astype(np.float64))),
    "exp": ({}, lambda x, a: np.exp(x.astype(np.float64))),
    "elu": ({"alpha": 1.0}, lambda x, a: np.where(x > 0, x, F32(a["alpha"]) * np.expm1(x.astype(np.float64)))),
    "selu": ({"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
             lambda x, a: F32(a["gamma"]) * np.where(x > 0, x, F32(a["alpha"]) * np.expm1(x.astype(np.float64)))),
    "softplus": ({}, lambda x, a: np.logaddexp(0.0, x.astype(np.float64))),
    "softsign": ({}, lambda x, a: x.astype(np.float64) / (1.0 + np.abs(x.astype(np.float64)))),
    "silu": ({}, lambda x, a: x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64)))),
    "abs": ({}, lambda x, a: np.abs(x)),
    "neg": ({}, lambda x, a: -x),
    "sqrt": ({}, lambda x, a: np.sqrt(x.astype(np.float64))),
    "log": ({}, lambda x, a: np.log(x.astype(np.float64))),
    "sin": ({}, lambda x, a: np.sin(x.astype(np.float64))),
    "cos": ({}, lambda x, a: np.cos(x.astype(np.float64))),
}


def _gelu(x, approximate):
    v = x.astype(np.float64)
    if approximate == "tanh":
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    return 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)))


def build_lut(fn, xs, xzp, ys, yzp, dtype: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """table[i] for the code whose byte is i: sat(rint(f(dequant(q)) / ys) + yzp)
    within [lo, hi]."""
    q = lut_index(dtype)
    x = (F32(xs) * (q - int(xzp)).astype(F32)).astype(F32)
    with np.errstate(all="ignore"):
        fx = np.asarray(fn(x), np.float64).astype(F32)
        v = (fx / F32(ys)).astype(F32)
    qmin, qmax = quant.QRANGE[dtype]
    v = np.where(np.isnan(v), F32(qmin - yzp), v)
    v = np.clip(v, F32(qmin - yzp), F32(qmax - yzp))   # infinities saturate
    y = np.rint(v).astype(np.int64) + int(yzp)
    return quant.saturate(y, dtype, lo, hi)


def _lut_fn(node):
    """The float function of a lookup-table node (attributes applied)."""
    t = node.op_type
    if t == "com.microsoft.QLinearSigmoid":
        name, attrs = "sigmoid", {}
    elif t == "com.microsoft.QLinearLeakyRelu":
        name, attrs = "leaky_relu", {"alpha": float(node.attr("alpha", 0.01))}
    else:
        name = node.attr("fn")
        if name is None:
            raise shape_error(node, "attribute 'fn' (the unary function) is required")
        name = str(name).lower()
        if name not in LUT_FUNCTIONS:
            raise unsupported(node, f"fn '{name}' is not a known unary function "
                                    f"(one of {', '.join(sorted(LUT_FUNCTIONS))})")
        defaults = LUT_FUNCTIONS[name][0]
        attrs = {key: node.attr(key, dv) for key, dv in defaults.items()}
        for key, v in attrs.items():
            if key != "approximate":
                attrs[key] = float(v)
        if name == "gelu" and attrs["approximate"] not in ("none", "tanh"):
            raise unsupported(node, f"gelu approximate='{attrs['approximate']}' (none or tanh)")
        if name == "clip" and attrs["lo"] > attrs["hi"]:
            raise unsupported(node, f"clip bounds lo={attrs['lo']} > hi={attrs['hi']}")
    f = LUT_FUNCTIONS[name][1]
    return name, (lambda x: f(x, attrs))


def unary_qparams(node, ins, x: str = "X", y: str = "Y") -> tuple[str, np.float32, int, np.float32, int]:
    """(dtype, x scale, x zero point, y scale, y zero point) of a quantized
    one-input op laid out X, x_scale, x_zero_point, y_scale[, y_zero_point]
    (LUT ops, average pooling, Softmax); x and y name them in errors."""
    if len(ins) < 4:
        raise shape_error(node, f"has {len(ins)} inputs; expected X, {x}_scale, {x}_zero_point, {y}_scale"
                                f"[, {y}_zero_point]")
    dt = int8_input(node, ins[0], "X")
    xs, xz = qpair(node, ins, 1, 2, x, dt)
    ys, yz = qpair(node, ins, 3, 4, y, dt)
    return dt, xs, xz, ys, yz


def lut_table(node, ins) -> tuple[str, np.ndarray]:
    dt, xs, xz, ys, yz = unary_qparams(node, ins)
    name, fn = _lut_fn(node)
    lo, hi = out_range(node, ys, yz, dt)
    return name, build_lut(fn, xs, xz, ys, yz, dt, lo, hi)


@register("com.microsoft.QLinearSigmoid", "com.microsoft.QLinearLeakyRelu", "cuvil.QLut")
class QLut(Op):
    inplace = True
    fuses_act = True

    def check(self, node, ins):
        lut_table(node, ins)

    def infer(self, node, ins):
        return [(ins[0].shape, ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        _, table = lut_table(node, ins)
        return [lut_apply(table, x).astype(ins[0].dtype)]

    def macs(self, node, ins, outs):
        return 0

    def emit(self, node, ins, outs, k):
        name, table = lut_table(node, ins)
        emit_lut(k, outs[0], ins[0], table, f"{node.name}_{name}_lut")
