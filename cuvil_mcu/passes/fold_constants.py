"""Evaluate every node whose inputs are all constant, with its numpy
reference, and drop it: its outputs become constants in flash. A node whose
result or cost is above the folding cap (limits.fold_refusal) stays a
run-time kernel, as the loader left it."""
from __future__ import annotations

import numpy as np

from .. import limits, ops
from ..ir import Graph


def run(g: Graph) -> Graph:
    keep = []
    for n in g.nodes:
        op = ops.get(n.op_type)
        ins = [g.tensors[i] if i else None for i in n.inputs]
        outs = [g.tensors[o] for o in n.outputs if o]
        if not all(t.is_const for t in outs):
            if (op.shape_only or all(t is None or t.is_const for t in ins)) \
                    and limits.fold_refusal(op, n, ins, outs) is None:
                values = ops.evaluate(op, n, ins, outs)
                for t, v in zip([o for o in n.outputs], values):
                    if t:
                        g.tensors[t].data = np.asarray(np.asarray(v).astype(g.tensors[t].dtype), order="C")
            else:
                keep.append(n)
                continue
        # all outputs constant: the node is not needed at run time
    g.nodes = keep
    g.prune_tensors()
    return g
