"""Conv (float32): 1-D and 2-D, groups (depthwise and general), strides,
dilations, explicit pads and auto_pad, optional bias, fused clamp.

Three kernels, chosen per node:
- pointwise (1x1 kernel, stride 1, no padding, one group): a matrix product
  W[M, C] x X[C, H*W] per image on the shared `matmul_f32` kernel;
- depthwise (one input channel per group, any channel multiplier):
  `dwconv2d_f32`, the channel's weights held in locals;
- everything else: the direct convolution `conv2d_f32`.
1-D convolutions run as 2-D ones with H = 1. Padding never costs a branch per
multiply-add: output rows/columns whose kernel window lies inside the input
(the interior, [oha, ohb) x [owa, owb)) use the whole kernel; the few border
rows/columns read their valid kernel range and first input index from small
tables computed here. Small kernels (KH*KW <= MAX_FIXED_TAPS) get a variant
with the kernel size fixed at compile time so the C compiler unrolls the
interior loops. A layer carrying `_ochan` (a channel shuffle folded into it,
see out_channels) runs on `conv2d_f32`, which stores each output channel
plane at its position.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import limits
from .base import Op, apply_act, register, require_float, shape_error, unsupported
from .gemm import emit_matmul

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
MAX_FIXED_TAPS = 25

# Order of the integers at the head of the conv kernels' `geo` array (the
# border tables follow at rt_at and ct_at).
CONV_FIELDS = ("nb", "groups", "cg", "mg", "ih_n", "iw_n", "oh_n", "ow_n", "kh_n", "kw_n",
               "sh", "sw", "pt", "pl", "row_step", "dw", "oha", "ohb", "owa", "owb", "rt_at", "ct_at")


@dataclass
class WindowGeometry:
    """What Conv and ConvTranspose (ops/convtranspose.TGeometry) share about
    their shape, with 1-D lifted to 2-D (H = KH = OH = 1, stride/dilation 1
    and no padding on that axis)."""

    spatial: int                    # 1 or 2: spatial rank of the ONNX node
    n: int
    c: int
    m: int
    group: int
    hw: tuple[int, int]             # input H, W
    k: tuple[int, int]              # KH, KW
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pad_begin: tuple[int, int]      # top, left

    @property
    def cg(self) -> int:
        return self.c // self.group

    @property
    def mg(self) -> int:
        return self.m // self.group

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.n, self.m) + self.out_hw[2 - self.spatial:]   # out_hw: each subclass's last field


@dataclass
class ConvGeometry(WindowGeometry):
    """Everything about a convolution's shape."""

    pad_end: tuple[int, int]        # bottom, right
    out_hw: tuple[int, int]

    def onnx_pads(self) -> list[int]:
        """Explicit ONNX `pads` (begins then ends) equivalent to auto_pad."""
        s = self.spatial
        return list(self.pad_begin[2 - s:]) + list(self.pad_end[2 - s:])


def _ints(node, name: str, default: list[int], n: int) -> list[int]:
    v = node.attr(name)
    if v is None:
        return list(default)
    v = [int(x) for x in v]
    if len(v) != n:
        raise shape_error(node, f"attribute {name}={v} needs {n} values")
    return v


def check_ranks(node, x_shape, w_shape, what: str) -> int:
    """The spatial rank (1 or 2) of a Conv or ConvTranspose (`what` names
    it) with input and weight of these shapes."""
    rank = len(x_shape)
    if rank >= 5:
        raise unsupported(node, f"{rank - 2}-D {what} (input {list(x_shape)}); only 1-D and 2-D are supported")
    if rank < 3:
        raise shape_error(node, f"input {list(x_shape)} must be N x C x spatial (rank 3 or 4)")
    if len(w_shape) != rank:
        raise shape_error(node, f"weight {list(w_shape)} must have the input's rank {rank}")
    return rank - 2


