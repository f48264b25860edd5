"""Small-K pointwise int8 convolution on the DSP extension (qconv2_pwsk_dsp),
tried by dsp_conv.emit before the paired-channel kernels.

With K = 4, 8 or 16 inputs per pixel the paired-channel block (qconv2_pwblk_dsp:
2 pixels x 4 channels a pass) spends more on each pass (biases, the hi/lo
extraction, the rows, the loop) than on its 8 MACs per output. Here the two
pixels' K inputs stay in registers as halfword pairs (2 x K/2 registers,
split once per pixel pair) and the layer's channels are unrolled one after
the other: per channel one stream record [K/2 words of halfwords (256
w[k_a], 256 w[k_b]) (dsp_conv.kpair_order's pairs), mult, n], K/2 SMLAD a
pixel (the first two SMUAD), then SMMLA(256 acc, mult, n) >> E with the
channel's own E as SSAT's immediate (one kernel per layer), and two byte
stores at immediate offsets (y, y + M): 22 cycles a channel and pixel pair
on the M4 at K = 8. The stream's words are not read through a pointer: the
kernel carries them as literal pools in its own code (PC-relative loads),
so five registers (r1 r10 r11 r12 lr) take a channel's words, and back-to-
back single loads cost N + 1 on the M4 whatever their base: a channel's six
words load in two runs (4 + 2: 8 cycles) where LDMs into two free
registers took three (9). The stream also stays a const array for the
plain-C fallback. The bias is not in the accumulator: rows() solves for
(mult, n) (dsp_dw._fit, multipliers near the channel's) that reach every
output level at the same accumulator value as the "fast" requantization
without its sign fix over the channel's whole range, checked level by
level; a channel it cannot fit (VWW: 2 of 16 in the K = 8 layer) keeps a
bias word (256 bias, one cycle more) and dsp_conv.scaled_rows' row. A layer
whose rows do not fit at all (E = e + 7 past 31, 256 acc past int32) runs
doubled(): 2 bias, 2 w, SMMLAR(2 acc, mult, nudge) >> e (requant itself).

K = 16 (M <= MAX_M16, not on the NO_CHUNKS cores) runs in two chunks of 8
inputs: both pixels' first 8 inputs in the registers, every channel's
first half (its two accumulators to the stack, 8 B a channel), then the
last 8 and every channel's second half and requantization: 39 cycles a
channel-pair on the M4 against pwblk's ~43 (K = 32 in four chunks would
tie with pwblk: the stack round trips eat what the registers save).

Preconditions (else the paired-channel kernels run): 1x1, stride 1, no
padding, NHWC, C in (4, 8, 16), M <= MAX_M (code and words: ~104 B a channel at K = 8), the "fast"
requantization (|acc| < 2^30, so 2 acc fits int32) with SSAT's clamp and
the output zero point at the clamp's low end (then the rounding's sign fix
changes no output: dsp_conv.requant_fast2), every e in 1..31.

Pair loop: x on the stack (the first input load moves it on; loaded with
the end in one run at the loop's end), the end at y's last value.

Planes store (ops/tiled.py's band planes: k.planes[y] = {kp, plane,
row0}): each output row is one call whose outputs are halfwords at plane
offsets (channel ch at ch 4 plane bytes, pixel B one column = 4 kp bytes
on, the row's cell 2 row bytes into the column), STRH's 4,095-byte
immediate kept by ADDW bumps (at most 4,092) within a pair, taken back by
SUBW at the loop's end; the C fallback stores them by memcpy. Same cycles
as the byte stores but ~2 a pair for the bumps.

Order: pixel pairs from the first up, an odd last pixel alone last (its
input copied twice into arena scratch, its output copied back), or ("rev")
the odd last pixel first, then the pairs from the last down: the orders
planner/windows.raster(group=2) describes, as qconv2_dsp's.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..planner import windows
from ..ops.qgemm import int32_array

MAX_M = 64     # channels unrolled per layer (~68 B of code each for K = 8)
MAX_M16 = 32   # the same for K = 16 (~130 B of code each, 8 B of stack for the accumulators between chunks)
# cores where K = 16 stays on pwblk (the M7 no longer: with the words in literal pools VWW's
# 24x24 16 -> 32 layer takes 276,222 est. cycles there in two chunks against pwblk's 333,839)
NO_CHUNKS = ("cortex-m85",)
PLANES_OUT = True   # store as int16 channel planes where ops/tiled.py asks (k.planes)


def requant(acc, mult, e, nudge) -> np.ndarray:
    """The exact output from acc (int64 numpy; bias included) that every
    row must reproduce: sat8((SMMLAR(2 acc, mult, nudge)) >> e),
    SMMLAR(a, m, n) = n + floor((a m + 2^31) / 2^32) (the "fast"
    requantization without its sign fix, dsp_conv.requant_fast2)."""
    acc = np.asarray(acc, np.int64)
    s = ((2 * acc * np.asarray(mult, np.int64) + (np.int64(1) << 31)) >> 32) + np.asarray(nudge, np.int64)
    return np.clip(s >> np.asarray(e, np.int64), -128, 127)


def kernel_out(acc_nb, start, mult, big_e, n) -> np.ndarray:
    """What the kernel computes from acc_nb = sum w x (int64 numpy, no
    bias): v = start + 256 acc_nb (start: 256 bias, or 0 where the bias is
    folded into n), sat8((floor(v mult / 2^32) + n) >> E) (SMMLA, SSAT)."""
    v = np.asarray(start, np.int64) + 256 * np.asarray(acc_nb, np.int64)
    return np.clip(((v * np.asarray(mult, np.int64)) >> 32) + np.asarray(n, np.int64) >> np.asarray(big_e, np.int64),
                   -128, 127)


def _want(bot: int, top: int, fold: int, mult: int, e: int, nudge: int) -> np.ndarray:
    """[255] the least acc_nb in [bot, top + 1] (top + 1: never) whose
    requant(acc_nb + fold) reaches q = -127..127: s >> e >= q iff 2 acc
    mult + 2^31 >= (q 2^e - nudge) 2^32 (Python integers: past int64)."""
    out = []
    for q in range(-127, 128):
        if mult == 0:
            t = bot if (nudge >> e) >= q else top + 1
        else:
            t = -((-(((q << e) - nudge) * 2 ** 32 - 2 ** 31)) // (2 * mult)) - fold
        out.append(min(max(t, bot), top + 1))
    return np.array(out, np.int64)


_ROWS: dict = {}   # rows() by its arguments' bytes: the planner emits a layer many times


def rows(wr: np.ndarray, folded: np.ndarray, table: np.ndarray):
    """Per channel (fold, [mult, E, n]) of the kernel's "scaled" rows
    (weights times 256 in the halfwords, SMMLA, SSAT asr E): fold where
    (mult, n) are found (dsp_dw._fit, the multipliers nearest the channel's
    first) that reach every level at the same acc as requant over the
    channel's whole acc range with the bias left out of the accumulator (n
    takes it: the bias word and the first SMLAD's add are gone), checked
    level by level; else the bias in the accumulator (256 bias) and
    dsp_conv.scaled_rows' row (the same arithmetic as requant, proved in
    dsp_conv.requant_scaled). None when neither fits a channel (E past 31,
    256 acc past int32, SMMLA's sum past int32)."""
    wr, folded = np.asarray(wr, np.int64), np.asarray(folded, np.int64)
    t = np.asarray(table, np.int64).reshape(-1, 3)
    key = (wr.shape, wr.tobytes(), folded.tobytes(), t.tobytes())
    if key not in _ROWS:
        if len(_ROWS) > 256:
            _ROWS.clear()
        _ROWS[key] = _rows(wr, folded, t)
    return _ROWS[key]


def _rows(wr, folded, t):
    from .dsp_conv import SCALED_MAX, _thresholds, nearest_first, scaled_rows
    from .dsp_dw import FIT_SPAN, _fit
    bots = np.minimum(127 * wr, -128 * wr).sum(axis=1)
    tops = np.maximum(127 * wr, -128 * wr).sum(axis=1)
    span = nearest_first(FIT_SPAN)
    out = []
    for ch in range(len(t)):
        mult, e, nudge = (int(v) for v in t[ch])
        bot, top, fold = int(bots[ch]), int(tops[ch]), int(folded[ch])
        big_e = e + 7
        if big_e > 31 or max(-bot, top) >= SCALED_MAX:
            return None
        want = _want(bot, top, fold, mult, e, nudge)
        if mult == 0:
            c = int(requant(fold, 0, e, nudge))
            out.append((True, (0, 1, 2 * c)))
            continue
        mn = _fit(want, bot, top, big_e, mult + span)
        if mn is not None:
            ends = [mn[1] + ((256 * a * mn[0]) >> 32) for a in (bot, top)]
            got = np.clip(_thresholds(np.array([mn[0]]), np.array([big_e]), np.array([mn[1]]))[0], bot, top + 1)
            if min(ends) >= -2 ** 31 and max(ends) < 2 ** 31 and np.array_equal(got, want):
                out.append((True, (mn[0], big_e, mn[1])))
                continue
        sr = scaled_rows(t[ch:ch + 1])
        if sr is None or abs(fold) + max(-bot, top) >= SCALED_MAX:
            return None
        out.append((False, tuple(int(v) for v in sr[0])))
    return out


def doubled(table) -> list:
    """rows() for the layers it does not fit (a shift past 24, a bias past
    2^23): every bias in the accumulator, the "fast" row [mult, e, nudge]
    as it is (the kernel then doubles instead of scaling by 256 and rounds
    in SMMLAR: requant's arithmetic itself)."""
    return [(False, tuple(int(v) for v in r)) for r in np.asarray(table, np.int64).reshape(-1, 3)]


def stream(wr: np.ndarray, folded: np.ndarray, rws, scale: int = 256, kc: int = 4) -> np.ndarray:
    """int64, per chunk of kc K-pairs, per channel: [scale bias] (first
    chunk, only where the bias is not folded), the chunk's words (low
    halfword scale w[k_a], high scale w[k_b], the pairs of kpair_order),
    mult, n (last chunk) (scale 256: rows(); 2: doubled())."""
    from .dsp_conv import kpair_order
    m, kk = wr.shape
    hw = (scale * wr[:, kpair_order(kk)]).astype(np.int16)             # [m][K/2][2] (int8 times 256 fits)
    words = np.ascontiguousarray(hw).view(np.int32)[..., 0].astype(np.int64)
    recs = []
    nch = max(1, kk // 2 // kc)
    for h in range(nch):
        for ch, (fold, (mult, _, n)) in enumerate(rws):
            recs.append(([] if fold or h else [scale * int(folded[ch])]) +
                        [int(v) for v in words[ch, kc * h:kc * h + kc]] + ([mult, n] if h == nch - 1 else []))
    return np.array([v for r in recs for v in r], np.int64)


def emit(node, x, outs, k, p, wr, folded, mode, table, sat: bool) -> bool:
    """The qconv2_pwsk_dsp call for a pointwise layer when the preconditions
    hold (wr [M][K] weights minus their zero point, folded the bias with
    -x_zp sum w, table the "fast" rows [mult, e, nudge] per channel)."""
    geo = p.geo
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    m, c = geo.m, geo.c
    if not (kh == kw == 1 and geo.strides == (1, 1) and tuple(geo.pad_begin) == (0, 0) and (oh, ow) == (h, wd)):
        return False
    if c == 16 and getattr(k.target, "core", None) in NO_CHUNKS:
        return False
    if c not in (4, 8, 16) or m > min(MAX_M, MAX_M16 if c == 16 else MAX_M) or mode != "fast" or not sat or int(p.rq.lo) < int(p.rq.zp):
        return False
    t = np.asarray(table, np.int64).reshape(m, 3)
    if t[:, 1].min() < 1 or t[:, 1].max() > 31 or t[:, 0].min() < 0:
        return False
    folded = int32_array(node, folded, "bias with the input zero point folded in").astype(np.int64)
    rws = rows(wr, folded, t)
    scaled = rws is not None
    if not scaled:
        if np.abs(folded).max(initial=0) >= 2 ** 30:
            return False
        rws = doubled(t)
    kc = min(c // 2, 4)
    st = stream(wr, folded, rws, 256 if scaled else 2, kc)
    es = [r[1] for _, r in rws]
    fs = [int(f) for f, _ in rws]
    npx, nb = oh * ow, geo.n
    # the output stored as int16 channel planes (a tiled region's band buffer: ops/tiled.py sets
    # k.planes[y] = {kp, plane (words), row0: the band's first row in the planes}): one call a row
    pl = k.planes.get(outs[0].name) if PLANES_OUT else None
    if pl is not None and (nb != 1 or ow % 2 or "row0" not in pl):
        return False
    rev = k.variant() == "rev" and pl is None
    words = [int(w) for w in st.astype(np.int32)]   # in the kernel's code (its literal pools): the name carries them
    tag = hashlib.sha1(repr((c, m, es, fs, scaled, words)).encode()).hexdigest()[:10]
    k.kernel("requant_fixed")     # (intrin_dsp's helpers come after it, as qconv2_dsp's)
    k.kernel("intrin_dsp")
    k.kernel("intrin_conv_dsp")
    pb = 4 * pl["plane"] if pl else 0
    name = f"k{c}_m{m}_{tag}" + ("_rev" if rev else "") + (f"_h{pb}k{pl['kp']}" if pl else "")
    fn = k.kernel("qconv2_pwsk_dsp", {"name": name, "nkp": c // 2, "c": c, "m": m, "es": es, "fs": fs,
                                         "scaled": scaled, "sbytes": 4 * len(st), "rev": rev,
                                         "kc": kc, "frame": 12 + (8 * m if c // 2 > kc else 0), "words": words,
                                         "pb": pb, "pkp": pl["kp"] if pl else 0})
    ssym = k.const(st.reshape(-1).astype(np.int32), f"{node.name}_pwsk")
    # an odd pixel count: the last pixel's input twice and its two outputs in arena scratch
    buf = k.scratch_buf(2 * c + 2 * m, "int8_t") if npx % 2 else "(int8_t *)0"
    k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, what="qconv2_pwsk_dsp: pixel pairs"))
    k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, reverse=True,
                                      what="qconv2_pwsk_dsp: pixel pairs from the last down"), "rev")
    if pl:
        pl["took"] = True
        # row r of the band: pair-row r >> 1's word, its high half for odd r, of column 0 of every plane
        for i in range(oh):
            r = pl["row0"] + i
            k.line(f"{fn}((int8_t *){k.ptr(outs[0])} + {4 * (r >> 1) + 2 * (r & 1)}, "
                   f"(const int8_t *){k.ptr(x)} + {i * ow * c}, {ssym}, 1, {ow}, {buf});")
        return True
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {ssym}, {nb}, {npx}, {buf});")
    return True
