"""Helium (M-profile Vector Extension, Cortex-M55) int8 kernels.

Selected by cuvil_mcu/isa when the board has `isa.mve`. Handled: int8
activations, int8 weights (after the zero point is subtracted), int8 output,
fixed-point requantization, NHWC (channels_last 1). Every kernel is
rendered for its layer's constant shapes (one function per distinct
geometry; identical layers share it):
- convolutions with groups = 1 (any kernel, stride, padding, row dilation;
  column dilation 1 unless the kernel is 1x1) and QGemm / QLinearMatMul with
  a constant B (one batch entry, no transA): `qdot_mve` — dot products over
  the window (kernel rows x kernel columns x channels, contiguous in NHWC),
  16 int8 MACs per VMLADAVA, 2 pixels x 4 output channels per pass; the
  chunk loop is inline asm with the 8 sums pinned to the even registers
  VMLADAV writes (GCC otherwise spills), unrolled up to 4 chunks.
  Weights are stored interleaved per group of 4 channels, chunk by chunk of
  16, zero padded. A window that is not contiguous in x is copied first
  (im2col into a stack buffer, 2 x kk rounded up to 16 bytes, taps outside
  the input filled with x_zp, so -x_zp * sum(w) folded into the bias is right
  for every pixel); a 1x1 kernel without padding reads x directly, its last
  partial chunk tail-predicated (VCTP).
- grouped convolutions (1 < groups, more than one input channel per
  group): `qgdot_mve` (mve_group.py) — qdot_mve's arithmetic on each
  group's window, both pixels' windows of every group copied first.
- depthwise convolutions with channel multiplier 1 whose window, in the
  ring below, fits 16 bytes ((kw-1)*dw+1 columns x (kh-1)*dh+1 rows, so
  3x3, 2x2 dilated, 1xk ...): `qdwdot_mve` — input rows copied (8-byte
  loads, VSTRB.16 scatters) into a ring of padded rows stored channel-major,
  rb[c][column][slot], so one pixel's window of one channel is one 16-byte
  load and one VMLADAVA against that channel's weights (gathered once per
  output row into the ring's lane order, VLDRB gather with a per-rotation
  offset table); 4 channels of a pixel form one vector for the requant
  (the pixel loop in asm: 19 instructions per 4 outputs for a 3x3 kernel
  with a Relu, every Q register in use). The ring holds one group of
  channels at a time: the whole layer runs for the group's channels, then
  for the next (all channels when their ring fits the arena free at this
  step in the leanest plan, else the most that fit, at least DW_MIN_GROUP:
  KWS 25x5x64 with 16: 352 B of ring instead of 1,360). Each input row is
  read once, as it enters the ring, so output row y may replace input rows
  up to y + 1 (planner/windows.rows: in place, where the pixel-by-pixel
  order needed the output a row and a pixel behind its input); the plain C
  path runs the same ring. Geometry at run time: one
  function per (stride x ring rows, requant flags) for all layers. The
  -1 rounding fix-up is dropped when the clamp sends every negative value
  to lo >= 0; the clamp is a saturating narrow when it is int8's range.
- other depthwise convolutions with channel multiplier 1: `qdwconv_mve` —
  vectorised across channels, 8 per pass (VLDRB.S16 widening loads,
  VMULLB/VMULLT to int32 lanes), every tap unrolled, weights stored
  [C/8][kh][kw][8], the input offset folded into the bias for every pixel;
  rows copied into a ring of padded rows ([C/8][columns][8] per row, x_zp
  outside the input) so that every pixel takes the same path, 2 pixels per
  pass (sharing weight loads, and input loads of adjacent taps at stride 1).
  A model with more than GENERIC_DW_ABOVE distinct depthwise geometries
  (MobileNets) uses `qdwconv_gen_mve` instead: the same arithmetic, one
  function per kernel size with the geometry and tap offsets in const
  tables (a few instructions more per tap, ~1 KB of code less per layer).
- QLinearAdd, fixed mode, int8, same-shape operands: `qadd_mve`, TFLM's
  recipe in int32 lanes, 4 elements per vector (VMLAS for (x - zp) * 2^20,
  VQRDMULH, VRSHL, output requant, zero point, clamp, narrowing store); the
  -1 fix-ups of the half-away rounding are dropped where an exhaustive
  check over all 256 x 256 input pairs (numpy model of the instructions vs
  the reference) shows they never matter; other broadcasts fall back.
- QLinearAveragePool, TFLM recipe (same in/out parameters), int8, NHWC,
  2-D, at most 255 taps: `qavgpool_mve`, int16 lane sums of 8 channels, the
  rounding division as a multiply by ceil(2^31 / cnt) (exact, checked).
Requantization is vectorised, 4 channels per vector (requant_mve: VQSHL,
VQRDMULH, a -1 fixup for negative values, VRSHL), bit-exact with
quant.requantize_fixed (tested on QEMU, incl. every rounding tie); a
layer whose shifts are all < 0 (rneg) skips the VAND of the fix-up. Anything
else (float requant, uint8 activations, int16 weights, NCHW, grouped
non-depthwise convolutions, channel multiplier > 1, int32 outputs, wide
windows) returns False: the portable kernel is used.

The kernels keep a plain C path under `#else` of the MVE feature test, so
the header compiles (and computes the same) with any C/C++ compiler.
"""
from __future__ import annotations

