"""Drop nodes no graph output depends on, and tensors nothing refers to."""
from __future__ import annotations

from ..ir import Graph


def run(g: Graph) -> Graph:
    needed = set(g.outputs)
    keep = []
    for n in reversed(g.nodes):
        if any(o in needed for o in n.outputs if o):
            keep.append(n)
            needed.update(i for i in n.inputs if i)
    g.nodes = keep[::-1]
    g.prune_tensors()
    return g
