"""int8 depthwise convolution for the DSP extension on channel planes of
vertical halfword pairs (templates/kernels/qdw2_dsp.c.j2), tried first by
isa/dsp.py's _depthwise.

Layout. Per band of up to lb output lines and per 4 channels, the input rows
the band reads (padding made explicit: x_zp) are converted into 4 channel
planes: word [X][k] = (row 2k, row 2k + 1) of column X as two int16 halves,
KP words per column (column-major, KP a literal). Two NHWC words (4
channels of rows 2k and 2k + 1) become the 4 planes' words by PKHBT / PKHTB
and SXTB16 / SXTB16 ror 8. A kh x kw window whose first row R0 is even
("phase 0") reads per column ceil(kh / 2) consecutive words (LDRD); a tap
pair of one column is one SMLAD against a weight word (w[i][j], w[i+1][j]),
a row alone (the last when kh is odd) one SMLAxy against a half of a word of
packed singles. Lines starting on an odd row ("phase 1", stride 1) start on
the high half of a word: other weight words, their own inner loop. Each
pass computes 2 outputs of one line, loading each column once for both;
the line's weight words (built from the flash taps per line), bias,
multiplier and nudge stay in registers along the line. An odd output count
ends with a pass over the last two outputs (the first recomputed).

Orientation: lines run along the output dimension with fewer outputs, so
the inner loop runs along the longer one (KWS 25x5: along H). The kernel
sees only (rows, columns) and byte strides; Python transposes the kernel
and swaps strides and pads for the transposed case.

Requantization (bit-identical to quant.requantize_fixed, see requant_dw):
weights and bias are stored doubled (|2 w| <= 256 fits int16, |2 acc| <
2^31 by the bound), so SMMLAR(2 acc, mult, nudge) = srdhm(acc, mult) +
nudge with nudge = 2^(e-1) + yzp 2^e, then ASR by e (e rides in the low
half of a packed weight word: ASR by register reads only its low byte),
then SSAT or the clamp. The rounding shift rounds half away from zero: for
acc < 0 it needs - 1, taken from acc's sign (the product's sign, or the
product is 0 and both give yzp); when the clamp's low bound is >= yzp
(Relu, Relu6) every acc < 0 lands on the low bound either way and the
correction is left out ("z" variants; "n" keeps it).

Flash: per channel the doubled taps as int16 (as the kernel before) and
(2 bias, mult, nudge, e); one kernel per (kh, kw, strides, KP, clamp kind).

Cost on mps2-an386 (instructions / MAC, 3x3): a pass of 2 outputs is 28-29
instructions (4 LDRD, 12 SMLAxy, 2 x (SMMLAR, ASR, SSAT, STRB), pointers,
loop); conversion ~1.75 per input element and band; ~35 per line. KWS
25x5x64 2.22 (was 4.29), VWW 48x48 2.05, 24x24 2.19, 12x12 2.49, 6x6 3.05,
stride 2: 3.0-4.0; 3x3 outputs with 256 channels are worse than the older
kernel (5.6-6.1 vs 4.3-5.2: per-line costs over 3 outputs).

Handled: NHWC int8 in / out, the "fast" fixed-point requantization of
isa.dsp (|acc| < 2^30, right shifts 1..31, |nudge| < 2^30) with mult >=
2^30, C % 4 == 0, kh * kw <= 25 (kh, kw <= 7), strides <= 2, at least 2
outputs along the inner direction, 4 planes of wcols x KP words within 4 KB
of stack (KP = 5, else 4: wcols <= 51 or 64). Else emit returns False and
isa.dsp's other depthwise kernels run.
"""
from __future__ import annotations

import numpy as np

from ..ops.qgemm import int32_array

BUF_WORDS = 1024          # int32 words of the 4 stack planes (4 KB, dsp.MAX_STACK)
NP = 2                    # outputs per pass
KPS = (5, 4)              # pair-rows per buffer column, by preference
FIELDS = ("nb", "rows", "c", "nl_all", "ow", "pt", "lf", "nc", "rf", "rin", "cin", "rout", "cout", "bin",
          "bout", "lb", "xzp", "lo", "hi")


def requant_dw(acc, mult, e, yzp, corr=True) -> np.ndarray:
    """What the kernel computes before the clamp (int64 numpy):
    SMMLAR(2 acc, mult, nudge) = nudge + floor((2 acc mult + 2^31) / 2^32),
    nudge = 2^(e-1) + yzp 2^e, minus 1 when acc < 0 (corr), then >> e."""
    acc = np.asarray(acc, np.int64)
    mult = np.asarray(mult, np.int64)
    e = np.asarray(e, np.int64)
    nudge = (np.int64(1) << (e - 1)) + np.int64(yzp) * (np.int64(1) << e)
    t = nudge + ((2 * acc * mult + (np.int64(1) << 31)) >> 32)
    if corr:
        t = t - (acc < 0)
    return t >> e


