"""Integer matrix products: QLinearMatMul (ONNX), com.microsoft.QGemm (the
int8 fully-connected layer with int32 bias) and MatMulInteger (int32 out).

Numerics (docs: INT8 conventions): acc = C + sum_p (A - a_zp) * (B - b_zp) in
int32, then requantization per output column (fixed point or float32, the
graph's `_requant` mode), + y_zp, fused clamp, saturation. The `Requant`
record and the helpers here are shared with ops/qconv.py.

All of them run on one kernel, `qgemm_s8`, which addresses A as [i][p] and B
transposed as [j][p] through strides computed here, so the inner loop runs
over contiguous K when B is a constant: a constant B is stored [N][K] at
compile time with its zero point already subtracted (int8 when the result
fits, else int16), and a_zp * column sum is folded into the bias; then the
inner loop is a plain sum of products. A run-time B keeps its layout and both
offsets are applied in the loop.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import limits, quant
from .. import isa
from .gemm import gemm_dims
from .base import Op, register, shape_error, unsupported
from .gemm import _batch_offsets, _c_strides, check_matmul_limits, matmul_dims

INT8_TYPES = ("int8", "uint8")
CODES = {"int8": "s8", "uint8": "u8", "int16": "s16", "int32": "s32"}
CTYPES = {"int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "int32": "int32_t"}

# Order of the integers at the head of qgemm_s8's `geo` array; the batch
# entries (5 element offsets each: a, b, c, y, requant arrays) follow.
QGEMM_FIELDS = ("nb", "m", "n", "kk", "sai", "sak", "sbj", "sbk", "sci", "scj",
                "aoff", "boff", "yzp", "lo", "hi")


# --------------------------------------------------------------------------- shared

@dataclass
class Requant:
    """int32 accumulator -> output integer, per output channel (`mult`/`shift`
    or `scale` have one entry per channel). mode "none": int32 output as is.
    lo/hi: the output integer's clamp (fused activation within the dtype)."""

    mode: str
    dtype: str
    zp: int = 0
    lo: int = quant.INT32_MIN
    hi: int = quant.INT32_MAX
    mult: np.ndarray | None = None
    shift: np.ndarray | None = None
    scale: np.ndarray | None = None

    def apply(self, acc: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """Reference: requantize acc (int64); the per-channel arrays are
        reshaped to `shape` to broadcast against it."""
        acc = np.asarray(acc, np.int64)
        if self.mode == "none":
            return acc.astype(np.int32)
        per = self.mult if self.mode == "fixed" else self.scale

        def along(v):
            return v.reshape(shape) if per.size > 1 else v.reshape(())

        if self.mode == "fixed":
            v = quant.requantize_fixed(acc, along(self.mult), along(self.shift))
        else:
            v = quant.requantize_float(acc, along(self.scale))
        return quant.saturate(v + self.zp, self.dtype, self.lo, self.hi)

    def c_args(self, k, name: str) -> str:
        """The kernel's trailing requantization arguments (const arrays)."""
        if self.mode == "fixed":
            return f", {k.const(self.mult, f'{name}_mult')}, {k.const(self.shift, f'{name}_shift')}"
        if self.mode == "float":
            return f", {k.const(self.scale, f'{name}_scale')}"
        return ""

    def geo(self) -> list[int]:
        """yzp, lo, hi as the kernels take them: bounds before adding yzp."""
        if self.mode == "none":
            return [0, 0, 0]
        return [self.zp, self.lo - self.zp, self.hi - self.zp]


NO_REQUANT = Requant("none", "int32")


def requant_mode(node) -> str:
    mode = node.attrs.get("_requant", "fixed")
    if mode not in ("fixed", "float"):
        raise unsupported(node, f"_requant={mode!r}: expected 'fixed' or 'float'")
    return mode


def make_requant(node, in_scale, w_scale, out_scale, out_zp: int, dtype: str, channels: int,
                 alpha: float | None = None, fc: bool = False) -> Requant:
    """Per-channel requantization of acc at scale in_scale * w_scale[ch]
    (times alpha for QGemm) to an output at out_scale / out_zp. fc: a fully
    connected layer (constant weights), for TFLM's per-tensor multiplier."""
    mode = requant_mode(node)
    ws = np.broadcast_to(np.asarray(w_scale, np.float32).reshape(-1), (channels,))
    if mode == "fixed":
        if fc and np.asarray(w_scale).size == 1:
            # TFLM's per-tensor FULLY_CONNECTED (GetQuantizedConvolutionMultipler)
            # forms input_scale * filter_scale in float32, then goes to double
            prod = np.float64(np.float32(in_scale) * np.float32(ws[0]))
            real = np.full(channels, prod) / np.float64(out_scale)
        else:
            # conv (any) and per-channel layers: doubles throughout, as TFLM's
            # PopulateConvolutionQuantizationParams
            real = np.float64(in_scale) * ws.astype(np.float64) / np.float64(out_scale)
        if alpha is not None and float(alpha) != 1.0:
            real = np.float64(np.float32(alpha)) * real
        mult, shift = quant.quantize_multipliers(real)
        rq = Requant(mode, dtype, int(out_zp), mult=mult, shift=shift)
    else:
        if alpha is None:   # QLinearConv / QLinearMatMul: (x * w) / y in float32
            scale = quant.float_multiplier(in_scale, ws, out_scale)
        else:               # QGemm: (alpha * a * b) / y in float32
            scale = ((np.float32(alpha) * np.float32(in_scale)) * ws).astype(np.float32) / np.float32(out_scale)
        rq = Requant(mode, dtype, int(out_zp), scale=np.asarray(scale, np.float32).reshape(channels))
    rq.lo, rq.hi = quant.act_range(node.act, float(out_scale), int(out_zp), dtype)
    return rq


def scalar_qparams(node, scale_t, zp_t, what: str, dtype: str | None) -> tuple[np.float32, int]:
    """A per-tensor (scale, zero point) pair, validated; zp absent = 0."""
    s, z = quant.qparams(node, scale_t, zp_t, what)
    if s.size != 1:
        raise unsupported(node, f"{what} scale '{scale_t.name}' has {s.size} values; it must be per-tensor (one value)")
    if z.size != 1:
        raise unsupported(node, f"{what} zero point '{zp_t.name}' has {z.size} values; it must be one value")
    zero_point_dtype(node, zp_t, what, dtype)
    return np.float32(s[0]), int(z[0])


def zero_point_dtype(node, zp_t, what: str, dtype: str | None) -> None:
    if zp_t is not None and dtype is not None and zp_t.dtype != dtype:
        raise unsupported(node, f"{what} zero point '{zp_t.name}' is {zp_t.dtype}; its tensor is {dtype}")


def zero_points(node, zp_t, what: str, channels: int, dtype: str | None) -> np.ndarray:
    """Zero points of an integer-only op (no scale): scalar or one per
    channel; int64 [channels]."""
    if zp_t is None:
        return np.zeros(channels, np.int64)
    if not zp_t.is_const:
        raise unsupported(node, f"{what} zero point '{zp_t.name}' must be a constant")
    zero_point_dtype(node, zp_t, what, dtype)
    z = np.asarray(zp_t.data).astype(np.int64).reshape(-1)
    if z.size not in (1, channels):
        raise unsupported(node, f"{what} zero point '{zp_t.name}' has {z.size} values; expected 1 or {channels}")
    return np.broadcast_to(z, (channels,)).copy()


def weight_qparams(node, scale_t, zp_t, w_t, what: str, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(scale float32 [channels], zero point int64 [channels]) of constant
    weights, per-tensor or per-channel. Per-channel int8 weights must be
    symmetric (every zero point 0), as TFLM and onnxruntime assume."""
    if scale_t is not None and scale_t.size not in (1, channels):
        raise unsupported(node, f"{what}: per-channel scale '{scale_t.name}' has {scale_t.size} values, "
                                f"the weights have {channels} channels")
    s, z = quant.qparams(node, scale_t, zp_t, what, channels=channels)
    zero_point_dtype(node, zp_t, what, w_t.dtype)
    if z.size > 1 and np.any(z != z[0]):
        raise unsupported(node, f"mixed zero points on per-channel weights: {what} zero point '{zp_t.name}' "
                                f"is {z[:8].tolist()}; they must all be equal (0 for int8)")
    if z.size > 1 and w_t.dtype == "int8" and np.any(z != 0):
        raise unsupported(node, f"non-zero zero points on per-channel int8 weights: {what} zero point "
                                f"'{zp_t.name}' is {z[:8].tolist()}; per-channel int8 weights must be symmetric")
    return (np.broadcast_to(s, (channels,)).astype(np.float32),
            np.broadcast_to(z, (channels,)).astype(np.int64))


def offset_weights(w: np.ndarray, zp: np.ndarray, axis: int | None) -> np.ndarray:
    """w - zp (zp per channel along axis; axis None: zp broadcasts as is),
    stored in int8 when every value fits, else int16 (uint8 weights,
    non-zero zero points)."""
    zp = np.asarray(zp, np.int64)
    if axis is not None:
        shape = [1] * w.ndim
        shape[axis] = -1
        zp = zp.reshape(shape)
    q = np.asarray(w, np.int64) - zp
    return q.astype(np.int8 if q.size == 0 or (q.min() >= -128 and q.max() <= 127) else np.int16)


def offset_range(dtype: str, off: int) -> int:
    """max |v + off| over the values v of dtype."""
    lo, hi = quant.QRANGE[dtype]
    return max(abs(lo + off), abs(hi + off))


def check_acc(node, bound: int, what: str = "") -> None:
    if bound > quant.INT32_MAX:
        raise unsupported(node, f"the int32 accumulator could overflow ({what}bound {bound}); "
                                f"split the layer or reduce its inner dimension")


def int32_array(node, v: np.ndarray, what: str) -> np.ndarray:
    v = np.asarray(v, np.int64)
    if v.size and (v.min() < quant.INT32_MIN or v.max() > quant.INT32_MAX):
        raise unsupported(node, f"{what} does not fit int32")
    return v.astype(np.int32)


def check_index(node, *values) -> None:
    for v in values:
        arr = np.asarray(v, np.int64)
        if arr.size and (arr.max() >= 2 ** 31 or arr.min() < -(2 ** 31)):
            raise shape_error(node, "tensor too large for 32-bit indexing")


def _all_const(ins) -> bool:
    return all(t is None or t.is_const for t in ins)


def _inp(ins, i):
    return ins[i] if i < len(ins) else None


# --------------------------------------------------------------------------- kernel

def emit_qgemm(k, node, y: str, a: str, b: str, c: str | None, batches, m: int, n: int, kk: int,
               sa: tuple[int, int], sb: tuple[int, int], sc: tuple[int, int], aoff: int, boff: int,
               rq: Requant, types: tuple[str, str, str], off: bool) -> None:
    """One call of qgemm_s8. y, a, b, c: C pointer expressions (c None: no
    bias); batches: per batch entry (a, b, c, y, q) element offsets, q into
    the requantization arrays; sa = (i, p)
    strides of A, sb = (j, p) strides of B (addressed transposed), sc = (i, j)
    of c; types: dtypes of A, B and y; off: apply aoff/boff in the loop."""
    if isa.emit("qgemm", None, node, None, None, k, dict(
            y=y, a=a, b=b, c=c, batches=batches, m=m, n=n, kk=kk, sa=sa, sb=sb, sc=sc, aoff=aoff, boff=boff,
            rq=rq, types=types, off=off)):
        return
    if c is None:
        c, sc = k.const(np.zeros(1, np.int32), "zero_i32"), (0, 0)
    unit = sa[1] == 1 and sb[1] == 1
    batches = [list(map(int, t)) for t in batches]
    geo = np.array([len(batches), m, n, kk, sa[0], sa[1], sb[0], sb[1], sc[0], sc[1], aoff, boff]
                   + rq.geo() + [v for t in batches for v in t], np.int64)
    check_index(node, geo)
    at, bt, yt = types
    unused = [f for f, cond in (("sak", unit), ("sbk", unit), ("aoff", not off), ("boff", not off),
                                ("yzp", rq.mode == "none"), ("lo", rq.mode == "none"),
                                ("hi", rq.mode == "none")) if cond]
    name = f"{CODES[at]}{CODES[bt]}{CODES[yt]}_{rq.mode}" + ("_off" if off else "") + ("" if unit else "_strided")
    if rq.mode != "none":
        k.kernel(f"requant_{rq.mode}")
    fn = k.kernel("qgemm_s8", {"name": name, "at": CTYPES[at], "bt": CTYPES[bt], "yt": CTYPES[yt],
                               "rq": rq.mode, "off": off, "unit": unit, "fields": QGEMM_FIELDS,
                               "unused": unused})
    g = k.const(geo.astype(np.int32), "qgemm_geo")
    k.line(f"{fn}({y}, {a}, {b}, {c}, {g}{rq.c_args(k, node.name)});")


# --------------------------------------------------------------------------- QGemm

@dataclass
class _Gemm:
    m: int
    n: int
    kk: int
    ta: int
    tb: int
    a_zp: int
    b_zp: np.ndarray   # int64 [n]
    rq: Requant


def _qgemm_dims(node, ins):
    return gemm_dims(node, ins[0], ins[3], "QGemm")


@register("com.microsoft.QGemm")
class QGemm(Op):
    """Y = requant(alpha * (A - a_zp) x (B - b_zp) + C) — onnxruntime's
    contrib op; only its requantized form (y_scale and y_zero_point given)."""

    fuses_act = True

    def check(self, node, ins):
        if len(ins) < 6 or ins[0] is None or ins[3] is None:
            raise shape_error(node, "needs inputs A, a_scale, a_zero_point, B, b_scale, b_zero_point")
        if _all_const(ins):
            return
        for i, what in ((0, "A"), (3, "B")):
            if ins[i].dtype not in INT8_TYPES:
                raise unsupported(node, f"{what} '{ins[i].name}' is {ins[i].dtype}; expected int8 or uint8")
        if _inp(ins, 7) is None or _inp(ins, 8) is None:
            raise unsupported(node, "without y_scale and y_zero_point QGemm produces float output; only the "
                                    "requantized (int8/uint8 output) form is supported")
        c = _inp(ins, 6)
        if c is not None and c.dtype != "int32":
            raise unsupported(node, f"bias C '{c.name}' is {c.dtype}; expected int32")
        self._params(node, ins)

    def _params(self, node, ins) -> _Gemm:
        m, n, kk, ta, tb = _qgemm_dims(node, ins)
        a, b = ins[0], ins[3]
        a_s, a_zp = scalar_qparams(node, ins[1], ins[2], "A", a.dtype)
        b_s, b_zp = quant.qparams(node, ins[4], ins[5], "B", channels=n)
        zero_point_dtype(node, ins[5], "B", b.dtype)
        if b_zp.size > 1 and b.dtype == "int8" and np.any(b_zp != 0):
            raise unsupported(node, f"non-zero zero points on per-column int8 B: B zero point '{ins[5].name}' is "
                                    f"{b_zp[:8].tolist()}; per-column int8 B must be symmetric")
        if b_zp.size not in (1, n):
            raise unsupported(node, f"B zero point '{ins[5].name}' has {b_zp.size} values; expected 1 or {n}")
        b_zp = np.broadcast_to(b_zp, (n,)).astype(np.int64)
        if not b.is_const and np.any(b_zp != b_zp[0]):
            raise unsupported(node, f"per-column zero points '{ins[5].name}' on a run-time B '{b.name}'")
        ydt = ins[8].dtype
        if ydt not in INT8_TYPES:
            raise unsupported(node, f"y_zero_point '{ins[8].name}' is {ydt}; expected int8 or uint8")
        y_s, y_zp = scalar_qparams(node, ins[7], ins[8], "Y", ydt)
        alpha = float(node.attr("alpha", 1.0))
        if not np.isfinite(alpha) or alpha <= 0:
            raise unsupported(node, f"alpha={alpha}: must be finite and > 0")
        rq = make_requant(node, a_s, b_s, y_s, y_zp, ydt, n, alpha=alpha, fc=True)
        c = _inp(ins, 6)
        if c is not None:
            _c_strides(node, c.shape, m, n)
        return _Gemm(m, n, kk, ta, tb, a_zp, b_zp, rq)

    def infer(self, node, ins):
        m, n, _, _, _ = _qgemm_dims(node, ins)
        c = _inp(ins, 6)
        if c is not None:
            _c_strides(node, c.shape, m, n)
        y = _inp(ins, 8)
        return [((m, n), y.dtype if y is not None else "float32")]

    def reference(self, node, ins, a, a_s, a_z, b, b_s, b_z, c=None, y_s=None, y_z=None):
        p = self._params(node, ins)
        av = np.asarray(a, np.int64) - p.a_zp
        bv = np.asarray(b, np.int64)
        av = av.T if p.ta else av
        bv = bv.T if p.tb else bv
        acc = av @ (bv - p.b_zp[None, :])
        if c is not None:
            acc = acc + np.asarray(c, np.int64)
        return [p.rq.apply(acc, (1, -1))]

    def macs(self, node, ins, outs):
        m, n, kk, _, _ = _qgemm_dims(node, ins)
        return m * n * kk

    def emit(self, node, ins, outs, k):
        a, b, c = ins[0], ins[3], _inp(ins, 6)
        p = self._params(node, ins)
        m, n, kk = p.m, p.n, p.kk
        if outs[0].size == 0:
            return
        sa = (1, m) if p.ta else (kk, 1)
        aoff = -p.a_zp
        amax = offset_range(a.dtype, 0)
        sc = _c_strides(node, c.shape, m, n) if c is not None else (0, 0)
        if b.is_const:
            bq = np.asarray(b.data)
            bq = bq if p.tb else bq.T                      # [n][kk]
            bq = np.ascontiguousarray(offset_weights(bq, p.b_zp, 0))
            b_ptr, sb, boff, bt = k.const(bq, f"{b.name}_nk"), (kk, 1), 0, bq.dtype.name
            bmax = int(np.abs(bq.astype(np.int64)).max()) if bq.size else 0
            if c is None or c.is_const:
                # fold a_zp: sum_p (A - a_zp) B = sum_p A B - a_zp * colsum(B)
                rows = m if (c is not None and sc[0]) else 1
                cv = np.zeros((1, n), np.int64) if c is None else np.broadcast_to(
                    np.asarray(c.data, np.int64).reshape(((1, 1) + tuple(c.shape))[-2:]), (rows, n))
                cf = int32_array(node, cv + aoff * bq.astype(np.int64).sum(axis=1)[None, :],
                                 "bias with the input zero point folded in")
                check_acc(node, int(np.abs(cf.astype(np.int64)).max()) + kk * amax * bmax)
                emit_qgemm(k, node, k.ptr(outs[0]), k.ptr(a), b_ptr, k.const(cf, f"{node.name}_bias"),
                           [(0, 0, 0, 0, 0)], m, n, kk, sa, sb, (n if rows > 1 else 0, 1), 0, 0, p.rq,
                           (a.dtype, bt, outs[0].dtype), off=False)
                return
            off = True
        else:
            sb = (kk, 1) if p.tb else (1, n)
            b_ptr, boff, bt = k.ptr(b), -int(p.b_zp[0]), b.dtype
            bmax = offset_range(b.dtype, boff)
            off = True
        cmax = quant.INT32_MAX if c is not None and not c.is_const else (
            int(np.abs(np.asarray(c.data, np.int64)).max()) if c is not None and c.size else 0)
        if c is None or c.is_const:
            check_acc(node, cmax + kk * offset_range(a.dtype, aoff) * bmax)
        emit_qgemm(k, node, k.ptr(outs[0]), k.ptr(a), b_ptr, k.ptr(c) if c is not None else None,
                   [(0, 0, 0, 0, 0)], m, n, kk, sa, sb, sc, aoff, boff, p.rq, (a.dtype, bt, outs[0].dtype), off)


# --------------------------------------------------------------------------- MatMul

@dataclass
class _MatMul:
    batch: tuple[int, ...]
    m: int
    n: int
    kk: int
    out: tuple[int, ...]
    a_zp: int
    b_zp: np.ndarray   # int64 [rows, n]: rows 1, or one per matrix of B (its batch dims flattened)
    rq: Requant        # per-channel arrays: [q_rows * n]
    q_rows: int


def _b_param(node, t, b_shape, what: str) -> np.ndarray:
    """A B-side scale or zero point as [rows, n]: rows 1 for a scalar or a
    per-column [n] tensor, else one row per matrix of B (onnxruntime's form:
    B's shape with the second-to-last dimension 1)."""
    n = b_shape[-1] if len(b_shape) >= 2 else 1
    bb = tuple(b_shape[:-2]) if len(b_shape) >= 2 else ()
    v = np.asarray(t.data)
    if v.size == 1:
        return np.broadcast_to(v.reshape(1, 1), (1, n))
    if v.shape == (n,):
        return v.reshape(1, n)
    if len(b_shape) >= 2 and v.shape == bb + (1, n):
        return v.reshape(-1, n)
    raise unsupported(node, f"{what} '{t.name}' {list(v.shape)} must be a scalar, [{n}] (per column)"
                            + (f" or {list(bb + (1, n))} (per column of each matrix)" if bb else ""))


class _QMatMulBase(Op):
    """QLinearMatMul and MatMulInteger: numpy matmul semantics (1-D operands,
    broadcast batch dimensions) on offset integers."""

    A, B = 0, 1

    def check(self, node, ins):
        a, b = _inp(ins, self.A), _inp(ins, self.B)
        if a is None or b is None:
            raise shape_error(node, "missing input A or B")
        if _all_const(ins):
            return
        for t, what in ((a, "A"), (b, "B")):
            if t.dtype not in INT8_TYPES:
                raise unsupported(node, f"{what} '{t.name}' is {t.dtype}; expected int8 or uint8")
        self._params(node, ins)

    def _params(self, node, ins) -> _MatMul:
        raise NotImplementedError

    def _b_zero_points(self, node, zp_t, b, what: str) -> np.ndarray:
        n = b.shape[-1] if len(b.shape) >= 2 else 1
        if zp_t is None:
            return np.zeros((1, n), np.int64)
        if not zp_t.is_const:
            raise unsupported(node, f"{what} '{zp_t.name}' must be a constant")
        zero_point_dtype(node, zp_t, what, b.dtype)
        z = _b_param(node, zp_t, b.shape, what).astype(np.int64)
        if not b.is_const and np.any(z != z.reshape(-1)[0]):
            raise unsupported(node, f"per-column {what} '{zp_t.name}' on a run-time b '{b.name}'; "
                                    f"only a per-tensor zero point is supported there")
        return z

    def infer(self, node, ins):
        dtype = self._out_dtype(node, ins)
        return [(check_matmul_limits(node, ins[self.A].shape, ins[self.B].shape, dtype), dtype)]

    def _out_dtype(self, node, ins) -> str:
        return "int32"

    def reference(self, node, ins, *arrays):
        p = self._params(node, ins)
        a, b = np.asarray(arrays[self.A], np.int64), np.asarray(arrays[self.B], np.int64)
        a2 = a[None] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        bb = b2.shape[:-2]
        acc = np.matmul(a2 - p.a_zp, b2 - p.b_zp.reshape((bb if p.b_zp.shape[0] > 1 else ()) + (1, p.n)))
        shape = (bb if p.q_rows > 1 else ()) + (1, p.n)
        return [p.rq.apply(acc, shape).reshape(p.out)]

    def macs(self, node, ins, outs):
        batch, m, n, kk, _ = matmul_dims(node, ins[self.A].shape, ins[self.B].shape)
        return limits.elements(batch) * m * n * kk

    def emit(self, node, ins, outs, k):
        a, b = ins[self.A], ins[self.B]
        p = self._params(node, ins)
        batch, m, n, kk = p.batch, p.m, p.n, p.kk
        if outs[0].size == 0:
            return
        a_batch = tuple(a.shape[:-2]) if len(a.shape) >= 2 else ()
        b_batch = tuple(b.shape[:-2]) if len(b.shape) >= 2 else ()
        nbb = int(np.prod(b_batch, dtype=np.int64))
        aoff = -p.a_zp
        if b.is_const:
            bv = np.asarray(b.data).reshape(b_batch + (kk, n))
            zp = p.b_zp.reshape((b_batch if p.b_zp.shape[0] > 1 else ()) + (1, n))
            bq = np.ascontiguousarray(np.swapaxes(offset_weights(bv, zp, None), -1, -2))   # [.., n, kk]
            colsum = bq.astype(np.int64).sum(axis=-1).reshape(nbb, n)
            cf = int32_array(node, aoff * colsum, "input zero point x column sums")
            bmax = int(np.abs(bq.astype(np.int64)).max()) if bq.size else 0
            check_acc(node, int(np.abs(cf.astype(np.int64)).max()) + kk * offset_range(a.dtype, 0) * bmax)
            b_ptr, c_ptr, sb, sc, boff, off = (k.const(bq, f"{b.name}_nk"), k.const(cf, f"{node.name}_bias"),
                                               (kk, 1), (0, 1), 0, False)
            types = (a.dtype, bq.dtype.name, outs[0].dtype)
        else:
            boff = -int(p.b_zp.reshape(-1)[0])
            check_acc(node, kk * offset_range(a.dtype, aoff) * offset_range(b.dtype, boff))
            b_ptr, c_ptr, sb, sc, off = k.ptr(b), None, (1, n), (0, 0), True
            types = (a.dtype, b.dtype, outs[0].dtype)
        if nbb == 1 and a_batch == batch:
            # one B for every batch entry and A not broadcast: stack the rows
            m, offsets = m * int(np.prod(batch, dtype=np.int64)), [(0, 0, 0, 0, 0)]
        else:
            ao = _batch_offsets(a_batch, batch, m * kk)
            bo = _batch_offsets(b_batch, batch, kk * n)
            per_b = _batch_offsets(b_batch, batch, n)   # row of B's per-matrix arrays
            co = per_b if b.is_const else np.zeros_like(bo)
            qo = per_b if p.q_rows > 1 else np.zeros_like(bo)
            offsets = [(ao[t], bo[t], co[t], t * m * n, qo[t]) for t in range(len(ao))]
        emit_qgemm(k, node, k.ptr(outs[0]), k.ptr(a), b_ptr, c_ptr, offsets, m, n, kk, (kk, 1), sb, sc,
                   aoff, boff, p.rq, types, off)


@register("QLinearMatMul")
class QLinearMatMul(_QMatMulBase):
    """y = requant((a - a_zp) @ (b - b_zp)); b_scale and b_zero_point per
    tensor, per column ([N]) or per column of each matrix of b ([..., 1, N],
    as onnxruntime allows)."""

    A, B = 0, 3
    fuses_act = True

    def _out_dtype(self, node, ins):
        y = _inp(ins, 7)
        return y.dtype if y is not None else ins[0].dtype

    def _params(self, node, ins) -> _MatMul:
        if len(ins) < 7 or ins[1] is None or ins[4] is None or ins[6] is None:
            raise shape_error(node, "needs inputs a, a_scale, a_zero_point, b, b_scale, b_zero_point, "
                                    "y_scale, y_zero_point")
        a, b = ins[0], ins[3]
        batch, m, n, kk, out = matmul_dims(node, a.shape, b.shape)
        a_s, a_zp = scalar_qparams(node, ins[1], ins[2], "a", a.dtype)
        quant.qparams(node, ins[4], None, "b")          # finite, > 0, constant
        b_s = _b_param(node, ins[4], b.shape, "b scale").astype(np.float32)
        b_zp = self._b_zero_points(node, _inp(ins, 5), b, "b zero point")
        zpt = _inp(ins, 5)
        if zpt is not None and zpt.size > 1 and b.dtype == "int8" and np.any(b_zp != 0):
            raise unsupported(node, f"non-zero zero points on per-column int8 b: b zero point '{zpt.name}' is "
                                    f"{b_zp.reshape(-1)[:8].tolist()}; per-column int8 b must be symmetric")
        ydt = self._out_dtype(node, ins)
        if ydt not in INT8_TYPES:
            raise unsupported(node, f"output is {ydt}; expected int8 or uint8")
        y_s, y_zp = scalar_qparams(node, ins[6], _inp(ins, 7), "y", ydt)
        rq = make_requant(node, a_s, b_s.reshape(-1), y_s, y_zp, ydt, b_s.size, fc=b.is_const)
        return _MatMul(batch, m, n, kk, out, a_zp, b_zp, rq, b_s.shape[0])


@register("MatMulInteger")
class MatMulInteger(_QMatMulBase):
    """y (int32) = (a - a_zero_point) @ (b - b_zero_point); a_zero_point
    per tensor, b_zero_point per tensor, per column or per column of each
    matrix of b."""

    A, B = 0, 1

    def _params(self, node, ins) -> _MatMul:
        a, b = ins[0], ins[1]
        batch, m, n, kk, out = matmul_dims(node, a.shape, b.shape)
        a_zp = zero_points(node, _inp(ins, 2), "a", m, a.dtype)
        if np.any(a_zp != a_zp[0]):
            raise unsupported(node, f"per-row a_zero_point '{ins[2].name}' (values differ); only a per-tensor "
                                    f"a_zero_point is supported")
        b_zp = self._b_zero_points(node, _inp(ins, 3), b, "b zero point")
        return _MatMul(batch, m, n, kk, out, int(a_zp[0]), b_zp, NO_REQUANT, 1)
