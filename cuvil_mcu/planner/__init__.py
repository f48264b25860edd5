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

from .. import limits, ops
from ..errors import CuvilError
from ..ir import Graph
from .algorithms import ALGORITHMS, lower_bound, overlaps

ALIGN = 16


def _align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def nbytes(g: Graph, t: str) -> int:
    """Arena bytes of run-time tensor t: its own, or those of the layout a
    kernel stores it in (g.store_bytes, set by each codegen lowering: a
    pointwise layer writing its output as its depthwise consumer's int16
    channel planes, isa/dsp_dw.py)."""
    sb = getattr(g, "store_bytes", None)
    return int(sb[t]) if sb and t in sb else g.tensors[t].nbytes


@dataclass
class Buffer:
    name: str            # root tensor name, or "scratch:<node>"
    size: int            # bytes, rounded up to the alignment
    first: int           # first step it is live (-1: before the first node)
    last: int            # last step it is live
    align: int = ALIGN
    members: list[str] = field(default_factory=list)   # tensors stored here
    # tensors overlapping by offset windows: (rel, size, first, last) per tensor
    pieces: tuple = ()
    rel: dict[str, int] = field(default_factory=dict)  # tensor -> offset in the buffer (0 if absent)

    def record(self) -> tuple:
        return (self.size, self.first, self.last, self.pieces) if self.pieces else (self.size, self.first, self.last)


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
    # outputs written over an input within its offset window (planner/windows.py):
    # node, input, output, delta (output offset - input offset), the kernel order's model
    aliases: list[dict] = field(default_factory=list)
    no_alias_bound: int | None = None   # the lower bound when no output may overlap its input
    variants: dict[str, str] = field(default_factory=dict)   # node -> kernel loop variant its alias needs
    # tiled regions (ops/tiled.py), by node: layers, bands, buffers and their
    # offsets, filled in when the header is rendered
    tiles: dict[str, dict] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({
            "algorithm": self.algorithm,
            "arena_size": self.arena_size,
            "lower_bound": self.lower_bound,
            "alignment": ALIGN,
            "algorithms_tried": self.tried,
            "lower_bound_without_windows": self.no_alias_bound,
            "aliases": self.aliases,
            "tiles": [self.tiles[n] for n in sorted(self.tiles)],
            "scratch": [{"node": n, "offset": self.scratch_offset[n], "bytes": self.scratch_size[n]}
                        for n in sorted(self.scratch_offset, key=lambda n: (self.scratch_offset[n], n))],
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


def buffers(g: Graph, scratch: dict[str, int] | None = None, orders: dict | None = None,
            preserve_inputs: bool = False, aliases: list | None = None, tight: bool = False
            ) -> tuple[list[Buffer], dict[str, str], dict[str, int]]:
    """Analysis: the buffers of graph g, the buffer each run-time tensor lives
    in, and each node's scratch bytes (op.scratch plus `scratch`, node name
    -> bytes the chosen kernels take from the arena). `orders`: node name ->
    {input index: windows.Order or a callable giving one}: the output may be
    written over that input within the window the order allows (see
    windows.py); each alias taken is appended to `aliases`. Tensors of one
    buffer then sit at offsets `Buffer.rel` from its start. tight: each
    output takes the window that keeps its own pair smallest, ignoring the
    rest of its buffer (the bytes each step needs at least: `profile`)."""
    n_steps = len(g.nodes)
    end = n_steps  # graph outputs stay live after the last node
    root: dict[str, str] = {}
    rel: dict[str, int] = {}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    outputs = set(g.outputs)
    life = lifetimes(g)

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

    # per buffer (root): its tensors, the last step any of them is read, and
    # whether one is a graph output: kept as tensors join, so the in-place
    # checks cost the buffer's size, not the graph's (a chain of n in-place
    # nodes was quadratic in n)
    group: dict[str, list[str]] = {r: [t for t in root if root[t] == r] for r in set(root.values())}
    group_read: dict[str, int] = {r: max(last_read.get(t, -1) for t in ms) for r, ms in group.items()}
    group_out: dict[str, bool] = {r: any(t in outputs for t in ms) for r, ms in group.items()}
    scratch_of: dict[str, int] = {}
    # a streaming state output takes its state input's buffer (g.state)
    alias = {out: inp for inp, out, _ in getattr(g, "state", [])}
    for i, n in enumerate(g.nodes):
        op = ops.get(n.op_type)
        ins = [g.tensors[t] if t else None for t in n.inputs]
        outs = [g.tensors[t] for t in n.outputs if t]
        for t in n.inputs:
            if t and t in root:
                live(root[t], i)
        s = op.scratch(n, ins, outs) + (scratch or {}).get(n.name, 0)
        if s:
            scratch_of[n.name] = s
        for j, o in enumerate(n.outputs):
            if not o:
                continue
            r, at = None, 0
            if o in alias:
                r, at = root[alias[o]], rel.get(alias[o], 0)
            elif j == 0 and op.view and ins and ins[0] is not None and not ins[0].is_const:
                r, at = root[ins[0].name], rel.get(ins[0].name, 0)
            elif j == 0 and op.can_inplace(n):
                t = _inplace_input(g, n, i, root, group_read, group_out)
                if t is not None:
                    r, at = root[t], rel.get(t, 0)
            if r is None and j == 0 and orders and n.name in orders:
                found = _window_alias(g, n, i, orders[n.name], root, group, rel, life, outputs, preserve_inputs,
                                      tight)
                if found is not None:
                    t, delta, variant, what, params = found
                    r, at = root[t], rel.get(t, 0) + delta
                    if aliases is not None:
                        aliases.append({"node": n.name, "input": t, "output": o, "delta": delta,
                                        "variant": variant, "order": what, "model": params})
            root[o] = r = r if r is not None else o
            group.setdefault(r, []).append(o)
            group_read[r] = max(group_read.get(r, -1), last_read.get(o, -1))
            group_out[r] = group_out.get(r, False) or o in outputs
            rel[o] = at
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
    bufs = []
    for r, ms in members.items():
        base = min(rel.get(t, 0) for t in ms)
        for t in ms:
            rel[t] = rel.get(t, 0) - base
        if all(rel[t] == 0 for t in ms):
            bufs.append(Buffer(r, _align(max(nbytes(g, t) for t in ms)), first[r], last[r], ALIGN, sorted(ms)))
            continue
        pcs = tuple(sorted((rel[t], _align(nbytes(g, t)), max(life[t][0], first[r]), life[t][1])
                           for t in ms))
        size = max(a + n for a, n, _, _ in pcs)
        bufs.append(Buffer(r, _align(size), first[r], last[r], ALIGN, sorted(ms), pcs,
                           {t: rel[t] for t in ms}))
    step_of = {n.name: i for i, n in enumerate(g.nodes)}
    for node, size in scratch_of.items():
        bufs.append(Buffer(f"scratch:{node}", _align(size), step_of[node], step_of[node]))
    return bufs, root, scratch_of


def _window_alias(g, n, i, orders, root, groups, rel, life, outputs, preserve_inputs, tight=False):
    """(input, delta, variant) when output 0 of node n (step i) can be
    written over one of its inputs: the input dies here, no other tensor of
    its buffer that is still needed shares the bytes the output would take,
    and the kernel's order (one per loop variant) gives a window
    (windows.best_delta). Of several, the one whose buffer stays smallest."""
    from .windows import best_delta
    out = g.tensors[n.outputs[0]]
    best = None
    for k, (idx, variant, order) in enumerate(orders):
        if idx >= len(n.inputs) or not n.inputs[idx]:
            continue
        t = n.inputs[idx]
        src = g.tensors[t]
        if src.is_const or t not in root or n.inputs.count(t) != 1 or not out.nbytes or not src.nbytes:
            continue
        if nbytes(g, t) != src.nbytes or nbytes(g, out.name) != out.nbytes:
            continue       # stored in a kernel's own layout (planes): the orders model NHWC bytes
        if max(out.nbytes, src.nbytes) > limits.MAX_WINDOW_BYTES:
            continue       # the orders hold 8 B per byte and the search grows with the square of the size
        r = root[t]
        group = groups[r]
        same = [m for m in group if rel.get(m, 0) == rel.get(t, 0) and g.tensors[m].nbytes == src.nbytes]
        if any(life[m][1] > i or m in outputs for m in same):
            continue       # t (or a view of it) is read later or must survive the run
        if any(m in g.inputs for m in same) and preserve_inputs:
            continue
        if callable(order):
            order = order()
            orders[k] = (idx, variant, order)
        at = rel.get(t, 0)
        ext = (min(rel.get(m, 0) for m in group), max(rel.get(m, 0) + nbytes(g, m) for m in group))
        blocked = [(rel.get(m, 0), rel.get(m, 0) + nbytes(g, m)) for m in group
                   if m not in same and life[m][1] >= i]
        delta = best_delta(order, ALIGN) if tight else best_delta(order, ALIGN, at, ext, blocked)
        if delta is None:
            continue
        lo = at + delta
        hi = lo + out.nbytes
        span = max(ext[1], hi) - min(ext[0], lo)
        if best is None or (span, -abs(delta)) < best[0]:   # as windows.best_delta: room for the next layer
            best = ((span, -abs(delta)), t, delta, variant, getattr(order, "what", ""), getattr(order, "params", None))
    return None if best is None else best[1:]


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


def _inplace_input(g, n, i, root, group_read, group_out) -> str | None:
    """The input whose bytes output 0 of node n may reuse: same size and
    dtype, its buffer read by nobody after step i (group_read: the last read
    of any tensor of a buffer), not a graph input (the caller may reuse its
    input) nor a graph output (group_out)."""
    out = g.tensors[n.outputs[0]]
    for t in n.inputs:
        if not t or t not in root:
            continue
        src = g.tensors[t]
        if src.nbytes != out.nbytes or src.dtype != out.dtype:
            continue
        if nbytes(g, t) != src.nbytes or nbytes(g, out.name) != out.nbytes:
            continue
        r = root[t]
        if r in g.inputs or group_out[r]:
            continue
        if group_read[r] <= i and n.inputs.count(t) == 1:
            return t
    return None


def plan(g: Graph, algorithm: str = "auto", scratch: dict[str, int] | None = None, orders: dict | None = None,
         preserve_inputs: bool = False) -> Plan:
    """Offsets for every run-time tensor and kernel scratch. scratch / orders:
    see `buffers` (what the kernels chosen for each node need and allow)."""
    aliases: list[dict] = []
    extra = scratch
    bufs, root, scratch = buffers(g, extra, orders, preserve_inputs, aliases)
    records = [b.record() for b in bufs]
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
    rel = {t: off for b in bufs for t, off in b.rel.items()}
    if aliases:
        # the bound without windows: every tensor apart from the one it is written over
        plain, _, _ = buffers(g, extra)
        no_alias = lower_bound([b.record() for b in plain])
    else:
        no_alias = None
    return Plan(
        algorithm=chosen,
        arena_size=_extent(records, offsets_list),
        lower_bound=lower_bound(records),
        buffers=bufs,
        offsets=offsets,
        tensor_offset={t: offsets[r] + rel.get(t, 0) for t, r in root.items()},
        scratch_offset={node: offsets[f"scratch:{node}"] for node in scratch},
        scratch_size=scratch,
        tried=sizes,
        tensor_life=lifetimes(g),
        tensor_bytes={t: nbytes(g, t) for t in root},
        aliases=aliases,
        no_alias_bound=no_alias,
        variants={a["node"]: a["variant"] for a in aliases if a["variant"]},
    )


def profile(g: Graph, scratch: dict[str, int] | None = None, orders: dict | None = None,
            preserve_inputs: bool = False) -> dict[int, int]:
    """Bytes each step needs at least (-1: before the first node, len(nodes):
    after the last), with every output written over its input as tightly as
    its own window allows. A plan's own steps may take more (its windows
    leave room for the next layer where the arena allows); the tiling pass
    estimates from this."""
    from .algorithms import live_extent
    bufs, _, _ = buffers(g, scratch, orders, preserve_inputs, tight=True)
    recs = [b.record() for b in bufs]
    return {s: sum(live_extent(r, s) for r in recs) for s in range(-1, len(g.nodes) + 1)}


def room(g: Graph, p: Plan) -> dict[str, int]:
    """Per node: arena bytes free at its step (arena minus the bytes live
    there, its own scratch not counted): scratch a kernel may take there
    without (fragmentation aside) growing the arena."""
    from .algorithms import live_extent, live_per_step
    records = {b.name: b.record() for b in p.buffers}
    live = live_per_step(list(records.values()), list(range(len(g.nodes))))
    out = {}
    for i, n in enumerate(g.nodes):
        own = records.get(f"scratch:{n.name}")
        used = live[i] - (live_extent(own, i) if own is not None else 0)
        out[n.name] = max(0, p.arena_size - used)
    return out


def gaps(g: Graph, p: Plan) -> dict[str, int]:
    """Per node: the largest contiguous run of arena bytes free at its step
    (its own scratch not counted): a buffer that size fits there without
    moving anything else."""
    out = {}
    for i, n in enumerate(g.nodes):
        busy = []
        for b in p.buffers:
            if b.name == f"scratch:{n.name}":
                continue
            off = p.offsets[b.name]
            for rel, size, first, last in (b.pieces or ((0, b.size, b.first, b.last),)):
                if first <= i <= last and size:
                    busy.append((off + rel, off + rel + size))
        busy.sort()
        best, at = 0, 0
        for lo, hi in busy:
            best = max(best, lo - at)
            at = max(at, hi)
        out[n.name] = max(best, p.arena_size - at)
    return out


def _extent(records, offsets) -> int:
    return max((off + r[0] for r, off in zip(records, offsets)), default=0)


__all__ = ["ALGORITHMS", "Buffer", "Plan", "buffers", "gaps", "lifetimes", "lower_bound", "nbytes", "overlaps", "plan",
           "profile", "room"]
