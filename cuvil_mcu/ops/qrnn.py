"""Integer-only recurrent layers: cuvil.QLSTM, cuvil.QGRU, cuvil.QRNN.

What `--quantize int8` makes of an LSTM / GRU / RNN with the default
activations (ptq.py calibrates, passes/qdq_rnn.py rewrites the QDQ form).
The arithmetic follows the recipe of TFLM's int8 LSTM (8-bit weights and
activations, 16-bit gates and cell state, integer sigmoid/tanh), written
here from the equations:

- x: int8 (x_scale, x_zp); hidden state h and every output Y / Y_h: int8
  (h_scale, h_zp), one parameter set since Y_t = h_t and h_t feeds back;
  W, R: int8, symmetric, one scale per gate row (inputs 8 and 9).
- Gate pre-activations: int16 Q3.12 (scale 2^-12, range [-8, 8)). The x
  part and the h part are two int32 dot products a_x, a_h (zero points
  folded into their biases: Wb + Rb and -x_zp * rowsum(W) into the x
  part's, -h_zp * rowsum(R) into the h part's), brought to Q3.12 as
  g = sat16(rshift(hmul(a_x << L, m_x) + hmul(a_h << L, m_h), e)) with
  hmul(a, m) = round(a m / 2^32) (one SMMULR) and m_x / m_h the real
  multipliers (in_scale * w_scale[r] * 2^12) as 31-bit mantissas sharing
  one exponent per matrix (L > 0 only for multipliers >= 1/2). TFLM runs a
  full fixed-point requantization for each part; this costs a fifth.
- sigmoid / tanh: Q3.12 in, Q0.15 out (scale 2^-15), by linear
  interpolation in tables of sigmoid(k / 32) (257 entries, k < 8 * 32)
  and tanh(k / 64) (513 entries), odd / point symmetry for x < 0; within
  1.6 LSB of Q0.15 (5e-5) of the exact functions over every int16 input.
  `clip` clamps the Q3.12 pre-activations.
- LSTM cell state c: int16 at a power-of-two scale 2^-cell_pow (calibrated:
  the finest that holds the largest |c| seen), so the update is shifts:
  c = sat16(rdbpot(f * c, 15) + rdbpot(i * g, 30 - cell_pow)); tanh(c)
  reads c rescaled to Q3.12. h = sat8(h_zp + mul(o * tanh(c))), mul the
  same high multiply and rounding shift, from Q0.30 to h's scale.
- GRU: h = sat8(h_zp + mul((1 - z) n) + rdbpot(z (h - h_zp), 15)).
  linear_before_reset 1: n = tanh(nx + rdbpot(r * nh, 15)) with nx, nh the
  two Q3.12 halves; 0: Rn multiplies r * h requantized to int8 at h's own
  parameters (h_zp + rdbpot(r (h - h_zp), 15) stays within int8).
- RNN: h = sat8(h_zp + mul(tanh(g))) from Q0.15.
rdbpot is gemmlowp's rounding divide by a power of two (halves away from
zero). Everything is integer: the
numpy reference below and the C kernel (templates/kernels/qrnn_s8.c.j2)
compute the same values bit for bit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import quant
from .base import Op, register, unsupported
from . import rnn
from .rnn import IB, IC0, IH0, IR, IRS, IW, IWS, IX

GATE_FRAC = 12        # gate pre-activations: Q3.12
ACT_ONE = 1 << 15     # sigmoid / tanh outputs: Q0.15
SIG_BITS, TANH_BITS = 7, 6    # Q3.12 fraction bits below one table step (1/32, 1/64)


def _table(fn, bits: int) -> np.ndarray:
    n = (1 << 15) >> bits
    k = np.arange(n + 1, dtype=np.float64) / (1 << (GATE_FRAC - bits))
    return np.minimum(np.rint(fn(k) * ACT_ONE), ACT_ONE - 1).astype(np.int16)


SIG_TABLE = _table(lambda v: 1.0 / (1.0 + np.exp(-v)), SIG_BITS)
TANH_TABLE = _table(np.tanh, TANH_BITS)


def _interp(ax, table, bits):
    i = ax >> bits
    f = ax & ((1 << bits) - 1)
    t0 = table[i].astype(np.int64)
    t1 = table[i + 1].astype(np.int64)
    return t0 + (((t1 - t0) * f + (1 << (bits - 1))) >> bits)


def sigmoid_q(x) -> np.ndarray:
    """Q3.12 -> Q0.15."""
    x = np.asarray(x, np.int64)
    v = _interp(np.minimum(np.abs(x), 32767), SIG_TABLE, SIG_BITS)
    return np.where(x >= 0, v, ACT_ONE - v)


def tanh_q(x) -> np.ndarray:
    """Q3.12 -> Q0.15."""
    x = np.asarray(x, np.int64)
    v = _interp(np.minimum(np.abs(x), 32767), TANH_TABLE, TANH_BITS)
    return np.where(x >= 0, v, -v)


def rdbpot(x, e: int) -> np.ndarray:
    return quant.rdbpot(np.asarray(x, np.int64), e) if e > 0 else np.asarray(x, np.int64)


def sat(x, dtype: str) -> np.ndarray:
    lo, hi = quant.QRANGE[dtype]
    return np.clip(np.asarray(x, np.int64), lo, hi)


MAX_LEFT = 7     # largest left shift of an accumulator before the high multiply


def shared_multiplier(*reals: float) -> tuple[list[int], int, int]:
    """Reals >= 0 as 31-bit mantissas m_i with one left shift L and one
    right shift e: r_i ~= m_i * 2^(L - 32 - e), the largest mantissa in
    [2^30, 2^31). L > 0 only for multipliers >= 1/2 (then e = 0)."""
    top = max(reals)
    if not top > 0:
        return [0] * len(reals), 0, 0
    s = min(62, 31 - math.frexp(top)[1])          # r ~= m * 2^-s
    s = max(s, 32 - MAX_LEFT)
    left, e = (0, s - 32) if s >= 32 else (32 - s, 0)
    return [min(int(math.floor(r * 2.0 ** s + 0.5)), quant.INT32_MAX) for r in reals], left, e


def hmul(a, m) -> np.ndarray:
    """round(a * m / 2^32), half up: SMMULR."""
    return (np.asarray(a, np.int64) * np.asarray(m, np.int64) + (np.int64(1) << 31)) >> 32


def rshift(v, e) -> np.ndarray:
    """(v + 2^(e-1)) >> e (half up); v for e = 0."""
    v = np.asarray(v, np.int64)
    e = np.asarray(e, np.int64)
    return np.where(e > 0, (v + (np.int64(1) << np.maximum(e - 1, 0))) >> e, v)


def mul_shift(v, m, left, e) -> np.ndarray:
    """rshift(hmul(v << left, m), e): the kernels' requantization."""
    return rshift(hmul(np.asarray(v, np.int64) << np.asarray(left, np.int64), m), e)


