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
  (the taps inside the input at each output position, Requant.apply) over
  the whole output plane, so padding is accounted for: a depthwise layer
  over a constant channel whose value is not the input zero point gives
  other values on the border, and such a channel is not constant. A pool's constant channels come from the
  pool's own reference over a plane of that constant.
- a channel c of a tensor can be removed when its producer can drop it (an
  output row of a group-1 QLinearConv, or a channel of a channel-wise node
  whose input channel c goes with it) and every consumer can do without it:
  a group-1 QLinearConv (or a QGemm reading it as A's row) whose weights
  never read it (a zero column), or reads it while it is constant and adds
  the same to every output pixel (the value is the input zero point, or the
  layer has no padding; always for QGemm): that sum, (v - x_zp) * the
  column's taps, goes into the bias. Channel-wise nodes (depthwise
  QLinearConv, the integer average and max pools, a Reshape of a tensor
  whose only non-1 dimension is the channels: a classifier's pool ->
  flatten) drop the same channel of their output, which must be removable
  in turn. Anything else (graph outputs, Add, Concat, shuffled stores)
  keeps the channel.

Tensors linked by channel-wise nodes share their channel numbering, so they
are decided together ("components"). The pass runs until nothing changes (a
row whose last live input was a removed constant becomes constant itself).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import ops
from ..ir import Graph, Node
from ..ops.qgemm import check_acc

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
        sub = dataclasses.replace(rq, **{k: _pick(getattr(rq, k), cand) for k in ("mult", "shift", "scale")
                                         if getattr(rq, k) is not None})
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


POOLS = ("com.microsoft.QLinearAveragePool", "com.microsoft.QLinearGlobalAveragePool", "cuvil.QMaxPool")


def _axis(t) -> int:
    """The channel axis of an NHWC tensor, or of one whose only non-1
    dimension is the channels (a pooled classifier's [1, C] or [1, C, 1, 1])."""
    big = [i for i, d in enumerate(t.shape) if d != 1]
    return big[0] if len(big) == 1 else len(t.shape) - 1


def _chanwise(g: Graph, n: Node, convs) -> bool:
    """Output channel c depends on input channel c alone (and maps to it)."""
    if n.name in convs:
        return convs[n.name].dw
    if n.op_type not in POOLS and n.op_type != "Reshape":
        return False
    if not n.inputs or not n.outputs or not n.inputs[0] or not n.outputs[0] or g.tensors[n.inputs[0]].is_const:
        return False
    x, y = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    if n.op_type in POOLS:
        return (int(n.attr("_channels_last", n.attr("channels_last", 0))) == 1 and len(x.shape) == 4
                and len(y.shape) == 4 and x.shape[-1] == y.shape[-1] and n.act is None)
    if n.op_type == "Reshape":
        one = [d for d in x.shape if d != 1]
        return len(one) == 1 and [d for d in y.shape if d != 1] == one
    return False


class _Gemm:
    """A QGemm reading a component's tensor as its A ([1, K], not transposed) with constant B."""

    def __init__(self, g: Graph, n: Node):
        self.node = n
        self.ins = _ins(g, n)
        self.p = ops.get(n.op_type)._params(n, self.ins)
        b = np.asarray(self.ins[3].data, np.int64)
        b = b.T if self.p.tb else b                                   # [K, N]
        self.bq = b - self.p.b_zp[None, :]


def _gemm(g: Graph, n: Node):
    t = n.inputs[0] if n.inputs else ""
    if n.op_type != "com.microsoft.QGemm" or not t or t in n.inputs[1:]:
        return None
    ins = _ins(g, n)
    if ins[3] is None or not ins[3].is_const or (len(ins) > 6 and ins[6] is not None and not ins[6].is_const):
        return None
    gm = _Gemm(g, n)
    return gm if gm.p.m == 1 and not gm.p.ta else None


def _pool_constants(g: Graph, n: Node, cin: dict[int, int]) -> dict[int, int]:
    """The pool's output channels that are constant when input channels cin
    are, by the pool's own reference over planes of those values."""
    if not cin:
        return {}
    x = g.tensors[n.inputs[0]]
    arr = np.zeros(x.shape, np.int64)
    for c, v in cin.items():
        arr[..., c] = v
    ins = _ins(g, n)
    args = [arr.astype(x.dtype)] + [None if t is None else t.data for t in ins[1:]]
    y = np.asarray(ops.get(n.op_type).reference(n, ins, *args)[0])
    out = {}
    for c in cin:
        plane = y[..., c]
        if np.all(plane == plane.flat[0]):
            out[c] = int(plane.flat[0])
    return out


