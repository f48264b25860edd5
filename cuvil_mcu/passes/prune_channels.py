"""Drop the channels of integer convolutions that cannot change the output.

Trained ReLU networks carry dead channels: an output channel whose weights
quantized to all zeros (its value is requant(bias) at every pixel, a
constant), and input channels that no weight of the next layer reads. The
MLPerf Tiny VWW MobileNet has 109 such channels of 128 in some layers. This
pass removes them exactly, in the integer domain, so the kernels, the memory
plan and the weights all shrink and the outputs stay bit-identical:

- constant channels (forward): output channel m of a QLinearConv is constant
  when every input channel its weights read is constant (no input at all: a
  zero row). Its value is computed with the op's own integer arithmetic
  (ops/qconv.py conv_int and Requant.apply) over the whole output plane, so
  padding is accounted for: a depthwise layer over a constant channel whose
  value is not the input zero point gives other values on the border, and
  such a channel is not constant.
- a channel c of a tensor can be removed when its producer can drop it (an
  output row of a group-1 QLinearConv, or a channel of a depthwise one whose
  input channel c is removed with it) and every consumer can do without it:
  a group-1 QLinearConv whose weights never read it (a zero column), or reads
  it while it is constant and adds the same to every output pixel (the value
  is the input zero point, or the layer has no padding): that sum,
  (v - x_zp) * sum of the column's taps, goes into the bias. A depthwise
  consumer drops the same channel of its output, which must be removable in
  turn. Anything else (graph outputs, pools, Add, Concat, shuffled stores)
  keeps the channel.

Tensors linked by depthwise layers share their channel numbering, so they are
decided together ("components"). The pass runs until nothing changes (a row
whose last live input was a removed constant becomes constant itself).
"""
from __future__ import annotations

import numpy as np

from .. import ops
from ..ir import Graph, Node

QCONV = ("QLinearConv", "com.microsoft.QLinearConv")
# channel counts kept a multiple of this where they were one (the DSP depthwise kernels need C % 4 == 0;
# VWW with 8: 5,163,543 est. M4 cycles against 5,040,686 with 4)
ALIGN = 4


def _ins(g: Graph, n: Node):
    return [g.tensors[i] if i else None for i in n.inputs]


def _plain(g: Graph, n: Node) -> bool:
    """A QLinearConv this pass may rewrite: NHWC int8/uint8 activations,
    constant weights and bias, natural channel order."""
    if n.op_type not in QCONV or n.attr("_ochan") is not None or int(n.attr("_channels_last", 0)) != 1:
        return False
    ins = _ins(g, n)
    if len(ins) < 8 or ins[0] is None or ins[3] is None or not ins[3].is_const or ins[0].is_const:
        return False
    if len(ins) > 8 and ins[8] is not None and not ins[8].is_const:
        return False
    return len(ins[0].shape) == 4 and len(g.tensors[n.outputs[0]].shape) == 4


