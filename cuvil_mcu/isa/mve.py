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
  16 int8 MACs per VMLADAVA, 2 pixels x 4 output channels per pass.
  Weights are stored interleaved per group of 4 channels, chunk by chunk of
  16, zero padded. A window that is not contiguous in x is copied first
  (im2col into a stack buffer, 2 x kk rounded up to 16 bytes, taps outside
  the input filled with x_zp, so -x_zp * sum(w) folded into the bias is right
  for every pixel); a 1x1 kernel without padding reads x directly, its last
  partial chunk tail-predicated (VCTP).
- depthwise convolutions with channel multiplier 1: `qdwconv_mve` —
  vectorised across channels, 8 per pass (VLDRB.S16 widening loads,
  VMULLB/VMULLT to int32 lanes), every tap unrolled, weights stored
  [C/8][kh][kw][8], the input offset folded into the bias for every pixel
  (a tap outside the input reads a row of x_zp), 2 interior pixels per
  pass where they fit.
Requantization is vectorised, 4 channels per vector (requant_mve: VQSHL,
VQRDMULH, a -1 fixup for negative values, VRSHL), bit-exact with
quant.requantize_fixed (tested on QEMU, incl. every rounding tie). Anything
else (float requant, uint8 activations, int16 weights, NCHW, grouped
non-depthwise convolutions, channel multiplier > 1, int32 outputs, wide
windows) returns False: the portable kernel is used.

The kernels keep a plain C path under `#else` of the MVE feature test, so
the header compiles (and computes the same) with any C/C++ compiler.
"""
from __future__ import annotations

import numpy as np

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
    """mult, lsh = max(shift, 0), rsh = min(shift, 0) as const arrays."""
    f = perm or (lambda v: v)
    shift = np.asarray(rq.shift, np.int64)
    return (f"{k.const(f(np.asarray(rq.mult, np.int64)).astype(np.int32), f'{name}_mult')}, "
            f"{k.const(f(np.maximum(shift, 0)).astype(np.int32), f'{name}_lsh')}, "
            f"{k.const(f(np.minimum(shift, 0)).astype(np.int32), f'{name}_rsh')}")


def _helpers(k, copy: bool = False) -> None:
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
    if depthwise:
        if geo.mg != 1:
            return False
        from ..ops.conv import _border_tables
        oha, ohb, _ = _border_tables(h, oh, kh, sh, dh, pt)
        owa, owb, _ = _border_tables(wd, ow, kw, sw, dw, pl)
        vals = dict(nb=geo.n, oh_n=oh, ow_n=ow, kh_n=kh, kw_n=kw, sh=sh, sw=sw, pt=pt, pl=pl, dh=dh, dw=dw,
                    ih_n=h, iw_n=wd, c_n=geo.c, oha=oha, ohb=ohb, owa=owa, owb=owb,
                    sxb=sx[0], sxh=sx[1], sxw=sx[2], xoff=-p.x_zp, yzp=p.rq.zp, lo=lo, hi=hi,
                    lsh=int(np.any(np.asarray(p.rq.shift) > 0)))
        check_index(node, np.array(list(vals.values()), np.int64), geo.n * geo.c * h * wd * 2)
        b2 = int32_array(node, np.concatenate([_lane8(bias), _lane8(folded)]),
                         "bias with the input zero point folded in")
        _helpers(k)
        fn = k.kernel("qdwconv_mve", {"name": _variant_name("s8_fixed", vals), **vals})
        cp = -(-geo.c // 8) * 8
        wpad = np.zeros((cp, kh * kw), np.int8)
        wpad[:geo.c] = wq[:, 0].reshape(geo.c, kh * kw)
        wk = np.ascontiguousarray(wpad.reshape(cp // 8, 8, kh * kw).transpose(0, 2, 1))   # [C/8][kh][kw][8]
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {k.const(wk, f'{w.name}_hwc')}, "
               f"{k.const(b2, f'{node.name}_bias')}, {_requant_arrays(k, p.rq, node.name, _lane8)});")
        return True
    if geo.group != 1:
        return False
    direct = kh == 1 and kw == 1 and pt == 0 and pl == 0 and geo.pad_end == (0, 0)
    if not direct and (dw != 1 or geo.c * kh * kw > MAX_WINDOW):
        return False
    kk = geo.c * kh * kw
    from ..ops.conv import _border_tables
    oha, ohb, _ = _border_tables(h, oh, kh, sh, dh, pt)
    owa, owb, _ = _border_tables(wd, ow, kw, sw, dw, pl)
    wk = wq.transpose(0, 2, 3, 1).reshape(geo.m, kk)   # [M][kh][kw][C]
    b = int32_array(node, _pad4(folded), "bias with the input zero point folded in")
    vals = dict(nb=geo.n, oh_n=oh, ow_n=ow, kh_n=kh, kw_n=kw, sh=sh, sw=sw, pt=pt, pl=pl, dh=dh, ih_n=h, iw_n=wd,
                cin=geo.c, m_n=geo.m, kk=kk, kk16=-(-kk // 16) * 16, direct=int(direct), sbias=0,
                oha=oha, ohb=ohb, owa=owa, owb=owb,
                sxb=sx[0], sxh=sx[1], sxw=sx[2], xzp=p.x_zp, yzp=p.rq.zp, lo=lo, hi=hi,
                lsh=int(np.any(np.asarray(p.rq.shift) > 0)))
    _emit_qdot(k, node, vals, k.ptr(outs[0]), k.ptr(x), k.const(_interleave(wk), f"{w.name}_mve"),
               k.const(b, f"{node.name}_bias"), p.rq)
    return True


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


def _emit_qdot(k, node, vals: dict, y: str, x: str, w: str, bias: str, rq) -> None:
    check_index(node, np.array(list(vals.values()), np.int64))
    _helpers(k, copy=not vals["direct"])
    fn = k.kernel("qdot_mve", {"name": _variant_name("s8_fixed", vals), **vals})
    call = f"{fn}({y}, {x}, {w}, {bias}, {_requant_arrays(k, rq, node.name, _pad4)}, "
    if vals["direct"]:
        k.line(call + "(int8_t *)0);")
    else:
        k.line(f"{{ int8_t col[{2 * vals['kk16']}]; {call}col); }}")


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
    if not any(wsym in line for line in k.body):
        # the portable layout is not needed: drop it (no unused array in flash or warnings)
        del k.consts[wsym]
        k._const_by_key = {key: sym for key, sym in k._const_by_key.items() if sym != wsym}
    vals = dict(nb=1, oh_n=1, ow_n=m, kh_n=1, kw_n=1, sh=1, sw=1, pt=0, pl=0, dh=1, ih_n=1, iw_n=m, cin=kk,
                oha=0, ohb=1, owa=0, owb=m,
                m_n=n, kk=kk, kk16=-(-kk // 16) * 16, direct=1, sbias=n if q["sc"][0] else 0, sxb=0, sxh=0, sxw=kk,
                xzp=0, yzp=rq.zp, lo=rq.lo - rq.zp, hi=rq.hi - rq.zp, lsh=int(np.any(np.asarray(rq.shift) > 0)))
    _emit_qdot(k, node, vals, q["y"], q["a"], k.const(_interleave(wk), f"{wsym}_mve"), q["c"], rq)
    return True