def window_attrs(node, w_shape, sp: int, extra: tuple = ()):
    """The kernel size and the attributes Conv and ConvTranspose share,
    checked: (ks, strides, dilations, pads, auto_pad). extra: more
    (name, values) to check against the extent limit."""
    ks = [int(d) for d in w_shape[2:]]
    kattr = node.attr("kernel_shape")
    if kattr is not None and [int(d) for d in kattr] != ks:
        raise shape_error(node, f"kernel_shape={list(kattr)} does not match weight {list(w_shape)}")
    strides = _ints(node, "strides", [1] * sp, sp)
    dil = _ints(node, "dilations", [1] * sp, sp)
    pads = _ints(node, "pads", [0] * 2 * sp, 2 * sp)
    if min(strides) < 1 or min(dil) < 1:
        raise shape_error(node, f"strides {strides} and dilations {dil} must be >= 1")
    for what, vals in (("strides", strides), ("dilations", dil), ("pads", pads)) + tuple(extra):
        for v in vals:
            limits.check_extent(int(v), f"node '{node.name}' ({node.op_type}): {what} value")
    if min(pads) < 0:
        raise unsupported(node, f"negative pads {pads}")
    if min(ks) < 1:
        raise shape_error(node, f"empty kernel {ks}")
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad not in AUTO_PADS:
        raise unsupported(node, f"auto_pad={auto_pad!r} (expected one of {', '.join(AUTO_PADS)})")
    return ks, strides, dil, pads, auto_pad


