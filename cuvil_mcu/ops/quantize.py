"""QuantizeLinear (float -> int8/uint8) and DequantizeLinear (int -> float).

In a QDQ model most of these pairs are absorbed by passes/qdq.py into the
integer ops; the ones left run as kernels: at a float model input or output,
and around ops that have no integer kernel (mixed precision). Weights'
DequantizeLinear nodes are evaluated at compile time.

ONNX semantics: y = saturate(round_half_even(x / scale) + zp) and
x = (q - zp) * scale, per tensor or per axis.
"""
from __future__ import annotations

import numpy as np

from .. import quant
from .base import Op, norm_axis, register, unsupported


def _params(node, ins, x_shape):
    scale_t = ins[1]
    zp_t = ins[2] if len(ins) > 2 else None
    if scale_t is None or not scale_t.is_const:
        raise unsupported(node, "scale must be a constant")
    axis = None
    if scale_t.size > 1:
        axis = norm_axis(node, int(node.attr("axis", 1)), len(x_shape))
        if scale_t.size != x_shape[axis]:
            raise unsupported(node, f"per-axis scale '{scale_t.name}' has {scale_t.size} values, "
                                    f"axis {axis} has {x_shape[axis]}")
    if int(node.attr("block_size", 0)):
        raise unsupported(node, "blocked quantization (block_size) is not supported")
    scale, zp = quant.qparams(node, scale_t, zp_t, "scale", channels=scale_t.size)
    return scale, zp, axis


def _bcast(v, axis, rank):
    if axis is None or v.size == 1:
        return v.reshape(())
    shape = [1] * rank
    shape[axis] = v.size
    return v.reshape(shape)


def _qdtype(node, ins) -> str:
    zp_t = ins[2] if len(ins) > 2 else None
    if zp_t is not None:
        return zp_t.dtype
    od = node.attr("output_dtype", 0)
    return {3: "int8", 2: "uint8"}.get(int(od), "uint8") if od else "uint8"


@register("QuantizeLinear")
class QuantizeLinear(Op):
    def check(self, node, ins):
        if all(t is None or t.is_const for t in ins):
            _params(node, ins, ins[0].shape)  # bad scales are an error even when folded
            return
        if ins[0].dtype != "float32":
            raise unsupported(node, f"input is {ins[0].dtype}, expected float32")
        if _qdtype(node, ins) not in ("int8", "uint8"):
            raise unsupported(node, f"quantizing to {_qdtype(node, ins)} (int8 and uint8 are supported)")
        if int(node.attr("saturate", 1)) != 1:
            raise unsupported(node, "saturate=0")
        _params(node, ins, ins[0].shape)

    def infer(self, node, ins):
        return [(ins[0].shape, _qdtype(node, ins))]

    def reference(self, node, ins, x, *rest):
        scale, zp, axis = _params(node, ins, np.shape(x))
        r = np.ndim(x)
        return [quant.quantize(x, _bcast(scale, axis, r), _bcast(zp, axis, r), _qdtype(node, ins))]

    def emit(self, node, ins, outs, k):
        scale, zp, axis = _params(node, ins, ins[0].shape)
        outer, ch, inner = _split(ins[0].shape, axis, scale.size)
        lo, hi = quant.QRANGE[outs[0].dtype]
        fn = k.kernel("quantize_f32", {"name": outs[0].dtype, "qtype": outs[0].ctype})
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(ins[0])}, {k.const(scale.astype(np.float32), 'q_scale')}, "
               f"{k.const(zp.astype(np.int32), 'q_zp')}, {outer}, {ch}, {inner}, {lo}, {hi});")


@register("DequantizeLinear")
class DequantizeLinear(Op):
    def check(self, node, ins):
        if all(t is None or t.is_const for t in ins):
            _params(node, ins, ins[0].shape)  # bad scales are an error even when folded
            return
        if ins[0].dtype not in ("int8", "uint8", "int32"):
            raise unsupported(node, f"dequantizing {ins[0].dtype} (int8, uint8, int32 are supported)")
        _params(node, ins, ins[0].shape)

    def infer(self, node, ins):
        return [(ins[0].shape, "float32")]

    def reference(self, node, ins, x, *rest):
        scale, zp, axis = _params(node, ins, np.shape(x))
        r = np.ndim(x)
        return [quant.dequantize(x, _bcast(scale, axis, r), _bcast(zp, axis, r))]

    def emit(self, node, ins, outs, k):
        scale, zp, axis = _params(node, ins, ins[0].shape)
        outer, ch, inner = _split(ins[0].shape, axis, scale.size)
        fn = k.kernel("dequantize_f32", {"name": ins[0].dtype, "qtype": ins[0].ctype})
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(ins[0])}, {k.const(scale.astype(np.float32), 'dq_scale')}, "
               f"{k.const(zp.astype(np.int32), 'dq_zp')}, {outer}, {ch}, {inner});")


def _split(shape, axis, nch):
    """(outer, channels, inner) element counts around the quantization axis."""
    size = int(np.prod(shape)) if shape else 1
    if axis is None or nch == 1:
        return 1, 1, size
    outer = int(np.prod(shape[:axis])) if axis else 1
    inner = int(np.prod(shape[axis + 1:])) if axis + 1 < len(shape) else 1
    return outer, shape[axis], inner
