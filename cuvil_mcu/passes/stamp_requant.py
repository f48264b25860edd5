"""Integer ops read their requantization mode from node.attrs["_requant"]
and the rounding conventions of "fixed" mode from node.attrs["_rounding"]
(the reference interpreter sees nodes, not the graph); stamp the graph's
on every node that does not carry its own already."""
from __future__ import annotations

from ..ir import Graph


def run(g: Graph) -> Graph:
    for n in g.nodes:
        n.attrs.setdefault("_requant", g.requant)
        n.attrs.setdefault("_rounding", g.rounding)
    return g
