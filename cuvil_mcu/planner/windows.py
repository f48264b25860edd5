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

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass
class Order:
    write_step: np.ndarray    # int64 [output bytes]
    last_read: np.ndarray     # int64 [input bytes]; -1: never read
    what: str = ""            # for --plan-out: the kernel and its order
    params: dict | None = None   # the model and its parameters (--plan-out; the tests replay them)

    def key(self) -> bytes:
        """A digest of the order's content."""
        if getattr(self, "_key", None) is None:
            h = hashlib.sha1(self.write_step.tobytes())
            h.update(b"|")
            h.update(self.last_read.tobytes())
            self._key = h.digest()
        return self._key

    def safe(self, delta: int) -> bool:
        n_out, n_in = self.write_step.size, self.last_read.size
        a0, a1 = max(0, -delta), min(n_out, n_in - delta)
        if a0 >= a1:
            return True
        # every 61st byte first: most unsafe deltas fail there at a fraction of the cost
        if a1 - a0 > 4096 and not np.all(self.write_step[a0:a1:61] >= self.last_read[a0 + delta:a1 + delta:61]):
            return False
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


_BEST: dict = {}       # best_delta's answers by the order's content (plans are made several times per compile)

# The search compares at most this many output bytes in all (a big host
# tensor would otherwise take time quadratic in its size); every model a
# microcontroller runs stays far below it (mobilenet_v2 0.35 int8: 0.8e9 at most).
SEARCH_BUDGET = 2 ** 30


def best_delta(order: Order, align: int, at: int = 0, extent: tuple[int, int] | None = None,
               blocked: list[tuple[int, int]] = (), tries: int = 64) -> int | None:
    key = (order.key(), align, at, extent, tuple(blocked), tries)
    if key not in _BEST:
        if len(_BEST) > 4096:
            _BEST.clear()
        _BEST[key] = _best_delta(order, align, at, extent, blocked, tries)
    return _BEST[key]


