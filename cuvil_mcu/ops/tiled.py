"""TiledRegion: a chain of layers executed band by band (patch-based
execution, planner/tiling.py; passes/tile.py makes these nodes).

The node reads the region's input (input 0, whole in the arena) and writes
its output (whole); the layers' intermediate tensors exist only as the
region's band buffers, which with the layers' kernel scratch are the node's
arena scratch (planned by planner.tiling.inner_plan). Each band calls every
layer's own kernel (its op's emit, so its ISA variant) on sub-views: a band
of rows of an NHWC tensor is contiguous, so a sub-view is a pointer and the
band's shape and padding (op.band_node). Bands with the same shapes run in
one C loop whose pointers advance by whole rows.

The reference runs the layers one after the other on whole tensors: tiling
must not change a byte.

Where VWW's region (node 2: pointwise 8 -> 16 over 48x48, qconv2_pwsk_dsp,
then depthwise 3x3 stride 2 -> 24x24x16 as x runs; 6 bands of 4 output rows,
9 input rows each, the halo row kept by a 768-byte memmove; area 10,880 B =
9 int8 rows of 768 B + the depthwise's 4 planes of 248 words) spends its
645,736 M4 est. cycles (hotspots, main 44a06b3): the pointwise ~433 k (22
cycles a channel and pixel pair), the x runs ~128 k, the depthwise's int8
NHWC -> int16 plane conversion ~77 k (53 rows x 48 columns x 16 channels
converted, ~1.9 cycles an element with its loop entries: the halo row is
converted again in every band), the memmoves ~3 k. Not done yet (sized
only): the pointwise storing its outputs straight into the planes (STRH at
plane offsets instead of STRB: the same cycles; pixel B one column = KP
words on) removes the conversion but holds 16 channels' planes at once, 16
planes of 4 ceil(49 KP / 4) words: KP 5 (4-row bands) 15,872 B (+4,992 over the
area: past the 8 % slack), KP 4 (3-row bands, 8 bands) 12,544 B (+1,664:
arena ~31,072 B, +5.7 %), KP 3 (2-row bands) 9,472 B (-1,408). The kept halo row
then is a halfword copy per plane and column (word B's low half to word
0's: 768 an added band boundary, ~1.5-2 k cycles), channel offsets past
STRH's 4,095 B need base bumps in the pair loop, and the x runs' folded
padding words (the padding column's word 0, pair-row xrun of the last band)
sit in cells the pointwise never writes. Estimate at KP 4: -77 k
conversion, +11 k halo copies, +3 k set-up of two more bands, +2 k
per-row pointwise calls, +3.5 k base bumps: ~-55 k est. cycles. Today's
kernels in shorter bands (passes/tile.py's BANDS forced; arena 29,408 B in
each: its peak is another step, the region's area ends at 29,312): 3-row
bands 653,450, 2-row 677,428 est. cycles (the halo row converted in more
bands, ~2.4 k and ~3.8 k a band of calls and set-up): planes at KP 3 (no
arena growth) would then come to ~-30 k, at KP 4 ~-55 k.

Done at KP 3 (PLANES, _planes_emit; no arena growth): a two-layer region
whose depthwise is 3x3 stride 2 runs in bands of PLANES_BAND = 2 output
rows on 16 planes of 148 words (9,472 B, the area's only buffer: 10,880 B
before); the pointwise (dsp_pwsk, k.planes[y] = kp, plane, row0) stores
each band row r at byte 2 r of every plane column (one call a row, STRH at
ch 592 and ch 592 + 12, ADDW 4,092 before channels 7 and 14, SUBW at the
loop's end), the x runs (dsp_dw "_pin", stride 2 allowed for a region band
only) read them, filling no cell (the right padding column's word 0 holds
the xr fold, the last band's padding row is folded, xb). The kept row is
word 2's copy into word 0 per plane and column (its high half is the band's
next row: the pointwise rewrites it), unrolled HALO_BATCH = 4 loads then 4
stores (~1.8 k a band; 3 cycles a copy while GCC paired each load with its
store; batches of 8: -1 k est. cycles but model_run's stack 388 -> 404 B).
The layouts come from a probe of the depthwise's band kernels; a layer
that does not take them (no DSP, other shapes) leaves the region to the
int8 bands above. VWW node 2 (M4) 645,593 -> 608,082 est. cycles (hotspots:
the pointwise ~433 k as before, x runs ~134 k incl. 12 x 16 per-channel
set-ups of ~193 cycles, halo copies ~19 k, conversion 0); total 8,842,334
-> 8,804,258 (node 1 +1.4 k: the new plan leaves its depthwise KP 5
instead of 6); M7 7,082,160 -> 7,058,273, M33 8,845,085 -> 8,805,991;
arena 29,408 B unchanged; MobileNetV2, KWS, IC, AD, person_detect headers
byte-identical (no such region).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..codegen.carray import c_comment
from ..ir import Node, Tensor
from ..planner import tiling
from .base import Op, register

OP_TYPE = "cuvil.TiledRegion"
PLANES = True        # a pointwise -> stride-2 3x3 depthwise region in bands of PLANES_BAND rows on int16 planes
PLANES_BAND = 2
HALO_BATCH = 4       # the halo copy's loads in a row before their stores (model_run's registers)


@dataclass
class Region:
    nodes: list[Node]               # the layers, in order; node j + 1 reads node j's output 0
    tensors: dict[str, Tensor]      # the layers' outputs but the last (never whole in the arena)
    rows: list[tiling.Rows]         # per layer: its vertical geometry
    band: int                       # output rows of the last layer per band
    cache: tuple[bool, ...]         # per buffer (layers 0 .. L-2): halo rows kept (else recomputed)
    out: tuple                      # (shape, dtype) of the region's output
    moved: int | None = None        # bytes of halo copied per run where the lowering knows them (planes)

    def schedule(self) -> tiling.Schedule:
        return tiling.schedule(self.rows, self.band, self.cache)

    def describe(self) -> str:
        kept = sum(self.cache)
        modes = ("halo rows kept" if kept == len(self.cache) else "halo rows recomputed" if not kept else
                 f"halo rows kept in {kept} of {len(self.cache)} buffers, recomputed in the others")
        n = -(-self.rows[-1].h_out // self.band)
        return f"{len(self.nodes)} layers in {n} bands of {self.band} row{'s' * (self.band > 1)}, {modes}"


def region(node: Node) -> Region:
    return node.attrs["_region"]


def _tensors(node: Node, ins: list) -> dict[str, Tensor]:
    r = region(node)
    return {**{t.name: t for t in ins if t is not None}, **r.tensors}


def _layer(n: Node, tens: dict[str, Tensor]):
    from . import get
    op = get(n.op_type)
    return op, [tens[i] if i else None for i in n.inputs], [tens[o] for o in n.outputs if o]


@register(OP_TYPE)
class TiledRegion(Op):
    def infer(self, node, ins):
        return [region(node).out]

    def reference(self, node, ins, *arrays):
        r = region(node)
        vals = {t.name: a for t, a in zip(ins, arrays) if t is not None}
        tens = _tensors(node, ins)
        for n in r.nodes:
            op, nin, _ = _layer(n, {**tens, n.outputs[0]: None})
            res = op.reference(n, nin, *[vals[i] if i else None for i in n.inputs])
            t = r.tensors.get(n.outputs[0])
            v = np.asarray(res[0])
            vals[n.outputs[0]] = v if t is None else v.astype(t.dtype, copy=False).reshape(t.shape)
        return [vals[r.nodes[-1].outputs[0]]]

    def macs(self, node, ins, outs):
        tens = {**_tensors(node, ins), outs[0].name: outs[0]}
        total = 0
        for n in region(node).nodes:
            op, nin, nout = _layer(n, tens)
            total += op.macs(n, nin, nout)
        return total

    def emit(self, node, ins, outs, k):
        r = region(node)
        s = r.schedule()
        if PLANES and len(r.nodes) == 2 and r.cache == (True,) and not getattr(k, "planes_probe", None):
            got = self._emit_planes(node, ins, outs, k, r)
            if got:
                return
        last = len(r.nodes) - 1
        tens = {**_tensors(node, ins), outs[0].name: outs[0]}
        layers = [_layer(n, tens) for n in r.nodes]
        subs = {}

        def sub(st: tiling.Step):
            """(op, band node, its ins, its outs) for a step's shape."""
            return _band_sub(node, r, layers, subs, st, (st.layer, st.c1 - st.c0, r.rows[st.layer].pads(st.c0, st.c1)))

        # the kernel scratch of every band shape, measured by emitting it once
        scratch = [0] * len(layers)
        for st in {(st.layer, st.c1 - st.c0, r.rows[st.layer].pads(st.c0, st.c1)): st
                   for b in s.bands for st in b.steps}.values():
            op, bn, bin_, bout = sub(st)
            n0 = len(k.body)
            with k.band(bn, {bin_[0].name: 0, bout[0].name: 0}) as took:
                op.emit(bn, bin_, bout, k)
            del k.body[n0:]
            scratch[st.layer] = max(scratch[st.layer], took["scratch"])
        offs, area = tiling.inner_plan(s, scratch)
        rec = tiling.inner_records(s, scratch)
        if area:
            k.scratch_buf(area)
        base = k.plan.scratch_offset[node.name] if area else 0
        buf_at = [base + o for o in offs[:last]]
        scr_at = [(base + o, rec[last + j][0]) for j, o in enumerate(offs[last:])]
        x_at, y_at = k.plan.tensor_offset[ins[0].name], k.plan.tensor_offset[outs[0].name]
        k.order(0, lambda: s.order(f"tiled: {len(s.bands)} bands"))
        if not getattr(k.plan, "probe", False) and hasattr(k.plan, "tiles"):
            k.plan.tiles[node.name] = _describe(node, r, s, x_at, y_at, base, area, buf_at, scr_at, ins[0], outs[0])

        def place(st, step_x, step_y):
            """Arena offsets (int, or a C expression in the loop variable bi) of a step's input and output."""
            ly = r.rows[st.layer]
            if st.layer == 0:
                xo = _expr(x_at + st.src_at * ly.row_in, step_x * ly.row_in)
            else:
                xo = buf_at[st.layer - 1] + st.src_at * ly.row_in
            if st.layer == last:
                yo = _expr(y_at + st.dst_at * ly.row_out, step_y * ly.row_out)
            else:
                yo = buf_at[st.layer] + st.dst_at * ly.row_out
            return xo, yo

        for i0, i1 in s.groups():
            b, loop, dx, dy, what = _band_group(s, i0, i1, last)
            k.line(f"/* {c_comment(node.name)}: {what} of {len(s.bands)} */")
            if loop:
                k.line(f"{{ unsigned bi; for (bi = 0u; bi < {i1 - i0 + 1}u; ++bi) {{")
            n0 = len(k.body)
            for m in b.moves:
                row = r.rows[m.buf].row_out
                k.line(f"memmove(a + {buf_at[m.buf]}u, a + {buf_at[m.buf] + m.src * row}u, {m.n * row}u);")
            for st in b.steps:
                op, bn, bin_, bout = sub(st)
                xo, yo = place(st, dx, dy)
                at, size = scr_at[st.layer]
                with k.band(bn, {bin_[0].name: xo, bout[0].name: yo}, at, size):
                    op.emit(bn, bin_, bout, k)
            if loop:
                k.body[n0:] = ["    " + ln for ln in k.body[n0:]]
                k.line("} }")


