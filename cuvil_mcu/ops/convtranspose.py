"""ConvTranspose (float32) and cuvil.QConvTranspose (its integer form, what
passes/qdq.py makes of DequantizeLinear -> ConvTranspose -> QuantizeLinear):
1-D and 2-D, strides, dilations, groups, pads, output_padding, output_shape,
auto_pad, optional bias, fused clamp.

Shape rule (ONNX ConvTranspose-11 and later), per spatial axis, with the
dilated kernel extent dk = (k - 1) * d + 1:
- output_shape given: out = output_shape, total = s * (in - 1) +
  output_padding + dk - out; SAME_UPPER puts total // 2 at the begin, every
  other auto_pad (NOTSET, SAME_LOWER) total - total // 2 (onnxruntime and
  the ONNX reference agree); a negative total (an output_shape beyond what
  the kernel reaches) puts 0 at the begin: the extra outputs at the end
  hold the bias, as in onnxruntime;
- SAME_UPPER / SAME_LOWER: out = in * s, the total split as above;
- VALID: pads 0; NOTSET: the pads attribute;
  out = s * (in - 1) + output_padding + dk - pad_begin - pad_end.
Negative pads are an error.

The references scatter: every input pixel times every tap adds to output
position i * s - pad_begin + k * d (float64 for float, int64 exact for the
integer form), the straightforward reading of the definition.

The kernels gather instead, split into stride_h * stride_w phases (the
"sub-pixel" decomposition): the outputs o = s * q + r of one phase r read
only the taps k with (r + pad_begin - k * d) divisible by s, from input
q + (r + pad_begin - k * d) / s. So each phase is an ordinary stride-1
convolution over the input (dilation d / gcd(d, s), "padding" minus the
smallest offset, which may be negative) whose outputs land s apart in y:
no multiply by an inserted zero, no scratch, no scattered accumulator.
`phases` builds them at compile time; each is one kernel call writing
through y strides. A phase without taps (kernel smaller than the stride)
gets one zero tap, so the kernels write its bias.

Kernels: float32 `convt_f32` (NCHW, per phase); the integer form uses the
int8 convolution kernel `qconv_s8` (ops/qconv.py) per phase (its y strides
address the phase's outputs), the DSP / Helium variants of isa/dsp_convt.py
and isa/mve_convt.py where the board has them.

cuvil.QConvTranspose inputs: x, x_scale, x_zero_point, w [C, M/group, kH,
kW], w_scale (1 or M values: per output channel), w_zero_point, y_scale,
y_zero_point, [bias int32 at x_scale * w_scale]. Numerics as QLinearConv
(ops/qconv.py): acc = bias + sum w * (x - x_zp) in int32, requantization per
output channel in the graph's mode (fixed: TFLM's; float: onnxruntime's
float32 scale, which is what onnxruntime computes for a QDQ ConvTranspose up
to the rounding of its float accumulation), + y_zp, clamp, saturation.
`_channels_last` = 1 (passes/layout.py): x and y are NHWC (1-D: NWC).
MACs: the (input pixel, tap) pairs that land inside the output, times the
input channels per group and the output channels.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import numpy as np

from .. import isa, limits
from .base import Op, apply_act, register, require_float, shape_error, unsupported
from .conv import ConvGeometry, WindowGeometry, _border_tables, _ints, border_rows, check_ranks, window_attrs
from .qconv import QCONV_FIELDS, _QConv, _bias, _from_nchw, channels_last, conv_plan, nchw_input
from .qgemm import (CODES, CTYPES, INT8_TYPES, check_index, make_requant, scalar_qparams, weight_qparams)


@dataclass
class TGeometry(WindowGeometry):
    """A ConvTranspose's shape (pad_begin: what the definition crops at the
    start of each axis)."""

    out_hw: tuple[int, int]


def convt_geometry(node, x_shape, w_shape) -> TGeometry:
    """Validate a ConvTranspose (NCHW shapes) and resolve its output size and
    begin pads (see the module docstring)."""
    sp = check_ranks(node, x_shape, w_shape, "ConvTranspose")
    n, c = int(x_shape[0]), int(x_shape[1])
    group = int(node.attr("group", 1))
    if group < 1 or c % group:
        raise shape_error(node, f"group={group} must divide the input channels {c}")
    if int(w_shape[0]) != c:
        raise shape_error(node, f"weight {list(w_shape)} must be [C={c}, M/group, kernel...]")
    m = int(w_shape[1]) * group
    opad = _ints(node, "output_padding", [0] * sp, sp)
    ks, strides, dil, pads, auto_pad = window_attrs(node, w_shape, sp, (("output_padding", opad),
                                                    ("output_shape", node.attr("output_shape") or [])))
    if min(opad) < 0:
        raise shape_error(node, f"output_padding {opad} must be >= 0")
    oshape = node.attr("output_shape")
    if oshape is not None:
        oshape = [int(v) for v in oshape]
        if len(oshape) not in (sp, sp + 2):
            raise shape_error(node, f"output_shape={oshape} needs {sp} spatial sizes")
        oshape = oshape[-sp:]
    ins = [int(d) for d in x_shape[2:]]
    begin, out = [], []
    for i in range(sp):
        dk = (ks[i] - 1) * dil[i] + 1
        full = strides[i] * (ins[i] - 1) + opad[i] + dk
        if oshape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = oshape[i] if oshape is not None else ins[i] * strides[i]
            total = full - o
            # an output beyond the kernel's reach grows at the end (bias only there)
            b = 0 if total < 0 else total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        else:
            b, e = (0, 0) if auto_pad == "VALID" else (pads[i], pads[sp + i])
            o = full - b - e
        if o < 1:
            raise shape_error(node, f"output size {o} on spatial axis {i} (pads {pads} crop everything)")
        begin.append(b)
        out.append(o)
    if sp == 1:
        ins, ks, strides, dil, begin, out = [1] + ins, [1] + ks, [1] + strides, [1] + dil, [0] + begin, [1] + out
    return TGeometry(sp, n, c, m, group, tuple(ins), tuple(ks), tuple(strides), tuple(dil), tuple(begin),
                     tuple(out))


def convt_nchw(x: np.ndarray, w: np.ndarray, geo: TGeometry, dtype=np.float64) -> np.ndarray:
    """The definition, in `dtype` (float64, or int64 for the exact integer
    reference): each tap (kh, kw) adds x times that tap's weights at output
    rows i * sh - pt + kh * dh (columns likewise); x NCHW, w [C, M/g, kH, kW]."""
    (h, wd), (kh_n, kw_n) = geo.hw, geo.k
    (sh, sw), (dh, dw) = geo.strides, geo.dilations
    (pt, pl), (oh, ow) = geo.pad_begin, geo.out_hw
    xd = np.asarray(x, dtype).reshape(geo.n, geo.c, h, wd)
    wt = np.asarray(w, dtype).reshape(geo.c, geo.mg, kh_n, kw_n)
    ch = max((h - 1) * sh + (kh_n - 1) * dh + 1, pt + oh)     # canvas: output row o is canvas row o + pt
    cw = max((wd - 1) * sw + (kw_n - 1) * dw + 1, pl + ow)
    canvas = np.zeros((geo.n, geo.m, ch, cw), dtype)
    for g in range(geo.group):
        xg = xd[:, g * geo.cg:(g + 1) * geo.cg]
        wg = wt[g * geo.cg:(g + 1) * geo.cg]
        for i in range(kh_n):
            for j in range(kw_n):
                canvas[:, g * geo.mg:(g + 1) * geo.mg, i * dh:i * dh + (h - 1) * sh + 1:sh,
                       j * dw:j * dw + (wd - 1) * sw + 1:sw] += np.einsum("nchw,cm->nmhw", xg, wg[:, :, i, j])
    return canvas[:, :, pt:pt + oh, pl:pl + ow]


def _landing(n_in: int, n_out: int, k: int, s: int, d: int, p: int) -> int:
    """(input index, tap) pairs of one axis that land inside the output:
    per tap t, the inputs i with 0 <= i*s - p + t*d < n_out (a range of i)."""
    t = np.arange(k, dtype=np.int64)
    lo = np.maximum(0, -((t * d - p) // s))                      # ceil((p - t*d) / s), at least 0
    hi = np.minimum(n_in - 1, (n_out - 1 + p - t * d) // s)
    return int(np.maximum(0, hi - lo + 1).sum())


def check_convt_limits(node, geo: TGeometry, dtype: str) -> None:
    """Output size, phase count and each phase's border tables within
    limits.py, before the emitters loop over them (also for the integer form)."""
    limits.check_shape(geo.out_shape, np.dtype(dtype).itemsize, f"node '{node.name}' ({node.op_type}): output")
    limits.check_table_rows(geo.n, f"node '{node.name}' ({node.op_type}): the batch")
    limits.check_table_rows(geo.strides[0] * geo.strides[1], f"node '{node.name}' ({node.op_type}): the stride "
                                                              f"phases {list(geo.strides)}")
    for ph in phases(geo):
        for ax, rows in zip("HW", border_rows(ph.geo)):
            limits.check_table_rows(rows, f"node '{node.name}' ({node.op_type}): the border of axis {ax}")


def convt_macs(geo: TGeometry) -> int:
    ry = _landing(geo.hw[0], geo.out_hw[0], geo.k[0], geo.strides[0], geo.dilations[0], geo.pad_begin[0])
    rx = _landing(geo.hw[1], geo.out_hw[1], geo.k[1], geo.strides[1], geo.dilations[1], geo.pad_begin[1])
    return geo.n * geo.m * geo.cg * ry * rx


# --------------------------------------------------------------------------- phases

@dataclass
class Phase:
    """One output phase (ry, rx) as a stride-1 convolution over the input:
    output (q, p) of the phase is y[ry + sh * q][rx + sw * p]; tap (jy, jx)
    reads input (q - pt + jy * dh, p - pl + jx * dw) with the kernel tap
    (ky[jy], kx[jx]) (None: a zero tap of a phase without taps)."""

    ry: int
    rx: int
    geo: ConvGeometry          # stride 1, pads (pt, pl) possibly negative, out_hw = phase outputs
    ky: list
    kx: list


def _axis_phase(r: int, n_out: int, k: int, s: int, d: int, p: int):
    """(outputs of phase r, taps by ascending input offset, pad, dilation)."""
    count = max(0, -(-(n_out - r) // s))
    taps = sorted(((r + p - t * d) // s, t) for t in range(k) if (r + p - t * d) % s == 0)
    if not taps:
        return count, [None], 0, 1
    dd = d // gcd(d, s)
    return count, [t for _, t in taps], -taps[0][0], dd


def phases(geo: TGeometry) -> list[Phase]:
    out = []
    for ry in range(geo.strides[0]):
        ny, ky, pt, dh = _axis_phase(ry, geo.out_hw[0], geo.k[0], geo.strides[0], geo.dilations[0], geo.pad_begin[0])
        for rx in range(geo.strides[1]):
            nx, kx, pl, dw = _axis_phase(rx, geo.out_hw[1], geo.k[1], geo.strides[1], geo.dilations[1],
                                         geo.pad_begin[1])
            if ny == 0 or nx == 0:
                continue
            cg = ConvGeometry(2, geo.n, geo.c, geo.m, geo.group, geo.hw, (len(ky), len(kx)), (1, 1), (dh, dw),
                              (pt, pl), (0, 0), (ny, nx))
            out.append(Phase(ry, rx, cg, ky, kx))
    return out


def phase_weights(w: np.ndarray, geo: TGeometry, ph: Phase) -> np.ndarray:
    """The phase's convolution weights [M][C/group][Ty][Tx] (Conv layout)
    from the ConvTranspose weights [C][M/group][kH][kW]."""
    wt = np.asarray(w).reshape(geo.c, geo.mg, *geo.k)
    out = np.zeros((geo.m, geo.cg, len(ph.ky), len(ph.kx)), wt.dtype)
    for g in range(geo.group):
        blk = wt[g * geo.cg:(g + 1) * geo.cg].transpose(1, 0, 2, 3)          # [mg][cg][kH][kW]
        for jy, ty in enumerate(ph.ky):
            for jx, tx in enumerate(ph.kx):
                if ty is not None and tx is not None:
                    out[g * geo.mg:(g + 1) * geo.mg, :, jy, jx] = blk[:, :, ty, tx]
    return out


def y_strides(geo: TGeometry, cl: bool) -> tuple[int, int, int, int]:
    """Element strides (batch, row, column, channel) of y in its layout."""
    (oh, ow), m = geo.out_hw, geo.m
    if cl:
        return oh * ow * m, ow * m, m, 1
    return m * oh * ow, ow, 1, oh * ow


def phase_offset(geo: TGeometry, ph: Phase, cl: bool) -> int:
    """Element offset in y of the phase's first output."""
    _, syh, syw, _ = y_strides(geo, cl)
    return ph.ry * syh + ph.rx * syw


