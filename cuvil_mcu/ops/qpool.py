"""Integer pooling: com.microsoft.QLinearAveragePool,
com.microsoft.QLinearGlobalAveragePool and cuvil.QMaxPool (ONNX MaxPool on an
int8/uint8 tensor, which keeps its input's scale; passes/qdq.py maps it here).

Inputs: X, x_scale, x_zero_point, y_scale, y_zero_point (average pools; per
tensor, int8 or uint8) and X alone (max pool). Layout: `channels_last` /
`_channels_last` = 1 means N x spatial x C (1-D: N W C, 2-D: N H W C), else
ONNX's N C spatial; the kernels address both through element strides.
1-D and 2-D pooling (rank 3 and 4).

Window geometry (output sizes, padding, auto_pad, ceil_mode, dilations)
is ops/pool.py's. (onnxruntime's QLinearAveragePool has no dilations; ours
follow ONNX AveragePool-19 when a node carries them.) Per spatial dimension Python builds a table: for each output
position (first input index, taps inside the input, divisor).

Numerics, in the node's `_requant` mode:

QLinearAveragePool
- divisor: count_include_pad=0: the taps inside the input; =1: the whole
  kernel (prod(kernel_shape), as onnxruntime's QLinearAveragePool: a tap in
  the padding, or past it in a ceil_mode window, counts as a zero).
- "fixed" with TFLM's rounding (`_rounding` "tflm": models tf2onnx wrote),
  x and y with the same scale and zero point (TFLM's int8 AVERAGE_POOL_2D,
  reference_integer_ops/pooling.h): acc = sum of the raw codes in the window
  (+ x_zp per padding tap that counts), then
  y = acc > 0 ? (acc + c/2) / c : (acc - c/2) / c   (C division: round half
  away from zero), clamped to the fused activation's range.
- "fixed" with ONNX's rounding (`_rounding` "onnx": every other model; a
  literal DequantizeLinear -> AveragePool -> QuantizeLinear rounds the real
  average half to even), same parameters: acc = sum (x - x_zp) (a counted
  padding tap adds 0), y = x_zp + acc / c rounded half to even. Half of a
  2 x 2 average's values are such ties, where TFLM's rule rounds up.
- "fixed", different parameters (no TFLM counterpart; TFLM needs equal ones):
  acc = sum (x - x_zp); y = y_zp + acc * M_c with M_c = x_scale / (y_scale
  * c) quantized per divisor c (double, quant.quantize_multiplier), rounded
  as MBQM (TFLM's double rounding, "tflm") or once, half to even ("onnx").
- "float" (onnxruntime): x dequantized to float32 (x_scale * (x - x_zp)),
  summed in float32 in window order (row by row), divided by float(c), then
  rint(sum / c / y_scale + y_zp) (half even), saturated. When the kernel covers
  the whole (unpadded) input onnxruntime switches to its global average pool,
  so do we (the "float" rule of QLinearGlobalAveragePool below).
QLinearGlobalAveragePool (n = number of spatial elements)
- "fixed", "tflm" rounding (TFLM's int8 MEAN over the spatial axes,
  micro/kernels/reduce_common.cc EvalIntegerMean): same scale and zero point
  in and out: y = (sum of raw codes) / n, C division (truncates toward zero);
  otherwise (reference_ops::QuantizedMeanOrSum): (m, s) = QuantizeMultiplier(
  x_scale / y_scale); b = min(floor(log2 n), 32, 31 + s);
  m' = (m << b) / n (int64, truncating); y = MBQM(sum - x_zp * n, m', s - b) + y_zp.
- "fixed", "onnx" rounding (the real mean rounded once, half to even):
  same parameters: y = x_zp + (sum - x_zp * n) / n rounded half to even;
  otherwise (m, s) = QuantizeMultiplier(x_scale / (y_scale * n)) and
  y = y_zp + (sum - x_zp * n) * m * 2^(s - 31), one rounding, half to even
  (int64 product; quant.requantize_single).
- "float" (MlasQLinearGlobalAveragePoolNchw/Nhwc): scale = x_scale /
  (y_scale * float(n)) in float32; y = rint(float(sum - x_zp * n) * scale) + y_zp.
Both then clamp to the fused activation's range and saturate.
cuvil.QMaxPool: the integer maximum of the taps inside the input (padding never
wins; a window wholly in the padding gives the type's minimum), no
requantization, the same in both modes.
"""
from __future__ import annotations

