"""Integer convolutions: QLinearConv (ONNX, and com.microsoft's channels_last
form) and ConvInteger (int32 output). 1-D and 2-D, groups (depthwise with
any channel multiplier), strides, dilations, pads and auto_pad, optional
int32 bias, per-tensor or per-channel weight scales, int8 or uint8
activations.

Numerics (INT8 conventions, as TFLM): acc = bias + sum w * (x - x_zp) in
int32 over the taps inside the input (a padding tap behaves as x == x_zp:
it adds 0), then requantization per output channel, + y_zp, fused clamp,
saturation.

Layout: `_channels_last` = 1 (what passes/layout.py produces) means x and y
are NHWC (1-D: NWC); the kernels are written for it. Weights are rearranged
here so the inner loop of the general kernel runs over contiguous input
channels ([M][kH][kW][C/group]); the depthwise kernel reads [kH][kW][C*mult]
(output channels innermost, TFLM's layout). NCHW (channels_last 0) runs on
the same kernels through element strides. Weights are stored with their zero
point subtracted (int8 when the values fit, else int16).

A channel shuffle after the layer may be folded into it (passes/
fold_shuffle.py): `_ochan` then says at which channel position each output
channel is stored (ops/conv.py out_channels); the reference and every
kernel place the channels so.

Where the whole kernel window lies inside the input (the interior, see
ops/conv.py), the input offset is folded into the bias at compile time:
sum w * (x - x_zp) = sum w * x - x_zp * sum w, so the interior inner loop is
a plain sum of products; border outputs add the offset per tap.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import isa
from ..ir import Node
from ..planner import tiling, windows
from .base import Op, register, shape_error, unsupported
from .conv import (ConvGeometry, _border_tables, check_conv_limits, conv_geometry, conv_nchw, out_channels,
                   place_channels)
from .qgemm import (CODES, CTYPES, INT8_TYPES, NO_REQUANT, Requant, check_acc, check_index, int32_array,
                    make_requant, offset_range, offset_weights, scalar_qparams, weight_qparams, zero_points)

# Order of the integers at the head of the int8 conv kernels' `geo` array (the
# border tables follow at rt_at and ct_at).
QCONV_FIELDS = ("nb", "groups", "cg", "mg", "oh_n", "ow_n", "kh_n", "kw_n", "sh", "sw", "pt", "pl",
                "oha", "ohb", "owa", "owb", "rt_at", "ct_at", "sxb", "sxh", "sxw", "sxc",
                "syb", "syh", "syw", "syc", "row_step", "col_step", "xoff", "yzp", "lo", "hi")


def channels_last(node) -> int:
    return int(node.attrs.get("_channels_last", node.attrs.get("channels_last", 0)))


def _to_nchw(shape) -> tuple[int, ...]:
    return (shape[0], shape[-1]) + tuple(shape[1:-1])


def _from_nchw(shape) -> tuple[int, ...]:
    return (shape[0],) + tuple(shape[2:]) + (shape[1],)


def nchw_input(node, x_shape) -> tuple[int, ...]:
    """The input shape of an integer Conv / ConvTranspose in NCHW (its
    kernels may run channels-last: see channels_last)."""
    if not channels_last(node):
        return tuple(x_shape)
    if len(x_shape) < 3:
        raise shape_error(node, f"input {list(x_shape)} must be N x spatial x C (rank 3 or 4)")
    return _to_nchw(x_shape)


def qconv_geometry(node, x_shape, w_shape) -> ConvGeometry:
    return conv_geometry(node, nchw_input(node, x_shape), w_shape)


def conv_int(x: np.ndarray, w: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """Integer convolution (int64, exact) of NCHW x (offset already
    subtracted, so zero padding = a tap at x == x_zp) with w [M, C/g, kH, kW]."""
    return conv_nchw(x, w, geo, np.int64)


@dataclass
class _QConv:
    geo: ConvGeometry
    cl: int
    x_zp: int
    w_zp: np.ndarray          # int64 [M]
    bias: np.ndarray | None   # int64 [M]
    rq: Requant
    ochan: np.ndarray | None = None   # output channel m stored at channel ochan[m] (ops.conv.out_channels)


@dataclass
class ConvPlan:
    """What every int8 conv kernel is built from: weights minus their zero
    point (wq) and arranged for channels-innermost kernels (wk: [M][kh][kw][cg],
    depthwise [kh][kw][M]); bias and bias with the input zero point folded in
    (b2); and the portable kernel's geometry array (vals by QCONV_FIELDS name)."""
    depthwise: bool
    wq: np.ndarray
    wk: np.ndarray
    b2: np.ndarray
    xoff: int
    vals: dict
    geo_arr: np.ndarray


