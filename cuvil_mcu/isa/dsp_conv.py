"""The general int8 convolution on the DSP extension with paired-channel
halfwords (qconv2_dsp), tried by dsp.emit_qconv before its qconv_dsp.

Two output channels lo, hi share one int16 per input index k:
H[k] = 256 * w[hi][k] + w[lo][k] (weights minus their zero point), and two
of these (k0, k1) make one 32-bit word, so flash keeps one byte per weight.
With the activations split into halfword pairs X = [x[k0], x[k1]]:
    T += SMLAD(X, word)           T = sum x * H = 256 * A + B  (mod 2^32)
    S += SMLAD(X, SXTB16(word))   S = sum x * w[lo] = B       (low bytes of H)
and after the K loop A = (T - S) >> 8 (arithmetic), exact when 256 * A
cannot leave int32. Both accumulators start at bias[lo] (so T - S = 256 A)
and bias[hi] is added to A afterwards. Preconditions, checked here from the
real weights per channel pair (the hi channel of a pair is picked to meet
them, else the layer keeps qconv_dsp):
- H fits int16: not (w[hi][k] == -128 and w[lo][k] < 0) for any k;
- A's range over every int8 input stays in [-2^23, 2^23 - 1]:
  sum_k max(127 w, -128 w) < 2^23 and sum_k min(127 w, -128 w) >= -2^23.
The accumulators S (= today's int32 accumulator of channel lo) carry the
same bound as qconv_dsp (checked); T wraps by design (SMLAD wraps; the
plain-C equivalent computes modulo 2^32).

Kernel: 2 output pixels x 2 channel pairs (4 channels) per pass. Per pass
the 2 pixels' K inputs are split into halfword pairs (SXTB16 bytes (0, 2),
SXTB16 ror 8 bytes (1, 3) of each 4-byte group) interleaved
xe[K-pair][pixel]; per K-pair: 2 activation and 2 weight loads, 2 SXTB16,
8 SMLAD for 16 MACs. In the natural channel order (natural(): every real
layer) the whole block loop of a pixel pair is one naked assembly function
per kind (qconv2_blocks_dsp: sign fix or not, K unrolled up to NKP_UNROLL
K-pairs, NKP_UNROLL_G for the gather, or a loop of 8 entered by TBB), shared by the kernels: the four
loads in a row (5 cycles on the M4 against 7 for LDRD + 2 LDR), the first
K-pair starting the accumulators from the biases, the requantization rows
(records_natural) read by LDM, stores by immediate offsets (first layers
with M <= 16: qconv2_ublocks_dsp instead, the blocks unrolled for the
layer, xe at immediate offsets, one stream of biases, weights and (mult,
nudge) rows (ustream), the shifts as SSAT's immediates, emit_pw's
"scaled" rows where the sign fix is not needed (ustream_scaled); from the
first pair up, runs of pixel pairs on one output row whose windows lie
inside the input go to its row kernel: the gather in assembly too
(gather_asm: immediate offsets from one pointer; rows of 4a + 1 bytes,
3x3 x 3 channels: gather_rows_asm, each row's groups split as loaded and
the rows' last bytes joined by PKHTB, with its own K order and stream),
xe on its stack, no call per pair; the row's last pair past the right
edge and the last output row below the input too, their padding bytes
x_zp in the gather (pad_gathers); the other pairs, and every pair in C, gather from one base
pointer when both windows are inside; where ring_plan allows (the ring
in the arena's free run; not VWW's first layer) no gather at all: the
input rows sign-extended once into a ring of int16 rows with the x_zp
padding, every pair of an output row read from it by the ring kernel,
border pairs included); elsewhere (the
other orders, -O0 without the DSP extension, the host) the C loop with 13
pinned registers or plain C. Padding taps read x_zp (the bias has -x_zp * sum(w) folded
in), written straight into xe as halfword pairs. M is padded to a multiple
of 4 with zero channels whose outputs are stored to a real channel of the
same pass before that channel's own store (stores run B.hi, B.lo, A.hi,
A.lo); an odd last pixel is computed twice and stored twice (same value):
no branches on tails. Requantization rows (mult, e | channel << 8, nudge)
sit in the per-block record next to the biases; "fast" is SMMLAR(2 acc,
mult, nudge), a sign fix and one shift by register (requant_fast2).

Pointwise layers with stride 1 in the natural order run emit_pw's kernel
instead (qconv2_pwblk_dsp): the same arithmetic with the pixel-pair loop
and the split in assembly too, one stream per block (biases, weights,
rows), and where the sign fix is not needed 256 acc into SMMLA
(requant_scaled); with one shift for every channel the hi channels made
to use their store group's lo channel's n (lo_nudge: 6 row words a block,
two LDM of 3), and on layers with many blocks two blocks a turn of the
block loop (UNROLL2_PASSES).

Output as planes (emit_pw, PLANES_OUT): where its one consumer is a
depthwise layer that reads every channel's int16 plane from its input
(dsp_dw's "_pin" kernels: stride 1, one band) and the planes fit the
leanest plan's free arena, a stride-1 pointwise layer with the rows2
stores (scaled, one shift, whole pixel pairs along even rows) stores its
outputs there instead of NHWC: STRH of the SSAT result at channel c *
plane bytes + the cell's offset (the pair's second pixel one plane column
further: v.m), an ADD of 4 planes per block (8 per 2 with u2), and one call
of the pixel loop per output row (dy jumps the rows); the C fallback stores
the same halfwords (memcpy). The consumer fills the padding cells.

Pointwise layers with K = 4, 8 or 16 (the "fast" requantization, no sign fix,
M <= dsp_pwsk.MAX_M) run dsp_pwsk.py's kernel before any of these: the two
pixels' inputs in registers, the channels unrolled (no per-block overhead).

Variants: "_pw" (1x1, no padding: one run of C bytes per pixel), general
(C % 4 == 0; border taps per kernel column), "_g<kh>x<kw*C>" (C % 4 != 0,
first layers: the kh rows of kw*C bytes concatenated into K bytes by an
unrolled gather of word loads and shifts, K padded to 4 with zero weights,
K <= GATHER_MAX; windows inside the input take their row pointers straight
from x, the others through the zero row and border copies; those whose rows are whole words, M % 8 == 0, "fast"
requantization with SSAT run dsp_rows.py's qconvr_dsp instead, without
xe, where the gather's buffers do not fit the leanest plan's room).
xe (and the gather's zero row and border copies) are
arena scratch planned for the node (codegen.Emitter.scratch_buf), not stack.

Channels whose output is constant over every input (dead channels with a
huge bias) get zero weights and a row that yields that constant, so they
do not force the slower "mid" requantization on the whole layer.

Handled: the cases dsp.emit_qconv handles (fixed requantization, NHWC,
int8 in and out, one group, dilation 1) with 4 * K bytes of xe within
MAX_XE; else (or when the preconditions fail) qconv_dsp runs.
"""
from __future__ import annotations

import numpy as np

from ..planner import windows

from ..ops.qgemm import int32_array, offset_weights
from . import memo

FIELDS = ("nb", "npx", "ow_n", "h", "w_n", "c", "kh_n", "kw_n", "sh", "sw", "pt", "pl", "m_n", "nkp", "nblk",
          "xzp", "yzp", "lo", "hi")
A_MAX = 2 ** 23   # |A| bound: 256 * A must stay inside int32
GATHER_MAX = 128  # K (padded to 4) up to which C % 4 != 0 layers get the unrolled gather
NKP_UNROLL = 8    # K-pairs up to which the natural-order kernel unrolls K (one kernel per K: flash)
NKP_UNROLL_PW = 32   # the same for emit_pw's kernels (K <= 64: ~56 B of code per K-pair, 256 B of xe on the stack)
PW_LOOP = 32         # K-pairs per turn of emit_pw's K loop past that (each turn's end test ~6 cycles)
NKP_UNROLL_PW_X = 64  # past NKP_UNROLL_PW, K-pairs up to which emit_pw unrolls K with xe in the arena (K <= 128:
                      # ~3.6 KB of code a kernel against the loop's 1.9 KB; no entry jump, no end tests: ~17
                      # cycles a block of 8 outputs)
PLANES_OUT = True    # emit_pw may store its output as its depthwise consumer's channel planes (dsp_dw)
NKP_UNROLL_G = 16    # the same for the first layers' gather (3x3 x 3 channels: K 27 -> 14 K-pairs)
UBLOCKS_MAX = 4      # blocks (M <= 16) up to which a first layer gets its own unrolled block code (~1 KB a block)


UNROLL2_PASSES = 512  # block passes (pixel pairs x blocks) from which emit_pw's unrolled kernels run two blocks a turn

# cores whose block biases load by one LDM (LDRD) rather than single LDRs run into the first K-pair's
# loads: the M7's LDM moves 64 bits a cycle and its loads never dual-issue (the M4's run costs N + 1)
LDM_CORES = ("cortex-m7", "cortex-m85")

