"""NCHW -> NHWC for the integer spatial ops, without stray transposes.

The int8 kernels want channels innermost (the dot products of conv and
depthwise conv then run over contiguous bytes). Each NCHW spatial op gets
`_channels_last = 1` and a Transpose on each side; then:
1. a Transpose reading a Transpose is folded (identity -> removed; else one
   Transpose with the composed permutation);
2. Transposes are sunk through element-wise ops whose run-time inputs all come
   through the same permutation (residual Adds, lookup tables, requantize), so
   they meet their inverse and vanish;
3. a Transpose that only moves size-1 axes is a Reshape: a view, no copy.
The graph's inputs and outputs keep their layout: what is left at the edges
is the transposes the caller's layout demands, or views.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Tensor
from . import dead_nodes

SPATIAL = {"QLinearConv", "ConvInteger", "com.microsoft.QLinearAveragePool",
           "com.microsoft.QLinearGlobalAveragePool", "cuvil.QMaxPool", "cuvil.QConvTranspose", "cuvil.QResize",
           "cuvil.QLRN", "cuvil.QAffine"}
# element-wise ops: (run-time data input indices) — all other inputs are scalars
ELEMENTWISE = {"com.microsoft.QLinearAdd": (0, 3), "com.microsoft.QLinearMul": (0, 3), "cuvil.QLut": (0,),
               "QuantizeLinear": (0,), "DequantizeLinear": (0,), "Relu": (0,), "Clip": (0,)}


def _to_last(rank: int) -> list[int]:
    return [0] + list(range(2, rank)) + [1]


def _to_first(rank: int) -> list[int]:
    return [0, rank - 1] + list(range(1, rank - 1))


def _perm_shape(shape, perm):
    return tuple(shape[p] for p in perm)


def _compose(p1, p2):
    """Transpose(p2) after Transpose(p1) == Transpose(result)."""
    return [p1[i] for i in p2]


def _unique(g: Graph, base: str) -> str:
    return g.fresh_node_name(base)


def _convert(g: Graph) -> bool:
    out, changed = [], False
    for n in g.nodes:
        x = g.tensors[n.inputs[0]] if n.inputs else None
        if n.op_type not in SPATIAL or x is None or len(x.shape) not in (3, 4) or \
                int(n.attrs.get("_channels_last", n.attrs.get("channels_last", 0))):
            out.append(n)
            continue
        r = len(x.shape)
        tin = Node(_unique(g, f"{n.name}_to_nhwc"), "Transpose", [x.name], [""], {"perm": _to_last(r)})
        xt = g.fresh_name(f"{x.name}_nhwc")
        g.tensors[xt] = Tensor(xt, _perm_shape(x.shape, _to_last(r)), x.dtype, None, x.quant)
        tin.outputs = [xt]
        y = g.tensors[n.outputs[0]]
        yt = g.fresh_name(f"{y.name}_nhwc")
        g.tensors[yt] = Tensor(yt, _perm_shape(y.shape, _to_last(r)), y.dtype, None, y.quant)
        tout = Node(_unique(g, f"{n.name}_to_nchw"), "Transpose", [yt], [y.name], {"perm": _to_first(r)})
        n.inputs = [xt] + n.inputs[1:]
        n.outputs = [yt] + n.outputs[1:]
        n.attrs["_channels_last"] = 1
        if n.op_type.startswith("com.microsoft."):
            n.attrs["channels_last"] = 1
        out += [tin, n, tout]
        changed = True
    g.nodes = out
    return changed


def _fold_pairs(g: Graph) -> bool:
    """Transpose(Transpose(x)) -> x or one Transpose."""
    prod = g.producers()
    changed = False
    for n in g.nodes:
        if n.op_type != "Transpose":
            continue
        p = prod.get(n.inputs[0])
        if p is None or p.op_type != "Transpose":
            continue
        rank = len(g.tensors[p.inputs[0]].shape)
        p1 = p.attr("perm") or list(range(rank))[::-1]
        p2 = n.attr("perm") or list(range(rank))[::-1]
        comp = _compose(list(p1), list(p2))
        if comp == list(range(rank)) and n.outputs[0] not in g.outputs:
            g.rename_uses(n.outputs[0], p.inputs[0])
            n.op_type = "_dead"
        else:
            n.inputs = [p.inputs[0]]
            n.attrs["perm"] = comp
        changed = True
    if changed:
        g.nodes = [n for n in g.nodes if n.op_type != "_dead"]
        _drop_unused(g)
    return changed


def _sink(g: Graph) -> bool:
    """Move a Transpose below an element-wise op all of whose run-time inputs
    come through Transposes with one permutation."""
    prod = g.producers()
    cons = g.consumers()
    for n in g.nodes:
        idx = ELEMENTWISE.get(n.op_type)
        if n.op_type in ("com.microsoft.QLinearConcat", "cuvil.QSum"):
            idx = tuple(range(2, len(n.inputs), 3))
        elif n.op_type == "Concat":
            idx = tuple(range(len(n.inputs)))
        elif n.op_type == "Gather" and len(n.inputs) == 2 and g.tensors[n.inputs[1]].is_const \
                and len(g.tensors[n.inputs[1]].shape) == 1:
            idx = (0,)   # a permutation of one axis (passes/fold_shuffle.py): the axis moves like Concat's
        if idx is None or n.outputs[0] in g.outputs:
            continue
        concat = "Concat" in n.op_type or n.op_type == "Gather"
        if concat and any(g.tensors[n.inputs[i]].is_const for i in idx):
            continue
        # a constant operand (a per-channel scale or shift) is permuted here at compile time
        consts = [i for i in idx if i < len(n.inputs) and not concat and g.tensors[n.inputs[i]].is_const]
        idx = tuple(i for i in idx if i not in consts)
        ts = [prod.get(n.inputs[i]) for i in idx if i < len(n.inputs)]
        if not ts or any(t is None or t.op_type != "Transpose" for t in ts):
            continue
        perms = {tuple(t.attr("perm") or ()) for t in ts}
        if len(perms) != 1 or () in perms:
            continue
        shapes = {g.tensors[t.inputs[0]].shape for t in ts}
        if len(shapes) != 1 and not concat:
            continue
        # the other inputs must be per-tensor scalars (scales, zero points)
        if not concat and any(i not in idx and i not in consts and n.inputs[i] and g.tensors[n.inputs[i]].size != 1
                              for i in range(len(n.inputs))):
            continue
        # a transpose read by others stays for them; only sink when this is its only reader
        if any(len(cons.get(t.outputs[0], [])) != 1 for t in ts):
            continue
        perm = list(perms.pop())
        inv = list(np.argsort(perm))
        if any(g.tensors[n.inputs[i]].data.ndim > len(perm) for i in consts):
            continue
        if concat:  # the axis, in the coordinates of the transposes' inputs
            rank = len(perm)
            axis = int(n.attrs.get("axis", 0))
            n.attrs["axis"] = int(perm[axis + rank if axis < 0 else axis])
        rank = len(perm)
        for i in consts:
            c = g.tensors[n.inputs[i]].data
            c = np.transpose(c.reshape((1,) * (rank - c.ndim) + c.shape), inv)
            n.inputs[i] = g.add_const(f"{n.inputs[i]}_T", np.ascontiguousarray(c))
        for i, t in zip(idx, ts):
            n.inputs[i] = t.inputs[0]
            t.op_type = "_dead"
        y = g.tensors[n.outputs[0]]
        yt = g.fresh_name(f"{y.name}_pre")
        g.tensors[yt] = Tensor(yt, _perm_shape(y.shape, inv), y.dtype, None, y.quant)
        tout = Node(_unique(g, f"{n.name}_T"), "Transpose", [yt], [y.name], {"perm": perm})
        n.outputs = [yt] + n.outputs[1:]
        pos = g.nodes.index(n)
        g.nodes.insert(pos + 1, tout)
        g.nodes = [m for m in g.nodes if m.op_type != "_dead"]
        _drop_unused(g)
        return True
    return False


def _views(g: Graph) -> bool:
    """A Transpose that keeps the order of every non-1 axis only relabels the
    shape: make it a Reshape (planned as a view)."""
    changed = False
    for n in g.nodes:
        if n.op_type != "Transpose":
            continue
        x = g.tensors[n.inputs[0]]
        perm = n.attr("perm") or list(range(len(x.shape)))[::-1]
        moved = [p for p in perm if x.shape[p] != 1]
        if moved == sorted(moved):
            y = g.tensors[n.outputs[0]]
            shape = g.add_const(f"{n.name}_shape", np.array(y.shape, dtype=np.int64))
            n.op_type, n.inputs, n.attrs = "Reshape", [n.inputs[0], shape], {}
            changed = True
    return changed


def _drop_unused(g: Graph) -> None:
    dead_nodes.run(g)


def run(g: Graph) -> Graph:
    if not _convert(g):
        return g
    for _ in range(10 * max(1, len(g.nodes))):
        if not (_fold_pairs(g) or _sink(g)):
            break
    _views(g)
    return g
