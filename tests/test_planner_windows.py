"""Outputs written over their inputs (offset windows, cuvil_mcu/planner/windows.py)
and kernel scratch in the arena, checked three independent ways:

- a byte-level replay of the whole run on the plan: every node's kernel
  order (the one it declared: pixels in raster order or from the last down,
  pixel pairs, channel blocks, depthwise row bands, rows through a ring
  per channel group) simulated here with
  plain loops, every byte read checked to still hold what its producer
  wrote (nothing overwrote it), scratch overwriting whatever it overlaps,
  graph outputs intact at the end; the other nodes read all inputs, then
  write all outputs;
- the generated C run with the arena pre-filled with poison patterns and
  the inputs written through <prefix>_input, equal to the numpy reference
  bit for bit (portable C, and the DSP and Helium headers through their
  plain-C paths on the host; the real kernels on QEMU in test_sim and the
  ISA tests);
- hand-computed windows for small cases.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from cuvil_mcu import ops
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.planner import windows
from cuvil_mcu.ops.conv import ConvGeometry
from qhelpers import assert_graph_outputs_exact
from test_isa_dsp import conv_layer, qmodel

import shared_models as sm

BOARDS = ["host", "qemu-mps2-an386", "qemu-mps3-an547", "cortex-a7-neon"]


# --------------------------------------------------------------------------- replay

def _window(geo: ConvGeometry, b: int, oy: int, ox: int, chans) -> np.ndarray:
    """Input byte indices (NHWC) pixel (b, oy, ox) reads for channels chans."""
    (h, w), (kh, kw) = geo.hw, geo.k
    (sh, sw), (pt, pl), (dh, dw) = geo.strides, geo.pad_begin, geo.dilations
    ys = [oy * sh - pt + i * dh for i in range(kh)]
    xs = [ox * sw - pl + j * dw for j in range(kw)]
    pix = [(b * h + y) * w + x for y in ys if 0 <= y < h for x in xs if 0 <= x < w]
    return (np.asarray(pix, np.int64)[:, None] * geo.c + np.asarray(chans, np.int64)[None, :]).reshape(-1)


def raster_events(geo: ConvGeometry, depthwise: bool, group: int, cblock: int, reverse: bool, seq: bool,
                  opos=None):
    """("r", input bytes) / ("w", output bytes) in the kernel's order (opos:
    output channel m stored at channel opos[m], a folded channel shuffle)."""
    (oh, ow), m, c = geo.out_hw, geo.m, geo.c
    mult = m // c if depthwise else 1
    passes = [(b, list(range(p0, min(p0 + group, oh * ow)))) for b in range(geo.n)
              for p0 in range(0, oh * ow, group)]
    if reverse:
        passes.reverse()
    cb = cblock or m
    blocks = [list(range(m0, min(m0 + cb, m))) for m0 in range(0, m, cb)]

    def reads(b, p, block):
        chans = sorted({mm // mult for mm in block}) if depthwise else list(range(c))
        return _window(geo, b, p // ow, p % ow, chans)

    def writes(b, p, block):
        chans = np.asarray(block, np.int64)
        return (b * oh * ow + p) * m + (chans if opos is None else np.asarray(opos, np.int64)[chans])

    for b, pix in passes:
        if not cblock:
            yield "r", np.concatenate([reads(b, p, list(range(m))) for p in pix])
            yield "w", np.concatenate([writes(b, p, list(range(m))) for p in pix])
            continue
        for block in blocks:
            if seq:
                # qdot_mve's plain C computes an odd last pixel as a pair with itself
                last = (b, pix[-1]) == (geo.n - 1, oh * ow - 1) and (geo.n * oh * ow) % group
                again = group - len(pix) if last else 0
                for p in pix + [pix[-1]] * again:
                    yield "r", reads(b, p, block)
                    yield "w", writes(b, p, block)
            else:
                yield "r", np.concatenate([reads(b, p, block) for p in pix])
                yield "w", np.concatenate([writes(b, p, block) for p in pix])


def band_events(nb, c, prm):
    """isa/dsp_dw.py's kernel: per band of lb lines, per 4 channels, the band's
    input rows read (into its planes), then its lines written."""
    rows, cols_in, lines, cols_out = prm["rows"], prm["cols_in"], prm["lines"], prm["cols_out"]
    for b in range(nb):
        bin_, bout = b * rows * cols_in * c, b * lines * cols_out * c
        for l0 in range(0, lines, prm["lb"]):
            nl = min(prm["lb"], lines - l0)
            r0 = l0 * prm["sh"] - prm["pt"]
            nk = ((nl - 1) * prm["sh"] + prm["kh"] + prm["nk_extra"]) >> 1
            rr = [r for r in range(r0, r0 + 2 * nk) if 0 <= r < rows]
            for ch0 in range(0, c, prm["cgroup"]):
                ch = np.arange(ch0, min(ch0 + prm["cgroup"], c))
                yield "r", np.asarray([bin_ + r * prm["rin"] + x * prm["cin"] + k
                                       for r in rr for x in range(cols_in) for k in ch], np.int64)
                yield "w", np.asarray([bout + ln * prm["rout"] + x * prm["cout"] + k
                                       for ln in range(l0, l0 + nl) for x in range(cols_out) for k in ch], np.int64)


def channel_events(geo: ConvGeometry, prm):
    """isa/dsp_dw.py's one-plane kernel: per batch entry, per channel, every
    input pixel it reads (all, or the `read` mask), then every output pixel."""
    (h, w), (oh, ow), c = geo.hw, geo.out_hw, geo.c
    read = np.ones(h * w, bool) if prm["read"] is None else np.asarray(prm["read"], bool).reshape(-1)
    pix = np.flatnonzero(read)
    for b in range(geo.n):
        for ch in range(c):
            yield "r", (b * h * w + pix) * c + ch
            yield "w", (b * oh * ow + np.arange(oh * ow)) * c + ch


def rows_events(geo: ConvGeometry, prm):
    """qdwdot_mve's ring (Helium and its plain C path): per group of cgroup
    channels, per batch entry, per output row, the input rows its window
    reaches that are not in the ring yet (each row once, in order) read
    whole for the group's channels, then the output row's bytes of them."""
    (h, w), (oh, ow), (kh, _) = geo.hw, geo.out_hw, geo.k
    sh, pt, dh, c = geo.strides[0], geo.pad_begin[0], geo.dilations[0], geo.c
    for c0 in range(0, c, prm["cgroup"]):
        ch = np.arange(c0, min(c0 + prm["cgroup"], c))
        for b in range(geo.n):
            nxt = None
            for o in range(oh):
                r0 = o * sh - pt
                r1 = r0 + (kh - 1) * dh
                rr = [r for r in range(r0 if nxt is None else max(nxt, r0), r1 + 1) if 0 <= r < h]
                nxt = r1 + 1
                if rr:
                    yield "r", np.asarray([((b * h + r) * w + x) * c + k for r in rr for x in range(w) for k in ch],
                                          np.int64)
                yield "w", np.asarray([((b * oh + o) * ow + x) * c + k for x in range(ow) for k in ch], np.int64)


def replay(c) -> int:
    """Run the plan byte by byte; returns how many aliased nodes it replayed
    with their own order. Fails on any byte read after being overwritten."""
    g, p = c.graph, c.plan
    size = max(p.arena_size, 1)
    shadow = np.full(size, -1, np.int64)
    tid, root = {}, {}
    for n in g.nodes:                     # views read their source's bytes
        for o in n.outputs:
            if o:
                root[o] = o
        if ops.get(n.op_type).view and not g.tensors[n.inputs[0]].is_const:
            root[n.outputs[0]] = root.get(n.inputs[0], n.inputs[0])
    for t in g.inputs:
        root[t] = t

    def tag(t, idx):
        r = root.get(t, t)
        return tid.setdefault(r, len(tid) + 1) * (1 << 32) + idx

    def write(t, idx, at=None):
        shadow[(p.tensor_offset[t] if at is None else at) + idx] = tag(t, idx)

    def read(node, t, idx, at=None):
        at = p.tensor_offset[t] if at is None else at
        got = shadow[at + idx]
        bad = got != tag(t, idx)
        assert not bad.any(), (f"node '{node}' reads '{t}' byte {int(idx[bad][0])} at arena offset "
                               f"{at + int(idx[bad][0])} after it was overwritten")

    for t in g.inputs:
        write(t, np.arange(g.tensors[t].nbytes))
    aliased = {a["node"]: a for a in p.aliases}
    replayed = 0
    for i, n in enumerate(g.nodes):
        op = ops.get(n.op_type)
        if op.view:
            continue
        ins = [t for t in n.inputs if t and not g.tensors[t].is_const]
        outs = [t for t in n.outputs if t]
        if n.name in p.scratch_offset:     # kernel scratch: overwrites whatever it overlaps
            off = p.scratch_offset[n.name]
            shadow[off:off + p.scratch_size[n.name]] = -2 - i
        a = aliased.get(n.name)
        if n.op_type == "cuvil.TiledRegion":
            replay_region(p.tiles[n.name], shadow, read, write, -2 - i, region_geometry(g, n))
            replayed += a is not None
            continue
        if a is None:
            for t in ins:
                read(n.name, t, np.arange(g.tensors[t].nbytes))
            for t in outs:
                write(t, np.arange(g.tensors[t].nbytes))
            continue
        prm = a["model"]
        assert prm is not None, a
        others = [t for t in ins if t != a["input"]]
        for t in others:   # (no conv kernel here has a second run-time input)
            read(n.name, t, np.arange(g.tensors[t].nbytes))
        tens = [g.tensors[t] if t else None for t in n.inputs]
        geo = op._params(n, tens).geo
        if prm["model"] == "raster":
            events = raster_events(geo, prm["depthwise"], prm["group"], prm["cblock"], prm["reverse"], prm["seq"],
                                   prm.get("opos"))
        elif prm["model"] == "channels":
            events = channel_events(geo, prm)
        elif prm["model"] == "rows":
            events = rows_events(geo, prm)
        else:
            events = band_events(geo.n, geo.c, prm)
        for kind, idx in events:
            if kind == "r":
                read(n.name, a["input"], idx)
            else:
                write(a["output"], idx)
        replayed += 1
    for t in g.outputs:
        if not g.tensors[t].is_const:
            read("(end of run)", t, np.arange(g.tensors[t].nbytes))
    return replayed


def region_geometry(g, node) -> list[dict]:
    """Each layer's vertical geometry from its own node (the op's parameters),
    not from what the tiling recorded."""
    r = node.attrs["_region"]
    tens = {**g.tensors, **r.tensors}
    out = []
    for n in r.nodes:
        op = ops.get(n.op_type)
        geo = op._params(n, [tens[t] if t else None for t in n.inputs]).geo
        out.append(dict(k=(geo.k[0] - 1) * geo.dilations[0] + 1, s=geo.strides[0], pt=geo.pad_begin[0],
                        h_in=geo.hw[0], h_out=geo.out_hw[0]))
    return out


def band_rows_needed(geo: dict, c0: int, c1: int) -> tuple[int, int]:
    """Input rows output rows [c0, c1) of a layer read (its kernel window
    clipped to the input), from the layer's vertical geometry."""
    return max(0, c0 * geo["s"] - geo["pt"]), min(geo["h_in"], (c1 - 1) * geo["s"] - geo["pt"] + geo["k"])