_SNAP = ("kernels", "consts", "_const_by_key", "_variant_seen", "half_symbols", "isa_used")


def _planes_emit(self, node, ins, outs, k, r):
    """_planes_try, the emitter's kernels and constants as they were where it
    says False (its probes' kernels must not stay in the header unused)."""
    snap = {f: getattr(k, f).copy() for f in _SNAP if hasattr(k, f)}
    n0 = len(k.body)
    if _planes_try(self, node, ins, outs, k, r):
        return True
    for f, v in snap.items():
        d = getattr(k, f)
        d.clear()
        d.update(v)
    del k.body[n0:]
    return False


def _band_group(s: tiling.Schedule, i0: int, i1: int, last: int):
    """Bands i0..i1 of the same shapes (one C loop when more than one): the
    first band, whether they loop, the steps per turn of the region's input
    rows (dx) and of the last layer's output rows (dy), the comment's words."""
    b = s.bands[i0]
    loop = i1 > i0
    nxt = s.bands[i0 + 1] if loop else b
    rs = [st for st in b.steps if st.layer == 0]
    rn = [st for st in nxt.steps if st.layer == 0]
    ys = [st for st in b.steps if st.layer == last]
    yn = [st for st in nxt.steps if st.layer == last]
    dx = rn[0].r0 - rs[0].r0 if loop and rs else 0
    dy = yn[0].c0 - ys[0].c0 if loop and ys else 0
    return b, loop, dx, dy, f"band {i0}" if not loop else f"bands {i0}..{i1}"