def cell_pow(c_absmax: float) -> int:
    """Finest power-of-two int16 scale 2^-p holding |c| <= c_absmax (p <= 15)."""
    if not c_absmax > 0:
        return 15
    return int(min(15, max(0, 15 - math.ceil(math.log2(c_absmax * 1.0001 + 1e-30)))))


@dataclass
class QParams:
    """Integer parameters of one node, per direction d (lists indexed by d)."""

    rows: list          # per direction, per matrix: dict(wx, wh (or None), rec = int32 [rows, 4], left, e)
    clip: int           # Q3.12 clamp of the pre-activations (32767: none)
    h_mult: int         # Q0.30 (LSTM, GRU) / Q0.15 (RNN) -> h units
    h_shift: int
    h_zp: int
    cell_pow: int
    h0: np.ndarray | None       # [D, B, H] int8 (constant initial state)
    c0: np.ndarray | None       # [D, B, H] int16


def qparams(node, ins, s: rnn.Spec) -> QParams:
    a = node.attrs
    xs, xz = float(a["x_scale"]), int(a["x_zp"])
    hs, hz = float(a["h_scale"]), int(a["h_zp"])
    H, G, D = s.H, s.G, s.D
    w = np.asarray(ins[IW].data, np.int64)
    r = np.asarray(ins[IR].data, np.int64)
    ws = np.asarray(ins[IWS].data, np.float32).astype(np.float64)
    rs = np.asarray(ins[IRS].data, np.float32).astype(np.float64)
    bias = np.asarray(ins[IB].data, np.float64) if len(ins) > IB and ins[IB] is not None \
        else np.zeros((D, 2 * G * H))
    wb, rb = bias[:, :G * H], bias[:, G * H:]
    one = float(1 << GATE_FRAC)
    per_dir = []
    for d in range(D):
        sx = np.float64(np.float32(xs)) * ws[d]          # x part accumulator scale per row
        sh = np.float64(np.float32(hs)) * rs[d]

        def qb(real, scale):
            return np.clip(np.rint(real / scale), quant.INT32_MIN, quant.INT32_MAX).astype(np.int64)

        bx = qb(wb[d] + rb[d], sx) - xz * w[d].sum(axis=1)
        bh = -hz * r[d].sum(axis=1)
        if s.kind == "GRU" and s.lbr:   # Rbn stays inside r * (Rn h + Rbn)
            n = slice(2 * H, 3 * H)
            bx[n] = qb(wb[d, n], sx[n]) - xz * w[d, n].sum(axis=1)
            bh[n] = qb(rb[d, n], sh[n]) - hz * r[d, n].sum(axis=1)

        def rec(rows, wx, wh, parts=("x", "h")):
            """dict(rec=[bias_a, bias_b, m_a, m_b] per row, left=L, e): part a
            ('x' or 'h') on the kernel's "x" input, part b ('h' or none) on
            its "h" input; one exponent for the whole matrix (a row whose
            multiplier is 2^-k of the largest keeps 31 - k mantissa bits)."""
            scale = {"x": sx * one, "h": sh * one}
            bias = {"x": bx, "h": bh}
            a, b = parts[0], (parts[1] if len(parts) > 1 else None)
            ma_r = scale[a][rows]
            mb_r = scale[b][rows] if b else np.zeros(ma_r.shape)
            mant, left, e = shared_multiplier(*ma_r.tolist(), *mb_r.tolist())
            n_ = ma_r.size
            out = np.stack([bias[a][rows], bias[b][rows] if b else np.zeros(n_, np.int64),
                            np.asarray(mant[:n_], np.int64), np.asarray(mant[n_:], np.int64)], axis=1)
            _check_int64(node, out, left, wx, wh)
            return dict(rec=out.astype(np.int32), left=left, e=e)

        if s.kind == "GRU":
            zr, n = slice(0, 2 * H), slice(2 * H, 3 * H)
            mats = [dict(wx=w[d, zr], wh=r[d, zr], **rec(zr, w[d, zr], r[d, zr]))]
            if s.lbr:
                mats += [dict(wx=w[d, n], wh=None, **rec(n, w[d, n], None, ("x",))),
                         dict(wx=r[d, n], wh=None, **rec(n, r[d, n], None, ("h",)))]
            else:
                mats += [dict(wx=w[d, n], wh=r[d, n], **rec(n, w[d, n], r[d, n]))]
        else:
            rows = slice(0, G * H)
            mats = [dict(wx=w[d], wh=r[d], **rec(rows, w[d], r[d]))]
        per_dir.append(mats)
    clip = 32767 if s.clip is None else int(min(32767, round(s.clip * one)))
    frac = 15 if s.kind == "RNN" else 30
    (h_mult,), h_left, h_shift = shared_multiplier(2.0 ** -frac / float(np.float32(hs)))
    if h_left:
        raise unsupported(node, f"h_scale {hs} is too small for the integer form (h would need more than "
                                f"int8 for a unit range)")
    cp = int(a.get("cell_pow", 15))
    h0 = c0 = None
    t = ins[IH0] if len(ins) > IH0 else None
    if t is not None and t.is_const:
        h0 = rnn.state_in([None] * IH0 + [t.data], IH0, s, np.float64)
        if t.dtype == "float32":
            h0 = quant.quantize(h0, np.float32(hs), hz, "int8").astype(np.int64)
    t = ins[IC0] if len(ins) > IC0 and s.kind == "LSTM" else None
    if t is not None and t.is_const:
        c0 = rnn.state_in([None] * IC0 + [t.data], IC0, s, np.float64)
        if t.dtype == "float32":
            c0 = sat(np.rint(c0 * 2.0 ** cp), "int16")
    return QParams(per_dir, clip, h_mult, h_shift, hz, cp,
                   None if h0 is None else h0.astype(np.int64), None if c0 is None else c0.astype(np.int64))


