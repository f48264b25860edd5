"""Grouped int8 convolutions (1 < groups, more than one input channel per
group) for Helium (MVE, Cortex-M55): kernels/qgdot_mve.c.j2, tried by
mve.emit_qconv for grouped layers (else the portable kernel runs them).

The arithmetic is qdot_mve's (16 int8 MACs per VMLADAVA, 2 pixels x 4
output channels per pass, the chunk loop in inline asm), applied per group
to that group's window: per pass, both pixels' windows of every group
(kernel taps x the group's cg channels, a strided part of each NHWC pixel)
are copied into an arena buffer [pixel][group][kk rounded up to 16] first
(taps outside the input filled with x_zp), then each group's blocks of 4
output channels run over its window. The group's last block is predicated
when mg % 4 != 0. A channel shuffle folded into the layer
(ops.conv.out_channels) stores each block with a VSTRB scatter through the
channels' positions.

Handled: fixed requantization, NHWC, int8 in and out, int8 weights after
the zero point, dilation 1, a buffer of at most MAX_BUF bytes. Else False.
"""
from __future__ import annotations

import numpy as np

from ..ops.qgemm import check_index, int32_array, offset_weights
from ..planner import windows

MAX_BUF = 4096   # bytes of both pixels' windows of every group (arena scratch)


def _per_group(v, ng: int, mg: int, mg4: int) -> np.ndarray:
    """Per-channel values [ng * mg] -> [ng][mg4] (zeros past mg), flat."""
    out = np.zeros((ng, mg4), np.int64)
    out[:, :mg] = np.broadcast_to(np.asarray(v, np.int64).reshape(-1), (ng * mg,)).reshape(ng, mg)
    return out.reshape(-1)


def emit(node, k, geo, p, wq, folded, x, y, wname) -> bool:
    from .mve import _helpers, _variant_name
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (dh, dw) = geo.strides, geo.dilations
    (pt, pl) = geo.pad_begin
    if (dh, dw) != (1, 1):
        return False
    ng, cg, mg = geo.group, geo.cg, geo.mg
    mg4 = -(-mg // 4) * 4
    kk = kh * kw * cg
    kk16 = -(-kk // 16) * 16
    if 2 * ng * kk16 > MAX_BUF:
        return False
    wk = np.zeros((ng, mg4, kk16), np.int8)          # [group][channel][kh][kw][cg], zero padded
    wk[:, :mg, :kk] = wq.reshape(ng, mg, cg, kh * kw).transpose(0, 1, 3, 2).reshape(ng, mg, kk)
    wk = np.ascontiguousarray(wk.reshape(ng, mg4 // 4, 4, kk16 // 16, 16).transpose(0, 1, 3, 2, 4))
    shift = np.clip(np.asarray(p.rq.shift, np.int64), -128, 127)
    shift = np.broadcast_to(shift.reshape(-1), (geo.m,))
    lsh = int(np.any(shift > 0))
    lo, hi = p.rq.lo - p.rq.zp, p.rq.hi - p.rq.zp
    vals = dict(nb=geo.n, oh_n=oh, ow_n=ow, kh_n=kh, kw_n=kw, sh=sh, sw=sw, pt=pt, pl=pl, ih_n=h, iw_n=wd,
                ng=ng, cg=cg, mg=mg, mg4=mg4, m_n=geo.m, kk=kk, kk16=kk16,
                sxb=h * wd * geo.c, sxh=wd * geo.c, sxw=geo.c, xzp=p.x_zp, yzp=p.rq.zp, lo=lo, hi=hi,
                lsh=lsh, rneg=int(np.all(shift < 0)), opos=int(p.ochan is not None))
    check_index(node, np.array(list(vals.values()), np.int64), geo.n * geo.c * h * wd, geo.n * geo.m * oh * ow)
    rev = k.variant() == "rev"
    _helpers(k, copy=True)
    fn = k.kernel("qgdot_mve", {"name": _variant_name("s8_fixed", {**vals, "rev": int(rev)}), **vals, "rev": int(rev)})
    bias = int32_array(node, _per_group(folded, ng, mg, mg4), "bias with the input zero point folded in")
    mult = k.const(_per_group(p.rq.mult, ng, mg, mg4).astype(np.int32), f"{node.name}_mult")
    lsym = (k.const(_per_group(np.maximum(shift, 0), ng, mg, mg4).astype(np.int8), f"{node.name}_lsh") if lsh
            else "(const int8_t *)0")
    rsym = k.const(_per_group(np.minimum(shift, 0), ng, mg, mg4).astype(np.int8), f"{node.name}_rsh")
    opos = (k.const(_per_group(p.ochan, ng, mg, mg4).astype(np.int32), f"{node.name}_opos", "uint32_t")
            if p.ochan is not None else "(const uint32_t *)0")
    buf = k.scratch_buf(2 * ng * kk16)
    # every group's windows of both pixels are copied before any output of the pass is written
    for r in (False, True):
        k.order(0, lambda r=r: windows.raster(geo, False, group=2, cblock=0, reverse=r,
                                              what=f"qgdot_mve: pixel pairs{' from the last down' if r else ''}"),
                "rev" if r else None)
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {k.const(wk.reshape(-1), f'{wname}_mveg')}, "
           f"{k.const(bias, f'{node.name}_bias')}, {mult}, {lsym}, {rsym}, {opos}, {buf});")
    return True
