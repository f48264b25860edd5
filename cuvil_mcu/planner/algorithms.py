"""Offset-assignment algorithms over (size, first, last) records.

Each is a pure function records -> offsets (same order). All place buffers
one at a time at the lowest offset that does not collide with an already
placed buffer whose lifetime overlaps ("first fit"); they differ in the order
they place buffers in. Sizes are already rounded to the alignment, so every
offset stays aligned.

A record may carry a fourth item, its pieces: (rel, size, first, last) per
tensor of a buffer whose tensors overlap by offset windows (an output
written over its input, planner/windows.py). Such a buffer is placed as a
unit, but only its pieces live at a step occupy bytes at that step.
"""
from __future__ import annotations

import random

Record = tuple  # (size, first step, last step (inclusive)[, pieces])


def overlaps(a: Record, b: Record) -> bool:
    return a[1] <= b[2] and b[1] <= a[2]


def pieces(r: Record) -> list[tuple[int, int, int, int]]:
    return list(r[3]) if len(r) > 3 and r[3] else [(0, r[0], r[1], r[2])]


def live_extent(r: Record, s: int) -> int:
    """Bytes of record r occupied at step s (the span of its live pieces)."""
    live = [(a, a + n) for a, n, f, l in pieces(r) if f <= s <= l and n]
    return max(h for _, h in live) - min(lo for lo, _ in live) if live else 0


def lower_bound(records: list[Record]) -> int:
    """Max over steps of the bytes that must be live at once: no plan can do
    better (without splitting buffers or moving tensors)."""
    if not records:
        return 0
    steps = sorted({p[2] for r in records for p in pieces(r)} | {p[3] for r in records for p in pieces(r)})
    return max(live_per_step(records, steps))


def live_per_step(records: list[Record], steps: list[int]) -> list[int]:
    """sum(live_extent(r, s) for r in records) for each s of steps (sorted),
    in one sweep: a plain record adds its size over its lifetime, a record of
    pieces is measured at the steps it spans."""
    from bisect import bisect_left, bisect_right
    delta = [0] * (len(steps) + 1)
    for r in records:
        if len(r) > 3 and r[3]:
            for k in range(bisect_left(steps, r[1]), bisect_right(steps, r[2])):
                ext = live_extent(r, steps[k])
                delta[k] += ext
                delta[k + 1] -= ext
        elif r[0]:
            a, b = bisect_left(steps, r[1]), bisect_right(steps, r[2])
            if a < b:
                delta[a] += r[0]
                delta[b] -= r[0]
    out, run = [], 0
    for d in delta[:-1]:
        run += d
        out.append(run)
    return out


def conflicts(records: list[Record]) -> list[list[int]]:
    """For each record, the others whose lifetimes overlap it (ascending)."""
    import numpy as np
    first = np.array([r[1] for r in records])
    last = np.array([r[2] for r in records])
    meet = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])
    np.fill_diagonal(meet, False)
    return [np.flatnonzero(row).tolist() for row in meet]


def _first_fit(records: list[Record], order: list[int], conf: list[list[int]] | None = None,
               keep: tuple[int, list[int]] = (0, [])) -> list[int]:
    """Place records in `order`, each at the lowest offset free of the placed
    records it overlaps in time. conf: conflicts(records), when the caller
    has it; keep=(k, offsets): the first k of order are placed as in offsets
    (a run whose order began the same way)."""
    conf = conflicts(records) if conf is None else conf
    offsets = [0] * len(records)
    placed = [False] * len(records)
    plain = all(len(r) < 4 or not r[3] for r in records)
    k, prev = keep
    for pos, i in enumerate(order):
        size = records[i][0]
        if size == 0:
            continue
        if pos < k:
            offsets[i] = prev[i]
            placed[i] = True
            continue
        if plain:
            busy = sorted((offsets[j], offsets[j] + records[j][0]) for j in conf[i] if placed[j])
        else:
            # base offsets at which a piece of i would meet a placed piece live at the same time
            busy = sorted((offsets[j] + pa - qa - qn + 1, offsets[j] + pa + pn - qa)
                          for j in conf[i] if placed[j]
                          for pa, pn, pf, pl in pieces(records[j]) if pn
                          for qa, qn, qf, ql in pieces(records[i]) if qn and pf <= ql and qf <= pl)
            busy = [(lo + size - 1, hi) for lo, hi in busy]   # as [lo, hi) ranges of [off, off + size)
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, hi)
        offsets[i] = off
        placed[i] = True
    return offsets


def _extent(records, offsets) -> int:
    return max((o + r[0] for r, o in zip(records, offsets)), default=0)


def greedy_by_size(records: list[Record]) -> list[int]:
    """Largest first (TFLM's GreedyMemoryPlanner, TVM's greedy_by_size)."""
    order = sorted(range(len(records)), key=lambda i: (-records[i][0], records[i][1], i))
    return _first_fit(records, order)


def greedy_by_conflicts(records: list[Record]) -> list[int]:
    """Most-constrained first: buffers overlapping the most bytes of others."""
    conf = conflicts(records)
    pressure = [sum(records[j][0] for j in conf[i]) for i in range(len(records))]
    order = sorted(range(len(records)), key=lambda i: (-pressure[i], -records[i][0], i))
    return _first_fit(records, order, conf)


def linear_scan(records: list[Record]) -> list[int]:
    """In order of first use (what a naive allocator does); a baseline."""
    order = sorted(range(len(records)), key=lambda i: (records[i][1], -records[i][0], i))
    return _first_fit(records, order)


def hill_climb(records: list[Record], iterations: int = 400, seed: int = 0) -> list[int]:
    """Start from greedy_by_size's order and swap pairs while the arena does
    not grow (TVM USMP's hill_climb idea). Seeded: the same input gives the
    same plan. Stops early once the lower bound is reached."""
    n = len(records)
    order = sorted(range(n), key=lambda i: (-records[i][0], records[i][1], i))
    conf = conflicts(records)
    best = _first_fit(records, order, conf)
    best_size = _extent(records, best)
    bound = lower_bound(records)
    if n < 2 or best_size <= bound:
        return best
    rng = random.Random(seed)
    for _ in range(iterations if n <= 300 else iterations // 4):
        a, b = rng.randrange(n), rng.randrange(n)
        if a == b:
            continue
        order[a], order[b] = order[b], order[a]
        # order is best's order with a and b swapped: what comes before both is placed as in best
        offs = _first_fit(records, order, conf, keep=(min(a, b), best))
        size = _extent(records, offs)
        if size <= best_size:
            best, best_size = offs, size
            if size <= bound:
                break
        else:
            order[a], order[b] = order[b], order[a]
    return best


ALGORITHMS = {
    "greedy_by_size": greedy_by_size,
    "greedy_by_conflicts": greedy_by_conflicts,
    "linear_scan": linear_scan,
    "hill_climb": hill_climb,
}
