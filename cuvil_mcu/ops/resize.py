"""Resize and Upsample (float32; nearest on any element type) and
cuvil.QResize (their int8 / uint8 form, what passes/qdq.py makes of
DequantizeLinear -> Resize -> QuantizeLinear with one parameter set).

Forms read (scales / sizes must be constants; `resolve` says why not):
Upsample-7 (scales attribute), Upsample-9 and Resize-10 (X, scales): asymmetric
coordinates, onnxruntime's "simple" nearest rounding (truncate when
upsampling, ceil when downsampling); Resize-11/13 (X, roi, scales, sizes) and
Resize-18/19 (+ axes, keep_aspect_ratio_policy, antialias). Modes: nearest
(nearest_mode round_prefer_floor, round_prefer_ceil, floor, ceil), linear,
cubic (cubic_coeff_a, exclude_outside); coordinate_transformation_mode
half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners,
asymmetric, tf_half_pixel_for_nn. Not supported (an error naming the node
and attribute): tf_crop_and_resize, antialias=1 where it changes something
(linear/cubic downscaling), more than two resized axes.

Output size: floor(in * scale) with the float32 product (onnxruntime), or the
sizes (scale = out / in in float32; keep_aspect_ratio_policy not_larger /
not_smaller: one scale, out = round(scale * in)).

Everything about coordinates is decided here at compile time, per resized
axis, as tables; the kernels only gather and weigh. The coordinate of
output o is onnxruntime's float32 formula (e.g. half_pixel: (o + 0.5f) /
scale - 0.5f), an axis with scale 1 maps to itself.
- nearest: one input index per output (nearest_mode rounding of that
  coordinate, clamped to [0, in - 1]): a copy, on any element type.
- linear: onnxruntime's bilinear weights: c = clamp(coordinate, 0, in - 1),
  i1 = (int)c, i2 = min(i1 + 1, in - 1), weights |c - i2| for i1 and
  |c - i1| for i2 (0.5 each where i1 == i2); y = ((w_x1 w_y1 x11 + w_x2 w_y1
  x21) + w_x1 w_y2 x12) + w_x2 w_y2 x22 in float32, each weight product
  formed first: onnxruntime's own order, so a float model's bilinear Resize
  matches it bit for bit (built without FMA contraction, as the header's
  C99 builds are). For rank-4 NCHW (or NHWC) inputs both spatial axes enter
  this formula even when only one is resized, as in onnxruntime.
- cubic: the 4 taps floor(c) - 1 .. floor(c) + 2 (clamped to the edge) with
  Keys' coefficients for cubic_coeff_a (exclude_outside: taps outside get 0,
  the rest renormalized), separable: y = sum_i wy_i * (sum_j wx_j * x).
  Within float32 rounding of onnxruntime (its order differs).
At most two axes are interpolated; the tensor is viewed as [A][H][B][W][C]
around them (NCHW: A = N * C, B = C = 1; NHWC: A = N, B = 1).

cuvil.QResize (inputs x, x_scale, x_zero_point, y_scale, y_zero_point; the
two parameter sets equal; attributes mode, coordinate_transformation_mode,
nearest_mode and the resolved `_scales` / `_sizes` in NCHW order;
`_channels_last` = 1 after passes/layout.py: NHWC):
- nearest: the copy above, in both requantization modes;
- linear, rank 4 (2-D images), in the node's `_requant` mode:
  "fixed" = TensorFlow Lite Micro's RESIZE_BILINEAR int8
  (reference_ops::ResizeBilinearInteger): per axis a Q10 coordinate
  v = o * s10 (+ s10 / 2 - 512 with half pixel centers) with s10 = round(1024
  * in / out) (align_corners: (1024 (in - 1) + (out - 1) / 2) / (out - 1);
  an ONNX scale that is not out / in: round(1024 / scale)); i0 = max(v /
  1024, 0), i1 = min((v + 1023) / 1024, in - 1), weight w1 = v - 1024 i0 of
  i1 and 1024 - w1 of i0 (C division); then per channel, on the raw codes,
  acc = sum x * wy * wx (the four weight products sum to 2^20) and
  y = (acc + (acc > 0 ? 2^19 : -2^19)) / 2^20 (round half away from zero, C
  division: TFLM without TFLITE_SINGLE_ROUNDING). half_pixel and
  pytorch_half_pixel use the half-pixel form, align_corners and asymmetric
  the plain one; other coordinate modes take the Q10 rounding
  floor(1024 c + 0.5) of the float coordinate c.
  "float" = onnxruntime's DequantizeLinear -> Resize -> QuantizeLinear:
  x dequantized (float32 (x - zp) * scale), the float bilinear formula
  above, then round half to even of acc / scale, + zp, saturated: bit for
  bit what onnxruntime computes for a QDQ Resize (it keeps the float Resize
  between the DequantizeLinear and the QuantizeLinear).
Other int8 Resizes (cubic, rank-3 linear, different parameters in and
out) stay float between their DequantizeLinear and QuantizeLinear.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .. import isa, limits, quant
from .base import Op, register, shape_error, unsupported
from .qelementwise import CODES, CTYPES, F32, INT8_TYPES, requant_mode, unary_qparams

MODES = ("nearest", "linear", "cubic")
COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_half_pixel_for_nn")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
POLICIES = ("stretch", "not_larger", "not_smaller")

# Order of the integers of the resize kernels' `g` array.
RESIZE_FIELDS = ("na", "h", "nb", "w", "cn", "oh", "ow", "th", "tw", "sxa", "sxb", "sya", "syh", "syb", "syw")


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@dataclass
class Spec:
    """A Resize resolved at compile time: mode, coordinate and rounding
    modes, cubic parameters, per-axis float32 scales and the output shape."""

    mode: str
    coord: str
    nearest: str
    cubic_a: float
    exclude_outside: bool
    scales: tuple
    out: tuple


def _const_vals(node, t, what: str, kind):
    """Values of an optional constant input; None when absent or empty."""
    if t is None:
        return None
    if not t.is_const:
        raise unsupported(node, f"{what} '{t.name}' is computed at run time; {node.op_type} needs constant "
                                f"scales or sizes (static shapes)")
    v = np.asarray(t.data).reshape(-1)
    return [kind(a) for a in v] if v.size else None


def resolve_inputs(node, ins) -> Spec:
    """The node's Spec from its attributes and (constant) inputs; raises
    UnsupportedOpError / ShapeError naming the attribute or input."""
    x = ins[0]
    rank = len(x.shape)
    opset = node.opset or 22
    get = lambda i: ins[i] if i < len(ins) else None   # noqa: E731
    mode = _s(node.attr("mode", "nearest"))
    if mode not in MODES:
        raise unsupported(node, f"mode={mode!r} (expected one of {', '.join(MODES)})")
    axes = None
    policy = "stretch"
    if node.op_type == "Upsample" or opset < 11:
        coord, nearest = "asymmetric", "simple"
        if node.op_type == "Upsample" and node.attr("scales") is not None:
            scales = [float(v) for v in node.attr("scales")]
        else:
            scales = _const_vals(node, get(1), "scales", float)
        sizes = None
        if scales is None:
            raise shape_error(node, "scales are missing")
        if mode == "cubic":
            raise unsupported(node, f"mode='cubic' in {node.op_type}-{opset} (cubic needs Resize-11 or later)")
    else:
        coord = _s(node.attr("coordinate_transformation_mode", "half_pixel"))
        nearest = _s(node.attr("nearest_mode", "round_prefer_floor"))
        if coord == "tf_crop_and_resize":
            raise unsupported(node, "coordinate_transformation_mode='tf_crop_and_resize' (crop boxes from roi) is "
                                    "not supported; resize the whole tensor, or Slice first")
        if coord not in COORDS:
            raise unsupported(node, f"coordinate_transformation_mode={coord!r} (expected one of {', '.join(COORDS)})")
        if mode == "nearest" and nearest not in NEAREST:
            raise unsupported(node, f"nearest_mode={nearest!r} (expected one of {', '.join(NEAREST)})")
        scales = _const_vals(node, get(2), "scales", float)
        sizes = _const_vals(node, get(3), "sizes", int)
        if opset >= 18:
            policy = _s(node.attr("keep_aspect_ratio_policy", "stretch"))
            if policy not in POLICIES:
                raise unsupported(node, f"keep_aspect_ratio_policy={policy!r} (expected one of {', '.join(POLICIES)})")
            if node.attr("axes") is not None:
                axes = [int(a) + rank if int(a) < 0 else int(a) for a in node.attr("axes")]
                if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
                    raise shape_error(node, f"axes={list(node.attr('axes'))} out of range or repeated for rank {rank}")
        if (scales is None) == (sizes is None):
            raise shape_error(node, "exactly one of scales and sizes must be given (non-empty)")
    axes = axes if axes is not None else list(range(rank))
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise shape_error(node, f"{'scales' if scales is not None else 'sizes'} has {len(given)} values; "
                                f"expected {len(axes)} (one per {'axis in axes' if node.attr('axes') else 'input axis'})")
    ins_ = [int(d) for d in x.shape]
    sc = [F32(1.0)] * rank
    out = list(ins_)
    if scales is not None:
        for a, s in zip(axes, scales):
            s = F32(s)
            if not s > 0 or not math.isfinite(float(s)):
                raise shape_error(node, f"scale {float(s)} on axis {a} must be finite and > 0")
            sc[a] = s
            v = F32(s * F32(ins_[a]))
            if not math.isfinite(float(v)):
                raise shape_error(node, f"scale {float(s)} on axis {a} makes the output size overflow float32")
            out[a] = int(v)
    else:
        for a, o in zip(axes, sizes):
            if o < 1 or ins_[a] < 1:
                raise shape_error(node, f"size {o} on axis {a} (input {ins_[a]}) must be >= 1")
            sc[a] = F32(F32(o) / F32(ins_[a]))
            out[a] = o
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(sc[a] for a in axes)
            for a in axes:
                sc[a] = s
                v = float(F32(s * F32(ins_[a])))
                out[a] = int(math.floor(v + 0.5))
    if any(o < 1 for o in out):
        raise shape_error(node, f"output shape {out} has an empty axis (scales {[float(s) for s in sc]})")
    if mode in ("linear", "cubic") and int(node.attr("antialias", 0) or 0) and any(s < 1 for s in sc):
        raise unsupported(node, "antialias=1 (an antialiasing filter when downscaling) is not supported; "
                                "export with antialias=0")
    if mode == "nearest" and int(node.attr("antialias", 0) or 0):
        raise unsupported(node, "antialias=1 with mode='nearest' (ONNX allows it for linear and cubic only)")
    resized = [a for a in range(rank) if sc[a] != 1 or out[a] != ins_[a]]
    limits.check_shape(out, x.itemsize, f"node '{node.name}' ({node.op_type}): output")
    for a in resized:   # one table row per output position along a resized axis
        limits.check_table_rows(out[a], f"node '{node.name}' ({node.op_type}): axis {a}")
    if len(resized) > 2:
        raise unsupported(node, f"{len(resized)} resized axes {resized} (scales {[float(s) for s in sc]}); "
                                f"at most 2 (images) are supported")
    return Spec(mode, coord, nearest, float(F32(node.attr("cubic_coeff_a", -0.75))),
                bool(int(node.attr("exclude_outside", 0) or 0)), tuple(sc), tuple(out))


# --------------------------------------------------------------------------- coordinates

def original(coord: str, o: int, scale, lout: int, lin: int) -> np.float32:
    """onnxruntime's float32 input coordinate of output index o."""
    x, s = F32(o), F32(scale)
    if coord == "asymmetric":
        return F32(x / s)
    if coord == "pytorch_half_pixel":
        return F32(F32(F32(x + F32(0.5)) / s) - F32(0.5)) if lout > 1 else F32(0.0)
    if coord == "tf_half_pixel_for_nn":
        return F32(F32(x + F32(0.5)) / s)
    if coord == "align_corners":
        return F32(0.0) if lout == 1 else F32(F32(x * F32(lin - 1)) / F32(lout - 1))
    if coord == "half_pixel_symmetric":   # in double, as onnxruntime writes it
        adjustment = F32(F32(lout) / F32(s * F32(lin)))
        offset = F32(F32(F32(lin) / F32(2.0)) * F32(F32(1.0) - adjustment))
        return F32(float(offset) + (float(x) + 0.5) / float(s) - 0.5)
    return F32(F32(F32(x + F32(0.5)) / s) - F32(0.5))   # half_pixel