# --------------------------------------------------------------------------- float

# Order of the integers of convt_f32's `geo` array (border tables follow at rt_at, ct_at).
CONVT_FIELDS = ("nb", "groups", "cg", "mg", "ih_n", "iw_n", "oh_n", "ow_n", "kh_n", "kw_n", "pt", "pl",
                "dh", "dw", "syb", "syc", "syh", "syw", "oha", "ohb", "owa", "owb", "rt_at", "ct_at")


def _check_consts(node, ins, wi: int, bi: int) -> None:
    w = ins[wi] if wi < len(ins) else None
    if w is None:
        raise shape_error(node, "missing weight input W")
    if not w.is_const:
        raise unsupported(node, f"weight '{w.name}' is computed at run time; ConvTranspose weights must be constant")
    b = ins[bi] if bi < len(ins) else None
    if b is not None and not b.is_const:
        raise unsupported(node, f"bias '{b.name}' is computed at run time; ConvTranspose bias must be constant")


@register("ConvTranspose")
class ConvTranspose(Op):
    fuses_act = True

    def check(self, node, ins):
        if all(t is None or t.is_const for t in ins):
            return
        _check_consts(node, ins, 1, 2)
        require_float(node, ins, *[i for i in range(min(len(ins), 3)) if ins[i] is not None])

    def infer(self, node, ins):
        geo = convt_geometry(node, ins[0].shape, ins[1].shape)
        b = ins[2] if len(ins) > 2 else None
        if b is not None and tuple(b.shape) != (geo.m,):
            raise shape_error(node, f"bias {list(b.shape)} must be [{geo.m}]")
        check_convt_limits(node, geo, ins[0].dtype)
        return [(geo.out_shape, ins[0].dtype)]

    def reference(self, node, ins, x, w, b=None):
        geo = convt_geometry(node, np.shape(x), np.shape(w))
        y = convt_nchw(x, w, geo, np.float64)
        if b is not None:
            y = y + np.asarray(b, np.float64).reshape(1, geo.m, 1, 1)
        return [apply_act(y.reshape(geo.out_shape).astype(np.asarray(x).dtype), node.act)]

    def macs(self, node, ins, outs):
        return convt_macs(convt_geometry(node, ins[0].shape, ins[1].shape))

    def fold_cost(self, node, ins, outs):
        geo = convt_geometry(node, ins[0].shape, ins[1].shape)   # the reference loops over groups and taps
        return super().fold_cost(node, ins, outs, geo.group * geo.k[0] * geo.k[1])

    def emit(self, node, ins, outs, k):
        from ..codegen import act_bounds
        x, w = ins[0], ins[1]
        b = ins[2] if len(ins) > 2 else None
        geo = convt_geometry(node, x.shape, w.shape)
        if outs[0].size == 0:
            return
        syb, syh, syw, syc = y_strides(geo, False)
        lo, hi = act_bounds(node)
        wdata = np.asarray(w.data, np.float32)
        bsym = k.ptr(b) if b is not None else "NULL"
        fn = k.kernel("convt_f32", {"fields": CONVT_FIELDS})
        for ph in phases(geo):
            pg = ph.geo
            (h, wd), (oh, ow), (kh, kw) = pg.hw, pg.out_hw, pg.k
            oha, ohb, rt = _border_tables(h, oh, kh, 1, pg.dilations[0], pg.pad_begin[0])
            owa, owb, ct = _border_tables(wd, ow, kw, 1, pg.dilations[1], pg.pad_begin[1])
            vals = dict(nb=geo.n, groups=geo.group, cg=geo.cg, mg=geo.mg, ih_n=h, iw_n=wd, oh_n=oh, ow_n=ow,
                        kh_n=kh, kw_n=kw, pt=pg.pad_begin[0], pl=pg.pad_begin[1], dh=pg.dilations[0],
                        dw=pg.dilations[1], syb=syb, syc=syc, syh=syh * geo.strides[0], syw=syw * geo.strides[1],
                        oha=oha, ohb=ohb, owa=owa, owb=owb, rt_at=len(CONVT_FIELDS),
                        ct_at=len(CONVT_FIELDS) + len(rt))
            arr = np.array([vals[f] for f in CONVT_FIELDS] + rt + ct, np.int64)
            check_index(node, arr, geo.n * geo.c * h * wd, geo.n * geo.m * geo.out_hw[0] * geo.out_hw[1])
            wsym = k.const(np.ascontiguousarray(phase_weights(wdata, geo, ph)), f"{w.name}_phase")
            g = k.const(arr.astype(np.int32), "convt_geo")
            yp = f"{k.ptr(outs[0])} + {phase_offset(geo, ph, False)}"
            k.line(f"{fn}({yp}, {k.ptr(x)}, {wsym}, {bsym}, {g}, {lo}, {hi});")


