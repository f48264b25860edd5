"""Grouped int8 convolutions (1 < groups, more than one input channel per
group: ShuffleNet's 1x1 group convolutions, ResNeXt's 3x3 ones) on the DSP
extension: kernels/qgconv_dsp.c.j2, tried by dsp.emit_qconv for grouped
layers (else the portable kernel runs them).

The arithmetic is qconv2_dsp's (dsp_conv.py: paired-channel halfwords, two
output pixels x two channel pairs per pass, 14 instructions per 16 MACs);
what is particular to groups is where each group's K inputs come from.
Per kernel tap a pixel's C channels are one run of bytes in NHWC; group g
owns bytes [g cg, (g + 1) cg) of it, which need not start or end on a
4-byte boundary. The kernel reads each run as 4-byte chunks (split into
halfword pairs with SXTB16 as qconv2_dsp does) and gives group g the chunks
[a_g, a_g + n_g) that hold its channels: its K vector is n_g * 4 bytes per
tap, the weights of the other groups' channels in its first and last chunk
are zero (so they add nothing whatever those bytes hold), and the K-pairs
of a tap are those of dsp_conv.kpair_order. With C % 4 != 0 the last chunk
of a run is read byte by byte (no read past the run). Output channels are
padded to a multiple of 4 per group (zero weights, stored to a real
channel of the block before it, as qconv2_dsp does); every store row of
the records carries its output channel, so a channel shuffle folded into
the layer (ops.conv.out_channels) costs nothing.

Handled: what dsp.emit_qconv handles (fixed requantization, NHWC, int8 in
and out, dilation 1, 2-D) with weights within int8 after their zero point,
the pairing's preconditions met by every channel pair (dsp_conv.pair_ok),
the accumulator bound within int32 and the split activations of a pass
(16 bytes per chunk of every group and tap) within MAX_XE. Else False.
"""
from __future__ import annotations

import numpy as np

from ..ops.qgemm import int32_array, offset_weights
from ..planner import windows
from . import dsp, dsp_conv

FIELDS = ("nb", "npx", "ow_n", "h", "w_n", "c", "kh_n", "kw_n", "sh", "sw", "pt", "pl", "m_n", "ng", "nblk",
          "xzp", "yzp", "lo", "hi")
MAX_XE = 4096   # bytes of the split activations of a pass (arena scratch)


