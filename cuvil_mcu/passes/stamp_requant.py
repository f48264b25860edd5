"""Integer ops read their requantization mode from node.attrs["_requant"]
(the reference interpreter sees nodes, not the graph); stamp the graph's mode
on every node that does not carry one already."""
from __future__ import annotations

from ..ir import Graph


def run(g: Graph) -> Graph:
    for n in g.nodes:
        n.attrs.setdefault("_requant", g.requant)
    return g