def _once(g: Graph) -> bool:
    prods = g.producers()
    users = g.consumers()
    convs = {n.name: _Conv(g, n) for n in g.nodes if _plain(g, n)}
    links = [n for n in g.nodes if _chanwise(g, n, convs)]
    gemms = {n.name: gm for n in g.nodes if (gm := _gemm(g, n))}
    # forward: constant channels of every plain conv's and channel-wise node's output
    const: dict[str, dict[int, int]] = {}
    for n in g.nodes:
        cin = const.get(n.inputs[0], {}) if n.inputs else {}
        if n.name in convs:
            const[n.outputs[0]] = convs[n.name].constants(cin)
        elif n.op_type == "Reshape" and n in links:
            const[n.outputs[0]] = dict(cin)
        elif n in links:
            const[n.outputs[0]] = _pool_constants(g, n, cin)
    # components: tensors linked by channel-wise nodes
    fixed = set(g.inputs) | set(g.outputs) | {s[0] for s in g.state} | {s[1] for s in g.state}
    parent: dict[str, str] = {}

    def find(t):
        while parent.get(t, t) != t:
            t = parent[t]
        return t
    for n in links:
        a, b = find(n.inputs[0]), find(n.outputs[0])
        if a != b:
            parent[b] = a
    comps: dict[str, list[str]] = {}
    for n in list(convs[k].node for k in convs) + links:
        for t in (n.inputs[0], n.outputs[0]):
            comps.setdefault(find(t), [])
            if t not in comps[find(t)]:
                comps[find(t)].append(t)
    keep_out: dict[str, np.ndarray] = {}      # producer name -> output channels kept
    keep_in: dict[str, tuple] = {}            # group-1 conv / QGemm name -> (input channels kept, constants)
    changed = False
    for tensors in comps.values():
        drop = _removable(g, tensors, convs, gemms, links, prods, users, const, fixed)
        if not drop:
            continue
        changed = True
        nc = g.tensors[tensors[0]].shape[_axis(g.tensors[tensors[0]])]
        keep = np.array([c for c in range(nc) if c not in set(drop)])
        members = set(tensors)
        for t in tensors:
            keep_out[prods[t].name] = keep
            tt = g.tensors[t]
            ax = _axis(tt)
            c0, kept = g.channels_kept.get(t, (nc, list(range(nc))))
            g.channels_kept[t] = (c0, [kept[i] for i in keep])
            tt.shape = tt.shape[:ax] + (len(keep),) + tt.shape[ax + 1:]
            for u in users.get(t, []):
                if u.outputs[0] not in members:
                    keep_in[u.name] = (keep, const.get(t, {}))
    nodes = {n.name: n for n in g.nodes}
    for name in set(keep_out) | set(keep_in):
        n = nodes[name]
        if name in convs:
            _rewrite(g, convs[name], keep_out.get(name), keep_in.get(name))
        elif n.op_type == "Reshape":
            n.inputs[1] = g.add_const(g.tensors[n.inputs[1]].name + "_pruned",
                                      np.array(g.tensors[n.outputs[0]].shape, np.int64))
        elif name in keep_in and n.op_type == "com.microsoft.QGemm":
            _rewrite_gemm(g, gemms[name], *keep_in[name])
    if changed:
        g.prune_tensors()
        g.channels_kept = {t: v for t, v in g.channels_kept.items() if t in g.tensors}
    return changed