import numpy as np

from ..planner import windows

from ..ops.qgemm import check_acc, check_index, int32_array, offset_range, offset_weights

MAX_WINDOW = 2048   # bytes of one im2col window (the stack buffer holds two)


def _lane8(v) -> np.ndarray:
    """Per-channel values padded to a multiple of 8 (zeros) and permuted to
    the depthwise kernel's lane order: per block of 8, channels 0,2,4,6,1,3,5,7."""
    v = np.asarray(v, np.int64)
    pad = np.zeros(-(-v.size // 8) * 8, np.int64)
    pad[:v.size] = v
    return pad.reshape(-1, 4, 2).transpose(0, 2, 1).reshape(-1)


def _requant_arrays(k, rq, name: str, perm=None) -> str:
    """mult (int32), lsh = max(shift, 0), rsh = min(shift, 0) (int8: shifts
    lie in -31..30) as const arrays; lsh is a null pointer when no channel
    shifts left (the kernel variant does not read it)."""
    f = perm or (lambda v: v)
    # clipped into int8: a rounding right shift by 33 or more of an int32 gives 0, like any larger one
    shift = np.clip(np.asarray(rq.shift, np.int64), -128, 127)
    lsh = (k.const(f(np.maximum(shift, 0)).astype(np.int8), f'{name}_lsh') if np.any(shift > 0)
           else "(const int8_t *)0")
    return (f"{k.const(f(np.asarray(rq.mult, np.int64)).astype(np.int32), f'{name}_mult')}, {lsh}, "
            f"{k.const(f(np.minimum(shift, 0)).astype(np.int8), f'{name}_rsh')}")


def _helpers(k, copy: bool = False) -> None:
    k.kernel("mve_kernel")
    k.kernel("requant_mve")
    if copy:
        k.kernel("copy_mve")


def emit_qconv(op, node, ins, outs, k, params) -> bool:
    p = params
    geo = p.geo
    x, w = ins[op.X], ins[op.W]
    if (not p.cl or p.rq.mode != "fixed" or x.dtype != "int8" or outs[0].dtype != "int8"
            or p.rq.mult is None or p.rq.shift is None):
        return False
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (dh, dw) = geo.strides, geo.dilations
    (pt, pl) = geo.pad_begin
    wq = offset_weights(np.asarray(w.data).reshape(geo.m, geo.cg, kh, kw), p.w_zp, 0)
    if wq.dtype != np.int8:
        return False
    depthwise = geo.cg == 1 and geo.group > 1
    bias = p.bias if p.bias is not None else np.zeros(geo.m, np.int64)
    wsum = wq.astype(np.int64).reshape(geo.m, -1).sum(axis=1)
    folded = bias - p.x_zp * wsum
    sx = (h * wd * geo.c, wd * geo.c, geo.c)
    lo, hi = p.rq.lo - p.rq.zp, p.rq.hi - p.rq.zp
    wmax = int(np.abs(wq.astype(np.int64)).max()) if wq.size else 0
    check_acc(node, int(max(np.abs(bias).max(), np.abs(folded).max()))
              + geo.cg * kh * kw * wmax * max(offset_range(x.dtype, -p.x_zp), offset_range(x.dtype, 0)))
    if geo.group > 1 and geo.cg > 1:   # grouped (mve_group.py: qgdot_mve), channel shuffle folded in or not
        from . import mve_group
        return mve_group.emit(node, k, geo, p, wq, folded, x, outs[0], w.name)
    if p.ochan is not None:   # (passes/fold_shuffle.py sets it on grouped layers only)
        return False
    if depthwise:
        if geo.mg != 1:
            return False
        if _emit_dwdot(node, k, geo, p, wq, folded, x, outs[0], w.name):
            return True
        return _emit_depthwise(node, k, geo, p, wq, bias, folded, x, outs[0], w.name)
    if geo.group != 1:
        return False
    direct = kh == 1 and kw == 1 and pt == 0 and pl == 0 and geo.pad_end == (0, 0)
    if not direct and (dw != 1 or geo.c * kh * kw > MAX_WINDOW):
        return False
    kk = geo.c * kh * kw
    if direct and _emit_pw(node, k, geo, p, wq, folded, x, outs[0]):
        return True
    from ..ops.conv import _border_tables
    oha, ohb, _ = _border_tables(h, oh, kh, sh, dh, pt)
    owa, owb, _ = _border_tables(wd, ow, kw, sw, dw, pl)
    wk = wq.transpose(0, 2, 3, 1).reshape(geo.m, kk)   # [M][kh][kw][C]
    b = int32_array(node, _pad4(folded), "bias with the input zero point folded in")
    vals = dict(nb=geo.n, oh_n=oh, ow_n=ow, kh_n=kh, kw_n=kw, sh=sh, sw=sw, pt=pt, pl=pl, dh=dh, ih_n=h, iw_n=wd,
                cin=geo.c, m_n=geo.m, kk=kk, kk16=-(-kk // 16) * 16, direct=int(direct), sbias=0,
                oha=oha, ohb=ohb, owa=owa, owb=owb,
                sxb=sx[0], sxh=sx[1], sxw=sx[2], xzp=p.x_zp, yzp=p.rq.zp, lo=lo, hi=hi,
                lsh=int(np.any(np.asarray(p.rq.shift) > 0)), rneg=int(np.all(np.asarray(p.rq.shift) < 0)))
    if not _emit_pairs(node, k, geo, p, wk, folded, x, outs[0], w.name, k.variant() == "rev", None if direct else vals):
        _emit_qdot(k, node, vals, k.ptr(outs[0]), k.ptr(x), k.const(_interleave(wk), f"{w.name}_mve"),
                   k.const(b, f"{node.name}_bias"), p.rq, rev=k.variant() == "rev")
    # pixel pairs (either way); a direct kernel reads x again for each block of
    # 4 channels (the plain C of other targets: pixel after pixel), an im2col
    # one copies both windows first
    for rev in (False, True):
        k.order(0, lambda rev=rev: windows.raster(
            geo, False, group=2, cblock=4 if direct else 0, reverse=rev, seq=direct,
            what=f"qdot_mve: pixel pairs{', 4 channels per read' if direct else ''}{' from the last down' if rev else ''}"),
            "rev" if rev else None)
    return True


def _emit_pw(node, k, geo, p, wq, folded, x, y) -> bool:
    """1x1 convolution, stride 1, K <= 16 input channels, through qpw_mve
    (per block of 4 output channels, every pixel: the block's weights and
    requantization constants stay in registers); False when the layer is
    not of that kind or its requantization needs what the kernel leaves out
    (a left shift; the rounding fix-up with some shift 0)."""
    # clipped: VRSHL reads the shift from each lane's low byte (a right shift by 33 or more gives 0, as by 128)
    shift = np.clip(np.broadcast_to(np.asarray(p.rq.shift, np.int64), (geo.m,)), -128, 127)
    lo, hi = p.rq.lo - p.rq.zp, p.rq.hi - p.rq.zp
    rneg = bool(np.all(shift < 0))
    npx = geo.n * geo.out_hw[0] * geo.out_hw[1]
    if (geo.c > 16 or geo.m % 4 or geo.n != 1 or geo.strides != (1, 1) or np.any(shift > 0)
            or (lo < 0 and not rneg) or npx > 65535):
        return False
    nblk = geo.m // 4
    w16 = np.zeros((geo.m, 16), np.int8)
    w16[:, :geo.c] = wq.reshape(geo.m, geo.c)
    b = int32_array(node, folded, "bias with the input zero point folded in")
    q = np.concatenate([w16.reshape(nblk, 64).view(np.int32), b.reshape(nblk, 4),
                        np.broadcast_to(np.asarray(p.rq.mult, np.int64), (geo.m,)).astype(np.int32).reshape(nblk, 4),
                        np.minimum(shift, 0).astype(np.int32).reshape(nblk, 4)], axis=1)
    vals = dict(P=npx, K=geo.c, M=geo.m, zp=p.rq.zp, lo=lo, hi=hi, fix=int(lo < 0),
                sat=int(lo == -128 - p.rq.zp and hi == 127 - p.rq.zp))
    _helpers(k)
    fn = k.kernel("qpw_mve", {"name": _variant_name("s8", vals), **vals})
    # per block of 4 channels, every pixel in turn (one pass of all pixels, blocks in it, seq)
    k.order(0, lambda: windows.raster(geo, False, group=npx, cblock=4, seq=True,
                                      what="qpw_mve: per 4 channels, pixel after pixel"))
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {k.const(np.ascontiguousarray(q), f'{node.name}_pw')});")
    return True


def _emit_pairs(node, k, geo, p, wk, folded, x, y, wname, rev: bool, im2col: dict | None = None) -> bool:
    """1x1 convolution, stride 1, 16 <= K <= 143 (or <= 524, word-aligned pixels), M % 4 == 0, batch 1:
    qdotp_mve (qdot_mve's pixel pairs, the pass over all channel blocks in
    one asm statement, the second pixel read at an offset of K); False when
    the layer is not of that kind or needs a left shift. Same loop order as
    qdot_mve (the caller declares it)."""
    shift = np.clip(np.broadcast_to(np.asarray(p.rq.shift, np.int64), (geo.m,)), -128, 127)
    lo, hi = p.rq.lo - p.rq.zp, p.rq.hi - p.rq.zp
    npx = geo.out_hw[0] * geo.out_hw[1]
    kk = wk.shape[1]
    if im2col is not None:   # a window copied per pixel into a 16-aligned buffer, kk16 bytes apart (VLDRW beyond 143)
        if im2col["kk16"] > 524 or kk < 16 or geo.m % 4 or geo.n != 1 or np.any(shift > 0) or npx < 2:
            return False
    else:
        # the second pixel's chunk at an offset of K - 16 from the first's: VLDRB's reach (127), or
        # VLDRW's (508) for word-aligned pixels (K % 4 == 0 in the 16-aligned arena, not a model input)
        wide = 143 < kk <= 524 and kk % 4 == 0 and x.name not in k.graph.inputs
        if (not (16 <= kk <= 143 or wide) or geo.m % 4 or geo.n != 1 or geo.strides != (1, 1)
                or np.any(shift > 0) or npx < 2):
            return False
    sat = int(lo == -128 - p.rq.zp and hi == 127 - p.rq.zp)
    fix = 0 if lo >= 0 else (2 if np.all(shift < 0) else 1)
    nblk = geo.m // 4
    cols = [int32_array(node, folded, "bias with the input zero point folded in"),
            np.broadcast_to(np.asarray(p.rq.mult, np.int64), (geo.m,)), np.minimum(shift, 0)]
    if not sat:
        cols += [np.full(geo.m, hi), np.full(geo.m, lo), np.full(geo.m, p.rq.zp)]
    q = np.concatenate([np.asarray(c, np.int64).reshape(nblk, 4) for c in cols], axis=1).astype(np.int32)
    # per block of 4 channels: its weights ([chunk][4][16] bytes, as int32 words), then q's row
    q = np.concatenate([_interleave(wk).reshape(nblk, -1).view(np.int32), q], axis=1)
    vals = dict(P=npx, K=kk, M=geo.m, NF=kk // 16, T=kk % 16, zp=p.rq.zp, lo=lo, hi=hi, fix=fix, sat=sat,
                rev=int(rev), im2col=int(im2col is not None))
    if im2col is not None:   # every chunk of the padded window is loaded whole (zero weights past kk)
        vals.update({f: im2col[f] for f in ("oh_n", "ow_n", "kh_n", "kw_n", "sh", "sw", "pt", "pl", "dh", "ih_n",
                                             "iw_n", "cin", "sxb", "sxh", "sxw", "xzp", "oha", "ohb", "owa", "owb",
                                             "kk16")}, NF=im2col["kk16"] // 16, T=0)
    _helpers(k, copy=im2col is not None)
    fn = k.kernel("qdotp_mve", {"name": _variant_name("s8", vals), **vals})
    buf = f", {k.scratch_buf(2 * im2col['kk16'])}" if im2col is not None else ""
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {k.const(np.ascontiguousarray(q), f'{wname}_pq')}{buf});")
    return True


# Most bytes of the padded-row ring of the depthwise kernels (arena
# scratch); a wider layer is done in strips of output columns.
DW_RING_BYTES = 4096


def _dw_strip(geo, nr: int, pairs: bool, limit: int = DW_RING_BYTES):
    """(strip width in output columns, padded columns per strip) with the
    ring (nr rows of [C/8][columns][8]) within DW_RING_BYTES, or None.
    pairs: an odd strip's last pixel is computed as a pair (one more column
    of pixels read)."""
    (_, ow), (_, kw) = geo.out_hw, geo.k
    sw, dw = geo.strides[1], geo.dilations[1]
    cp = -(-geo.c // 8) * 8

    def cols(s):
        return (s + (s % 2 if pairs else 0) - 1) * sw + (kw - 1) * dw + 1
    if nr * cols(ow) * cp <= limit:
        return ow, cols(ow)
    for s in range(ow - 1 - (ow - 1) % 2, 0, -2):   # even strips: every pass a pair
        if nr * cols(s) * cp <= limit:
            return s, cols(s)
    return (1, cols(1)) if nr * cols(1) * cp <= limit else None


def _emit_dwdot(node, k, geo, p, wq, folded, x, y, wname) -> bool:
    """Depthwise QLinearConv (channel multiplier 1) through qdwdot_mve when a
    window fits 16 bytes of its channel-major ring (one VMLADAVA per pixel
    and channel); False otherwise."""
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (dh, dw) = geo.strides, geo.dilations
    (pt, pl) = geo.pad_begin
    nr = (kh - 1) * dh + 1
    span = (kw - 1) * dw + 1
    if span * nr > 16 or sw * nr > 127 or h + pt + oh * sh >= 2 ** 15:   # ring tags are int16
        return False
    c8 = -(-geo.c // 8) * 8

    def cols(s):
        return (s - 1) * sw + span

    def ring(s, cg=c8):   # bytes of rb: [cg rounded up to 8][cols][nr], rounded up to 16, + 16 (loads past the end)
        return -(-(-(-cg // 8) * 8) * cols(s) * nr // 16) * 16 + 16
    cg = _dw_ring_group(geo.c, lambda cg: ring(ow, cg), k.scratch_free())
    strips = [s for s in [ow] + list(range(ow - 1, 0, -1)) if ring(s, cg) <= DW_RING_BYTES]
    if not strips or 7 * cols(strips[0]) * nr > 65535:
        return False
    st = strips[0]
    pws = cols(st)
    lo, hi = p.rq.lo - p.rq.zp, p.rq.hi - p.rq.zp
    shift = np.asarray(p.rq.shift, np.int64)
    lsh, rneg = int(np.any(shift > 0)), int(np.all(shift < 0))
    # lane col * nr + slot of the window; rotation r: the slot of kernel row 0
    offs = np.zeros((nr, 16), np.uint8)
    preds = []
    for r in range(nr):
        bits = 0
        for a in range(kh):
            for b_ in range(kw):
                lane = b_ * dw * nr + (r + a * dh) % nr
                offs[r, lane] = a * kw + b_
                bits |= 1 << lane
        preds.append(bits)
    g = np.array([geo.n, oh, ow, geo.c, sh, sw, pt, pl, dh, kh, h, wd, nr, pws, st, p.x_zp, p.rq.zp, lo, hi,
                  kh * kw, dw, cg] + preds, np.int64)
    check_index(node, g, geo.n * geo.c * h * wd * 2, geo.n * geo.c * oh * ow * 2)
    flags = dict(ps=sw * nr, lsh=lsh, fix=0 if lo >= 0 else (2 if rneg else 1),
                 sat=int(lo == -128 - p.rq.zp and hi == 127 - p.rq.zp), tail=int(geo.c % 4 != 0),
                 tail8=int(geo.c % 8 != 0))
    c4 = -(-geo.c // 4) * 4

    def lane4(v):
        out = np.zeros(c4, np.int64)
        out[:geo.c] = np.asarray(v, np.int64)
        return out.reshape(-1, 4)
    parts = [lane4(folded), lane4(p.rq.mult)] + ([lane4(np.maximum(shift, 0))] if lsh else []) \
        + [lane4(np.minimum(shift, 0))]
    q = int32_array(node, np.hstack(parts).reshape(-1), "bias with the input zero point folded in")
    _helpers(k)
    fn = k.kernel("qdwdot_mve", {"name": "s8_" + "_".join(f"{f}{flags[f]}" for f in sorted(flags)), **flags})
    wpad = np.zeros((c4, kh * kw), np.int8)
    wpad[:geo.c] = wq[:, 0].reshape(geo.c, kh * kw)
    if st == ow:   # one strip: per ring group, output rows in order, each input row read once as it
        # enters the ring (the plain C path of other targets runs the same ring): written over its input
        k.order(0, lambda: windows.rows(geo, cg, what=f"qdwdot_mve: rows through the ring"
                                        f"{f', {cg} channels at a time' if cg < geo.c else ''}"))
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {k.const(wpad, f'{wname}_ck')}, "
           f"{k.const(q, f'{node.name}_dwq')}, {k.scratch_buf(ring(st, cg))}, {k.const(g.astype(np.int32), 'dw_geo')}, "
           f"{k.const(offs.reshape(-1), 'dw_lanes')});")
    return True


# The smallest ring group of qdwdot_mve (channels, a multiple of 8: its row
# copies move 8 channels of a pixel at a time). Each group costs a pass over
# the rows (row loop, ring copy, a call of the pixel loop per row): KWS on
# the M55 with groups of 16 (4 per layer) 0.292 instructions/MAC and 8,768
# B of RAM, of 8 0.303 and 8,600 B, all 64 at once 0.282 and 9,768 B (before
# groups, a row behind its input: 0.283, 10,040 B).
DW_MIN_GROUP = 16


def _dw_ring_group(c: int, ring, free: int) -> int:
    """Channels per ring group of qdwdot_mve (ring(cg): its bytes): all c
    when their ring fits the arena free at this step in the leanest plan
    (no RAM to win: the fastest), else the most (a multiple of
    DW_MIN_GROUP) whose ring fits there, else DW_MIN_GROUP (the least arena
    at a small cost, see above)."""
    if c <= DW_MIN_GROUP or ring(c) <= free:
        return c
    fits = [cg for cg in range((c - 1) // DW_MIN_GROUP * DW_MIN_GROUP, DW_MIN_GROUP - 1, -DW_MIN_GROUP)
            if ring(cg) <= free]
    return fits[0] if fits else DW_MIN_GROUP


def _emit_depthwise(node, k, geo, p, wq, bias, folded, x, y, wname) -> bool:
    """Depthwise QLinearConv (channel multiplier 1) through qdwconv_mve, or
    qdwconv_gen_mve when the model has many depthwise geometries."""
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (dh, dw) = geo.strides, geo.dilations
    (pt, pl) = geo.pad_begin
    nr = (kh - 1) * dh + 1
    cp = -(-geo.c // 8) * 8
    # one block of 8 channels per pixel: the per-pixel work of the generic
    # kernel would cost more, so such a layer keeps its own variant
    generic = cp > 8 and nr <= (kh - 1) * 4 + 1 and _depthwise_geometries(k.graph) > GENERIC_DW_ABOVE
    strip = _dw_strip(geo, nr, generic)
    if strip is None:
        return False
    st, pws = strip
    lo, hi = p.rq.lo - p.rq.zp, p.rq.hi - p.rq.zp
    shift = np.asarray(p.rq.shift, np.int64)
    lsh, rneg = int(np.any(shift > 0)), int(np.all(shift < 0))
    geo_vals = dict(nb=geo.n, oh=oh, ow=ow, c=geo.c, sh=sh, sw=sw, pt=pt, pl=pl, dh=dh, dw=dw, ih=h, iw=wd,
                    nr=nr, pws=pws, st=st)
    rt = [p.x_zp, p.rq.zp, lo, hi]
    check_index(node, np.array(list(geo_vals.values()) + rt + [nr * pws * cp + 16], np.int64),
                geo.n * geo.c * h * wd * 2, geo.n * geo.c * oh * ow * 2)
    flags = dict(kh_n=kh, kw_n=kw, sw=sw, dw=dw, lsh=lsh, rneg=rneg, tail=int(geo.c % 8 != 0),
                 sat=int(lo == -128 - p.rq.zp and hi == 127 - p.rq.zp))
    # per block of 8 channels: folded bias, mult, [lsh], rsh, each in lane order
    parts = [_lane8(folded), _lane8(p.rq.mult)] + ([_lane8(np.maximum(shift, 0))] if lsh else []) \
        + [_lane8(np.minimum(shift, 0))]
    q = int32_array(node, np.hstack([a.reshape(-1, 8) for a in parts]).reshape(-1),
                    "bias with the input zero point folded in")
    _helpers(k, copy=True)
    share = int(sw == 1 and dw == 1)
    if generic:
        names = dict(nb="nb", oh="oh_n", ow="ow_n", c="c_n", sh="sh", sw=str(sw), pt="pt", pl="pl", dh="dh",
                     dw=str(dw), ih="ih_n", iw="iw_n", nr="nr", pws="pws", st="st")
        fn = k.kernel("qdwconv_gen_mve", {"name": "s8_" + "_".join(str(flags[f]) for f in sorted(flags)),
                                          **flags, "generic": 1, "share": share, "n": names,
                                          "tags": (kh - 1) * 4 + 1})
        g = np.array(list(geo_vals.values()) + rt, np.int64)
    else:
        names = {f: str(v) for f, v in geo_vals.items()}
        fn = k.kernel("qdwconv_mve", {"name": _variant_name("s8_fixed", {**flags, **geo_vals}), **flags, "generic": 0,
                                      "share": share, "n": names, "tags": nr})
        g = np.array(rt, np.int64)
    wpad = np.zeros((cp, kh * kw), np.int8)
    wpad[:geo.c] = wq[:, 0].reshape(geo.c, kh * kw)
    wk = np.ascontiguousarray(wpad.reshape(cp // 8, 8, kh * kw).transpose(0, 2, 1))   # [C/8][kh][kw][8]
    if st == ow:   # one strip: as qdwdot_mve (rows through the ring; plain C pixel by pixel)
        k.order(0, lambda: windows.raster(geo, True, group=1, cblock=1, what="qdwconv_mve: pixels"))
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {k.const(wk, f'{wname}_hwc')}, "
           f"{k.const(q, f'{node.name}_dwq')}, {k.scratch_buf(nr * pws * cp)}, {k.const(g.astype(np.int32), 'dw_geo')});")
    return True


# Above this many distinct depthwise geometries in a model, its depthwise
# layers share one generic kernel per kernel size (geometry read at run
# time: a few more instructions, much less code) instead of one per layer.
GENERIC_DW_ABOVE = 2


def _depthwise_geometries(g) -> int:
    """Distinct depthwise QLinearConv geometries of graph g (flash pressure)."""
    seen = set()
    for n in g.nodes:
        if n.op_type != "QLinearConv" or int(n.attr("group", 1)) <= 1:
            continue
        t = [g.tensors[i] for i in n.inputs[:4] if i]
        seen.add((tuple(t[0].shape), tuple(t[3].shape), tuple(n.attr("strides", []) or []),
                  tuple(n.attr("pads", []) or []), tuple(n.attr("dilations", []) or [])))
    return len(seen)


def _pad4(v) -> np.ndarray:
    v = np.asarray(v, np.int64)
    out = np.zeros(-(-v.size // 4) * 4, np.int64)
    out[:v.size] = v
    return out


def _interleave(wk: np.ndarray) -> np.ndarray:
    """[M][kk] int8 -> per group of 4 channels, chunk by chunk of 16:
    [M/4][kk/16][4][16], zero padded (M to 4, kk to 16)."""
    m, kk = wk.shape
    m4, k16 = -(-m // 4) * 4, -(-kk // 16) * 16
    pad = np.zeros((m4, k16), np.int8)
    pad[:m, :kk] = wk
    return np.ascontiguousarray(pad.reshape(m4 // 4, 4, k16 // 16, 16).transpose(0, 2, 1, 3))


def _variant_name(kind: str, vals: dict) -> str:
    import hashlib
    key = ",".join(f"{a}={b}" for a, b in sorted(vals.items()))
    return f"{kind}_{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def _emit_qdot(k, node, vals: dict, y: str, x: str, w: str, bias: str, rq, rev: bool = False) -> None:
    check_index(node, np.array(list(vals.values()), np.int64))
    _helpers(k, copy=not vals["direct"])
    name = _variant_name("s8_fixed", {**vals, "rev": 1} if rev else vals)
    fn = k.kernel("qdot_mve", {"name": name, **vals, "rev": int(rev)})
    call = f"{fn}({y}, {x}, {w}, {bias}, {_requant_arrays(k, rq, node.name, _pad4)}, "
    if vals["direct"]:
        k.line(call + "(int8_t *)0);")
    else:
        k.line(f"{call}{k.scratch_buf(2 * vals['kk16'])});")


def emit_qgemm(op, node, ins, outs, k, params) -> bool:
    q = params
    rq = q["rq"]
    at, bt, yt = q["types"]
    if (rq.mode != "fixed" or q["off"] or (at, bt, yt) != ("int8", "int8", "int8") or q["c"] is None
            or len(q["batches"]) != 1 or any(int(v) for v in q["batches"][0])
            or tuple(q["sa"]) != (q["kk"], 1) or tuple(q["sb"]) != (q["kk"], 1)
            or tuple(q["sc"]) not in ((0, 1), (q["n"], 1))):
        return False
    m, n, kk = q["m"], q["n"], q["kk"]
    wsym = q["b"]
    if wsym not in k.consts:
        return False
    wk = np.asarray(k.consts[wsym].data)
    if wk.dtype != np.int8 or wk.shape != (n, kk):
        return False
    k.drop_unused_const(wsym)   # the portable layout is not needed (no unused array in flash or warnings)
    vals = dict(nb=1, oh_n=1, ow_n=m, kh_n=1, kw_n=1, sh=1, sw=1, pt=0, pl=0, dh=1, ih_n=1, iw_n=m, cin=kk,
                oha=0, ohb=1, owa=0, owb=m,
                m_n=n, kk=kk, kk16=-(-kk // 16) * 16, direct=1, sbias=n if q["sc"][0] else 0, sxb=0, sxh=0, sxw=kk,
                xzp=0, yzp=rq.zp, lo=rq.lo - rq.zp, hi=rq.hi - rq.zp, lsh=int(np.any(np.asarray(rq.shift) > 0)),
                rneg=int(np.all(np.asarray(rq.shift) < 0)))
    _emit_qdot(k, node, vals, q["y"], q["a"], k.const(_interleave(wk), f"{wsym}_mve"), q["c"], rq)
    return True


# --------------------------------------------------------------------------- element-wise Add

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def _vqrdmulh(a, m: int) -> np.ndarray:
    """VQRDMULH.S32 by a scalar: sat((2 * a * m + 2^31) >> 32) (|a| <= 2^31 and
    -2^31 < m < 2^31 keep the int64 product in range)."""
    a = np.asarray(a, np.int64)
    return np.clip((a * (2 * m) + (1 << 31)) >> 32, I32_MIN, I32_MAX)


def _vrshl(v, sh: int) -> np.ndarray:
    """VRSHL.S32 by a scalar: sh >= 0 shifts left (wraps), < 0 right, rounding halves up."""
    v = np.asarray(v, np.int64)
    if sh >= 0:
        return ((v << sh) + (1 << 31)) % (1 << 32) - (1 << 31)
    return (v + (1 << (-sh - 1))) >> -sh


def _vfix(v) -> np.ndarray:
    """vqaddq(v, v >> 31): a negative value lowered by one (saturating)."""
    v = np.asarray(v, np.int64)
    return np.maximum(v + (v >> 31), I32_MIN)


def _add_vector(codes_a, codes_b, q, fix1, fix2, fixo) -> np.ndarray:
    """What qadd_mve computes for int8 codes a, b (broadcasting), given its q array."""
    def inp(x, zterm, m, s, fix):
        v = _vqrdmulh(np.asarray(x, np.int64) * (1 << 20) + zterm, m)
        return _vrshl(_vfix(v) if fix else v, s)
    s = inp(codes_a, q[0], q[1], q[2], fix1) + inp(codes_b, q[3], q[4], q[5], fix2)
    s = np.clip(s, I32_MIN, I32_MAX)   # cannot wrap: |v| < 2^28 each
    if q[6]:
        s = np.clip(s << q[6], I32_MIN, I32_MAX)
    s = _vqrdmulh(s, q[7])
    s = _vrshl(_vfix(s) if fixo else s, q[8]) + q[9]
    return np.clip(s, q[10], q[11])


def add_mve_plan(za, zb, zc, params, lo, hi):
    """(q array, variant flags) of qadd_mve for one node, or None. Each
    rounding fix-up is dropped when the exhaustive check over all 256 x 256
    int8 input pairs shows it changes no result; the final recipe is
    compared with the reference (quant.requantize_fixed) on all pairs."""
    from .. import quant
    m1, s1, m2, s2, mo, so = params
    if s1 > 0 or s2 > 0 or not all(-(1 << 31) < m < (1 << 31) for m in (m1, m2, mo)) or not all(-128 <= z <= 127 for z in (za, zb, zc)):
        return None
    q = [-za * (1 << 20), m1, s1, -zb * (1 << 20), m2, s2, max(so, 0), mo, min(so, 0), zc, lo, hi]
    codes = np.arange(-128, 128, dtype=np.int64)
    a, b = codes[:, None], codes[None, :]
    v1 = quant.requantize_fixed((a - za) * (1 << 20), m1, s1)
    v2 = quant.requantize_fixed((b - zb) * (1 << 20), m2, s2)
    ref = np.clip(quant.requantize_fixed(v1 + v2, mo, so) + zc, lo, hi)
    flags = {"fix1": int(s1 < 0), "fix2": int(s2 < 0), "fixo": int(so < 0)}
    if not np.array_equal(_add_vector(a, b, q, **flags), ref):
        return None
    for f in ("fix1", "fix2", "fixo"):   # drop a fix-up where it never matters
        if flags[f]:
            trial = dict(flags, **{f: 0})
            if np.array_equal(_add_vector(a, b, q, **trial), ref):
                flags = trial
    return q, dict(flags, lsh=int(so > 0), sh1=int(s1 != 0), sh2=int(s2 != 0))


def emit_qadd(op, node, ins, outs, k, params) -> bool:
    """com.microsoft.QLinearAdd, fixed mode, int8, same-shape A, B and Y."""
    p = params
    a, b, y = p["a"], p["b"], p["y"]
    if p["dt"] != "int8" or not (tuple(a.shape) == tuple(b.shape) == tuple(y.shape)):
        return False
    plan = add_mve_plan(p["za"], p["zb"], p["zc"], p["params"], p["lo"], p["hi"])
    if plan is None:
        return False
    q, flags = plan
    _helpers(k)
    fn = k.kernel("qadd_mve", {"name": "s8_" + "".join(str(flags[f]) for f in ("fix1", "fix2", "fixo", "lsh", "sh1", "sh2")),
                               **flags})
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(a)}, {k.ptr(b)}, {y.size}, "
           f"{k.const(np.array(q, np.int32), f'{node.name}_q')});")
    return True


# --------------------------------------------------------------------------- average pooling

def _recips(cmax: int):
    """rc[c] = ceil(2^31 / c) for c in 1..cmax (rc[0] = 0), or None unless
    (u * rc[c]) >> 31 == u // c for every u < 129 * c (the kernel's range)."""
    rc = [0] + [-(-(1 << 31) // c) for c in range(1, cmax + 1)]
    for c in range(1, cmax + 1):
        u = np.arange(129 * c, dtype=np.int64)
        if not np.array_equal((u * rc[c]) >> 31, u // c):
            return None
    return np.array(rc, np.uint32)


def emit_qavgpool(op, node, ins, outs, k, params) -> bool:
    """QLinearAveragePool, TFLM recipe (fixed mode, equal in/out parameters),
    int8, NHWC, 2-D, at most 255 taps per window."""
    p = params
    x, y, tabs, xs = p["x"], p["y"], p["tabs"], p["nchw"]
    if x.dtype != "int8" or not p["channels_last"] or len(tabs) != 2 or len(xs) != 4:
        return False
    (th, dh), (tw, dw) = tabs
    if dh != 1 or dw != 1:
        return False
    cmax = int(th[:, 2].max()) * int(tw[:, 2].max())
    cmin = int(th[:, 2].min()) * int(tw[:, 2].min())
    if cmax > 255 or cmin < 1:
        return False
    rc = _recips(cmax)
    if rc is None:
        return False
    rc = rc[cmin:]
    nb, c, h, w = xs
    g = np.array([nb, c, len(th), len(tw), h * w * c, w * c, len(th) * len(tw) * c, len(tw) * c,
                  p["xzp"], p["lo"], p["hi"], cmin], np.int64)
    check_index(node, g, nb * c * h * w * 2)
    k.kernel("mve_kernel")
    fn = k.kernel("qavgpool_mve", {"name": "s8"})
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {k.const(g.astype(np.int32), 'qavgpool_geo')}, "
           f"{k.const(th.reshape(-1).astype(np.int32), 'pool_rows')}, "
           f"{k.const(tw.reshape(-1).astype(np.int32), 'pool_cols')}, {k.const(rc.view(np.int32), 'pool_recip')});")
    return True


def emit_qgap(op, node, ins, outs, k, params) -> bool:
    """QLinearGlobalAveragePool with requantization, int8, NHWC, at most 255
    pixels (int16 lane sums): qgap_mve. TFLM's MEAN (shift <= 0: the vector
    requantization) or, `single`, ONNX's one rounding half to even (the
    vector sums requantized per channel by __requant_single)."""
    v = params
    if v["n"] > 255 or (v["shift"] > 0 and not v["single"]):
        return False
    _helpers(k)
    if v["single"]:
        k.kernel("requant_fixed")
    fn = k.kernel("qgap_mve", {"name": "_".join(str(v[f]) for f in sorted(v)).replace("-", "m"), **v})
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(ins[0])});")
    return True


def emit_qconvt(op, node, ins, outs, k, params) -> bool:
    """cuvil.QConvTranspose: qconvt_mve calls over the output phases (mve_convt.py)."""
    from . import mve_convt
    return mve_convt.emit(node, ins, outs, k, params)


def emit_qresize(op, node, ins, outs, k, variant) -> bool:
    """cuvil.QResize bilinear, TFLM's recipe (fixed mode) on int8: the
    kernel's Helium loop (4 channels a vector, qresize_s8.c.j2). Marks the
    variant and lets the op render it (returns False: the call is the op's)."""
    if variant["rq"] == "fixed" and variant["xt"] == "int8_t":
        k.kernel("requant_mve")     # arm_mve.h, included once for every Helium kernel
        variant["mve"] = True
        variant["c4"] = outs[0].shape[-1] % 4 == 0 and bool(node.attrs.get("_channels_last"))
        variant["name"] += "_mve" + ("4" if variant["c4"] else "")
    return False
