"""Remove Transposes that undo each other.

- T2(T1(x)) whose perms compose to the identity is x: T2's readers read x.
  T1 stays only while something else reads its output.
- T2(T1(x)) that does not cancel, when T2 is T1's only reader, becomes one
  Transpose of x (one copy instead of two).
- A Transpose whose perm is the identity is x.

Graph outputs keep their names: when a removed Transpose wrote a graph
output, the node that produces x writes that name instead; when x cannot be
renamed (a graph input, a constant, another graph output) an Identity (a
zero-copy view) stands in for the Transpose.
"""
from __future__ import annotations

from ..ir import Graph, Node


def _perm(n: Node, g: Graph) -> list[int]:
    rank = len(g.tensors[n.inputs[0]].shape)
    perm = n.attr("perm")
    return list(range(rank - 1, -1, -1)) if perm is None else [int(p) for p in perm]


def _replace(g: Graph, n: Node, src: str) -> None:
    """Drop node n (one output, equal in value to tensor src); its readers
    read src instead, and its output name survives if it is a graph output."""
    out = n.outputs[0]
    if out not in g.outputs:
        g.nodes.remove(n)
        g.rename_uses(out, src)
        return
    producer = next((p for p in g.nodes if src in p.outputs), None)
    if producer is not None and src not in g.outputs and src not in g.inputs:
        # The producer of src writes `out` directly and src's other readers
        # follow. Order stays topological: every reader of src or out already
        # comes after that producer.
        g.nodes.remove(n)
        producer.outputs = [out if o == src else o for o in producer.outputs]
        g.rename_uses(src, out)
        return
    n.op_type, n.inputs, n.attrs = "Identity", [src], {}


def _step(g: Graph) -> bool:
    """One rewrite; False when there is nothing left to do."""
    producers = g.producers()
    consumers = g.consumers()
    for n in g.nodes:
        if n.op_type != "Transpose" or not n.inputs or not n.inputs[0]:
            continue
        src = n.inputs[0]
        if g.tensors[src].is_const:
            continue
        perm = _perm(n, g)
        if perm == list(range(len(perm))):
            _replace(g, n, src)
            return True
        p = producers.get(src)
        if p is None or p.op_type != "Transpose" or g.tensors[p.inputs[0]].is_const:
            continue
        p_perm = _perm(p, g)
        composed = [p_perm[i] for i in perm]  # out axis i = x axis p_perm[perm[i]]
        if composed == list(range(len(composed))):
            _replace(g, n, p.inputs[0])
            if not consumers.get(src, [])[1:] and src not in g.outputs:
                g.nodes.remove(p)
            return True
        if len(consumers.get(src, [])) == 1 and src not in g.outputs:
            n.inputs = [p.inputs[0]]
            n.attrs = dict(n.attrs, perm=composed)
            n.fused.append(f"Transpose '{p.name}'")
            g.nodes.remove(p)
            return True
    return False


def run(g: Graph) -> Graph:
    while _step(g):
        pass
    g.prune_tensors()
    return g
