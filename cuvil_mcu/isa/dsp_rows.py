"""First-layer int8 convolution on the DSP extension that reads the window
rows straight from the input (qconvr_dsp), tried by dsp_conv.emit before
its gather for layers with C % 4 != 0 (1 to 3 input channels: audio
spectrograms, images).

With kw * C = ll bytes per window row and ll % 4 == 0, each row is ll / 4
whole words of the input (unaligned LDR is legal on ARMv7E-M / ARMv8-M
Mainline): SXTB16 of a word gives taps (0, 2), SXTB16 ror 8 taps (1, 3),
each a halfword pair that feeds one SMLAD per output channel against a
word of int16 weights in the same order. So no split activations: the
paired-channel kernel's 4 K bytes of arena scratch (micro_speech: 320 B
next to a 4,160 B buffer) disappear, and with them the gather's row
pointers. One pixel per pass, 8 output channels per block (8 accumulators,
the whole K loop unrolled in assembly: 14 instructions per 16 MACs), "fast"
requantization with SSAT in the same function. Weights and bias are stored
doubled (|2 w| <= 256 fits a halfword; the "fast" bound |acc| < 2^30
keeps 2 acc in int32), so the accumulators already hold SMMLAR's 2 acc.
A pixel whose window leaves the input reads a copy of its window (kh * ll
bytes, x_zp outside): arena scratch where the leanest plan has that room,
else the stack. With more than one block every window is copied first, so
a pixel's window is read before any of its outputs is written (the
planner's model: raster, one pixel per pass, all channels at once).

When dsp_conv.emit takes it: where the gather's buffers (split
activations of 2 pixels, row pointers, border copies) do not fit the
leanest plan's free bytes at this step (Emitter.scratch_free), e.g.
micro_speech (8 free bytes; RAM on the M4 4,796 -> 4,340 B, 1.643 ->
1.201 instructions/MAC, cycles about equal). Where they fit (KWS) the
gather stays: it loads each weight word once for 2 pixels, so it needs
fewer cycles (KWS's first conv: 480 k against 601 k estimated M4 cycles,
though 412 k against 359 k instructions), and keeps 1 byte of flash per
weight (here 2).

Handled: what dsp_conv.emit handles, C % 4 != 0, ll % 4 == 0, W * C >= 4,
M % 8 == 0, K <= dsp_conv.GATHER_MAX, "fast" requantization with the
clamp at int8's range (SSAT). Else dsp_conv's kernels run.
"""
from __future__ import annotations

import numpy as np

from ..ops.qgemm import int32_array
from ..planner import windows

FIELDS = ("nb", "oh_n", "ow_n", "h", "w_n", "c", "kw_n", "sh", "sw", "pt", "pl", "m_n", "xzp")
BLOCK = 8     # output channels per block (8 accumulators)


def pack(wr: np.ndarray, folded: np.ndarray, table: np.ndarray, kh: int, ll: int) -> np.ndarray:
    """int32 words per block of 8 channels: 2 bias[8]; per row r, 4-byte
    group g and half (taps 4g + half, 4g + half + 2 of the row) the word
    of halfwords (2 w[ch][k], 2 w[ch][k + 2]) per channel; then the rows
    (mult, e, nudge) of the 8 channels. wr [M][kh * ll] (minus the weight
    zero point), folded [M] the bias with -x_zp * sum(w), table [M * 3]."""
    m = wr.shape[0]
    g = np.arange(ll // 4)
    k0 = (np.arange(kh)[:, None, None] * ll + 4 * g[None, :, None] + np.arange(2)[None, None, :]).reshape(-1)
    lo, hi = 2 * wr[:, k0], 2 * wr[:, k0 + 2]                            # [M][taps pairs]
    words = (lo.astype(np.int16).astype(np.uint16).astype(np.uint32)
             | (hi.astype(np.int16).astype(np.uint16).astype(np.uint32) << 16)).view(np.int32)
    rows = np.asarray(table, np.int64).reshape(m, 3)
    out = []
    for b in range(0, m, BLOCK):
        out += [2 * np.asarray(folded[b:b + BLOCK], np.int64),
                words[b:b + BLOCK].T.reshape(-1).astype(np.int64),
                rows[b:b + BLOCK].reshape(-1)]
    return np.concatenate(out)


def emit(node, x, wr, folded, mode, table, sat, outs, k, p) -> bool:
    """The qconvr_dsp call when its preconditions hold; wr [M][K], folded,
    (mode, table) as dsp_conv.emit computed them (after its
    constant-channel fix)."""
    geo = p.geo
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    m, c = geo.m, geo.c
    ll = kw * c
    if c % 4 == 0 or ll % 4 or wd * c < 4 or m % BLOCK or mode != "fast" or not sat:
        return False
    folded = int32_array(node, folded, "bias with the input zero point folded in").astype(np.int64)
    words = pack(wr, folded, table, kh, ll)
    corr = int(p.rq.lo) < int(p.rq.zp)       # the rounding's sign fix matters only above the clamp's low end
    brd = kh * ll
    arena = brd <= k.scratch_free()         # the border copy where the leanest plan has room, else the stack
    vals = dict(nb=geo.n, oh_n=oh, ow_n=ow, h=h, w_n=wd, c=c, kw_n=kw, sh=sh, sw=sw, pt=pt, pl=pl, m_n=m,
                xzp=p.x_zp)
    copyall = m > BLOCK                     # every window copied first: read before any output is written
    k.kernel("requant_fixed")
    k.kernel("intrin_dsp")
    k.kernel("intrin_conv_dsp")
    fn = k.kernel("qconvr_dsp", {"name": f"{kh}x{ll}" + "c" * corr + "a" * arena + "w" * copyall,
                                 "kh": kh, "ll": ll, "corr": corr, "arena": arena, "copyall": copyall, "one": not copyall,
                                 "fields": FIELDS})
    wsym = k.const(np.concatenate([[words.size], words]).astype(np.int32), f"{node.name}_rows")
    gsym = k.const(np.array([vals[f] for f in FIELDS], np.int32), "qconvr_dsp_geo")
    bs = k.scratch_buf(brd, "int32_t") if arena else "(int32_t *)0"
    k.order(0, lambda: windows.raster(geo, False, group=1, cblock=0, what="qconvr_dsp: pixels"))
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {gsym}, {bs});")
    return True
