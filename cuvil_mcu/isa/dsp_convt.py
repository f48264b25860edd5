"""int8 ConvTranspose on the DSP extension (Cortex-M4 / M7 / M33), tried by
dsp.emit_qconvt: qconvt_dsp calls over the output phases (the stride-1
convolutions of ops/convtranspose.py), each writing its outputs through y
strides. Per pass 2 output pixels x 2 output channels: the pixels'
windows split once into halfword pairs (SXTB16 / SXTB16 ror 8, shared by
every channel pair), each weight word split the same way, 8 SMLADs per 16
MACs; requantization by dsp._requant's variants (qrq_dsp.c.j2).

Phases of one geometry (same taps, pads and output count: kernel == stride
without padding, U-Net's usual 2x2 / stride 2) run as one call over all
their channels, each channel pair stored at its phase's place in y (a
table of offsets): the window of a pixel is split once for all phases.

Handled: fixed requantization, NHWC, int8 in and out, one group, weights
int8 after their zero point, |acc| within int32 (checked per phase), the
split window of two pixels (16 bytes per 4 input bytes) within MAX_XE.
Else the portable per-phase qconv_s8 runs (ops/convtranspose.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ops import convtranspose as ct
from ..ops.qgemm import int32_array, offset_weights

FIELDS = ("nb", "h", "w_n", "c", "oh_n", "ow_n", "kh_n", "kw_n", "pt", "pl", "dh", "dw", "syb", "syh", "syw",
          "m_n", "gq", "xzp", "yzp", "lo", "hi")
MAX_XE = 4096


@dataclass
class Call:
    """One kernel call: phases of one geometry (ph[0].geo), weights [M'][K]
    minus their zero point ([phase][channel]), folded bias [M'], the element
    offset in y of each channel ([M']), and |acc|'s bound."""

    phases: list
    wr: np.ndarray
    folded: np.ndarray
    coff: np.ndarray
    bound: int


def _key(ph):
    g = ph.geo
    return (g.k, g.pad_begin, g.dilations, g.out_hw)


def calls(node, w, geo, p, merge: bool) -> list[Call] | None:
    """The phases grouped into kernel calls (merged when `merge` and their
    geometry agrees); None when some weights need int16 after the zero point."""
    bias = p.bias if p.bias is not None else np.zeros(geo.m, np.int64)
    groups: dict = {}
    for ph in ct.phases(geo):
        groups.setdefault(_key(ph) if merge else (ph.ry, ph.rx), []).append(ph)
    out = []
    for phs in groups.values():
        rows, folded, coff = [], [], []
        for ph in phs:
            wq = offset_weights(ct.phase_weights(np.asarray(w.data), geo, ph), p.w_zp, 0)
            if wq.dtype != np.int8:
                return None
            wr = wq.transpose(0, 2, 3, 1).reshape(geo.m, -1).astype(np.int64)      # [m][r][j][c]
            rows.append(wr)
            folded.append(bias - p.x_zp * wr.sum(axis=1))
            coff.append(ct.phase_offset(geo, ph, True) - ct.phase_offset(geo, phs[0], True) + np.arange(geo.m))
        wr, f = np.concatenate(rows), np.concatenate(folded)
        bound = int(np.abs(f).max()) + wr.shape[1] * 128 * (int(np.abs(wr).max()) if wr.size else 0)
        out.append(Call(phs, wr, f, np.concatenate(coff), bound))
    return out


def emit(node, ins, outs, k, p) -> bool:
    from . import dsp
    geo = p.geo
    x, w, y = ins[0], ins[3], outs[0]
    if p.rq.mode != "fixed" or not p.cl or x.dtype != "int8" or y.dtype != "int8" or geo.group != 1:
        return False
    m, c = geo.m, geo.c
    odd = m % 2 == 1
    cs = calls(node, w, geo, p, merge=not odd)
    if cs is None:
        return False
    gqs = [-(-cl.wr.shape[1] // 4) for cl in cs]
    bound = max(cl.bound for cl in cs)
    if 16 * max(gqs) > MAX_XE or bound > 2 ** 31 - 1:
        return False
    mode, mult, second = dsp._requant(p.rq, bound, m)
    sat = dsp._sat(p.rq)
    c4 = c % 4 == 0
    k.kernel("requant_fixed")
    k.kernel("intrin_dsp")
    fn = k.kernel("qconvt_dsp", {"name": f"{mode}{'s' * sat}{'_c4' if c4 else ''}{'_om' if odd else ''}",
                                 "rq": mode, "sat": sat, "c4": c4, "odd_m": odd, "fields": FIELDS})
    aux = k.scratch_buf(c if c4 else 4 * max(gqs))
    xe = k.scratch_buf(16 * max(gqs), "int32_t")
    syb, syh, syw, _ = ct.y_strides(geo, True)
    for cl, gq in zip(cs, gqs):
        reps = len(cl.phases)
        mm = m * reps + odd                                    # channels of the call, even
        wp = np.zeros((mm, 4 * gq), np.int64)
        wp[:m * reps, :cl.wr.shape[1]] = cl.wr
        packed = wp.reshape(mm // 2, 2, gq, 4).transpose(0, 2, 1, 3)          # [pair][g][2 channels][4]
        b2 = int32_array(node, np.concatenate([cl.folded, cl.folded[-1:]]) if odd else cl.folded,
                         "bias with the input zero point folded in")
        # per-channel requantization arrays repeated per merged phase (one more channel when M is odd)
        msym, ssym = dsp._rq_consts(k, node, mode, np.tile(mult, reps),
                                    None if second is None else np.tile(second, reps), pad=odd)
        pg = cl.phases[0].geo
        vals = dict(nb=geo.n, h=geo.hw[0], w_n=geo.hw[1], c=c, oh_n=pg.out_hw[0], ow_n=pg.out_hw[1],
                    kh_n=pg.k[0], kw_n=pg.k[1], pt=pg.pad_begin[0], pl=pg.pad_begin[1], dh=pg.dilations[0],
                    dw=pg.dilations[1], syb=syb, syh=syh * geo.strides[0], syw=syw * geo.strides[1], m_n=m * reps,
                    gq=gq, xzp=p.x_zp, yzp=p.rq.zp, lo=p.rq.lo, hi=p.rq.hi)
        wsym = k.const(np.ascontiguousarray(packed.astype(np.int8)).reshape(-1), f"{w.name}_dsp")
        gsym = k.const(np.array([vals[f] for f in FIELDS], np.int32), "qconvt_dsp_geo")
        csym = k.const(cl.coff[0::2].astype(np.int32), f"{node.name}_coff")
        k.line(f"{fn}({k.ptr(y)} + {ct.phase_offset(geo, cl.phases[0], True)}, {k.ptr(x)}, {wsym}, "
               f"{k.const(b2, f'{node.name}_bias')}, {gsym}, {msym}, {ssym}, {csym}, {aux}, {xe});")
    return True