def conv_plan(node, x, w, p) -> ConvPlan:
    geo = p.geo
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (dh, dw) = geo.strides, geo.dilations
    (pt, pl) = geo.pad_begin
    depthwise = geo.cg == 1 and geo.group > 1
    # weights - w_zp, arranged for the kernel
    wq = offset_weights(np.asarray(w.data).reshape(geo.m, geo.cg, kh, kw), p.w_zp, 0)
    wk = wq[:, 0].transpose(1, 2, 0) if depthwise else wq.transpose(0, 2, 3, 1)  # [kh][kw][M] | [M][kh][kw][cg]
    wsum = wq.astype(np.int64).reshape(geo.m, -1).sum(axis=1)
    xoff = -p.x_zp
    bias = p.bias if p.bias is not None else np.zeros(geo.m, np.int64)
    folded = bias + xoff * wsum
    b2 = int32_array(node, np.concatenate([bias, folded]), "bias with the input zero point folded in")
    taps = geo.cg * kh * kw
    wmax = int(np.abs(wq.astype(np.int64)).max()) if wq.size else 0
    check_acc(node, int(np.abs(b2.astype(np.int64)).max())
              + taps * wmax * max(offset_range(x.dtype, xoff), offset_range(x.dtype, 0)))
    # element strides of x [n][c][h][w] and y [n][m][h][w] in the tensors' layout
    if p.cl:
        sx = (h * wd * geo.c, wd * geo.c, geo.c, 1)
        sy = (oh * ow * geo.m, ow * geo.m, geo.m, 1)
    else:
        sx = (geo.c * h * wd, wd, 1, h * wd)
        sy = (geo.m * oh * ow, ow, 1, oh * ow)
    oha, ohb, rt = _border_tables(h, oh, kh, sh, dh, pt)
    owa, owb, ct = _border_tables(wd, ow, kw, sw, dw, pl)
    vals = dict(nb=geo.n, groups=geo.group, cg=geo.cg, mg=geo.mg, oh_n=oh, ow_n=ow, kh_n=kh, kw_n=kw,
                sh=sh, sw=sw, pt=pt, pl=pl, oha=oha, ohb=ohb, owa=owa, owb=owb,
                rt_at=len(QCONV_FIELDS), ct_at=len(QCONV_FIELDS) + len(rt),
                sxb=sx[0], sxh=sx[1], sxw=sx[2], sxc=sx[3], syb=sy[0], syh=sy[1], syw=sy[2], syc=sy[3],
                row_step=dh * sx[1], col_step=dw * sx[2], xoff=xoff)
    vals.update(zip(("yzp", "lo", "hi"), p.rq.geo()))
    geo_arr = np.array([vals[f] for f in QCONV_FIELDS] + rt + ct, np.int64)
    check_index(node, geo_arr, geo.n * geo.c * h * wd, geo.n * geo.m * oh * ow)
    return ConvPlan(depthwise, wq, wk, b2, xoff, vals, geo_arr)