import numpy as np

from .. import isa, limits, quant
from .base import Op, register, shape_error, unsupported
from .pool import geometry, window_table
from .qelementwise import CODES, CTYPES, F32, int8_input, out_range, requant_mode, rounding, unary_qparams

# Order of the integers of the pooling kernels' `g` array.
QPOOL_FIELDS = ("nb", "c", "oh", "ow", "sxb", "sxc", "sxh", "sxw", "syb", "syc", "syh", "syw",
                "dh", "dw", "lo", "hi", "xzp", "yzp")
QGAP_FIELDS = ("nb", "c", "n", "sxb", "sxc", "sxs", "syb", "syc", "xzp", "yzp", "lo", "hi", "mult", "shift")


def channels_last(node) -> int:
    return int(node.attrs.get("_channels_last", node.attrs.get("channels_last", 0)))


def nchw_shape(node, shape) -> tuple[int, ...]:
    """The input's shape in ONNX's N C spatial order."""
    if len(shape) not in (3, 4):
        raise unsupported(node, f"input rank {len(shape)}: 1-D and 2-D pooling (rank 3 and 4) are supported")
    if channels_last(node):
        return (shape[0], shape[-1]) + tuple(shape[1:-1])
    return tuple(shape)


def _layout(node, nchw) -> tuple[int, ...]:
    """N C spatial shape -> the tensor's shape in the node's layout."""
    if channels_last(node):
        return (nchw[0],) + tuple(nchw[2:]) + (nchw[1],)
    return tuple(nchw)


def _to_nchw(node, x: np.ndarray) -> np.ndarray:
    return np.moveaxis(x, -1, 1) if channels_last(node) else x


def _from_nchw(node, y: np.ndarray) -> np.ndarray:
    return np.moveaxis(y, 1, -1) if channels_last(node) else y


def _strides(node, nchw) -> tuple[int, int, int, int]:
    """Element strides (batch, channel, row, column) of a 2-D view (1-D: one
    row) of a tensor of N C spatial shape `nchw` in the node's layout."""
    n, c = nchw[:2]
    h, w = (nchw[2], nchw[3]) if len(nchw) == 4 else (1, nchw[2])
    if channels_last(node):
        return h * w * c, 1, w * c, c
    return c * h * w, h * w, w, 1


def window_tables(node, xs, include_pad: bool):
    """Per spatial dimension (int32 [out, 3] table, dilation): (first input
    index, taps inside the input, divisor); divisor = kernel size with
    include_pad (onnxruntime's QLinearAveragePool), else the taps inside.
    The output size and table rows are checked against limits.py first."""
    dims = geometry(node, xs)
    limits.check_shape(tuple(xs[:2]) + tuple(dm[0] for dm in dims), 1, f"node '{node.name}' ({node.op_type}): output")
    tabs = []
    for i, (n, b, e, k, s, d) in enumerate(dims):
        limits.check_table_rows(n, f"node '{node.name}' ({node.op_type}): spatial axis {i}")
        t = window_table(xs[2 + i], n, b, e, k, s, d, False)
        if include_pad:
            t[:, 2] = k
        tabs.append((t, d))
    return tabs


def _pool_attrs_check(node):
    if node.attr("kernel_shape") is None:
        raise shape_error(node, "kernel_shape is required")


def _windows(tabs, x: np.ndarray):
    """Yield (out row, out col, window [N, C, taps] int64 in row-major tap
    order, tap count, divisor) over the output positions of NCHW x (1-D: one row)."""
    x4 = x if x.ndim == 4 else x[:, :, None, :]
    if len(tabs) == 1:
        tabs = [(np.array([[0, 1, 1]], np.int32), 1)] + tabs
    (th, dh), (tw, dw) = tabs
    for i, (h0, hn, hc) in enumerate(th):
        rows = h0 + dh * np.arange(hn)
        for j, (w0, wn, wc) in enumerate(tw):
            cols = w0 + dw * np.arange(wn)
            win = x4[:, :, rows][:, :, :, cols].reshape(x4.shape[0], x4.shape[1], -1)
            yield i, j, win.astype(np.int64), int(hn) * int(wn), int(hc) * int(wc)