def _best_delta(order: Order, align: int, at: int = 0, extent: tuple[int, int] | None = None,
                blocked: list[tuple[int, int]] = (), tries: int = 64) -> int | None:
    """The output's offset from the input's (a multiple of align) that is
    safe and keeps the buffer smallest: the input sits at `at` in a buffer
    spanning `extent` (default: the input alone) in which the `blocked`
    ranges hold other tensors still needed; the result minimises the span
    with the output added, then moves as far as it may inside it (so the
    next layer, whose window usually points the other way, has room). None
    when only a placement without overlap is safe (the planner keeps the
    buffers apart)."""
    n_in, n_out = order.last_read.size, order.write_step.size
    g_lo, g_hi = extent if extent is not None else (at, at + n_in)
    lo = -(-n_out // align) * align           # beyond these the buffers do not overlap
    hi = -(-n_in // align) * align

    def span(d):
        return max(g_hi, at + d + n_out) - min(g_lo, at + d)

    def free(d):
        return not any(at + d < b1 and b0 < at + d + n_out for b0, b1 in blocked)
    # the candidates in order of (span, -|d|, d), computed for all at once
    ds = np.arange(-lo + align, hi, align, dtype=np.int64)
    ok = np.ones(ds.size, bool)
    for b0, b1 in blocked:
        ok &= ~((at + ds < b1) & (b0 < at + ds + n_out))
    ds = ds[ok]
    sp = np.maximum(g_hi, at + ds + n_out) - np.minimum(g_lo, at + ds)
    cands = [int(d) for d in ds[np.lexsort((ds, -np.abs(ds), sp))]]
    budget = [SEARCH_BUDGET]     # output bytes compared, all safe() calls together

    def safe(d):
        budget[0] -= n_out
        return order.safe(d)

    for d in cands[:tries]:
        if safe(d):
            return d
    best = None
    d = (order.sufficient_delta() // align) * align
    while d > -lo and budget[0] > 0 and not (free(d) and safe(d)):
        d -= align
    if d > -lo and budget[0] > 0:
        best = d
    for d in cands[tries:]:          # the rest, in order, until one beats the sufficient one
        if (best is not None and span(d) >= span(best)) or budget[0] <= 0:
            break
        if safe(d):
            return d
    return best


# ---------------------------------------------------------------------------
# Models of the kernels' orders (NHWC int8 tensors, batch 1 or more)

def _last_cover(n_in: int, n_out: int, k: int, s: int, pad: int) -> np.ndarray:
    """For each input index along one axis, the last output index whose
    window [o s - pad, o s - pad + k) holds it (-1: none)."""
    i = np.arange(n_in)
    o = np.minimum((i + pad) // s, n_out - 1)
    return np.where((o >= 0) & (o * s - pad + k > i) & (o * s - pad <= i), o, -1)


def _first_cover(n_in: int, n_out: int, k: int, s: int, pad: int) -> np.ndarray:
    """For each input index, the first output index whose window holds it (-1: none)."""
    i = np.arange(n_in)
    o = np.maximum(0, -(-(i + pad - k + 1) // s))
    return np.where((o < n_out) & (o * s - pad <= i) & (o * s - pad + k > i), o, -1)


def raster(geo, depthwise: bool, group: int = 1, cblock: int = 1, what: str = "",
           reverse: bool = False, seq: bool = False, opos=None) -> Order:
    """Output pixels in raster order (batch, row, column), `group` pixels per
    pass; per pass, output channels in blocks of `cblock` (0: all at once):
    for each block the pass's inputs are read (a depthwise block reads only
    its own channels, a general conv the whole window), then the block's
    outputs of every pixel of the pass are written (seq: each pixel's
    inputs read and outputs written in turn, pixel after pixel of the pass,
    for each block; a pass short of pixels at the very end computes its last
    pixel again, reading its window again, in the remaining turns). cblock
    0 is a kernel that copies the pass's windows before any output is
    written. reverse: the passes run from the last pixel down. opos: output
    channel m is stored at channel position opos[m] of its pixel (a channel
    shuffle folded into the stores, ops.conv.out_channels)."""
    (h, w), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    (dh, dw) = geo.dilations
    c, m, nb = geo.c, geo.m, geo.n
    if (dh, dw) != (1, 1):
        kh, kw = (kh - 1) * dh + 1, (kw - 1) * dw + 1     # conservative: the whole dilated window
    cb = cblock or m
    nblk = -(-m // cb)
    npx = oh * ow
    gpb = -(-npx // group)                    # passes per batch entry
    ngroup = nb * gpb
    pix = np.arange(nb * npx, dtype=np.int64)

    def step(q):   # the pass of pixel q (reverse: the passes run from the last down)
        s = (q // npx) * gpb + (q % npx) // group
        return ngroup - 1 - s if reverse else s
    sub = group if seq else 1

    def within(q):   # the pixel's turn inside its pass and block
        return q % npx % group if seq else np.zeros_like(q)
    ws = (step(pix)[:, None] * nblk + (np.arange(m) // cb)[None, :]) * sub + within(pix)[:, None]
    if opos is not None:
        placed = np.empty_like(ws)
        placed[:, np.asarray(opos, np.int64)] = ws
        ws = placed
    ws = ws.reshape(-1)
    cover = _first_cover if reverse else _last_cover
    ry = cover(h, oh, kh, sh, pt)
    rx = cover(w, ow, kw, sw, pl)
    last_pix = np.where((ry[:, None] >= 0) & (rx[None, :] >= 0), ry[:, None] * ow + rx[None, :], -1)  # [h][w]
    last_pix = (last_pix[None] + (np.arange(nb) * npx)[:, None, None]).reshape(nb, h * w)
    last_pix = np.where(last_pix >= np.arange(nb)[:, None] * npx, last_pix, -1).reshape(-1)
    if depthwise:
        mult = m // c
        blk = (np.arange(c) * mult + mult - 1) // cb          # the last block reading channel ch
    else:
        blk = np.full(c, nblk - 1)
    lp = np.maximum(last_pix, 0)
    turn = within(lp)
    if seq and (nb * npx) % group:   # a short last pass computes its last pixel again in the pass's last turn
        turn = np.where(lp == nb * npx - 1, group - 1, turn)
    lr = (step(lp)[:, None] * nblk + blk[None, :]) * sub + turn[:, None]
    lr = np.where(last_pix[:, None] >= 0, lr, -1).reshape(-1)
    return Order(ws.astype(np.int64), lr.astype(np.int64),
                 what or f"raster(group={group}, cblock={cblock}{', reverse' if reverse else ''})",
                 dict(model="raster", depthwise=bool(depthwise), group=group, cblock=cblock, reverse=bool(reverse),
                      seq=bool(seq), **({} if opos is None else {"opos": [int(v) for v in opos]})))


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
        ws[addr.reshape(-1)] = np.broadcast_to(base + (l_idx // lb) * ng + ch[None, None, :] // cgroup,
                                         addr.shape).reshape(-1)
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
    return Order(ws, lr, what or f"bands(lb={lb})",
                 dict(model="bands", rows=rows, cols_in=cols_in, lines=lines, cols_out=cols_out, lb=lb, sh=sh,
                      pt=pt, kh=kh, nk_extra=nk_extra, rin=rin, cin=cin, rout=rout, cout=cout, cgroup=cgroup))


def channels(nb: int, n_in: int, n_out: int, c: int, read: np.ndarray | None = None, what: str = "") -> Order:
    """Channel by channel (per batch entry): every input byte of channel ch
    is read, then every output byte of channel ch written (isa/dsp_dw.py's
    one-plane kernel: a channel's whole plane is converted before any of its
    outputs). n_in / n_out: bytes per batch entry (NHWC, c channels); read:
    which input pixels the kernel reads at all (bool per pixel; default all)."""
    px_in, px_out = n_in // c, n_out // c
    ch = np.arange(c, dtype=np.int64)
    base = (np.arange(nb, dtype=np.int64) * c)[:, None, None]
    ws = np.broadcast_to(base + ch[None, None, :], (nb, px_out, c)).reshape(-1)
    lr = np.broadcast_to(base + ch[None, None, :], (nb, px_in, c)).copy()
    if read is not None:
        lr[:, ~np.asarray(read, bool).reshape(-1), :] = -1
    return Order(np.ascontiguousarray(ws), lr.reshape(-1), what or "channels",
                 dict(model="channels", c=c, read=None if read is None else np.asarray(read, bool).tolist()))


def rows(geo, cgroup: int = 0, what: str = "") -> Order:
    """A ring of input rows (isa/mve.py's qdwdot_mve, depthwise with channel
    multiplier 1, one strip): per group of cgroup channels (0: all), per
    batch entry, per output row oh, the input rows its window reaches that
    the ring does not hold yet (from max(next, oh sh - pt) to oh sh - pt +
    (kh - 1) dh, clipped to the input; rows in between included) are read,
    whole, for the group's channels, then output row oh of those channels
    is written. An input row is read once: the output may replace it as soon
    as it is in the ring."""
    (h, w), (oh, ow), (kh, _) = geo.hw, geo.out_hw, geo.k
    sh, pt, dh = geo.strides[0], geo.pad_begin[0], geo.dilations[0]
    c, nb = geo.c, geo.n
    if geo.m != c:
        raise ValueError("windows.rows: depthwise layers with channel multiplier 1 only")
    cg = cgroup if cgroup and cgroup < c else c
    cgi = np.arange(c, dtype=np.int64) // cg
    # the output row at which each input row enters the ring (-1: never)
    enters = np.full(h, -1, np.int64)
    nxt = None
    for o in range(oh):
        r0, r1 = o * sh - pt, o * sh - pt + (kh - 1) * dh
        lo_ = r0 if nxt is None else max(nxt, r0)
        for r in range(max(lo_, 0), min(r1, h - 1) + 1):
            enters[r] = o
        nxt = r1 + 1
    steps_b = oh                                  # steps of one batch entry of one group
    base = (cgi[None, :] * nb + np.arange(nb, dtype=np.int64)[:, None]) * steps_b    # [nb][c]
    ws = base[:, None, None, :] + np.arange(oh, dtype=np.int64)[None, :, None, None]
    ws = np.broadcast_to(ws, (nb, oh, ow, c)).reshape(-1)
    lr = np.where(enters[None, :, None, None] >= 0, base[:, None, None, :] + enters[None, :, None, None], -1)
    lr = np.broadcast_to(lr, (nb, h, w, c)).reshape(-1)
    return Order(np.ascontiguousarray(ws), np.ascontiguousarray(lr),
                 what or f"rows(cgroup={cg})", dict(model="rows", cgroup=int(cg)))