class _Conv:
    """What the pass needs of one plain QLinearConv."""

    def __init__(self, g: Graph, n: Node):
        self.node = n
        self.ins = _ins(g, n)
        self.p = ops.get(n.op_type)._params(n, self.ins)
        geo = self.p.geo
        self.m, self.c = geo.m, geo.c
        w = np.asarray(self.ins[3].data, np.int64)
        self.wq = w - self.p.w_zp.reshape((-1,) + (1,) * (w.ndim - 1))      # [M, C/g, kh, kw]
        self.dw = geo.cg == 1 and geo.group == geo.c == geo.m
        self.dense = geo.group == 1
        self.padded = any(geo.pad_begin) or any(geo.pad_end)

    def constants(self, cin: dict[int, int]) -> dict[int, int]:
        """Output channels constant over the whole output, given the input's
        constant channels {c: value}, with their values."""
        if not (self.dense or self.dw):
            return {}
        if self.dense:
            reads = self.wq.reshape(self.m, self.c, -1).any(axis=2)       # [M, C]
            live = np.array([c not in cin for c in range(self.c)])
            cand = [m for m in range(self.m) if not (reads[m] & live).any()]
        else:
            nz = self.wq.reshape(self.m, -1).any(axis=1)
            cand = [m for m in range(self.m) if not nz[m] or m in cin]
        if not cand:
            return {}
        # acc(p) = bias + sum over the constant inputs c and the taps (i, j) inside the input at p of
        # w[m, c, i, j] (v_c - x_zp): per tap, the constant part of the weights times an in-bounds mask
        off = np.zeros(self.c, np.int64)
        for c, v in cin.items():
            off[c] = v - self.p.x_zp
        if self.dense:
            weff = np.einsum("mcij,c->mij", self.wq[cand], off)
        else:
            weff = self.wq[cand, 0] * off[cand].reshape(-1, 1, 1)
        acc = np.einsum("mij,ijhw->mhw", weff, _inside(self.p.geo))[None]
        if self.p.bias is not None:
            acc = acc + self.p.bias[cand].reshape(1, -1, 1, 1)
        rq = self.p.rq
        sub = type(rq)(rq.mode, rq.dtype, rq.zp, rq.lo, rq.hi,
                       None if rq.mult is None else _pick(rq.mult, cand),
                       None if rq.shift is None else _pick(rq.shift, cand),
                       None if rq.scale is None else _pick(rq.scale, cand))
        y = sub.apply(acc, (1, -1, 1, 1))
        out = {}
        for i, m in enumerate(cand):
            plane = y[0, i]
            if plane.size and np.all(plane == plane.flat[0]):
                out[m] = int(plane.flat[0])
        return out


