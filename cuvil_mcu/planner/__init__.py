"""Static memory planning: every run-time tensor gets a fixed offset in one arena.

Three stages kept apart (as TVM's USMP does):
  analysis  `buffers(graph)`     -> Buffer records (size, first, last, alignment)
                                    plus which tensors share a buffer (views,
                                    in-place ops) and kernel scratch;
  algorithm `ALGORITHMS[name]`   -> offsets for the records (pure function);
  apply     `plan(graph, algo)`  -> Plan with per-tensor offsets and sizes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from .. import ops
from ..errors import CuvilError
from ..ir import Graph
from .algorithms import ALGORITHMS, lower_bound, overlaps

ALIGN = 16


def _align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass
class Buffer:
    name: str            # root tensor name, or "scratch:<node>"
    size: int            # bytes, rounded up to the alignment
    first: int           # first step it is live (-1: before the first node)
    last: int            # last step it is live
    align: int = ALIGN
    members: list[str] = field(default_factory=list)   # tensors stored here


@dataclass
class Plan:
    algorithm: str
    arena_size: int
    lower_bound: int
    buffers: list[Buffer]
    offsets: dict[str, int]            # buffer name -> offset
    tensor_offset: dict[str, int]      # run-time tensor -> offset
    scratch_offset: dict[str, int]     # node name -> scratch offset
    scratch_size: dict[str, int]
    tried: dict[str, int] = field(default_factory=dict)  # algorithm -> arena size
    tensor_life: dict[str, tuple[int, int]] = field(default_factory=dict)  # tensor -> (first, last) step
    tensor_bytes: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({
            "algorithm": self.algorithm,
            "arena_size": self.arena_size,
            "lower_bound": self.lower_bound,
            "alignment": ALIGN,
            "algorithms_tried": self.tried,
            "buffers": [
                {"name": b.name, "offset": self.offsets[b.name], "size": b.size,
                 "first": b.first, "last": b.last, "tensors": b.members}
                for b in sorted(self.buffers, key=lambda b: (self.offsets[b.name], b.first))
            ],
            # Every run-time tensor: where it lives and from which step (-1:
            # before the first node) to which it must stay intact.
            "tensors": [
                {"name": t, "offset": self.tensor_offset[t], "bytes": self.tensor_bytes.get(t),
                 "buffer": self._buffer_of(t),
                 "first": self.tensor_life.get(t, (None, None))[0], "last": self.tensor_life.get(t, (None, None))[1]}
                for t in sorted(self.tensor_offset, key=lambda t: (self.tensor_offset[t], t))
            ],
        }, indent=1) + "\n"

    def _buffer_of(self, tensor: str) -> str | None:
        return next((b.name for b in self.buffers if tensor in b.members), None)

    def ascii(self, width: int = 64) -> str:
        """TFLM-style picture: one row per step, one column per arena slice."""
        if not self.buffers or self.arena_size == 0:
            return "(empty arena)\n"
        steps = range(min(b.first for b in self.buffers), max(b.last for b in self.buffers) + 1)
        letters = {b.name: chr(ord("A") + i % 26) for i, b in enumerate(self.buffers)}
        rows = []
        for s in steps:
            row = ["."] * width
            for b in self.buffers:
                if b.first <= s <= b.last and b.size:
                    lo = self.offsets[b.name] * width // self.arena_size
                    hi = max(lo + 1, (self.offsets[b.name] + b.size) * width // self.arena_size)
                    for c in range(lo, min(hi, width)):
                        row[c] = letters[b.name]
            rows.append(f"{s:4d} " + "".join(row))
        return "\n".join(rows) + "\n"


def buffers(g: Graph) -> tuple[list[Buffer], dict[str, str], dict[str, int]]:
    """Analysis: the buffers of graph g, the buffer each run-time tensor lives
    in, and each node's scratch bytes."""
    n_steps = len(g.nodes)
    end = n_steps  # graph outputs stay live after the last node
    root: dict[str, str] = {}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    outputs = set(g.outputs)

    def live(r: str, step: int) -> None:
        first[r] = min(first.get(r, step), step)
        last[r] = max(last.get(r, step), step)

    last_read: dict[str, int] = {}
    for i, n in enumerate(g.nodes):
        for t in n.inputs:
            if t:
                last_read[t] = i

    for name in g.inputs:
        root[name] = name
        live(name, -1)
    for name in g.outputs:  # constant outputs are copied into the arena
        if g.tensors[name].is_const:
            root[name] = name
            live(name, -1)

    scratch: dict[str, int] = {}
    # a streaming state output takes its state input's buffer (g.state)
    alias = {out: inp for inp, out, _ in getattr(g, "state", [])}
    for i, n in enumerate(g.nodes):
        op = ops.get(n.op_type)
        ins = [g.tensors[t] if t else None for t in n.inputs]
        outs = [g.tensors[t] for t in n.outputs if t]
        for t in n.inputs:
            if t and t in root:
                live(root[t], i)
        s = op.scratch(n, ins, outs)
        if s:
            scratch[n.name] = s
        for j, o in enumerate(n.outputs):
            if not o:
                continue
            r = None
            if o in alias:
                r = root[alias[o]]
            elif j == 0 and op.view and ins and ins[0] is not None and not ins[0].is_const:
                r = root[ins[0].name]
            elif j == 0 and op.can_inplace(n):
                r = _inplace_root(g, n, i, root, last_read, outputs)
            root[o] = r if r is not None else o
            live(root[o], i)
    for name in g.outputs:
        live(root[name], end)
    # A buffer is live until the last read of any of its members.
    for t, step in last_read.items():
        if t in root:
            live(root[t], step)

    members: dict[str, list[str]] = {}
    for t, r in root.items():
        members.setdefault(r, []).append(t)
    bufs = [Buffer(r, _align(max(g.tensors[t].nbytes for t in ms)), first[r], last[r], ALIGN, sorted(ms))
            for r, ms in members.items()]
    step_of = {n.name: i for i, n in enumerate(g.nodes)}
    for node, size in scratch.items():
        bufs.append(Buffer(f"scratch:{node}", _align(size), step_of[node], step_of[node]))
    return bufs, root, scratch


