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
the high half of a word: other weight words, their own inner loop.
Per channel and phase the weight words are built once (from the flash
taps) and stay in registers, with bias, multiplier and nudge, over every
line of that phase (lines l = phase, phase + 2, ...). The output count
ow and the output stride are literals: a line runs column by column at
immediate offsets, each column's words loaded once (one LDRD) and
multiplied into every output reading it, an output requantized and
stored right after its last column, so about kw / sw accumulators are
live (no spills with 3x3: per output one LDRD, 6 SMLAxy, SMMLAR, ASR,
SSAT, STRB). Lines of more than UNROLL_MAX outputs loop over chunks of
CHUNK outputs (each chunk reloads the kw - sw columns it shares with
the next). Code: the depthwise kernels of VWW 8.3 -> 17.2 KB of .text
(+3.1 % of its flash), MobileNetV2 9.2 -> 20.4 KB (+2.1 %), KWS 0.9 -> 2.0 KB.

Stride 2, 3x3, every band full (oh % lb == 0; qdw2_dsp's "x runs", kernel
name tag x<lb>r<rout>): per output column a run down the band's lines
instead of lines along the row. Line l reads pair-row words l (SMLAD) and
l + 1 (low half: its third row), and word l + 1 is line l + 1's SMLAD word,
so each word is loaded once: 3 LDR per output, kept back to back in one
asm (pipelined: 4 cycles, where a line's 2 LDRD per output take 6), ~13
cycles per output against ~15.5. Runs unrolled whole up to XRUN_UNROLL
outputs a band (VWW's 24 x 4 band of the tiled region), else a loop over
the columns. The band's last pair-row, whose high row no line reads, is
converted from its low row alone (one word, 4 SXTB16 [ror 8/16/24] per
column). VWW est. cycles (M4): 9,193,136 -> 9,160,816 (the stride-2
depthwise layers 2.6-3.2 -> 2.4-3.05 cycles/MAC, the tiled region's
-20.5 k), MobileNetV2 -67 k; flash +4.4 KB (VWW), +3.4 KB (MobileNetV2).

The padding cells of the planes (pair-rows of padding, lf / rf columns) are
the same for every channel group: filled once per band. A one-band layer of
few outputs (lines unrolled) has its conversion unrolled too, with the
geometry a literal (kernel name tag g<rows>_<pt>_<lf>_<nc>_<rin>). Where the
leanest plan has free arena at the step (Emitter.scratch_free, half of it
taken at most; all of it for one band of every line, at the least kp
holding them), the bands are widened up to KP_MAX pair-rows: fewer bands,
each input row converted fewer times.

Three buffer layouts (emit chooses; the read/write order is declared for
each, planner/windows.py): row bands of lb lines with 4 channels' planes
(the default; written over its input the output lags one row), 4 channels'
planes holding every line (one band: each input converted once; taken where
the leanest plan has twice that much contiguous arena free, Emitter.
scratch_free), and one channel's plane over the whole layer ("_one": taken
for a layer written over its input whose bands would run lines along the
shorter side, e.g. KWS 25 x 5; the output needs no lag, its scratch is
small). The channel's weight words are built once per channel and band.

Orientation: lines run along the output dimension with fewer outputs, so
the inner loop runs along the longer one (KWS 25x5: along H). The kernel
sees only (rows, columns) and byte strides; Python transposes the kernel
and swaps strides and pads for the transposed case.

Requantization (bit-identical to quant.requantize_fixed, see requant_dw):
the kernel accumulates with doubled weights and bias (|2 w| <= 256 fits
int16, |2 acc| < 2^31 by the bound), so SMMLAR(2 acc, mult, nudge) = srdhm(acc, mult) +
nudge with nudge = 2^(e-1) + yzp 2^e, then ASR by e (e rides in the low
half of a packed weight word: ASR by register reads only its low byte),
then SSAT or the clamp. The rounding shift rounds half away from zero: for
acc < 0 it needs - 1, taken from acc's sign (the product's sign, or the
product is 0 and both give yzp); when the clamp's low bound is >= yzp
(Relu, Relu6) every acc < 0 lands on the low bound either way and the
correction is left out ("z" variants; "n" keeps it).

Scaled requantization ("z" kernels, scaled_plan): where the sign fix is
not needed and |acc| < 2^23 over every int8 input, the weight words hold
the taps times 256 (byte at the top of each half: an AND of the load, or
of the load shifted left by 8, instead of SXTB16 + SADD16), so the
accumulator is 256 acc and the requantization is isa.dsp_conv's "scaled"
one, SMMLA(256 acc, mult, n) then ASR by E = e + 7 (no rounding constant,
equal to the doubled arithmetic above). Its per-channel shifts are made
one where that is exact for every acc of the channel's range
(dsp_conv.common_shift, else one_shift's solver): E is then SSAT's
immediate shift (SMMLA, SSAT asr #E, STRB per output: one instruction
less; kernel name tag e<E>, "v" for the per-channel shifts). A channel
whose output is one value over its whole acc range is mult 0 (its bias
and shift do not count). Record: 3 words (256 fold + E, mult, n): +4
bytes per channel, no decode (the accumulator starts at r0 & ~255).
A channel whose acc range is narrow (under NARROW values) but passes
+-2^23 or needs |n| >= 2^30 (big biases with shifts near 20) counts acc -
C from the bias fold - C and has (mult, n) solved over its whole range
(narrow_rows; VWW's 6 -> 3 x128 layer: 33.8 -> 32.9 k est. cycles).
VWW 9.80 -> 9.70 M est. cycles (6x6x128 2.05 -> 1.90 cycles/MAC,
3x3x256 3.08 -> 2.75), constants +4.4 KB, code +1.8 KB.

Edge columns (edge_sums): at stride 1 with the lines unrolled (one band
of few outputs: 6x6, 3x3) a column of padding at a line's end is read by
that line's end output only. It is left out (no LDRD, no MACs): x_zp times
its taps' sum (one word per channel after the records: both ends' sums as
int16, times x_zp 256 or 2 by SMLAxB) is written per channel into that
column's first word (never read as data then) and each line loads it from
its own pointer: the first output's accumulator starts there, the last's
adds it after its last MAC (a start held in a register made GCC spill).
VWW 6x6x128 78.6 -> 76.7 k est. cycles, 83.9 -> 80.7 k with per-channel
shifts, +4 bytes a channel; looped lines (their word at every pair-row a
line starts on) spilled more than they saved and keep the columns.

Channel streams (v.blob; every band kernel but the x runs and "_one"): a
channel's record words, its edge-sum word and its taps (padded to whole
words, stream_taps) are one array, one pointer per channel where GCC kept
three (rq, the edge sums, the taps) and spilled them. 3x3 at stride 1: the
3 pad bytes after the taps hold copies of w[0][0], w[2][2], w[0][1], so
phase 1's words (w[1][2], w[2][2]) and (w[0][0], w[0][1]) are one 32-bit
load at byte 8 (SXTB16 [ror 8] or the AND of the scaled kernels) instead of
4 byte loads and 2 packs. VWW est. cycles (M4) 9,002,519 -> 8,982,066:
6x6x128 76.7 -> 74.0 k, node 20 80.7 -> 79.5 k, 3x3x256 57.0 -> 53.0 k,
24x24x32 298.3 -> 295.2 k; MobileNetV2 -22.4 k; +3 bytes a channel of
flash (VWW text+rodata +2.5 KB).