def replay_region(t: dict, shadow, read, write, poison: int, geo: list[dict]) -> None:
    """A tiled region (ops/tiled.py) as --plan-out describes it, band by band:
    halo rows moved, then each layer's kernel reads every input row its
    output rows need (from the region input or the previous layer's buffer)
    and writes those output rows (into its buffer or the region output); a
    layer's kernel scratch overwrites whatever it overlaps. Every row read
    must hold what its layer wrote; every output row is written once."""
    last = len(t["layers"]) - 1
    x, y = t["input"], t["output"]
    bufs = t["buffers"]
    assert geo == t["geometry"], (geo, t["geometry"])
    rows_of = [b["row_bytes"] for b in bufs] + [y["row_bytes"]]
    row_in = [x["row_bytes"]] + rows_of[:-1]
    done = [np.zeros(g["h_out"], np.int64) for g in geo]
    for b in t["bands"]:
        for m in b["moves"]:
            buf = bufs[m["buffer"]]
            rb = buf["row_bytes"]
            src = shadow[buf["offset"] + m["from_row"] * rb:buf["offset"] + (m["from_row"] + m["rows"]) * rb].copy()
            shadow[buf["offset"]:buf["offset"] + m["rows"] * rb] = src
        for st in b["steps"]:
            j = st["layer"]
            (c0, c1), (r0, r1) = st["rows"], st["reads"]
            assert (r0, r1) == band_rows_needed(geo[j], c0, c1), (t["node"], j, st)
            sc = t["scratch"][j]
            shadow[sc["offset"]:sc["offset"] + sc["bytes"]] = poison
            src = (x["tensor"], x["offset"]) if j == 0 else (bufs[j - 1]["tensor"], bufs[j - 1]["offset"])
            idx = np.arange(r0 * row_in[j], r1 * row_in[j])
            # the input rows sit at src_row (a row of the region input, or of the buffer) onwards
            at = src[1] + st["src_row"] * row_in[j] - r0 * row_in[j]
            read(f"{t['node']} layer {j}", src[0], idx, at if j else None)
            out = np.arange(c0 * rows_of[j], c1 * rows_of[j])
            if j == last:
                assert st["dst_row"] == c0
                write(y["tensor"], out)
            else:
                write(bufs[j]["tensor"], out, bufs[j]["offset"] + st["dst_row"] * rows_of[j] - c0 * rows_of[j])
            done[j][c0:c1] += 1
    assert np.all(done[-1] == 1), (t["node"], done[-1])