def chunks(c: int, groups: int) -> list[tuple[int, int]]:
    """(first chunk a_g, chunk count n_g) of each group's bytes in a run of c."""
    cg = c // groups
    return [(g * cg // 4, -(-(g + 1) * cg // 4) - g * cg // 4) for g in range(groups)]


def group_weights(wq: np.ndarray, geo, g: int, a: int, n: int) -> np.ndarray:
    """Group g's weights [mg][tap][4 n] int64 on its chunks: channel ci of the
    group sits at byte g cg + ci - 4 a of its chunks, zeros elsewhere."""
    kh, kw = geo.k
    mg, cg = geo.mg, geo.cg
    out = np.zeros((mg, kh * kw, 4 * n), np.int64)
    at = g * cg - 4 * a
    wg = wq[g * mg:(g + 1) * mg].astype(np.int64)                          # [mg][cg][kh][kw]
    out[:, :, at:at + cg] = wg.reshape(mg, cg, kh * kw).transpose(0, 2, 1)
    return out


def emit(node, x, w, outs, k, p) -> bool:
    """The qgconv_dsp call for a grouped convolution when its preconditions hold."""
    geo = p.geo
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    m, c, ng, mg = geo.m, geo.c, geo.group, geo.mg
    taps = kh * kw
    parts = chunks(c, ng)
    offs = np.cumsum([0] + [4 * taps * n for _, n in parts])                # words of xe per group
    if 4 * int(offs[-1]) > MAX_XE:
        return False
    wq = offset_weights(np.asarray(w.data).reshape(m, geo.cg, kh, kw), p.w_zp, 0)
    if wq.dtype != np.int8:
        return False
    # the real weights [m][K] (for the bound and the constant channels), then per group on its chunks
    dense = wq.astype(np.int64).reshape(m, geo.cg, taps).transpose(0, 2, 1).reshape(m, -1)
    bias = p.bias if p.bias is not None else np.zeros(m, np.int64)
    folded = bias - p.x_zp * dense.sum(axis=1)
    bound = dsp_conv.acc_bound(dense, folded)
    if bound > 2 ** 31 - 1:
        return False
    mode, mult, second = dsp._requant(p.rq, bound, m)
    if mode != "fast":
        dense, folded, bound, fast = dsp_conv.constant_channels(dense, folded, p.rq, dsp)
        if fast is not None:
            mode, mult, second = fast
            wq = dense.reshape(m, taps, geo.cg).transpose(0, 2, 1).reshape(wq.shape)
    folded = int32_array(node, folded, "bias with the input zero point folded in").astype(np.int64)
    pos = p.ochan if p.ochan is not None else np.arange(m)
    m4 = -(-mg // 4) * 4
    words, recs = [], []
    for g, (a, n) in enumerate(parts):
        wpad = np.zeros((m4, taps * 4 * n), np.int64)
        wpad[:mg] = group_weights(wq, geo, g, a, n).reshape(mg, -1)
        pairs = dsp_conv.pair_channels(wpad)
        if pairs is None:
            return False
        sl = slice(g * mg, (g + 1) * mg)
        if mode == "fast":
            gm, gs = np.asarray(mult, np.int64).reshape(m, 3)[sl].reshape(-1), None
        else:
            gm, gs = np.asarray(mult)[sl], np.asarray(second)[sl]
        rec = dsp_conv.records(pairs, folded[sl], mg, mode, gm, gs).reshape(-1, 4 + 4 * (3 if mode == "fast" else 2))
        rw = 3 if mode == "fast" else 2
        for j in range(4):           # the store rows' channels: the group's, at their output positions
            col = rec[:, 4 + j * rw + 1]
            rec[:, 4 + j * rw + 1] = (col & 0xFF) | (pos[g * mg + (col >> 8)] << 8)
        words.append(dsp_conv.pack_weights(wpad, pairs))
        recs.append(rec.reshape(-1))
    sat = dsp._sat(p.rq)
    vals = dict(nb=geo.n, npx=oh * ow, ow_n=ow, h=h, w_n=wd, c=c, kh_n=kh, kw_n=kw, sh=sh, sw=sw, pt=pt, pl=pl,
                m_n=m, ng=ng, nblk=m4 // 4, xzp=p.x_zp, yzp=p.rq.zp, lo=p.rq.lo, hi=p.rq.hi)
    table = np.array([[offs[g], 2 * taps * n, a, n] for g, (a, n) in enumerate(parts)], np.int64)
    k.kernel("requant_fixed")
    k.kernel("intrin_dsp")
    k.kernel("intrin_conv_dsp")
    pw = kh == kw == 1 and pt == pl == 0 and (oh - 1) * sh < h and (ow - 1) * sw < wd
    rev = k.variant() == "rev"
    tail = c % 4 != 0
    name = f"{mode}{'s' * sat}" + ("_pw" if pw else "") + ("_t" if tail else "") + ("_rev" if rev else "")
    fn = k.kernel("qgconv_dsp", {"name": name, "rq": mode, "sat": sat, "fields": FIELDS, "pw": pw, "rev": rev,
                                 "tail": tail, "rw": 3 if mode == "fast" else 2})
    wsym = k.const(np.concatenate(words).astype(np.int32), f"{w.name}_dspg")
    rsym = k.const(np.concatenate(recs).astype(np.int32), f"{node.name}_pairs")
    gsym = k.const(np.array([vals[f] for f in FIELDS], np.int32), "qgconv_dsp_geo")
    tsym = k.const(table.reshape(-1).astype(np.int32), "qgconv_dsp_groups")
    buf = k.scratch_buf(4 * int(offs[-1]), "int32_t")
    # every input of a pass (pixel pair) is split before any of its outputs is written
    k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, what="qgconv_dsp: pixel pairs"))
    k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, reverse=True,
                                      what="qgconv_dsp: pixel pairs from the last down"), "rev")
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {rsym}, {gsym}, {tsym}, {buf});")
    return True