Padding folded in x runs (xrun_folds; kernel tag p<right><bottom>): a one-band
stride-2 3x3 layer (every line in the band: the region bands of VWW's tiled
node 2 too) with one shift (SSAT's immediate), whose right column or last
line's third row is padding (TF's SAME at stride 2 pads only there) does not
read them: the last column's run loads 2 words an output (LD2) and does 4
MACs, its lines starting at the bias plus x_zp times that column's taps; a
run's last line adds x_zp times the third row's taps instead of its 3 loads
and 3 MACs. Those per-channel words (after the records, 1..3 a channel) are
copied into plane words no run reads then (the padding column's word 0, and
at pair-row xrun: columns 0 and 1 of unrolled runs, each run's first column
of looped ones, whose last column's run follows the loop) and loaded at
immediate offsets from the run's pointer: held in registers (or loaded from
rq at the use) they made GCC spill (VWW 12 -> 6 x64 +4..6 k est. cycles).
VWW M4 est. cycles 8,982,066 -> 8,971,656: 12 -> 6 x64 50.3 -> 48.5 k,
24 -> 12 x32 99.9 -> 98.2 k, tiled node 2 674.7 -> 667.5 k; not for kernels
whose shift rides in a weight word (VWW's 6 -> 3 x128: +1.1 k, spills).

Planes written by the producer ("_pin" kernels, PLANES_IN): a stride-1,
one-band, untransposed layer whose input a pointwise layer writes (isa/
dsp_conv.py emit_pw, its rows2 stores: scaled, one shift) reads every
channel's plane from that tensor itself: the pointwise stores each output
as the halfword of its cell (channel ch's plane at ch * plane words), the
planner sizes the tensor as 4 plane c bytes (g.store_bytes, planner.nbytes;
no offset window on either side: the orders model NHWC bytes), and this
kernel leaves out its conversion, only filling the padding cells a line
reads (the same offsets in every plane, fill_w / fill_h; the edge columns
skipped by edge_sums are not read) before the channel groups; buf is then
the planes. The producer asks first (codegen.Emitter.planes_of: this node
emitted on a probe told its input is planes answers with the layout) and
takes them only where they fit the leanest plan's free arena at both steps
(the arena does not grow; off while the tile pass compares graphs). VWW
(M4): the 6x6x128 layers 74.0 -> 65.4 k est. cycles (conversion ~10.2 k,
fill ~1.5 k), their producers +1.3 k (a call per output row, halfword
stores at plane offsets, an ADD per 2 blocks): 8,879,577 -> 8,842,334;
MobileNetV2 14,433,392 -> 14,372,529; arena unchanged. Also stride-2 3x3 x
runs of a tiled region's band (ops/tiled.py's band planes, one band of the
node's lines: lb == oh): the fill leaves out the rows no line reads (the
last pair-row's high half, the folded bottom row) and the folded right
column (its word 0 holds the xr fold); not for graph nodes (emit_pw's
planes store is untested with them).

Flash: kh kw + 8 bytes per channel (17 for 3x3; the ONNX model's own
int8 taps, int32 bias and float scale are 17 too). Taps as int8 in the byte
layout of tap_layout (columns 2q, 2q + 1 interleaved: rows i and i + 1 of
a column 2 bytes apart), 3 bytes of padding after the last channel; per
channel and phase the kernel builds its weight words from them (recipes): one unaligned
LDR + SXTB16 [ror 8] + SADD16 (doubling, exact) per word of two taps 2
bytes apart, LDRSB / LSL / LDRSB / PKHBT lsl 17 for other pairs, PKHBT lsl
17 of e and one tap for the e word (3x3: 12 instructions for phase 0, 15
for phase 1, was ~8 from int16 taps). The record (record()) is 2
words: folded bias 2^3 + (e & 7) and mult - 2^30 + (e >> 3) 2^30 (mult's
bit 30 is always set, bit 31 clear), so |folded bias| < 2^28 is required
(else emit returns False); the nudge (2 yzp + 1) 2^(e-1) is derived per
channel from n1 = 2 yzp + 1 in the geo table. Decoding the record costs
~10 instructions per channel and band. One kernel per (kh, kw, strides,
KP, clamp kind). On an386 (vs the int16 taps / 16-byte records): flash
-17 B per 3x3 channel (VWW -20.7 KB), +0.3-0.5 % instructions per model.

Cost on mps2-an386 (3x3, estimated cycles / MAC, sim/cycles.py): ~13
cycles per output (1.45 / MAC) along a line; conversion ~1.5 per input
element and band. VWW 48x48x8 1.85, 24x24x32 1.95, 12x12x64 1.90, 6x6x128
2.05, 3x3x256 3.08, stride 2: 2.7-3.3 (the older kernels: 5.4-6.2).

Handled: NHWC int8 in / out, the "fast" fixed-point requantization of
isa.dsp (|acc| < 2^30, right shifts 1..31, |nudge| < 2^30) with mult >=
2^30, C % 4 == 0, kh * kw <= 25 (kh, kw <= 7), strides <= 2, at least 2
outputs along the inner direction, 4 planes of wcols x KP words within 4 KB
of stack (KP = 5, else 4: wcols <= 51 or 64). Else emit returns False and
isa.dsp's other depthwise kernels run.
"""
from __future__ import annotations

import numpy as np

from ..planner import windows
from .dsp_conv import SCALED_MAX, _thresholds, common_shift, nearest_first, scaled_rows
from . import memo


BUF_WORDS = 1024          # most int32 words of the 4 planes (arena scratch: 4 x plane words)
PLANE_STEP = 4           # plane sizes (words) rounded up to this: few kernel variants (flash)
NP = 2                    # fewest outputs per line
KPS = (5, 4)              # pair-rows per buffer column, by preference
KPS_INPLACE = (3, 4, 5)   # written over its input: the planes live beside the whole tensor, smallest first
FIELDS = ("nb", "rows", "c", "nl_all", "ow", "pt", "lf", "nc", "rf", "rin", "cin", "rout", "cout", "bin",
          "bout", "lb", "xzp", "lo", "hi", "n1")


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


def tap_layout(kh: int, kw: int) -> np.ndarray:
    """pos[i][j]: the byte of tap (i, j) in a channel's kh * kw int8 taps.
    Columns 2q and 2q + 1 interleave in a block of 2 kh bytes (tap (i, j) at
    2 kh q + 2 i + (j & 1)), so the taps of rows i and i + 1 of one column
    are 2 bytes apart: one LDR + SXTB16 [ror 8] gives the pair word of
    either phase. An odd last column puts its first ceil(kh / 2) rows on
    the even offsets of its kh bytes, the others on the odd ones (so rows
    i, i + 1 stay 2 apart except across the two groups)."""
    pos = np.zeros((kh, kw), np.int64)
    for j in range(kw - kw % 2):
        pos[:, j] = 2 * kh * (j // 2) + 2 * np.arange(kh) + (j & 1)
    if kw % 2:
        half = (kh + 1) // 2
        for i in range(kh):
            pos[i, kw - 1] = 2 * kh * (kw // 2) + (2 * i if i < half else 2 * (i - half) + 1)
    return pos


def phase_words(kh: int, kw: int, ph: int, pos=None):
    """The weight words of a line whose first row is at pair-row half `ph`
    (0: low half, 1: high half) and the MAC of each (column, word).

    Returns (words, macs, ew): words[n] = (lo slot, hi slot), a slot being
    ("t", i, j) (tap), ("e",) or ("z",); macs[j] = per pair-row word g
    (0..G-1) a tuple (op, word index, data half, weight half) with op
    "pair" (SMLAD) or "one" (SMLA<data half><weight half>); ew: the index
    of the word whose low half holds the shift e. Singles go two per word:
    with a layout pos (tap_layout), pairs of singles 2 bytes apart first
    (lower byte in the low half: one SXTB16 builds them), then the others
    in order; the one left over shares the last word with e."""
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
    # pair the singles: 2 bytes apart first (when a layout is given), then in order
    left = list(range(len(singles)))
    groups = []
    if pos is not None:
        at = {int(pos[s[1], s[2]]): n for n, s in enumerate(singles)}
        for b in sorted(at):
            n, m = at[b], at.get(b + 2)
            if m is not None and n in left and m in left:
                groups.append((n, m))
                left.remove(n)
                left.remove(m)
    for q in range(0, len(left) - len(left) % 2, 2):
        groups.append((left[q], left[q + 1]))
    slot = {}                     # single -> (word index, weight half)
    sw = []
    for n, m in groups:
        slot[n], slot[m] = (len(pairs) + len(sw), "b"), (len(pairs) + len(sw), "t")
        sw.append((singles[n], singles[m]))
    if len(left) % 2:
        slot[left[-1]] = (len(pairs) + len(sw), "t")
        sw.append((("e",), singles[left[-1]]))
    else:
        sw.append((("e",), ("z",)))
    words = pairs + sw
    for col in macs:
        for mac in col:
            if mac[0] == "one":
                mac[1], mac[3] = slot[mac[1]]
    return words, [[tuple(mac) for mac in col] for col in macs], len(words) - 1


def recipes(words, pos):
    """How the kernel builds each weight word (taps doubled, as the
    accumulator is) from the channel's int8 taps wt (tap (i, j) at byte
    pos[i][j]) and its shift e (from the record). Returns (loads,
    recipes): loads = byte offsets of 32-bit loads (any alignment; a load
    may read up to 3 bytes past the channel: the array is padded);
    recipes[n] = ("sx", load index, rot): SADD16 of SXTB16 [ror 8] of that
    load, for two taps 2 bytes apart; ("e", byte or None): e in the low half
    with 2 w[byte] on top (PKHBT lsl 17) or e alone (its high half is
    never read); ("pk", lo byte, hi byte): 2 w[lo] | 2 w[hi] << 16 from two
    byte loads (LDRSB, LSL, LDRSB, PKHBT)."""
    def b(s):
        return int(pos[s[1], s[2]])
    starts = sorted({b(lo) for lo, hi in words if lo[0] == "t" and hi[0] == "t" and b(hi) == b(lo) + 2})
    loads, where = [], {}
    for st in starts:
        if st in where:
            continue
        where[st] = (len(loads), 0)
        if st + 1 in starts:
            where[st + 1] = (len(loads), 8)
        loads.append(st)
    out = []
    for lo, hi in words:
        if lo[0] == "e":
            out.append(("e", b(hi) if hi[0] == "t" else None))
        elif b(hi) == b(lo) + 2:
            out.append(("sx",) + where[b(lo)])
        else:
            out.append(("pk", b(lo), b(hi)))
    return loads, out


def stream_taps(taps, pos, pos1) -> np.ndarray:
    """[c][whole words] int8 of a channel stream's taps (qdw2_dsp with v.blob):
    taps [c][kh kw] at their tap_layout bytes, zero padded to whole words
    (at least 3 bytes past them: the kernel's 32-bit loads), and a tap
    whose byte in pos1 differs from pos copied there too (3x3 stride 1:
    phase 1's recipes read bytes 8..11, see emit)."""
    taps = np.asarray(taps, np.int64)
    c, n = taps.shape
    tb = -(-(n + 3) // 4) * 4
    tw = np.zeros((c, tb), np.int64)
    tw[:, :n] = taps
    for i, j in zip(*np.nonzero(pos1 != pos)):
        assert pos1[i, j] >= n, "a copy may only go past the taps"
        tw[:, pos1[i, j]] = taps[:, pos[i, j]]
    return tw.astype(np.int8)


def record(fold, mult, e) -> np.ndarray:
    """The 2 int32 words per channel the kernel reads (flattened): r0 =
    fold 2^3 + (e & 7) (|fold| < 2^28), r1 = mult - 2^30 + (e >> 3) 2^30
    (mult in [2^30, 2^31), e in 1..31: bit 30 of mult is known to be set)."""
    fold, mult, e = (np.asarray(a, np.int64).reshape(-1) for a in (fold, mult, e))
    r0 = fold * 8 + (e & 7)
    r1 = (mult - 2 ** 30 + ((e >> 3) << 30)).astype(np.uint32).view(np.int32)
    return np.stack([r0.astype(np.int32), r1], axis=1).reshape(-1)


def scaled_plan(w2, fold, tab, yzp, lo, hi):
    """[channel][mult, E, n] of the "scaled" requantization (isa.dsp_conv:
    taps times 256 in the weight words, so the accumulator holds 256 acc,
    then SMMLA(256 acc, mult, n), ASR E, the clamp; equal to the doubled
    kernel's "z" arithmetic, so only where the sign fix is not needed), its
    shifts made one where dsp_conv.common_shift proves the outputs the same
    for every input (SSAT's immediate shift: one instruction less per
    output), or None: |acc| must stay below 2^23 (256 acc in int32) over
    every int8 input, E <= 31, |n| < 2^30 (scaled_rows). A channel whose
    clamped output is the same q over its whole acc range (both ends give
    it: the arithmetic is monotonic) becomes (mult 0, n = q 2^E, bias 0):
    SMMLA gives n whatever the accumulator holds, so its acc range and
    shift do not count (VWW's 6x6x128 layers: channels of shift 22 and
    biases near 2^27). Returns (rows, folded biases) or None."""
    fold = np.asarray(fold, np.int64).reshape(-1)
    t = np.asarray(tab, np.int64).reshape(-1, 3)
    wr = np.asarray(w2, np.int64).reshape(-1, len(fold)).T            # [channel][taps]
    bot = fold + np.minimum(127 * wr, -128 * wr).sum(axis=1)
    top = fold + np.maximum(127 * wr, -128 * wr).sum(axis=1)
    q_bot = np.clip(requant_dw(bot, t[:, 0], t[:, 1], yzp, corr=False), lo, hi)
    q_top = np.clip(requant_dw(top, t[:, 0], t[:, 1], yzp, corr=False), lo, hi)
    const = q_bot == q_top
    live = ~const
    # narrow channels: an acc range under NARROW values that 256 acc or the usual
    # (mult, E, n) cannot hold (|acc| past 2^23, |n| past 2^30: VWW's 6 -> 3 layer, two
    # channels near acc 10^7 with shift 18 and 20) count acc - C from the bias fold - C
    # (C the range's middle) with constants solved for (narrow_rows)
    span = top - bot
    fits = np.array([scaled_rows(t[ch:ch + 1]) is not None for ch in range(len(fold))], bool)
    big = live & ((np.maximum(-bot, top) >= SCALED_MAX) | ~fits)
    narrow = big & (span < NARROW)
    if np.any(big & ~narrow):
        return None
    live_w = live & ~narrow
    e_c = 16
    lr = np.zeros((len(fold), 3), np.int64)
    if live_w.any():
        lr[live_w] = scaled_rows(t[live_w])
        e_c = int(lr[live_w, 1].min())       # (the shift common_shift would give every channel)
    cl = np.zeros_like(fold)
    for ch in np.flatnonzero(narrow):
        nr = narrow_rows(int(bot[ch]), int(top[ch]), int(t[ch, 0]), int(t[ch, 1]), yzp, e_c)
        if nr is None:
            return None
        lr[ch], cl[ch] = nr
    fold, bot, top = fold - cl, bot - cl, top - cl
    rows = np.stack([np.zeros_like(fold), np.full_like(fold, e_c), q_bot << e_c], axis=1)
    fold = np.where(const, 0, fold)
    rows[live] = lr[live]
    bot, top = np.where(const, 0, bot), np.where(const, 0, top)
    # an even shift first (one kernel per shift: VWW's five 6x6x128 layers, shifts
    # 10 and 11, share one kernel at 10), else the least
    one = None
    if live.any() and e_c % 2:
        rows_even = rows.copy()
        rows_even[const, 1:] = np.stack([np.full(const.sum(), e_c - 1), q_bot[const] << (e_c - 1)], axis=1)
        one = one_shift(rows_even, bot, top, e_c - 1)
    if one is None:
        one = one_shift(rows, bot, top)
    return np.asarray(rows if one is None else one, np.int64), fold


FIT_SPAN = 512            # multipliers tried either side of mult >> d by one_shift
FIT_CHUNKS = ((0, 1), (1, 16), (16, None))   # _fit's slices of its nearest-first multipliers


@memo.solver
def _fit(want, bot, top, e, m2):
    """The first (m, n) with m from m2 (nearest first) whose outputs
    floor((256 acc m + n 2^32) / 2^(32+e)) reach each level q = -127..127 at
    acc want[q] (clipped to [bot, top + 1]) over [bot, top], or None: the
    feasible n for one m are an interval, n >= q 2^e - floor(T_q m / 2^24)
    where level q is reached inside the range, n <= q 2^e - floor((T_q - 1)
    m / 2^24) - 1 where it is not reached at or below T_q - 1."""
    base = np.arange(-127, 128, dtype=np.int64) << e
    m2 = m2[(m2 > 0) & (m2 < 2 ** 31)]
    ge, lt = want <= top, want > bot
    bg, wg, bl, wl = base[ge][None, :], want[ge][None, :], base[lt][None, :], (want[lt] - 1)[None, :]
    # the m in growing chunks, nearest first (the first m fits for ~99 % of channels: person_detect's
    # 25,144 questions): the same first fit as the whole range at once, a fraction of the work
    for a, b in FIT_CHUNKS:
        m = m2[a:b, None]
        if not m.size:
            break
        lo_n = (bg - ((wg * m) >> 24)).max(axis=1, initial=-2 ** 62)
        hi_n = (bl - ((wl * m) >> 24) - 1).min(axis=1, initial=2 ** 62)
        n2 = np.maximum(lo_n, -(2 ** 30) + 1)
        ok = np.flatnonzero((n2 <= hi_n) & (n2 < 2 ** 30))
        if ok.size:
            return int(m[ok[0], 0]), int(n2[ok[0]])
    return None


NARROW = 2 ** 18          # most acc values of a channel narrow_rows solves for (its range evaluated whole)


def narrow_rows(bot: int, top: int, mult: int, e: int, yzp: int, e0: int):
    """((mult, E, n), C) of the scaled requantization for a channel whose acc
    range [bot, top] is narrow (< NARROW values) but passes +-2^23 or needs
    an n past 2^30: the kernel counts acc - C (C the range's middle; the
    bias fold - C) and (mult, n) are solved (_fit) so that floor((256 (acc
    - C) mult + n 2^32) / 2^(32+E)) reaches every level where the "fast"
    requantization (requant_dw, no sign fix) does, over the whole range
    (evaluated value by value); E the least from e0 up to e + 7 that fits;
    or None. SMMLA's result must stay inside int32 at both ends (it is
    monotonic)."""
    c = (bot + top) // 2
    b2, t2 = bot - c, top - c
    if b2 <= -SCALED_MAX or t2 >= SCALED_MAX:
        return None
    acc = np.arange(bot, top + 1, dtype=np.int64)
    v = requant_dw(acc, mult, e, yzp, corr=False)
    want = b2 + np.searchsorted(v, np.arange(-127, 128, dtype=np.int64), side="left")
    span = nearest_first(FIT_SPAN)
    for big_e in range(min(e0, e + 7), e + 8):
        mn = _fit(want, b2, t2, big_e, (mult >> (e + 7 - big_e)) + span)
        if mn is None:
            continue
        ends = [mn[1] + ((256 * a * mn[0]) >> 32) for a in (b2, t2)]
        if min(ends) < -2 ** 31 or max(ends) >= 2 ** 31:
            continue
        got = np.clip(_thresholds(np.array([mn[0]]), np.array([big_e]), np.array([mn[1]]))[0], b2, t2 + 1)
        if np.array_equal(got, want):
            return np.array([mn[0], big_e, mn[1]], np.int64), c
    return None


def one_shift(rows, bot, top, e0=None):
    """rows [channel][mult, E, n] (mult 0: a constant channel, whose E must
    be the least live E) with one shift E0 = the least E and the same
    int8 outputs for every acc in [bot, top], or None. dsp_conv.
    common_shift first (mult >> d or one more); a channel it cannot fit is
    solved for: its outputs floor((256 acc m + n 2^32) / 2^(32+E0)) reach
    level q at the original's least acc T_q iff n >= q 2^E0 - floor(T_q m /
    2^24) and n <= q 2^E0 - floor((T_q - 1) m / 2^24) - 1 (only the first
    where T_q is at or below bot, only the second where it is past top), so
    per m within FIT_SPAN of mult >> d the feasible n are an interval; the
    m nearest mult >> d with one is taken (VWW's 3x3x256 layer: shifts 3..16
    per channel, d up to 13). The result is checked level by level. e0: that
    shift instead (at most the least live E; then mult >> d with d >= 0 for
    every channel)."""
    one = common_shift(rows, bot, top) if e0 is None else None
    if one is not None:
        return one
    t = np.asarray(rows, np.int64).reshape(-1, 3)
    mult, big_e, n = t[:, 0], t[:, 1], t[:, 2]
    live = mult != 0
    if not live.any():
        return None
    e0 = int(big_e[live].min()) if e0 is None else e0
    if np.any(big_e[~live] != e0):
        return None
    bot, top = np.asarray(bot, np.int64), np.asarray(top, np.int64)
    want = np.clip(_thresholds(mult, big_e, n), bot[:, None], top[:, None] + 1)
    out = t.copy()
    out[:, 1] = e0
    span = nearest_first(FIT_SPAN)
    for ch in np.flatnonzero(live & (big_e != e0)):
        if big_e[ch] < e0:
            return None
        mn = _fit(want[ch], bot[ch], top[ch], e0, (mult[ch] >> (big_e[ch] - e0)) + span)
        if mn is None:
            return None
        out[ch, 0], out[ch, 2] = mn
    got = np.clip(_thresholds(out[:, 0], out[:, 1], out[:, 2]), bot[:, None], top[:, None] + 1)
    return out if np.array_equal(got[live], want[live]) else None


def record_scaled(fold, rows) -> np.ndarray:
    """The 3 int32 words per channel of the scaled kernel (flattened): 256
    fold + E (the kernel's accumulator start is r0 & ~255, ASR by r0 reads
    its low byte E), mult, n."""
    fold = np.asarray(fold, np.int64).reshape(-1)
    rows = np.asarray(rows, np.int64).reshape(-1, 3)
    return np.stack([256 * fold + rows[:, 1], rows[:, 0], rows[:, 2]], axis=1).astype(np.int32).reshape(-1)


def unpack_record(rec):
    """What the kernel derives from record()'s words (int64 numpy, with C's
    arithmetic): (2 fold, mult, e) = ((r0 >> 2) & ~1, (r1 & (2^30 - 1)) |
    2^30, (r0 & 7) + 8 (r1 >>> 30))."""
    r = np.asarray(rec, np.int64).reshape(-1, 2)
    r0, r1 = r[:, 0], r[:, 1] & 0xFFFFFFFF
    return (r0 >> 2) & ~1, (r1 & (2 ** 30 - 1)) | 2 ** 30, (r0 & 7) + 8 * (r1 >> 30)


def edge_sums(w2) -> np.ndarray:
    """Per channel one int32 word after the records: the taps' sums of the
    first column (low half) and of the last (high half) of w2 [kh][kw][c] in
    the kernel's orientation, int16 (|sum| <= 7 * 128). A padding column
    holds x_zp in every row, so a line's end output may start at the bias
    plus x_zp times that sum (what the column's LDRD and MACs would add)."""
    w2 = np.asarray(w2, np.int64)
    lo, hi = w2[:, 0, :].sum(axis=0), w2[:, -1, :].sum(axis=0)
    return ((lo & 0xFFFF) | ((hi & 0xFFFF) << 16)).astype(np.uint32).view(np.int32)


def pass_code(kh: int, kw: int, sw: int, kp: int, ph: int, macs, np_: int, skip=()) -> list[dict]:
    """What the template prints for np_ consecutive outputs of a line in phase ph, per
    column the pass reads (columns no output reads are left out): loads
    [(type, name, word offset from pc)] (a two-word struct = LDRD, or one
    word), MACs [(accumulator, intrinsic, data, weight word)] and done:
    the outputs whose last column this is (stored right after it, so only
    about kw / sw accumulators are live at a time and each column is loaded
    once for every output of the pass). skip: columns of padding left out
    (their taps times x_zp go into those outputs' accumulators, edge_sums)."""
    g_n = (kh + ph + 1) // 2
    data = [f"d{g - g % 2}.{'lo' if g % 2 == 0 else 'hi'}" if g < g_n - g_n % 2 else f"d{g}_" for g in range(g_n)]
    ncol = (np_ - 1) * sw + kw
    last = {o: max(c for c in range(o * sw, o * sw + kw) if c not in skip) for o in range(np_)}
    cols = []
    for col in range(ncol):
        users = [(o, col - o * sw) for o in range(np_) if 0 <= col - o * sw < kw]
        if not users or col in skip:
            continue
        loads = [("w2", f"d{g}", col * kp + g) for g in range(0, g_n - 1, 2)]
        if g_n % 2:
            loads.append(("w1", f"d{g_n - 1}_", col * kp + g_n - 1))
        ops = []
        for o, j in users:
            for g, (op, wi, dh, wh) in enumerate(macs[j]):
                fn = "smlad" if op == "pair" else f"dw_smla{dh}{wh}"
                ops.append((f"a{o}", fn, data[g], f"w{wi}"))
        done = [o for o, j in users if last[o] == col]
        cols.append(dict(loads=loads, macs=ops, done=done))
    return cols


def xrun_macs(kh: int, kw: int, sh: int, sw: int, macs):
    """The MACs of a stride-2 3x3 kernel run down the lines of a band at one
    output column ("x runs", qdw2_dsp's xrun): per kernel column j, (SMLAD
    intrinsic, weight word) of its pair-row word l (rows 2l, 2l + 1 of line
    l) and (SMLAxB intrinsic, weight word) of the low half of pair-row word l +
    1 (row 2l + 2), which is also line l + 1's SMLAD word; or None where the
    kernel is not 3x3 with strides 2 x 2."""
    if (kh, kw, sh, sw) != (3, 3, 2, 2):
        return None
    out = []
    for col in macs:
        (op0, w0, _, _), (op1, w1, dh, wh) = col
        assert op0 == "pair" and op1 == "one" and dh == "b", col
        out.append((("smlad", f"w{w0}"), (f"dw_smla{dh}{wh}", f"w{w1}")))
    return out


def xrun_folds(rec, w2, xzp: int, scaled: bool, xr: bool, xb: bool) -> np.ndarray:
    """Per channel the words after the records of an x-run kernel with padding
    folded (qdw2_dsp's xseq), in the accumulator's unit u (the taps times 256
    scaled, else 2): xr: the bias as the kernel derives it from its record
    plus u x_zp times the taps of the last column (the right padding column's
    MACs); xb: u x_zp times the taps of the last row (the bottom padding
    row's); both: then that row's sum without its last tap (the corner, whose
    last column the first word holds). int32, wrapping as the kernel's MACs
    do. w2: [kh][kw][c] in the kernel's orientation."""
    w2 = np.asarray(w2, np.int64)
    r = np.asarray(rec, np.int64).reshape(-1, 3 if scaled else 2)[:, 0]
    u = 256 if scaled else 2
    bias2 = r & ~255 if scaled else (r >> 2) & ~1
    cols = []
    if xr:
        cols.append(bias2 + u * xzp * w2[:, -1, :].sum(axis=0))
    if xb:
        cols.append(u * xzp * w2[-1, :, :].sum(axis=0))
    if xr and xb:
        cols.append(u * xzp * w2[-1, :-1, :].sum(axis=0))
    out = np.stack(cols, axis=1).reshape(-1)
    return ((out + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


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


XRUN = True              # stride-2 3x3 kernels run down the lines per output column where every band is full
XRUN_UNROLL = 96          # most outputs of a band unrolled whole as x runs (else a loop over the columns)
UNROLL_MAX = 32           # most outputs per line run as one unrolled sequence (code per line)
LINES_MAX = 36            # most outputs per channel of a one-band layer whose lines are unrolled too
CHUNK = 24                # longer lines: a loop over chunks of this many outputs (even), then the rest
ONE_MAX = 8192            # most bytes of the one-channel plane (arena scratch)
ONE_PLANE = "auto"        # when the one-channel kernel is taken (tests: "always" where it applies, "never")
CV_MAX = 96               # most (pair-row, column) steps of an unrolled conversion (code size)
KP_MAX = 16              # most pair-rows per column of the band buffer
WHOLE_MAX = 32768         # most bytes of 4 planes holding every line (taken only within the free arena)
BLOB = True               # lines unrolled: records, edge sums and taps one stream per channel
XFOLD = True              # one-band unrolled x runs: right padding column and bottom padding row folded (xr, xb)
PLANES_IN = True          # read an input its producer stores as every channel's planes (emit_pw)
PLANES_MAX = 24576        # most bytes of those planes (an arena tensor)
EDGES = True              # edge columns of padding folded into the end outputs' accumulators (edge_sums)


def _one_plane(geo, out_hw, k_hw, strides, pads, c, wd, h):
    """(scratch bytes, kp, e, plane words, trans) of the one-channel kernel
    (every line in one band), or None: lines along the shorter output
    dimension, kp the fewest pair-rows per column holding all of them."""
    (oh, ow), (kh, kw), (sh, sw) = out_hw, k_hw, strides
    trans = ow < oh
    if trans:
        oh, ow, kh, kw, sh, sw = ow, oh, kw, kh, sw, sh
    if ow < NP:
        return None
    for kp in range(1, 49):
        b = _band(kh, sh, kp, oh)
        if b and b[0] == oh:
            break
    else:
        return None
    wcols = (ow - 1) * sw + kw
    plane = -(-wcols * kp // PLANE_STEP) * PLANE_STEP
    if 4 * plane > ONE_MAX:
        return None
    return 4 * plane, kp, b[1], plane, trans


def _bands_plan(geo, out_hw, k_hw, strides, wd, h, c, in_place, trans=None):
    """(scratch bytes, bytes the output lags behind its input when written
    over it) of the band kernel as emit would choose it; (inf, 0) if none."""
    (oh, ow), (kh, kw), (sh, sw) = out_hw, k_hw, strides
    (pt, pl) = geo.pad_begin
    if trans is None:
        trans = ow < oh and not (in_place and ow >= NP)
    rin, cin, rout, cout = wd * c, c, ow * c, c
    if trans:
        h, wd, oh, ow, kh, kw, sh, sw, pt = wd, h, ow, oh, kw, kh, sw, sh, pl
        rin, cin, rout, cout = cin, rin, cout, rout
    if ow < NP:
        return float("inf"), 0
    wcols = (ow - 1) * sw + kw
    for kp in KPS_INPLACE if in_place else KPS:
        if wcols * kp * 4 <= BUF_WORDS:
            band = _band(kh, sh, kp, oh)
            if band:
                break
    else:
        return float("inf"), 0
    plane = -(-wcols * kp // PLANE_STEP) * PLANE_STEP
    lag = 0
    if in_place:
        o = windows.bands(geo.n, h, wd, oh, ow, c, band[0], sh, pt, kh, band[1], rin, cin, rout, cout)
        n_in, n_out = o.last_read.size, o.write_step.size
        d = windows.best_delta(o, 16)
        lag = (max(n_in, n_out) if d is None else max(n_in, d + n_out) - min(0, d)) - max(n_in, n_out)
        if d is None:
            lag = n_out
    return 16 * plane, lag


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
    w2 = np.asarray(wk, np.int64)          # stored as int8, doubled by the kernel
    if w2.size and (w2.min() < -128 or w2.max() > 127):
        return False
    yzp = int(p.rq.zp)
    # record (record()): folded 2^3 + (e & 7), mult - 2^30 + (e >> 3) 2^30; nudge =
    # ((2 yzp + 1) << e) >> 1 in the kernel, exact while |(2 yzp + 1) 2^e| < 2^31
    fold = np.asarray(folded, np.int64).reshape(-1)
    if np.any(np.abs(fold) >= 2 ** 28) or np.any(np.abs((2 * yzp + 1) << e) >= 2 ** 31):
        return False
    lo, hi = max(int(p.rq.lo), -128), min(int(p.rq.hi), 127)
    corr = lo < yzp
    plan = scaled_plan(w2, fold, tab, yzp, lo, hi) if not corr else None
    srows, sfold = plan if plan is not None else (None, None)
    dies = k.input_dies(x)
    # one channel at a time over the whole plane (no row bands): the input is
    # converted once and the lines may run along the longer output dimension
    # while the output is written over its input, with no lag (a channel's
    # outputs replace inputs already in the plane). Taken for a layer written
    # over its input whose lines the row bands would run along the shorter
    # side (KWS 25 x 5), when its plane is no bigger than the bands' buffer
    # plus the row the bands' output lags behind, or fits the room the plan
    # has at this step; square layers keep the bands (they convert 4 channels
    # at a time: faster).
    one = _one_plane(geo, (oh, ow), (kh, kw), (sh, sw), (pt, pl), c, wd, h)
    # the input stored as every channel's planes by its producer (emit_pw's planes store; planes_layout)
    pin = k.planes_in(x)
    # (stride 2 3x3: only a tiled region's band of x runs, ops/tiled.py's band planes; not a
    # graph node, whose producer's planes store, dsp_conv.emit_pw, is not tested with them)
    band = pin and not any(n is k.node for n in k.graph.nodes)
    if pin and not (PLANES_IN and geo.n == 1 and one is not None and not one[4]
                    and (sh == sw == 1 or (band and sh == sw == 2 and kh == kw == 3 and XRUN and oh >= 2))
                    and 4 * one[3] * c <= PLANES_MAX):
        if x.name in k.planes:
            raise RuntimeError(f"node '{node.name}': its input is stored as planes it cannot read")
        return False
    take_one = not pin and one is not None and ONE_PLANE != "never" and (ONE_PLANE == "always" or (dies and one[4] and ow >= NP))
    if take_one and ONE_PLANE == "auto":
        bp = _bands_plan(geo, (oh, ow), (kh, kw), (sh, sw), wd, h, c, True)
        take_one = one[0] <= bp[0] + bp[1] or one[0] <= k.scratch_room()
    # 4-channel planes holding every line ("whole": one band), where the arena
    # has that much free at this step in the leanest plan: each input converted
    # once, 4 channels at a time; written over its input with no lag (a
    # group's outputs replace inputs already in its planes)
    whole = pin or (not take_one and one is not None and ONE_PLANE == "auto" and 4 * one[0] <= WHOLE_MAX
                    and 2 * 4 * one[0] <= k.scratch_free())
    if take_one or whole:
        trans, kp, band = one[4], one[1], (oh if not one[4] else ow, one[2])
    else:
        # orientation: lines along the shorter output dimension; along rows when the
        # output may be written over the input (row bands keep the writes behind
        # the reads: planner/windows.bands)
        trans = ow < oh and not (dies and ow >= NP)
    cl_in, cl_out = (wd * c, c), (ow * c, c)            # byte strides of (row, column)
    if trans:
        h, wd, oh, ow, kh, kw, sh, sw, pt, pl = wd, h, ow, oh, kw, kh, sw, sh, pl, pt
        cl_in, cl_out = cl_in[::-1], cl_out[::-1]
        w2 = w2.transpose(1, 0, 2)
    if ow < NP:
        return False
    wcols = (ow - 1) * sw + kw
    if not (take_one or whole):
        band = None
        # written over its input: the planes are arena scratch live next to the
        # whole tensor, so the smaller bands come first (KWS: 336 B instead of 576)
        for kp in KPS_INPLACE if dies else KPS:
            if wcols * kp * 4 <= BUF_WORDS:
                band = _band(kh, sh, kp, oh)
                if band:
                    break
        if not band:
            return False
        # more lines per band where the leanest plan has the room at this step
        # (each input row converted fewer times, fewer per-band setups)
        # (half the free run at most, the whole of it for one band of every line: no
        # pair-row converted twice, no band of one line: VWW 24 -> 12 x32)
        free, kp0 = k.scratch_free(), kp
        for kp2 in range(KP_MAX, kp, -1):
            plane2 = -(-wcols * kp2 // PLANE_STEP) * PLANE_STEP
            band2 = _band(kh, sh, kp2, oh) if 16 * plane2 <= free else None
            if band2 and band2[0] < oh and 32 * plane2 > free:
                band2 = None
            if band2 and band2[0] > band[0]:
                kp, band = kp2, band2
                break
        while kp > kp0 and band[0] == oh and (_band(kh, sh, kp - 1, oh) or (0,))[0] == oh:
            kp, band = kp - 1, _band(kh, sh, kp - 1, oh)      # the least kp holding every line
    lb, nk_extra = band
    plane = -(-wcols * kp // PLANE_STEP) * PLANE_STEP
    lf = min(pl, wcols)
    nc = max(0, min(wd, wcols - pl))
    rf = wcols - lf - nc
    pos = tap_layout(kh, kw)
    phases = [phase_words(kh, kw, ph, pos) for ph in ((0, 1) if sh % 2 else (0,))]
    vals = dict(nb=geo.n, rows=h, c=c, nl_all=oh, ow=ow, pt=pt, lf=lf, nc=nc, rf=rf, rin=cl_in[0],
                cin=cl_in[1], rout=cl_out[0], cout=cl_out[1], bin=geo.hw[0] * geo.hw[1] * c,
                bout=geo.out_hw[0] * geo.out_hw[1] * c, lb=lb, xzp=int(p.x_zp), lo=lo, hi=hi, n1=2 * yzp + 1)
    k.kernel("requant_fixed")       # intrin_dsp refers to its helpers
    k.kernel("intrin_dsp")
    k.kernel("intrin_dw_dsp")
    rq = "s" if lo == -128 and hi == 127 else "c"
    es = None if srows is None else srows[:, 1]
    e_one = int(es[0]) if es is not None and np.all(es == es[0]) else 0
    stag = "" if srows is None else f"e{e_one}" if e_one else "v"
    name = f"{'n' if corr else 'z'}{rq}{stag}_{kh}x{kw}s{sh}{sw}_kp{kp}_pl{plane}"
    # ow and cout literals: the passes of a line at immediate offsets (lines up to
    # UNROLL_MAX outputs unrolled whole, longer ones loop over chunks of CHUNK);
    # one kernel per width and output stride
    chunk = 0 if ow <= UNROLL_MAX else CHUNK
    # one band of few outputs (MobileNets' 6x6 and 3x3): the lines unrolled too (no line
    # loop and its spills: VWW 6x6x128 2.50 -> 2.34, 3x3x256 3.96 -> 3.68 est. cycles/MAC)
    lines = lb if lb == oh and oh * ow <= LINES_MAX else 0
    # the input's column stride a literal too where it is not the output's (transposed)
    cin_tag = f"i{cl_in[1]}" if cl_in[1] != cl_out[1] else ""
    # that one band's conversion unrolled with the geometry literal (3x3 and 6x6
    # layers: its loops, padding tests and branches cost as much as the conversion):
    # per pair-row holding input rows, (k, byte offset of row 2k, of row 2k + 1 or None)
    cv = []
    if lines and not take_one and not pin:
        nk = ((lines - 1) * sh + kh + nk_extra) >> 1
        for kk in range(nk):
            ra = [r if 0 <= r < h else None for r in (2 * kk - pt, 2 * kk + 1 - pt)]
            if ra != [None, None]:
                cv.append((kk,) + tuple(None if r is None else r * cl_in[0] for r in ra))
        cv = cv if len(cv) * nc <= CV_MAX else []
    gtag = f"g{h}_{pt}_{lf}_{nc}_{cl_in[0]}" if cv else ""
    # stride 2, 3x3, every band of lb lines (a literal): per output column one run down the
    # lines, each pair-row word loaded once for two lines (SMLAD of line l + 1, the third
    # row of line l): 3 pipelined loads an output instead of 2 LDRD
    xm = [xrun_macs(kh, kw, sh, sw, mcs) for _, mcs, _ in phases]
    xrun = lb if XRUN and not take_one and xm[0] is not None and oh % lb == 0 else 0
    xtag = f"x{lb}r{cl_out[0]}" if xrun else ""
    if xrun:
        lines = 0
    # x runs of one band (unrolled or looped over the columns): the right padding column
    # (read by the last column's run only) and the last line's third row when it is
    # padding are left out, their x_zp terms computed once per channel (xr, xb)
    # (only with one shift for every channel, SSAT's immediate: where the shift rides in a
    # weight word (VWW's 6 -> 3 x128) the run's registers are all taken and GCC spilled:
    # +1.1 k est. cycles there, against -1.8 k on the 12 -> 6 x64)
    xfold = bool(xrun and lb == oh and XFOLD and e_one)
    xr = xfold and rf >= 1
    # (bands of one line keep the row: folding it there leaves the third row's weight words
    # unused, -Wunused-variable, person_detect's x1 kernels)
    xb = xfold and lb >= 2 and 2 * (lb - 1) + kh - 1 - pt >= h
    if xr or xb:
        xtag += f"p{int(xr)}{int(xb)}"
    # stride 1, lines unrolled (one band), one column of padding at an end: that column
    # is read by the line's end output only; x_zp times its taps (edge_sums) start / end
    # that output's accumulator instead of its LDRD and MACs (VWW 6x6x128: 8 -> 6 LDRD a
    # line). Not for looped lines: their edge words at every pair-row, GCC's spills
    # cost more than it saves (VWW 24x24x32, 12x12x64: +1.4k, +1.2k est. cycles)
    el, er = (lf == 1, rf == 1) if EDGES and sh == 1 and sw == 1 and lines and not take_one else (False, False)
    skip = ([0] if el else []) + ([wcols - 1] if er else [])
    # lines unrolled (one band): a channel's record, edge sums and taps in one stream
    # (one pointer a channel instead of three: fewer of GCC's spills)
    blob = not take_one and not xrun and BLOB
    blob_words = ((3 if srows is not None else 2) + int(el or er) + -(-(kh * kw + 3) // 4)) if blob else 0
    # 3x3 at stride 1 in a stream: the 3 bytes after the taps hold copies of w[0][0],
    # w[2][2], w[0][1] (bytes 9, 10, 11), so phase 1's words (w[1][2], w[2][2]) and
    # (w[0][0], w[0][1]) are one 32-bit load at byte 8 too (no byte loads and packing)
    pos1 = pos
    if blob and (kh, kw, sh) == (3, 3, 1):
        pos1 = pos.copy()
        pos1[0, 0], pos1[2, 2], pos1[0, 1] = 9, 10, 11
    name = name.replace(f"_kp{kp}", f"_u{ow}x{cl_out[1]}{cin_tag}{f'l{lines}' if lines else ''}{xtag}{gtag}{f'f{int(el)}{int(er)}' if el or er else ''}_kp{kp}")
    name += "_one" if take_one else ""
    fill_w, fill_h = [], []
    if pin:
        # the padding cells a line reads (the skipped edge columns' are not: their word 0 holds
        # the edge sums), the same in every channel's plane
        nk = ((lb - 1) * sh + kh + nk_extra) >> 1
        # rows a line reads (x runs: the folded last row not; the folded right column's only
        # word 0, which holds the folds)
        nread = (lb - 1) * sh + kh - int(bool(xb)) if xrun else 2 * nk
        for col in range(wcols):
            if col in skip or (xrun and xr and col == wcols - 1):
                continue
            data = lf <= col < lf + nc
            for kk in range(nk):
                out = [not (data and 0 <= r < h) and 2 * kk + q < nread
                       for q, r in enumerate((2 * kk - pt, 2 * kk + 1 - pt))]
                if not any(out):
                    continue
                if all(out):
                    fill_w.append(col * kp + kk)
                else:
                    fill_h += [2 * (col * kp + kk) + q for q in (0, 1) if out[q]]
        name += "_pin"
        lay = dict(kp=kp, plane=plane, lf=lf, pt=pt, h=h, w=wd, c=c, bytes=4 * plane * c)
        if k.planes_probe == x.name:
            k.planes_found = lay
        elif k.planes[x.name] != lay:
            raise RuntimeError(f"node '{node.name}': its input's planes are not the layout it reads")
    fn = k.kernel("qdw2_dsp", {"name": name, "kh": kh, "kw": kw, "sh": sh, "sw": sw, "kp": kp, "one": take_one,
                               "nk_extra": nk_extra, "plane": plane, "unroll": ow, "lines": lines,
                               "xrun": xrun, "xunroll": ow * xrun <= XRUN_UNROLL, "rout": cl_out[0],
                               "xr": xr, "xb": xb, "xnr": 3 if srows is not None else 2,
                               "pin": pin, "fill_w": fill_w, "fill_h": fill_h,
                               "xn": int(xr) + int(xb) + int(xr and xb),
                               "cin": cl_in[1], "cv": cv, "lf": lf, "nc": nc,
                               "cout": cl_out[1], "chunk": chunk,
                               "corr": corr, "sat": rq == "s", "scaled": srows is not None, "e": e_one,
                               "el": el, "er": er, "wcols": wcols, "blob": blob_words,
                               "phases": [dict(zip(("loads", "recipes"), recipes(wds, pos1 if ph else pos)), ew=ew, i=ph,
                                               g=(kh + ph + 1) // 2, xm=xm[ph],
                                               chunk=pass_code(kh, kw, sw, kp, ph, mcs, chunk) if chunk else [],
                                               rest=pass_code(kh, kw, sw, kp, ph, mcs, ow % chunk if chunk else ow,
                                                              skip)
                                               if (ow % chunk if chunk else ow) else [])
                                          for ph, (wds, mcs, ew) in enumerate(phases)],
                               "fields": FIELDS})
    taps = np.zeros((c, kh * kw), np.int64)
    taps[:, pos.reshape(-1)] = w2.reshape(kh * kw, c).T                  # tap (i, j) at byte pos[i][j]
    rec = record(fold, mq, e) if srows is None else record_scaled(sfold, srows)
    if blob:
        # one stream per channel: record words, edge sums, taps (3 bytes past them: the loads)
        parts = [rec.reshape(c, -1)] + ([edge_sums(w2).reshape(c, 1)] if el or er else [])
        parts.append(stream_taps(taps, pos, pos1).view("<i4"))
        rsym = k.const(np.concatenate(parts, axis=1).astype(np.int32).reshape(-1), f"{node.name}_rq_dw2")
        wsym = f"(const int8_t *){rsym}"
    else:
        taps = np.concatenate([taps.reshape(-1), np.zeros(3, np.int64)])     # the last channel's loads
        wsym = k.const(taps.astype(np.int8), f"{node.name}_w_dw2")
        if el or er:
            rec = np.concatenate([rec, edge_sums(w2)])
        if xr or xb:
            rec = np.concatenate([rec, xrun_folds(rec, w2, int(p.x_zp), srows is not None, xr, xb)])
        rsym = k.const(rec, f"{node.name}_rq_dw2")
    gsym = k.const(np.array([vals[f] for f in FIELDS], np.int32), "qdw2_dsp_geo")
    if pin:
        pass           # (planes: no order, the output is not written over them)
    elif take_one:
        rows_read = np.zeros(h, bool)
        rows_read[max(0, -pt):max(0, min(h, -pt + 2 * (((oh - 1) * sh + kh + nk_extra) >> 1)))] = True
        cols_read = np.zeros(wd, bool)
        cols_read[:nc] = True
        read = rows_read[:, None] & cols_read[None, :]
        read = read.T if trans else read              # back to the tensor's (H, W)
        k.order(0, lambda: windows.channels(geo.n, geo.hw[0] * geo.hw[1] * c, geo.out_hw[0] * geo.out_hw[1] * c, c,
                                            None if read.all() else read,
                                            what="qdw2_dsp: channel by channel" + (" (columns)" if trans else "")))
    else:
        k.order(0, lambda: windows.bands(geo.n, h, wd, oh, ow, c, lb, sh, pt, kh, nk_extra, cl_in[0], cl_in[1],
                                         cl_out[0], cl_out[1], what=f"qdw2_dsp: bands of {lb} lines"
                                         + (" (columns)" if trans else "")))
    buf = k.ptr(x, "int32_t") if pin else k.scratch_buf((4 if take_one else 16) * plane, 'int32_t')
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {rsym}, {gsym}, {buf});")
    return True
