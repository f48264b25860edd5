"""Pooling: MaxPool, AveragePool (1-D and 2-D), GlobalAveragePool,
GlobalMaxPool (any rank >= 3).

Window geometry follows onnxruntime, which the ONNX reference agrees with
where both are defined:
- explicit pads: out = floor((L + pad_b + pad_e - ((k-1)*d + 1)) / s) + 1;
  with ceil_mode the division rounds up, then a last window that would start
  in the right padding (at or past L + pad_b in padded coordinates) is dropped.
- VALID: no padding, same formula (ceil_mode applies).
- SAME_UPPER / SAME_LOWER: out = ceil(L / s), total padding
  (out-1)*s + k - L split evenly, the odd element at the end (UPPER) or the
  start (LOWER).
- AveragePool with count_include_pad=1 divides by the number of window taps
  inside the padded input [-pad_b, L + pad_e): padding counts, the part of a
  ceil_mode window past the end padding does not. With 0 it divides by the
  taps inside the input.
- pads may exceed the kernel (onnxruntime refuses that, but a folded Pad can
  produce it): a window wholly in the padding is -inf for MaxPool and 0 for
  AveragePool with count_include_pad=1 (the padding values it stands for);
  with count_include_pad=0 it is 0/0 and rejected.

Python turns this into one table per spatial dimension: for each output
position, (first input index in the window, number of window taps inside the
input, divisor count). The kernel only loops over those; a 1-D pool is a 2-D
pool of height 1. Global pools are reductions (ops.reduce's kernel).
"""
from __future__ import annotations

import numpy as np

from .. import limits
from .base import Op, apply_act, register, require_float, shape_error, unsupported
from .reduce import clamp_bounds, emit_reduce, reduce_reference

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _ints(node, key, n, default):
    v = node.attr(key)
    if v is None:
        return [default] * n
    v = [int(a) for a in v]
    if len(v) != n:
        raise shape_error(node, f"{key} {v} has {len(v)} values, expected {n}")
    return v


