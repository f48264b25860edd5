"""Fold an inference BatchNormalization into the Conv, Gemm or MatMul that
produces its input: with y = x * s + t per channel (ops.batchnorm.bn_coeffs),
the producer's weights are scaled by s per output channel and t goes into its
bias (created when absent); the producer then writes the BN's output tensor
and the BN node disappears.

Only when the producer's output feeds nothing but the BN, is not a graph
output, and carries no fused clamp yet; its weights (and bias) must be
constants. New constants are added under fresh names, so weights shared with
other nodes are left as they are.

- Conv: W[m] *= s[m]; bias = bias * s + t.
- Gemm (either transB): BN's channel axis 1 is Gemm's output column j, so
  column j of op(B) is scaled by s[j] and C becomes beta * C * s + t (a
  constant C or none; beta is then 1).
- MatMul with a constant 2-D B and a 2-D input: rewritten into
  Gemm(A, B * s, t). With a batched (rank >= 3) output, BN's axis 1 is not
  the product's column axis, so the per-channel scale cannot go into B: that
  MatMul (and a MatMul with a run-time B) is left unfolded and the BN runs as
  its own kernel.
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
    w2 = (w.astype(np.float64) * s.reshape(shape)).astype(np.float32)
    b2 = t if b is None else (b.astype(np.float64) * s + t).astype(np.float32)
    _set_inputs(g, p, {1: g.add_const(f"{p.input(1)}_bn", w2), 2: g.add_const(f"{p.name}_bias_bn", b2)})
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
        c2 = t
    else:
        beta = float(p.attr("beta", 1.0))
        c2 = (c.astype(np.float64) * beta * s + t).astype(np.float32)
    _set_inputs(g, p, {1: g.add_const(f"{p.input(1)}_bn", b2), 2: g.add_const(f"{p.name}_c_bn", c2)})
    p.attrs["beta"] = 1.0
    return True


def _fold_matmul(g: Graph, p: Node, s: np.ndarray, t: np.ndarray) -> bool:
    a, b = g.tensors[p.input(0)], _const(g, p.input(1))
    if b is None or b.ndim != 2 or len(a.shape) != 2 or b.dtype != np.float32 or b.shape[1] != s.size:
        return False
    p.op_type, p.attrs = "Gemm", {}
    return _fold_gemm(g, p, s, t)


FOLD = {"Conv": _fold_conv, "Gemm": _fold_gemm, "MatMul": _fold_matmul}


def _set_inputs(g: Graph, p: Node, new: dict[int, str]) -> None:
    inputs = list(p.inputs) + [""] * (max(new) + 1 - len(p.inputs))
    for i, name in new.items():
        inputs[i] = name
    p.inputs = inputs


def run(g: Graph) -> Graph:
    producers = g.producers()
    consumers = g.consumers()
    removed = set()
    for bn in g.nodes:
        if bn.op_type != "BatchNormalization" or bn.act is not None:
            continue
        x = bn.inputs[0]
        p = producers.get(x)
        if p is None or p.op_type not in FOLD or p.act is not None or p.outputs[0] != x:
            continue
        if x in g.outputs or len(consumers.get(x, [])) != 1 or g.tensors[x].dtype != "float32":
            continue
        params = [_const(g, i) for i in bn.inputs[1:5]]
        if any(v is None for v in params):
            continue
        s, t = bn_coeffs(bn, *params)
        if not FOLD[p.op_type](g, p, s, t):
            continue
        p.outputs[0] = bn.outputs[0]
        p.fused.append(f"BatchNormalization '{bn.name}'")
        producers[bn.outputs[0]] = p
        removed.add(bn.name)
    g.nodes = [n for n in g.nodes if n.name not in removed]
    g.prune_tensors()
    return g
