"""Offset windows: where an op's output may start relative to an input it
overwrites, derived from the kernel's read/write order.

A kernel's order for one (input, output) pair is an `Order`: the step at
which each output byte is written and the last step at which each input
byte is read (-1: never read), in one step numbering where, within a step,
every read comes before every write. Placing the output at `delta` bytes
from the input's start is safe when no input byte is written (through the
output) before its last read:

    for every output byte a with 0 <= a + delta < in_size:
        write_step[a] >= last_read[a + delta]

The models below describe the kernels' loops (they are the kernels'
contract: a kernel that declares one must never read a byte later, nor
write one earlier, than its model says). `best_delta` picks the safe delta
with the smallest combined extent. tests/test_planner.py replays every
kernel's order on the plan byte by byte (an independent check of this
module and of the planner).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Order:
    write_step: np.ndarray    # int64 [output bytes]
    last_read: np.ndarray     # int64 [input bytes]; -1: never read
    what: str = ""            # for --plan-out: the model's name and parameters

    def safe(self, delta: int) -> bool:
        n_out, n_in = self.write_step.size, self.last_read.size
        a0, a1 = max(0, -delta), min(n_out, n_in - delta)
        if a0 >= a1:
            return True
        return bool(np.all(self.write_step[a0:a1] >= self.last_read[a0 + delta:a1 + delta]))

    def sufficient_delta(self) -> int:
        """The largest delta that keeps every write below every byte still to
        be read (a sufficient condition, cheap: suffix minima over steps)."""
        lr = self.last_read
        if not lr.size or lr.max() < 0 or not self.write_step.size:
            return self.last_read.size
        steps = int(max(lr.max(), self.write_step.max())) + 2
        first_at = np.full(steps, lr.size, np.int64)      # smallest byte last read at step s
        idx = np.arange(lr.size, dtype=np.int64)
        ok = lr >= 0
        np.minimum.at(first_at, lr[ok], idx[ok])
        # min byte read after step s (last read > s): suffix minimum from s + 1
        suff = np.minimum.accumulate(first_at[::-1])[::-1]
        after = np.append(suff[1:], lr.size)
        a = np.arange(self.write_step.size, dtype=np.int64)
        return int(np.min(after[self.write_step] - a - 1))


def _span(delta: int, n_in: int, n_out: int) -> int:
    return max(n_in, delta + n_out) - min(0, delta)


def best_delta(order: Order, align: int, tries: int = 48) -> int | None:
    """The output's offset from the input's (a multiple of align) with the
    smallest combined extent that is safe, or None when only a placement
    without overlap is (the planner then keeps the buffers apart)."""
    n_in, n_out = order.last_read.size, order.write_step.size
    lo = -(-n_out // align) * align           # beyond these the buffers do not overlap
    hi = -(-n_in // align) * align
    # the ideal deltas give max(n_in, n_out); walk outward from them
    ideal = [d for d in range(-lo + align, hi, align)]
    ideal.sort(key=lambda d: (_span(d, n_in, n_out), abs(d), d))
    for d in ideal[:tries]:
        if order.safe(d):
            return d
    d = order.sufficient_delta()
    d = (d // align) * align
    while d > -lo and not order.safe(d):
        d -= align
    return d if d > -lo else None


# ---------------------------------------------------------------------------
# Models of the kernels' orders (NHWC int8 tensors, batch 1 or more)

def _last_cover(n_in: int, n_out: int, k: int, s: int, pad: int) -> np.ndarray:
    """For each input index along one axis, the last output index whose
    window [o s - pad, o s - pad + k) holds it (-1: none)."""
    i = np.arange(n_in)
    o = np.minimum((i + pad) // s, n_out - 1)
    return np.where((o >= 0) & (o * s - pad + k > i) & (o * s - pad <= i), o, -1)


def raster(geo, depthwise: bool, group: int = 1, per_channel: bool = True, what: str = "") -> Order:
    """Output pixels in raster order (batch, row, column). per_channel: each
    output channel m of pixel p is computed and written before channel m + 1
    is read (step p M + m; depthwise reads channel m only, a general conv
    every channel of the window); else pixels in groups of `group` (p //
    group): the group's windows are read (copied) before any of its outputs
    is written."""
    (h, w), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    (dh, dw) = geo.dilations
    c, m, nb = geo.c, geo.m, geo.n
    if (dh, dw) != (1, 1):
        kh, kw = (kh - 1) * dh + 1, (kw - 1) * dw + 1     # conservative: the whole dilated window
    npx = oh * ow
    pix = np.arange(nb * npx, dtype=np.int64)
    if per_channel:
        ws = (pix[:, None] * m + np.arange(m)[None, :]).reshape(-1)
    else:
        ws = np.repeat(pix // group, m)
    ry = _last_cover(h, oh, kh, sh, pt)
    rx = _last_cover(w, ow, kw, sw, pl)
    last_pix = np.where((ry[:, None] >= 0) & (rx[None, :] >= 0), ry[:, None] * ow + rx[None, :], -1)  # [h][w]
    last_pix = (last_pix[None] + (np.arange(nb) * npx)[:, None, None]).reshape(nb, h * w)
    last_pix = np.where(last_pix >= np.arange(nb)[:, None] * npx, last_pix, -1).reshape(-1)
    if per_channel:
        if depthwise:
            mult = m // c
            ch = np.arange(c) * mult + mult - 1                       # the last output channel reading ch
            lr = last_pix[:, None] * m + ch[None, :]
        else:
            lr = np.repeat(last_pix * m + m - 1, c).reshape(-1, c)
        lr = np.where(last_pix[:, None] >= 0, lr, -1).reshape(-1)
    else:
        lr = np.repeat(np.where(last_pix >= 0, last_pix // group, -1), c)
    return Order(ws.astype(np.int64), lr.astype(np.int64), what or f"raster(group={group}, per_channel={per_channel})")


def bands(nb: int, rows: int, cols_in: int, lines: int, cols_out: int, c: int, lb: int, sh: int, pt: int,
          kh: int, nk_extra: int, rin: int, cin: int, rout: int, cout: int, cgroup: int = 4,
          what: str = "") -> Order:
    """Bands of lb output lines; per band, per group of cgroup channels: the
    band's input rows (nk pairs from row l0 sh - pt) of those channels are
    read, then its lines of those channels written (isa/dsp_dw.py's kernel:
    a band of nl lines reads 2 ((nl - 1) sh + kh + nk_extra) // 2 rows).
    Lines and rows may be image columns (byte strides rin/cin, rout/cout)."""
    ng = -(-c // cgroup)
    nband = -(-lines // lb)
    n_in, n_out = nb * rows * cols_in * c, nb * lines * cols_out * c
    ws = np.empty(n_out, np.int64)
    lr = np.full(n_in, -1, np.int64)
    ch = np.arange(c)
    for b in range(nb):
        base = b * nband * ng
        # output line l -> band l // lb
        l_idx = np.arange(lines)[:, None, None]
        x_idx = np.arange(cols_out)[None, :, None]
        addr = b * lines * cols_out * c + l_idx * rout + x_idx * cout + ch[None, None, :]
        ws[addr.reshape(-1)] = (base + (l_idx // lb) * ng + ch[None, None, :] // cgroup).reshape(-1)
        # input row r: the last band whose rows [l0 sh - pt, l0 sh - pt + 2 nk) hold it
        r = np.arange(rows)
        last_band = np.full(rows, -1, np.int64)
        for bi in range(nband):
            r0 = bi * lb * sh - pt
            nl = min(lb, lines - bi * lb)
            r1 = r0 + 2 * (((nl - 1) * sh + kh + nk_extra) >> 1)
            last_band[(r >= r0) & (r < r1)] = bi
        r_idx = r[:, None, None]
        x_idx = np.arange(cols_in)[None, :, None]
        addr = b * rows * cols_in * c + r_idx * rin + x_idx * cin + ch[None, None, :]
        val = np.where(last_band[:, None, None] >= 0,
                       base + last_band[:, None, None] * ng + ch[None, None, :] // cgroup, -1)
        lr[addr.reshape(-1)] = np.broadcast_to(val, addr.shape).reshape(-1)
    return Order(ws, lr, what or f"bands(lb={lb})")
