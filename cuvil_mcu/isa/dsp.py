"""int8 kernels for the ARMv7E-M / ARMv8-M DSP extension (Cortex-M4, M7,
M33), selected by cuvil_mcu.isa when the board has isa.dsp. Templates
kernels/*_dsp.c.j2 use arm_acle.h (and inline asm for SXTB16 ror #8 and
SMMULR) under __ARM_FEATURE_DSP, plain-C equivalents elsewhere, so the same
header is checked bit for bit on the host (tests/test_isa_dsp.py). The
kernels carry <PREFIX>_DSP_NOSCHED (GCC's optimize("no-schedule-insns") on
Arm): GCC's pre-allocation scheduler otherwise hoists the unrolled loads
and spills the accumulators (KWS 1.94 -> 1.83 instructions/MAC).

Tried first, each when its compile-time preconditions hold (else the kernels
below):
- dsp_conv.py -> qconv2_dsp: general conv with "paired-channel halfwords":
  per output-channel pair one int16 256*w[m+1] + w[m] per input, so one
  weight word + one SXTB16 feed two SMLADs that give both channels' sums
  (the high one recovered as (T - B) >> 8, exact under a per-pair bound);
  2 pixels x 2 pairs per pass, 15 cycles per 16 MACs on the M4 (the block
  loop in one shared assembly function; for stride-1 pointwise layers the
  pixel loop too, dsp_conv.emit_pw). First layers (C % 4 != 0) whose
  window rows are whole words and M % 8 == 0 go to dsp_rows.py ->
  qconvr_dsp where its split activations do not fit the leanest plan's
  room: rows read straight from the input, no split activations
  (micro_speech).
- dsp_dw.py -> qdw2_dsp: depthwise on per-channel planes of vertical
  halfword pairs, 2 outputs per pass, 4-instruction requantization.
- dsp_fc.py -> qfc2_dsp: fully connected with the paired-channel halfwords,
  each activation word shared by 4 channel pairs.
- emit_qadd -> qadd_mla_dsp: QLinearAdd as x * alpha + t[u] >> m, one
  input linear, the other through a 256-entry table (add_mla_plan), else
  qadd_tab_dsp: each input's scaled value looked up in a 256-entry table
  (add_tables).
- emit_qgap / emit_qavgpool -> qgap_dsp: global averages (and TFLM's
  average pool whose one window is the whole input) with 4 channels a word
  summed by SXTAB16 and each sum requantized by one SMMLA and a shift whose
  constant smmla_fit proves exact for every possible sum.

Handled (else the functions return False and the portable kernel runs):
- qconv, general (QLinearConv, NHWC, one group, dilation 1) -> qconv_dsp:
  2 output pixels x 2 output channels per pass. Per pixel each kernel row
  is a run of kw*C contiguous bytes (border runs copied to the stack with
  x_zp for outside taps, so the bias with -x_zp * sum(w) folded in serves
  every pixel); the runs are split once per pixel pair into halfword pairs
  (SXTB16 / SXTB16 ror 8) and shared by all output channels; weights are
  pre-arranged [channel pair][row][4-byte group][2][4] so each weight word
  is one load + two SXTB16 feeding 4 SMLADs.
- qconv, grouped (1 < groups, cg > 1) -> dsp_group.py: qgconv_dsp, the
  paired-channel arithmetic on each group's 4-byte chunks of the input.
- qconv, depthwise with multiplier 1 (NHWC), c % 4 == 0, kh*kw <= 16,
  stride_w <= 2 -> qdwpad_dsp: per output row the kh input rows are copied
  into a stack buffer with the padding made explicit, then 3 neighbouring
  pixels x 2 channels (ch, ch + 2 of a word: SXTB16 of the word at ch, then
  of the word one byte on) per pass: each input word is loaded and split
  once for every tap of the 3 pixels that reads it; weights pre-split into
  halfword pairs (int16 in flash). Other depthwise layers -> qdwconv_dsp: 4
  channels per word, SMLABB/SMLATT, interior windows unrolled.
- qgemm: the QGemm / QLinearMatMul call with a constant int8 B ([n][kk],
  zero point subtracted, a_zp folded into the bias) -> qfc_dsp: 4 output
  channels share each word of A; kk is a literal so B's rows are reached
  with immediate offsets.
Not handled (portable kernel): float requantization, uint8 activations or
outputs, weights that need int16 after the zero point, grouped convolution
outside dsp_group.py's limits, depthwise multiplier > 1, dilation, ConvInteger / MatMulInteger (int32
output), run-time B, batched MatMul, NCHW, buffers > MAX_STACK.

Buffers (border copies, split activations, row copies) are arena scratch
planned for the node (codegen.Emitter.scratch_buf), never the stack; those
of kernels with a buffer-free alternative (depthwise row copies, the FC's
split row) are taken only within the room the plan has at that step
(Emitter.scratch_room).

Requantization (bit-identical to quant.requantize_fixed, tested there):
- "fast" ({{p}}__rqz: SMMULR on 2*acc then a rounding shift) when |acc| <
  2^30 is guaranteed (|bias'| + K * 128 * max|w|) and every channel shifts
  right by 1..31; one table [channel][mult, e, 2^(e-1) + yzp 2^e] so the
  output zero point is added inside the rounding (exact: a multiple of 2^e
  before the floor shift); "fastu" ({{p}}__rq, + yzp after) when that
  nudge could overflow;
- v.sat: when the clamp is int8's whole range (lo -128, hi 127) one SSAT;
- "mid" ({{p}}__rq_mid: one 64-bit multiply, gemmlowp's rounding shift) when
  no channel shifts left;
- "fixed": the shared {{p}}__mbqm otherwise.
"""
from __future__ import annotations

