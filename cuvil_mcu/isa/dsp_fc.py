"""The int8 fully connected layer on the DSP extension with paired output
channels (qfc2_dsp), tried first by isa.dsp.emit_qgemm.

Batch-1 FC layers use each weight once, so the cost per MAC is set by how
many instructions touch a weight: with int8 weights one 4-byte word needs
LDR + 2 SXTB16 + 2 SMLAD for 4 MACs. Here a pair of output channels (lo,
hi) shares one int16 per input index, H[k] = 256 w[hi][k] + w[lo][k]
(still one byte per weight), two per word: H[k] | H[k + 2] << 16, matching
SXTB16's byte order on the activations x0 = [x[k], x[k+2]], x1 = [x[k+1],
x[k+3]]. Then
    t  += SMLAD(x, word)          = 256 acc[hi] + acc[lo]   (mod 2^32)
    bl += SMLAD(x, SXTB16(word))  = acc[lo]  (SXTB16(word) = [w[lo][k], w[lo][k+2]])
and acc[hi] = (int32)(t - bl) >> 8: 4 MACs per weight word cost one LDRD
half, one SXTB16 and two SMLADs, and each activation word serves 4 pairs:
8 accumulators, with the group loop in assembly on Arm (every register
pinned, r7 saved on the stack; 32 MACs in 31 instructions direct, 29
buffered), the C loop elsewhere.

Preconditions, checked here per pair from the real weights and bias (else
the other orientation of the pair, else the layer keeps qfc_dsp):
- H fits int16: not (w[hi][k] == -128 and w[lo][k] < 0) for any k;
- -2^23 <= acc[hi] < 2^23 for every int8 input, the bias included (it
  starts t), so 256 acc[hi] is exact in int32. When a long row breaks that,
  the "chunk" variant moves the part of acc[hi] out of t - bl after every
  ckn steps (t restarts at bl) and the bound holds per chunk.
A pair whose orientation is swapped computes the lower channel index in
the hi slot; the kernel exchanges the two output bytes after each row.

Two variants: "direct" (one pass of channels per row, a row shorter than 8
or longer than 2048) splits a's words as it reads them; otherwise a's row
is split once into a stack buffer of int16 pairs (MAX_STACK bytes, one
size for every layer: one kernel variant, flash) shared by every pass,
zero padded to steps of 8 k.

Requantization: the same variants and tables as qfc_dsp (dsp._requant),
per output slot; "fast" reorders its table to (mult, nudge, e) so one LDRD
reads the first two, and takes 2 acc (acc[hi] * 2 = (t - bl) >> 7).
"""
from __future__ import annotations

import numpy as np

NP = 4                      # channel pairs per pass: 8 accumulators + 2 x + 2 w + 2 pointers (asm: every register)
HI_LIM = 2 ** 23            # |acc[hi]| bound for exact extraction from t - bl
MAX_CHUNKS = 64
FIELDS = ("m", "n", "kk", "npass", "kf", "kt", "ng2", "ckn", "nsw", "yzp", "lo", "hi")


def acc_range(w: np.ndarray, c) -> tuple[np.ndarray, np.ndarray]:
    """(min, max) of c + sum_k x[k] w[k] over every int8 x, per row of w."""
    w = np.asarray(w, np.int64)
    lo = np.where(w > 0, -128 * w, 127 * w).sum(axis=-1) + c
    hi = np.where(w > 0, 127 * w, -128 * w).sum(axis=-1) + c
    return lo, hi