def _removable(g, tensors, convs, gemms, links, prods, users, const, fixed) -> list[int]:
    """The channels every tensor of the component can do without."""
    members = set(tensors)
    ch = {g.tensors[t].shape[_axis(g.tensors[t])] for t in tensors}
    if len(ch) != 1 or any(t in fixed for t in tensors):
        return []
    nc = ch.pop()
    ok = np.ones(nc, bool)
    for t in tensors:
        p = prods.get(t)
        if p is None or not ((p.name in convs and convs[p.name].dense) or (p in links and p.inputs[0] in members)):
            return []
        # an NHWC tensor of a conv or pool has its channels last (a [1, 1, W, 1] one is not a channel vector)
        if any(n.op_type != "Reshape" and n.name not in gemms for n in [p, *users.get(t, [])]) and \
                _axis(g.tensors[t]) != len(g.tensors[t].shape) - 1:
            return []
        for u in users.get(t, []):
            if u.inputs[0] != t or any(i == t for i in u.inputs[1:]):
                return []
            if u in links:
                if u.outputs[0] not in members:
                    return []
                continue
            cu = convs.get(u.name)
            if cu is not None and cu.dense:
                reads = cu.wq.reshape(cu.m, cu.c, -1).any(axis=(0, 2))
                flat = not cu.padded
                zp = cu.p.x_zp
            else:
                gm = gemms.get(u.name)
                if gm is None:
                    return []
                reads = gm.bq.any(axis=1)
                flat, zp = True, gm.p.a_zp
            if len(reads) != nc:
                return []
            cst = const.get(t, {})
            for c in range(nc):
                if not reads[c]:
                    continue
                v = cst.get(c)
                if v is None or (v != zp and not flat):
                    ok[c] = False
    drop = [int(c) for c in np.flatnonzero(ok)]
    # the kernels run channels in groups of ALIGN (the DSP depthwise kernels need C % 4 == 0):
    # keep enough of the removable channels (the first ones) to stay a multiple of it
    extra = (-(nc - len(drop))) % ALIGN if nc % ALIGN == 0 else 0
    extra = max(extra, 1 if len(drop) == nc else 0)   # no layer of zero width
    return drop[extra:]


def _folded(n: Node, bias: np.ndarray, per: np.ndarray, keep: np.ndarray, cst: dict[int, int],
            zp: int) -> np.ndarray:
    """bias plus the share of the dropped input channels (not in keep) that
    the weights read: constants, so (v - zp) * per[c] (per[c]: the weights
    of input channel c summed over the taps, one value per output), in int64;
    refused as the layer itself would refuse an accumulator beyond int32."""
    out = np.asarray(bias, np.int64).copy()
    kept = set(keep.tolist())
    for c in range(per.shape[0]):
        if c not in kept and per[c].any():
            out += (cst[c] - zp) * per[c]
    check_acc(n, int(np.abs(out).max()) if out.size else 0, "bias with constant input channels folded in: ")
    return out


def _rewrite_gemm(g: Graph, gm: _Gemm, keep: np.ndarray, cst: dict[int, int]) -> None:
    """Keep rows `keep` of the QGemm's K; the dropped ones it reads are
    constants: (v - a_zp) * (B row - b_zp) goes into C."""
    n, p = gm.node, gm.p
    b = np.asarray(g.tensors[n.inputs[3]].data)
    _new(g, n, 3, b[:, keep] if p.tb else b[keep], g.tensors[n.inputs[3]].dtype)
    c_t = g.tensors[n.inputs[6]] if len(n.inputs) > 6 and n.inputs[6] else None
    cur = np.asarray(c_t.data, np.int64) if c_t is not None else np.zeros(p.n, np.int64)
    base = np.broadcast_to(cur.reshape(-1), (p.n,))     # C: a scalar, [N] or [1, N] (A has one row)
    new = _folded(n, base, gm.bq, keep, cst, p.a_zp)
    if not np.array_equal(new, base):
        _new(g, n, 6, new.reshape(cur.shape) if cur.size == p.n else new, "int32")


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
        bias = _folded(n, bias, cv.wq.sum(axis=(2, 3)).T, keep, cst, cv.p.x_zp)
        w = w[:, keep]
    _new(g, n, 3, w[rows], g.tensors[n.inputs[3]].dtype)
    for i in (4, 5):
        t = g.tensors[n.inputs[i]] if i < len(n.inputs) and n.inputs[i] else None
        if t is not None and t.data is not None and np.asarray(t.data).size > 1:
            _new(g, n, i, np.asarray(t.data).reshape(-1)[rows], t.dtype)
    bias = bias[rows]
    if cv.p.bias is not None or bias.any():
        _new(g, n, 8, bias, "int32")
    if cv.dw:
        n.attrs["group"] = len(rows)
