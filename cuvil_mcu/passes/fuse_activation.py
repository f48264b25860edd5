"""Fuse Relu / Clip (constant bounds) into the kernel that produces their
input, when that kernel applies a clamp itself (`Op.fuses_act`) and nothing
else reads the unclamped values."""
from __future__ import annotations

from .. import ops
from ..ir import Graph
from ..ops.elementwise import _unary_params


def _clamp(n, g):
    """(lo, hi) of a fusable activation node, else None."""
    if n.op_type == "Relu":
        return (0.0, float("inf"))
    if n.op_type == "Clip":
        ins = [g.tensors[i] if i else None for i in n.inputs]
        if any(t is not None and not t.is_const for t in ins[1:]):
            return None
        lo, hi = _unary_params(n, ins)
        return (min(lo, hi), hi)   # ONNX: min(max(x, lo), hi), so hi wins when lo > hi
    return None


def _compose(first: tuple[float, float], then: tuple[float, float]) -> tuple[float, float]:
    """The clamp equal to clamping to `first`, then to `then` (both with
    lo <= hi): a monotone function that is a clamp to its values at -inf, +inf."""
    (a, b), (c, d) = first, then
    return min(max(a, c), d), min(max(b, c), d)


def run(g: Graph) -> Graph:
    producers = g.producers()
    consumers = g.consumers()
    removed = set()
    for n in g.nodes:
        bounds = _clamp(n, g)
        if bounds is None or g.tensors[n.inputs[0]].dtype != "float32":
            continue
        src = n.inputs[0]
        p = producers.get(src)
        if p is None or p.name in removed or not ops.get(p.op_type).fuses_act:
            continue
        if src in g.outputs or len(consumers.get(src, [])) != 1 or p.outputs[0] != src:
            continue
        p.act = bounds if p.act is None else _compose(p.act, bounds)
        p.fused.append(f"{n.op_type} '{n.name}'")
        p.outputs[0] = n.outputs[0]
        producers[n.outputs[0]] = p
        removed.add(n.name)
    g.nodes = [n for n in g.nodes if n.name not in removed]
    g.prune_tensors()
    return g
