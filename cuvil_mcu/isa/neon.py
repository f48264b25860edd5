"""NEON (Advanced SIMD) int8 kernels for Cortex-A boards (isa.neon: armv7-a
with NEON, aarch64), through arm_neon.h.

Covered (else these return False and the op emits its portable kernel):
- qconv: QLinearConv / ConvInteger with channels_last = 1 (NHWC), int8 input,
  weights that fit int8 after their zero point is subtracted; the general
  kernel (any groups, kernel, stride, dilation, padding, a channel shuffle
  folded into its stores: dot products over
  the contiguous input channels of each tap, over whole kernel rows when the
  taps of a row are adjacent) and depthwise with channel multiplier 1
  (8 channels a step);
- qgemm: the QGemm / QLinearMatMul kernel call with int8 A, a constant int8
  B (zero points applied at compile time) and unit K strides.
Not covered (portable kernel): uint8 input, int16 (offset) weights, NCHW,
depthwise with a channel multiplier > 1, run-time B, transposed A with
more than one row. Dot products use vmull_s8 + vmlal_s8
(two int8 products in an int16 lane) + vpadalq_s16 when no weight is -128,
else vmull_s8 + vpadalq_s16 (one product per int16 lane): both exact. No
SDOT (vdotq_s32): Cortex-A7 and Cortex-A53 lack it. The general conv and
the FC layer compute 4 output channels a pass (one load of the input for
four weight rows). Fixed-point requantization runs 4 lanes at a time
(requant_fixed_neon: vqshlq / vqrdmulhq / vrshlq with the halves-away
fixup, bit-exact with the scalar helper); float requantization and the
tails use the shared scalar helpers, so the results equal the portable
kernels' bit for bit. Every kernel is guarded by `#if defined(__ARM_NEON)`;
without NEON its scalar loops compute everything, so the header still
compiles (and runs) anywhere.
"""
from __future__ import annotations

import numpy as np

from ..planner import windows

from ..ops.qconv import QCONV_FIELDS, conv_plan  # the conv kernels' geo head: the same order as the portable ones
from ..ops.qgemm import CODES, CTYPES, QGEMM_FIELDS, check_index, offset_weights


def _no_min(w: np.ndarray) -> bool:
    """True when no value is -128, so two int8 x int8 products fit an int16."""
    return w.size == 0 or int(w.min()) > -128


def _requant_helpers(k, mode: str) -> None:
    """Render the requantization helpers the kernels call, before them: the
    scalar ones for the tails and, in fixed mode, the 4-lane NEON one."""
    if mode != "none":
        k.kernel(f"requant_{mode}")
    if mode == "fixed":
        k.kernel("requant_fixed_neon")


def emit_qconv(op, node, ins, outs, k, p) -> bool:
    x, w = ins[op.X], ins[op.W]
    geo = p.geo
    if not p.cl or x.dtype != "int8" or len(geo.hw) != 2:
        return False
    kh, kw = geo.k
    depthwise = geo.cg == 1 and geo.group > 1
    if depthwise and (geo.mg != 1 or p.ochan is not None):
        return False
    if offset_weights(np.asarray(w.data).reshape(geo.m, geo.cg, kh, kw), p.w_zp, 0).dtype != np.int8:
        return False
    plan = conv_plan(node, x, w, p)
    wk, b2, vals, geo_arr = plan.wk, plan.b2, plan.vals, plan.geo_arr
    # the taps of a kernel row are adjacent in x (and in w) when a column
    # step moves by exactly one group's channels
    merge = not depthwise and vals["col_step"] == geo.cg
    unused = ["sxc", "syc"] + (["yzp", "lo", "hi"] if p.rq.mode == "none" else [])
    if depthwise:
        template, unused = "qdwconv_neon", unused + ["cg"]
        variant = {}
    else:
        template = "qconv_neon"
        pair = _no_min(wk)
        unused += ["col_step"] if merge else []
        # omap: a channel shuffle folded into the stores (passes/fold_shuffle.py)
        variant = {"merge": merge, "pair": pair, "omap": p.ochan is not None}
    name = (f"s8s8{CODES[outs[0].dtype]}_{p.rq.mode}"
            + ("" if depthwise else ("_run" if merge else "_tap") + ("_x16" if variant["pair"] else "_x8"))
            + ("_om" if variant.get("omap") else ""))
    _requant_helpers(k, p.rq.mode)
    fn = k.kernel(template, dict(variant, name=name, yt=CTYPES[outs[0].dtype], rq=p.rq.mode,
                                 fields=QCONV_FIELDS, unused=unused))
    wsym = k.const(np.ascontiguousarray(wk), f"{w.name}_{'hwm' if depthwise else 'mhwc'}")
    bsym = k.const(b2, f"{node.name}_bias")
    g = k.const(geo_arr.astype(np.int32), "qconv_geo")
    # per pixel, blocks of 4 (conv) / 8 (depthwise) channels: one channel at a
    # time is the conservative model of both
    if outs[0].dtype in ("int8", "uint8"):   # (the order models count one-byte elements)
        k.order(op.X, lambda: windows.raster(geo, depthwise, group=1, cblock=1, opos=p.ochan,
                                             what=f"{template}: pixels"))
    om = "" if p.ochan is None else f", {k.const(p.ochan.astype(np.int32), f'{node.name}_ochan')}"
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {bsym}, {g}{om}{p.rq.c_args(k, node.name)});")
    return True


def _const_values(k, symbol: str) -> np.ndarray | None:
    c = k.consts.get(symbol)
    return None if c is None else np.asarray(c.data)


def emit_qgemm(op, node, ins, outs, k, a) -> bool:
    at, bt, yt = a["types"]
    if a["off"] or at != "int8" or bt != "int8" or a["sa"][1] != 1 or a["sb"][1] != 1:
        return False
    bvals = _const_values(k, a["b"])   # the constant B, [.., n][kk]
    if bvals is None:
        return False
    rq = a["rq"]
    c, sc = a["c"], a["sc"]
    if c is None:
        c, sc = k.const(np.zeros(1, np.int32), "zero_i32"), (0, 0)
    batches = [list(map(int, t)) for t in a["batches"]]
    geo = np.array([len(batches), a["m"], a["n"], a["kk"], a["sa"][0], a["sa"][1], a["sb"][0], a["sb"][1],
                    sc[0], sc[1], a["aoff"], a["boff"]] + rq.geo() + [v for t in batches for v in t], np.int64)
    check_index(node, geo)
    unused = ["sak", "sbk", "aoff", "boff"] + (["yzp", "lo", "hi"] if rq.mode == "none" else [])
    pair = _no_min(bvals)
    name = f"s8s8{CODES[yt]}_{rq.mode}" + ("_x16" if pair else "_x8")
    _requant_helpers(k, rq.mode)
    fn = k.kernel("qgemm_neon", {"name": name, "yt": CTYPES[yt], "rq": rq.mode, "pair": pair,
                                 "fields": QGEMM_FIELDS, "unused": unused})
    g = k.const(geo.astype(np.int32), "qgemm_geo")
    k.line(f"{fn}({a['y']}, {a['a']}, {a['b']}, {c}, {g}{rq.c_args(k, node.name)});")
    return True
