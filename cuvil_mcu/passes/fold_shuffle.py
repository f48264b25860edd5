"""Channel shuffles (and any other fixed permutation of one axis) folded at
compile time, so no run-time Transpose remains.

ShuffleNet writes its channel shuffle as Reshape [N, g, C/g, H, W] ->
Transpose perm [0, 2, 1, 3, 4] -> Reshape [N, C, H, W] (NHWC exporters:
Reshape [N, H, W, g, C/g] -> Transpose [0, 1, 2, 4, 3] -> Reshape back; an
int8 QDQ model has the same chain on int8 tensors once passes/qdq.py has
dropped the DequantizeLinear/QuantizeLinear pairs around it). Whatever the
factors, such a Reshape -> Transpose -> Reshape chain whose result is its
input with the entries of one axis permuted (checked on an index tensor)
is that permutation: y[.., j, ..] = x[.., p[j], ..]. It becomes a Gather
with constant indices p, then, in this order of preference:

1. folded into the convolution that produces x (Conv, QLinearConv,
   ConvInteger, p along its channel axis, x read by nothing else): with one
   group its output channels are reordered (weights, bias, per-channel
   weight scales and zero points); with several groups (not depthwise) its
   channels move between groups, which no weight order expresses, so the
   node gets `_ochan`: output channel m is stored at channel position
   _ochan[m] (ops/conv.py out_channels; every conv kernel stores through
   it, and the numpy references place channels the same way);
2. folded into the convolutions that read y (all of them with one group, p
   along their input channel axis): their weights' input channels are
   permuted (W[:, c] <- W[:, p^-1[c]]);
3. else the Gather stays: one copy, and the layout pass moves the NCHW /
   NHWC transposes around it so that it is the only one.

A Gather between a Transpose and its inverse (the shuffle written in the
other layout) becomes one Gather on the corresponding axis first. The pass
runs before the layout pass (NCHW graphs) and again after it (NHWC chains,
and Gathers the layout pass moved next to a convolution).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ops.conv import out_channels
from . import dead_nodes

CONVS = {"Conv": (1, 2, None, None), "QLinearConv": (3, 8, 4, 5), "ConvInteger": (1, None, None, 3)}
MAX_ELEMENTS = 1 << 24   # tensors up to this size are checked through an index tensor


def _channels_last(n: Node) -> bool:
    return bool(int(n.attrs.get("_channels_last", n.attrs.get("channels_last", 0))))


def axis_permutation(shape, s1, perm, s2) -> tuple[int, np.ndarray] | None:
    """(axis, p) when reshape(transpose(reshape(x, s1), perm), s2) of a tensor x
    of `shape` is x with the entries of one axis permuted (y[.., j, ..] =
    x[.., p[j], ..], p not the identity); else None."""
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape, dtype=np.int64))
    if tuple(s2) != shape or int(np.prod(s1, dtype=np.int64)) != n or not 0 < n <= MAX_ELEMENTS:
        return None
    idx = np.arange(n, dtype=np.int32 if n < 2 ** 31 else np.int64).reshape(shape)
    y = idx.reshape(s1).transpose(perm).reshape(shape)
    strides = [int(np.prod(shape[a + 1:], dtype=np.int64)) for a in range(len(shape))]
    for a, d in enumerate(shape):
        if d < 2:
            continue
        line = y[tuple(slice(None) if i == a else 0 for i in range(len(shape)))].astype(np.int64)
        if np.any(line % strides[a]):
            continue
        p = line // strides[a]
        if np.array_equal(p, np.arange(d)) or not np.array_equal(np.sort(p), np.arange(d)):
            continue
        if np.array_equal(np.take(idx, p, axis=a), y):
            return a, p
    return None


def _shape_of(g: Graph, n: Node) -> tuple[int, ...]:
    return tuple(g.tensors[n.outputs[0]].shape)


def _chains_to_gathers(g: Graph) -> bool:
    prod, cons = g.producers(), g.consumers()
    changed = False
    for t in list(g.nodes):
        if t.op_type != "Transpose" or t not in g.nodes:
            continue
        r1 = prod.get(t.inputs[0])
        users = cons.get(t.outputs[0], [])
        if r1 is None or r1.op_type != "Reshape" or len(users) != 1 or users[0].op_type != "Reshape":
            continue
        r2 = users[0]
        mid = [r1.outputs[0], t.outputs[0]]
        if any(m in g.outputs or len(cons.get(m, [])) != 1 for m in mid):
            continue
        x = g.tensors[r1.inputs[0]]
        if x.is_const:
            continue
        s1 = _shape_of(g, r1)
        perm = t.attr("perm") or list(range(len(s1)))[::-1]
        found = axis_permutation(x.shape, s1, [int(v) for v in perm], _shape_of(g, r2))
        if found is None:
            continue
        axis, p = found
        idx = g.add_const(f"{r2.name}_perm", p.astype(np.int64))
        gather = Node(g.fresh_node_name(f"{t.name}_gather"), "Gather", [x.name, idx], [r2.outputs[0]],
                      {"axis": axis}, opset=t.opset)
        gather.fused += [f"Reshape '{r1.name}'", f"Transpose '{t.name}'", f"Reshape '{r2.name}'"]
        at = g.nodes.index(r2)
        g.nodes[at] = gather
        g.nodes.remove(t)
        g.nodes.remove(r1)
        changed = True
    if changed:
        g.prune_tensors()
    return changed


def _permutation(g: Graph, n: Node) -> tuple[int, np.ndarray] | None:
    """(axis, p) of a Gather that permutes one axis of its input."""
    if n.op_type != "Gather" or len(n.inputs) < 2:
        return None
    x, i = g.tensors[n.inputs[0]], g.tensors[n.inputs[1]]
    if not i.is_const or x.is_const or len(i.shape) != 1:
        return None
    rank = len(x.shape)
    axis = int(n.attr("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return None
    p = np.asarray(i.data, np.int64)
    p = np.where(p < 0, p + x.shape[axis], p)
    if p.size != x.shape[axis] or not np.array_equal(np.sort(p), np.arange(p.size)):
        return None
    return axis, p


def _geometry(g: Graph, n: Node):
    from ..ops.conv import conv_geometry
    w = g.tensors[n.inputs[CONVS[n.op_type][0]]]
    x = g.tensors[n.inputs[0]]
    shape = x.shape
    if _channels_last(n):
        shape = (shape[0], shape[-1]) + tuple(shape[1:-1])
    return conv_geometry(n, shape, w.shape)


def _channel_axis(g: Graph, n: Node) -> int:
    return len(g.tensors[n.outputs[0]].shape) - 1 if _channels_last(n) else 1


def _const(g: Graph, name: str) -> np.ndarray | None:
    t = g.tensors.get(name) if name else None
    return t.data if t is not None and t.is_const else None


def _set(g: Graph, n: Node, i: int, data: np.ndarray, what: str) -> None:
    n.inputs[i] = g.add_const(f"{n.name}_{what}", np.ascontiguousarray(data))


def _reorder_outputs(g: Graph, n: Node, order: np.ndarray) -> None:
    """Output channel j of n becomes its old channel order[j]."""
    wi, bi, si, zi = CONVS[n.op_type]
    _set(g, n, wi, _const(g, n.inputs[wi])[order], "w_shuffled")
    for i, what in ((bi, "b_shuffled"), (si, "ws_shuffled"), (zi, "wz_shuffled")):
        v = _const(g, n.input(i)) if i is not None else None
        if v is not None and v.ndim == 1 and v.size == order.size:
            _set(g, n, i, v[order], what)


def _into_producer(g: Graph, gather: Node, axis: int, p: np.ndarray) -> bool:
    x = gather.inputs[0]
    prod = g.producers().get(x)
    if prod is None or prod.op_type not in CONVS or prod.outputs[0] != x or x in g.outputs:
        return False
    if len(g.consumers().get(x, [])) != 1 or axis != _channel_axis(g, prod):
        return False
    wi = CONVS[prod.op_type][0]
    if _const(g, prod.inputs[wi]) is None or any(
            prod.input(i) and _const(g, prod.input(i)) is None for i in CONVS[prod.op_type][1:] if i is not None):
        return False
    geo = _geometry(g, prod)
    pos0 = out_channels(prod, geo.m)
    pos = np.argsort(p)[pos0 if pos0 is not None else np.arange(geo.m)]   # kernel channel m -> final position
    blocks = pos // geo.mg == np.arange(geo.m) // geo.mg
    if geo.group == 1 or np.all(blocks):
        # within each group: reorder the weights (output j of a group <- its channel order[j])
        _reorder_outputs(g, prod, np.argsort(pos))
        prod.attrs.pop("_ochan", None)
    elif geo.cg > 1:
        prod.attrs["_ochan"] = [int(v) for v in pos]
    else:
        return False
    y = gather.outputs[0]
    ty, tx = g.tensors[y], g.tensors[x]
    if ty.quant is None and tx.quant is not None:
        ty.quant = tx.quant
    prod.outputs[0] = y
    prod.fused += gather.fused or [f"Gather '{gather.name}'"]
    g.nodes.remove(gather)
    return True


def _into_consumers(g: Graph, gather: Node, axis: int, p: np.ndarray) -> bool:
    y = gather.outputs[0]
    users = g.consumers().get(y, [])
    if not users or y in g.outputs:
        return False
    for u in users:
        if u.op_type not in CONVS or u.inputs[0] != y or y in u.inputs[1:] or axis != _channel_axis(g, u):
            return False
        if _const(g, u.inputs[CONVS[u.op_type][0]]) is None or _geometry(g, u).group != 1:
            return False
    inv = np.argsort(p)
    for u in users:
        wi = CONVS[u.op_type][0]
        _set(g, u, wi, _const(g, u.inputs[wi])[:, inv], "w_unshuffled")
        u.inputs[0] = gather.inputs[0]
        u.fused += gather.fused or [f"Gather '{gather.name}'"]
    g.nodes.remove(gather)
    return True


def _between_transposes(g: Graph, gather: Node, axis: int, p: np.ndarray) -> tuple[int, np.ndarray]:
    """Transpose(perm) -> Gather -> Transpose(perm^-1) (a shuffle written in
    the other layout, e.g. NHWC inside an NCHW model) is one Gather of the
    first Transpose's input, on axis perm[axis]."""
    prod, cons = g.producers(), g.consumers()
    t1 = prod.get(gather.inputs[0])
    users = cons.get(gather.outputs[0], [])
    if t1 is None or t1.op_type != "Transpose" or len(users) != 1 or users[0].op_type != "Transpose":
        return axis, p
    t2 = users[0]
    rank = len(g.tensors[gather.inputs[0]].shape)
    p1 = [int(v) for v in (t1.attr("perm") or list(range(rank))[::-1])]
    p2 = [int(v) for v in (t2.attr("perm") or list(range(rank))[::-1])]
    if [p1[i] for i in p2] != list(range(rank)) or len(cons.get(t1.outputs[0], [])) != 1 \
            or g.tensors[t1.inputs[0]].is_const or gather.outputs[0] in g.outputs or t1.outputs[0] in g.outputs:
        return axis, p
    gather.inputs[0] = t1.inputs[0]
    gather.attrs["axis"] = axis = p1[axis]
    gather.outputs[0] = t2.outputs[0]
    gather.fused += [f"Transpose '{t1.name}'", f"Transpose '{t2.name}'"]
    at = [i for i, n in enumerate(g.nodes) if n is t2][0]
    g.nodes[at] = gather      # (t2's place: its input is produced before it)
    g.nodes = [n for i, n in enumerate(g.nodes) if n is not t1 and not (n is gather and i != at)]
    return axis, p


def run(g: Graph) -> Graph:
    changed = _chains_to_gathers(g)
    for n in list(g.nodes):
        found = _permutation(g, n)
        if found is None:
            continue
        found = _between_transposes(g, n, *found)
        if _into_producer(g, n, *found) or _into_consumers(g, n, *found):
            changed = True
    if changed:
        dead_nodes.run(g)
        g.prune_tensors()
    return g
