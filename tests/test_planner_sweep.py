"""The planner's fast paths give what the plain definitions give, on seeded
random records (plain buffers and buffers of pieces, as offset windows
make them): first fit with precomputed conflicts and a reused prefix equals
first fit testing every placed buffer; lower_bound and live_per_step equal
the sum of live_extent at every step; hill_climb (which re-places only
what follows a swap) equals the same search placing every order afresh,
and its plan is valid and no larger than greedy_by_size's."""
from __future__ import annotations

import random

import pytest

from cuvil_mcu.planner import algorithms as A


def naive_first_fit(records, order):
    """First fit as the planner's docstring defines it: lowest offset where
    no placed buffer live at the same time has a byte, piece by piece."""
    offsets, placed = [0] * len(records), []
    for i in order:
        size = records[i][0]
        if size == 0:
            continue
        off = 0
        while True:
            clash = None
            for j in placed:
                if not A.overlaps(records[i], records[j]):
                    continue
                for pa, pn, pf, pl in A.pieces(records[j]):
                    for qa, qn, qf, ql in A.pieces(records[i]):
                        if pn and qn and pf <= ql and qf <= pl and off + qa < offsets[j] + pa + pn \
                                and offsets[j] + pa < off + qa + qn:
                            clash = max(clash or 0, offsets[j] + pa + pn - qa)
            if clash is None:
                break
            off = clash
        offsets[i] = off
        placed.append(i)
    return offsets


def random_records(rng: random.Random, n: int, with_pieces: bool):
    out = []
    for _ in range(n):
        first = rng.randrange(-1, 30)
        last = first + rng.randrange(0, 8)
        size = 16 * rng.randrange(0, 20)
        if with_pieces and size >= 48 and rng.random() < 0.4:
            cut = 16 * rng.randrange(1, size // 16)
            mid = rng.randrange(first, last + 1)
            ps = ((0, cut, first, mid), (size - cut - 16, cut + 16, mid, last))
            out.append((size, first, last, ps))
        else:
            out.append((size, first, last))
    return out


def naive_hill_climb(records, iterations, seed):
    """hill_climb's search (same seeded swaps), every order placed afresh."""
    n = len(records)
    order = sorted(range(n), key=lambda i: (-records[i][0], records[i][1], i))
    best = naive_first_fit(records, order)
    best_size, bound = A._extent(records, best), A.lower_bound(records)
    if n < 2 or best_size <= bound:
        return best
    rng = random.Random(seed)
    for _ in range(iterations):
        a, b = rng.randrange(n), rng.randrange(n)
        if a == b:
            continue
        order[a], order[b] = order[b], order[a]
        offs = naive_first_fit(records, order)
        if A._extent(records, offs) <= best_size:
            best, best_size = offs, A._extent(records, offs)
            if best_size <= bound:
                break
        else:
            order[a], order[b] = order[b], order[a]
    return best


@pytest.mark.parametrize("seed", range(24))
def test_fast_paths_equal_the_definitions(seed):
    rng = random.Random(seed)
    records = random_records(rng, rng.randrange(1, 60), with_pieces=seed % 2 == 1)
    order = list(range(len(records)))
    rng.shuffle(order)
    expect = naive_first_fit(records, order)
    assert A._first_fit(records, order) == expect
    conf = A.conflicts(records)
    k = rng.randrange(len(order) + 1)
    assert A._first_fit(records, order, conf, keep=(k, expect)) == expect
    steps = sorted({p[2] for r in records for p in A.pieces(r)} | {p[3] for r in records for p in A.pieces(r)})
    live = [sum(A.live_extent(r, s) for r in records) for s in steps]
    assert A.live_per_step(records, steps) == live
    assert A.lower_bound(records) == max(live)
    hc = A.hill_climb(records, iterations=60, seed=seed)
    assert hc == naive_hill_climb(records, 60, seed)
    assert A._extent(records, hc) <= A._extent(records, A.greedy_by_size(records))
    for i, a in enumerate(records):   # valid: no two live pieces share a byte
        for j in range(i):
            b = records[j]
            for pa, pn, pf, pl in A.pieces(a):
                for qa, qn, qf, ql in A.pieces(b):
                    if pn and qn and pf <= ql and qf <= pl:
                        assert hc[i] + pa + pn <= hc[j] + qa or hc[j] + qa + qn <= hc[i] + pa, (i, j)
