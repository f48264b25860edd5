"""int8 ConvTranspose for Helium (Cortex-M55), tried by mve.emit_qconvt:
qconvt_mve calls over the output phases (ops/convtranspose.py's stride-1
convolutions; phases of one geometry merged into one call over all their
channels, as isa/dsp_convt.py does), each output pixel's window gathered
into a 16-byte padded column, 2 pixels x 4 channels per pass, 16 MACs per
VMLADAVA, the vectorized requantization of requant_mve.

Handled: fixed requantization, NHWC, int8 in and out, one group, weights
int8 after their zero point, the two columns within MAX_COL bytes. Else
the portable per-phase qconv_s8 runs.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..ops import convtranspose as ct
from ..ops.qgemm import check_acc, int32_array
from .dsp_convt import calls

FIELDS = ("nb", "h", "w_n", "c", "oh_n", "ow_n", "kh_n", "kw_n", "pt", "pl", "dh", "dw", "syb", "syh", "syw",
          "m_n", "kk", "k16", "xzp", "yzp", "lo", "hi")
MAX_COL = 4096


def emit(node, ins, outs, k, p) -> bool:
    from .mve import _helpers, _interleave, _pad4, _requant_arrays
    geo = p.geo
    x, w, y = ins[0], ins[3], outs[0]
    if (p.rq.mode != "fixed" or not p.cl or x.dtype != "int8" or y.dtype != "int8" or geo.group != 1
            or p.rq.mult is None or p.rq.shift is None):
        return False
    m = geo.m
    cs = calls(node, w, geo, p, merge=m % 4 == 0)
    if cs is None:
        return False
    k16s = [-(-cl.wr.shape[1] // 16) * 16 for cl in cs]
    if 2 * max(k16s) > MAX_COL:
        return False
    for cl in cs:
        check_acc(node, cl.bound)
    lsh = bool(np.any(np.asarray(p.rq.shift) > 0))
    _helpers(k, copy=True)
    fn = k.kernel("qconvt_mve", {"name": "s8_fixed" + ("_lsh" if lsh else ""), "lsh": lsh, "fields": FIELDS})
    col = k.scratch_buf(2 * max(k16s))
    syb, syh, syw, _ = ct.y_strides(geo, True)
    for cl, k16 in zip(cs, k16s):
        reps = len(cl.phases)
        pg = cl.phases[0].geo
        kk = cl.wr.shape[1]
        # per channel group of 4: requantization arrays repeated per merged phase
        rq = SimpleNamespace(mult=np.tile(np.asarray(p.rq.mult).reshape(-1), reps),
                             shift=np.tile(np.asarray(p.rq.shift).reshape(-1), reps))
        vals = dict(nb=geo.n, h=geo.hw[0], w_n=geo.hw[1], c=geo.c, oh_n=pg.out_hw[0], ow_n=pg.out_hw[1],
                    kh_n=pg.k[0], kw_n=pg.k[1], pt=pg.pad_begin[0], pl=pg.pad_begin[1], dh=pg.dilations[0],
                    dw=pg.dilations[1], syb=syb, syh=syh * geo.strides[0], syw=syw * geo.strides[1], m_n=m * reps,
                    kk=kk, k16=k16, xzp=p.x_zp, yzp=p.rq.zp, lo=p.rq.lo - p.rq.zp, hi=p.rq.hi - p.rq.zp)
        wsym = k.const(_interleave(cl.wr.astype(np.int8)).reshape(-1), f"{w.name}_mve")
        bsym = k.const(int32_array(node, _pad4(cl.folded), "bias with the input zero point folded in"),
                       f"{node.name}_bias")
        gsym = k.const(np.array([vals[f] for f in FIELDS], np.int32), "qconvt_mve_geo")
        csym = k.const(_pad4(cl.coff)[0::4].astype(np.int32), f"{node.name}_coff")
        k.line(f"{fn}({k.ptr(y)} + {ct.phase_offset(geo, cl.phases[0], True)}, {k.ptr(x)}, {wsym}, {bsym}, "
               f"{gsym}, {_requant_arrays(k, rq, node.name, _pad4)}, {csym}, {col});")
    return True