# --------------------------------------------------------------------------- integer

def qconvt_geometry(node, x_shape, w_shape) -> TGeometry:
    return convt_geometry(node, nchw_input(node, x_shape), w_shape)


@dataclass
class QConvT:
    geo: TGeometry
    cl: int
    x_zp: int
    w_zp: np.ndarray
    bias: np.ndarray | None
    rq: object


def phase_params(p: QConvT, ph: Phase) -> _QConv:
    """The phase as the integer convolution ops/qconv.py's kernels take."""
    return _QConv(ph.geo, p.cl, p.x_zp, p.w_zp, p.bias, p.rq)


class _PhaseW:
    """A phase's weights where ops/qconv.py's planner expects a Tensor."""

    def __init__(self, data):
        self.data = data


@register("cuvil.QConvTranspose")
class QConvTranspose(Op):
    """x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
    y_zero_point, [bias]; see the module docstring."""

    fuses_act = True
    X, W = 0, 3

    def params(self, node, ins) -> QConvT:
        if len(ins) < 7 or any(ins[i] is None for i in (0, 1, 3, 4, 6)):
            raise shape_error(node, "needs inputs x, x_scale, x_zero_point, w, w_scale, w_zero_point, "
                                    "y_scale, y_zero_point")
        x, w = ins[0], ins[3]
        geo = qconvt_geometry(node, x.shape, w.shape)
        x_s, x_zp = scalar_qparams(node, ins[1], ins[2], "x", x.dtype)
        w_s, w_zp = weight_qparams(node, ins[4], ins[5], w, "w", geo.m)
        yz = ins[7] if len(ins) > 7 else None
        ydt = yz.dtype if yz is not None else x.dtype
        if ydt not in INT8_TYPES:
            raise unsupported(node, f"y_zero_point '{yz.name}' is {ydt}; expected int8 or uint8")
        y_s, y_zp = scalar_qparams(node, ins[6], yz, "y", ydt)
        bias = _bias(node, ins[8] if len(ins) > 8 else None, geo.m)
        rq = make_requant(node, x_s, w_s, y_s, y_zp, ydt, geo.m)
        return QConvT(geo, channels_last(node), x_zp, w_zp, bias, rq)

    def check(self, node, ins):
        x = ins[0] if ins else None
        w = ins[3] if len(ins) > 3 else None
        if x is None or w is None:
            raise shape_error(node, "missing input x or w")
        if x.dtype not in INT8_TYPES:
            raise unsupported(node, f"input '{x.name}' is {x.dtype}; expected int8 or uint8")
        if w.dtype not in INT8_TYPES:
            raise unsupported(node, f"weight '{w.name}' is {w.dtype}; expected int8 or uint8")
        _check_consts(node, ins, 3, 8)
        self.params(node, ins)

    def infer(self, node, ins):
        p = self.params(node, ins)
        out = p.geo.out_shape
        check_convt_limits(node, p.geo, p.rq.dtype)
        return [(_from_nchw(out) if p.cl else out, p.rq.dtype)]

    def reference(self, node, ins, *arrays):
        p = self.params(node, ins)
        x = np.asarray(arrays[0], np.int64)
        if p.cl:
            x = np.moveaxis(x, -1, 1)
        geo = p.geo
        # per output channel m = g * mg + j: weights [C][mg] take w_zp[g * mg + j]
        zp = p.w_zp.reshape(geo.group, 1, geo.mg)
        w = np.asarray(arrays[3], np.int64).reshape(geo.group, geo.cg, geo.mg, -1) - zp[..., None]
        acc = convt_nchw(x - p.x_zp, w.reshape(geo.c, geo.mg, *geo.k), geo, np.int64)
        if p.bias is not None:
            acc = acc + p.bias.reshape(1, -1, 1, 1)
        y = p.rq.apply(acc, (1, -1, 1, 1)).reshape(geo.out_shape)
        return [np.moveaxis(y, 1, -1) if p.cl else y]

    def macs(self, node, ins, outs):
        return convt_macs(self.params(node, ins).geo)

    def fold_cost(self, node, ins, outs):
        geo = self.params(node, ins).geo   # the reference loops over groups and taps
        return super().fold_cost(node, ins, outs, geo.group * geo.k[0] * geo.k[1])

    def emit(self, node, ins, outs, k):
        p = self.params(node, ins)
        if outs[0].size == 0:
            return
        if isa.emit("qconvt", self, node, ins, outs, k, p):
            return
        x, w, y = ins[0], ins[3], outs[0]
        geo = p.geo
        syb, syh, syw, syc = y_strides(geo, p.cl)
        for ph in phases(geo):
            wp = phase_weights(np.asarray(w.data), geo, ph)
            plan = conv_plan(node, x, _PhaseW(wp), phase_params(p, ph))
            depthwise, wk = plan.depthwise, plan.wk
            vals = dict(plan.vals, syb=syb, syh=syh * geo.strides[0], syw=syw * geo.strides[1], syc=syc)
            arr = np.array([vals[f] for f in QCONV_FIELDS] + list(plan.geo_arr[len(QCONV_FIELDS):]), np.int64)
            check_index(node, arr, geo.n * geo.m * geo.out_hw[0] * geo.out_hw[1])
            template = "qdwconv_s8" if depthwise else "qconv_s8"
            unused = ["cg"] if depthwise else []
            if p.cl:
                unused += ["sxc", "syc"]
            name = (f"{CODES[x.dtype]}{CODES[wk.dtype.name]}{CODES[y.dtype]}_{p.rq.mode}"
                    + ("_nhwc" if p.cl else "_nchw"))
            k.kernel(f"requant_{p.rq.mode}")
            fn = k.kernel(template, {"name": name, "xt": CTYPES[x.dtype], "wt": CTYPES[wk.dtype.name],
                                     "yt": CTYPES[y.dtype], "rq": p.rq.mode, "cl": bool(p.cl),
                                     "fields": QCONV_FIELDS, "unused": unused, "rev": False, "omap": False})
            wsym = k.const(np.ascontiguousarray(wk), f"{w.name}_{'hwm' if depthwise else 'mhwc'}")
            bsym = k.const(plan.b2, f"{node.name}_bias")
            g = k.const(arr.astype(np.int32), "qconv_geo")
            yp = f"{k.ptr(y)} + {phase_offset(geo, ph, p.cl)}"
            k.line(f"{fn}({yp}, {k.ptr(x)}, {wsym}, {bsym}, {g}{p.rq.c_args(k, node.name)});")