# Most bytes of the split activations of two pixels (arena scratch; the
# portable kernel, 5x slower, is the alternative, so no room is asked for).
MAX_XE = 4096


def requant_fast2(acc, mult, e, zp) -> np.ndarray:
    """What {{p}}__cv_rqz2 computes for acc2 = 2 acc (int64 numpy):
    (SMMLAR(2 acc, mult, nudge) - (acc < 0)) >> e with nudge = 2^(e-1) +
    zp 2^e, SMMLAR(a, m, n) = n + floor((a m + 2^31) / 2^32). Equal to
    quant.requantize_fixed(acc, mult, -e) + zp for |acc| < 2^30, mult >= 0,
    e in 1..31 (dsp.requant_fast's rounding with the sign of acc in place of
    the sign of the product: they differ only when the product rounds to 0,
    where (nudge - 1) >> e == nudge >> e == zp)."""
    acc = np.asarray(acc, np.int64)
    e = np.asarray(e, np.int64)
    nudge = (np.int64(1) << (e - 1)) + np.int64(zp) * (np.int64(1) << e)
    s = ((2 * acc * np.asarray(mult, np.int64) + (np.int64(1) << 31)) >> 32) + nudge
    return (s - (acc < 0)) >> e


def pair_ok(w_lo: np.ndarray, w_hi: np.ndarray) -> bool:
    """The two preconditions for channels (lo, hi) over their K weights
    (int64, minus zero point, within int8)."""
    if np.any((w_hi == -128) & (w_lo < 0)):
        return False
    top = np.maximum(127 * w_hi, -128 * w_hi).sum()
    bot = np.minimum(127 * w_hi, -128 * w_hi).sum()
    return int(top) < A_MAX and int(bot) >= -A_MAX


def pair_channels(wr: np.ndarray) -> list[tuple[int, int]] | None:
    """(lo, hi) per pair of rows of wr [M'][K] (M' even, rows >= M real
    zero channels): rows (2i, 2i + 1) with the hi one chosen so the
    preconditions hold; None when neither order does for some pair."""
    pairs = []
    for i in range(0, wr.shape[0], 2):
        a, b = wr[i], wr[i + 1]
        if pair_ok(a, b):
            pairs.append((i, i + 1))
        elif pair_ok(b, a):
            pairs.append((i + 1, i))
        else:
            return None
    return pairs


