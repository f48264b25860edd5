"""Patch-based execution: a run of convolutions computed band by band.

A tiled region is a chain of layers (each reads the previous one's output)
executed in horizontal bands of the last layer's output rows: for each band,
every layer computes the rows the band needs, from the first layer (reading
the region's input, whole in the arena) to the last (writing the band's rows
of the region's output, whole in the arena). The intermediate tensors never
exist whole: layer j keeps only the rows of the current band in a buffer of
`rows[j]` rows. NHWC rows are contiguous, so a band of a tensor is a plain
sub-view (pointer + row offset) and every layer runs its own kernel on that
sub-view with the band's padding (kernels stay unaware of tiling).

Bands overlap (the halo: a 3x3 layer needs one row above and below). Per
layer the halo rows are either
- kept ("cache", StreamNet's stream buffer): at the start of a band the rows
  the new band still needs are moved to the top of the buffer and only new
  rows are computed; no extra MACs, but the buffer lives through the whole
  region;
- recomputed ("recompute", MCUNetV2's patches): every band computes all its
  rows again; extra MACs, but the buffer lives only from its layer to the
  next, so buffers of non-neighbouring layers share bytes.

Everything here is arithmetic on rows (the vertical geometry of each layer,
`Rows`); the op (ops/tiled.py) turns a `Schedule` into kernel calls and the
tiling pass (passes/tile.py) chooses regions, band heights and halo modes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .windows import Order


@dataclass(frozen=True)
class Rows:
    """The vertical geometry of one layer: output row o reads input rows
    [o s - pt, o s - pt + k) (k: the dilated kernel extent), clipped to the
    input's h_in rows; row_in / row_out bytes per row; macs and output
    elements per output row; reread: the kernel's cost (instructions) per
    input byte a band reads again (row copies, conversions)."""

    k: int
    s: int
    pt: int
    h_in: int
    h_out: int
    row_in: int
    row_out: int
    macs_row: int
    outs_row: int = 0
    reread: float = 0.5

    def reads(self, lo: int, hi: int) -> tuple[int, int]:
        """Input rows [r0, r1) that output rows [lo, hi) read (empty: lo >= hi)."""
        if lo >= hi:
            return (0, 0)
        return max(0, lo * self.s - self.pt), min(self.h_in, (hi - 1) * self.s - self.pt + self.k)

    def pads(self, lo: int, hi: int) -> tuple[int, int]:
        """(top, bottom) padding of the sub-convolution computing rows [lo, hi)."""
        return max(0, self.pt - lo * self.s), max(0, (hi - 1) * self.s - self.pt + self.k - self.h_in)


@dataclass(frozen=True)
class Step:
    """One kernel call of a band: layer `layer` computes its output rows
    [c0, c1) from input rows [r0, r1). The input rows start at row `src_at`
    of their place (the region input for layer 0, else buffer layer-1); the
    output rows go to row `dst_at` of theirs (buffer layer, or the region
    output for the last layer)."""

    layer: int
    c0: int
    c1: int
    r0: int
    r1: int
    src_at: int
    dst_at: int


@dataclass(frozen=True)
class Move:
    """Before a band: rows [src, src + n) of buffer `buf` move to its row 0
    (the halo rows the band keeps)."""

    buf: int
    src: int
    n: int


@dataclass
class Band:
    moves: list[Move]
    steps: list[Step]

@dataclass
class Schedule:
    layers: list[Rows]
    band: int                       # output rows of the last layer per band
    cache: tuple[bool, ...]         # per buffer (layers 0 .. L-2): halo kept (True) or recomputed
    bands: list[Band]
    rows: list[int]                 # per buffer: rows it holds at most
    need: list[list[tuple[int, int]]] = field(default_factory=list)   # per band, per layer: rows needed

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def buffer_bytes(self) -> list[int]:
        return [r * self.layers[j].row_out for j, r in enumerate(self.rows)]

    def computed_rows(self) -> list[int]:
        """Rows each layer computes over the whole region (with recomputation)."""
        out = [0] * self.n_layers
        for b in self.bands:
            for s in b.steps:
                out[s.layer] += s.c1 - s.c0
        return out

    def extra_macs(self) -> int:
        """MACs beyond the untiled layers' (recomputed halo rows; rows no
        band needs are not computed at all, which counts negative)."""
        return sum((n - ly.h_out) * ly.macs_row for n, ly in zip(self.computed_rows(), self.layers))

    def moved_bytes(self) -> int:
        return sum(m.n * self.layers[m.buf].row_out for b in self.bands for m in b.moves)

    def reread_bytes(self) -> int:
        """Input bytes the kernels read beyond one read per row (each call
        reads its window rows again: the halo's cost in data movement)."""
        seen = [0] * self.n_layers
        for b in self.bands:
            for s in b.steps:
                seen[s.layer] += s.r1 - s.r0
        return sum((n - ly.h_in) * ly.row_in for n, ly in zip(seen, self.layers) if n > ly.h_in)

    def calls(self) -> int:
        return sum(len(b.steps) for b in self.bands)

    def input_last_read(self) -> np.ndarray:
        """Per region-input row: the last band reading it (-1: none)."""
        last = np.full(self.layers[0].h_in, -1, np.int64)
        for i, b in enumerate(self.bands):
            for s in b.steps:
                if s.layer == 0:
                    last[s.r0:s.r1] = i
        return last

    def output_band(self) -> np.ndarray:
        """Per region-output row: the band writing it."""
        ws = np.full(self.layers[-1].h_out, -1, np.int64)
        for i, b in enumerate(self.bands):
            for s in b.steps:
                if s.layer == self.n_layers - 1:
                    ws[s.c0:s.c1] = i
        return ws

    def order(self, what: str = "") -> Order:
        """The region's read/write order on its input and output (bytes):
        band by band, each band's input rows read before its output rows are
        written (planner/windows.py)."""
        lr = np.repeat(self.input_last_read(), self.layers[0].row_in)
        ws = np.repeat(self.output_band(), self.layers[-1].row_out)
        return Order(ws, lr, what or f"tiled: {len(self.bands)} bands of {self.band} rows",
                     dict(model="tiled", bands=[[(s.r0, s.r1) for s in b.steps if s.layer == 0] for b in self.bands],
                          out=[[(s.c0, s.c1) for s in b.steps if s.layer == self.n_layers - 1] for b in self.bands],
                          row_in=self.layers[0].row_in, row_out=self.layers[-1].row_out))

    def signature(self, i: int) -> tuple:
        """What band i's code depends on apart from where it reads the region
        input and writes the region output: bands with equal signatures share
        one loop body."""
        last = self.n_layers - 1
        b = self.bands[i]
        return (tuple(b.moves),
                tuple((s.layer, s.c1 - s.c0, s.r1 - s.r0, self.layers[s.layer].pads(s.c0, s.c1),
                       s.src_at if s.layer else None, s.dst_at if s.layer < last else None) for s in b.steps))

    def groups(self) -> list[tuple[int, int]]:
        """Runs of consecutive bands [first, last] with one signature whose
        region-input and region-output rows advance by a constant step (one
        loop in the generated code)."""
        def pos(b):
            return (tuple(s.r0 for s in b.steps if s.layer == 0), tuple(s.c0 for s in b.steps
                                                                         if s.layer == self.n_layers - 1))
        out, i = [], 0
        while i < len(self.bands):
            j = i
            sig = self.signature(i)
            while j + 1 < len(self.bands) and self.signature(j + 1) == sig:
                if j > i and _delta(pos(self.bands[j + 1]), pos(self.bands[j])) != \
                        _delta(pos(self.bands[i + 1]), pos(self.bands[i])):
                    break
                j += 1
            out.append((i, j))
            i = j + 1
        return out


def _delta(a, b):
    return tuple(tuple(x - y for x, y in zip(p, q)) for p, q in zip(a, b))


def needs(layers: list[Rows], band: int) -> list[list[tuple[int, int]]]:
    """Per band, per layer: the output rows [lo, hi) of that layer the band
    needs (the last layer: the band's own rows)."""
    h = layers[-1].h_out
    out = []
    for b0 in range(0, h, band):
        rows = [(0, 0)] * len(layers)
        rows[-1] = (b0, min(h, b0 + band))
        for j in range(len(layers) - 1, 0, -1):
            rows[j - 1] = layers[j].reads(*rows[j])
        out.append(rows)
    return out


def schedule(layers: list[Rows], band: int, cache) -> Schedule:
    """The bands of a region whose last layer's output is split into bands
    of `band` rows; cache[j] (j < L - 1): buffer j keeps its halo rows."""
    n = len(layers)
    cache = tuple(bool(c) for c in cache)
    assert len(cache) == n - 1
    need = needs(layers, band)
    done = [0] * n          # rows computed so far (cache mode: the next new row)
    prev = [(0, 0)] * n     # rows the buffer held in the previous band
    bands = []
    rows = [0] * (n - 1)
    for nb in need:
        moves, steps = [], []
        for j in range(n - 1):
            lo, hi = nb[j]
            rows[j] = max(rows[j], hi - lo)
            if cache[j] and prev[j][1] > lo and lo > prev[j][0]:
                moves.append(Move(j, lo - prev[j][0], prev[j][1] - lo))
        for j in range(n):
            lo, hi = nb[j]
            c0 = max(lo, done[j]) if (j < n - 1 and cache[j]) or j == n - 1 else lo
            if c0 >= hi:
                continue
            r0, r1 = layers[j].reads(c0, hi)
            src_at = r0 if j == 0 else r0 - nb[j - 1][0]
            dst_at = c0 if j == n - 1 else c0 - lo
            steps.append(Step(j, c0, hi, r0, r1, src_at, dst_at))
            done[j] = hi
        for j in range(n - 1):
            prev[j] = nb[j]
        bands.append(Band(moves, steps))
    return Schedule(list(layers), band, cache, bands, rows, need)


def inner_records(s: Schedule, scratch: list[int], align: int = 16) -> list[tuple]:
    """The region's own buffers as planner records over its sub-steps (layer
    j's kernel call is sub-step j): buffer j lives [j, j + 1] when it
    recomputes its halo, the whole region when it keeps it; layer j's kernel
    scratch lives at j. Order: buffers 0 .. L-2, then scratch 0 .. L-1."""
    n = s.n_layers
    rec = []
    for j, nbytes in enumerate(s.buffer_bytes()):
        size = -(-nbytes // align) * align
        rec.append((size, 0, n - 1) if s.cache[j] else (size, j, j + 1))
    for j in range(n):
        rec.append((-(-int(scratch[j]) // align) * align, j, j))
    return rec


def inner_peak(s: Schedule, scratch: list[int]) -> int:
    """Bytes of the region's own buffers and kernel scratch live at once
    (the inner plan's lower bound)."""
    from .algorithms import lower_bound
    return lower_bound(inner_records(s, scratch))


def inner_plan(s: Schedule, scratch: list[int]) -> tuple[list[int], int]:
    """Offsets of the records of inner_records (the smallest of the planner's
    algorithms) and the area's size."""
    from .algorithms import ALGORITHMS, _extent
    rec = inner_records(s, scratch)
    best = None
    for name, fn in ALGORITHMS.items():
        offs = fn(rec)
        size = _extent(rec, offs)
        if best is None or size < best[1]:
            best = (offs, size)
    return best