import numpy as np

from .. import quant
from ..ops.qgemm import int32_array, offset_weights
from ..planner import windows

QCONV_FIELDS = ("nb", "npx", "ow_n", "h", "w_n", "c", "kw_n", "sh", "sw", "pt", "pl", "m_n", "l4", "lt",
                "gq", "xzp", "yzp", "lo", "hi")
QDW_FIELDS = ("nb", "oh_n", "ow_n", "h", "w_n", "c", "sh", "sw", "pt", "pl", "xzp", "yzp", "lo", "hi")
QFC_FIELDS = ("m", "n", "yzp", "lo", "hi")
NUDGE_MAX = 2 ** 30   # |2^(e-1) + yzp 2^e| below this: s + nudge cannot overflow (|s| < 2^30)
MAX_STACK = 4096   # most bytes of buffers (border copies, split activations) of a conv kernel (arena scratch)


def requant_fast(acc, mult, e) -> np.ndarray:
    """What {{p}}__rq computes (int64 numpy): SMMULR(2 acc, mult) =
    floor((2 acc mult + 2^31) / 2^32), then (s + 2^(e-1) - (s < 0)) >> e.
    Equal to quant.requantize_fixed(acc, mult, -e) for |acc| < 2^30, e >= 1."""
    acc = np.asarray(acc, np.int64)
    mult = np.asarray(mult, np.int64)
    e = np.asarray(e, np.int64)
    s = (2 * acc * mult + (np.int64(1) << 31)) >> 32
    return (s + (np.int64(1) << (e - 1)) - (s < 0)) >> e


def requant_mid(acc, mult, e) -> np.ndarray:
    """What {{p}}__rq_mid computes: floor((acc mult + 2^30) / 2^31), then
    gemmlowp's rounding divide by 2^e. Equal to quant.requantize_fixed(acc,
    mult, -e) for any int32 acc, mult >= 0, e in 0..31."""
    acc = np.asarray(acc, np.int64)
    e = np.asarray(e, np.int64)
    s = (acc * np.asarray(mult, np.int64) + (np.int64(1) << 30)) >> 31
    mask = (np.int64(1) << e) - 1
    return (s >> e) + ((s & mask) > (mask >> 1) + (s < 0))


def _requant(rq, bound: int, channels: int):
    """(variant, mult, second array) for the kernels' requantization. The
    "fast" variant's mult is one table [channel][mult, e, nudge] with nudge
    = 2^(e-1) + yzp * 2^e (the output zero point rides in the rounding
    shift: exact, it adds a multiple of 2^e before the floor shift) and no
    second array (None); "fastu" keeps yzp apart when that nudge could
    overflow."""
    mult = np.broadcast_to(np.asarray(rq.mult, np.int32).reshape(-1), (channels,))
    shift = np.broadcast_to(np.asarray(rq.shift, np.int32).reshape(-1), (channels,))
    if bound < 2 ** 30 and np.all(shift <= -1) and np.all(shift >= -31):
        e = (-shift).astype(np.int64)
        nudge = (np.int64(1) << (e - 1)) + np.int64(rq.zp) * (np.int64(1) << e)
        if np.all(np.abs(nudge) < NUDGE_MAX):
            return "fast", np.stack([mult.astype(np.int64), e, nudge], axis=1).astype(np.int32).reshape(-1), None
        return "fastu", mult, e.astype(np.int32)
    if np.all(shift <= 0) and np.all(shift >= -31) and np.all(mult >= 0):
        return "mid", mult, (-shift).astype(np.int32)
    return "fixed", mult, shift.astype(np.int32)