# --------------------------------------------------------------------------- poison

POISON = (0xA5, 0x00, 0xFF)


def run_poisoned(c, feeds, tmp_path, pattern: int, cc: str = "gcc"):
    """The header built on the host around a main that fills the whole arena
    with `pattern`, writes the inputs through <prefix>_input, runs once."""
    g, P, pre = c.graph, c.prefix.upper(), c.prefix
    (tmp_path / f"{pre}.h").write_text(c.header)
    ins = "".join(f"    if (fread({pre}_input(arena, {i}), 1, {g.tensors[t].nbytes}u, fi) != {g.tensors[t].nbytes}u) "
                  f"return 2;\n" for i, t in enumerate(g.inputs))
    outs = "".join(f"    fwrite({pre}_output(arena, {i}), 1, {g.tensors[t].nbytes}u, fo);\n"
                   for i, t in enumerate(g.outputs))
    (tmp_path / "main.c").write_text(f"""#include <stdio.h>
#include <string.h>
#define {P}_IMPLEMENTATION
#include "{pre}.h"
static unsigned char arena[{P}_ARENA_SIZE] __attribute__((aligned(16)));
int main(int argc, char **argv)
{{
    FILE *fi = fopen(argv[1], "rb"), *fo = fopen(argv[2], "wb");
    (void)argc;
    if (!fi || !fo) return 2;
    memset(arena, {pattern}, sizeof arena);
{ins}    if ({pre}_run(arena) != {P}_OK) return 3;
{outs}    return fclose(fo) == 0 ? 0 : 2;
}}
""")
    exe = tmp_path / f"poison_{pattern}"
    r = subprocess.run([cc, "-O1", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
                        "-fno-sanitize-recover=all", str(tmp_path / "main.c"), "-o", str(exe), "-lm"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    (tmp_path / "in.bin").write_bytes(b"".join(np.ascontiguousarray(feeds[t], g.tensors[t].dtype).tobytes()
                                               for t in g.inputs))
    r = subprocess.run([str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    raw, outs, at = (tmp_path / "out.bin").read_bytes(), [], 0
    for t in g.outputs:
        n = g.tensors[t].nbytes
        outs.append(np.frombuffer(raw[at:at + n], g.tensors[t].dtype).reshape(g.tensors[t].shape))
        at += n
    return outs


# --------------------------------------------------------------------------- random chains

def chain(seed: int):
    """A random chain of QLinearConv layers (NCHW in the model): pointwise
    (C_out below, equal to and above C_in), depthwise (3x3, 5x5, stride 1
    and 2, odd sizes, C % 4 != 0), general 3x3, batch 1 or 2."""
    rng = np.random.RandomState(seed)
    nb = 1 + (seed % 4 == 3)
    c, h, w = int(rng.choice([4, 8, 12, 16, 7])), int(rng.randint(5, 13)), int(rng.randint(4, 12))
    nodes, inits, x0 = [], {}, None
    for i in range(int(rng.randint(3, 7))):
        kind = rng.choice(["pw", "dw", "conv"], p=[0.4, 0.4, 0.2])
        if kind == "pw":
            m = int(rng.choice([c // 2 or 1, c, 2 * c, c + 4]))
            ws, attrs = (m, c, 1, 1), {}
        elif kind == "dw":
            k = int(rng.choice([3, 3, 5]))
            s = int(rng.choice([1, 1, 2]))
            m, ws = c, (c, 1, k, k)
            attrs = dict(group=c, pads=[k // 2] * 4, strides=[s, s])
        else:
            m = int(rng.choice([c, 2 * c]))
            ws, attrs = (m, c, 3, 3), dict(pads=[1, 1, 1, 1], strides=[int(rng.choice([1, 2]))] * 2)
        node, ini, x = conv_layer(rng, i, (nb, c, h, w), ws, attrs)
        if i == 0:
            x0 = x
        else:
            node.input[0] = f"y{i - 1}"
        nodes.append(node)
        inits.update(ini)
        (kh, kw), (sh, sw) = ws[2:], tuple(attrs.get("strides", [1, 1]))
        pads = attrs.get("pads", [0, 0, 0, 0])
        h, w, c = (h + pads[0] + pads[2] - kh) // sh + 1, (w + pads[1] + pads[3] - kw) // sw + 1, m
    model = qmodel(nodes, {"x0": (x0.shape, "int8")}, {f"y{len(nodes) - 1}": "int8"}, inits)
    return model, {"x0": x0}


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("seed", range(4))
def test_random_chains_replay_and_poison(board, seed, tmp_path):
    model, feeds = chain(seed)
    c = compile_model(model, board=board)
    replay(c)
    assert c.plan.lower_bound <= c.plan.arena_size
    if c.plan.no_alias_bound is not None:
        assert c.plan.lower_bound <= c.plan.no_alias_bound
    assert_graph_outputs_exact(c.graph, run_poisoned(c, feeds, tmp_path, POISON[seed % 2]), feeds)


def test_ring_groups_replay_and_poison(monkeypatch, tmp_path):
    """qdwdot_mve run 8 channels at a time (ring groups forced small): its
    rows order replayed on the plan of random chains and the Helium header's
    plain C (the same ring) run on a poisoned arena, equal to the reference."""
    import cuvil_mcu.isa.mve as mve
    monkeypatch.setattr(mve, "_dw_ring_group", lambda c, ring, free: min(c, 8))
    grouped = 0
    for seed in (1, 2, 5):
        model, feeds = chain(seed)
        c = compile_model(model, board="qemu-mps3-an547")
        assert replay(c) == len(c.plan.aliases)
        grouped += sum(a["model"]["model"] == "rows" and a["model"]["cgroup"] < c.graph.tensors[a["input"]].shape[-1]
                       for a in c.plan.aliases)
        assert_graph_outputs_exact(c.graph, run_poisoned(c, feeds, tmp_path, POISON[seed % 2]), feeds)
    assert grouped, "no depthwise layer ran in ring groups in place"


def test_random_chains_alias_most_nodes():
    """Across the chains, most nodes write in place on every kernel family
    (guards against the windows silently finding nothing)."""
    for board in BOARDS:
        n_alias = n_nodes = 0
        for seed in range(4):
            c = compile_model(chain(seed)[0], board=board)
            n_alias += len(c.plan.aliases)
            n_nodes += sum(n.op_type == "QLinearConv" for n in c.graph.nodes)
        assert n_alias >= n_nodes // 2, (board, n_alias, n_nodes)


def grouped_chain(seed: int):
    """A chain of grouped QLinearConv layers (NCHW in the model), each but the
    last followed by a channel shuffle the compiler folds into its stores
    (passes/fold_shuffle.py: _ochan), between pointwise and depthwise ones."""
    from test_group_conv import _shuffle_nodes
    rng = np.random.RandomState(seed)
    h, w, c = 6, 5, 12
    nodes, inits, x0 = [], {}, None
    specs = [((24, 4, 1, 1), dict(group=3), 3), ((24, 1, 3, 3), dict(group=24, pads=[1, 1, 1, 1]), 0),
             ((24, 6, 3, 3), dict(group=4, pads=[1, 1, 1, 1], strides=[1 + seed % 2] * 2), 4),
             ((18, 8, 1, 1), dict(group=3), 0)]
    for i, (ws, attrs, shuffle) in enumerate(specs):
        node, ini, x = conv_layer(rng, i, (1, c, h, w), ws, attrs)
        if i == 0:
            x0 = x
        else:
            node.input[0] = src
        s = attrs.get("strides", [1, 1])[0]
        p = attrs.get("pads", [0, 0, 0, 0])[0]
        h, w, c = (h + 2 * p - ws[2]) // s + 1, (w + 2 * p - ws[3]) // s + 1, ws[0]
        inits.update(ini)
        nodes.append(node)
        src = f"y{i}"
        if shuffle:
            node.output[0] = f"c{i}"
            sn, si = _shuffle_nodes(i, f"c{i}", (1, c, h, w), shuffle, f"y{i}")
            nodes += sn
            inits.update(si)
    model = qmodel(nodes, {"x0": (x0.shape, "int8")}, {src: "int8"}, inits)
    return model, {"x0": x0}


@pytest.mark.parametrize("board", BOARDS)
def test_grouped_chain_replay_and_poison(board, tmp_path):
    """The grouped kernels' declared orders (qgconv_dsp, qgdot_mve: pixel
    pairs, all inputs first; the portable and NEON kernels: pixel by pixel
    with the channels stored through the folded shuffle) replayed on the
    plan, and the header run on a poisoned arena."""
    for seed in range(2):
        model, feeds = grouped_chain(seed)
        c = compile_model(model, board=board)
        grouped = [n.name for n in c.graph.nodes if n.op_type == "QLinearConv" and n.attrs.get("group", 1) in (3, 4)]
        assert sum(n.attrs.get("_ochan") is not None for n in c.graph.nodes) == 2
        assert replay(c) == len(c.plan.aliases)
        assert any(a["node"] in grouped for a in c.plan.aliases), (board, c.plan.aliases)
        assert_graph_outputs_exact(c.graph, run_poisoned(c, feeds, tmp_path, POISON[seed]), feeds)


# --------------------------------------------------------------------------- shared models

REPLAYED = [("kws_dscnn", b) for b in ("qemu-mps2-an385", "qemu-mps2-an386", "qemu-mps3-an547")] + \
    [("ic_resnet8", b) for b in ("qemu-mps2-an386", "qemu-mps3-an547")] + \
    [("micro_speech", "qemu-mps2-an386"), ("ad_fc_autoencoder", "qemu-mps2-an386"),
     ("vww_mobilenet_v1_025", "qemu-mps2-an386")]


@pytest.mark.skipif(not sm.available(), reason="shared models not found")
@pytest.mark.parametrize("name,board", REPLAYED)
def test_shared_models_replay(name, board):
    c = compile_model(str(sm.model_path(name)), board=board)
    n = replay(c)
    assert n == len(c.plan.aliases)
    if name in ("kws_dscnn", "ic_resnet8", "vww_mobilenet_v1_025"):
        assert c.plan.aliases and c.plan.arena_size < c.plan.no_alias_bound


@pytest.mark.skipif(not sm.available(), reason="shared models not found")
@pytest.mark.parametrize("name,board", [("kws_dscnn", "qemu-mps2-an386"), ("kws_dscnn", "qemu-mps3-an547"),
                                        ("ic_resnet8", "qemu-mps2-an386"), ("micro_speech", "host")])
def test_shared_models_poisoned_arena_match_tflm(name, board, tmp_path):
    """The DSP / Helium headers through their plain-C paths (and portable C),
    arena poisoned: TFLM's outputs bit for bit on two samples."""
    c = compile_model(str(sm.model_path(name)), board=board)
    s = sm.samples(name)
    x = s["inputs"]
    t = c.graph.inputs[0]
    for k, pattern in zip(range(2), POISON[::2]):
        feeds = {t: x[k].reshape(c.graph.tensors[t].shape)}
        (out,) = run_poisoned(c, feeds, tmp_path, pattern)
        np.testing.assert_array_equal(out.reshape(-1), s["expected_tflm"][k].reshape(-1))


# --------------------------------------------------------------------------- hand-made windows

def _geo(c, h, w, m, k, s, pad, group=1):
    return ConvGeometry(spatial=2, n=1, c=c, m=m, group=group, hw=(h, w), k=(k, k), strides=(s, s),
                        dilations=(1, 1), pad_begin=(pad, pad), pad_end=(pad, pad),
                        out_hw=((h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1))


def test_hand_windows():
    # pointwise 8 -> 8 over 4x4: a kernel copying each pair's inputs first may
    # write in place (delta 0); channel by channel, the output must trail its
    # input by one pixel (8 B, aligned to 16 -> -16)
    pw = _geo(8, 4, 4, 8, 1, 1, 0)
    assert windows.best_delta(windows.raster(pw, False, group=2, cblock=0), 16) == 0
    assert windows.best_delta(windows.raster(pw, False, group=1, cblock=1), 16) == -16
    # from the last pixel down the output must lead instead (+16); inside a
    # buffer already 256 B long it moves as far up as it may and still overlap
    # its input (112: at 128 it would not be in place at all)
    rev = windows.raster(pw, False, group=1, cblock=1, reverse=True)
    assert windows.best_delta(rev, 16) == 16
    assert windows.best_delta(rev, 16, at=0, extent=(0, 256)) == 112
    # ... unless the bytes there hold a tensor still needed
    assert windows.best_delta(rev, 16, at=0, extent=(0, 256), blocked=[(192, 256)]) == 64
    # 8 -> 16 (C_out > C_in): forward, the output ends where the input ends
    # (delta -128, extent 256); from the last pixel down it may also start at
    # the input (0) or a little below: -16 is the lowest safe one (pair 0-1
    # writes bytes -16..16 over its own inputs, read first); at -32 pair 2-3
    # would write over pixels 0 and 1, which pair 0-1 reads after it
    up = _geo(8, 4, 4, 16, 1, 1, 0)
    assert windows.best_delta(windows.raster(up, False, group=2, cblock=0), 16) == -128
    rev_up = windows.raster(up, False, group=2, cblock=0, reverse=True)
    assert windows.best_delta(rev_up, 16) == -16
    assert rev_up.safe(0) and not rev_up.safe(-32)
    # depthwise 3x3 pad 1 on 6 x 5 x 16 (rows of 80 B), pixel by pixel: output
    # pixel (y, x) is written once (y - 1, x + 1) is read for the last time: it
    # must trail its input by a row and a pixel (96 B)
    dw = _geo(16, 6, 5, 16, 3, 1, 1, group=16)
    assert windows.best_delta(windows.raster(dw, True, group=1, cblock=1), 16) == -96
    # row bands (isa/dsp_dw.py): one row (80 B)
    o = windows.bands(1, 6, 5, 6, 5, 16, lb=2, sh=1, pt=1, kh=3, nk_extra=1, rin=80, cin=16, rout=80, cout=16)
    assert windows.best_delta(o, 16) == -80
    # channel by channel (isa/dsp_dw.py's one-plane kernel): in place, no lag;
    # any whole number of pixels either way keeps each byte on its own channel
    # (safe), a shift of a few channels does not; stride 2 without padding
    # (6 x 5 -> 2 x 2, row 5 and column 4 never read): in place too
    ch = windows.channels(1, 6 * 5 * 16, 6 * 5 * 16, 16)
    assert windows.best_delta(ch, 16) == 0 and ch.safe(16) and ch.safe(-16)
    assert not ch.safe(-1) and not ch.safe(8)
    read = np.zeros((6, 5), bool)
    read[:5, :4] = True
    ch2 = windows.channels(1, 6 * 5 * 16, 2 * 2 * 16, 16, read)
    assert ch2.safe(0) and windows.best_delta(ch2, 16) is not None and not ch2.safe(1)
    # rows through a ring (isa/mve.py's qdwdot_mve): row y enters the ring
    # while output row y - 1 is computed, so output row y may replace input
    # rows up to y + 1 (in place, or up to a row ahead: +80, not +96); all
    # channels at once, a byte may also land on another channel (-8); in
    # groups of 8 channels only whole pixels keep every byte on its group
    # (a later group's input is read after this group's output is written)
    ring = windows.rows(dw)
    assert windows.best_delta(ring, 16) == 0 and ring.safe(80) and ring.safe(-8) and not ring.safe(96)
    ring8 = windows.rows(dw, 8)
    assert ring8.safe(0) and ring8.safe(80) and ring8.safe(-16) and not ring8.safe(8) and not ring8.safe(-8)
    # the exact check agrees with brute force over every delta
    for order in (windows.raster(dw, True, group=1, cblock=1), o, windows.raster(up, False, group=2, cblock=0),
                  ch, ch2, ring, ring8):
        for d in range(-order.write_step.size, order.last_read.size + 1):
            a = np.arange(order.write_step.size)
            b = a + d
            ok = (b < 0) | (b >= order.last_read.size)
            inside = ~ok
            brute = bool(np.all(order.write_step[inside] >= order.last_read[b[inside]]))
            assert order.safe(d) == brute, d


# --------------------------------------------------------------------------- MobileNetV2

MOBILENET = Path(__file__).resolve().parent.parent / "examples" / "mobilenet_v2_035_96_int8.onnx"


def test_mobilenet_v2_inverted_residuals(tmp_path, monkeypatch):
    """examples/mobilenet_v2_035_96_int8.onnx (examples/make_mobilenet_v2.py):
    expansion pointwise layers written over their input (C_out = 6 C_in)
    where it dies there,
    depthwise in place, the plan replayed byte by byte, and the DSP header's
    plain C with a poisoned arena equal to the reference (whole layers: the
    tiled run is tests/test_tiling.py's). Without the planes stores (codegen.PLANES:
    a pw -> dw tensor stored as planes is written over nothing, by design, so the
    six 6x6 ones would take 12 of the windows counted here; tests/test_dsp_planes.py)."""
    from cuvil_mcu import codegen
    monkeypatch.setattr(codegen, "PLANES", False)
    c = compile_model(str(MOBILENET), board="qemu-mps2-an386", io="int8", patch=False)
    assert replay(c) == len(c.plan.aliases) >= 40
    assert c.plan.arena_size < c.plan.no_alias_bound
    expand = [a for a in c.plan.aliases
              if c.graph.tensors[a["output"]].nbytes == 6 * c.graph.tensors[a["input"]].nbytes]
    # the first block of each of the 6 stages with t = 6 (the others' input is
    # read again by the residual Add, so it does not die at the expansion)
    assert len(expand) == 6, [a["node"] for a in c.plan.aliases]
    t = c.graph.inputs[0]
    feeds = {t: np.random.RandomState(3).randint(-128, 128, c.graph.tensors[t].shape).astype(np.int8)}
    assert_graph_outputs_exact(c.graph, run_poisoned(c, feeds, tmp_path, 0xA5), feeds)


def test_preserve_input(tmp_path):
    """gen --preserve-input: no node writes over a graph input (here the
    first layer's input is a view of the graph input: one channel, so NCHW ->
    NHWC is a Reshape)."""
    rng = np.random.RandomState(5)
    node, inits, x = conv_layer(rng, 0, (1, 1, 6, 5), (8, 1, 3, 3), dict(pads=[1, 1, 1, 1]))
    model = qmodel([node], {"x0": (x.shape, "int8")}, {"y0": "int8"}, inits)
    for preserve in (False, True):
        c = compile_model(model, board="qemu-mps2-an386", preserve_inputs=preserve)
        over_input = [a for a in c.plan.aliases if a["input"] in c.graph.inputs
                      or c.plan.tensor_offset[a["input"]] == c.plan.tensor_offset[c.graph.inputs[0]]]
        assert bool(over_input) == (not preserve), c.plan.aliases
        replay(c)