def _out_nchw(tabs, nchw):
    return tuple(nchw[:2]) + tuple(len(t) for t, _ in tabs)


def _emit_pool(node, k, x, y, tabs, nchw, variant: dict, lo: int, hi: int, xzp: int, yzp: int, extra: str = ""):
    sy = _strides(node, _out_nchw(tabs, nchw))
    sx = _strides(node, nchw)
    if len(tabs) == 1:
        tabs = [(np.array([[0, 1, 1]], np.int32), 1)] + tabs
    (th, dh), (tw, dw) = tabs
    vals = dict(nb=nchw[0], c=nchw[1], oh=len(th), ow=len(tw), sxb=sx[0], sxc=sx[1], sxh=sx[2], sxw=sx[3],
                syb=sy[0], syc=sy[1], syh=sy[2], syw=sy[3], dh=dh * sx[2], dw=dw * sx[3], lo=lo, hi=hi,
                xzp=xzp, yzp=yzp)
    g = k.const(np.array([vals[f] for f in QPOOL_FIELDS], np.int32), "qpool_geo")
    variant = dict(variant, fields=QPOOL_FIELDS, xt=CTYPES[x.dtype], yt=CTYPES[y.dtype])
    variant["name"] = f"{variant['kind']}_{CODES[x.dtype]}"
    fn = k.kernel("qpool_s8", variant)
    ch = k.const(th.reshape(-1), "pool_rows")
    cw = k.const(tw.reshape(-1), "pool_cols")
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {g}, {ch}, {cw}{extra});")


def _taps_total(tabs) -> int:
    taps = 1
    for t, _ in tabs:
        taps *= int(t[:, 1].sum())
    return taps


# --------------------------------------------------------------------------- max