def _sat(rq) -> bool:
    """The clamp is int8's whole range: one SSAT."""
    return int(rq.lo) == -128 and int(rq.hi) == 127


def _rq_consts(k, node, mode, mult, second, pad=False) -> tuple[str, str]:
    """The symbols of the requantization arrays (the "fast" table twice);
    pad: one more channel (a copy of the last) for an odd channel count."""
    if second is None:
        t = np.ascontiguousarray(mult)
        msym = k.const(np.concatenate([t, t[-3:]]) if pad else t, f"{node.name}_rq")
        return msym, msym
    f = _pad_even if pad else np.ascontiguousarray
    return (k.const(f(np.ascontiguousarray(mult)), f"{node.name}_mult"),
            k.const(f(np.ascontiguousarray(second)), f"{node.name}_{'shift' if mode == 'fixed' else 'e'}"))


def _align16(n: int) -> int:
    return -(-int(n) // 16) * 16


def _pad_even(v: np.ndarray) -> np.ndarray:
    return np.concatenate([v, v[-1:]]) if v.shape[0] % 2 else v


def emit_qconv(op, node, ins, outs, k, p) -> bool:
    x, w = ins[op.X], ins[op.W]
    geo = p.geo
    if p.rq.mode != "fixed" or not p.cl or x.dtype != "int8" or outs[0].dtype != "int8":
        return False
    if tuple(geo.dilations) != (1, 1) or len(geo.k) != 2:
        return False
    if geo.group > 1 and geo.cg > 1:   # grouped (dsp_group.py: qgconv_dsp), channel shuffle folded in or not
        from . import dsp_group
        return dsp_group.emit(node, x, w, outs, k, p)
    if p.ochan is not None:   # (passes/fold_shuffle.py sets it on grouped layers only)
        return False
    if geo.group > 1 and geo.cg == 1 and geo.mg == 1:
        return _depthwise(node, x, w, outs, k, p)
    if geo.group != 1:
        return False
    from . import dsp_conv   # paired-channel halfwords (qconv2_dsp), when exact; else qconv_dsp below
    if dsp_conv.emit(node, x, w, outs, k, p):
        return True
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    m, c = geo.m, geo.c
    ll = kw * c
    l4, lt = ll // 4, ll % 4
    gq = l4 + (lt > 0)
    raw, xe = 2 * kh * ll, 4 * kh * gq      # bytes, int32 words (arena scratch, like qconv2_dsp's)
    if _align16(raw) + 4 * xe > MAX_STACK:
        return False
    wq = offset_weights(np.asarray(w.data).reshape(m, c, kh, kw), p.w_zp, 0)
    if wq.dtype != np.int8:
        return False
    wr = wq.transpose(0, 2, 3, 1).reshape(m, kh, ll).astype(np.int64)      # [m][r][kw*c]
    wsum = wr.reshape(m, -1).sum(axis=1)
    bias = p.bias if p.bias is not None else np.zeros(m, np.int64)
    folded = bias - p.x_zp * wsum
    wmax = int(np.abs(wr).max()) if wr.size else 0
    bound = int(np.abs(folded).max()) + kh * ll * 128 * wmax
    if bound > 2 ** 31 - 1:
        return False
    # [pair][r][g][2 channels][4]: zero past L in each row, a zero channel past M
    wp = np.zeros((m + m % 2, kh, 4 * gq), np.int64)
    wp[:m, :, :ll] = wr
    npair = wp.shape[0] // 2
    packed = wp.reshape(npair, 2, kh, gq, 4).transpose(0, 2, 3, 1, 4)
    mode, mult, second = _requant(p.rq, bound, m)
    sat = _sat(p.rq)
    yzp, lo, hi = p.rq.zp, p.rq.lo, p.rq.hi
    vals = dict(nb=geo.n, npx=oh * ow, ow_n=ow, h=h, w_n=wd, c=c, kw_n=kw, sh=sh, sw=sw, pt=pt, pl=pl, m_n=m,
                l4=l4, lt=lt, gq=gq, xzp=p.x_zp, yzp=yzp, lo=lo, hi=hi)
    k.kernel("requant_fixed")
    k.kernel("intrin_dsp")
    odd_m = m % 2 == 1
    fn = k.kernel("qconv_dsp", {"name": f"{mode}{'s' * sat}_k{kh}" + "_om" * odd_m, "rq": mode,
                                "sat": sat, "kh": kh, "odd_m": odd_m, "fields": QCONV_FIELDS})
    wsym = k.const(packed.astype(np.int8).reshape(-1), f"{w.name}_dsp")
    bsym = k.const(_pad_even(int32_array(node, folded, "bias with the input zero point folded in")),
                   f"{node.name}_bias")
    msym, ssym = _rq_consts(k, node, mode, mult, second, pad=m % 2 == 1)
    gsym = k.const(np.array([vals[f] for f in QCONV_FIELDS], np.int32), "qconv_dsp_geo")
    bufs = f"{k.scratch_buf(raw)}, {k.scratch_buf(4 * xe, 'int32_t')}"
    k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, what="qconv_dsp: pixel pairs"))
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {bsym}, {gsym}, {msym}, {ssym}, {bufs});")
    return True