def phase_words(kh: int, kw: int, ph: int):
    """The weight words of a line whose first row is at pair-row half `ph`
    (0: low half, 1: high half) and the MAC of each (column, word).

    Returns (words, macs, ew): words[n] = (lo slot, hi slot), a slot being
    ("t", i, j) (tap), ("e",) or ("z",); macs[j] = per pair-row word g
    (0..G-1) a tuple (op, word index, data half, weight half) with op
    "pair" (SMLAD) or "one" (SMLA<data half><weight half>); ew: the index
    of the word whose low half holds the shift e."""
    g_n = (kh + ph + 1) // 2
    pairs, singles, macs = [], [], []
    for j in range(kw):
        col = []
        for g in range(g_n):
            r0, r1 = 2 * g - ph, 2 * g + 1 - ph
            ok0, ok1 = 0 <= r0 < kh, 0 <= r1 < kh
            if ok0 and ok1:
                col.append(["pair", len(pairs), None, None])
                pairs.append((("t", r0, j), ("t", r1, j)))
            else:
                col.append(["one", len(singles), "b" if ok0 else "t", None])
                singles.append(("t", r0 if ok0 else r1, j))
        macs.append(col)
    # singles two per word; e in the low half of the last word (alone when the count is even)
    sw = []
    m = len(singles)
    for s in range(0, m - m % 2, 2):
        sw.append((singles[s], singles[s + 1]))
    sw.append((("e",), singles[-1]) if m % 2 else (("e",), ("z",)))
    words = pairs + sw
    for col in macs:
        for mac in col:
            if mac[0] == "pair":
                continue
            s = mac[1]
            if m % 2 and s == m - 1:
                mac[1], mac[3] = len(pairs) + len(sw) - 1, "t"
            else:
                mac[1], mac[3] = len(pairs) + s // 2, "b" if s % 2 == 0 else "t"
    return words, [[tuple(mac) for mac in col] for col in macs], len(words) - 1


def _recipes(words, kh: int):
    """How the kernel builds each weight word from the channel's doubled
    taps stored column-major (halfword index j*kh + i) and e: ("ld", idx)
    one 32-bit load of two neighbouring taps; ("pk", lo, hi) two halves
    packed, each an index or "e" or "z"."""
    out = []
    for lo, hi in words:
        def idx(s):
            return s[2] * kh + s[1] if s[0] == "t" else s[0]
        a, b = idx(lo), idx(hi)
        if isinstance(a, int) and isinstance(b, int) and b == a + 1:
            out.append(("ld", a))
        else:
            out.append(("pk", a, b))
    return out


def pass_code(kh: int, kw: int, sw: int, kp: int, ph: int, macs) -> list[dict]:
    """What the template prints for one pass of NP outputs in phase ph, per
    column the pass reads (columns no output reads are left out): loads
    [(type, name, word offset from pc)] (a two-word struct = LDRD, or one
    word) and MACs [(accumulator, intrinsic, data, weight word)]."""
    g_n = (kh + ph + 1) // 2
    data = [f"d{g - g % 2}.{'lo' if g % 2 == 0 else 'hi'}" if g < g_n - g_n % 2 else f"d{g}_" for g in range(g_n)]
    cols = []
    for col in range((NP - 1) * sw + kw):
        users = [(o, col - o * sw) for o in range(NP) if 0 <= col - o * sw < kw]
        if not users:
            continue
        loads = [("w2", f"d{g}", col * kp + g) for g in range(0, g_n - 1, 2)]
        if g_n % 2:
            loads.append(("w1", f"d{g_n - 1}_", col * kp + g_n - 1))
        ops = []
        for o, j in users:
            for g, (op, wi, dh, wh) in enumerate(macs[j]):
                fn = "smlad" if op == "pair" else f"dw_smla{dh}{wh}"
                ops.append((f"a{o}", fn, data[g], f"w{wi}"))
        cols.append(dict(loads=loads, macs=ops))
    return cols


