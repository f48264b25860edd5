"""Matrix products: Gemm (alpha, beta, transA, transB, optional C with
unidirectional broadcast) and MatMul (numpy semantics: 1-D operands, batch
dimensions that broadcast).

All of them, and the pointwise (1x1) convolution in ops/conv.py, run on one
kernel, `matmul_f32`: for each batch entry it computes
y[i][j] = clamp(alpha * sum_p A[i][p] * B[p][j] + beta * c[i][j]) with every
operand addressed through element strides computed here, so transposes and
broadcasts cost nothing at run time. A constant B is laid out row-major
[K, N] at compile time (transposed when transB=1, alpha folded in), a
constant C has beta folded in: the inner loop then reads B contiguously.
"""
from __future__ import annotations

import numpy as np

from .. import limits
from .base import Op, apply_act, broadcast_shape, register, require_float, shape_error

# Order of the integers at the head of matmul_f32's `geo` array; the batch
# entries (4 element offsets each: a, b, c, y) follow.
MATMUL_FIELDS = ("nb", "m", "n", "kk", "sai", "sak", "sbk", "sbj", "sci", "scj")


def emit_matmul(k, node, y: str, a: str, b: str, c: str | None, batches, m: int, n: int, kk: int,
                sa: tuple[int, int], sb: tuple[int, int], sc: tuple[int, int] = (0, 0),
                alpha: float = 1.0, beta: float = 1.0) -> None:
    """Emit one call of the matmul kernel. y, a, b, c: C pointer expressions
    (c None: no bias term); batches: per batch (a, b, c, y) element offsets;
    sa = (i, p) strides of A, sb = (p, j) strides of B, sc = (i, j) of c."""
    from ..codegen import act_bounds
    lo, hi = act_bounds(node)
    if c is None:
        c, sc, beta = k.const(np.zeros(1, np.float32), "zero"), (0, 0), 1.0
    sbk, sbj = sb
    unit = sbj == 1 or n == 1
    if unit:
        sbj = 1
    batches = [list(map(int, t)) for t in batches]
    geo = np.array([len(batches), m, n, kk, sa[0], sa[1], sbk, sbj, sc[0], sc[1]]
                   + [v for t in batches for v in t], np.int64)
    if geo.size and (geo.max() >= 2 ** 31 or geo.min() < 0):
        raise shape_error(node, "tensor too large for 32-bit indexing")
    ha, hb = a in k.half_symbols, b in k.half_symbols   # --precision fp16 weights (Emitter.weight)
    fn = k.kernel("matmul_f32", {"name": "_".join(filter(None, ["" if unit else "strided",
                                                                "ha" if ha else "", "hb" if hb else ""])),
                                 "unit": unit, "fields": MATMUL_FIELDS, "ha": ha, "hb": hb})
    g = k.const(geo.astype(np.int32), "mm_geo")
    k.line(f"{fn}({y}, {a}, {b}, {c}, {g}, {k.f32(alpha)}, {k.f32(beta)}, {lo}, {hi});")


def _float_compute(*arrays):
    """Arrays in the precision the reference computes in: float64 for float
    inputs (one rounding at the end), int64 for integer inputs."""
    out = []
    for x in arrays:
        x = np.asarray(x)
        out.append(x.astype(np.int64) if np.issubdtype(x.dtype, np.integer) else x.astype(np.float64))
    return out


def _all_const(ins) -> bool:
    return all(t is None or t.is_const for t in ins)


# --------------------------------------------------------------------------- Gemm

def gemm_dims(node, a, b, what: str = "Gemm") -> tuple[int, int, int, int, int]:
    """(M, N, K, transA, transB) of A x B under the node's transA/transB
    (Gemm and com.microsoft.QGemm share the rule)."""
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise shape_error(node, f"{what} needs 2-D A and B, got {list(a.shape)} and {list(b.shape)}")
    ta, tb = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    m, ka = (a.shape[1], a.shape[0]) if ta else a.shape
    kb, n = (b.shape[1], b.shape[0]) if tb else b.shape
    if ka != kb:
        raise shape_error(node, f"inner dimensions differ: A{list(a.shape)}{' (transA)' if ta else ''} "
                                f"x B{list(b.shape)}{' (transB)' if tb else ''} gives K {ka} vs {kb}")
    return int(m), int(n), int(ka), ta, tb


