"""The tensors PyTorch's exporter writes around a batch_first recurrent layer.

nn.LSTM / nn.GRU / nn.RNN(batch_first=True) export as
    x [B, T, I] -> Transpose(1, 0, 2) -> LSTM (layout 0) -> Y [T, 1, B, H]
      -> Squeeze(1) -> Transpose(1, 0, 2) -> [B, T, H]
and `y[:, -1]` (the usual classifier input) adds Gather(-1, axis 1). Both
transposes are copies of the whole sequence, and Y itself (T * H values)
is only read at its last step. For a one-direction layer whose Y_h / Y_c
nobody reads and whose initial states are absent or constant:
- the layer runs in layout 1 on x itself (the kernels address either
  layout through strides), and [B, T, H] is a view of Y;
- when only the last step of a forward layer without sequence lengths is
  read, that step is Y_h: the layer writes Y_h and no Y at all.
The float keyword models of tests/rnn_models go from a 25 KB arena to
4 KB (T = 49, H = 64), their int8 forms from 6.3 KB to 1.4 KB.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Tensor
from ..ops import rnn

OPS = ("LSTM", "GRU", "RNN")


def _const(g: Graph, name: str):
    t = g.tensors.get(name) if name else None
    return t.data if t is not None and t.is_const else None


def _only_user(g: Graph, cons, name: str, op: str) -> Node | None:
    users = cons.get(name, [])
    if len(users) != 1 or users[0].op_type != op or name in g.outputs:
        return None
    return users[0]


def _perm(n: Node) -> list[int]:
    return [int(p) for p in (n.attr("perm") or [])]


def _squeeze_axes(g: Graph, n: Node) -> list[int] | None:
    axes = n.attr("axes")
    if axes is None and n.input(1):
        axes = _const(g, n.input(1))
    return None if axes is None else sorted(int(a) for a in np.asarray(axes).reshape(-1))


def _unused(g: Graph, cons, name: str) -> bool:
    return not name or (not cons.get(name) and name not in g.outputs)


def _reshape(g: Graph, src: str, dst: str, shape, base: str) -> Node:
    s = g.add_const(f"{base}_shape", np.asarray(shape, np.int64))
    return Node(g.fresh_node_name(base), "Reshape", [src, s], [dst], {}, opset=g.opset)


def run(g: Graph) -> Graph:
    for n in [n for n in g.nodes if n.op_type in OPS]:
        prod, cons = g.producers(), g.consumers()
        ins = [g.tensors[i] if i else None for i in n.inputs]
        try:
            s = rnn.spec(n, ins)
        except Exception:
            continue
        if s.layout != 0 or s.D != 1 or ins[rnn.IX].dtype != "float32":
            continue
        tp = prod.get(n.inputs[0])
        if tp is None or tp.op_type != "Transpose" or _perm(tp) != [1, 0, 2] or \
                len(cons.get(n.inputs[0], [])) != 1:
            continue
        y = n.outputs[0] if n.outputs else ""
        sq = _only_user(g, cons, y, "Squeeze") if y else None
        if sq is None or _squeeze_axes(g, sq) not in ([1], [-3]):
            continue
        tq = _only_user(g, cons, sq.outputs[0], "Transpose")
        if tq is None or _perm(tq) != [1, 0, 2]:
            continue
        if not all(_unused(g, cons, o) for o in n.outputs[1:]):
            continue
        states = [i for i in (rnn.IH0, rnn.IC0) if len(ins) > i and ins[i] is not None]
        if any(not ins[i].is_const for i in states):
            continue
        # layout 1 on x itself; [B, T, H] is a view of Y
        B, T, H = s.B, s.T, s.H
        n.inputs[0] = tp.inputs[0]
        n.attrs["layout"] = 1
        for i in states:
            n.inputs[i] = g.add_const(f"{n.inputs[i]}_batch_first",
                                      np.ascontiguousarray(np.swapaxes(ins[i].data, 0, 1)))
        for o in n.outputs[1:]:
            if o:
                del g.tensors[o]
        n.outputs = [y]
        g.tensors[y] = Tensor(y, (B, T, 1, H), "float32")
        out = tq.outputs[0]
        new = [_reshape(g, y, out, (B, T, H), f"{n.name}_batch_first")]
        gather = _only_user(g, cons, out, "Gather")
        idx = _const(g, gather.input(1)) if gather is not None else None
        if gather is not None and int(gather.attr("axis", 0)) in (1, -2) and idx is not None and \
                np.asarray(idx).ndim == 0 and int(idx) in (-1, T - 1) and s.direction == "forward" and \
                s.lens is None:
            # only the last step is read: that is Y_h
            yh = g.fresh_name(f"{n.name}_Y_h")
            g.tensors[yh] = Tensor(yh, (B, 1, H), "float32")
            del g.tensors[y]
            n.outputs = ["", yh]
            new = [_reshape(g, yh, gather.outputs[0], (B, H), f"{n.name}_last_step")]
            drop = {sq.name, tq.name, gather.name}
        else:
            drop = {sq.name, tq.name}
        nodes = []
        for m in g.nodes:
            if m.name in drop:
                continue
            nodes.append(m)
            if m is n:
                nodes += new
        g.nodes = nodes
        g.prune_tensors()
    return g
