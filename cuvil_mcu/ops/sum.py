"""Sum: the element-wise sum of any number of inputs with numpy
broadcasting, float32 and int8 (cuvil.QSum), as one kernel however many
inputs there are (ResNet and ShuffleNet exports from Caffe2 write their
residual additions as Sum).

Float: y = ((x0 + x1) + x2) + ... in float32, left to right as ONNX's
reference and onnxruntime add them, then the fused clamp.

cuvil.QSum is what passes/qdq.py makes of DequantizeLinear x n -> Sum ->
QuantizeLinear: inputs Y_scale, Y_zero_point, then (X, X_scale,
X_zero_point) per input (QLinearConcat's layout); per-tensor parameters,
int8 or uint8 throughout. What one input adds depends on its code only,
so Python tabulates it over the 256 codes and the kernel adds table
entries:
- "fixed" (TFLM's int8 ADD generalised to n inputs; for n = 2 it is that
  recipe, QLinearAdd's fixed mode, bit for bit):
      nmax = max(2, n) * max(s_i)                              (double)
      (m_i, e_i) = QuantizeMultiplier(s_i / nmax)
      (mo, eo)  = QuantizeMultiplier(nmax / (2^20 * s_y))
      T_i[q] = MBQM((q - z_i) * 2^20, m_i, e_i)   (|T_i| <= 2^28 / n: the sum fits int32)
      y = clamp(MBQM(sum_i T_i[q_i], mo, eo) + z_y)
- "float" (DequantizeLinear, float Sum, QuantizeLinear as onnxruntime runs
  them; it has no fused integer Sum):
      F_i[q] = float32(q - z_i) * s_i;  r = F_0[q_0] + F_1[q_1] + ...  (float32)
      y = clamp(rint(r / s_y) + z_y)   (half to even, r / s_y first clamped
      to +-65536 as our QuantizeLinear kernel does)
Tables cost 1 KB of flash per input.
"""
from __future__ import annotations

import numpy as np

from .. import quant
from .base import Op, apply_act, broadcast_shape, register, require_float, shape_error, unsupported
from .elementwise import broadcast_strides_n
from .qelementwise import CODES, CTYPES, lut_index, out_range, qvariadic_params, requant_mode

F32 = np.float32


def _strides(node, shapes, out):
    try:
        return broadcast_strides_n(shapes, out)
    except ValueError as e:
        raise unsupported(node, str(e)) from None


def _emit_sum(k, fn: str, y, xs, extra: list[str]) -> None:
    """One call of a sum kernel: y, the input pointers, the broadcast walk, extra args."""
    dims, strides = _strides(k.node, [t.shape for t in xs], y.shape)
    ptrs = ", ".join(k.ptr(t) for t in xs)
    d = k.const(np.array(dims, np.int32), "bcast_shape")
    st = k.const(np.array(strides, np.int32), "bcast_strides")
    ctype = "float" if y.dtype == "float32" else CTYPES[y.dtype]
    k.line(f"{{ const {ctype} *const xs_[{len(xs)}] = {{{ptrs}}};")
    k.line(f"  {fn}({k.ptr(y)}, xs_, {d}, {st}{''.join(', ' + e for e in extra)}); }}")


@register("Sum")
class Sum(Op):
    inplace = True     # every input element is read before the output element it lies under is written
    fuses_act = True

    def check(self, node, ins):
        if not ins or any(t is None for t in ins):
            raise shape_error(node, "needs at least one input and no empty input names")
        if all(t.is_const for t in ins):
            return   # folded at load time
        require_float(node, ins)

    def infer(self, node, ins):
        shape = broadcast_shape(node, *[t.shape for t in ins])
        _strides(node, [t.shape for t in ins], shape)
        return [(shape, ins[0].dtype)]

    def reference(self, node, ins, *arrays):
        y = np.asarray(arrays[0])
        for a in arrays[1:]:
            y = y + np.asarray(a)
        y = np.broadcast_to(y, self.infer(node, ins)[0][0]).astype(np.asarray(arrays[0]).dtype)
        return [apply_act(np.ascontiguousarray(y), node.act)]

    def macs(self, node, ins, outs):
        return outs[0].size * (len(ins) - 1)

    def emit(self, node, ins, outs, k):
        from ..codegen import act_bounds
        if not outs[0].size:
            return
        lo, hi = act_bounds(node)
        fn = k.kernel("sum", {"name": f"f32_{len(ins)}", "n": len(ins), "mode": "f32", "xt": "float"})
        _emit_sum(k, fn, outs[0], ins, [lo, hi])