class _QConvBase(Op):
    X, W = 0, 1

    def _params(self, node, ins) -> _QConv:
        raise NotImplementedError

    def check(self, node, ins):
        x, w = (ins[i] if i < len(ins) else None for i in (self.X, self.W))
        if x is None or w is None:
            raise shape_error(node, "missing input x or w")
        if all(t is None or t.is_const for t in ins):
            return
        if x.dtype not in INT8_TYPES:
            raise unsupported(node, f"input '{x.name}' is {x.dtype}; expected int8 or uint8")
        if w.dtype not in INT8_TYPES:
            raise unsupported(node, f"weight '{w.name}' is {w.dtype}; expected int8 or uint8")
        if not w.is_const:
            raise unsupported(node, f"weight '{w.name}' is computed at run time; weights must be constant")
        if len(w.shape) < 3:
            raise shape_error(node, f"weight {list(w.shape)} must be M x C/group x kernel")
        self._params(node, ins)

    def _out_dtype(self, node, ins) -> str:
        return "int32"

    def infer(self, node, ins):
        geo = qconv_geometry(node, ins[self.X].shape, ins[self.W].shape)
        out = geo.out_shape
        check_conv_limits(node, geo, self._out_dtype(node, ins))
        return [(_from_nchw(out) if channels_last(node) else out, self._out_dtype(node, ins))]

    def fold_cost(self, node, ins, outs):
        geo = qconv_geometry(node, ins[self.X].shape, ins[self.W].shape)   # the reference loops over taps
        return super().fold_cost(node, ins, outs, geo.group * geo.k[0] * geo.k[1])

    def reference(self, node, ins, *arrays):
        p = self._params(node, ins)
        x = np.asarray(arrays[self.X], np.int64)
        if p.cl:
            x = np.moveaxis(x, -1, 1)
        w = np.asarray(arrays[self.W], np.int64) - p.w_zp.reshape((-1,) + (1,) * (x.ndim - 1))
        acc = conv_int(x - p.x_zp, w, p.geo)
        if p.bias is not None:
            acc = acc + p.bias.reshape(1, -1, 1, 1)
        y = place_channels(p.rq.apply(acc, (1, -1, 1, 1)), p.ochan, 1).reshape(p.geo.out_shape)
        return [np.moveaxis(y, 1, -1) if p.cl else y]

    def macs(self, node, ins, outs):
        geo = qconv_geometry(node, ins[self.X].shape, ins[self.W].shape)
        return geo.n * geo.m * geo.out_hw[0] * geo.out_hw[1] * geo.cg * geo.k[0] * geo.k[1]

    def band_rows(self, node, ins, outs):
        x, w = ins[self.X], ins[self.W]
        if not channels_last(node) or len(x.shape) != 4:
            return "not a 2-D NHWC convolution"
        if x.shape[0] != 1:
            return f"batch {x.shape[0]}"
        if any(t is not None and not t.is_const for i, t in enumerate(ins) if i != self.X):
            return "a parameter is computed at run time"
        geo = qconv_geometry(node, x.shape, w.shape)
        (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
        # depthwise kernels convert the rows a band reads (planes, padded rings): ~2.5
        # instructions per byte read again; the others read windows per pixel anyway
        dw = geo.cg == 1 and geo.group > 1
        return tiling.Rows(k=(kh - 1) * geo.dilations[0] + 1, s=geo.strides[0], pt=geo.pad_begin[0], h_in=h,
                           h_out=oh, row_in=wd * geo.c * x.itemsize, row_out=ow * geo.m * outs[0].itemsize,
                           macs_row=geo.m * ow * geo.cg * kh * kw, outs_row=ow * geo.m, reread=2.5 if dw else 0.5)

    def band_node(self, node, ins, outs, c0, c1, x, y):
        geo = qconv_geometry(node, ins[self.X].shape, ins[self.W].shape)
        rows = self.band_rows(node, ins, outs)
        top, bottom = rows.pads(c0, c1)
        attrs = dict(node.attrs, pads=[top, geo.pad_begin[1], bottom, geo.pad_end[1]], auto_pad="NOTSET")
        sub = Node(f"{node.name}@{c1 - c0}r{top}{bottom}", node.op_type,
                   [x.name if i == self.X else t for i, t in enumerate(node.inputs)], [y.name], attrs, node.act,
                   list(node.fused), node.opset)
        assert qconv_geometry(sub, x.shape, ins[self.W].shape).out_hw == (c1 - c0, geo.out_hw[1]), (c0, c1)
        return sub

    def emit(self, node, ins, outs, k):
        x, w = ins[self.X], ins[self.W]
        p = self._params(node, ins)
        if outs[0].size == 0:
            return
        if isa.emit("qconv", self, node, ins, outs, k, p):
            return
        plan = conv_plan(node, x, w, p)
        depthwise, wk, b2, geo_arr = plan.depthwise, plan.wk, plan.b2, plan.geo_arr
        template = "qdwconv_s8" if depthwise else "qconv_s8"
        unused = ["cg"] if depthwise else []
        if p.cl:
            unused += ["sxc", "syc"]
        if p.rq.mode == "none":
            unused += ["yzp", "lo", "hi"]
        rev = not depthwise and k.variant() == "rev"
        omap = p.ochan is not None
        if omap and depthwise:   # (passes/fold_shuffle.py places channels of grouped layers only)
            raise unsupported(node, "_ochan on a depthwise convolution")
        name = (f"{CODES[x.dtype]}{CODES[wk.dtype.name]}{CODES[outs[0].dtype]}_{p.rq.mode}"
                + ("_nhwc" if p.cl else "_nchw") + ("_rev" if rev else "") + ("_om" if omap else ""))
        if p.rq.mode != "none":
            k.kernel(f"requant_{p.rq.mode}")
        fn = k.kernel(template, {"name": name, "xt": CTYPES[x.dtype], "wt": CTYPES[wk.dtype.name],
                                 "yt": CTYPES[outs[0].dtype], "rq": p.rq.mode, "cl": bool(p.cl),
                                 "fields": QCONV_FIELDS, "unused": unused, "rev": rev, "omap": omap})
        wsym = k.const(np.ascontiguousarray(wk), f"{w.name}_{'hwm' if depthwise else 'mhwc'}")
        bsym = k.const(b2, f"{node.name}_bias")
        g = k.const(geo_arr.astype(np.int32), "qconv_geo")
        # per pixel in raster order, each output channel written after its window is
        # read (the order models count bytes: one-byte elements in and out only)
        if p.cl and x.dtype in INT8_TYPES and outs[0].dtype in INT8_TYPES:
            k.order(self.X, lambda: windows.raster(p.geo, depthwise, group=1, cblock=1, opos=p.ochan,
                                                   what=f"{template}: pixels, channels one by one"))
            if not depthwise:   # the general kernel also runs from the last pixel down
                k.order(self.X, lambda: windows.raster(p.geo, False, group=1, cblock=1, reverse=True, opos=p.ochan,
                                                       what=f"{template}: pixels from the last down"), "rev")
        om = f", {k.const(p.ochan.astype(np.int32), f'{node.name}_ochan')}" if omap else ""
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {bsym}, {g}{om}{p.rq.c_args(k, node.name)});")


