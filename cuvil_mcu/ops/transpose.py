"""Transpose, and the strided copy every data-movement op is lowered to.

Transpose, Concat, Split, Slice, Gather (constant indices), Pad and Expand
only move elements. Each of them is described here as one or more strided
copies: `dst[i . ds] = src[i . ss]` over an index box `n`, with element
strides computed in Python (negative for reversed slices, 0 for broadcast).
`emit_copy` merges neighbouring dimensions that are contiguous in both
operands, drops size-1 dimensions and picks the cheapest form: a single
memcpy, a loop of memcpy'd rows, or an element loop.

The kernels are typed by element size, not by dtype, so int8/int16/int32
tensors reuse the same functions (through the unsigned type of that size,
which may alias the signed one); float32/float64 keep their own type so no
access goes through an incompatible lvalue type.
"""
from __future__ import annotations

import numpy as np

from .base import Op, register, shape_error, unsupported

MAX_DIMS = 6

_FLOAT_TYPES = {"float32": ("float", "f32"), "float64": ("double", "f64")}
_UINT_TYPES = {1: ("uint8_t", "u8"), 2: ("uint16_t", "u16"), 4: ("uint32_t", "u32"), 8: ("uint64_t", "u64")}


def move_type(dtype: str) -> tuple[str, str]:
    """(C element type, kernel variant name) used to move elements of dtype."""
    if dtype in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype]
    return _UINT_TYPES[np.dtype(dtype).itemsize]


def contiguous_strides(shape) -> list[int]:
    st, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        st[i] = acc
        acc *= int(shape[i])
    return st


def tensor_ptr(k, t, ctype: str, offset: int = 0) -> str:
    """C pointer expression of tensor t as `ctype *`, `offset` elements in."""
    if t.is_const:
        sym = k.const(t.data, name=t.name)
        base = sym if t.ctype == ctype else f"(const {ctype} *){sym}"
    else:
        base = k.ptr(t, ctype)
    return f"{base} + {offset}" if offset else base


def merge_dims(counts, dst_strides, src_strides) -> list[tuple[int, int, int]]:
    """(count, dst stride, src stride) per dimension, outer first, without
    size-1 dimensions and with neighbours merged where both operands step
    through them as one contiguous range."""
    merged: list[tuple[int, int, int]] = []
    for n, d, s in zip(counts, dst_strides, src_strides):
        n, d, s = int(n), int(d), int(s)
        if n == 1:
            continue
        if merged and merged[-1][1] == d * n and merged[-1][2] == s * n:
            merged[-1] = (merged[-1][0] * n, d, s)
        else:
            merged.append((n, d, s))
    return merged


def emit_copy(k, dst: str, src: str, dtype: str, counts, dst_strides, src_strides) -> None:
    """Emit `dst[i . ds] = src[i . ss]` for every index i < counts. dst/src are
    C pointer expressions of the move type of dtype (see `tensor_ptr`)."""
    if any(int(n) == 0 for n in counts):
        return  # nothing to copy
    ctype, vname = move_type(dtype)
    size = np.dtype(dtype).itemsize
    dims = merge_dims(counts, dst_strides, src_strides)
    if not dims:
        k.line(f"memcpy({dst}, {src}, {size}u);")
        return
    if len(dims) == 1 and dims[0][1] == 1 and dims[0][2] == 1:
        k.line(f"memcpy({dst}, {src}, {dims[0][0] * size}u);")
        return
    if size == 1 and (_emit_scatter_mve(k, dst, src, dims) or _emit_c3_dsp(k, dst, src, dims)):
        return
    if len(dims) > MAX_DIMS:
        raise ValueError(f"strided copy over {len(dims)} dimensions (at most {MAX_DIMS})")
    contig = dims[-1][1] == 1 and dims[-1][2] == 1
    dims = [(1, 0, 0)] * (MAX_DIMS - len(dims)) + dims
    fn = k.kernel("copy_strided", {"name": ("rows_" if contig else "") + vname, "ctype": ctype, "contig": contig})
    n = k.const(np.array([d[0] for d in dims], np.int32), "copy_n")
    ds = k.const(np.array([d[1] for d in dims], np.int32), "copy_dst_stride")
    ss = k.const(np.array([d[2] for d in dims], np.int32), "copy_src_stride")
    k.line(f"{fn}({dst}, {src}, {n}, {ds}, {ss});")


