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
        return (lo, hi)
    return None


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
        lo, hi = bounds
        if p.act is not None:
            lo, hi = max(lo, p.act[0]), min(hi, p.act[1])
        p.act = (lo, hi)
        p.fused.append(f"{n.op_type} '{n.name}'")
        p.outputs[0] = n.outputs[0]
        producers[n.outputs[0]] = p
        removed.add(n.name)
    g.nodes = [n for n in g.nodes if n.name not in removed]
    g.prune_tensors()
    return g
