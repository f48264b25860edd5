"""The numpy reference interpreter over the IR: the oracle the generated C is
checked against (bit-exact on integer paths, per-op tolerance on float)."""
from __future__ import annotations

import numpy as np

from . import ops
from .ir import Graph


def run(g: Graph, feeds: dict[str, np.ndarray], all_tensors: bool = False) -> dict[str, np.ndarray]:
    """One inference: feeds by input name (exact shape and dtype). all_tensors:
    return every tensor's value (validate's per-layer comparison), not only the outputs."""
    values: dict[str, np.ndarray] = {}
    for name, t in g.tensors.items():
        if t.is_const:
            values[name] = t.data
    for name in g.inputs:
        x = np.asarray(feeds[name])
        t = g.tensors[name]
        if x.shape != t.shape or x.dtype.name != t.dtype:
            raise ValueError(f"input '{name}': got {x.dtype}{list(x.shape)}, expected {t.dtype}{list(t.shape)}")
        values[name] = x
    for n in g.nodes:
        op = ops.get(n.op_type)
        ins = [g.tensors[i] if i else None for i in n.inputs]
        arrays = [values[i] if i else None for i in n.inputs]
        with np.errstate(all="ignore"):
            outs = op.reference(n, ins, *arrays)
        for name, v in zip(n.outputs, outs):
            if name:
                t = g.tensors[name]
                values[name] = np.asarray(v).astype(t.dtype, copy=False).reshape(t.shape)
    return values if all_tensors else {o: values[o] for o in g.outputs}