def _check_int64(node, rec: np.ndarray, left: int, wx: np.ndarray, wh: np.ndarray | None) -> None:
    """Each accumulator (bias + dot product, |x|, |h| <= 128) shifted left
    by L stays an int32 (the two high products then sum within int32)."""
    f = rec.astype(np.float64)
    acc = np.abs(f[:, 0]) + 128.0 * np.abs(wx).sum(axis=1)
    if wh is not None:
        acc = np.maximum(acc, np.abs(f[:, 1]) + 128.0 * np.abs(wh).sum(axis=1))
    if np.any(acc * 2.0 ** left >= 2.0 ** 31 - 1):
        raise unsupported(node, "a gate's accumulator (int32 bias + dot product) does not fit the int32 "
                                "requantization (bias far beyond the weights' range)")


# --------------------------------------------------------------------------- reference

def _gates(m: dict, x, h):
    """int16 pre-activations of matrix m for int8 vectors x (and h)."""
    rec = m["rec"].astype(np.int64)
    t = hmul((rec[:, 0] + m["wx"] @ x) << m["left"], rec[:, 2])
    if m["wh"] is not None:
        t = t + hmul((rec[:, 1] + m["wh"] @ h) << m["left"], rec[:, 3])
    return sat(rshift(t, m["e"]), "int16")


