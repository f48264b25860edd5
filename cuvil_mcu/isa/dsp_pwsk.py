"""Small-K pointwise int8 convolution on the DSP extension (qconv2_pwsk_dsp),
tried by dsp_conv.emit before the paired-channel kernels.

With K = 4 or 8 inputs per pixel the paired-channel block (qconv2_pwblk_dsp:
2 pixels x 4 channels a pass) spends more on each pass (biases, the hi/lo
extraction, the rows, the loop) than on its 8 MACs per output. Here the two
pixels' K inputs stay in registers as halfword pairs (2 x K/2 registers,
split once per pixel pair) and the layer's channels are unrolled one after
the other: per channel one stream record [2 bias, K/2 words of halfwords
(2 w[k_a], 2 w[k_b]) (dsp_conv.kpair_order's pairs), mult, nudge], K/2 SMLAD
a pixel (the first from the bias), then "fast" requantization of 2 acc
without the sign fix, (SMMLAR(2 acc, mult, nudge)) >> e with the channel's
own e as SSAT's immediate (one kernel per layer), and two byte stores at
immediate offsets (y, y + M). The weights are doubled (|2 w| <= 256 fits a
halfword) so the accumulator is 2 acc: no shift before SMMLAR.

Preconditions (else the paired-channel kernels run): 1x1, stride 1, no
padding, NHWC, C in (4, 8), M <= MAX_M (code: ~68 B a channel), the "fast"
requantization (|acc| < 2^30, so 2 acc fits int32) with SSAT's clamp and
the output zero point at the clamp's low end (then the rounding's sign fix
changes no output: dsp_conv.requant_fast2), every e in 1..31.

Order: pixel pairs from the first up, an odd last pixel alone last (its
input copied twice into arena scratch, its output copied back), or ("rev")
the odd last pixel first, then the pairs from the last down: the orders
planner/windows.raster(group=2) describes, as qconv2_dsp's.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..planner import windows
from ..ops.qgemm import int32_array

MAX_M = 64     # channels unrolled per layer (~68 B of code each for K = 8)


def requant(acc, mult, e, nudge) -> np.ndarray:
    """The kernel's output from acc (int64 numpy): sat8((SMMLAR(2 acc,
    mult, nudge)) >> e), SMMLAR(a, m, n) = n + floor((a m + 2^31) / 2^32)."""
    acc = np.asarray(acc, np.int64)
    s = ((2 * acc * np.asarray(mult, np.int64) + (np.int64(1) << 31)) >> 32) + np.asarray(nudge, np.int64)
    return np.clip(s >> np.asarray(e, np.int64), -128, 127)


def stream(wr: np.ndarray, folded: np.ndarray, table: np.ndarray) -> np.ndarray:
    """int64 [channel][1 + K/2 + 2]: 2 bias, the K/2 words (low halfword 2
    w[k_a], high 2 w[k_b], the pairs of kpair_order), mult, nudge."""
    from .dsp_conv import kpair_order
    m, kk = wr.shape
    hw = (2 * wr[:, kpair_order(kk)]).astype(np.int16)                 # [m][K/2][2]
    words = np.ascontiguousarray(hw).view(np.int32)[..., 0].astype(np.int64)
    t = np.asarray(table, np.int64).reshape(m, 3)
    return np.concatenate([2 * np.asarray(folded, np.int64)[:, None], words, t[:, [0, 2]]], axis=1)


def emit(node, x, outs, k, p, wr, folded, mode, table, sat: bool) -> bool:
    """The qconv2_pwsk_dsp call for a pointwise layer when the preconditions
    hold (wr [M][K] weights minus their zero point, folded the bias with
    -x_zp sum w, table the "fast" rows [mult, e, nudge] per channel)."""
    geo = p.geo
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    m, c = geo.m, geo.c
    if not (kh == kw == 1 and geo.strides == (1, 1) and tuple(geo.pad_begin) == (0, 0) and (oh, ow) == (h, wd)):
        return False
    if c not in (4, 8) or m > MAX_M or mode != "fast" or not sat or int(p.rq.lo) < int(p.rq.zp):
        return False
    t = np.asarray(table, np.int64).reshape(m, 3)
    if t[:, 1].min() < 1 or t[:, 1].max() > 31 or t[:, 0].min() < 0:
        return False
    folded = int32_array(node, folded, "bias with the input zero point folded in").astype(np.int64)
    if np.abs(folded).max(initial=0) >= 2 ** 30:
        return False
    st = stream(wr, folded, t)
    es = [int(e) for e in t[:, 1]]
    npx, nb = oh * ow, geo.n
    rev = k.variant() == "rev"
    tag = hashlib.sha1(repr((c, m, es)).encode()).hexdigest()[:10]
    k.kernel("requant_fixed")     # (intrin_dsp's helpers come after it, as qconv2_dsp's)
    k.kernel("intrin_dsp")
    k.kernel("intrin_conv_dsp")
    name = f"k{c}_m{m}_{tag}" + ("_rev" if rev else "")
    fn = k.kernel("qconv2_pwsk_dsp", {"name": name, "nkp": c // 2, "c": c, "m": m, "es": es, "rev": rev})
    ssym = k.const(st.reshape(-1).astype(np.int32), f"{node.name}_pwsk")
    # an odd pixel count: the last pixel's input twice and its two outputs in arena scratch
    buf = k.scratch_buf(2 * c + 2 * m, "int8_t") if npx % 2 else "(int8_t *)0"
    k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, what="qconv2_pwsk_dsp: pixel pairs"))
    k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, reverse=True,
                                      what="qconv2_pwsk_dsp: pixel pairs from the last down"), "rev")
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {ssym}, {nb}, {npx}, {buf});")
    return True