def _depthwise(node, x, w, outs, k, p) -> bool:
    geo = p.geo
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    c = geo.c
    if kh * kw > 25:   # the interior taps are unrolled
        return False
    wq = offset_weights(np.asarray(w.data).reshape(c, kh, kw), p.w_zp, 0)
    if wq.dtype != np.int8:
        return False
    wk = wq.astype(np.int64).transpose(1, 2, 0)                      # [kh][kw][c]
    bias = p.bias if p.bias is not None else np.zeros(c, np.int64)
    folded = bias - p.x_zp * wk.reshape(-1, c).sum(axis=0)
    wmax = int(np.abs(wk).max()) if wk.size else 0
    bound = int(np.abs(folded).max()) + kh * kw * 128 * wmax
    if bound > 2 ** 31 - 1:
        return False
    mode, mult, second = _requant(p.rq, bound, c)
    sat = _sat(p.rq)
    from . import dsp_dw   # channel planes of halfword pairs (qdw2_dsp); else the kernels below
    if dsp_dw.emit(node, x, wk, folded, outs, k, p, mode, mult, second, sat):
        return True
    if c % 4 == 0 and kh * kw <= 16 and sw <= 2 and \
            _dw_padded(node, x, wk, folded, outs, k, p, mode, mult, second, sat):
        return True
    vals = dict(nb=geo.n, oh_n=oh, ow_n=ow, h=h, w_n=wd, c=c, sh=sh, sw=sw, pt=pt, pl=pl,
                xzp=p.x_zp, yzp=p.rq.zp, lo=p.rq.lo, hi=p.rq.hi)
    k.kernel("requant_fixed")
    k.kernel("intrin_dsp")
    fn = k.kernel("qdwconv_dsp", {"name": f"{mode}{'s' * sat}_{kh}x{kw}", "rq": mode, "sat": sat, "kh": kh, "kw": kw,
                                  "fields": QDW_FIELDS})
    wsym = k.const(np.ascontiguousarray(wk.astype(np.int8)), f"{w.name}_hwc")
    bsym = k.const(int32_array(node, folded, "bias with the input zero point folded in"), f"{node.name}_bias")
    msym, ssym = _rq_consts(k, node, mode, mult, second)
    gsym = k.const(np.array([vals[f] for f in QDW_FIELDS], np.int32), "qdwconv_dsp_geo")
    # per pixel, 4 channels at a time (1 at a time is the conservative model of it)
    k.order(0, lambda: windows.raster(geo, True, group=1, cblock=1, what="qdwconv_dsp: pixels"))
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {bsym}, {gsym}, {msym}, {ssym});")
    return True