def conv_geometry(node, x_shape, w_shape) -> ConvGeometry:
    """Validate a Conv node against its input shapes; resolve auto_pad into
    explicit pads. Also usable by passes (e.g. Pad fusion needs the pads)."""
    sp = check_ranks(node, x_shape, w_shape, "convolution")
    n, c = int(x_shape[0]), int(x_shape[1])
    m, cg = int(w_shape[0]), int(w_shape[1])
    group = int(node.attr("group", 1))
    if group < 1 or c % group or m % group:
        raise shape_error(node, f"group={group} must divide input channels {c} and output channels {m}")
    if cg != c // group:
        raise shape_error(node, f"weight {list(w_shape)} has {cg} input channels per group; "
                                f"input has {c} channels in {group} group(s) = {c // group}")
    ks, strides, dil, pads, auto_pad = window_attrs(node, w_shape, sp)
    if auto_pad != "NOTSET" and any(pads):
        raise unsupported(node, f"auto_pad={auto_pad} together with explicit pads {pads} "
                                f"(ONNX forbids using both)")
    ins = [int(d) for d in x_shape[2:]]
    begin, end, out = [], [], []
    for i in range(sp):
        dk = (ks[i] - 1) * dil[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-ins[i] // strides[i])
            total = max(0, (o - 1) * strides[i] + dk - ins[i])
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            e = total - b
        else:
            b, e = (0, 0) if auto_pad == "VALID" else (pads[i], pads[sp + i])
            span = ins[i] + b + e - dk
            if span < 0:
                raise shape_error(node, f"kernel {ks} (dilated extent {dk}) is larger than the padded "
                                        f"input {ins[i] + b + e} on spatial axis {i}")
            o = span // strides[i] + 1
        begin.append(b)
        end.append(e)
        out.append(o)
    if sp == 1:
        ins, ks, strides, dil, begin, end, out = ([1] + ins, [1] + ks, [1] + strides, [1] + dil,
                                                   [0] + begin, [0] + end, [1] + out)
    return ConvGeometry(sp, n, c, m, group, tuple(ins), tuple(ks), tuple(strides), tuple(dil),
                        tuple(begin), tuple(end), tuple(out))


def check_conv_limits(node, geo: ConvGeometry, dtype: str) -> None:
    """Output size and border tables within limits.py, before anything loops
    over output positions (also for the integer convolutions)."""
    limits.check_shape(geo.out_shape, np.dtype(dtype).itemsize, f"node '{node.name}' ({node.op_type}): output")
    limits.check_table_rows(geo.n, f"node '{node.name}' ({node.op_type}): the batch")
    for ax, rows in zip("HW", border_rows(geo)):
        limits.check_table_rows(rows, f"node '{node.name}' ({node.op_type}): the border of axis {ax}")


def conv_nchw(x: np.ndarray, w: np.ndarray, geo: ConvGeometry, dtype=np.float64) -> np.ndarray:
    """Straightforward convolution in `dtype` (float64, or int64 for the exact
    integer reference): zero-pad the input, then for each kernel tap add the
    strided input window times that tap's weights. x NCHW, w [M, C/g, kH, kW]."""
    xd = np.asarray(x, dtype).reshape(geo.n, geo.c, *geo.hw)
    wd = np.asarray(w, dtype).reshape(geo.m, geo.cg, *geo.k)
    (pt, pl), (pb, pr) = geo.pad_begin, geo.pad_end
    xp = np.pad(xd, [(0, 0), (0, 0), (pt, pb), (pl, pr)])
    oh, ow = geo.out_hw
    (sh, sw), (dh, dw) = geo.strides, geo.dilations
    y = np.zeros((geo.n, geo.m, oh, ow), dtype)
    for g in range(geo.group):
        xg = xp[:, g * geo.cg:(g + 1) * geo.cg]
        wg = wd[g * geo.mg:(g + 1) * geo.mg]
        for i in range(geo.k[0]):
            for j in range(geo.k[1]):
                win = xg[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                y[:, g * geo.mg:(g + 1) * geo.mg] += np.einsum("nchw,mc->nmhw", win, wg[:, :, i, j])
    return y


def conv_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, geo: ConvGeometry) -> np.ndarray:
    """Float convolution, accumulated in float64 and rounded once at the end."""
    y = conv_nchw(x, w, geo, np.float64)
    if b is not None:
        y += np.asarray(b, np.float64).reshape(1, geo.m, 1, 1)
    return y.reshape(geo.out_shape)


def _interior(n_in: int, n_out: int, k: int, s: int, d: int, p: int) -> tuple[int, int]:
    """[a, b): the output positions whose whole kernel window lies inside the
    input (o*s - p >= 0 and o*s - p + (k-1)*d < n_in); (n_out, n_out) if none."""
    a = max(0, -(-p // s))
    b = min(n_out, (n_in - 1 - (k - 1) * d + p) // s + 1)
    return (a, b) if a < b else (n_out, n_out)


def border_rows(geo: ConvGeometry) -> list[int]:
    """Rows of the border tables per axis (H, W): positions outside the interior."""
    rows = []
    for ax in range(2):
        a, b = _interior(geo.hw[ax], geo.out_hw[ax], geo.k[ax], geo.strides[ax], geo.dilations[ax],
                         geo.pad_begin[ax])
        rows.append(a + geo.out_hw[ax] - b)
    return rows


def out_channels(node, m: int) -> np.ndarray | None:
    """The node's `_ochan` (set by passes/fold_shuffle.py): the channel
    position at which output channel m of the convolution is stored, a
    permutation of range(M) (a channel shuffle after the layer, folded into
    its stores); None: the natural order."""
    v = node.attr("_ochan")
    if v is None:
        return None
    pos = np.asarray(v, np.int64).reshape(-1)
    if pos.size != m or not np.array_equal(np.sort(pos), np.arange(m)):
        raise shape_error(node, f"_ochan must be a permutation of the {m} output channels")
    return pos


def place_channels(y: np.ndarray, pos: np.ndarray | None, axis: int) -> np.ndarray:
    """Output channel m of y stored at position pos[m] of `axis`."""
    if pos is None:
        return y
    return np.take(y, np.argsort(pos), axis=axis)


def _border_tables(n_in: int, n_out: int, k: int, s: int, d: int, p: int):
    """Interior [a, b) of output positions whose kernel window lies inside the
    input, and a table (3 ints per border position, positions [0, a) then
    [b, n_out)): first valid tap, end tap, input index of the first valid tap."""
    def taps(o):
        start = o * s - p
        lo = max(0, -(start // d))                 # first tap at or after input index 0
        hi = min(k - 1, (n_in - 1 - start) // d)   # last tap before n_in
        return (lo, hi + 1, start + lo * d) if lo <= hi else (0, 0, 0)

    a, b = _interior(n_in, n_out, k, s, d, p)
    table = [v for o in list(range(a)) + list(range(b, n_out)) for v in taps(o)]
    return a, b, table


def _kind(geo: ConvGeometry) -> str:
    if geo.group == 1 and geo.k == (1, 1) and geo.strides == (1, 1) and not any(geo.pad_begin + geo.pad_end):
        return "pointwise"
    if geo.cg == 1 and geo.group > 1:
        return "depthwise"
    return "direct"


@register("Conv")
class Conv(Op):
    fuses_act = True

    def check(self, node, ins):
        if all(t is None or t.is_const for t in ins):
            return
        if len(ins) < 2 or ins[1] is None:
            raise shape_error(node, "missing weight input W")
        require_float(node, ins, *[i for i in range(min(len(ins), 3)) if ins[i] is not None])
        if not ins[1].is_const:
            raise unsupported(node, f"weight '{ins[1].name}' is computed at run time; Conv weights must be constant")
        if len(ins) > 2 and ins[2] is not None and not ins[2].is_const:
            raise unsupported(node, f"bias '{ins[2].name}' is computed at run time; Conv bias must be constant")

    def infer(self, node, ins):
        geo = conv_geometry(node, ins[0].shape, ins[1].shape)
        b = ins[2] if len(ins) > 2 else None
        if b is not None and tuple(b.shape) != (geo.m,):
            raise shape_error(node, f"bias {list(b.shape)} must be [{geo.m}]")
        check_conv_limits(node, geo, ins[0].dtype)
        return [(geo.out_shape, ins[0].dtype)]

    def fold_cost(self, node, ins, outs):
        geo = conv_geometry(node, ins[0].shape, ins[1].shape)   # the reference loops over groups and taps
        return super().fold_cost(node, ins, outs, geo.group * geo.k[0] * geo.k[1])

    def reference(self, node, ins, x, w, b=None):
        geo = conv_geometry(node, np.shape(x), np.shape(w))
        y = conv_reference(x, w, b, geo).astype(np.asarray(x).dtype)
        return [place_channels(apply_act(y, node.act), out_channels(node, geo.m), 1)]

    def macs(self, node, ins, outs):
        geo = conv_geometry(node, ins[0].shape, ins[1].shape)
        return geo.n * geo.m * geo.out_hw[0] * geo.out_hw[1] * geo.cg * geo.k[0] * geo.k[1]

    def emit(self, node, ins, outs, k):
        from ..codegen import act_bounds
        x, w = ins[0], ins[1]
        b = ins[2] if len(ins) > 2 else None
        geo = conv_geometry(node, x.shape, w.shape)
        if outs[0].size == 0:
            return
        y_ptr, x_ptr = k.ptr(outs[0]), k.ptr(x)
        w_data = np.ascontiguousarray(np.asarray(w.data, np.float32))
        b_ptr = k.ptr(b) if b is not None else None
        pos = out_channels(node, geo.m)
        kind = _kind(geo) if pos is None else "direct"   # (only the direct kernel places channels)
        if kind == "pointwise":
            p = geo.hw[0] * geo.hw[1]
            # Y[M, P] = W[M, C] x X[C, P] + bias[M] (broadcast along P), per image.
            batches = [(0, i * geo.c * p, 0, i * geo.m * p) for i in range(geo.n)]
            emit_matmul(k, node, y_ptr, k.weight(w_data.reshape(geo.m, geo.c), w.name), x_ptr, b_ptr,
                        batches, geo.m, p, geo.c, (geo.c, 1), (p, 1), (1, 0))
            return
        (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
        (sh, sw), (dh, dw) = geo.strides, geo.dilations
        (pt, pl) = geo.pad_begin
        oha, ohb, rt = _border_tables(h, oh, kh, sh, dh, pt)
        owa, owb, ct = _border_tables(wd, ow, kw, sw, dw, pl)
        vals = dict(nb=geo.n, groups=geo.group, cg=geo.cg, mg=geo.mg, ih_n=h, iw_n=wd, oh_n=oh, ow_n=ow,
                    kh_n=kh, kw_n=kw, sh=sh, sw=sw, pt=pt, pl=pl, row_step=dh * wd, dw=dw,
                    oha=oha, ohb=ohb, owa=owa, owb=owb, rt_at=len(CONV_FIELDS),
                    ct_at=len(CONV_FIELDS) + len(rt))
        geo_arr = np.array([vals[f] for f in CONV_FIELDS] + rt + ct, np.int64)
        if max(geo.n * geo.c * h * wd, geo.n * geo.m * oh * ow, int(np.abs(geo_arr).max())) >= 2 ** 31:
            raise shape_error(node, "tensor too large for 32-bit indexing")
        fixed = kh * kw <= MAX_FIXED_TAPS and k.opt_level >= 3   # -O3: shape-specialized kernels
        template = "dwconv2d_f32" if kind == "depthwise" else "conv2d_f32"
        wsym = k.weight(w_data, w.name)
        half = wsym in k.half_symbols
        variant = {"name": "_".join(filter(None, [f"k{kh}x{kw}" if fixed else "", "h" if half else "",
                                                  "om" if pos is not None else ""])),
                   "kh": kh if fixed else 0, "kw": kw if fixed else 0, "fields": CONV_FIELDS, "fp16": half,
                   "omap": pos is not None}
        fn = k.kernel(template, variant)
        lo, hi = act_bounds(node)
        g = k.const(geo_arr.astype(np.int32), "conv_geo")
        omap = "" if pos is None else ", " + k.const(pos.astype(np.int32), f"{node.name}_ochan")
        k.line(f"{fn}({y_ptr}, {x_ptr}, {wsym}, {b_ptr if b_ptr else 'NULL'}, {g}, {lo}, {hi}{omap});")

