"""What one op (or a family of ops) provides to the compiler.

A subclass of `Op` decorated with `@register("OnnxType", ...)` gives:

- `infer(node, ins)`     -> list of (shape, dtype) per output (shape rule)
- `reference(node, ins, *arrays)` -> list of numpy outputs (the oracle;
                            float32 and bit-exact integer). `ins` are the
                            input Tensors (shapes, dtypes, constant data).
- `macs(node, ins, outs)` -> multiply-accumulates per inference
- `scratch(node, ins, outs)` -> bytes of kernel scratch taken from the arena
- `emit(node, ins, outs, k)` -> C for the node through the Emitter `k`
                            (`k.call(kernel_template, args)`)

Class flags tell the passes and the planner what the op allows:
- `view`: output 0 is input 0 reinterpreted (Reshape & co.): no code, same bytes.
- `inplace`: output 0 may take input 0's bytes when input 0 dies here and has
  the same size (element-wise ops).
- `shape_only`: output depends only on input shapes (Shape, Size): always folded.
- `fuses_act`: the kernel applies `node.act` (a fused clamp) itself.

Ops are collected automatically: every module in `cuvil_mcu.ops` is imported
by `cuvil_mcu.ops.registry()`; adding an op touches its module, its kernel
template and its tests.
"""
from __future__ import annotations

import numpy as np

from ..errors import ModelLoadError, ShapeError, UnsupportedOpError
from ..ir import Node, Tensor

_REGISTRY: dict[str, "Op"] = {}
NOT_TILED = "{} is not tiled"     # Op.band_rows of ops without a band rule


def register(*op_types: str):
    def deco(cls):
        inst = cls()
        inst.types = op_types
        for t in op_types:
            if t in _REGISTRY:
                raise RuntimeError(f"op {t} registered twice")
            _REGISTRY[t] = inst
        return cls

    return deco


class Op:
    types: tuple[str, ...] = ()
    view = False
    inplace = False
    shape_only = False
    fuses_act = False

    def infer(self, node: Node, ins: list[Tensor | None]) -> list[tuple[tuple[int, ...], str]]:
        raise NotImplementedError

    def reference(self, node: Node, ins: list[Tensor | None], *arrays: np.ndarray) -> list[np.ndarray]:
        raise NotImplementedError

    def macs(self, node: Node, ins: list[Tensor | None], outs: list[Tensor]) -> int:
        return 0

    def scratch(self, node: Node, ins: list[Tensor | None], outs: list[Tensor]) -> int:
        return 0

    def fold_cost(self, node: Node, ins: list[Tensor | None], outs: list[Tensor], loops: int = 0) -> int:
        """Work of evaluating `reference` on constant inputs (limits.MAX_FOLD_COST):
        multiply-adds plus output elements; ops whose reference loops in Python
        add those `loops` iterations, weighted (each costs a numpy call)."""
        return self.macs(node, ins, outs) + sum(t.size for t in outs) + 4096 * loops

    def emit(self, node: Node, ins: list[Tensor | None], outs: list[Tensor], k) -> None:
        raise NotImplementedError

    def band_rows(self, node: Node, ins: list[Tensor | None], outs: list[Tensor]):
        """Patch-based execution (planner/tiling.py, ops/tiled.py): the
        vertical geometry (tiling.Rows) when output rows can be computed band
        by band from a band of input 0's rows by this op's own kernel on
        sub-views (NHWC rows), else a short reason why not."""
        return NOT_TILED.format(node.op_type)

    def band_node(self, node: Node, ins: list[Tensor | None], outs: list[Tensor], c0: int, c1: int,
                  x: Tensor, y: Tensor) -> Node:
        """The node computing output rows [c0, c1) of `node` from input x (a
        band of input 0's rows) into y (those output rows): `node` with the
        band's padding (only for ops whose band_rows returns Rows)."""
        raise NotImplementedError

    def can_inplace(self, node: Node) -> bool:
        """Whether this node may write output 0 over an input (see `inplace`)."""
        return self.inplace

    def known_outputs(self, node: Node, ins: list[Tensor | None]) -> dict[int, np.ndarray]:
        """Outputs whose value does not depend on the run-time inputs (Dropout's
        mask at inference), by output index. The loader makes them constants
        and detaches them from the node."""
        return {}

    def check(self, node: Node, ins: list[Tensor | None]) -> None:
        """Raise UnsupportedOpError (via `unsupported`) for attribute values or
        dtypes this op cannot compile. Called before `infer`."""


def evaluate(op: Op, n: Node, ins, outs) -> list:
    """op's reference on constant inputs. Empty tensors (a dimension 0) are
    legal ONNX but most references assume data (a max over nothing): a
    failure there is the model's degenerate input, said so; any other
    failure is a bug and propagates."""
    try:
        with np.errstate(all="ignore"):
            return op.reference(n, ins, *[t.data if t is not None else None for t in ins])
    except (ValueError, IndexError, ZeroDivisionError) as e:
        if any(t is not None and t.size == 0 for t in list(ins) + list(outs)):
            raise ShapeError(f"node '{n.name}' ({n.op_type}): cannot be evaluated on an empty tensor "
                             f"({type(e).__name__}: {e})") from None
        raise


def unsupported(node: Node, why: str) -> UnsupportedOpError:
    return UnsupportedOpError([f"node '{node.name}' ({node.op_type}): {why}"])


def invalid(node: Node, why: str) -> ModelLoadError:
    """An attribute or constant value the op's definition forbids (the model is invalid)."""
    return ModelLoadError(f"node '{node.name}' ({node.op_type}): {why}")


def shape_error(node: Node, why: str) -> ShapeError:
    return ShapeError(f"node '{node.name}' ({node.op_type}): {why}")


def require_float(node: Node, ins: list[Tensor | None], *idx: int) -> None:
    for i in idx or range(len(ins)):
        t = ins[i] if i < len(ins) else None
        if t is not None and t.dtype != "float32":
            raise unsupported(node, f"input {i} '{t.name}' is {t.dtype}; this op runs on float32")


def const_ints(node: Node, t: Tensor | None, what: str) -> list[int] | None:
    """Integer list held by a constant input (e.g. Reshape's shape); None when
    the input is absent; an error when it is present but not constant."""
    if t is None:
        return None
    if not t.is_const:
        raise unsupported(node, f"{what} '{t.name}' must be a constant (computed at run time here)")
    if t.data.dtype.kind not in "iub":
        raise shape_error(node, f"{what} '{t.name}' must hold integers, it is {t.dtype}")
    return [int(v) for v in np.asarray(t.data).reshape(-1)]


def const_float(node: Node, t: Tensor | None, what: str, default: float) -> float:
    if t is None:
        return default
    if not t.is_const:
        raise unsupported(node, f"{what} '{t.name}' must be a constant")
    if t.data.size != 1:
        raise shape_error(node, f"{what} '{t.name}' must hold one value, it holds {t.data.size}")
    return float(np.asarray(t.data).reshape(-1)[0])


def norm_axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:   # (a scalar has no axis: every caller indexes the shape with it)
        raise shape_error(node, f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def apply_act(y: np.ndarray, act: tuple[float, float] | None) -> np.ndarray:
    """The fused clamp, as the kernels apply it (after everything else)."""
    if act is None:
        return y
    lo, hi = act
    return np.minimum(np.maximum(y, np.float32(lo)), np.float32(hi)).astype(y.dtype)


def broadcast_shape(node: Node, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise shape_error(node, "shapes " + " and ".join(str(list(s)) for s in shapes)
                          + " do not broadcast") from None