def _dw_padded(node, x, wk, folded, outs, k, p, mode, mult, second, sat) -> bool:
    """The depthwise kernel on padded row copies, 3 pixels per pass
    (qdwpad_dsp), when its row buffer fits the stack."""
    geo = p.geo
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    c = geo.c
    need = (ow - 1) * sw + kw              # buffer columns the last pixel reads
    if pl > need:
        return False
    # pixels per pass (2 accumulators each): 3 by a count of loads + MACs per row is
    # near the best for the widths met (KWS 5, VWW 3..48); one value: one kernel (flash)
    npx = 3
    nc = max(0, min(wd, need - pl))
    wpad = (-(-ow // npx) * npx - 1) * sw + kw   # room for the unstored pixels of a last pass
    rf = wpad - pl - nc
    buf = kh * wpad * c + 4                 # the rows, + the word past the last group half 1 loads
    fields = ("nb", "oh_n", "ow_n", "h", "w_n", "c", "sh", "pt", "lf", "nc", "rf", "wpad", "xzp", "yzp", "lo", "hi")
    vals = dict(nb=geo.n, oh_n=oh, ow_n=ow, h=h, w_n=wd, c=c, sh=sh, pt=pt, lf=pl, nc=nc, rf=rf, wpad=wpad,
                xzp=p.x_zp, yzp=p.rq.zp, lo=p.rq.lo, hi=p.rq.hi)
    k.kernel("requant_fixed")
    k.kernel("intrin_dsp")
    fn = k.kernel("qdwpad_dsp", {"name": f"{mode}{'s' * sat}_{kh}x{kw}s{sw}p{npx}", "rq": mode, "sat": sat, "kh": kh,
                                 "kw": kw, "sw": sw, "np": npx, "fields": fields})
    # [group][half][tap][ch 4q + half, 4q + half + 2] as int16: one word per tap
    w16 = wk.reshape(kh * kw, c // 4, 2, 2).transpose(1, 3, 0, 2).astype(np.int16)
    wsym = k.const(np.ascontiguousarray(w16).reshape(-1).view(np.int32), f"{node.name}_w_dsp")
    bsym = k.const(int32_array(node, folded, "bias with the input zero point folded in"), f"{node.name}_bias")
    msym, ssym = _rq_consts(k, node, mode, mult, second)
    gsym = k.const(np.array([vals[f] for f in fields], np.int32), "qdwpad_dsp_geo")
    # per output row its kh input rows are copied first: row groups
    k.order(0, lambda: windows.raster(geo, True, group=ow, cblock=0, what="qdwpad_dsp: output rows"))
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {bsym}, {gsym}, {msym}, {ssym}, {k.scratch_buf(buf)});")
    return True


def fc_operands(prm, k):
    """(B as int8 [n * kk], bias C as int64 [n]) of a QGemm / QLinearMatMul
    call the DSP fully-connected kernels take: fixed requantization, int8
    everywhere, one batch, contiguous rows, a constant B and a bias; else None."""
    rq, n, kk = prm["rq"], prm["n"], prm["kk"]
    if rq.mode != "fixed" or prm["off"] or tuple(prm["types"]) != ("int8", "int8", "int8"):
        return None
    if tuple(prm["sa"]) != (kk, 1) or tuple(prm["sb"]) != (kk, 1) or len(prm["batches"]) != 1 \
            or any(int(v) for v in prm["batches"][0]):
        return None
    b_sym, c_sym = prm["b"], prm["c"]
    if c_sym is None or tuple(prm["sc"]) != (0, 1) or b_sym not in k.consts or c_sym not in k.consts:
        return None
    b = np.asarray(k.consts[b_sym].data)
    c = np.asarray(k.consts[c_sym].data, np.int64).reshape(-1)
    if b.dtype != np.int8 or b.size != n * kk or c.size != n:
        return None
    if rq.mult is None or np.asarray(rq.mult).size not in (1, n):
        return None
    return b, c


def emit_qgemm(op, node, ins, outs, k, prm) -> bool:
    from . import dsp_fc
    if dsp_fc.emit(op, node, ins, outs, k, prm):   # paired output channels (qfc2_dsp), when exact
        return True
    rq, m, n, kk = prm["rq"], prm["m"], prm["n"], prm["kk"]
    operands = fc_operands(prm, k)
    if operands is None:
        return False
    b, c = operands
    b_sym, c_sym = prm["b"], prm["c"]
    bmax = int(np.abs(b.astype(np.int64)).max()) if b.size else 0
    bound = (int(np.abs(c).max()) if c.size else 0) + kk * 128 * bmax
    if bound > 2 ** 31 - 1:
        return False
    mode, mult, second = _requant(rq, bound, n)
    sat = _sat(rq)
    vals = dict(m=m, n=n, yzp=rq.zp, lo=rq.lo, hi=rq.hi)
    k.kernel("requant_fixed")
    k.kernel("intrin_dsp")
    fn = k.kernel("qfc_dsp", {"name": f"{mode}{'s' * sat}_k{kk}", "rq": mode, "sat": sat, "kk": kk,
                              "fields": QFC_FIELDS})
    msym, ssym = _rq_consts(k, node, mode, mult, second)
    gsym = k.const(np.array([vals[f] for f in QFC_FIELDS], np.int32), "qfc_dsp_geo")
    k.line(f"{fn}({prm['y']}, {prm['a']}, {b_sym}, {c_sym}, {gsym}, {msym}, {ssym});")
    return True


def add_tables(plan) -> tuple[np.ndarray, np.ndarray]:
    """Per input byte code c (0..255, int8 value (int8)c) of the fast QLinearAdd
    plan (ops/qelementwise.add_fast_plan): ta[c] = u1(x) * big (+ the constant
    parts times big when the plan folds them: mmr), tb[c] = u2(x) * big,
    modulo 2^32 as int32, so that ta + tb is the kernel's d."""
    x = np.arange(256, dtype=np.int64)
    x = np.where(x >= 128, x - 256, x)

    def scaled(i):
        t = x * plan[f"ml{i}"] + plan[f"r{i}"] + np.where(x < plan[f"z{i}"], plan[f"dc{i}"], 0)
        return x * plan[f"mh{i}"] + (t >> plan[f"n{i}"])
    ta = scaled(1) * plan["big"] + (plan["kkb"] if plan["mmr"] else 0)
    tb = scaled(2) * plan["big"]
    return ((ta & 0xFFFFFFFF).astype(np.uint32).view(np.int32), (tb & 0xFFFFFFFF).astype(np.uint32).view(np.int32))


# (fraction bits of the sum, bound on |alpha|) tried in order: first a 16-bit alpha (SMLABB /
# SMLATB on halfword pairs of x: 2 instructions fewer per 4 elements), then any alpha whose
# products with int8 stay within int32 (22 bits leave y within +-512 in int32)
MLA_SHIFTS = (*((m, 1 << 15) for m in range(15, 8, -1)), *((m, 1 << 24) for m in range(22, 13, -1)))
MLA_SPAN = 64                    # multipliers tried either side of the ideal one


def add_mla_plan(dt, za, zb, zc, params, lo, hi, lins=(0, 1)) -> dict | None:
    """qadd_mla_dsp's constants: which input is linear (lin 0: A, 1: B; lins
    the ones tried), the shift m, the multiplier alpha and the table t (by
    byte code of the other input) with clamp((x * alpha + t[u]) >> m, lo,
    hi) == the reference on all 256 x 256 pairs, every sum within int32; or
    None.

    Why it exists: TFLM's add is a monotone step function of the two scaled
    inputs whose real slopes are sa/sc and sb/sc. With m fraction bits, the
    linear input's term is x * alpha (alpha near 2^m sa/sc); for each code
    u of the other input the exact outputs over the 256 codes x bound t[u]
    to an interval (a saturated output only bounds it on one side), and
    alpha is searched until every interval is non-empty. The rounding
    steps (per-input MBQM, the output's double rounding) move the step
    edges by far less than one code's gap, so an alpha is found for
    ordinary scales (all 60 random scale triples of the tests, every Add of
    the shared models and MobileNetV2)."""
    from ..ops.qelementwise import add_all_pairs
    m1, s1, m2, s2, mo, so = params
    codes, y = add_all_pairs(dt, za, zb, zc, params, lo, hi)
    top = 1 << 31
    # the input of the larger scale first: its MBQM is exact ((x - zp) * 2^19), so its
    # term is linear but for the shift's fraction; the other one's roundings go to the table
    order = (0, 1) if (m1, s1) == (1 << 30, 0) else (1, 0)
    for lin in (i for i in order if i in lins):
        yy, mx, sx = (y, m1, s1) if lin == 0 else (y.T, m2, s2)
        slope = mx * 2.0 ** (sx - 31) * 2.0 ** 20 * mo * 2.0 ** (so - 31)    # output codes per input code
        for m, cap in MLA_SHIFTS:
            low = np.where(yy <= lo, -top, yy << m)
            high = np.where(yy >= hi, top, (yy + 1) << m)       # exclusive
            a0 = int(round(slope * (1 << m)))
            cands = [c for c in sorted(range(a0 - MLA_SPAN, a0 + MLA_SPAN + 1), key=lambda v: abs(v - a0))
                     if abs(c) < cap]
            for i in range(0, len(cands), 16):
                al = np.array(cands[i:i + 16], np.int64)[:, None, None]
                ax = al * codes[None, :, None]
                tlo, thi = (low[None] - ax).max(1), (high[None] - ax).min(1)
                ok = (tlo < thi).all(1)
                if not ok.any():
                    continue
                j = int(np.argmax(ok))
                alpha, t = int(al[j, 0, 0]), (tlo[j] + thi[j] - 1) // 2
                v = alpha * codes[:, None] + t[None, :]
                if v.min() >= -top and v.max() < top and np.array_equal(np.clip(v >> m, lo, hi), yy):
                    return {"lin": lin, "m": m, "alpha": alpha, "t": t.astype(np.int32), "h16": abs(alpha) < 1 << 15}
    return None


def emit_qadd(op, node, ins, outs, k, params) -> bool:
    """QLinearAdd (fixed mode, int8, same-shape A, B and Y): one multiply-
    accumulate with a table of the other input (qadd_mla_dsp, 1 KB of flash
    per node, ~7 instructions per element on the M4), else two 256-entry
    tables of the inputs' scaled values (qadd_tab_dsp; 2 KB of flash per
    node, ~12.5 instructions per element)."""
    from ..ops.qelementwise import add_fast_plan
    p = params
    a, b, y = p["a"], p["b"], p["y"]
    if p["dt"] != "int8" or not (tuple(a.shape) == tuple(b.shape) == tuple(y.shape)):
        return False
    k.kernel("requant_fixed")       # intrin_dsp refers to its helpers
    k.kernel("intrin_dsp")
    mla = add_mla_plan(p["dt"], p["za"], p["zb"], p["zc"], p["params"], p["lo"], p["hi"])
    if mla is not None:
        x, u = (a, b) if mla["lin"] == 0 else (b, a)
        fn = k.kernel("qadd_mla_dsp", {"name": f"m{mla['m']}{'h' * mla['h16']}_{p['lo']}_{p['hi']}".replace("-", "n"),
                                       "m": mla["m"], "h16": mla["h16"], "lo": p["lo"], "hi": p["hi"]})
        k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {k.ptr(u)}, {y.size}, {mla['alpha']}, "
               f"{k.const(mla['t'], f'{node.name}_t')});")
        return True
    plan = add_fast_plan(p["dt"], p["za"], p["zb"], p["zc"], p["params"], p["lo"], p["hi"])
    if plan is None:
        return False
    ta, tb = add_tables(plan)
    vals = {f: plan[f] for f in ("mmr", "mo", "nh", "nl", "e", "c", "lo", "hi")}
    import hashlib
    tag = hashlib.sha1("_".join(f"{f}={vals[f]}" for f in sorted(vals)).encode()).hexdigest()[:10]
    fn = k.kernel("qadd_tab_dsp", {"name": tag, **vals})
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(a)}, {k.ptr(b)}, {y.size}, {k.const(ta, f'{node.name}_ta')}, "
           f"{k.const(tb, f'{node.name}_tb')});")
    return True