def _band_sub(node, r, layers, subs, st, key, tag=""):
    """(op, band node, its ins, its outs) for a step's shape, made once per
    key (layer, rows out, pads, ...) into subs; tag ends the band tensors'
    names."""
    if key not in subs:
        op, nin, nout = layers[st.layer]
        x, y = nin[0], nout[0]
        base = f"{node.name}/{st.layer}/{key[1]}r{key[2][0]}{key[2][1]}{tag}"
        bx = Tensor(base + ":x", (1, st.r1 - st.r0) + tuple(x.shape[2:]), x.dtype, quant=x.quant)
        by = Tensor(base + ":y", (1, st.c1 - st.c0) + tuple(y.shape[2:]), y.dtype, quant=y.quant)
        bn = op.band_node(r.nodes[st.layer], nin, nout, st.c0, st.c1, bx, by)
        subs[key] = (op, bn, [bx] + nin[1:], [by])
    return subs[key]


def _planes_try(self, node, ins, outs, k, r):
    """The region's pointwise layer stores its band rows straight into the
    depthwise's int16 channel planes (dsp_pwsk's planes store, dsp_dw's
    "_pin" x runs): bands of PLANES_BAND output rows, the planes the area's
    only buffer, the kept halo row a word copy per plane and column (its
    pair-row's low half to pair-row 0's; the high half is rewritten by the
    band's next row). False (nothing emitted) where a layer's kernel does
    not take the planes."""
    s = tiling.schedule(r.rows, PLANES_BAND, r.cache)
    tens = {**_tensors(node, ins), outs[0].name: outs[0]}
    layers = [_layer(n, tens) for n in r.nodes]
    if r.rows[1].s != 2 or r.rows[1].k != 3:
        return False
    subs = {}

    def skey(st):
        return (st.layer, st.c1 - st.c0, r.rows[st.layer].pads(st.c0, st.c1), st.dst_at if st.layer == 0 else 0)

    def sub(st):
        key = skey(st)
        return _band_sub(node, r, layers, subs, st, key, f"d{key[3]}")

    steps = {skey(st): st for b in s.bands for st in b.steps}
    # the depthwise's layout of every band shape (a probe: its kernel answers when it takes planes)
    lays = {}
    for st in steps.values():
        if st.layer != 1:
            continue
        op, bn, bin_, bout = sub(st)
        n0 = len(k.body)
        k.planes_probe, k.planes_found = bin_[0].name, None
        try:
            with k.band(bn, {bin_[0].name: 0, bout[0].name: 0}):
                ok = op.emit(bn, bin_, bout, k)
        finally:
            k.planes_probe = None
        del k.body[n0:]
        if ok is False or k.planes_found is None:
            return False
        lays[bin_[0].name] = k.planes_found
        k.planes_found = None
    ls = list(lays.values())
    if any((l["kp"], l["plane"], l["lf"], l["pt"], l["w"], l["c"]) != (ls[0]["kp"], ls[0]["plane"], 0, 0, ls[0]["w"],
                                                                            ls[0]["c"]) for l in ls):
        return False
    kp, plane, c, w = ls[0]["kp"], ls[0]["plane"], ls[0]["c"], ls[0]["w"]
    pbytes = 4 * plane * c
    for b in s.bands:
        for m in b.moves:
            if m.buf != 0 or m.n != 1 or m.src % 2 or 2 * kp < m.src + 1:
                return False
    # every band's pointwise rows must be whole pair-rows but the halo (row 0 kept: low half)
    for b in s.bands:
        for st in b.steps:
            if st.layer == 0 and st.dst_at not in (0, 1):
                return False

    def emit_step(st, xo, yo, at=0, size=None):
        op, bn, bin_, bout = sub(st)
        if st.layer == 0:
            pl = dict(kp=kp, plane=plane, row0=st.dst_at)
            k.planes[bout[0].name] = pl
        else:
            k.planes[bin_[0].name] = lays[bin_[0].name]
        try:
            with k.band(bn, {bin_[0].name: xo, bout[0].name: yo}, at, size) as took:
                ok = op.emit(bn, bin_, bout, k)
        finally:
            k.planes.pop(bout[0].name if st.layer == 0 else bin_[0].name, None)
        if ok is False or (st.layer == 0 and not pl.get("took")):
            return None
        return took

    scratch = [0, 0]
    for st in steps.values():
        n0 = len(k.body)
        took = emit_step(st, 0, 0)
        del k.body[n0:]
        if took is None:
            return False
        scratch[st.layer] = max(scratch[st.layer], took["scratch"])
    # (the region runs in these bands: its schedule, summary and --plan-out say so)
    r.band = PLANES_BAND
    r.moved = sum(len(b.moves) for b in s.bands) * c * w * 4      # (a word per plane and column a move)
    al = [-(-v // 16) * 16 for v in (pbytes,) + tuple(scratch)]
    area = sum(al)
    k.scratch_buf(area)
    base = k.plan.scratch_offset[node.name]
    scr_at = [(base + al[0], al[1]), (base + al[0] + al[1], al[2])]
    x_at, y_at = k.plan.tensor_offset[ins[0].name], k.plan.tensor_offset[outs[0].name]
    k.order(0, lambda: s.order(f"tiled: {len(s.bands)} bands on planes"))
    if not getattr(k.plan, "probe", False) and hasattr(k.plan, "tiles"):
        k.plan.tiles[node.name] = _describe(node, r, s, x_at, y_at, base, area, [base], scr_at, ins[0], outs[0])
    for i0, i1 in s.groups():
        b, loop, dx, dy, what = _band_group(s, i0, i1, 1)
        k.line(f"/* {c_comment(node.name)}: {what} of {len(s.bands)} (int16 planes) */")
        if loop:
            k.line(f"{{ unsigned bi; for (bi = 0u; bi < {i1 - i0 + 1}u; ++bi) {{")
        n0 = len(k.body)
        for m in b.moves:
            # the kept row (pair-row m.src / 2's low half) to pair-row 0, every plane and column
            # (a plane's columns unrolled: loads and stores at immediate offsets, ~2.5 cycles a copy)
            k.line(f"{{ int32_t *q = (int32_t *)(a + {base}u); unsigned hc; "
                   f"for (hc = 0u; hc < {c}u; ++hc, q += {plane}) {{")
            # (HALO_BATCH loads, then their stores: back-to-back loads pipeline on the M4, N + 1 cycles; the empty
            # asm keeps GCC from pairing each load with its store, 3 cycles a copy)
            for j0 in range(0, w, HALO_BATCH):
                js = range(j0, min(w, j0 + HALO_BATCH))
                k.line("    { " + " ".join(f"const int32_t h{j - j0} = q[{j * kp + m.src // 2}];" for j in js))
                k.line("#if defined(__GNUC__)")
                k.line('    __asm__ volatile("" ::: "memory");')
                k.line("#endif")
                k.line("    " + " ".join(f"q[{j * kp}] = h{j - j0};" for j in js) + " }")
            k.line("} }")
        for st in b.steps:
            ly = r.rows[st.layer]
            if st.layer == 0:
                xo, yo = _expr(x_at + st.src_at * ly.row_in, dx * ly.row_in), base
            else:
                xo, yo = base, _expr(y_at + st.dst_at * ly.row_out, dy * ly.row_out)
            at, size = scr_at[st.layer]
            if emit_step(st, xo, yo, at, size) is None:
                raise RuntimeError(f"node '{node.name}': a band's layer {st.layer} did not take the planes")
        if loop:
            k.body[n0:] = ["    " + ln for ln in k.body[n0:]]
            k.line("} }")
    return True


TiledRegion._emit_planes = _planes_emit


def _expr(at: int, step: int):
    return at if not step else f"{at}u + {step}u * bi"


def _describe(node, r: Region, s: tiling.Schedule, x_at, y_at, base, area, buf_at, scr_at, x, y) -> dict:
    """The region as gen --plan-out shows it: what runs, in which bands, where
    every buffer is and every step of every band (the tests replay it)."""
    last = len(r.nodes) - 1
    return {
        "node": node.name,
        "layers": [n.name for n in r.nodes],
        "band_rows": r.band,
        "halo": ["kept" if c else "recomputed" for c in r.cache],
        "input": {"tensor": x.name, "offset": x_at, "row_bytes": r.rows[0].row_in, "rows": r.rows[0].h_in},
        "output": {"tensor": y.name, "offset": y_at, "row_bytes": r.rows[-1].row_out, "rows": r.rows[-1].h_out},
        "area": {"offset": base, "bytes": area},
        "buffers": [{"layer": r.nodes[j].name, "tensor": r.nodes[j].outputs[0], "offset": buf_at[j], "rows": s.rows[j],
                     "row_bytes": r.rows[j].row_out, "kept": bool(r.cache[j])} for j in range(last)],
        "scratch": [{"layer": r.nodes[j].name, "offset": at, "bytes": size} for j, (at, size) in enumerate(scr_at)],
        "geometry": [{"k": ly.k, "s": ly.s, "pt": ly.pt, "h_in": ly.h_in, "h_out": ly.h_out} for ly in r.rows],
        "extra_macs": s.extra_macs(),
        "moved_bytes": s.moved_bytes(),
        "bands": [{"moves": [{"buffer": m.buf, "from_row": m.src, "rows": m.n} for m in b.moves],
                   "steps": [{"layer": st.layer, "rows": [st.c0, st.c1], "reads": [st.r0, st.r1],
                              "src_row": st.src_at, "dst_row": st.dst_at} for st in b.steps]}
                  for b in s.bands],
    }