@register("cuvil.QMaxPool")
class QMaxPool(Op):
    def check(self, node, ins):
        int8_input(node, ins[0], "X")
        if len(node.outputs) > 1 and node.outputs[1]:
            raise unsupported(node, "the Indices output is not supported")
        _pool_attrs_check(node)
        xs = nchw_shape(node, ins[0].shape)
        window_tables(node, xs, False)

    def infer(self, node, ins):
        xs = nchw_shape(node, ins[0].shape)
        return [(_layout(node, _out_nchw(window_tables(node, xs, False), xs)), ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        x = np.asarray(x)
        xn = _to_nchw(node, x)
        tabs = window_tables(node, xn.shape, False)
        qmin, _ = quant.QRANGE[x.dtype.name]
        y = np.empty(_out_nchw(tabs, xn.shape), np.int64)
        y4 = y if y.ndim == 4 else y[:, :, None, :]
        for i, j, win, taps, _ in _windows(tabs, xn):
            y4[:, :, i, j] = win.max(axis=2) if taps else qmin
        return [_from_nchw(node, y).astype(x.dtype)]

    def macs(self, node, ins, outs):
        xs = nchw_shape(node, ins[0].shape)
        return xs[0] * xs[1] * _taps_total(window_tables(node, xs, False))

    def emit(self, node, ins, outs, k):
        x, y = ins[0], outs[0]
        xs = nchw_shape(node, x.shape)
        qmin, qmax = quant.QRANGE[x.dtype]
        _emit_pool(node, k, x, y, window_tables(node, xs, False), xs, {"kind": "max"}, qmin, qmax, 0, 0)


# --------------------------------------------------------------------------- average

def _avg_params(node, ins):
    return unary_qparams(node, ins, "x", "y")


def _tflm_div(acc: np.ndarray, c) -> np.ndarray:
    """TFLM's rounding average: acc > 0 ? (acc + c/2) / c : (acc - c/2) / c (C division)."""
    acc = np.asarray(acc, np.int64)
    c = np.asarray(c, np.int64)
    pos = (acc + c // 2) // c
    neg = -((-acc + c // 2) // c)
    return np.where(acc > 0, pos, neg)


def _count_multipliers(xs, ys, cmax: int):
    """(mult, shift) int32 [cmax + 1]: x_scale / (y_scale * c) for each divisor c."""
    reals = [0.0] + [float(xs) / (float(ys) * c) for c in range(1, cmax + 1)]
    return quant.quantize_multipliers(reals)


def _is_global(xs, kernel, pads) -> bool:
    """onnxruntime's QLinearAveragePool falls back to its global average pool
    when the kernel covers the whole input and nothing is padded."""
    return list(xs[2:]) == [int(v) for v in kernel] and all(p == 0 for p in pads)


@register("com.microsoft.QLinearAveragePool")
class QLinearAveragePool(Op):
    fuses_act = True

    def check(self, node, ins):
        _avg_params(node, ins)
        requant_mode(node)
        rounding(node)
        _pool_attrs_check(node)
        self._tables(node, nchw_shape(node, ins[0].shape))

    def _tables(self, node, xs):
        include = bool(int(node.attr("count_include_pad", 0)))
        tabs = window_tables(node, xs, include)
        if any((t[:, 2] == 0).any() for t, _ in tabs):
            raise unsupported(node, "a window lies entirely in the padding; with count_include_pad=0 its "
                                    "average is 0/0")
        return tabs

    def _global(self, node, xs) -> bool:
        geo = geometry(node, xs)
        return _is_global(xs, node.attr("kernel_shape"), [g[1] for g in geo] + [g[2] for g in geo])

    def infer(self, node, ins):
        xs = nchw_shape(node, ins[0].shape)
        return [(_layout(node, _out_nchw(self._tables(node, xs), xs)), ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        dt, xs, xz, ys, yz = _avg_params(node, ins)
        lo, hi = out_range(node, ys, yz, dt)
        mode = requant_mode(node)
        x = np.asarray(x)
        xn = _to_nchw(node, x)
        if mode == "float" and self._global(node, xn.shape):
            acc = xn.astype(np.int64).reshape(xn.shape[0], xn.shape[1], -1).sum(axis=2)
            y = _gap_float(acc, xz, xs, ys, yz, int(np.prod(xn.shape[2:])), lo, hi, dt)
            return [_from_nchw(node, y.reshape(xn.shape[:2] + (1,) * (xn.ndim - 2)))]
        tabs = self._tables(node, xn.shape)
        y = np.empty(_out_nchw(tabs, xn.shape), np.int64)
        y4 = y if y.ndim == 4 else y[:, :, None, :]
        equal = xs == ys and xz == yz
        onnx_rules = rounding(node) == "onnx"
        if mode == "fixed" and not equal:
            mult, shift = _count_multipliers(xs, ys, int(np.prod(node.attr("kernel_shape"))))
        deq = (F32(xs) * (np.arange(-128 if dt == "int8" else 0, 128 if dt == "int8" else 256) - xz)
               .astype(F32)).astype(F32)
        off = 128 if dt == "int8" else 0
        for i, j, win, taps, c in _windows(tabs, xn):
            if mode == "fixed" and equal and onnx_rules:
                v = quant.div_even((win - xz).sum(axis=2), c) + xz
            elif mode == "fixed" and equal:
                acc = win.sum(axis=2) + (c - taps) * xz
                v = _tflm_div(acc, c)
            elif mode == "fixed":
                acc = (win - xz).sum(axis=2)
                rq = quant.requantize_single if onnx_rules else quant.requantize_fixed
                v = rq(acc, int(mult[c]), int(shift[c])) + yz
            else:
                s = np.zeros(win.shape[:2], F32)
                for t in range(win.shape[2]):   # float32, in window order, as onnxruntime
                    s = (s + deq[win[:, :, t] + off]).astype(F32)
                s = (s / F32(c)).astype(F32)
                r = ((s / F32(ys)).astype(F32) + F32(yz)).astype(F32)
                v = np.rint(np.clip(r, F32(lo), F32(hi)))
            y4[:, :, i, j] = quant.saturate(v, dt, lo, hi)
        return [_from_nchw(node, y).astype(dt)]

    def macs(self, node, ins, outs):
        xs = nchw_shape(node, ins[0].shape)
        return xs[0] * xs[1] * _taps_total(self._tables(node, xs))

    def emit(self, node, ins, outs, k):
        dt, xs_, xz, ys, yz = _avg_params(node, ins)
        lo, hi = out_range(node, ys, yz, dt)
        mode = requant_mode(node)
        x, y = ins[0], outs[0]
        xs = nchw_shape(node, x.shape)
        if mode == "float" and self._global(node, xs):
            _emit_gap(node, k, x, y, xs, "float", xs_, xz, ys, yz, lo, hi)
            return
        tabs = self._tables(node, xs)
        equal = xs_ == ys and xz == yz
        tflm = rounding(node) == "tflm"
        if mode == "fixed" and equal and tflm and isa.emit("qavgpool", self, node, ins, outs, k, dict(
                x=x, y=y, tabs=tabs, nchw=xs, channels_last=channels_last(node), xzp=xz, lo=lo, hi=hi)):
            return
        if mode == "fixed" and equal:
            if not tflm:
                k.kernel("requant_fixed")
            _emit_pool(node, k, x, y, tabs, xs, {"kind": "avg_tflm" if tflm else "avg_even"}, lo, hi, xz, yz)
        elif mode == "fixed":
            k.kernel("requant_fixed")
            mult, shift = _count_multipliers(xs_, ys, int(np.prod(node.attr("kernel_shape"))))
            extra = f", {k.const(mult, f'{node.name}_mult')}, {k.const(shift, f'{node.name}_shift')}"
            _emit_pool(node, k, x, y, tabs, xs, {"kind": "avg_fixed" if tflm else "avg_single"}, lo, hi, xz, yz,
                       extra)
        else:
            codes = np.arange(256, dtype=np.int64).astype(np.uint8)
            codes = codes.view(np.int8).astype(np.int64) if dt == "int8" else codes.astype(np.int64)
            deq = (F32(xs_) * (codes - xz).astype(F32)).astype(F32)
            extra = f", {k.const(deq, f'{node.name}_deq')}, {k.f32(ys)}"
            _emit_pool(node, k, x, y, tabs, xs, {"kind": "avg_float"}, lo, hi, xz, yz, extra)


# --------------------------------------------------------------------------- global average

def mean_fixed_params(xs, ys, n: int) -> tuple[int, int]:
    """TFLM QuantizedMeanOrSum: the multiplier of x_scale / y_scale adapted
    to include 1 / n."""
    m, s = quant.quantize_multiplier(float(xs) / float(ys))
    b = min(n.bit_length() - 1, 32, 31 + s)   # 31 + s >= 0: quantize_multiplier keeps s >= -31
    return int((m << b) // n), s - b


def _gap_float(acc, xz, xs, ys, yz, n: int, lo: int, hi: int, dt: str) -> np.ndarray:
    scale = F32(F32(xs) / F32(F32(ys) * F32(n)))
    v = quant.requantize_float(np.asarray(acc, np.int64) - xz * n, scale) + yz
    return quant.saturate(v, dt, lo, hi)


def single_mean_params(xs, ys, n: int) -> tuple[int, int]:
    """(m, s) of x_scale / (y_scale * n) for quant.requantize_single."""
    return quant.quantize_multiplier(float(xs) / (float(ys) * n))


def _emit_gap(node, k, x, y, xs, mode, xs_, xz, ys, yz, lo, hi):
    nb, c = xs[:2]
    n = int(np.prod(xs[2:]))
    if channels_last(node):
        sxb, sxc, sxs = n * c, 1, c
    else:
        sxb, sxc, sxs = c * n, n, 1
    mult = shift = 0
    extra = ""
    if mode == "float":
        kind = "float"
        k.kernel("requant_float")
        extra = f", {k.f32(F32(F32(xs_) / F32(F32(ys) * F32(n))))}"
    elif rounding(node) == "onnx":
        k.kernel("requant_fixed")
        if xs_ == ys and xz == yz:
            kind = "mean_even"
        else:
            kind = "single"
            mult, shift = single_mean_params(xs_, ys, n)
    elif xs_ == ys and xz == yz:
        kind = "mean"
    else:
        kind = "fixed"
        mult, shift = mean_fixed_params(xs_, ys, n)
    if (kind in ("fixed", "single") and x.dtype == y.dtype == "int8" and channels_last(node)
            and isa.emit("qgap", None, node, [x], [y], k, dict(nb=nb, c=c, n=n, xzp=xz, zp=yz, lo=lo, hi=hi,
                                                                  mult=mult, shift=shift, single=kind == "single"))):
        return
    if kind == "fixed":
        k.kernel("requant_fixed")
    vals = dict(nb=nb, c=c, n=n, sxb=sxb, sxc=sxc, sxs=sxs, syb=c, syc=1, xzp=xz, yzp=yz, lo=lo, hi=hi,
                mult=mult, shift=shift)
    g = k.const(np.array([vals[f] for f in QGAP_FIELDS], np.int32), "qgap_geo")
    fn = k.kernel("qgap_s8", {"name": f"{kind}_{CODES[x.dtype]}", "kind": kind, "fields": QGAP_FIELDS,
                              "xt": CTYPES[x.dtype], "yt": CTYPES[y.dtype]})
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {g}{extra});")


@register("com.microsoft.QLinearGlobalAveragePool")
class QLinearGlobalAveragePool(Op):
    fuses_act = True

    def check(self, node, ins):
        _avg_params(node, ins)
        requant_mode(node)
        rounding(node)
        if len(ins[0].shape) < 3:
            raise shape_error(node, f"input rank {len(ins[0].shape)} < 3 (expects N, C and spatial dims)")
        n = int(np.prod(self._nchw(node, ins[0].shape)[2:]))
        if n == 0 or n * 256 >= 2 ** 31:
            raise unsupported(node, f"{n} spatial elements: the int32 sum needs 0 < n < 2^23")

    @staticmethod
    def _nchw(node, shape):
        if channels_last(node):
            return (shape[0], shape[-1]) + tuple(shape[1:-1])
        return tuple(shape)

    def infer(self, node, ins):
        s = ins[0].shape
        if channels_last(node):
            return [((s[0],) + (1,) * (len(s) - 2) + (s[-1],), ins[0].dtype)]
        return [(tuple(s[:2]) + (1,) * (len(s) - 2), ins[0].dtype)]

    def reference(self, node, ins, x, *rest):
        dt, xs, xz, ys, yz = _avg_params(node, ins)
        lo, hi = out_range(node, ys, yz, dt)
        x = np.asarray(x)
        xn = _to_nchw(node, x)
        n = int(np.prod(xn.shape[2:]))
        acc = xn.astype(np.int64).reshape(xn.shape[0], xn.shape[1], -1).sum(axis=2)
        if requant_mode(node) == "float":
            y = _gap_float(acc, xz, xs, ys, yz, n, lo, hi, dt)
        elif rounding(node) == "onnx" and xs == ys and xz == yz:
            y = quant.saturate(quant.div_even(acc - xz * n, n) + xz, dt, lo, hi)
        elif rounding(node) == "onnx":
            m, s = single_mean_params(xs, ys, n)
            y = quant.saturate(quant.requantize_single(acc - xz * n, m, s) + yz, dt, lo, hi)
        elif xs == ys and xz == yz:
            y = quant.saturate(np.sign(acc) * (np.abs(acc) // n), dt, lo, hi)   # C division
        else:
            m, s = mean_fixed_params(xs, ys, n)
            y = quant.saturate(quant.requantize_fixed(acc - xz * n, m, s) + yz, dt, lo, hi)
        y = y.reshape(xn.shape[:2] + (1,) * (xn.ndim - 2))
        return [_from_nchw(node, y).astype(dt)]

    def macs(self, node, ins, outs):
        return ins[0].size

    def emit(self, node, ins, outs, k):
        dt, xs_, xz, ys, yz = _avg_params(node, ins)
        lo, hi = out_range(node, ys, yz, dt)
        xs = self._nchw(node, ins[0].shape)
        _emit_gap(node, k, ins[0], outs[0], xs, requant_mode(node), xs_, xz, ys, yz, lo, hi)