def run_int(s: rnn.Spec, q: QParams, x, h0, c0):
    """Integer recurrence on time-major int8 x [T, B, I] (int64 values);
    h0 [D, B, H] int8 values, c0 int16 values. Returns y, y_h (int8
    values), y_c (int16 values) as [T, D, B, H] / [D, B, H] int64."""
    H, zh = s.H, q.h_zp
    y = np.full((s.T, s.D, s.B, H), zh, np.int64)
    yh = np.full((s.D, s.B, H), zh, np.int64)
    yc = np.zeros((s.D, s.B, H), np.int64)
    cq = q.clip

    def clip(v):
        return np.clip(v, -cq, cq)

    for d in range(s.D):
        mats = q.rows[d]
        for bi in range(s.B):
            L = s.length(bi)
            h, c = h0[d, bi].astype(np.int64), c0[d, bi].astype(np.int64)
            steps = range(L - 1, -1, -1) if s.reverse(d) else range(L)
            for t in steps:
                xt = x[t, bi].astype(np.int64)
                if s.kind == "LSTM":
                    g = _gates(mats[0], xt, h)
                    i = sigmoid_q(clip(g[:H]))
                    f = ACT_ONE - i if s.input_forget else sigmoid_q(clip(g[2 * H:3 * H]))
                    gg = tanh_q(clip(g[3 * H:]))
                    o = sigmoid_q(clip(g[H:2 * H]))
                    c = sat(rdbpot(f * c, 15) + rdbpot(i * gg, 30 - q.cell_pow), "int16")
                    cc = rdbpot(c, q.cell_pow - GATE_FRAC) if q.cell_pow >= GATE_FRAC \
                        else sat(c * (1 << (GATE_FRAC - q.cell_pow)), "int16")
                    h = sat(zh + mul_shift(o * tanh_q(cc), q.h_mult, 0, q.h_shift), "int8")
                elif s.kind == "GRU":
                    g = _gates(mats[0], xt, h)
                    z = sigmoid_q(clip(g[:H]))
                    rr = sigmoid_q(clip(g[H:]))
                    if s.lbr:
                        nx = _gates(mats[1], xt, None)
                        nh = _gates(mats[2], h, None)
                        n = tanh_q(clip(sat(nx + rdbpot(rr * nh, 15), "int16")))
                    else:
                        rh = zh + rdbpot(rr * (h - zh), 15)
                        n = tanh_q(clip(_gates(mats[1], xt, rh)))
                    h = sat(zh + mul_shift((ACT_ONE - z) * n, q.h_mult, 0, q.h_shift)
                            + rdbpot(z * (h - zh), 15), "int8")
                else:
                    g = _gates(mats[0], xt, h)
                    h = sat(zh + mul_shift(tanh_q(clip(g)), q.h_mult, 0, q.h_shift), "int8")
                y[t, d, bi] = h
            if L:
                yh[d, bi], yc[d, bi] = h, c
    return y, yh, yc


def _states(q: QParams, s: rnn.Spec, arrays):
    """Initial h (int8 values) and c (int16 values) as [D, B, H] int64."""
    if q.h0 is not None:
        h0 = q.h0
    elif len(arrays) > IH0 and arrays[IH0] is not None:
        h0 = rnn.state_in(arrays, IH0, s, np.int64)
    else:
        h0 = np.full((s.D, s.B, s.H), q.h_zp, np.int64)
    if q.c0 is not None:
        c0 = q.c0
    elif s.kind == "LSTM" and len(arrays) > IC0 and arrays[IC0] is not None:
        c0 = rnn.state_in(arrays, IC0, s, np.int64)
    else:
        c0 = np.zeros((s.D, s.B, s.H), np.int64)
    return h0, c0