def _emit_scatter_mve(k, dst: str, src: str, dims) -> bool:
    """Two dimensions of bytes, one contiguous on one side and strided by at
    most 17 on the other (NCHW <-> NHWC of a few channels): copy_scatter_mve
    on a Helium target (16 bytes per load/store pair, against one byte per
    step of copy_strided). False otherwise."""
    if k.target is None or not k.target.has("mve") or len(dims) != 2:
        return False
    for inner, outer in ((dims[1], dims[0]), (dims[0], dims[1])):
        n, dd, sd = inner
        if min(outer[1], outer[2]) < 0:
            continue
        for scatter in (True, False):
            if (sd, dd)[not scatter] == 1 and 2 <= (dd, sd)[not scatter] <= 17:
                v = dict(no=outer[0], dso=outer[1], sso=outer[2], ni=n, dd=dd, sd=sd, scatter=int(scatter))
                k.kernel("mve_kernel")    # the kernels' noinline storage class
                k.kernel("requant_mve")   # arm_mve.h
                fn = k.kernel("copy_scatter_mve", {"name": "_".join(str(v[f]) for f in sorted(v)), **v})
                k.line(f"{fn}({dst}, {src});")
                return True
    return False


def _emit_c3_dsp(k, dst: str, src: str, dims) -> bool:
    """Three planes of bytes interleaved (NCHW -> NHWC of an RGB input, the
    Transpose in front of a float-exported model's first conv): copy_c3_dsp
    on a DSP (little-endian Cortex-M) target, 3 words in and 3 out per 4
    pixels (MobileNetV2-0.35's 96x96x3 input on the M4: 184,328 -> 36,874
    instructions). False otherwise."""
    if k.target is None or not k.target.has("dsp") or len(dims) != 2:
        return False
    (n, dd, sd), (nc, dc, sc) = dims
    if nc != 3 or dd != 3 or sd != 1 or dc != 1 or sc < n:
        return False
    unroll = 2 if n % 8 < 4 and n >= 8 else 1      # two steps a loop turn where the steps pair up
    fn = k.kernel("copy_c3_dsp", {"name": f"{n}_{sc}", "n": n, "plane": sc, "unroll": unroll})
    k.line(f"{fn}({dst}, {src});")
    return True


def check_rank(node, t, what: str = "input") -> None:
    if t is not None and not t.is_const and len(t.shape) > MAX_DIMS:
        raise unsupported(node, f"{what} '{t.name}' has rank {len(t.shape)} (at most {MAX_DIMS} supported)")


def _perm(node, rank: int) -> list[int]:
    perm = node.attr("perm")
    if perm is None:
        return list(range(rank - 1, -1, -1))
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise shape_error(node, f"perm {perm} is not a permutation of the {rank} axes of its input")
    return perm


@register("Transpose")
class Transpose(Op):
    def check(self, node, ins):
        check_rank(node, ins[0])

    def infer(self, node, ins):
        x = ins[0]
        return [(tuple(x.shape[p] for p in _perm(node, len(x.shape))), x.dtype)]

    def reference(self, node, ins, x):
        x = np.asarray(x)
        return [np.asarray(np.transpose(x, _perm(node, x.ndim)), order="C")]

    def emit(self, node, ins, outs, k):
        x, y = ins[0], outs[0]
        ctype = move_type(x.dtype)[0]
        perm = _perm(node, len(x.shape))
        xs = contiguous_strides(x.shape)
        emit_copy(k, tensor_ptr(k, y, ctype), tensor_ptr(k, x, ctype), x.dtype,
                  y.shape, contiguous_strides(y.shape), [xs[p] for p in perm])