def pair_ok(w_lo: np.ndarray, w_hi: np.ndarray, c_hi: int, chunks=None) -> bool:
    """Can (lo, hi) share halfwords: H fits int16 and acc[hi] stays within
    [-2^23, 2^23) (t - bl = 256 acc[hi] exactly); chunks: the group (of 4
    k) ranges after which the kernel extracts acc[hi], the bias in the
    first; None: one chunk, all of k."""
    w_lo, w_hi = np.asarray(w_lo, np.int64), np.asarray(w_hi, np.int64)
    if np.any((w_hi == -128) & (w_lo < 0)):
        return False
    for i, (g0, g1) in enumerate(chunks or [(0, -(-w_hi.size // 4))]):
        lo, hi = acc_range(w_hi[4 * g0:4 * g1], int(c_hi) if i == 0 else 0)
        if lo < -HI_LIM or hi >= HI_LIM:
            return False
    return True


def plan_pairs(b: np.ndarray, c: np.ndarray, chunks=None) -> list[int] | None:
    """Channel of each slot (slots 2p, 2p + 1 = lo, hi of pair p; an odd
    channel count gets a zero channel, index n, as the last hi), or None
    when some pair works in neither orientation."""
    n = b.shape[0]
    slots: list[int] = []
    for p in range(0, n - 1, 2):
        if pair_ok(b[p], b[p + 1], c[p + 1], chunks):
            slots += [p, p + 1]
        elif pair_ok(b[p + 1], b[p], c[p], chunks):
            slots += [p + 1, p]
        else:
            return None
    if n % 2:
        slots += [n - 1, n]   # the zero channel as hi: H = w[lo] fits, acc[hi] = 0
    return slots


def chunk_ranges(direct: bool, kf: int, kt: int, ng2: int, ckn: int) -> list[tuple[int, int]]:
    """The group ranges between the kernel's extractions of acc[hi] (chunk
    variant): direct, ckn groups at a time over the kf full groups (one
    empty chunk when kf is 0), then the tail group alone; buffered, ckn
    steps of 2 groups over 2 ng2 groups."""
    if direct:
        r = [(g, min(g + ckn, kf)) for g in range(0, kf, ckn)] or [(0, 0)]
        return r + ([(kf, kf + 1)] if kt else [])
    return [(2 * s, 2 * min(s + ckn, ng2)) for s in range(0, ng2, ckn)]


def plan_chunks(b, c, direct, kf, kt, ng2):
    """(slots, ckn) with the fewest chunks that make every pair fit, or None."""
    steps = kf if direct else ng2
    for nc in range(2, MAX_CHUNKS + 1):
        ckn = -(-steps // nc)
        if ckn < 1:
            break
        slots = plan_pairs(b, c, chunk_ranges(direct, kf, kt, ng2, ckn))
        if slots is not None:
            return slots, ckn
        if ckn == 1:
            break
    return None


def pack(b: np.ndarray, c: np.ndarray, slots: list[int], groups: int, np_: int = NP) -> tuple[np.ndarray, np.ndarray]:
    """(weight words int32 [...] (bits of uint32), start values int32
    [pair][t, bl]) in the kernel's reading order: passes of np_ pairs, then
    single pairs; per pass [group of 4 k][pair][word x0, x1]."""
    n, kk = b.shape
    bz = np.zeros((n + 1, 4 * groups), np.int64)
    bz[:n, :kk] = b
    cz = np.concatenate([np.asarray(c, np.int64), [0]])
    s = np.asarray(slots).reshape(-1, 2)
    h = (256 * bz[s[:, 1]] + bz[s[:, 0]]).astype(np.int16).view(np.uint16).astype(np.uint32)  # [pair][k]
    h = h.reshape(-1, groups, 2, 2)                       # [pair][g][k+2 half][x0/x1 (k, k+1)]
    words = h[:, :, 0, :] | (h[:, :, 1, :] << 16)         # [pair][g][x0/x1]
    npair = s.shape[0]
    full = npair // np_ * np_
    parts = [words[q:q + np_].transpose(1, 0, 2).reshape(-1) for q in range(0, full, np_)]
    parts += [words[q].reshape(-1) for q in range(full, npair)]
    t0 = (256 * cz[s[:, 1]] + cz[s[:, 0]]) & 0xFFFFFFFF
    start = np.stack([t0, cz[s[:, 0]] & 0xFFFFFFFF], axis=1).astype(np.uint32).view(np.int32)
    return np.concatenate(parts).astype(np.uint32).view(np.int32), start.reshape(-1)


def _drop_unused(k, sym: str) -> None:
    """Remove a const the portable kernel would have read (no unused array in flash)."""
    k.drop_unused_const(sym)


def emit(op, node, ins, outs, k, prm) -> bool:
    """The paired-channel kernel for the QGemm / QLinearMatMul call, or
    False (isa.dsp.emit_qgemm then emits qfc_dsp or the portable kernel)."""
    from . import dsp
    rq, m, n, kk = prm["rq"], prm["m"], prm["n"], prm["kk"]
    operands = dsp.fc_operands(prm, k)
    if operands is None or n < 1 or kk < 1:
        return False
    b, c = operands
    b_sym, c_sym = prm["b"], prm["c"]
    b = b.astype(np.int64).reshape(n, kk)
    bound = int(np.abs(c).max()) + kk * 128 * int(np.abs(b).max())
    if bound > 2 ** 31 - 1:
        return False
    npair = -(-n // 2)
    np_ = min(NP, npair)
    npass, rem = divmod(npair, np_)
    kf, kt = divmod(kk, 4)
    ng2 = -(-kk // 8)
    buf = 4 * ng2                                # int32 words of split activations (arena scratch)
    direct = npass + rem == 1 or kk < 8 or buf > dsp.MAX_STACK // 4 or 4 * buf > k.scratch_room()
    groups = kf + (kt > 0) if direct else 2 * ng2
    slots, ckn = plan_pairs(b, c), 0
    if slots is None:
        plan = plan_chunks(b, c, direct, kf, kt, ng2)
        if plan is None:
            return False
        slots, ckn = plan
    words, start = pack(b, c, slots, groups, np_)
    mode, mult, second = dsp._requant(rq, bound, n)
    perm = np.minimum(np.asarray(slots), n - 1)      # the zero channel: any valid entry (not stored)
    pt = False
    if second is None:   # "fast": per slot (mult, nudge, e) for {p}__fc_rq2; one triple if all equal
        t = mult.reshape(n, 3)[perm][:, [0, 2, 1]]
        pt = bool(np.all(t == t[:1]))
        mult = (t[:1] if pt else t).reshape(-1)
    else:
        mult, second = mult[perm], second[perm]
    sat = dsp._sat(rq)
    swaps = [2 * p for p in range(npair) if slots[2 * p] > slots[2 * p + 1]]
    vals = dict(m=m, n=n, kk=kk, npass=npass, kf=kf, kt=kt, ng2=ng2, ckn=ckn, nsw=len(swaps), yzp=rq.zp,
                lo=rq.lo, hi=rq.hi)
    k.kernel("requant_fixed")
    k.kernel("intrin_dsp")
    k.kernel("intrin_fc_dsp")
    name = f"{mode}{'s' * sat}_" + ("d" if direct else "b") + (f"p{np_}" if np_ != NP else "") \
        + ("_ck" if ckn else "") + ("_pt" if pt else "")
    fn = k.kernel("qfc2_dsp", {"name": name, "rq": mode, "sat": sat, "direct": direct, "np": np_,
                               "chunk": bool(ckn), "pt": pt, "fields": FIELDS})
    _drop_unused(k, b_sym)
    _drop_unused(k, c_sym)
    wsym = k.const(words, f"{node.name}_w_fc2")
    csym = k.const(start, f"{node.name}_start")
    if second is None:
        msym = ssym = k.const(np.ascontiguousarray(mult), f"{node.name}_rq")
    else:
        msym = k.const(np.ascontiguousarray(mult), f"{node.name}_mult")
        ssym = k.const(np.ascontiguousarray(second), f"{node.name}_{'shift' if mode == 'fixed' else 'e'}")
    gsym = k.const(np.array([vals[f] for f in FIELDS], np.int32), "qfc2_dsp_geo")
    swsym = k.const(np.array(swaps, np.int32), f"{node.name}_swaps") if swaps else gsym
    xb = "" if direct else f", {k.scratch_buf(4 * buf, 'int32_t')}"
    k.line(f"{fn}({prm['y']}, {prm['a']}, {wsym}, {csym}, {gsym}, {msym}, {ssym}, {swsym}{xb});")
    return True
