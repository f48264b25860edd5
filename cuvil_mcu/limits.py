"""Explicit ceilings on what a model may declare, checked before any work
proportional to it (a loop over output positions, an allocation, a header
field that would wrap).

Why these numbers:
- MAX_ELEMENTS: kernels index tensors with int32_t and the header states
  element counts as int32-sized literals, so a tensor holds at most
  2**31 - 1 elements.
- MAX_BYTES: the header's byte counts and arena offsets are uint32_t, so a
  tensor, the arena and the arena plus the kernel stack stay below 4 GiB
  (on every board; a real board's RAM budget is far smaller and is checked
  by boards.check_budget).
- MAX_CONST_BYTES: constants are printed into the header as C text (several
  characters per byte) and a protobuf file cannot exceed 2 GiB; 1 GiB of
  weights is already far beyond any microcontroller's flash. This is the
  ceiling on `host`.
- MAX_FOLD_BYTES / MAX_FOLD_COST: a node whose inputs are all constant is
  evaluated with numpy at compile time only when its result is at most
  64 MiB and its cost (`Op.fold_cost`: multiply-adds plus the reference's
  Python-level loop iterations, weighted) is at most 2**26, well under a
  second; a larger one stays a run-time kernel (with a note) or, for an op
  without a kernel for its inputs, is refused.
- MAX_TABLE_ROWS: Conv border tables, pooling window tables and the
  batch tables of MatMul and pointwise Conv are computed in Python and
  printed into the header, a row per output position along an axis (Conv:
  only the border ones) or per batch entry; 2**16 rows each.
- MAX_WINDOW_BYTES: the planner looks for an in-place offset window
  (planner/windows.py) only between tensors of at most 2 MiB: its kernel
  orders hold 8 bytes per tensor byte. No microcontroller has activations
  that large; bigger host tensors are simply placed apart.
- MAX_RANK: numpy handles 32 dimensions at most (numpy 1.x), and no kernel
  needs more than a handful.
- MAX_NODES: the passes walk the graph per node; 50,000 nodes is far beyond
  any model a microcontroller runs (ResNet-50 has about 200).
- MAX_NAME_IN_MACRO: C99 guarantees string literals of 4,095 characters
  (gcc -pedantic enforces it with -Woverlength-strings); longer tensor names
  are shortened in the header's _NAME macros.
- MAX_MODEL_FILE: protobuf refuses messages of 2 GiB and more; a larger
  .onnx file is not a model, whatever it holds (weights beyond that belong
  in external data files).
"""
from __future__ import annotations

from .errors import CuvilError, ShapeError

MAX_ELEMENTS = 2 ** 31 - 1
MAX_BYTES = 2 ** 32 - 1
MAX_CONST_BYTES = 2 ** 30
MAX_FOLD_BYTES = 64 * 2 ** 20
MAX_FOLD_COST = 2 ** 26
MAX_TABLE_ROWS = 2 ** 16
MAX_WINDOW_BYTES = 2 * 2 ** 20
MAX_RANK = 32
MAX_NODES = 50_000
MAX_NAME_IN_MACRO = 4095
MAX_MODEL_FILE = 2 ** 31 - 1