def lifetimes(g: Graph) -> dict[str, tuple[int, int]]:
    """(first, last) step of every run-time tensor: produced at `first` (-1:
    a graph input, or a constant output copied in), read up to `last`
    (len(nodes) for graph outputs, which stay live after the run)."""
    life: dict[str, list[int]] = {}
    for name in g.inputs:
        life[name] = [-1, -1]
    for name in g.outputs:
        if g.tensors[name].is_const:
            life[name] = [-1, -1]
    for i, n in enumerate(g.nodes):
        for t in n.inputs:
            if t in life:
                life[t][1] = max(life[t][1], i)
        for o in n.outputs:
            if o:
                life[o] = [i, i]
    for name in g.outputs:
        life[name][1] = len(g.nodes)
    return {t: (a, b) for t, (a, b) in life.items()}


def _inplace_root(g, n, i, root, last_read, outputs) -> str | None:
    """The buffer output 0 of node n may reuse: an input of the same size and
    dtype whose buffer nobody reads after step i, that is not a graph input
    (the caller may reuse its input) nor a graph output."""
    out = g.tensors[n.outputs[0]]
    for t in n.inputs:
        if not t or t not in root:
            continue
        src = g.tensors[t]
        if src.nbytes != out.nbytes or src.dtype != out.dtype:
            continue
        r = root[t]
        group = [m for m, rr in root.items() if rr == r]
        if r in g.inputs or any(m in outputs for m in group):
            continue
        if all(last_read.get(m, -1) <= i for m in group) and n.inputs.count(t) == 1:
            return r
    return None


def plan(g: Graph, algorithm: str = "auto") -> Plan:
    bufs, root, scratch = buffers(g)
    records = [(b.size, b.first, b.last) for b in bufs]
    if algorithm == "auto":
        tried = {name: fn(records) for name, fn in ALGORITHMS.items()}
        sizes = {name: _extent(records, offs) for name, offs in tried.items()}
        best = min(sizes, key=lambda k: (sizes[k], list(ALGORITHMS).index(k)))
        offsets_list, chosen = tried[best], best
    else:
        if algorithm not in ALGORITHMS:
            raise CuvilError(f"unknown planner algorithm '{algorithm}' (choose from auto, {', '.join(ALGORITHMS)})")
        offsets_list, chosen = ALGORITHMS[algorithm](records), algorithm
        sizes = {algorithm: _extent(records, offsets_list)}
    offsets = {b.name: off for b, off in zip(bufs, offsets_list)}
    return Plan(
        algorithm=chosen,
        arena_size=_extent(records, offsets_list),
        lower_bound=lower_bound(records),
        buffers=bufs,
        offsets=offsets,
        tensor_offset={t: offsets[r] for t, r in root.items()},
        scratch_offset={node: offsets[f"scratch:{node}"] for node in scratch},
        scratch_size=scratch,
        tried=sizes,
        tensor_life=lifetimes(g),
        tensor_bytes={t: g.tensors[t].nbytes for t in root},
    )


def _extent(records, offsets) -> int:
    return max((off + size for (size, _, _), off in zip(records, offsets)), default=0)


__all__ = ["ALGORITHMS", "Buffer", "Plan", "buffers", "lifetimes", "lower_bound", "overlaps", "plan"]