def kpair_order(kk: int) -> np.ndarray:
    """[K/2][2] input indices of each K-pair, matching the activation
    split: 4-byte group g gives pairs (4g, 4g + 2) then (4g + 1, 4g + 3)."""
    g = np.arange(kk // 4)[:, None, None] * 4
    return (g + np.array([[0, 2], [1, 3]])[None]).reshape(-1, 2)


def pack_weights(wr: np.ndarray, pairs) -> np.ndarray:
    """int32 words [block][K-pair][2 pairs]: per pair the halfwords
    H = 256 w[hi] + w[lo] of the K-pair's two inputs (low, high half)."""
    kk = wr.shape[1]
    order = kpair_order(kk)
    h = np.stack([256 * wr[hi] + wr[lo] for lo, hi in pairs])           # [pairs][K] int64, fits int16
    hw = h[:, order].astype(np.int16)                                   # [pairs][K/2][2]
    words = np.ascontiguousarray(hw).view(np.int32)[..., 0]             # [pairs][K/2] (little endian)
    nblk = len(pairs) // 2
    return np.ascontiguousarray(words.reshape(nblk, 2, -1).transpose(0, 2, 1)).reshape(-1)


def records(pairs, folded: np.ndarray, m: int, mode: str, mult, second) -> np.ndarray:
    """[block][16 | 12] int32: bias lo, hi of pair A, of pair B (hi doubled
    in "fast" mode: the kernel feeds 2 acc to SMMULR), then per store (B.hi,
    B.lo, A.hi, A.lo) the output channel's requantization row [mult,
    (e or shift & 0xFF) | channel << 8, and in "fast" mode the nudge] (ARM's
    shift by register reads the low byte). A padding channel (>= m) is stored to a real
    channel written later in the pass."""
    bias = np.concatenate([folded, np.zeros(len(pairs) * 2 - m, np.int64)])
    fast = mode == "fast"
    if fast:
        rows = np.asarray(mult, np.int64).reshape(m, 3)
    else:
        rows = np.zeros((m, 3), np.int64)
        rows[:, 0] = np.asarray(mult, np.int64)
        rows[:, 1] = np.asarray(second, np.int64) & 0xFF
    out = []
    for i in range(0, len(pairs), 2):
        (alo, ahi), (blo, bhi) = pairs[i], pairs[i + 1]
        ch = [bhi, blo, ahi, alo]                   # store order
        for j in range(3, -1, -1):                  # a padding channel takes the next real one
            if ch[j] >= m:
                later = [c for c in ch[j + 1:] if c < m]
                if not later:
                    raise AssertionError("pair A's lo channel is padding")
                ch[j] = later[0]
        rec = [bias[alo], bias[ahi] * (2 if fast else 1), bias[blo], bias[bhi] * (2 if fast else 1)]
        for c in ch:
            rec += [rows[c, 0], rows[c, 1] | (c << 8)] + ([rows[c, 2]] if fast else [])
        out.append(rec)
    return np.array(out, np.int64).reshape(-1)


def natural(pairs, m: int, mode: str, sat: bool) -> bool:
    """The natural-order kernel (the block loop in assembly): "fast"
    requantization with SSAT, M % 4 == 0 and every pair (2i, 2i + 1), so a
    block's stores go to 4 consecutive channels in a fixed order."""
    return mode == "fast" and sat and m % 4 == 0 and all(p == (2 * i, 2 * i + 1) for i, p in enumerate(pairs))


def records_natural(folded: np.ndarray, m: int, table) -> np.ndarray:
    """[block][16] int32 of the natural-order kernel: bias of channels 4b,
    4b + 2 (pairs A and B lo), twice the bias of 4b + 1, 4b + 3 (hi: the
    kernel feeds 2 acc to SMMLAR), then the rows (mult, e, nudge) of
    channels 4b + 1, 4b + 2, 4b + 3, 4b (the store order)."""
    bias = np.asarray(folded, np.int64).reshape(-1, 4)
    rows = np.asarray(table, np.int64).reshape(-1, 4, 3)[:, [1, 2, 3, 0]].reshape(-1, 12)
    return np.concatenate([bias[:, [0, 2]], 2 * bias[:, [1, 3]], rows], axis=1).reshape(-1)


def gather_plan(kh: int, ll: int, kk: int) -> list[list[dict]]:
    """For C % 4 != 0 (first layers): how each 4-byte group of the K inputs
    (rows of ll bytes one after the other, zeros past K) is assembled from
    the kh row pointers sr[r]: parts {r, off, rsh, mask, lsh} = ((ld32(sr[r]
    + off) >> rsh) & mask) << lsh (loads stay inside the row's ll bytes:
    ll >= 4), or, for rows shorter than a word, single bytes {r, off, lsh}."""
    words = []
    for g in range(-(-kk // 4)):
        parts, d, k = [], 0, 4 * g
        while d < 4 and k < kk:
            r, j = divmod(k, ll)
            n = min(4 - d, ll - j)
            if ll >= 4:
                b = min(j, ll - 4)
                rsh = 8 * (j - b)
                mask = None if 4 - (j - b) <= n or d + n == 4 else (1 << (8 * n)) - 1
                parts.append(dict(r=r, off=b, rsh=rsh, mask=mask, lsh=8 * d, byte=False))
            else:
                parts += [dict(r=r, off=j + i, lsh=8 * (d + i), byte=True) for i in range(n)]
            k += n
            d += n
        words.append(parts)
    return words


def _t2imm(v: int) -> bool:
    """v a Thumb-2 modified immediate (BIC/ORR/MOV): a byte, 00XY00XY,
    XY00XY00, XYXYXYXY or a byte with its top bit set rotated."""
    v &= 0xFFFFFFFF
    b = v & 0xFF
    if v < 256 or v == b * 0x00010001 or v == (v >> 8 & 0xFF) * 0x01000100 or v == b * 0x01010101:
        return True
    return any(((v << r | v >> (32 - r)) & 0xFFFFFFFF) in range(128, 256) for r in range(1, 32))


def _part_bytes(t) -> list[tuple[int, int]]:
    """(window byte of row t["r"], byte of the gathered word) of each byte a
    gather_plan part supplies."""
    rsh, lsh = t["rsh"], t["lsh"]
    width = 32 - max(rsh, lsh) if t["mask"] is None else t["mask"].bit_length()
    return [(t["off"] + rsh // 8 + i, lsh // 8 + i) for i in range(width // 8)]


def gather_asm(plan, rb: int, swc: int, kk: int | None = None, ll: int | None = None, pad=None, zb: int = 0):
    """qconv2_ublocks_dsp's row kernel: Arm instructions that gather both
    pixels of a pair (the second swc bytes after the first) from the rows
    r0 + r * rb into xe at sp (int32 index 4 g + q and 4 g + 2 + q for
    word g of pixel q, as the C gather), the plan's parts (gather_plan) as
    immediate-offset loads, UBFX/shifts and ORs; registers r1..r(n) the
    loads, r10 r11 the word and a part, r12 lr the split. None for byte
    plans, more than 9 loads per pixel or offsets past LDR's 4095.
    pad(q, r, j) (with kk and rows of ll bytes): window byte j of row r of
    pixel q is padding: it reads zb (x_zp's byte) instead, a part wholly
    padding is not loaded (the others are: the caller keeps their reads
    inside the input), the rest patched by BIC/ORR. gather_reach gives the
    bytes from r0 its loads reach."""
    parts = [t for g in plan for t in g]
    if any(t["byte"] for t in parts) or len(parts) > 9 or \
            max((t["r"] * rb + t["off"] for t in parts), default=0) + swc > 4095:
        return None
    ins = []
    for q in range(2):
        def padded(t, j):
            return pad is not None and pad(q, t["r"], j)
        skip = [all(padded(t, j) for j, _ in _part_bytes(t)) for t in parts]
        n = 0
        for t, sk in zip(parts, skip):
            n += 1
            if not sk:
                ins.append(f"ldr r{n}, [r0, #{q * swc + t['r'] * rb + t['off']}]")
        n = 0
        for g, word in enumerate(plan):
            v = None
            # bytes of the word that read x_zp: the padding taps of this pixel
            pb = sorted({d for t in word for j, d in _part_bytes(t) if 4 * g + d < (kk or 0) and padded(t, j)})
            for t in word:
                n += 1
                if skip[n - 1]:
                    continue
                rsh, lsh = t["rsh"], t["lsh"]
                width = 32 - max(rsh, lsh) if t["mask"] is None else t["mask"].bit_length()
                src = f"r{n}"
                if rsh and (width < 32 - rsh or lsh):
                    ins.append(f"ubfx r11, r{n}, #{rsh}, #{width}")
                    src, rsh = "r11", 0
                elif not rsh and width < 32 - lsh:
                    ins.append(f"ubfx r11, r{n}, #0, #{width}")
                    src = "r11"
                sh = f", lsl #{lsh}" if lsh else f", lsr #{rsh}" if rsh else ""
                if v is None:
                    if sh:
                        ins.append(f"mov r10, {src}{sh}")
                        v = "r10"
                    else:
                        v = src
                else:
                    if v != "r10":
                        ins.append(f"mov r10, {v}")
                        v = "r10"
                    ins.append(f"orr r10, r10, {src}{sh}")
            if v is None:
                ins.append(f"mov r10, #0x{zb * 0x01010101:X}")
                v = "r10"
            ins += _patch(v, pb, zb) + [f"sxtb16 r12, {v}", f"sxtb16 lr, {v}, ror #8",
                                        f"str r12, [sp, #{16 * g + 4 * q}]", f"str lr, [sp, #{16 * g + 8 + 4 * q}]"]
    return ins


def _patch(v: str, pb, zb: int) -> list[str]:
    """BIC/ORR that set bytes pb of register v to zb (one pair when the
    masks are immediates)."""
    if not pb:
        return []
    mask, fill = sum(0xFF << 8 * d for d in pb), sum(zb << 8 * d for d in pb)
    out = []
    for mk, fl in ([(mask, fill)] if _t2imm(mask) and _t2imm(fill) else [(0xFF << 8 * d, zb << 8 * d) for d in pb]):
        out += [f"bic {v}, {v}, #0x{mk:X}"] + ([f"orr {v}, {v}, #0x{fl:X}"] if fl else [])
    return out


def row_pairs(kh: int, ll: int, kk: int, nkp: int) -> list[tuple[int, int]] | None:
    """The K-pairs of gather_rows_asm (K indices; kk: a zero weight): per
    window row its 4-byte groups as SXTB16 splits them ((0, 2), (1, 3)),
    then the rows' last bytes two by two. None unless rows of 4 a + 1 bytes
    (3x3 windows of 3 channels: 27 inputs in 14 K-pairs, as gather_plan) fit
    in nkp K-pairs."""
    if ll % 4 != 1 or ll < 5:
        return None
    pairs = [(r * ll + 4 * a + i, r * ll + 4 * a + i + 2) for r in range(kh) for a in range(ll // 4) for i in (0, 1)]
    last = [r * ll + ll - 1 for r in range(kh)] + [kk]
    pairs += [(last[i], last[i + 1]) for i in range(0, kh, 2)]
    if len(pairs) > nkp:
        return None
    return pairs + [(kk, kk)] * (nkp - len(pairs))


def gather_rows_asm(kh: int, ll: int, rb: int, swc: int, pad=None, zb: int = 0) -> list[str] | None:
    """gather_asm for row_pairs' order: no word built from two rows (no
    shifts and ORs): each row's 4-byte groups loaded and split as they are,
    the rows' last bytes (the top byte of a load ending there) joined two
    by two as sign-extended halfwords by ASR and PKHTB, stored without a
    split (2 stores, not 4). pad, zb as gather_asm. None past 9 loads a
    pixel or LDR's 4095."""
    na = ll // 4
    if kh * (na + 1) > 9 or swc + (kh - 1) * rb + ll > 4095:
        return None
    ins = []
    for q in range(2):
        def padded(r, j):
            return pad is not None and pad(q, r, j)
        words = [(r, 4 * a, [d for d in range(4) if padded(r, 4 * a + d)]) for r in range(kh) for a in range(na)]
        lasts = [(r, ll - 4, [3] if padded(r, ll - 1) else []) for r in range(kh)]
        for n, (r, j, pb) in enumerate(words + lasts, 1):
            if len(pb) < 4 and not (j == ll - 4 and pb and all(padded(r, i) for i in range(j, ll))):
                ins.append(f"ldr r{n}, [r0, #{q * swc + r * rb + j}]")
        for g, (r, j, pb) in enumerate(words):
            v = f"r{g + 1}"
            ins += ([f"mov {v}, #0x{zb * 0x01010101:X}"] if len(pb) == 4 else _patch(v, pb, zb)) \
                + [f"sxtb16 r12, {v}", f"sxtb16 lr, {v}, ror #8",
                   f"str r12, [sp, #{16 * g + 4 * q}]", f"str lr, [sp, #{16 * g + 8 + 4 * q}]"]
        for i, (r, j, pb) in enumerate(lasts):
            v = f"r{len(words) + i + 1}"
            if pb and all(padded(r, t) for t in range(j, ll)):
                ins.append(f"mov {v}, #0x{zb << 24:X}")
            else:
                ins += _patch(v, pb, zb)
        base = 16 * len(words)
        for t, i in enumerate(range(0, kh, 2)):
            a = f"r{len(words) + i + 1}"
            if i + 1 < kh:
                ins += [f"asr r10, r{len(words) + i + 2}, #8", f"pkhtb r10, r10, {a}, asr #24"]
            else:
                ins.append(f"asr r10, {a}, #24")
            ins.append(f"str r10, [sp, #{base + 8 * t + 4 * q}]")
    return ins


def rows_reach(kh: int, ll: int, swc: int, rb: int, pad=None) -> int:
    """gather_reach for gather_rows_asm."""
    out = 0
    for q in range(2):
        for r in range(kh):
            for j in [4 * a for a in range(ll // 4)] + [ll - 4]:
                if pad is None or not all(pad(q, r, t) for t in range(j, j + 4)):
                    out = max(out, q * swc + r * rb + j + 4)
    return out


def gather_reach(plan, rb: int, swc: int, pad=None) -> int:
    """Bytes from the pair's first byte that gather_asm's loads (with pad)
    reach: each loaded part's word, for both pixels."""
    return max((q * swc + t["r"] * rb + t["off"] + 4 for q in range(2) for g in plan for t in g
                if pad is None or not all(pad(q, t["r"], j) for j, _ in _part_bytes(t))), default=0)


def pad_gathers(geo, xzp: int, gen, reach) -> dict:
    """The row kernel's gathers with padding (gather_asm's pad), so that
    border pairs skip the C gather: rowt for the last pair of an output
    row whose second window passes the input's right edge (even rows of
    pairs, no padding on its left; treach: the bytes its loads reach, the
    C caller checks they stay inside the image), rowb for every pair of the
    last output row when its window's last rows lie below the input (nvb
    rows inside, from input row ihl), rowc for that row's last pair (when
    its loads stay inside the image). gen(pad, zb): the gather (gather_asm
    or gather_rows_asm), reach(pad) its loads' reach. Empty where none
    applies."""
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    c = geo.c
    zb = int(xzp) & 0xFF
    it0 = (ow - 2) * sw - pl                       # first input column of the last pair
    ihl = (oh - 1) * sh - pt                       # first input row of the last output row
    nvb = h - ihl

    def right(q, r, j):
        return it0 + q * sw + j // c >= wd

    def below(q, r, j):
        return r >= nvb

    out = {}
    if ow % 2 == 0 and ow >= 2 and it0 >= 0 and it0 + sw + kw > wd:
        t = gen(right, zb)
        if t is not None:
            out.update(rowt=t, treach=reach(right))
    if oh >= 1 and ihl >= 0 and 1 <= nvb < kh:
        b = gen(below, zb)
        if b is not None:
            out.update(rowb=b, nvb=nvb, ihl=ihl)
            both = (lambda q, r, j: right(q, r, j) or below(q, r, j))
            if "rowt" in out and (ihl * wd + it0) * c + reach(both) <= h * wd * c:
                out.update(rowc=gen(both, zb), corner=True)
    return out


RING_MAX = 4096   # arena bytes up to which a first layer's input rows are sign-extended into a ring


def ring_plan(geo, kk: int, k4: int, plan, room: int, xe: int) -> dict | None:
    """qconv2_ublocks_dsp's ring kernel for a first layer (C % 4 != 0,
    gathered): the input rows sign-extended once into int16 rows padded with
    x_zp (columns pl before, the rest after, 2 guard elements), kept in a
    ring of n slots of rs bytes (row j of the padded input in slot j % per,
    also in slot j % per + per when that is < n: the kh rows of every output
    row then lie in consecutive slots, at immediate offsets). The K inputs
    of a pixel pair are words of the ring (row r, elements 2i, 2i + 1), the
    odd last element of each window row paired with the next row's by PKHBT
    into a word on the stack (pre), a last one alone with the element after
    it (zero weight: column kk). Returns the plan (perm: K index per packed
    column cols, xa: per K-pair the two pixels' sources, pre: the PKHBT
    instructions, ring geometry) or None: needs 4-byte aligned windows (sw
    c even), word rows (pl c even, w c % 8 == 0), whole pairs per output
    row (ow even), the ring inside the arena's free run at the node
    (scratch_free: on VWW it would grow the arena by 1,664 B for ~14k
    M4 cycles, 703,747 -> 689,784 measured on main 44a06b3 with the
    compiler's slack as its room; not worth 5.7 % more RAM, so it is not
    taken there) and RING_MAX, and
    offsets within LDR's 4095."""
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    c = geo.c
    ll = kw * c
    if (sw * c) % 2 or (pl * c) % 2 or (wd * c) % 8 or ow % 2 or geo.n < 1:
        return None
    wp = max(pl + wd, (ow - 1) * sw + kw)               # padded columns read
    rse = c * wp + 2 + (c * wp) % 2                      # int16 per ring row: guard, whole words
    rs = 2 * rse
    per = sh * -(-kh // sh)
    n = per - sh + kh
    nbytes = n * rs
    if nbytes > RING_MAX or nbytes > max(room, xe):
        return None
    if (kh - 1) * rs + 2 * ll + 2 * 2 * sw * c > 4095 or per * rs > 4095:
        return None
    pairs, srcs, left = [], [], []
    for r in range(kh):
        for j in range(ll // 2):
            pairs.append((r * ll + 2 * j, r * ll + 2 * j + 1))
            srcs.append(("r", r * rs + 4 * j))
        if ll % 2:
            left.append(r)
    pre = []
    ns = 0
    for i in range(0, len(left) - 1, 2):
        a, b = left[i], left[i + 1]
        pairs.append((a * ll + ll - 1, b * ll + ll - 1))
        ld, pk, st = [], [], []
        for q in range(2):
            ra, rb = 4 + 2 * q, 5 + 2 * q
            oa, ob = q * 2 * sw * c + a * rs + 2 * (ll - 1), q * 2 * sw * c + b * rs + 2 * (ll - 1)
            ld += [f"ldr r{ra}, [r0, #{oa}]", f"ldr r{rb}, [r0, #{ob}]"]
            pk.append(f"pkhbt r{ra}, r{ra}, r{rb}, lsl #16")
            st.append(f"str r{ra}, [sp, #{8 * ns + 4 * q}]")
        pre += ld + pk + st
        srcs.append(("s", 8 * ns))
        ns += 1
    if len(left) % 2:
        r = left[-1]
        pairs.append((r * ll + ll - 1, kk))
        srcs.append(("r", r * rs + 2 * (ll - 1)))
    while len(pairs) < k4 // 2:
        pairs.append((kk, kk))
        srcs.append(("r", 0))
    if len(pairs) != k4 // 2 or (kk >= k4 and any(kk in p for p in pairs)):
        return None
    # packed column 4g + t (+ 2) of K-pair 2g + t (kpair_order)
    cols = kpair_order(k4).reshape(-1)
    perm = np.array([k for p in pairs for k in p])
    step = 2 * sw * c * 2                                 # ring bytes from one pair to the next
    xa = [("r0", o, o + step // 2) if kind == "r" else ("sp", o, o + 4) for kind, o in srcs]
    return dict(cols=cols, perm=perm, xa=xa, pre=pre, xe=8 * ns, step=step, rs=rs, rsw=rs // 4,
                per=per, n=n, bytes=nbytes, wp=wp, hp=(oh - 1) * sh + kh, plc=pl * c, wc=wd * c,
                tail=(rse - pl * c - wd * c) // 2, npair=ow // 2)


def acc_bound(wr: np.ndarray, folded: np.ndarray) -> int:
    """max over channels of |acc| for any int8 input: |bias'| + 128 sum |w|."""
    return int((np.abs(folded) + 128 * np.abs(wr).sum(axis=1)).max()) if wr.size else 0


def constant_channels(wr, folded, rq, dsp):
    """Channels whose output is the same for every int8 input (the
    requantization is monotonic in acc: equal at both ends of acc's range),
    e.g. dead channels with a huge bias, can keep a layer on the "fast"
    requantization: their weights and bias become 0 and their row (mult 0,
    e 1, nudge 2 c0) gives c0 from acc = 0. Returns (wr, folded, bound,
    (mode, mult, None)) when that makes the layer "fast", else the inputs
    unchanged and None."""
    import types
    m = wr.shape[0]
    top = folded + np.maximum(127 * wr, -128 * wr).sum(axis=1)
    bot = folded + np.minimum(127 * wr, -128 * wr).sum(axis=1)
    ends = rq.apply(np.stack([bot, top]), (1, -1))
    const = ends[0] == ends[1]
    if not const.any():
        return wr, folded, acc_bound(wr, folded), None
    mult = np.broadcast_to(np.asarray(rq.mult, np.int64).reshape(-1), (m,)).copy()
    shift = np.broadcast_to(np.asarray(rq.shift, np.int64).reshape(-1), (m,)).copy()
    mult[const], shift[const] = 2 ** 30, -1
    wr2, folded2 = wr.copy(), folded.copy()
    wr2[const], folded2[const] = 0, 0
    bound = acc_bound(wr2, folded2)
    mode, table, second = dsp._requant(types.SimpleNamespace(mult=mult, shift=shift, zp=rq.zp), bound, m)
    if mode != "fast":
        return wr, folded, acc_bound(wr, folded), None
    t = table.reshape(m, 3).copy()
    t[const] = np.stack([np.zeros(int(const.sum()), np.int64), np.ones(int(const.sum()), np.int64),
                         2 * ends[0][const].astype(np.int64)], axis=1)
    return wr2, folded2, bound, (mode, t.reshape(-1), None)


def emit(node, x, w, outs, k, p) -> bool:
    """The qconv2_dsp call for a general conv when its preconditions hold."""
    from . import dsp
    geo = p.geo
    (h, wd), (oh, ow), (kh, kw) = geo.hw, geo.out_hw, geo.k
    (sh, sw), (pt, pl) = geo.strides, geo.pad_begin
    m, c = geo.m, geo.c
    kk = kh * kw * c
    k4 = -(-kk // 4) * 4                       # K padded to whole 4-byte groups (zero weights)
    plan = None
    if c % 4:
        if k4 > GATHER_MAX:
            return False
        plan = gather_plan(kh, kw * c, kk)
    xe = 4 * k4                               # bytes of 2 pixels x K halfwords (arena scratch)
    if xe > MAX_XE:
        return False
    wq = offset_weights(np.asarray(w.data).reshape(m, c, kh, kw), p.w_zp, 0)
    if wq.dtype != np.int8:
        return False
    wr = wq.transpose(0, 2, 3, 1).reshape(m, kk).astype(np.int64)       # [m][kh][kw][c]
    bias = p.bias if p.bias is not None else np.zeros(m, np.int64)
    folded = bias - p.x_zp * wr.sum(axis=1)
    bound = acc_bound(wr, folded)
    if bound > 2 ** 31 - 1:
        return False
    mode, mult, second = dsp._requant(p.rq, bound, m)
    if mode != "fast":
        wr, folded, bound, fast = constant_channels(wr, folded, p.rq, dsp)
        if fast is not None:
            mode, mult, second = fast
    sat = dsp._sat(p.rq)
    from . import dsp_pwsk
    # K = 4, 8 or 16 pointwise: the inputs in registers, the channels unrolled (dsp_pwsk.py)
    if plan is None and dsp_pwsk.emit(node, x, outs, k, p, wr, folded, mode, mult, sat):
        return True
    gextra = 8 * kh + -(-kw * c // 4) * 4 + kh * kw * c if plan else 0    # (pointers: 8 bytes on a 64-bit host)
    gs = bool(plan) and xe + gextra <= k.scratch_free()     # (the free bytes hold xe too)
    from . import dsp_rows
    # first layers whose window rows are whole words: rows read from the input, no split
    # activations (the leanest), unless the gather's buffers fit where the leanest plan
    # has room at this step (fewer cycles: 2 pixels share each weight load)
    if plan is not None and not gs and dsp_rows.emit(node, x, wr, folded, mode, mult, sat, outs, k, p):
        return True
    m4 = -(-m // 4) * 4
    wpad = np.zeros((m4, k4), np.int64)
    wpad[:m, :kk] = wr
    pairs = pair_channels(wpad)
    if pairs is None:
        return plan is not None and dsp_rows.emit(node, x, wr, folded, mode, mult, sat, outs, k, p)
    folded = int32_array(node, folded, "bias with the input zero point folded in").astype(np.int64)
    vals = dict(nb=geo.n, npx=oh * ow, ow_n=ow, h=h, w_n=wd, c=c, kh_n=kh, kw_n=kw, sh=sh, sw=sw, pt=pt, pl=pl,
                m_n=m, nkp=k4 // 2, nblk=m4 // 4, xzp=p.x_zp, yzp=p.rq.zp, lo=p.rq.lo, hi=p.rq.hi)
    k.kernel("requant_fixed")
    k.kernel("intrin_dsp")
    k.kernel("intrin_conv_dsp")
    # pointwise without padding: every pixel's C inputs are one run inside x
    pw = plan is None and kh == kw == 1 and pt == pl == 0 and (oh - 1) * sh < h and (ow - 1) * sw < wd
    rev = k.variant() == "rev"
    nat = natural(pairs, m, mode, sat)
    # corr: the rounding's sign fix matters only for outputs above the clamp's low end
    corr = nat and int(p.rq.lo) < int(p.rq.zp)
    # small K: the K-pairs unrolled in the kernel (one kernel per K), no loop
    # (first layers: one per model and the most MACs per output, so the whole K unrolled)
    nkp = k4 // 2 if nat and k4 // 2 <= (NKP_UNROLL_G if plan else NKP_UNROLL) else 0
    if nat and pw and sh == sw == 1:
        nkp = k4 // 2 if k4 // 2 <= NKP_UNROLL_PW else 0
        return emit_pw(node, x, outs, k, p, wpad, pairs, folded, mult, corr, nkp, xe, vals, rev, bound)
    name = f"{mode}{'s' * sat}" + ("_n" + "c" * corr if nat else "") + (f"_k{nkp}" if nkp else "") \
        + (f"_g{kh}x{kw * c}" + "a" * gs if plan else "_pw" if pw else "") + ("_rev" if rev else "")
    # the block loop in assembly: one naked function per kind, shared by the kernels (flash)
    wpk = pack_weights(wpad, pairs)
    rec = records_natural(folded, m, mult) if nat else records(pairs, folded, m, mode, mult, second)
    # first layers with few blocks: the blocks unrolled for this layer (shifts as immediates)
    ust = ustream(wpk, rec, m4 // 4, nkp) if nat and plan and nkp and m4 // 4 <= UBLOCKS_MAX else None
    # 256 acc into SMMLA (emit_pw's "scaled" rows) where the sign fix is not needed and 256 acc fits
    scaled = ust is not None and not corr and bound < SCALED_MAX and scaled_rows(mult) is not None
    if scaled:
        ust = ustream_scaled(wpad, pairs, folded, m, mult, m4 // 4, nkp)
    ublocks = urow = ""
    rst = None                                 # the row kernel's own stream (gather_rows_asm's K order)
    rg = None
    if ust is not None:
        st, es = ust
        import hashlib
        # runs of pixel pairs inside the input: the gather in assembly too (the pixel loop's
        # gather, call and stack traffic were a third of the layer); from the first pair up only
        row = gather_asm(plan, wd * c, sw * c) if not rev else None
        rg = ring_plan(geo, kk, k4, plan, k.scratch_free(), xe + (gextra if gs else 0)) if row is not None else None
        if rg is not None:
            # the input rows sign-extended once into a ring of int16 rows (padding included):
            # every pair of an output row through the ring kernel, no gather (the weights in
            # the ring's K order; w and rec keep the xe order for the plain-C loop)
            wring = np.zeros_like(wpad)
            wring[:, rg["cols"]] = wpad[:, rg["perm"]]
            st, es = (ustream_scaled(wring, pairs, folded, m, mult, m4 // 4, nkp) if scaled else
                      ustream(pack_weights(wring, pairs), rec, m4 // 4, nkp))
            rtag = hashlib.sha1(repr((nkp, es, scaled, rg["xa"], rg["pre"], m, rg["step"], len(st))).encode()).hexdigest()[:10]
            urow = k.kernel("qconv2_ublocks_dsp", {"name": f"ring_{'c' * corr}{'s' * scaled}k{nkp}_b{m4 // 4}_{rtag}",
                                                   "nkp": nkp, "nblk": m4 // 4, "es": es, "corr": corr,
                                                   "scaled": scaled, "ring": rg, "m": m, "sbytes": 4 * len(st)})
            ublocks = urow
            name += "_q" + rtag
        else:
            tag = hashlib.sha1(repr((nkp, es, scaled)).encode()).hexdigest()[:10]
            ublocks = k.kernel("qconv2_ublocks_dsp", {"name": f"{'c' * corr}{'s' * scaled}k{nkp}_b{m4 // 4}_{tag}",
                                                      "nkp": nkp, "nblk": m4 // 4, "es": es, "corr": corr,
                                                      "scaled": scaled})
            name += "_u" + tag
        if row is not None and rg is None:
            ll, rb, swc = kw * c, wd * c, sw * c
            gen = lambda pad, zb: gather_asm(plan, rb, swc, kk, ll, pad, zb)      # noqa: E731
            reach = lambda pad: gather_reach(plan, rb, swc, pad)                  # noqa: E731
            rp = row_pairs(kh, ll, kk, nkp)
            if rp is not None and (kk < k4 or all(kk not in t for t in rp)) and gather_rows_asm(kh, ll, rb, swc) is not None:
                # rows of 4 a + 1 bytes: the row kernel's own K order (its stream's weights permuted)
                gen = lambda pad, zb: gather_rows_asm(kh, ll, rb, swc, pad, zb)  # noqa: E731
                reach = lambda pad: rows_reach(kh, ll, swc, rb, pad)              # noqa: E731
                row = gen(None, 0)
                wrow = np.zeros_like(wpad)
                wrow[:, kpair_order(k4).reshape(-1)] = np.pad(wpad, ((0, 0), (0, 1)))[:, np.array(rp).reshape(-1)]
                rst, _ = (ustream_scaled(wrow, pairs, folded, m, mult, m4 // 4, nkp) if scaled else
                          ustream(pack_weights(wrow, pairs), rec, m4 // 4, nkp))
            pg = pad_gathers(geo, p.x_zp, gen, reach)
            rtag = hashlib.sha1(repr((nkp, es, scaled, row, m, sw * c, wd * c, pg)).encode()).hexdigest()[:10]
            urow = k.kernel("qconv2_ublocks_dsp", {"name": f"row_{'c' * corr}{'s' * scaled}k{nkp}_b{m4 // 4}_{rtag}",
                                                   "nkp": nkp, "nblk": m4 // 4, "es": es, "corr": corr,
                                                   "scaled": scaled, "row": row, "m": m, "swc": sw * c,
                                                   "rb": wd * c, **pg})
            name += "_r" + rtag
    blocks = k.kernel("qconv2_blocks_dsp", {"name": ("nc" if corr else "n") + (f"_k{nkp}" if nkp else ""),
                                            "nkp": nkp, "corr": corr}) if nat and not ublocks else ""
    fn = k.kernel("qconv2_dsp", {"name": name, "rq": mode, "sat": sat, "fields": FIELDS, "nkp": nkp, "blocks": blocks,
                                 "plan": plan, "kh": kh, "ll": kw * c, "k4": k4, "gs": gs, "nat": nat, "corr": corr,
                                 "rw": 3 if mode == "fast" else 2, "pw": pw, "rev": rev, "ublocks": ublocks,
                                 "urow": urow if rg is None else "", "ring": rg, "rfn": urow if rg else "",
                                 "rst": rst is not None,
                                 **({k_: pg.get(k_) for k_ in ("treach", "nvb", "ihl", "corner")} if urow and rg is None else {})})
    wsym = k.const(wpk, f"{w.name}_dsp2")
    rsym = k.const(rec.astype(np.int32), f"{node.name}_pairs")
    gsym = k.const(np.array([vals[f] for f in FIELDS], np.int32), "qconv2_dsp_geo")
    # the gather's row pointers, zero row and border copies follow xe in the arena
    # where the leanest plan has that room at this step (gs; else on the stack)
    bufs = k.scratch_buf(max(xe + (gextra if gs else 0), rg["bytes"] if rg else 0), "int32_t")
    k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, what="qconv2_dsp: pixel pairs"))
    k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, reverse=True,
                                      what="qconv2_dsp: pixel pairs from the last down"), "rev")
    ssym = f", {k.const(st.astype(np.int32), f'{node.name}_ustream')}" if ublocks or rg else ""
    if rst is not None:
        ssym += f", {k.const(rst.astype(np.int32), f'{node.name}_rstream')}"
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {wsym}, {rsym}, {gsym}, {bufs}{ssym});")
    return True


def ustream(wpk: np.ndarray, rec: np.ndarray, nblk: int, nkp: int):
    """(stream, shifts) of qconv2_ublocks_dsp: per block the biases of pairs
    A and B lo, the block's 2 nkp weight words, twice the biases of A and B
    hi, then (mult, nudge) of channels 4b + 1, 4b + 2, 4b + 3, 4b (the store
    order); shifts[b] their e (SSAT's immediate shift, 1..31). None when a
    shift is outside that range."""
    w = np.asarray(wpk, np.int64).reshape(nblk, 2 * nkp)
    r = np.asarray(rec, np.int64).reshape(nblk, 16)
    rows = r[:, 4:].reshape(nblk, 4, 3)
    if rows[:, :, 1].min() < 1 or rows[:, :, 1].max() > 31:
        return None
    st = np.concatenate([r[:, 0:2], w, r[:, 2:4], rows[:, :, [0, 2]].reshape(nblk, 8)], axis=1).reshape(-1)
    return st, [[int(e) for e in blk] for blk in rows[:, :, 1]]


def ustream_scaled(wpad, pairs, folded, m: int, table, nblk: int, nkp: int):
    """ustream for the "scaled" rows (requant_scaled): per block T A, S A,
    T B, S B (stream's), the weight words, then (mult, 64 + 128 nudge) per
    store; shifts e + 7 (1..31: scaled_rows)."""
    s = stream(wpad, pairs, folded, m, table, None, True).reshape(nblk, 4 + 2 * nkp + 12)
    rows = s[:, 4 + 2 * nkp:].reshape(nblk, 4, 3)
    st = np.concatenate([s[:, :4 + 2 * nkp], rows[:, :, [0, 2]].reshape(nblk, 8)], axis=1).reshape(-1)
    return st, [[int(e) for e in blk] for blk in rows[:, :, 1]]


SCALED_MAX = 2 ** 23   # |acc| below this: 256 acc fits int32 (the "scaled" requantization)


def requant_scaled(acc, mult, e, zp) -> np.ndarray:
    """What emit_pw's "scaled" kernels compute from v = 256 acc (int64
    numpy): (floor(v mult / 2^32) + 64 + 128 nudge) >> (e + 7) with nudge =
    2^(e-1) + zp 2^e (SMMLA, then a shift). Equal to requant_fast2 without
    its sign fix, i.e. floor((2 acc mult + 2^31 + nudge 2^32) / 2^(32+e)):
    v mult / 2^32 = 128 (2 acc mult / 2^32), so the floor by 2^32 then by
    2^(e+7) is the floor of the whole by 2^(39+e), and 2^38 + nudge 2^39 =
    (64 + 128 nudge) 2^32 sits whole above it. Used only where the sign fix
    does not matter (no corr: the clamp's low end at or above the zero
    point) and |acc| < 2^23."""
    acc = np.asarray(acc, np.int64)
    e = np.asarray(e, np.int64)
    nudge = (np.int64(1) << (e - 1)) + np.int64(zp) * (np.int64(1) << e)
    return (((256 * acc * np.asarray(mult, np.int64)) >> 32) + 64 + 128 * nudge) >> (e + 7)


def scaled_rows(table) -> np.ndarray | None:
    """[channel][mult, e + 7, 64 + 128 nudge] from the "fast" table [mult,
    e, nudge] when they fit, else None: e + 7 <= 31, and |64 + 128 nudge| <
    2^30 so SMMLA's sum with floor(v mult / 2^32) (|v| < 2^31, mult < 2^31:
    below 2^30 in size) stays inside int32."""
    t = np.asarray(table, np.int64).reshape(-1, 3)
    n = 64 + 128 * t[:, 2]
    if np.any(t[:, 1] + 7 > 31) or np.any(np.abs(n) >= 2 ** 30):
        return None
    return np.stack([t[:, 0], t[:, 1] + 7, n], axis=1)


def nearest_first(r: int) -> np.ndarray:
    """-r..r (int64) ordered by distance from 0, the negative side first at a
    tie: the offsets the multiplier solvers try around a channel's own."""
    span = np.arange(-r, r + 1, dtype=np.int64)
    return span[np.argsort(np.abs(span), kind="stable")]


def _thresholds(mult, big_e, n):
    """[channel][255] the least acc whose floor((256 acc mult + n 2^32) /
    2^(32+E)) reaches q = -127..127 (mult > 0; int64: |q 2^E - n| < 2^38,
    times 2^24 below 2^63)."""
    q = np.arange(-127, 128, dtype=np.int64)[None, :]
    num = (q << big_e[:, None]) - n[:, None]
    den = np.maximum(mult, 1)[:, None]
    return -((-(num << 24)) // den)


def common_shift(rows, bot, top) -> np.ndarray | None:
    """scaled_rows' rows [channel][mult, E, n] rewritten to one shift E0 =
    min E for every channel (an immediate of SSAT: one instruction less per
    output), or None. The kernel's output is sat8(floor((256 acc mult + n
    2^32) / 2^(32+E))), monotonic in acc: two rows give the same int8 for
    every acc in [bot, top] (the channel's range over every int8 input) iff
    the least acc reaching each level -127..127, clipped to [bot, top + 1],
    is the same. A channel with E = E0 + d takes (mult >> d or one more,
    n >> d or one more), the first pair whose 255 thresholds match the
    original's exactly (a zero mult, the constant channels: n 2^-d, exact
    as floors compose; E0 is the least E of the others); the
    arithmetic is unchanged, only its constants. None when some channel
    finds no such pair (then the per-channel shifts stay)."""
    t = np.asarray(rows, np.int64).reshape(-1, 3)
    mult, big_e, n = t[:, 0], t[:, 1], t[:, 2]
    live = mult != 0
    e0 = int(big_e[live].min() if live.any() else big_e.min())
    d = big_e - e0
    if not d.any():
        return t
    lo, hi = np.asarray(bot, np.int64)[:, None], np.asarray(top, np.int64)[:, None] + 1
    want = np.clip(_thresholds(mult, big_e, n), lo, hi)
    out = np.stack([mult, np.full_like(big_e, e0), n], axis=1)
    done = d == 0
    # constant channels: n 2^-d (d < 0 multiplies, exactly, while SMMLA's sum stays inside int32)
    zero = ~live & ~done
    out[zero, 2] = np.where(d[zero] > 0, n[zero] >> np.maximum(d[zero], 0), n[zero] << np.maximum(-d[zero], 0))
    if np.any(np.abs(out[zero, 2]) >= 2 ** 30):
        return None
    done |= zero
    for dm in (0, 1):
        for dn in (0, 1):
            m2, n2 = (mult >> d) + dm, (n >> d) + dn
            got = np.clip(_thresholds(m2, np.full_like(big_e, e0), n2), lo, hi)
            ok = ~done & np.all(got == want, axis=1)
            out[ok, 0], out[ok, 2] = m2[ok], n2[ok]
            done |= ok
    return out if done.all() else None


def _dead_at_shift(rows, e0=None) -> np.ndarray:
    """rows [channel][mult, E, n] with the constant channels (mult 0: output
    sat8(floor(n / 2^E))) moved to shift e0 (default: the least E of the
    live ones), n 2^-d (floors compose) or n 2^d (exact) while |n| < 2^30
    (else left as they are): dsp_dw.one_shift wants them at its shift."""
    t = np.array(rows, np.int64).reshape(-1, 3)
    live = t[:, 0] != 0
    if not live.any() or live.all():
        return t
    d = t[~live, 1] - (int(t[live, 1].min()) if e0 is None else e0)
    n = np.where(d > 0, t[~live, 2] >> np.maximum(d, 0), t[~live, 2] << np.maximum(-d, 0))
    if np.all(np.abs(n) < 2 ** 30):
        t[~live, 1] -= d
        t[~live, 2] = n
    return t


ONE_N_SPAN = 64    # multipliers tried either side of a hi channel's own by lo_nudge
ONE_N_WIDE = 2048  # then these (a step of m moves the thresholds by 256 T_q: more room with big T_q)


def _offset_fit(want, bot: int, top: int, big_e: int, ms, base: int, step_of):
    """The first (m, k) with m from ms (nearest first) such that
    floor((256 acc m + base + k step_of(m)) / 2^(32+E)) reaches each level
    q = -127..127 at acc want[q] over [bot, top] (want clipped to [bot,
    top + 1]), or None. With N = base + k step the feasible N for one m are
    an interval: N >= q 2^(32+E) - 256 T_q m where level q is reached inside
    the range, N <= q 2^(32+E) - 256 (T_q - 1) m - 1 where it is not reached
    at T_q - 1; k the least whose N is not below it (int64: the caller keeps
    every term below 2^62.5: |acc| < 2^23, E <= 20, |n| < 2^27)."""
    q = np.arange(-127, 128, dtype=np.int64) << (32 + big_e)
    ms = np.asarray(ms, np.int64)
    ms = ms[(ms > 0) & (ms < 2 ** 31)]
    ge, lt = want <= top, want > bot
    lo = (q[ge][None, :] - 256 * want[ge][None, :] * ms[:, None]).max(axis=1, initial=-2 ** 62)
    hi = (q[lt][None, :] - 256 * (want[lt] - 1)[None, :] * ms[:, None] - 1).min(axis=1, initial=2 ** 62)
    st = step_of(ms)
    k = -((base - lo) // st)                       # ceil((lo - base) / step)
    ok = np.flatnonzero(base + k * st <= hi)
    return None if not ok.size else (int(ms[ok[0]]), int(k[ok[0]]))


def lo_nudge(srows, bot, top):
    """emit_pw's rows with the nudges of the lo channels only (a block's
    rows: m of channels 4b + 1, 4b + 2, n of 4b + 2, then m of 4b + 3, 4b, n
    of 4b: two LDM of 3 words, 8 cycles against two of 4, 10), or None. The
    kernel's stores run in two groups of 2 channels (A hi with B lo, then B
    hi with A lo), each with one n register: the lo channel's own, and the
    hi channel's output made to match with that n. The hi channel's value
    is T - S, so T may start g away from its bias (any integer: finer than
    a step of n; a lo channel's S << 8 moves by 256 only, so its n stays):
    per hi channel the first m within ONE_N_SPAN of its own, then
    ONE_N_WIDE (nearest first), for which some g reproduces its outputs
    over [bot, top] (its least acc per level, _thresholds, clipped), 256
    acc + g inside int32 there; a constant one (mult 0, acc its bias b): m
    2^30 and 256 b + g = 4 (n - n'), the same value before the shift. One
    E for every channel (SSAT's immediate). Returns (mults [channel], g
    [channel] (0 on lo channels), the n of each channel's group [channel]);
    checked level by level against the original with Python integers
    (_one_nudge_ok)."""
    t = np.asarray(srows, np.int64).reshape(-1, 3)
    mult, big_e, n = t[:, 0], t[:, 1], t[:, 2]
    nch = len(t)
    if nch % 4 or not np.all(big_e == big_e[0]) or big_e[0] > 20:
        return None
    e = int(big_e[0])
    bot, top = np.asarray(bot, np.int64), np.asarray(top, np.int64)
    if np.any(np.abs(bot) >= SCALED_MAX) or np.any(np.abs(top) >= SCALED_MAX) or np.any(np.abs(n) >= 2 ** 27):
        return None
    want = np.clip(_thresholds(mult, big_e, n), bot[:, None], top[:, None] + 1)
    span, wide = nearest_first(ONE_N_SPAN), nearest_first(ONE_N_WIDE)
    ms, gs = mult.copy(), np.zeros(nch, np.int64)
    # the n each channel's group uses: 4b + 1 and 4b + 2 that of 4b + 2, 4b + 3 and 4b that of 4b
    src = np.arange(nch) // 4 * 4 + np.array([0, 2, 2, 0])[np.arange(nch) % 4]
    ns = n[src]
    for ch in range(1, nch, 2):
        if n[ch] == ns[ch]:
            continue
        if not mult[ch]:
            # constant: acc is the bias b, v = 256 b + g = 4 (n - n') with m 2^30 gives n' + floor(v / 4) = n
            ms[ch], gs[ch] = 2 ** 30, 4 * (int(n[ch]) - int(ns[ch])) - 256 * int(bot[ch])
            continue
        for sp in (span, wide):
            r = _offset_fit(want[ch], int(bot[ch]), int(top[ch]), e, int(mult[ch]) + sp, int(ns[ch]) << 32, lambda m: m)
            if r is not None and max(abs(256 * int(bot[ch]) + r[1]), abs(256 * int(top[ch]) + r[1])) < 2 ** 31:
                break
            r = None
        if r is None:
            return None
        ms[ch], gs[ch] = r
    if not _one_nudge_ok(mult, e, n, ms, ns, gs, bot, top):
        return None
    return ms, gs, ns


@memo.solver
def _one_nudge_ok(mult, e, n, ms, ns, gs, bot, top) -> bool:
    """lo_nudge's result against the original rows, level by level, in
    Python integers: the least acc in [bot, top + 1] reaching each level q,
    ceil((q 2^E - n) 2^24 / mult) before (a constant channel: bot or top +
    1 by floor(n / 2^E)), ceil((ceil((q 2^E - n) 2^32 / m) - g) / 256)
    after."""
    def ceil(a, b):
        return -((-a) // b)

    for ch in range(len(ms)):
        b, t1 = int(bot[ch]), int(top[ch]) + 1
        mo, no, mn, g, nc = int(mult[ch]), int(n[ch]), int(ms[ch]), int(gs[ch]), int(ns[ch])
        for q in range(-127, 128):
            old = ceil(((q << e) - no) << 24, mo) if mo > 0 else (b if (no >> e) >= q else t1)
            new = ceil(ceil(((q << e) - nc) << 32, mn) - g, 256) if mn > 0 else (b if (nc >> e) >= q else t1)
            if min(max(old, b), t1) != min(max(new, b), t1):
                return False
    return True


def stream(wpad, pairs, folded, m: int, table, e, scaled: bool, srows=None, ln=None) -> np.ndarray:
    """int32 [block][16 + 2 nkp] of emit_pw's kernel (12 + 2 nkp with a
    common shift e: rows without it): biases of pairs A, B lo, the block's
    weight words (pack_weights), twice the biases of A, B hi, the 4 store
    rows (records_natural's order). scaled: T A, S A, T B, S B first (T
    from bias lo + 256 bias hi, modulo 2^32), no hi biases after the
    words, the rows of scaled_rows. ln (lo_nudge's (mults, g, n), scaled
    with e): T A, T B start g of channels 4b + 1, 4b + 3 further, and the
    rows are m of 4b + 1, 4b + 2, n of 4b + 2, m of 4b + 3, 4b, n of 4b
    (10 + 2 nkp words)."""
    nblk = len(pairs) // 2
    table = np.asarray(table, np.int64)
    if scaled and srows is None:
        srows = scaled_rows(table)
    rec = records_natural(folded, m, srows.reshape(-1) if scaled else table).reshape(nblk, 16)
    rows = rec[:, 4:].reshape(nblk, 4, 3)
    if e is not None:
        rows = rows[:, :, [0, 2]]
    words = pack_weights(wpad, pairs).astype(np.int64).reshape(nblk, -1)
    if scaled:
        b = np.asarray(folded, np.int64).reshape(nblk, 4)
        g = np.zeros((nblk, 4), np.int64) if ln is None else np.asarray(ln[1], np.int64).reshape(nblk, 4)
        t = (b[:, [0, 2]] + 256 * b[:, [1, 3]] + g[:, [1, 3]] + 2 ** 31) % 2 ** 32 - 2 ** 31   # (T wraps as SMLAD does)
        head = np.stack([t[:, 0], b[:, 0], t[:, 1], b[:, 2]], axis=1)
        if ln is not None:
            ms, ns = np.asarray(ln[0], np.int64).reshape(nblk, 4), np.asarray(ln[2], np.int64).reshape(nblk, 4)
            rows = np.stack([ms[:, 1], ms[:, 2], ns[:, 2], ms[:, 3], ms[:, 0], ns[:, 0]], axis=1)
        return np.concatenate([head, words, rows.reshape(nblk, -1)], axis=1).reshape(-1)
    return np.concatenate([rec[:, :2], words, rec[:, 2:4], rows.reshape(nblk, -1)], axis=1).reshape(-1)


def emit_pw(node, x, outs, k, p, wpad, pairs, folded, table, corr: bool, nkp: int, xe: int, vals, rev: bool,
            bound: int) -> bool:
    """Pointwise, stride 1, natural order (every pixel's C inputs follow the
    previous pixel's, every output row likewise): the whole pixel loop in
    assembly (qconv2_pwblk_dsp), the weights and the requantization rows of
    a block in one stream (one pointer: no reloads between the K steps and
    the stores), the split of each pixel pair inside the loop (no call per
    pair). Layers whose channels all shift by the same e (or whose scaled
    rows common_shift makes so) take it as an immediate of SSAT (one
    instruction less per output). An odd last pixel runs alone (the one_
    kernel), so pairs are whole: the unrolled kernels (K <= 2
    NKP_UNROLL_PW) keep xe on the stack and y0 in a register, and store the
    second pixel at y0 + m (one kernel per m); up to 2 NKP_UNROLL_PW_X K
    stays unrolled with xe in the arena (read at immediate offsets, the _x
    kernels, also per m: the pair's split unrolled at immediate offsets, xe's
    pointer reloaded inside each block's bias-load run); past that K runs in a loop of
    PW_LOOP K-pairs a turn (one end test per 32 K-pairs), entered once per
    block at the step (nkp - 1) % PW_LOOP leaves, and the scaled kernels
    with one shift store at y0 + m too (per m: no y1 to reload and store,
    two rows a LDM). Same read/write orders as
    qconv2_dsp (pixel pairs from the first up, or from the last down: rev;
    the odd pixel first from the last down, last from the first up).

    Where the M4 cycles of a block of 8 outputs go past the K loop (15 per
    K-pair; sl kernels, K unrolled, two blocks a turn): 8 SUB/LSL (hi T - S,
    lo S << 8), 2 LDM of 3 rows (8), 8 SMMLA, 8 SSAT, 8 STRB/STRH, the 4
    biases (a run with the first K-pair's loads: 5), the end test every
    second block (LDR, CMP, BNE: ~5). Every run of loads costs one cycle
    more than its loads (as a LDM), so merging the next block's biases into
    the second rows' LDM saves nothing on the M4. Starting S from 0 (no S
    bias loads) needs the lo channels' rows solved anew for acc less its
    bias: dsp_dw._fit finds no exact row for ~5-25 % of VWW's lo channels
    within FIT_SPAN, so a layer-wide kernel cannot take it."""
    m = vals["m_n"]
    # 256 acc into SMMLA (hi: T - S, without the add of its bias; lo: S << 8) where the
    # sign fix is not needed and 256 acc fits int32
    scaled = not corr and bound < SCALED_MAX and scaled_rows(table) is not None
    srows = scaled_rows(table) if scaled else None
    if scaled:
        # per-channel shifts made one where the outputs stay the same for every input (common_shift,
        # else dsp_dw's per-channel solver)
        from . import dsp_dw
        wr = wpad[:m]
        f = np.asarray(folded, np.int64)
        bot, top = f + np.minimum(127 * wr, -128 * wr).sum(axis=1), f + np.maximum(127 * wr, -128 * wr).sum(axis=1)
        live = srows[:, 0] != 0
        # a shift that is a multiple of 4 first (one kernel per shift and shape: VWW's K = 128
        # layers, least shifts 12..14, share one at 12), else the least
        e4 = int(srows[live, 1].min()) // 4 * 4 if live.any() else 0
        one = dsp_dw.one_shift(_dead_at_shift(srows, e4), bot, top, e4) if e4 > 0 else None
        if one is None:
            one = dsp_dw.one_shift(_dead_at_shift(srows), bot, top)
        srows = srows if one is None else one
    es = (srows if scaled else np.asarray(table, np.int64).reshape(m, 3))[:, 1]
    e = int(es[0]) if np.all(es == es[0]) else None
    # scaled with one shift (two rows a LDM): the hi channels made to use the lo channels' nudges
    # (lo_nudge: 6 row words a block, two LDM of 3)
    ln = lo_nudge(srows, bot, top) if scaled and e is not None and m + 3 <= 4095 else None
    # (both loop orders in one kernel: the direction is an argument)
    kind = ("sl" if ln is not None else "s" if scaled else "nc" if corr else "n") + (f"_k{nkp}" if nkp else "") \
        + (f"_e{e}" if e is not None else "")
    # an odd pixel count: the last pixel alone (a pair with itself cost a whole pass: 3x3 maps),
    # so every pair is whole and the unrolled kernels store the second pixel at y0 + m (immediates)
    odd = vals["npx"] % 2 == 1
    # K past the stack's xe but within NKP_UNROLL_PW_X: unrolled all the same, xe read from the arena
    kx = vals["nkp"] if not nkp and vals["nkp"] <= NKP_UNROLL_PW_X and m + 3 <= 4095 else 0
    mi = m if (nkp or kx or (scaled and e is not None)) and m + 3 <= 4095 else 0      # (STRB's immediate offsets reach 4095)
    # the output stored as its depthwise consumer's int16 channel planes (dsp_dw: every channel's
    # plane, word [X][k] = rows 2k, 2k + 1 of column X): halfword stores at plane offsets, its
    # conversion left out (the rows2 stores: scaled, one shift, whole pairs along each row)
    pl = None
    (oh, ow) = p.geo.out_hw
    # (only where the planes fit the free arena at both steps in the leanest plan: k.room is known
    # in the compiler's second lowering; the arena must not grow)
    if PLANES_OUT and scaled and e and mi and not rev and vals["nb"] == 1 and ow % 2 == 0 and k.room:
        lay = k.planes_of(outs[0])
        if lay is not None and (lay["h"], lay["w"], lay["c"]) == (oh, ow, m) and \
                lay["bytes"] + xe <= k.scratch_free() and lay["bytes"] <= k.free_at(lay["consumer"]):
            pb = 4 * lay["plane"]
            if 4 * pb <= 4095 and 3 * pb + 4 * lay["kp"] <= 4095:
                pl = dict(lay, pb=pb)
    if pl is not None:
        k.planes[outs[0].name] = {f: v for f, v in pl.items() if f not in ("pb", "consumer")}
        mi = 4 * pl["kp"]                 # the pair's second pixel: the next plane column
    loop = PW_LOOP
    ldm = getattr(k.target, "core", None) in LDM_CORES
    # two blocks a turn of the block loop (K unrolled, scaled, one shift, an even block count): for
    # layers with at least UNROLL2_PASSES block passes (~2 KB of code more at K = 64, ~3.6 KB at 128)
    passes = vals["nb"] * (vals["npx"] // 2) * vals["nblk"]
    u2 = bool((nkp or kx) and scaled and e is not None and mi and vals["nblk"] % 2 == 0
              and (passes >= UNROLL2_PASSES or 0 < nkp <= 8))
    ptag = f"_h{pl['pb']}" if pl else ""
    blocks = k.kernel("qconv2_pwblk_dsp", {"name": kind + (f"_x{kx}" if kx else "") + (f"_m{mi}" if mi else "")
                                           + "_u" * u2 + ptag,
                                           "nkp": nkp, "corr": corr, "e": e, "scaled": scaled, "m": mi, "loop": loop,
                                           "kx": kx, "ln": ln is not None, "ldm": ldm, "u2": u2,
                                           "pb": pl["pb"] if pl else 0})
    one = k.kernel("qconv2_pwblk_dsp", {"name": "one_" + kind, "nkp": nkp, "corr": corr, "e": e,
                                        "scaled": scaled, "one": True, "ln": ln is not None, "ldm": ldm}) if odd else ""
    if pl:
        ptag += f"_p{oh}x{ow}k{pl['kp']}l{pl['lf']}t{pl['pt']}"
    fn = k.kernel("qconv2_dsp", {"name": "pw_" + kind + (f"_x{kx}" if kx else "") + (f"_m{mi}" if mi else "") + "_u" * u2
                                 + "_o" * odd + ptag, "stream": True, "blocks": blocks, "e": e,
                                 "scaled": scaled, "one": one, "loop": loop, "ln": ln is not None, "pl": pl})
    ssym = k.const(stream(wpad, pairs, folded, m, table, e, scaled, srows, ln).astype(np.int32), f"{node.name}_pw")
    bufs = k.scratch_buf(xe, "int32_t")
    geo = p.geo
    if pl is None:      # (planes: no order, not written over its input)
        k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, what="qconv2_dsp: pixel pairs"))
        k.order(0, lambda: windows.raster(geo, False, group=2, cblock=0, reverse=True,
                                          what="qconv2_dsp: pixel pairs from the last down"), "rev")
    k.line(f"{fn}({k.ptr(outs[0])}, {k.ptr(x)}, {ssym}, {vals['nb']}, {vals['npx']}, {vals['c']}, {m}, "
           f"{vals['nblk']}, {bufs}, {int(rev)});")
    return True