def qsum_tables(node, ins):
    """(mode, tables [n, 256] in byte order (int32 or float32), output params
    (mo, eo) or None, dtype, (ys, yz), (lo, hi))."""
    dt, (ys, yz), parts = qvariadic_params(node, ins)
    lo, hi = out_range(node, ys, yz, dt)
    mode = requant_mode(node)
    codes = lut_index(dt)
    if mode == "fixed":
        nmax = max(2, len(parts)) * max(float(s) for _, s, _ in parts)
        tabs = []
        for _, s, z in parts:
            m, e = quant.quantize_multiplier(float(s) / nmax)
            tabs.append(quant.requantize_fixed((codes - z) * (1 << 20), m, e))
        out = quant.quantize_multiplier(nmax / ((1 << 20) * float(ys)))
        return mode, np.array(tabs, np.int32), out, dt, (ys, yz), (lo, hi)
    tabs = [((codes - z).astype(F32) * F32(s)).astype(F32) for _, s, z in parts]
    return mode, np.array(tabs, F32), None, dt, (ys, yz), (lo, hi)


@register("cuvil.QSum")
class QSum(Op):
    inplace = True
    fuses_act = True

    def check(self, node, ins):
        qvariadic_params(node, ins)
        requant_mode(node)

    def infer(self, node, ins):
        dt, _, parts = qvariadic_params(node, ins)
        shapes = [t.shape for t, _, _ in parts]
        shape = broadcast_shape(node, *shapes)
        _strides(node, shapes, shape)
        return [(shape, dt)]

    def reference(self, node, ins, *arrays):
        mode, tabs, out, dt, (ys, yz), (lo, hi) = qsum_tables(node, ins)
        shape = self.infer(node, ins)[0][0]
        vals = []
        for i, a in enumerate(arrays[2::3]):
            a = np.asarray(a)
            idx = a.view(np.uint8) if a.dtype == np.int8 else a.astype(np.uint8)
            vals.append(np.broadcast_to(tabs[i][idx], shape))
        if mode == "fixed":
            acc = np.sum(np.array(vals, np.int64), axis=0)
            y = quant.requantize_fixed(acc, *out) + yz
        else:
            r = vals[0].astype(F32)
            for v in vals[1:]:
                r = (r + v).astype(F32)
            v = np.clip(r / F32(ys), F32(-65536.0), F32(65536.0)).astype(F32)
            y = np.rint(v).astype(np.int64) + yz
        return [quant.saturate(y, dt, lo, hi)]

    def macs(self, node, ins, outs):
        return outs[0].size * (len(ins) // 3 - 1)

    def emit(self, node, ins, outs, k):
        mode, tabs, out, dt, (ys, yz), (lo, hi) = qsum_tables(node, ins)
        y = outs[0]
        if not y.size:
            return
        xs = [t for t in ins[2::3]]
        if mode == "fixed":
            k.kernel("requant_fixed")
            q = [out[0], out[1], yz, lo, hi]
        else:
            q = [yz, lo, hi]
        fn = k.kernel("sum", {"name": f"{mode}_{CODES[dt]}_{len(xs)}", "n": len(xs), "mode": mode, "xt": CTYPES[dt]})
        tsym = k.const(tabs, f"{node.name}_tables")
        qsym = k.const(np.array(q, np.int32), f"{node.name}_q")
        _emit_sum(k, fn, y, xs, [tsym, qsym] + ([k.f32(float(ys))] if mode == "float" else []))