def _gemm_dims(node, ins):
    return gemm_dims(node, ins[0], ins[1])[:3]


def _c_strides(node, c_shape, m: int, n: int) -> tuple[int, int]:
    """(row, column) element strides of C broadcast unidirectionally to [m, n]."""
    if len(c_shape) > 2:
        raise shape_error(node, f"C {list(c_shape)} has rank {len(c_shape)}; it must broadcast to [{m}, {n}]")
    ci, cj = ((1, 1) + tuple(c_shape))[-2:]
    if ci not in (1, m) or cj not in (1, n):
        raise shape_error(node, f"C {list(c_shape)} does not broadcast to the output [{m}, {n}]")
    return (cj if ci != 1 else 0), (1 if cj != 1 else 0)


@register("Gemm")
class Gemm(Op):
    fuses_act = True

    def check(self, node, ins):
        if _all_const(ins):
            return
        require_float(node, ins, *[i for i in range(min(len(ins), 3)) if ins[i] is not None])

    def infer(self, node, ins):
        m, n, _ = _gemm_dims(node, ins)
        c = ins[2] if len(ins) > 2 else None
        if c is not None:
            # Gemm-6 and older broadcast C only with broadcast=1 (default 0).
            old = (getattr(node, "opset", None) or 13) < 7
            if int(node.attr("broadcast", 0 if old else 1)) == 0 and tuple(c.shape) != (m, n):
                raise shape_error(node, f"broadcast=0 but C is {list(c.shape)}, not [{m}, {n}]")
            _c_strides(node, c.shape, m, n)
        return [((m, n), ins[0].dtype)]

    def reference(self, node, ins, a, b, c=None):
        dtype = np.asarray(a).dtype
        alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
        a, b = _float_compute(a, b)
        if int(node.attr("transA", 0)):
            a = a.T
        if int(node.attr("transB", 0)):
            b = b.T
        y = a @ b
        if alpha != 1.0:
            y = y * alpha
        if c is not None:
            (c,) = _float_compute(c)
            y = y + (c * beta if beta != 1.0 else c)
        return [apply_act(np.asarray(y).astype(dtype), node.act)]

    def macs(self, node, ins, outs):
        m, n, kk = _gemm_dims(node, ins)
        return m * n * kk

    def emit(self, node, ins, outs, k):
        a, b = ins[0], ins[1]
        c = ins[2] if len(ins) > 2 else None
        m, n, kk = _gemm_dims(node, ins)
        if outs[0].size == 0:
            return
        alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
        ta, tb = int(node.attr("transA", 0)), int(node.attr("transB", 0))
        sa = (1, m) if ta else (kk, 1)
        if b.is_const:
            bk = np.asarray(b.data, np.float32)
            bk = bk.T if tb else bk
            if alpha != 1.0:
                bk = bk * np.float32(alpha)
            b_ptr, sb, alpha = k.weight(np.ascontiguousarray(bk, np.float32), f"{b.name}_kn"), (n, 1), 1.0
        else:
            b_ptr, sb = k.ptr(b), ((1, kk) if tb else (n, 1))
        c_ptr, sc = None, (0, 0)
        if c is not None:
            sc = _c_strides(node, c.shape, m, n)
            if c.is_const:
                cv = np.asarray(c.data, np.float32)
                if beta != 1.0:
                    cv = cv * np.float32(beta)
                c_ptr, beta = k.const(np.ascontiguousarray(cv, np.float32), f"{c.name}_beta"), 1.0
            else:
                c_ptr = k.ptr(c)
        emit_matmul(k, node, k.ptr(outs[0]), k.ptr(a), b_ptr, c_ptr, [(0, 0, 0, 0)], m, n, kk,
                    sa, sb, sc, alpha, beta)


# --------------------------------------------------------------------------- MatMul