def emit_qconvt(op, node, ins, outs, k, p) -> bool:
    """cuvil.QConvTranspose: one qconvt_dsp call per output phase (dsp_convt.py)."""
    from . import dsp_convt
    return dsp_convt.emit(node, ins, outs, k, p)


def smmla_fit(n: int, want: np.ndarray, mult: int, sh: int, lo: int, hi: int):
    """kh with clamp(SMMLA(a 2^16, mult, kh) >> sh, lo, hi) = floor((a 2^16
    mult + kh 2^32) / 2^(32 + sh)), clamped, equal to want[a + 128 n] for
    every sum a of n int8 codes (a in -128 n .. 127 n), or None. (A halfword
    sum comes as a 2^16 with one instruction, as SXTH would give a, and the
    2^16 gives kh 16 more bits of resolution.) The kh range is solved
    exactly per sum (Python integers), then checked once more."""
    d = 1 << (32 + sh)
    lo_k, hi_k = -2 ** 31, 2 ** 31 - 1
    for a, w in zip(range(-128 * n, 127 * n + 1), want.tolist()):
        p = (a << 16) * mult
        if w > lo:      # u >= w: kh 2^32 >= w d - p
            lo_k = max(lo_k, -((p - w * d) >> 32))
        if w < hi:      # u < w + 1: kh 2^32 <= (w + 1) d - 1 - p
            hi_k = min(hi_k, ((w + 1) * d - 1 - p) >> 32)
        if lo_k > hi_k:
            return None
    got = [min(max(((x << 16) * mult + (lo_k << 32)) >> (32 + sh), lo), hi) for x in range(-128 * n, 127 * n + 1)]
    return lo_k if got == want.tolist() else None


