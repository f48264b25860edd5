"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp.

Axes come from the `axes` attribute (ReduceSum before opset 13, the others
before 18) or from the optional constant input 1 (later opsets); a model
carries one form or the other, so the form present decides. No axes means all
axes; with `noop_with_empty_axes` 1 it means no axis (each element reduced on
its own: the identity for Sum/Mean/Max/Min/Prod, x*x for SumSquare...).

The kernel walks the input with strides computed here: size-1 dimensions are
dropped and neighbouring dimensions that are both kept or both reduced are
merged, leaving at most MAX_GROUPS kept groups (the output loops, in output
order) and MAX_GROUPS reduced groups (the accumulation loops). Any set of
axes, contiguous or not, is one kernel call without scratch. Accumulation is
in float, in row-major order of the reduced elements; the reference sums in
float64 (float C vs reference: a few ulp times the number of terms).
"""
from __future__ import annotations

import numpy as np

from .base import Op, apply_act, const_ints, register, shape_error, unsupported

MAX_GROUPS = 4

# ONNX op -> (C variant, float64 numpy reference over the reduced axes).
# C variant: init of acc, statement folding v into acc, final expression of
# acc and n (the number of reduced elements, float); `max_pass`: a first pass
# finds m, the maximum (LogSumExp's shift).
KINDS = {
    "ReduceSum": ({"name": "sum", "init": "0.0f", "step": "acc += v;", "fin": "acc"},
                  lambda x, ax: np.sum(x, axis=ax, keepdims=True)),
    "ReduceMean": ({"name": "mean", "init": "0.0f", "step": "acc += v;", "fin": "acc / n"},
                   lambda x, ax: np.mean(x, axis=ax, keepdims=True)),
    "ReduceMax": ({"name": "max", "init": "-INFINITY", "step": "acc = v > acc ? v : acc;", "fin": "acc"},
                  lambda x, ax: np.max(x, axis=ax, keepdims=True)),
    "ReduceMin": ({"name": "min", "init": "INFINITY", "step": "acc = v < acc ? v : acc;", "fin": "acc"},
                  lambda x, ax: np.min(x, axis=ax, keepdims=True)),
    "ReduceProd": ({"name": "prod", "init": "1.0f", "step": "acc *= v;", "fin": "acc"},
                   lambda x, ax: np.prod(x, axis=ax, keepdims=True)),
    "ReduceSumSquare": ({"name": "sumsq", "init": "0.0f", "step": "acc += v * v;", "fin": "acc"},
                        lambda x, ax: np.sum(x * x, axis=ax, keepdims=True)),
    "ReduceL1": ({"name": "l1", "init": "0.0f", "step": "acc += fabsf(v);", "fin": "acc"},
                 lambda x, ax: np.sum(np.abs(x), axis=ax, keepdims=True)),
    "ReduceL2": ({"name": "l2", "init": "0.0f", "step": "acc += v * v;", "fin": "sqrtf(acc)"},
                 lambda x, ax: np.sqrt(np.sum(x * x, axis=ax, keepdims=True))),
    "ReduceLogSum": ({"name": "logsum", "init": "0.0f", "step": "acc += v;", "fin": "logf(acc)"},
                     lambda x, ax: np.log(np.sum(x, axis=ax, keepdims=True))),
    "ReduceLogSumExp": ({"name": "logsumexp", "init": "0.0f", "step": "acc += expf(v - m);",
                         "fin": "logf(acc) + m", "max_pass": True},
                        lambda x, ax: _logsumexp(x, ax)),
}
for _v, _ in KINDS.values():
    _v.setdefault("max_pass", False)

# Opset from which `axes` is an input instead of an attribute (others: 18).
AXES_AS_INPUT_SINCE = {"ReduceSum": 13}


def _logsumexp(x, ax):
    m = np.max(x, axis=ax, keepdims=True)
    return np.log(np.sum(np.exp(x - m), axis=ax, keepdims=True)) + m


def reduce_axes(node, ins) -> tuple[list[int], bool]:
    """(sorted normalized axes, keepdims). Empty axes with
    noop_with_empty_axes=1 reduce over no axis: each output is the reduction
    of one element (x for Sum/Mean/Max, x*x for SumSquare, |x| for L1/L2, as
    ONNX's reference and onnxruntime compute it)."""
    rank = len(ins[0].shape)
    keepdims = bool(int(node.attr("keepdims", 1)))
    axes = node.attr("axes")
    if len(ins) > 1 and ins[1] is not None:
        if axes is not None:
            raise shape_error(node, "axes given both as attribute and as input")
        axes = const_ints(node, ins[1], "axes")
    if axes is not None:
        axes = [int(a) for a in axes]
    if not axes:
        if int(node.attr("noop_with_empty_axes", 0)):
            return [], keepdims
        return list(range(rank)), keepdims
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise shape_error(node, f"axis {a} out of range for rank {rank}")
        out.append(a + rank if a < 0 else a)
    if len(set(out)) != len(out):
        raise shape_error(node, f"axes {axes} repeat an axis")
    return sorted(out), keepdims


def reduced_shape(shape, axes, keepdims) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def reduce_reference(op_type: str, x: np.ndarray, axes: list[int], keepdims: bool) -> np.ndarray:
    """ONNX reduction of x over axes, in x's dtype (float computed in float64)."""
    x = np.asarray(x)
    fn = KINDS[op_type][1]
    ax = tuple(axes)
    if np.issubdtype(x.dtype, np.floating):
        with np.errstate(all="ignore"):
            y = fn(x.astype(np.float64), ax)
    elif op_type == "ReduceMean":  # integer mean truncates, as C division does
        y = np.trunc(np.sum(x.astype(np.float64), axis=ax, keepdims=True) / max(1, _count(x.shape, axes)))
    elif op_type in ("ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1"):
        y = fn(x, ax)
    else:
        y = fn(x.astype(np.float64), ax)
    y = np.asarray(y).astype(x.dtype)
    return y.reshape(reduced_shape(x.shape, axes, keepdims))


def _count(shape, axes) -> int:
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def reduce_groups(node, shape, axes):
    """Kept and reduced (size, element stride) groups, outer first, each list
    padded at the front to MAX_GROUPS with (1, 0)."""
    strides, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= shape[i]
    groups: list[list] = []  # [size, stride, reduced]
    for i, d in enumerate(shape):
        if d == 1:
            continue
        red = i in axes
        if groups and groups[-1][2] == red:
            groups[-1][0] *= d
            groups[-1][1] = strides[i]
        else:
            groups.append([d, strides[i], red])
    kept = [(g[0], g[1]) for g in groups if not g[2]]
    red = [(g[0], g[1]) for g in groups if g[2]]
    if len(kept) > MAX_GROUPS or len(red) > MAX_GROUPS:
        raise unsupported(node, f"reducing axes {axes} of shape {list(shape)} alternates kept and reduced "
                          f"dimensions more than {MAX_GROUPS} times")
    pad = [(1, 0)]
    return pad * (MAX_GROUPS - len(kept)) + kept, pad * (MAX_GROUPS - len(red)) + red


def clamp_bounds(k, node) -> tuple[str, str]:
    """C literals of node's fused clamp; infinite bounds stay infinite, so an
    unclamped kernel passes -inf/inf results (a max over padding) through."""
    lo, hi = node.act if node.act is not None else (-np.inf, np.inf)
    return ("-INFINITY" if lo == -np.inf else k.f32(lo)), ("INFINITY" if hi == np.inf else k.f32(hi))


def emit_reduce(k, node, op_type: str, x, y, axes) -> None:
    """One call of the reduce kernel: y = op_type over axes of x, then the
    fused clamp of node."""
    lo, hi = clamp_bounds(k, node)
    kept, red = reduce_groups(node, x.shape, axes)
    fn = k.kernel("reduce_f32", KINDS[op_type][0])
    kn = k.const(np.array([g[0] for g in kept], np.int32), "reduce_kept_n")
    ks = k.const(np.array([g[1] for g in kept], np.int32), "reduce_kept_stride")
    rn = k.const(np.array([g[0] for g in red], np.int32), "reduce_n")
    rs = k.const(np.array([g[1] for g in red], np.int32), "reduce_stride")
    count = _count(x.shape, axes)
    k.line(f"{fn}({k.ptr(y)}, {k.ptr(x)}, {kn}, {ks}, {rn}, {rs}, {k.f32(float(count))}, {lo}, {hi});")


@register(*KINDS)
class Reduce(Op):
    fuses_act = True

    def check(self, node, ins):
        since = AXES_AS_INPUT_SINCE.get(node.op_type, 18)
        has_input = len(ins) > 1 and ins[1] is not None
        if node.opset is not None:
            if has_input and node.opset < since:
                raise shape_error(node, f"axes as an input needs opset >= {since} (model has {node.opset})")
            if node.attr("axes") is not None and node.opset >= since:
                raise shape_error(node, f"axes is an input since opset {since}, not an attribute "
                                        f"(model has {node.opset})")
        if all(t is None or t.is_const for t in ins):
            return  # folded at load time, any dtype
        if ins[0].dtype != "float32":
            raise unsupported(node, f"input '{ins[0].name}' is {ins[0].dtype}; run-time reductions "
                                    f"are float32")
        if ins[0].size == 0:
            raise unsupported(node, f"input '{ins[0].name}' is empty {list(ins[0].shape)}")
        if has_input and not ins[1].is_const:
            raise unsupported(node, f"axes '{ins[1].name}' must be a constant (computed at run time here)")

    def infer(self, node, ins):
        axes, keepdims = reduce_axes(node, ins)
        x = ins[0]
        return [(reduced_shape(x.shape, axes, keepdims), x.dtype)]

    def reference(self, node, ins, x, *rest):
        axes, keepdims = reduce_axes(node, ins)
        return [apply_act(reduce_reference(node.op_type, x, axes, keepdims), node.act)]

    def macs(self, node, ins, outs):
        return ins[0].size

    def emit(self, node, ins, outs, k):
        axes, _ = reduce_axes(node, ins)
        emit_reduce(k, node, node.op_type, ins[0], outs[0], axes)