def matmul_dims(node, a_shape, b_shape):
    """(batch shape, M, N, K, output shape) of numpy's matmul."""
    if len(a_shape) == 0 or len(b_shape) == 0:
        raise shape_error(node, "MatMul operands must have rank >= 1")
    a2 = tuple(a_shape) if len(a_shape) >= 2 else (1,) + tuple(a_shape)
    b2 = tuple(b_shape) if len(b_shape) >= 2 else tuple(b_shape) + (1,)
    if a2[-1] != b2[-2]:
        raise shape_error(node, f"inner dimensions differ: {list(a_shape)} x {list(b_shape)} "
                                f"({a2[-1]} vs {b2[-2]})")
    batch = broadcast_shape(node, a2[:-2], b2[:-2])
    out = batch + ((a2[-2],) if len(a_shape) >= 2 else ()) + ((b2[-1],) if len(b_shape) >= 2 else ())
    return batch, int(a2[-2]), int(b2[-1]), int(a2[-1]), tuple(int(d) for d in out)


def _batch_offsets(shape: tuple[int, ...], batch: tuple[int, ...], step: int) -> np.ndarray:
    """Element offset of each (flat, row-major) batch index of `batch` into an
    operand whose batch dims are `shape` (broadcast: size-1 dims repeat)."""
    shape = (1,) * (len(batch) - len(shape)) + tuple(shape)
    strides, acc = [], step
    for d in reversed(shape):
        strides.append(acc if d != 1 else 0)
        acc *= d
    strides = strides[::-1]
    idx = np.indices(batch).reshape(len(batch), -1) if batch else np.zeros((0, 1), np.int64)
    return (np.asarray(strides, np.int64)[:, None] * idx).sum(axis=0).astype(np.int64)


def check_matmul_limits(node, a_shape, b_shape, out_dtype: str) -> tuple[int, ...]:
    """The output shape, after checking it and the batch table the kernel
    call needs against limits.py (also for the integer MatMuls)."""
    batch, _, _, _, out = matmul_dims(node, a_shape, b_shape)
    limits.check_shape(out, np.dtype(out_dtype).itemsize, f"node '{node.name}' ({node.op_type}): output")
    if not _stacked(a_shape, b_shape, batch):
        limits.check_table_rows(limits.elements(batch), f"node '{node.name}' ({node.op_type}): the batch")
    return out


def _stacked(a_shape, b_shape, batch) -> bool:
    """One B for every batch entry and A not broadcast: the batch stacks into
    the rows of one product (no per-entry table)."""
    a_batch = tuple(a_shape[:-2]) if len(a_shape) >= 2 else ()
    b_batch = tuple(b_shape[:-2]) if len(b_shape) >= 2 else ()
    return limits.elements(b_batch) == 1 and a_batch == tuple(batch)


@register("MatMul")
class MatMul(Op):
    fuses_act = True

    def check(self, node, ins):
        if _all_const(ins):
            return
        require_float(node, ins, 0, 1)

    def infer(self, node, ins):
        return [(check_matmul_limits(node, ins[0].shape, ins[1].shape, ins[0].dtype), ins[0].dtype)]

    def reference(self, node, ins, a, b):
        dtype = np.asarray(a).dtype
        a, b = _float_compute(a, b)
        return [apply_act(np.asarray(np.matmul(a, b)).astype(dtype), node.act)]

    def macs(self, node, ins, outs):
        batch, m, n, kk, _ = matmul_dims(node, ins[0].shape, ins[1].shape)
        return limits.elements(batch) * m * n * kk

    def emit(self, node, ins, outs, k):
        a, b = ins
        batch, m, n, kk, _ = matmul_dims(node, a.shape, b.shape)
        if outs[0].size == 0:
            return
        a_batch = tuple(a.shape[:-2]) if len(a.shape) >= 2 else ()
        b_batch = tuple(b.shape[:-2]) if len(b.shape) >= 2 else ()
        if _stacked(a.shape, b.shape, batch):
            # One B for every batch entry and A not broadcast: the batch
            # stacks into the rows of one product.
            m, offsets = m * int(np.prod(batch, dtype=np.int64)), [(0, 0, 0, 0)]
        else:
            ao = _batch_offsets(a_batch, batch, m * kk)
            bo = _batch_offsets(b_batch, batch, kk * n)
            offsets = [(ao[t], bo[t], 0, t * m * n) for t in range(len(ao))]
        b_ptr = k.weight(np.asarray(b.data, np.float32), b.name) if b.is_const and b.dtype == "float32" \
            else k.ptr(b)
        emit_matmul(k, node, k.ptr(outs[0]), k.ptr(a), b_ptr, None, offsets, m, n, kk,
                    (kk, 1), (n, 1))
