"""Fold per-channel affine maps into the Conv, Gemm or MatMul next to them.

An affine node computes y = x * s[c] + t[c] along axis 1 with constant s, t:
- BatchNormalization in inference form (s, t: ops.batchnorm.bn_coeffs);
- Mul, Add or Sub of a run-time float32 tensor x and a float32 constant that
  varies along axis 1 only (one value per channel, or one scalar), with an
  output of x's shape (Sub either way round). Caffe2's exports write
  BatchNorm like this: BatchNormalization, then Mul and Add by per-channel
  constants.

One sweep in execution order; for each affine node A, the first that applies:
1. after: A's input is the output of a Conv / Gemm / MatMul read by nothing
   else (not a graph output, no fused clamp, constant float weights): its
   weights and bias absorb A, it writes A's output and A disappears.
   - Conv: W[m] *= s[m]; bias = bias * s + t (created when absent).
   - Gemm (either transB): BN's channel axis 1 is Gemm's output column j,
     so column j of op(B) is scaled by s[j] and C becomes beta * C * s + t
     (a constant C or none; beta is then 1).
   - MatMul with a constant 2-D B and a 2-D input: rewritten into
     Gemm(A, B * s, t). With a batched (rank >= 3) output, axis 1 is not the
     product's column axis, so it stays unfolded.
2. chain: A's input is the output of another affine node read by nothing
   else: the two become one BatchNormalization node (scale s1 * s2, B
   t1 * s2 + t2, mean 0, var 1, epsilon 0, so bn_coeffs gives s and t back
   exactly), which may then fold by rule 3.
3. before: A's output is read only by Convs / Gemms / 2-D MatMuls, each as
   its data input: they absorb A into their weights (W[m, c] *= s[c]) and
   bias (bias[m] += sum over c and the window of W[m, c, ...] * t[c]). A
   Conv with padding sees zeros that A never produced (its border taps
   would have seen t[c]): a shift t != 0 then cannot fold and the rule is
   refused; a pure scale (t = 0) commutes with zero padding and folds.
What stays is one kernel per chain: a BatchNormalization (float), which
passes/qdq.py and ptq.py turn into an integer per-channel kernel in an int8
model; a lone Mul / Add / Sub that folds nowhere stays the element-wise op
it was. New constants get fresh names: weights shared with other nodes are
left as they are. Float results change by rounding only (the order of the
multiplications); constants holding inf or NaN never fold: regrouped, such
arithmetic can give NaN where the model's order gives +-inf (a bias of inf
times a scale of 0), and NaN payloads would not survive.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ops.batchnorm import bn_coeffs


def _const(g: Graph, name: str) -> np.ndarray | None:
    if not name:
        return None
    t = g.tensors[name]
    return t.data if t.is_const else None


def _per_channel(c: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """c as one float64 value per channel of a tensor of `shape`, when it
    broadcasts along axis 1 only."""
    r = len(shape)
    if r < 2 or c.ndim > r:
        return None
    cp = c.reshape((1,) * (r - c.ndim) + c.shape)
    if any(d != 1 for i, d in enumerate(cp.shape) if i != 1) or cp.shape[1] not in (1, shape[1]) or \
            not np.all(np.isfinite(cp)):
        return None
    return np.broadcast_to(cp.reshape(-1).astype(np.float64), (shape[1],))


def affine(g: Graph, n: Node) -> tuple[str, np.ndarray, np.ndarray] | None:
    """(x, s, t) when node n computes x * s + t per channel (float64 vectors)."""
    if n.act is not None or not n.outputs or any(n.outputs[1:]):
        return None
    if n.op_type == "BatchNormalization":
        x = g.tensors[n.inputs[0]]
        params = [_const(g, i) for i in n.inputs[1:5]]
        if x.is_const or x.dtype != "float32" or len(x.shape) < 2 or len(params) != 4 or \
                any(p is None for p in params) or int(n.attr("training_mode", 0)):
            return None
        s, t = bn_coeffs(n, *params)
        if not (np.all(np.isfinite(s)) and np.all(np.isfinite(t))):
            return None   # inf / NaN coefficients: kept as written (no rewrite reorders them)
        return n.inputs[0], s.astype(np.float64), t.astype(np.float64)
    if n.op_type not in ("Mul", "Add", "Sub") or len(n.inputs) != 2:
        return None
    a, b = (g.tensors[i] for i in n.inputs)
    if a.is_const == b.is_const:
        return None
    x, c = (a, b.data) if b.is_const else (b, a.data)
    if x.dtype != "float32" or c.dtype != np.float32 or g.tensors[n.outputs[0]].shape != x.shape:
        return None
    v = _per_channel(c, x.shape)
    if v is None or not np.all(np.isfinite(v)):
        return None
    one, zero = np.ones_like(v), np.zeros_like(v)
    if n.op_type == "Mul":
        return x.name, v, zero
    if n.op_type == "Add":
        return x.name, one, v
    return (x.name, one, -v) if b.is_const else (x.name, -one, v)


# --------------------------------------------------------------------------- 1: after

def _fold_conv(g: Graph, p: Node, s: np.ndarray, t: np.ndarray) -> bool:
    w = _const(g, p.input(1))
    if w is None or w.dtype != np.float32 or w.shape[0] != s.size:
        return False
    b_name = p.input(2)
    b = _const(g, b_name)
    if b_name and b is None:
        return False
    pos = p.attr("_ochan")   # output channel m stored at position pos[m] (passes/fold_shuffle.py)
    if pos is not None:
        s, t = s[np.asarray(pos, np.int64)], t[np.asarray(pos, np.int64)]
    shape = (-1,) + (1,) * (w.ndim - 1)
    b2 = (t if b is None else b.astype(np.float64) * s + t).astype(np.float32)
    new = {2: g.add_const(f"{p.name}_bias_bn", b2)}
    if np.any(s != 1):   # a shift alone leaves the weights as they are
        new[1] = g.add_const(f"{p.input(1)}_bn", (w.astype(np.float64) * s.reshape(shape)).astype(np.float32))
    _set_inputs(g, p, new)
    return True


def _fold_gemm(g: Graph, p: Node, s: np.ndarray, t: np.ndarray) -> bool:
    b = _const(g, p.input(1))
    c_name = p.input(2)
    c = _const(g, c_name)
    if b is None or b.dtype != np.float32 or (c_name and c is None):
        return False
    tb = int(p.attr("transB", 0))
    if b.shape[0 if tb else 1] != s.size:
        return False
    scale = s.reshape(-1, 1) if tb else s.reshape(1, -1)
    b2 = (b.astype(np.float64) * scale).astype(np.float32)
    if c is None:
        c2 = t.astype(np.float32)
    else:
        beta = float(p.attr("beta", 1.0))
        c2 = (c.astype(np.float64) * beta * s + t).astype(np.float32)
    _set_inputs(g, p, {1: g.add_const(f"{p.input(1)}_bn", b2), 2: g.add_const(f"{p.name}_c_bn", c2)})
    p.attrs["beta"] = 1.0
    return True


def _as_gemm(g: Graph, p: Node) -> bool:
    """A MatMul of a 2-D input by a constant float 2-D B, made a Gemm (the
    same product) so its weights and bias can absorb an affine map."""
    a, b = g.tensors[p.input(0)], _const(g, p.input(1))
    if b is None or b.ndim != 2 or len(a.shape) != 2 or b.dtype != np.float32:
        return False
    p.op_type, p.attrs = "Gemm", {}
    return True


def _fold_matmul(g: Graph, p: Node, s: np.ndarray, t: np.ndarray) -> bool:
    b = _const(g, p.input(1))
    if b is None or b.ndim != 2 or b.shape[1] != s.size or not _as_gemm(g, p):
        return False
    return _fold_gemm(g, p, s, t)


AFTER = {"Conv": _fold_conv, "Gemm": _fold_gemm, "MatMul": _fold_matmul}


# --------------------------------------------------------------------------- 3: before

def _conv_before(g: Graph, n: Node, s: np.ndarray, t: np.ndarray, dry: bool) -> bool:
    from ..ops.conv import conv_geometry
    w, b = _const(g, n.input(1)), _const(g, n.input(2))
    if w is None or w.dtype != np.float32 or (n.input(2) and b is None) or w.ndim < 3:
        return False
    geo = conv_geometry(n, g.tensors[n.inputs[0]].shape, w.shape)
    if w.shape[1] * geo.group != s.size or (np.any(t != 0) and any(geo.onnx_pads())):
        return False
    if dry:
        return True
    m, cg = w.shape[0], w.shape[1]
    # input channel of W[m, j]: group (m // (M / group)) * cg + j
    chan = (np.arange(m)[:, None] // (m // geo.group)) * cg + np.arange(cg)[None, :]
    bshape = (m, cg) + (1,) * (w.ndim - 2)
    w64 = w.astype(np.float64)
    w2 = (w64 * s[chan].reshape(bshape)).astype(np.float32)
    shift = (w64 * t[chan].reshape(bshape)).reshape(m, -1).sum(axis=1)
    b2 = ((np.zeros(m) if b is None else b.astype(np.float64)) + shift).astype(np.float32)
    _set_inputs(g, n, {1: g.add_const(f"{n.input(1)}_affine", w2), 2: g.add_const(f"{n.name}_bias_affine", b2)})
    return True


def _gemm_before(g: Graph, n: Node, s: np.ndarray, t: np.ndarray, dry: bool) -> bool:
    if n.op_type == "MatMul":
        b = _const(g, n.input(1))
        if b is None or b.ndim != 2 or len(g.tensors[n.inputs[0]].shape) != 2 or b.dtype != np.float32:
            return False
        if dry:
            return b.shape[0] == s.size
        _as_gemm(g, n)
    b, c = _const(g, n.input(1)), _const(g, n.input(2))
    if b is None or b.dtype != np.float32 or b.ndim != 2 or int(n.attr("transA", 0)) or \
            (n.input(2) and c is None) or len(g.tensors[n.inputs[0]].shape) != 2:
        return False
    tb = int(n.attr("transB", 0))
    op_b = b.T.astype(np.float64) if tb else b.astype(np.float64)      # [K, N]
    if op_b.shape[0] != s.size:
        return False
    if dry:
        return True
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    b2 = op_b * s[:, None]
    shift = alpha * (t @ op_b)
    c2 = shift if c is None else beta * c.astype(np.float64) + shift
    b2 = (b2.T if tb else b2).astype(np.float32)
    _set_inputs(g, n, {1: g.add_const(f"{n.input(1)}_affine", b2),
                       2: g.add_const(f"{n.name}_c_affine", np.asarray(c2, np.float32))})
    n.attrs["beta"] = 1.0
    return True


BEFORE = {"Conv": _conv_before, "Gemm": _gemm_before, "MatMul": _gemm_before}


def _set_inputs(g: Graph, p: Node, new: dict[int, str]) -> None:
    inputs = list(p.inputs) + [""] * (max(new) + 1 - len(p.inputs))
    for i, name in new.items():
        inputs[i] = name
    p.inputs = inputs


def _desc(n: Node) -> str:
    return f"{n.op_type} '{n.name}'"


def run(g: Graph) -> Graph:
    producers = g.producers()
    consumers = g.consumers()
    order: list[Node | None] = list(g.nodes)     # nodes in execution order; None: folded away
    pos = {n.name: i for i, n in enumerate(order)}
    names = set(pos)

    def sole_reader(x: str, n: Node) -> bool:
        return x not in g.outputs and [u.name for u in consumers.get(x, [])] == [n.name]

    def fresh(base: str) -> str:
        name, k = base, 0
        while name in names:
            k += 1
            name = f"{base}_{k}"
        names.add(name)
        return name

    for i in range(len(order)):
        n = order[i]
        found = affine(g, n) if n is not None else None
        if found is None:
            continue
        x, s, t = found
        y = n.outputs[0]
        p = producers.get(x)
        # 1: into the producer's weights
        if p is not None and p.op_type in AFTER and p.act is None and p.outputs[0] == x and \
                sole_reader(x, n) and g.tensors[x].dtype == "float32" and \
                AFTER[p.op_type](g, p, s.astype(np.float32), t.astype(np.float32)):
            p.outputs[0] = y
            p.fused += [_desc(n)] + n.fused
            producers[y] = p
            order[i] = None
            continue
        # 2: merge with the affine node before it
        pa = affine(g, p) if p is not None else None
        if pa is not None and sole_reader(x, n):
            x0, s0, t0 = pa
            node = Node(fresh(p.name), "BatchNormalization",
                        [x0, g.add_const(f"{p.name}_scale", (s0 * s).astype(np.float32)),
                         g.add_const(f"{p.name}_shift", (t0 * s + t).astype(np.float32)),
                         g.add_const(f"{p.name}_zero", np.zeros(s.size, np.float32)),
                         g.add_const(f"{p.name}_one", np.ones(s.size, np.float32))],
                        [y], {"epsilon": 0.0}, None, p.fused + [_desc(p), _desc(n)] + n.fused, p.opset)
            order[pos[p.name]] = None
            order[i] = node
            pos[node.name] = i
            producers[y] = node
            consumers[x0] = [node if u is p else u for u in consumers.get(x0, [])]
            n, x, s, t = node, x0, s0 * s, t0 * s + t
        # 3: into every reader's weights
        users = consumers.get(y, [])
        if y in g.outputs or not users or any(
                u.op_type not in BEFORE or u.input(0) != y or y in u.inputs[1:] or
                not BEFORE[u.op_type](g, u, s, t, dry=True) for u in users):
            continue
        for u in users:
            BEFORE[u.op_type](g, u, s, t, dry=False)
            u.inputs[0] = x
            u.fused.append(_desc(n) + " (before it)")
        consumers[x] = [u for u in consumers.get(x, []) if u is not n] + users
        order[i] = None
    g.nodes = [n for n in order if n is not None]
    g.prune_tensors()
    return g