QTYPES = {0: "int8", 1: "int8", 2: "int16"}


def _up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def pack_quads(wx: np.ndarray, wh: np.ndarray | None) -> np.ndarray:
    """Rows of [wx | wh] (int8) in the order of qrnn_matvec_s8.c.j2: rows
    padded to an even count and each part's columns to a multiple of 4 with
    zeros; per block of four rows (then a last pair): the x quads, then the
    h quads; per quad and row pair (a, b) the words [a0 b0 a2 b2] [a1 b1 a3 b3]."""
    rows = wx.shape[0]
    R = _up(rows, 2)

    def padded(m):
        out = np.zeros((R, _up(m.shape[1], 4)), np.int8)
        out[:rows, :m.shape[1]] = m
        return out

    parts = [padded(wx)] + ([padded(wh)] if wh is not None else [])

    def pair_words(m, r0):
        # [quads, 8]: per quad the bytes a0 b0 a2 b2 a1 b1 a3 b3 of rows r0, r0 + 1
        q = m[r0:r0 + 2].reshape(2, -1, 4)                       # [pair row, quad, column]
        return np.stack([q[0, :, 0], q[1, :, 0], q[0, :, 2], q[1, :, 2],
                         q[0, :, 1], q[1, :, 1], q[0, :, 3], q[1, :, 3]], axis=1)

    out = []
    for r0 in range(0, R - R % 4, 4):
        for m in parts:
            out.append(np.concatenate([pair_words(m, r0), pair_words(m, r0 + 2)], axis=1).reshape(-1))
    if R % 4:
        for m in parts:
            out.append(pair_words(m, R - 2).reshape(-1))
    return np.ascontiguousarray(np.concatenate(out) if out else np.zeros(0), np.int8)


def pad_rec(rec: np.ndarray) -> np.ndarray:
    """Per-row requantization records, padded to an even row count."""
    if rec.shape[0] % 2:
        rec = np.concatenate([rec, np.zeros((1, rec.shape[1]), np.int32)])
    return np.ascontiguousarray(rec, np.int32)


