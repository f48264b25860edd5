"""`--io int8`: expose the quantized tensors at the model's edges instead of
float ones. A float input read only by a per-tensor QuantizeLinear becomes
that integer tensor (the caller quantizes); a float output written by a
per-tensor DequantizeLinear becomes the integer tensor before it. Not part
of the default pipeline: the compiler runs it when asked."""
from __future__ import annotations

from ..errors import CuvilError
from ..ir import Graph, Tensor
from . import io_quant


def _scalar_params(g: Graph, n) -> bool:
    s = g.tensors.get(n.input(1))
    return s is not None and s.is_const and s.size == 1


def run(g: Graph) -> Graph:
    cons, prod = g.consumers(), g.producers()
    drop = set()
    for name in g.inputs:
        t = g.tensors[name]
        if t.dtype != "float32":
            continue
        users = cons.get(name, [])
        if not users or any(u.op_type != "QuantizeLinear" or not _scalar_params(g, u) for u in users) or \
                len(users) != 1:
            readers = ", ".join(sorted({f"{u.op_type} '{u.name}'" for u in users})) or "nothing"
            raise CuvilError(f"--io int8: input '{name}' is read in float by {readers}; "
                             f"it has no quantized form to expose")
        q = users[0]
        qt = g.tensors[q.outputs[0]]
        g.tensors[name] = Tensor(name, t.shape, qt.dtype, quant=io_quant._params(g, q, (1, 2)))
        g.rename_uses(q.outputs[0], name)
        drop.add(q.name)
    for i, name in enumerate(g.outputs):
        t = g.tensors[name]
        if t.dtype != "float32" or t.is_const:
            continue
        d = prod.get(name)
        if d is None or d.op_type != "DequantizeLinear" or not _scalar_params(g, d) or d.inputs[0] in g.inputs:
            what = f"{d.op_type} '{d.name}'" if d is not None else "no node"
            raise CuvilError(f"--io int8: output '{name}' is computed in float by {what}; "
                             f"it has no quantized form to expose")
        src = d.inputs[0]
        p = prod.get(src)
        if p is None:
            raise CuvilError(f"--io int8: output '{name}' dequantizes a constant")
        st = g.tensors[src]
        p.outputs = [name if o == src else o for o in p.outputs]
        g.tensors[name] = Tensor(name, st.shape, st.dtype, quant=io_quant._params(g, d, (1, 2)))
        for n in g.nodes:
            if n is not d:
                n.inputs = [name if x == src else x for x in n.inputs]
        drop.add(d.name)
    g.nodes = [n for n in g.nodes if n.name not in drop]
    g.prune_tensors()
    return io_quant.run(g)