def gap_smmla(n: int, bias: int, mult: int, shift: int, zp: int, lo: int, hi: int, single: bool):
    """(kh, sh) of smmla_fit for the global average's requantization
    (requantize_single or TFLM's requantize_fixed of a + bias, plus zp,
    clamped), sh = 31 - shift + 16 - 32; None when the divisor is below
    2^32 or no kh fits."""
    e = 31 - shift + 16
    if e < 32:
        return None
    a = np.arange(-128 * n, 127 * n + 1, dtype=np.int64)
    rq = quant.requantize_single if single else quant.requantize_fixed
    kh = smmla_fit(n, np.clip(rq(a + bias, mult, shift) + zp, lo, hi), mult, e - 32, lo, hi)
    return None if kh is None else (kh, e - 32)


def emit_qgap(op, node, ins, outs, k, params) -> bool:
    """QLinearGlobalAveragePool with requantization, int8, NHWC, at most 255
    pixels (int16 halfword sums of 4 channels a word, SXTAB16): qgap_dsp.
    Each sum requantized by one SMMLA and a shift where gap_smmla finds
    constants exact for every possible sum; else ONNX's one rounding
    (`single`) as a 64-bit product and rounding shift (while the sums'
    products stay below 2^31 after the shift), TFLM's MEAN through __mbqm."""
    v = dict(params)
    n, mult, shift = v["n"], v["mult"], v["shift"]
    if n > 255:
        return False
    v.update(bias=-v["xzp"] * n, xb=n * v["c"], avg=False)
    fit = gap_smmla(n, v["bias"], mult, shift, v["zp"], v["lo"], v["hi"], v["single"])
    v["kh"], v["sh"] = fit if fit is not None else (None, None)
    if v["single"] and fit is None:
        e = 31 - shift
        if (255 * n * mult) >> e >= 2 ** 31 - 256:
            return False
        v.update(e=e, k0=v["bias"] * mult, half1=(1 << (e - 1)) - 1)
    k.kernel("requant_fixed")       # __requant_single / __mbqm, and intrin_dsp refers to its helpers
    k.kernel("intrin_dsp")
    fn = k.kernel("qgap_dsp", {"name": "_".join(str(v[f]) for f in sorted(v)).replace("-", "m"), **v})
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(ins[0])});")
    return True