def _reads(kh: int, sh: int, nl: int) -> int:
    """Pair-rows a band of nl lines reads (its first row even)."""
    return max((l * sh >> 1) + (kh + (l * sh & 1) + 1) // 2 for l in range(nl))


def _band(kh: int, sh: int, kp: int, oh: int):
    """(lines per band, e) for kp pair-rows per column: the most lines whose
    reads fit (an even count for odd sh unless one band holds every line,
    so each band starts on an even row) and the smallest e such that the
    kernel's nk = ((nl - 1) sh + kh + e) >> 1 covers the reads of every
    band size up to it and stays <= kp; None if no line fits."""
    lb = 0
    while lb < oh and _reads(kh, sh, lb + 1) <= kp:
        lb += 1
    while lb > 0:
        if sh % 2 and lb < oh:
            lb -= lb % 2
        for e in (1, 2, 3):
            sizes = range(1, lb + 1)
            nks = [((nl - 1) * sh + kh + e) >> 1 for nl in sizes]
            if all(nk >= _reads(kh, sh, nl) for nk, nl in zip(nks, sizes)) and max(nks, default=0) <= kp:
                return lb, e
        lb -= 1
    return None


def emit(node, x, wk, folded, outs, k, p, mode, mult, second, sat) -> bool:
    """wk: [kh][kw][c] weights minus their zero point (int64, int8 range);
    folded: bias with -x_zp * sum(w) folded in; mode/mult/second/sat:
    isa.dsp's requantization choice (only "fast" is taken: mult = [c][mult,
    e, nudge]; the clamp kind is decided here from p.rq)."""
    geo = p.geo
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    c = geo.c
    if mode != "fast" or c % 4 or kh * kw > 25 or kh > 7 or kw > 7 or sh > 2 or sw > 2:
        return False
    tab = np.asarray(mult, np.int64).reshape(c, 3)
    mq, e = tab[:, 0], tab[:, 1]
    if np.any(mq < 2 ** 30) or np.any(e < 1) or np.any(e > 31):
        return False
    w2 = 2 * np.asarray(wk, np.int64)
    if w2.size and (w2.min() < -2 ** 15 or w2.max() >= 2 ** 15):
        return False
    yzp = int(p.rq.zp)
    lo, hi = max(int(p.rq.lo), -128), min(int(p.rq.hi), 127)
    corr = lo < yzp
    # orientation: lines along the shorter output dimension
    trans = ow < oh
    cl_in, cl_out = (wd * c, c), (ow * c, c)            # byte strides of (row, column)
    if trans:
        h, wd, oh, ow, kh, kw, sh, sw, pt, pl = wd, h, ow, oh, kw, kh, sw, sh, pl, pt
        cl_in, cl_out = cl_in[::-1], cl_out[::-1]
        w2 = w2.transpose(1, 0, 2)
    if ow < NP:
        return False
    wcols = (ow - 1) * sw + kw
    band = None
    for kp in KPS:
        if wcols * kp * 4 <= BUF_WORDS:
            band = _band(kh, sh, kp, oh)
            if band:
                break
    if not band:
        return False
    lb, nk_extra = band
    lf = min(pl, wcols)
    nc = max(0, min(wd, wcols - pl))
    rf = wcols - lf - nc
    phases = [phase_words(kh, kw, ph) for ph in ((0, 1) if sh % 2 else (0,))]
    vals = dict(nb=geo.n, rows=h, c=c, nl_all=oh, ow=ow, pt=pt, lf=lf, nc=nc, rf=rf, rin=cl_in[0],
                cin=cl_in[1], rout=cl_out[0], cout=cl_out[1], bin=geo.hw[0] * geo.hw[1] * c,
                bout=geo.out_hw[0] * geo.out_hw[1] * c, lb=lb, xzp=int(p.x_zp), lo=lo, hi=hi)
    k.kernel("requant_fixed")       # intrin_dsp refers to its helpers
    k.kernel("intrin_dsp")
    k.kernel("intrin_dw_dsp")
    rq = "s" if lo == -128 and hi == 127 else "c"
    name = f"{'n' if corr else 'z'}{rq}_{kh}x{kw}s{sh}{sw}_kp{kp}"
    fn = k.kernel("qdw2_dsp", {"name": name, "kh": kh, "kw": kw, "sh": sh, "sw": sw, "kp": kp,
                               "np": NP, "nk_extra": nk_extra, "plane": BUF_WORDS // 4, "bufw": BUF_WORDS,
                               "corr": corr, "sat": rq == "s",
                               "phases": [dict(recipes=_recipes(wds, kh), ew=ew, g=(kh + ph + 1) // 2,
                                               cols=pass_code(kh, kw, sw, kp, ph, mcs))
                                          for ph, (wds, mcs, ew) in enumerate(phases)],
                               "fields": FIELDS})
    taps = np.ascontiguousarray(w2.transpose(2, 1, 0)).reshape(c, kw * kh)     # [ch][j][i]
    wsym = k.const(taps.astype(np.int16).reshape(-1), f"{node.name}_w_dw2")
    bias2 = int32_array(node, 2 * np.asarray(folded, np.int64), "doubled bias")
    nudge = (np.int64(1) << (e - 1)) + np.int64(yzp) * (np.int64(1) << e)
    rec = np.stack([bias2.astype(np.int64), mq, nudge, e], axis=1).astype(np.int32).reshape(-1)
    rsym = k.const(rec, f"{node.name}_rq_dw2")
    gsym = k.const(np.array([vals[f] for f in FIELDS], np.int32), "qdw2_dsp_geo")
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {rsym}, {gsym});")
    return True
