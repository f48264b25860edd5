"""Integer ops read their requantization mode from node.attrs["_requant"]
and the rounding conventions of "fixed" mode from node.attrs["_rounding"]
(the reference interpreter sees nodes, not the graph); stamp the graph's
on every node that does not carry its own already."""
from __future__ import annotations

from ..ir import Graph


# the integer ops whose "fixed" results depend on _rounding
ROUNDING_OPS = ("com.microsoft.QLinearAveragePool", "com.microsoft.QLinearGlobalAveragePool",
                "com.microsoft.QLinearConcat")
ROUNDING_NOTE = (" round as a literal QDQ graph does (ties to even, one rounding), not as TFLM (--rounding "
                 "auto picks this for a model tf2onnx did not write; --rounding tflm for TFLM's rules)")


def run(g: Graph) -> Graph:
    for n in g.nodes:
        n.attrs.setdefault("_requant", g.requant)
        n.attrs.setdefault("_rounding", g.rounding)
    hit = sum(n.op_type in ROUNDING_OPS and n.attrs["_requant"] == "fixed" and n.attrs["_rounding"] == "onnx"
              for n in g.nodes)
    g.notes[:] = [x for x in g.notes if not x.endswith(ROUNDING_NOTE)]   # this pass runs more than once
    if hit:
        g.notes.append(f"{hit} average pool / Concat node(s){ROUNDING_NOTE}")
    return g