@register("cuvil.QLSTM", "cuvil.QGRU", "cuvil.QRNN")
class QRecurrent(Op):
    def check(self, node, ins):
        s = rnn.spec(node, ins)
        if not s.default_acts():
            raise unsupported(node, "the integer form has the default activations only")
        for key in ("x_scale", "x_zp", "h_scale", "h_zp"):
            if key not in node.attrs:
                raise unsupported(node, f"attribute {key} is missing")
        if not float(node.attrs["x_scale"]) > 0 or not float(node.attrs["h_scale"]) > 0:
            raise unsupported(node, "x_scale and h_scale must be > 0")
        if ins[IX].dtype != "int8":
            raise unsupported(node, f"X '{ins[IX].name}' is {ins[IX].dtype}, expected int8")
        for i, what in ((IW, "W"), (IR, "R")):
            if not ins[i].is_const or ins[i].dtype != "int8":
                raise unsupported(node, f"{what} '{ins[i].name}' must be an int8 constant")
        if len(ins) <= IRS or ins[IWS] is None or ins[IRS] is None or not (ins[IWS].is_const and ins[IRS].is_const):
            raise unsupported(node, "W and R need their per-row scales (inputs 8 and 9)")
        if len(ins) > rnn.IP and ins[rnn.IP] is not None:
            raise unsupported(node, "peepholes (P) have no integer form")
        for i, want in ((IH0, ("int8",)), (IC0, ("int16",))):
            t = ins[i] if len(ins) > i else None
            if t is not None and not (t.dtype in want or (t.is_const and t.dtype == "float32")):
                raise unsupported(node, f"initial state '{t.name}' is {t.dtype}, expected {want[0]}")
        if not 0 <= int(node.attrs.get("cell_pow", 15)) <= 15:
            raise unsupported(node, "cell_pow must lie in [0, 15]")

    def infer(self, node, ins):
        s = rnn.spec(node, ins)
        shapes = rnn.out_shapes(s)
        return [(shapes[j], QTYPES[j]) for j in range(len(node.outputs))]

    def reference(self, node, ins, *arrays):
        s = rnn.spec(node, ins)
        q = qparams(node, ins, s)
        x = rnn.time_major(np.asarray(arrays[IX], np.int64), s.layout)
        h0, c0 = _states(q, s, arrays)
        y, yh, yc = run_int(s, q, x, h0, c0)
        outs = rnn.pack_outputs(s, y, yh, yc, np.int64)
        return [o.astype(QTYPES[j]) for j, o in enumerate(outs)][:len(node.outputs)]

    def macs(self, node, ins, outs):
        return rnn.macs(rnn.spec(node, ins))

    def scratch(self, node, ins, outs):
        s = rnn.spec(node, ins)
        # the layout qrnn_s8.c.j2 describes: int16 gates (G*H + 2), Rn h and cell
        # (H rounded up to even, each), int8 h and r*h (H4 each), x_t (I4)
        he = _up(s.H, 2)
        return 2 * (s.G * s.H + 2 + 2 * he) + 2 * _up(s.H, 4) + _up(s.I, 4)

    def emit(self, node, ins, outs, k):
        s = rnn.spec(node, ins)
        q = qparams(node, ins, s)
        k.kernel("requant_fixed")
        k.kernel("intrin_dsp")          # ld32 / sxtb16 / smlad (plain C where there is no DSP)
        mv = k.kernel("qrnn_matvec_s8", {"name": "", "p": k.prefix})
        sig = k.const(SIG_TABLE, "sigmoid_q15")
        tnh = k.const(TANH_TABLE, "tanh_q15")
        outs_by_pos = [node.outputs[j] if len(node.outputs) > j else "" for j in range(3)]
        y, yh = (k.ptr(o) if o else "(int8_t *)0" for o in outs_by_pos[:2])
        yc = k.ptr(outs_by_pos[2]) if outs_by_pos[2] else "(int16_t *)0"

        def state(i, ctype, const):
            t = ins[i] if len(ins) > i else None
            if const is not None:
                return k.const(np.ascontiguousarray(np.moveaxis(const, 0, 1) if s.layout else const)
                               .astype(ctype), f"{node.name}_s{i}")
            return k.ptr(t) if t is not None else f"(const {rnn_ctype(ctype)} *)0"

        h0 = state(IH0, np.int8, q.h0)
        c0 = state(IC0, np.int16, q.c0) if s.kind == "LSTM" else "(const int16_t *)0"
        lens = k.const(s.lens.astype(np.int32), f"{node.name}_lens") if s.lens is not None else "(const int32_t *)0"
        nmat = 1 if s.kind != "GRU" else (3 if s.lbr else 2)
        v = {"kind": s.kind.lower(), "mv": mv, "nmat": nmat, "input_forget": s.input_forget, "lbr": s.lbr,
             "clip": s.clip is not None, "p": k.prefix}
        v["name"] = rnn.variant_name(s.kind, repr(sorted(v.items())))
        fn = k.kernel("qrnn_s8", v)
        for d in range(s.D):
            margs = []
            for m, mat in enumerate(q.rows[d]):
                margs.append(k.const(pack_quads(mat["wx"], mat["wh"]), f"{node.name}_w{m}_d{d}"))
                margs.append(k.const(pad_rec(mat["rec"]), f"{node.name}_rq{m}_d{d}"))
                margs += [str(1 << mat["left"]), str(mat["e"]), str((1 << mat["e"]) >> 1)]
            gm = rnn.geometry(s, d)
            geo = np.array([s.T, s.B, s.I, s.H, int(s.reverse(d)), gm["sxt"], gm["sxb"], gm["syt"], gm["syb"],
                            gm["ssb"], q.clip, q.h_mult, q.h_shift, q.h_zp, q.cell_pow, _up(s.I, 4),
                            _up(s.H, 4)], np.int32)
            gsym = k.const(geo, f"{node.name}_geo")
            so, yo = gm["s0"], gm["y0"]

            def at(ptr, off):
                return ptr if ptr.endswith(" *)0") else f"{ptr} + {off}"

            k.line(f"{fn}({k.ptr(ins[IX])}, {', '.join(margs)}, {at(h0, so)}, {at(c0, so)}, {at(y, yo)}, "
                   f"{at(yh, so)}, {at(yc, so)}, {lens}, {gsym}, {sig}, {tnh}, {k.scratch('int16_t')});")


def rnn_ctype(dtype) -> str:
    return {np.int8: "int8_t", np.int16: "int16_t"}[dtype]
