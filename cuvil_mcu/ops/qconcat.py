"""com.microsoft.QLinearConcat: Y_scale, Y_zero_point, then one
(X, X_scale, X_zero_point) triple per input; attribute axis (required).
Per-tensor parameters; int8 or uint8, one type throughout.

An input whose scale and zero point equal the output's is copied (TFLM's
CONCATENATION, which requires equal parameters, is a pure copy). Any other
input is requantized code by code, which Python turns into a 256-entry table
at compile time (the kernel is a strided lookup):
- "fixed" (TFLM's int8 -> int8 QUANTIZE, reference/requantize.h):
  (m, s) = QuantizeMultiplier(x_scale / y_scale) (double);
  y = sat(y_zp + MBQM(x - x_zp, m, s))
- "float" (onnxruntime: QlinearBuildLookupTable with the identity):
  y = sat(rint(x_scale * float(x - x_zp) / y_scale) + y_zp) in float32, half
  to even. Exact against onnxruntime. "fixed" mode with ONNX's rounding
  (`_rounding` "onnx": a model tf2onnx did not write) builds the same table:
  it is integer at run time, and one rounding of the real value is what a
  literal DequantizeLinear -> Concat -> QuantizeLinear gives (TFLM's double
  rounding put 0.44% of DenseNet-121's concatenated values a step off).
A fused activation (passes/qdq.py may fuse Relu/Clip) clamps every input,
copies included (they become tables when the clamp cuts the range).
"""
from __future__ import annotations

import numpy as np

from .. import quant
from .concat import concat_shape
from .base import Op, norm_axis, register, shape_error
from .qelementwise import CODES, CTYPES, build_lut, lut_apply, lut_index, out_range, qvariadic_params, \
    requant_mode, rounding


def _axis(node, ins) -> int:
    if node.attr("axis") is None:
        raise shape_error(node, "attribute 'axis' is required")
    return norm_axis(node, int(node.attr("axis")), len(ins[2].shape))


def requant_table(node, dt, xs, xz, ys, yz, lo, hi) -> np.ndarray | None:
    """The code -> code table of one input, or None when it is a plain copy."""
    qmin, qmax = quant.QRANGE[dt]
    if xs == ys and xz == yz and lo <= qmin and hi >= qmax:
        return None
    if requant_mode(node) == "float" or rounding(node) == "onnx":
        return build_lut(lambda x: x, xs, xz, ys, yz, dt, lo, hi)
    m, s = quant.quantize_multiplier(float(xs) / float(ys))
    return quant.saturate(quant.requantize_fixed(lut_index(dt) - xz, m, s) + yz, dt, lo, hi)


@register("com.microsoft.QLinearConcat")
class QLinearConcat(Op):
    fuses_act = True

    def check(self, node, ins):
        qvariadic_params(node, ins)
        _axis(node, ins)
        requant_mode(node)
        rounding(node)

    def infer(self, node, ins):
        dt, _, parts = qvariadic_params(node, ins)
        axis = _axis(node, ins)
        return [(concat_shape(node, [t for t, _, _ in parts], axis), dt)]

    def reference(self, node, ins, *arrays):
        dt, (ys, yz), parts = qvariadic_params(node, ins)
        lo, hi = out_range(node, ys, yz, dt)
        axis = _axis(node, ins)
        mode = requant_mode(node)
        outs = []
        for (t, xs, xz), a in zip(parts, arrays[2::3]):
            a = np.asarray(a)
            qmin, qmax = quant.QRANGE[dt]
            if xs == ys and xz == yz:
                outs.append(quant.saturate(a, dt, lo, hi))
            elif mode == "float" or rounding(node) == "onnx":
                outs.append(lut_apply(build_lut(lambda x: x, xs, xz, ys, yz, dt, lo, hi), a).astype(dt))
            else:
                m, s = quant.quantize_multiplier(float(xs) / float(ys))
                outs.append(quant.saturate(quant.requantize_fixed(a.astype(np.int64) - xz, m, s) + yz, dt, lo, hi))
        return [np.concatenate(outs, axis=axis)]

    def emit(self, node, ins, outs, k):
        dt, (ys, yz), parts = qvariadic_params(node, ins)
        lo, hi = out_range(node, ys, yz, dt)
        axis = _axis(node, ins)
        y = outs[0]
        outer = int(np.prod(y.shape[:axis], dtype=np.int64))
        inner = int(np.prod(y.shape[axis + 1:], dtype=np.int64))
        ystride = y.shape[axis] * inner
        pos = 0
        for i, (t, xs, xz) in enumerate(parts):
            block = t.shape[axis] * inner
            if t.size:
                table = requant_table(node, dt, xs, xz, ys, yz, lo, hi)
                kind = "copy" if table is None else "lut"
                fn = k.kernel("qconcat_s8", {"name": f"{kind}_{CODES[dt]}", "kind": kind, "t": CTYPES[dt]})
                yp = f"{k.ptr(y)} + {pos * inner}" if pos else k.ptr(y)
                tsym = "" if table is None else f", {k.const(table.astype(dt), f'{node.name}_in{i}_requant')}"
                k.line(f"{fn}({yp}, {k.ptr(t)}, {outer}, {block}, {ystride}{tsym});")
            pos += t.shape[axis]