def human(n: int) -> str:
    """Bytes for a message: 1.00 GiB, 64.0 MiB, 512 B."""
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def elements(shape) -> int:
    """Element count in Python integers (never a fixed-width numpy type)."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def check_shape(shape, itemsize: int, what: str) -> None:
    """Refuse a tensor the header and the kernels cannot address: `what`
    names it (e.g. "node 'conv1' (Conv): output 'y'")."""
    shape = [int(d) for d in shape]
    if len(shape) > MAX_RANK:
        raise ShapeError(f"{what} has rank {len(shape)}; at most {MAX_RANK} dimensions are supported")
    if any(d < 0 for d in shape):
        raise ShapeError(f"{what} has a negative dimension in {shape}")
    n = elements(shape)
    if n > MAX_ELEMENTS:
        raise ShapeError(f"{what} {shape} has {n:,} elements; at most {MAX_ELEMENTS:,} (2**31 - 1) are "
                         f"supported (the kernels index with int32)")
    if any(d > MAX_ELEMENTS for d in shape):   # an empty tensor's other dimensions
        raise ShapeError(f"{what} {shape} has a dimension above {MAX_ELEMENTS:,} (2**31 - 1)")
    if n * itemsize > MAX_BYTES:
        raise ShapeError(f"{what} {shape} takes {human(n * itemsize)}; at most 4 GiB - 1 per tensor "
                         f"(the header's sizes are uint32)")


def check_table_rows(rows: int, what: str) -> None:
    if rows > MAX_TABLE_ROWS:
        raise ShapeError(f"{what} needs a table of {rows:,} rows; at most {MAX_TABLE_ROWS:,} (2**16) "
                         f"are supported")


def check_extent(value: int, what: str) -> None:
    """A declared extent (pad, kernel size, stride, dilation, dimension) that
    output sizes and loop bounds are computed from."""
    if not -MAX_ELEMENTS <= int(value) <= MAX_ELEMENTS:
        raise ShapeError(f"{what} is {int(value):,}; at most {MAX_ELEMENTS:,} (2**31 - 1) is supported")


def fold_refusal(op, node, ins, outs) -> str | None:
    """Why node (all inputs constant) is not evaluated at compile time, or None."""
    size = sum(t.nbytes for t in outs)
    if size > MAX_FOLD_BYTES:
        return (f"its constant result would take {human(size)}, above the constant-folding cap of "
                f"{human(MAX_FOLD_BYTES)}")
    cost = op.fold_cost(node, ins, outs)
    if cost > MAX_FOLD_COST:
        return f"evaluating it at compile time would cost {cost:,} operations (cap {MAX_FOLD_COST:,})"
    return None


def leave_to_run_time(g, op, node, ins, reason: str) -> None:
    """Keep an over-the-cap constant node as a run-time kernel (with a note)
    when its op has one for these inputs (input 0 taken as run-time data);
    otherwise refuse it."""
    from .ir import Tensor
    runtime = list(ins)
    if ins and ins[0] is not None and not op.shape_only:
        runtime[0] = Tensor(ins[0].name, ins[0].shape, ins[0].dtype)
        try:
            op.check(node, runtime)
        except CuvilError:
            pass
        else:
            g.notes.append(f"node '{node.name}' ({node.op_type}): {reason}; it runs at run time instead")
            return
    raise ShapeError(f"node '{node.name}' ({node.op_type}): {reason}, and {node.op_type} has no run-time "
                     f"kernel for these inputs")


def name_in_macro(name: str) -> str:
    """A tensor name as the header's _NAME string holds it: whole when its
    UTF-8 fits MAX_NAME_IN_MACRO bytes, else its head, '...' and 16 hex
    digits of its SHA-256 (still distinct and deterministic)."""
    raw = name.encode("utf-8")
    if len(raw) <= MAX_NAME_IN_MACRO:
        return name
    import hashlib
    tail = "..." + hashlib.sha256(raw).hexdigest()[:16]
    head = raw[:MAX_NAME_IN_MACRO - len(tail)].decode("utf-8", "ignore")
    return head + tail


def check_totals(arena: int, stack: int, constants: int) -> None:
    """The compiled model's RAM and constants against what the header's
    uint32 sizes and offsets hold (every board; a board's own budget is
    boards.check_budget's)."""
    if arena + stack > MAX_BYTES:
        raise ShapeError(f"the arena takes {human(arena)} (+ {stack:,} B of kernel stack); the header's sizes and "
                         f"offsets are uint32, so at most 4 GiB - 1 in all")
    if constants > MAX_CONST_BYTES:
        raise ShapeError(f"the constants take {human(constants)}; at most {human(MAX_CONST_BYTES)} are supported "
                         f"(the ceiling; see cuvil_mcu/limits.py)")