@register("QLinearConv", "com.microsoft.QLinearConv")
class QLinearConv(_QConvBase):
    """x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
    y_zero_point, [B int32]."""

    X, W = 0, 3
    fuses_act = True

    def _out_dtype(self, node, ins):
        yz = ins[7] if len(ins) > 7 else None
        return yz.dtype if yz is not None else ins[0].dtype

    def _params(self, node, ins) -> _QConv:
        if len(ins) < 7 or ins[1] is None or ins[4] is None or ins[6] is None:
            raise shape_error(node, "needs inputs x, x_scale, x_zero_point, w, w_scale, w_zero_point, "
                                    "y_scale, y_zero_point")
        x, w = ins[0], ins[3]
        geo = qconv_geometry(node, x.shape, w.shape)
        x_s, x_zp = scalar_qparams(node, ins[1], ins[2], "x", x.dtype)
        w_s, w_zp = weight_qparams(node, ins[4], ins[5], w, "w", geo.m)
        ydt = self._out_dtype(node, ins)
        if ydt not in INT8_TYPES:
            raise unsupported(node, f"y_zero_point '{ins[7].name}' is {ydt}; expected int8 or uint8")
        y_s, y_zp = scalar_qparams(node, ins[6], ins[7] if len(ins) > 7 else None, "y", ydt)
        bias = _bias(node, ins[8] if len(ins) > 8 else None, geo.m)
        rq = make_requant(node, x_s, w_s, y_s, y_zp, ydt, geo.m)
        return _QConv(geo, channels_last(node), x_zp, w_zp, bias, rq, out_channels(node, geo.m))


@register("ConvInteger")
class ConvInteger(_QConvBase):
    """x, w, [x_zero_point], [w_zero_point (per tensor or per output
    channel)] -> int32."""

    X, W = 0, 1

    def _params(self, node, ins) -> _QConv:
        x, w = ins[0], ins[1]
        geo = qconv_geometry(node, x.shape, w.shape)
        x_zp = zero_points(node, ins[2] if len(ins) > 2 else None, "x", 1, x.dtype)
        w_zp = zero_points(node, ins[3] if len(ins) > 3 else None, "w", geo.m, w.dtype)
        return _QConv(geo, channels_last(node), int(x_zp[0]), w_zp, None, NO_REQUANT, out_channels(node, geo.m))


def _bias(node, b, m: int) -> np.ndarray | None:
    if b is None:
        return None
    if b.dtype != "int32":
        raise unsupported(node, f"bias '{b.name}' is {b.dtype}; expected int32")
    if not b.is_const:
        raise unsupported(node, f"bias '{b.name}' is computed at run time; it must be constant")
    if tuple(b.shape) != (m,):
        raise shape_error(node, f"bias '{b.name}' {list(b.shape)} must be [{m}]")
    return np.asarray(b.data, np.int64)