def emit_qavgpool(op, node, ins, outs, k, params) -> bool:
    """QLinearAveragePool, TFLM's recipe (equal parameters in and out), int8,
    NHWC, one window over the whole input without padding (VWW's 3x3 pool
    of a 3x3 map), at most 255 taps: qgap_dsp, TFLM's rounded division of
    each sum by n as SMMLA(a 2^16, round(2^30 / n), kh) >> 14 where
    smmla_fit finds kh exact for every possible sum (else the pool kernel)."""
    from ..ops.qpool import _tflm_div
    p = params
    x, y, tabs, xs = p["x"], p["y"], p["tabs"], p["nchw"]
    if x.dtype != "int8" or not p["channels_last"] or len(tabs) != 2 or len(xs) != 4:
        return False
    nb, c, h, w = xs
    for (t, d), size in zip(tabs, (h, w)):
        if d != 1 or t.shape[0] != 1 or [int(v) for v in t[0]] != [0, size, size]:
            return False
    n = h * w
    if n > 255:
        return False
    mult, sh = round(2 ** 30 / n), 14
    a = np.arange(-128 * n, 127 * n + 1, dtype=np.int64)
    kh = smmla_fit(n, np.clip(_tflm_div(a, n), p["lo"], p["hi"]), mult, sh, p["lo"], p["hi"])
    if kh is None:
        return False
    v = dict(nb=nb, c=c, n=n, xzp=0, zp=0, lo=p["lo"], hi=p["hi"], mult=mult, shift=0, single=False, avg=True,
             bias=0, xb=n * c, kh=kh, sh=sh)
    k.kernel("requant_fixed")       # intrin_dsp refers to its helpers
    k.kernel("intrin_dsp")
    fn = k.kernel("qgap_dsp", {"name": "_".join(str(v[f]) for f in sorted(v)).replace("-", "m"), **v})
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)});")
    return True