def _round_away(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def nearest_index(mode: str, c, downscale: bool, lin: int) -> int:
    c = float(c)
    if mode == "simple":
        i = math.ceil(c) if downscale else int(c)
    elif mode == "round_prefer_ceil":
        i = _round_away(c)
    elif mode == "floor":
        i = math.floor(c)
    elif mode == "ceil":
        i = math.ceil(c)
    else:   # round_prefer_floor: halves go down
        i = math.floor(c) if c == float(F32(int(c)) + F32(0.5)) else _round_away(c)
    return min(max(i, 0), lin - 1)


def linear_taps(coord: str, scale, lout: int, lin: int):
    """onnxruntime's bilinear table of one axis: (index [lout][2], weight
    float32 [lout][2])."""
    idx = np.zeros((lout, 2), np.int64)
    wt = np.zeros((lout, 2), np.float32)
    for o in range(lout):
        c = F32(o) if scale == 1 else original(coord, o, scale, lout, lin)
        c = max(F32(0.0), min(c, F32(lin - 1)))
        i1 = min(int(c), lin - 1)
        i2 = min(i1 + 1, lin - 1)
        d1, d2 = F32(abs(F32(c - F32(i1)))), F32(abs(F32(c - F32(i2))))
        if i1 == i2:
            d1 = d2 = F32(0.5)
        idx[o] = (i1, i2)
        wt[o] = (d2, d1)
    return idx, wt


def _keys(s: float, a: float) -> list[float]:
    t = [s + 1, s, 1 - s, 2 - s]
    return [((a * t[0] - 5 * a) * t[0] + 8 * a) * t[0] - 4 * a,
            ((a + 2) * t[1] - (a + 3)) * t[1] * t[1] + 1,
            ((a + 2) * t[2] - (a + 3)) * t[2] * t[2] + 1,
            ((a * t[3] - 5 * a) * t[3] + 8 * a) * t[3] - 4 * a]


def cubic_taps(spec: Spec, scale, lout: int, lin: int):
    idx = np.zeros((lout, 4), np.int64)
    wt = np.zeros((lout, 4), np.float32)
    for o in range(lout):
        c = float(F32(o) if scale == 1 else original(spec.coord, o, scale, lout, lin))
        base = math.floor(c)
        co = _keys(c - base, spec.cubic_a)
        ii = [base - 1 + t for t in range(4)]
        if spec.exclude_outside:
            co = [v if 0 <= i < lin else 0.0 for v, i in zip(co, ii)]
            tot = sum(co)
            co = [v / tot for v in co] if tot else co
        idx[o] = [min(max(i, 0), lin - 1) for i in ii]
        wt[o] = co
    return idx, wt


def nearest_taps(spec: Spec, scale, lout: int, lin: int):
    idx = np.zeros((lout, 1), np.int64)
    for o in range(lout):
        if scale == 1:
            idx[o] = min(o, lin - 1)
        else:
            idx[o] = nearest_index(spec.nearest, original(spec.coord, o, scale, lout, lin), scale < 1, lin)
    return idx, np.ones((lout, 1), np.float32)


def axis_taps(spec: Spec, axis: int, in_shape):
    lin, lout, s = int(in_shape[axis]), int(spec.out[axis]), spec.scales[axis]
    if spec.mode == "nearest":
        return nearest_taps(spec, s, lout, lin)
    if spec.mode == "linear":
        return linear_taps(spec.coord, s, lout, lin)
    if s == 1 and lout == lin:
        return np.arange(lout).reshape(-1, 1), np.ones((lout, 1), np.float32)
    return cubic_taps(spec, s, lout, lin)


def kernel_axes(spec: Spec, rank: int) -> tuple[int | None, int | None]:
    """The (H, W) axes the kernel interpolates over (None: absent)."""
    resized = [a for a in range(rank) if spec.scales[a] != 1]
    if spec.mode == "linear" and rank == 4 and spec.scales[0] == 1 and spec.scales[1] == 1:
        return 2, 3
    if spec.mode == "linear" and rank == 4 and spec.scales[0] == 1 and spec.scales[3] == 1:
        return 1, 2
    if spec.mode == "linear" and rank == 2:
        return 0, 1
    if not resized:
        return None, None
    if len(resized) == 1:
        return None, resized[0]
    return resized[0], resized[1]


@dataclass
class View:
    """The [A][H][B][W][C] view of x and y around the kernel's axes, and the
    per-axis tables (indices [out][taps], float32 weights)."""

    na: int
    h: int
    nb: int
    w: int
    c: int
    oh: int
    ow: int
    iy: np.ndarray
    wy: np.ndarray
    ix: np.ndarray
    wx: np.ndarray


def make_view(spec: Spec, in_shape, ah, aw) -> View:
    """in_shape and spec.out in the same axis order; ah / aw the kernel axes."""
    shp = [int(d) for d in in_shape]
    if aw is None:   # nothing resized: one pass-through axis
        n = int(np.prod(shp)) if shp else 1
        one = (np.zeros((1, 1), np.int64), np.ones((1, 1), np.float32))
        return View(1, 1, 1, 1, n, 1, 1, *one, *one)
    if ah is None:
        ah_len, na, nb = 1, int(np.prod(shp[:aw])), 1
        iy, wy = np.zeros((1, 1), np.int64), np.ones((1, 1), np.float32)
        oh = 1
    else:
        ah_len, na, nb = shp[ah], int(np.prod(shp[:ah])), int(np.prod(shp[ah + 1:aw]))
        iy, wy = axis_taps(spec, ah, shp)
        oh = spec.out[ah]
    ix, wx = axis_taps(spec, aw, shp)
    c = int(np.prod(shp[aw + 1:]))
    return View(na, ah_len, nb, shp[aw], c, oh, spec.out[aw], iy, wy, ix, wx)


def view_geo(v: View) -> dict:
    """Element strides of x and y in the view (A, B; H and W steps are in
    the tables)."""
    return dict(na=v.na, h=v.h, nb=v.nb, w=v.w, cn=v.c, oh=v.oh, ow=v.ow, th=v.iy.shape[1], tw=v.ix.shape[1],
                sxa=v.h * v.nb * v.w * v.c, sxb=v.w * v.c, sya=v.oh * v.nb * v.ow * v.c, syh=v.nb * v.ow * v.c,
                syb=v.ow * v.c, syw=v.c)


def _gather(x: np.ndarray, v: View, iy, ix) -> np.ndarray:
    """x viewed [A][H][B][W][C] -> the elements at rows iy [OH], columns ix [OW]."""
    x5 = np.asarray(x).reshape(v.na, v.h, v.nb, v.w, v.c)
    return x5[:, iy][:, :, :, ix]


def interpolate(x: np.ndarray, spec: Spec, v: View) -> np.ndarray:
    """The kernels' arithmetic in numpy (float32, their order), y viewed
    [A][OH][B][OW][C]."""
    if spec.mode == "nearest":
        return _gather(x, v, v.iy[:, 0], v.ix[:, 0])
    xf = np.asarray(x, np.float32)
    acc = np.zeros((v.na, v.oh, v.nb, v.ow, v.c), np.float32)
    if spec.mode == "linear":
        for i in range(v.iy.shape[1]):
            for j in range(v.ix.shape[1]):
                wgt = (v.wx[:, j][None, :] * v.wy[:, i][:, None]).astype(np.float32)   # [OH][OW]
                acc = (acc + wgt[None, :, None, :, None] * _gather(xf, v, v.iy[:, i], v.ix[:, j])).astype(np.float32)
        return acc
    for i in range(v.iy.shape[1]):
        row = np.zeros_like(acc)
        for j in range(v.ix.shape[1]):
            row = (row + v.wx[:, j][None, None, None, :, None] * _gather(xf, v, v.iy[:, i], v.ix[:, j])).astype(np.float32)
        acc = (acc + v.wy[:, i][None, :, None, None, None] * row).astype(np.float32)
    return acc


def emit_view(k, node, spec: Spec, v: View, y: str, x: str, xt: str) -> None:
    """The resize_f32 call: a copy (nearest, any element type) or the float
    interpolation."""
    geo = view_geo(v)
    g = k.const(np.array([geo[f] for f in RESIZE_FIELDS], np.int32), "resize_geo")
    # tables hold element offsets: input row * its H step, column * its W step
    iy = k.const((v.iy * (geo["sxa"] // v.h)).astype(np.int32).reshape(-1), f"{node.name}_rows")
    ix = k.const((v.ix * v.c).astype(np.int32).reshape(-1), f"{node.name}_cols")
    kind = "copy" if spec.mode == "nearest" else ("bilinear" if spec.mode == "linear" else "taps")
    if kind == "bilinear":
        k.kernel("fp_exact")
    fn = k.kernel("resize_f32", {"name": f"{kind}_{xt.replace('_t', '')}", "kind": kind, "xt": xt,
                                 "fields": RESIZE_FIELDS})
    args = f"{y}, {x}, {g}, {iy}, {ix}"
    if kind != "copy":
        args += f", {k.const(v.wy.reshape(-1), f'{node.name}_wy')}, {k.const(v.wx.reshape(-1), f'{node.name}_wx')}"
    k.line(f"{fn}({args});")


# --------------------------------------------------------------------------- float

@register("Resize", "Upsample")
class Resize(Op):
    def _spec(self, node, ins) -> Spec:
        if not ins or ins[0] is None:
            raise shape_error(node, "missing input X")
        return resolve_inputs(node, ins)

    def check(self, node, ins):
        spec = self._spec(node, ins)
        x = ins[0]
        if x.is_const:
            return
        if spec.mode != "nearest" and x.dtype != "float32":
            raise unsupported(node, f"input '{x.name}' is {x.dtype}; mode={spec.mode!r} runs on float32 "
                                    f"(nearest on any type; int8 through QDQ)")

    def infer(self, node, ins):
        return [(self._spec(node, ins).out, ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        spec = self._spec(node, ins)
        ah, aw = kernel_axes(spec, len(spec.out))
        v = make_view(spec, np.shape(x), ah, aw)
        return [interpolate(x, spec, v).astype(np.asarray(x).dtype).reshape(spec.out)]

    def macs(self, node, ins, outs):
        spec = self._spec(node, ins)
        ah, aw = kernel_axes(spec, len(spec.out))
        v = make_view(spec, ins[0].shape, ah, aw)
        return 0 if spec.mode == "nearest" else outs[0].size * v.iy.shape[1] * v.ix.shape[1]

    def emit(self, node, ins, outs, k):
        spec = self._spec(node, ins)
        if outs[0].size == 0:
            return
        ah, aw = kernel_axes(spec, len(spec.out))
        v = make_view(spec, ins[0].shape, ah, aw)
        emit_view(k, node, spec, v, k.ptr(outs[0]), k.ptr(ins[0]), ins[0].ctype)


# --------------------------------------------------------------------------- integer

def int8_attrs(node, ins) -> dict | None:
    """cuvil.QResize attributes for a float Resize / Upsample node that has
    an integer form (nearest, or linear on a rank-4 NCHW tensor resized
    along H and W), else None. Raises what `resolve_inputs` raises."""
    spec = resolve_inputs(node, ins)
    rank = len(spec.out)
    if rank not in (3, 4) or spec.scales[0] != 1 or spec.scales[1] != 1:
        return None
    if spec.mode == "cubic" or (spec.mode == "linear" and rank != 4):
        return None
    return {"mode": spec.mode, "coordinate_transformation_mode": spec.coord, "nearest_mode": spec.nearest,
            "_scales": [float(s) for s in spec.scales], "_sizes": list(spec.out)}


def _channels_last(node) -> int:
    return int(node.attrs.get("_channels_last", 0))


def q_spec(node) -> Spec:
    mode = _s(node.attr("mode", "nearest"))
    if mode not in ("nearest", "linear"):
        raise unsupported(node, f"mode={mode!r}: the integer Resize is nearest or linear")
    scales, sizes = node.attr("_scales"), node.attr("_sizes")
    if scales is None or sizes is None or len(scales) != len(sizes):
        raise shape_error(node, "needs the resolved _scales and _sizes attributes")
    return Spec(mode, _s(node.attr("coordinate_transformation_mode", "half_pixel")),
                _s(node.attr("nearest_mode", "round_prefer_floor")), -0.75, False,
                tuple(F32(s) for s in scales), tuple(int(v) for v in sizes))


def _to_nchw(node, shape):
    return (shape[0], shape[-1]) + tuple(shape[1:-1]) if _channels_last(node) else tuple(shape)


def _from_nchw(node, shape):
    return (shape[0],) + tuple(shape[2:]) + (shape[1],) if _channels_last(node) else tuple(shape)


def q_view(node, spec: Spec, x_shape) -> View:
    """The View in the tensor's own layout (NHWC after passes/layout.py)."""
    rank = len(spec.out)
    nchw = _to_nchw(node, x_shape)
    if tuple(nchw[:2]) != tuple(spec.out[:2]):
        raise shape_error(node, f"input {list(x_shape)} does not match the resolved output {list(spec.out)}")
    ah, aw = (2, 3) if rank == 4 else (None, 2)
    v = make_view(spec, nchw, ah, aw)
    if not _channels_last(node):
        return v
    # NHWC: A = N, the channels innermost
    return View(spec.out[0], v.h, 1, v.w, spec.out[1], v.oh, v.ow, v.iy, v.wy, v.ix, v.wx)


def tflm_axis(coord: str, scale, lin: int, lout: int) -> np.ndarray:
    """TFLM's Q10 table of one axis: [lout][3] = (i0, i1, w1), w0 = 1024 - w1
    (see the module docstring)."""
    if scale == 1 and lin == lout:
        return np.stack([np.arange(lout), np.arange(lout), np.zeros(lout, np.int64)], axis=1)
    if coord == "align_corners" and lout > 1:
        s10 = (1024 * (lin - 1) + (lout - 1) // 2) // (lout - 1)
    else:
        r = Fraction(lin, lout) if F32(F32(lout) / F32(lin)) == F32(scale) else 1 / Fraction(float(F32(scale)))
        s10 = math.floor(1024 * r + Fraction(1, 2))
    rows = []
    for o in range(lout):
        if coord == "pytorch_half_pixel" and lout == 1:
            v = 0                                   # its coordinate of a single output
        elif coord in ("half_pixel", "pytorch_half_pixel"):
            v = o * s10 + s10 // 2 - 512            # TFLM's half_pixel_centers
        elif coord in ("align_corners", "asymmetric"):
            v = o * s10
        else:
            v = math.floor(float(original(coord, o, scale, lout, lin)) * 1024 + 0.5)
        i0 = min(max(int(v / 1024), 0), lin - 1)            # C division truncates toward zero
        i1 = min(int((v + 1023) / 1024), lin - 1)
        i1 = max(i1, 0)
        w1 = v - 1024 * i0 if i1 != i0 else 0
        rows.append((i0, i1, w1))
    return np.array(rows, np.int64)


def _c_div(a: np.ndarray, b: int) -> np.ndarray:
    a = np.asarray(a, np.int64)
    return np.sign(a) * (np.abs(a) // b)


@register("cuvil.QResize")
class QResize(Op):
    def _params(self, node, ins):
        dt, xs, xz, ys, yz = unary_qparams(node, ins, "x", "y")
        if xs != ys or xz != yz:
            raise unsupported(node, "input and output quantization differ (scale / zero point); the integer "
                                    "Resize keeps its input's parameters")
        return dt, xs, xz

    def check(self, node, ins):
        if ins[0] is None or ins[0].dtype not in INT8_TYPES:
            raise unsupported(node, "input X must be int8 or uint8")
        self._params(node, ins)
        spec = q_spec(node)
        if len(spec.out) not in (3, 4) or (spec.mode == "linear" and len(spec.out) != 4):
            raise unsupported(node, f"rank {len(spec.out)}: the integer Resize is nearest on rank 3 / 4 or "
                                    f"linear on rank 4")
        requant_mode(node)
        q_view(node, spec, ins[0].shape)

    def infer(self, node, ins):
        return [(_from_nchw(node, q_spec(node).out), ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        dt, xs, xz = self._params(node, ins)
        spec = q_spec(node)
        v = q_view(node, spec, np.shape(x))
        shape = _from_nchw(node, spec.out)
        if spec.mode == "nearest":
            return [_gather(x, v, v.iy[:, 0], v.ix[:, 0]).reshape(shape)]
        if requant_mode(node) == "float":
            deq = quant.dequantize(x, xs, xz)
            y = interpolate(deq, spec, v)
            return [quant.quantize(y, xs, xz, dt).reshape(shape)]
        ty, tx = self._tflm(spec, node, np.shape(x))
        acc = np.zeros((v.na, v.oh, v.nb, v.ow, v.c), np.int64)
        xi = np.asarray(x, np.int64)
        for i in range(2):
            wy = (1024 - ty[:, 2]) if i == 0 else ty[:, 2]
            for j in range(2):
                wx = (1024 - tx[:, 2]) if j == 0 else tx[:, 2]
                wgt = wy[:, None] * wx[None, :]
                acc += wgt[None, :, None, :, None] * _gather(xi, v, ty[:, i], tx[:, j])
        y = _c_div(acc + np.where(acc > 0, 1 << 19, -(1 << 19)), 1 << 20)
        return [quant.saturate(y, dt).reshape(shape)]

    @staticmethod
    def _tflm(spec: Spec, node, x_shape):
        nchw = _to_nchw(node, x_shape)
        return (tflm_axis(spec.coord, spec.scales[2], nchw[2], spec.out[2]),
                tflm_axis(spec.coord, spec.scales[3], nchw[3], spec.out[3]))

    def macs(self, node, ins, outs):
        return 0 if q_spec(node).mode == "nearest" else 4 * outs[0].size

    def emit(self, node, ins, outs, k):
        dt, xs, xz = self._params(node, ins)
        spec = q_spec(node)
        x, y = ins[0], outs[0]
        v = q_view(node, spec, x.shape)
        if spec.mode == "nearest":
            emit_view(k, node, spec, v, k.ptr(y), k.ptr(x), x.ctype)
            return
        lo, hi = quant.QRANGE[dt]
        geo = view_geo(v)
        sh, sw = geo["sxa"] // v.h, v.c
        mode = requant_mode(node)
        if mode == "fixed":
            ty, tx = self._tflm(spec, node, x.shape)
            rows = np.stack([ty[:, 0] * sh, ty[:, 1] * sh, ty[:, 2]], axis=1).astype(np.int32).reshape(-1)
            cols = np.stack([tx[:, 0] * sw, tx[:, 1] * sw, tx[:, 2]], axis=1).astype(np.int32).reshape(-1)
            extra = ""
        else:
            k.kernel("fp_exact")
            rows = (v.iy * sh).astype(np.int32).reshape(-1)
            cols = (v.ix * sw).astype(np.int32).reshape(-1)
            codes = np.arange(256, dtype=np.int64).astype(np.uint8)
            codes = codes.view(np.int8).astype(np.int64) if dt == "int8" else codes.astype(np.int64)
            deq = quant.dequantize(codes, xs, xz)
            extra = (f", {k.const(v.wy.reshape(-1), f'{node.name}_wy')}, {k.const(v.wx.reshape(-1), f'{node.name}_wx')}"
                     f", {k.const(deq, f'{node.name}_deq')}, {k.f32(xs)}, {xz}")
        g = k.const(np.array([geo[f] for f in RESIZE_FIELDS], np.int32), "resize_geo")
        variant = {"name": f"{mode}_{CODES[dt]}", "rq": mode, "fields": RESIZE_FIELDS, "xt": CTYPES[dt],
                   "lo": lo, "hi": hi}
        # isa modules may add their loop (variant["mve"]: Helium, 4 channels a vector, int8 fixed)
        isa.emit("qresize", self, node, ins, outs, k, variant)
        fn = k.kernel("qresize_s8", variant)
        k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {g}, {k.const(rows, f'{node.name}_rows')}, "
               f"{k.const(cols, f'{node.name}_cols')}{extra});")