def geometry(node, x_shape):
    """Per spatial dimension: (out size, pad_begin, kernel, stride, dilation)."""
    rank = len(x_shape)
    sp = rank - 2
    ks = node.attr("kernel_shape")
    if ks is None:
        raise shape_error(node, "kernel_shape is required")
    ks = [int(a) for a in ks]
    if len(ks) != sp:
        raise shape_error(node, f"kernel_shape {ks} does not match input rank {rank} ({sp} spatial dims)")
    strides = _ints(node, "strides", sp, 1)
    dil = _ints(node, "dilations", sp, 1)
    pads = _ints(node, "pads", 2 * sp, 0)
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    ceil_mode = int(node.attr("ceil_mode", 0))
    if auto_pad not in AUTO_PADS:
        raise shape_error(node, f"auto_pad '{auto_pad}' is not one of {', '.join(AUTO_PADS)}")
    if min(ks + strides + dil) < 1:
        raise shape_error(node, f"kernel_shape {ks}, strides {strides} and dilations {dil} must be >= 1")
    if min(pads) < 0:
        raise shape_error(node, f"pads {pads} must be >= 0")
    for what, vals in (("kernel_shape", ks), ("strides", strides), ("dilations", dil), ("pads", pads)):
        for v in vals:
            limits.check_extent(v, f"node '{node.name}' ({node.op_type}): {what} value")
    dims = []
    for i in range(sp):
        L, k, s, d = x_shape[2 + i], ks[i], strides[i], dil[i]
        ek = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if d != 1:
                # onnxruntime pads for the undilated kernel, the ONNX spec for the dilated one.
                raise unsupported(node, f"auto_pad {auto_pad} with dilations {dil} (onnxruntime and "
                                        f"the ONNX spec disagree on the padding)")
            n = -(-L // s)
            total = (n - 1) * s + k - L
            if total < 0:
                raise unsupported(node, f"auto_pad {auto_pad} with kernel {k} smaller than stride {s} "
                                        f"(negative padding) on spatial dim {i}")
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            e = total - b
        else:
            b, e = (0, 0) if auto_pad == "VALID" else (pads[i], pads[sp + i])
            span = L + b + e - ek
            if span < 0:
                raise shape_error(node, f"window {ek} (kernel {k}, dilation {d}) is larger than the "
                                        f"padded input {L + b + e} on spatial dim {i}")
            if ceil_mode:
                n = -(-span // s) + 1
                if (n - 1) * s >= L + b:
                    n -= 1
            else:
                n = span // s + 1
        dims.append((n, b, e, k, s, d))
    return dims


def window_table(L, n, b, e, k, s, d, include_pad: bool) -> np.ndarray:
    """int32 [n, 3]: (first input index, taps inside the input, divisor).
    A window entirely in the padding (pads >= kernel, e.g. after a Pad was
    folded in) has no taps: MaxPool gives -inf there (the value of the
    padding it stands for), AveragePool with count_include_pad=1 gives 0.
    Window o's taps are start + j*d (start = o*s - b, j < k); the ones inside
    [0, L) are a range of j, computed in closed form (no loop over taps)."""
    start = np.arange(n, dtype=np.int64) * s - b
    j_lo = np.maximum(0, -(start // d))                   # ceil(-start / d), at least 0
    j_hi = np.minimum(k - 1, (L - 1 - start) // d)
    count = np.maximum(0, j_hi - j_lo + 1)
    first = np.where(count > 0, start + j_lo * d, 0)
    # taps are never before -b (start >= -b); those before L + e count with padding
    div = np.maximum(0, np.minimum(k - 1, (L + e - 1 - start) // d) + 1) if include_pad else count
    return np.stack([first, count, div], axis=1).astype(np.int32).reshape(n, 3)


class _Pool(Op):
    fuses_act = True
    kind = ""

    def check(self, node, ins):
        if len(node.outputs) > 1 and node.outputs[1]:
            raise unsupported(node, "the Indices output is not supported")
        if all(t is None or t.is_const for t in ins):
            return
        require_float(node, ins, 0)
        if len(ins[0].shape) not in (3, 4):
            raise unsupported(node, f"input rank {len(ins[0].shape)}: only 1-D and 2-D pooling "
                                    f"(rank 3 and 4) is supported")

    def infer(self, node, ins):
        x = ins[0]
        if len(x.shape) < 3:
            raise shape_error(node, f"input rank {len(x.shape)} < 3")
        dims = geometry(node, x.shape)
        out = tuple(x.shape[:2]) + tuple(dm[0] for dm in dims)
        limits.check_shape(out, np.dtype(x.dtype).itemsize, f"node '{node.name}' ({node.op_type}): output")
        for i, dm in enumerate(dims):
            limits.check_table_rows(dm[0], f"node '{node.name}' ({node.op_type}): spatial axis {i}")
        self._tables(node, x.shape)  # rejects 0/0 windows now, not at emit
        return [(out, x.dtype)]

    def fold_cost(self, node, ins, outs):
        rows = sum(dm[0] for dm in geometry(node, ins[0].shape))   # the reference loops over table rows
        return super().fold_cost(node, ins, outs, rows)

    def _tables(self, node, x_shape):
        include = self.kind == "avg" and bool(int(node.attr("count_include_pad", 0)))
        tabs = [(window_table(x_shape[2 + i], n, b, e, k, s, d, include), d)
                for i, (n, b, e, k, s, d) in enumerate(geometry(node, x_shape))]
        if self.kind == "avg" and not include and any((t[:, 2] == 0).any() for t, _ in tabs):
            raise unsupported(node, "a window lies entirely in the padding; with count_include_pad=0 "
                                    "its average is 0/0")
        return tabs

    def reference(self, node, ins, x, *rest):
        x = np.asarray(x)
        y = x.astype(np.float64) if self.kind == "avg" else x
        div = np.float64(1)
        for i, (tab, d) in enumerate(self._tables(node, x.shape)):
            ax = 2 + i
            cols = []
            for first, cnt, _ in tab:
                w = np.take(y, first + d * np.arange(cnt), axis=ax)
                if cnt == 0:  # all padding
                    cols.append(np.full(np.delete(w.shape, ax), -np.inf if self.kind == "max" else 0.0, y.dtype))
                else:
                    cols.append(np.max(w, axis=ax) if self.kind == "max" else np.sum(w, axis=ax))
            y = np.stack(cols, axis=ax)
            shape = [1] * y.ndim
            shape[ax] = len(tab)
            div = div * tab[:, 2].astype(np.float64).reshape(shape)
        if self.kind == "avg":
            y = y / div
        return [apply_act(np.asarray(y).astype(x.dtype), node.act)]

    def macs(self, node, ins, outs):
        tabs = self._tables(node, ins[0].shape)
        taps = 1
        for tab, _ in tabs:
            taps *= int(tab[:, 1].sum())
        return ins[0].shape[0] * ins[0].shape[1] * taps

    def emit(self, node, ins, outs, k):
        lo, hi = clamp_bounds(k, node)
        x = ins[0]
        tabs = self._tables(node, x.shape)
        if len(tabs) == 1:  # 1-D: height 1
            tabs = [(np.array([[0, 1, 1]], np.int32), 1)] + tabs
        (th, dh), (tw, dw) = tabs
        ih, iw = x.shape[-2:] if len(x.shape) == 4 else (1, x.shape[-1])
        planes = x.shape[0] * x.shape[1]
        variant = POOL_VARIANTS[self.kind]
        fn = k.kernel("pool2d_f32", variant)
        ch = k.const(th.reshape(-1), "pool_rows")
        cw = k.const(tw.reshape(-1), "pool_cols")
        k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {planes}, {ih}, {iw}, {len(th)}, {len(tw)}, "
               f"{ch}, {cw}, {dh}, {dw}, {lo}, {hi});")


# Kernel variants: initial accumulator, fold of v into acc, result from acc
# and the divisor count c.
POOL_VARIANTS = {
    "max": {"name": "max", "init": "-INFINITY", "step": "acc = v > acc ? v : acc;", "fin": "acc"},
    "avg": {"name": "avg", "init": "0.0f", "step": "acc += v;", "fin": "acc / (float)c"},
}


@register("MaxPool")
class MaxPool(_Pool):
    kind = "max"


@register("AveragePool")
class AveragePool(_Pool):
    kind = "avg"


@register("GlobalAveragePool", "GlobalMaxPool")
class GlobalPool(Op):
    fuses_act = True

    def _red(self, node):
        return "ReduceMean" if node.op_type == "GlobalAveragePool" else "ReduceMax"

    def check(self, node, ins):
        if all(t is None or t.is_const for t in ins):
            return
        require_float(node, ins, 0)

    def infer(self, node, ins):
        x = ins[0]
        if len(x.shape) < 3:
            raise shape_error(node, f"input rank {len(x.shape)} < 3 (expects N, C, spatial...)")
        return [(tuple(x.shape[:2]) + (1,) * (len(x.shape) - 2), x.dtype)]

    def reference(self, node, ins, x):
        x = np.asarray(x)
        y = reduce_reference(self._red(node), x, list(range(2, x.ndim)), True)
        return [apply_act(y, node.act)]

    def macs(self, node, ins, outs):
        return ins[0].size

    def emit(self, node, ins, outs, k):
        emit_reduce(k, node, self._red(node), ins[0], outs[0], list(range(2, len(ins[0].shape))))