def _inside(geo) -> np.ndarray:
    """[kh, kw, oh, ow]: 1 where tap (i, j) of output position (y, x) lies
    inside the input (ops/conv.py conv_nchw's windows over a padded plane of ones)."""
    (pt, pl), (pb, pr) = geo.pad_begin, geo.pad_end
    ones = np.pad(np.ones(geo.hw, np.int64), [(pt, pb), (pl, pr)])
    (oh, ow), (sh, sw), (dh, dw) = geo.out_hw, geo.strides, geo.dilations
    return np.array([[ones[i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                      for j in range(geo.k[1])] for i in range(geo.k[0])])


def _pick(v: np.ndarray, idx) -> np.ndarray:
    v = np.asarray(v)
    return v if v.size == 1 else v.reshape(-1)[idx]


def run(g: Graph) -> Graph:
    for _ in range(16):
        if not _once(g):
            break
    return g


def _once(g: Graph) -> bool:
    prods = g.producers()
    users = g.consumers()
    convs = {n.name: _Conv(g, n) for n in g.nodes if _plain(g, n)}
    # forward: constant channels of every plain conv's output
    const: dict[str, dict[int, int]] = {}
    for n in g.nodes:
        cv = convs.get(n.name)
        if cv is None:
            continue
        const[n.outputs[0]] = cv.constants(const.get(n.inputs[0], {}))
    # components: tensors linked by depthwise layers
    fixed = set(g.inputs) | set(g.outputs) | {s[0] for s in g.state} | {s[1] for s in g.state}
    parent: dict[str, str] = {}

    def find(t):
        while parent.get(t, t) != t:
            t = parent[t]
        return t
    for cv in convs.values():
        if cv.dw:
            a, b = find(cv.node.inputs[0]), find(cv.node.outputs[0])
            if a != b:
                parent[b] = a
    comps: dict[str, list[str]] = {}
    for cv in convs.values():
        for t in (cv.node.inputs[0], cv.node.outputs[0]):
            comps.setdefault(find(t), [])
            if t not in comps[find(t)]:
                comps[find(t)].append(t)
    keep_out: dict[str, np.ndarray] = {}      # conv name -> output channels kept
    keep_in: dict[str, tuple] = {}            # group-1 conv name -> (input channels kept, constants)
    changed = False
    for tensors in comps.values():
        drop = _removable(g, tensors, convs, prods, users, const, fixed)
        if not drop:
            continue
        changed = True
        keep = np.array([c for c in range(g.tensors[tensors[0]].shape[-1]) if c not in set(drop)])
        members = set(tensors)
        for t in tensors:
            keep_out[prods[t].name] = keep
            tt = g.tensors[t]
            c0, kept = g.channels_kept.get(t, (tt.shape[-1], list(range(tt.shape[-1]))))
            g.channels_kept[t] = (c0, [kept[i] for i in keep])
            tt.shape = tt.shape[:-1] + (len(keep),)
            for u in users.get(t, []):
                if convs[u.name].dense and u.outputs[0] not in members:
                    keep_in[u.name] = (keep, const.get(t, {}))
    for name in set(keep_out) | set(keep_in):
        _rewrite(g, convs[name], keep_out.get(name), keep_in.get(name))
    if changed:
        g.prune_tensors()
        g.channels_kept = {t: v for t, v in g.channels_kept.items() if t in g.tensors}
    return changed


def _removable(g, tensors, convs, prods, users, const, fixed) -> list[int]:
    """The channels every tensor of the component can do without."""
    members = set(tensors)
    ch = {g.tensors[t].shape[-1] for t in tensors}
    if len(ch) != 1 or any(t in fixed for t in tensors):
        return []
    nc = ch.pop()
    ok = np.ones(nc, bool)
    for t in tensors:
        p = prods.get(t)
        cv = convs.get(p.name) if p is not None else None
        if cv is None or not (cv.dense or (cv.dw and cv.node.inputs[0] in members)):
            return []
        for u in users.get(t, []):
            cu = convs.get(u.name)
            if cu is None or u.inputs[0] != t or any(i == t for i in u.inputs[1:]):
                return []
            if cu.dw:
                if cu.node.outputs[0] not in members:
                    return []
                continue
            if not cu.dense:
                return []
            reads = cu.wq.reshape(cu.m, cu.c, -1).any(axis=(0, 2))
            cst = const.get(t, {})
            for c in range(nc):
                if not reads[c]:
                    continue
                v = cst.get(c)
                if v is None or (v != cu.p.x_zp and cu.padded):
                    ok[c] = False
    drop = [int(c) for c in np.flatnonzero(ok)]
    # the kernels run channels in groups of ALIGN (the DSP depthwise kernels need C % 4 == 0):
    # keep enough of the removable channels (the first ones) to stay a multiple of it
    extra = (-(nc - len(drop))) % ALIGN if nc % ALIGN == 0 else 0
    extra = max(extra, 1 if len(drop) == nc else 0)   # no layer of zero width
    return drop[extra:]


def _new(g: Graph, n: Node, i: int, data: np.ndarray, dtype: str) -> None:
    base = g.tensors[n.inputs[i]].name if i < len(n.inputs) and n.inputs[i] else n.name + "_bias"
    n.inputs += [""] * (i + 1 - len(n.inputs))
    n.inputs[i] = g.add_const(base + "_pruned", np.ascontiguousarray(data).astype(dtype))


def _rewrite(g: Graph, cv: _Conv, rows, cols) -> None:
    """Keep output channels `rows` (None: all) and, of a group-1 conv, input
    channels cols[0] (cols None: all); the dropped input channels its
    weights read are the constants cols[1]: their share of every output goes
    into the bias. A depthwise conv keeps the same input channels as
    output channels (its group shrinks with them)."""
    n = cv.node
    rows = np.arange(cv.m) if rows is None else rows
    w = np.asarray(g.tensors[n.inputs[3]].data)
    bias = cv.p.bias.copy() if cv.p.bias is not None else np.zeros(cv.m, np.int64)
    if cols is not None:
        keep, cst = cols
        kept = set(keep.tolist())
        for c in range(cv.c):
            col = cv.wq[:, c].reshape(cv.m, -1).sum(axis=1)
            if c not in kept and col.any():
                bias += (cst[c] - cv.p.x_zp) * col
        w = w[:, keep]
    _new(g, n, 3, w[rows], g.tensors[n.inputs[3]].dtype)
    for i in (4, 5):
        t = g.tensors[n.inputs[i]] if i < len(n.inputs) and n.inputs[i] else None
        if t is not None and t.data is not None and np.asarray(t.data).size > 1:
            _new(g, n, i, np.asarray(t.data).reshape(-1)[rows], t.dtype)
    bias = bias[rows]
    if np.any(np.abs(bias) > 2**31 - 1):
        raise AssertionError(f"{n.name}: folded bias leaves int32")
    if cv.p.bias is not None or bias.any():
        _new(g, n, 8, bias, "int32")
    if cv.dw:
        n.attrs["group"] = len(rows)
