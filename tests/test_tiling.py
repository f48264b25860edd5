"""Patch-based execution (planner/tiling.py, passes/tile.py, ops/tiled.py):
runs of convolutions computed band by band must not change a byte.

- a hand-computed schedule (rows needed, halo moves, recomputed MACs);
- random conv chains tiled in many ways (band heights, halo kept or
  recomputed per buffer, strides, 5x5, dilation, uint8) equal to the numpy
  reference of the untiled graph bit for bit: the generated C with a
  poisoned arena (portable C, and the DSP, Helium and NEON headers through
  their plain-C paths) and on QEMU (the DSP and Helium kernels themselves),
  every plan replayed byte by byte band by band (test_planner_windows.replay);
- shared models as gen tiles them: TFLM's outputs, the region's output
  tensor checked too;
- what gen says: the regions and their extra MACs, and the fallbacks (the
  budget too small, a layer that cannot be tiled, --no-patch).
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from cuvil_mcu import compiler, reference
from cuvil_mcu.sim import qemu
from cuvil_mcu.passes import tile
from cuvil_mcu.planner import tiling
from qhelpers import assert_exact, assert_graph_outputs_exact
from test_isa_dsp import conv_layer, qmodel
from test_planner_windows import POISON, replay, run_poisoned

import shared_models as sm

HOST_BOARDS = ["host", "qemu-mps2-an386", "qemu-mps3-an547", "cortex-a7-neon"]
needs_qemu = pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                                reason="needs apt packages gcc-arm-none-eabi and qemu-system-arm")
MOBILENET = Path(__file__).resolve().parent.parent / "examples" / "mobilenet_v2_035_96_int8.onnx"


# --------------------------------------------------------------------------- schedule by hand

def test_schedule_by_hand():
    """3x3 stride 1 pad 1 (6 rows) -> 3x3 stride 2 pad (0, 1) (3 rows) -> 1x1,
    one output row per band."""
    layers = [tiling.Rows(3, 1, 1, 6, 6, 2, 4, 10), tiling.Rows(3, 2, 0, 6, 3, 4, 4, 20),
              tiling.Rows(1, 1, 0, 3, 3, 4, 4, 5)]
    assert tiling.needs(layers, 1) == [[(0, 3), (0, 1), (0, 1)], [(2, 5), (1, 2), (1, 2)], [(4, 6), (2, 3), (2, 3)]]
    kept = tiling.schedule(layers, 1, (True, True))
    steps = [[(s.layer, s.c0, s.c1, s.r0, s.r1, s.src_at, s.dst_at) for s in b.steps] for b in kept.bands]
    assert steps == [[(0, 0, 3, 0, 4, 0, 0), (1, 0, 1, 0, 3, 0, 0), (2, 0, 1, 0, 1, 0, 0)],
                     # layer 0 keeps row 2 (moved to the top) and computes rows 3, 4 below it
                     [(0, 3, 5, 2, 6, 2, 1), (1, 1, 2, 2, 5, 0, 0), (2, 1, 2, 1, 2, 0, 1)],
                     [(0, 5, 6, 4, 6, 4, 1), (1, 2, 3, 4, 6, 0, 0), (2, 2, 3, 2, 3, 0, 2)]]
    assert [[(m.buf, m.src, m.n) for m in b.moves] for b in kept.bands] == [[], [(0, 2, 1)], [(0, 2, 1)]]
    assert kept.rows == [3, 1] and kept.extra_macs() == 0 and kept.moved_bytes() == 2 * 4
    assert layers[1].pads(2, 3) == (0, 1)          # the last band's bottom row of padding
    again = tiling.schedule(layers, 1, (False, True))
    assert [s.c1 - s.c0 for b in again.bands for s in b.steps if s.layer == 0] == [3, 3, 2]
    assert again.extra_macs() == 2 * 10 and not any(b.moves for b in again.bands)
    # the region's order: input rows 0-1 last read by band 0, 2-3 by band 1, 4-5 by band 2
    assert list(kept.input_last_read()) == [0, 0, 1, 1, 2, 2] and list(kept.output_band()) == [0, 1, 2]
    # kept buffers live through the region, recomputed ones only next to their layer
    assert tiling.inner_records(kept, [0, 16, 0]) == [(16, 0, 2), (16, 0, 2), (0, 0, 0), (16, 1, 1), (0, 2, 2)]
    assert tiling.inner_records(again, [0, 0, 0])[0] == (16, 0, 1)
    assert kept.groups() == [(0, 0), (1, 1), (2, 2)]


def test_band_groups_become_loops():
    """Bands of one shape whose input and output advance by whole rows share
    a loop: band 0 (top padding, 4 rows of layer 0), band 1 (keeps row 3,
    the 4th of its buffer), bands 2-8 (keep the 5th), band 9 (bottom)."""
    rows = [tiling.Rows(3, 1, 1, 40, 40, 8, 8, 1), tiling.Rows(3, 2, 1, 40, 20, 8, 8, 1)]
    s = tiling.schedule(rows, 2, (True,))
    assert [[(m.src, m.n) for m in b.moves] for b in s.bands[:3]] == [[], [(3, 1)], [(4, 1)]]
    assert s.groups() == [(0, 0), (1, 1), (2, 8), (9, 9)]


# --------------------------------------------------------------------------- random chains

def tall_chain(seed: int, xdt: str = "int8"):
    """A random chain of QLinearConv layers tall enough to tile: pointwise,
    depthwise (3x3, 5x5, stride 1 and 2, dilation 2), general 3x3 (stride 1
    and 2), C % 4 != 0, odd heights."""
    rng = np.random.RandomState(100 + seed)
    c, h, w = int(rng.choice([3, 4, 8, 12])), int(rng.randint(14, 27)), int(rng.randint(7, 14))
    nodes, inits, x0 = [], {}, None
    for i in range(int(rng.randint(3, 6))):
        kind = rng.choice(["pw", "dw", "conv"], p=[0.35, 0.4, 0.25]) if i else "conv"
        if kind == "pw":
            m = int(rng.choice([max(c // 2, 1), c, 2 * c]))
            ws, attrs = (m, c, 1, 1), {}
        elif kind == "dw":
            k = int(rng.choice([3, 3, 5])) if w >= 5 else 3
            d = int(rng.choice([1, 1, 2])) if k == 3 and w >= 5 else 1
            s = int(rng.choice([1, 2])) if d == 1 and min(h, w) >= 8 else 1
            m, ws = c, (c, 1, k, k)
            attrs = dict(group=c, pads=[d * (k // 2)] * 4, strides=[s, s], dilations=[d, d])
        else:
            m = int(rng.choice([c, 2 * c, 8]))
            s = int(rng.choice([1, 2])) if min(h, w) >= 8 else 1
            ws, attrs = (m, c, 3, 3), dict(pads=[1, 1, 1, 1] if s == 1 else [0, 0, 1, 1], strides=[s, s])
        node, ini, x = conv_layer(rng, i, (1, c, h, w), ws, attrs, xdt=xdt)
        if i == 0:
            x0 = x
        else:
            node.input[0] = f"y{i - 1}"
        nodes.append(node)
        inits.update(ini)
        (kh, kw), (sh, sw) = ws[2:], tuple(attrs.get("strides", [1, 1]))
        d = attrs.get("dilations", [1, 1])[0]
        pads = attrs.get("pads", [0, 0, 0, 0])
        h = (h + pads[0] + pads[2] - (kh - 1) * d - 1) // sh + 1
        w = (w + pads[1] + pads[3] - (kw - 1) * d - 1) // sw + 1
        c = m
    model = qmodel(nodes, {"x0": (x0.shape, xdt)}, {f"y{len(nodes) - 1}": xdt}, inits)
    return model, {"x0": x0}


def tiled(c, band: int, cache=None, start=None, end=None):
    """Compiled model c (compiled whole) with its run of convolutions tiled
    as given, planned and rendered again."""
    g = c.graph
    convs = [i for i, n in enumerate(g.nodes) if n.op_type == "QLinearConv"]
    g2 = tile.apply(g, convs[0] if start is None else start, convs[-1] if end is None else end, band, cache)
    plan, r = compiler.plan_and_render(g2, c.prefix, c.board, preserve_inputs=False)
    return dataclasses.replace(c, graph=g2, plan=plan, header=r.text, stack_bound=r.stack_bound)


def _ways(seed: int, n_layers: int, h_out: int):
    """A few tilings of a chain: bands of 1 row, of a few rows, and halo modes."""
    rng = np.random.RandomState(seed)
    return [(1, tuple(bool(b) for b in rng.randint(0, 2, n_layers - 1))),
            (int(rng.randint(2, max(3, h_out // 2))), tuple(bool(b) for b in rng.randint(0, 2, n_layers - 1)))]


@pytest.mark.parametrize("board", HOST_BOARDS)
def test_random_chains_tiled_poisoned(board, tmp_path):
    seed = HOST_BOARDS.index(board)
    model, feeds = tall_chain(seed, "uint8" if board == "host" else "int8")
    whole = compiler.compile_model(model, board=board, patch=False)
    n = sum(nd.op_type == "QLinearConv" for nd in whole.graph.nodes)
    h_out = whole.graph.tensors[whole.graph.outputs[0]].shape[2]   # NCHW output (the layout's transpose back)
    want = reference.run(whole.graph, feeds)
    for k, (band, cache) in enumerate(_ways(seed, n, h_out)):
        c = tiled(whole, band, cache)
        region = c.plan.tiles[next(nd.name for nd in c.graph.nodes if nd.op_type == "cuvil.TiledRegion")]
        assert len(region["bands"]) == -(-region["output"]["rows"] // band)
        replay(c)
        outs = run_poisoned(c, feeds, tmp_path, POISON[k % len(POISON)])
        for o, name in zip(outs, whole.graph.outputs):
            assert_exact(o, want[name], f"{board} seed {seed}: bands of {band}, halo kept {cache}")


def test_random_chains_tiled_replay_many():
    """Every band height and every halo mode of two chains: the plan replayed
    byte by byte, the reference of the tiled graph equal to the untiled one's."""
    for seed in (0, 1):
        model, feeds = tall_chain(seed)
        whole = compiler.compile_model(model, board="qemu-mps2-an386", patch=False)
        want = reference.run(whole.graph, feeds)
        n = sum(nd.op_type == "QLinearConv" for nd in whole.graph.nodes)
        h_out = whole.graph.tensors[whole.graph.outputs[0]].shape[2]
        for band in range(1, h_out + 1):
            cache = tuple(bool((band >> j) & 1) for j in range(n - 1))
            c = tiled(whole, band, cache)
            replay(c)
            got = reference.run(c.graph, feeds)
            for name in whole.graph.outputs:
                assert_exact(got[name], want[name], f"seed {seed} band {band}")


def _user_ready(board: str) -> bool:
    from cuvil_mcu import boards
    b = boards.get(board)
    return shutil.which(b.sim["cc"]) is not None and shutil.which(b.sim["qemu"]) is not None


NEEDS_A53 = pytest.mark.skipif(not _user_ready("cortex-a53-aarch64"),
                               reason="aarch64 cross compiler or qemu-user missing")


@pytest.mark.parametrize("board", [pytest.param(b, marks=needs_qemu) for b in ("qemu-mps2-an386", "qemu-mps3-an547")]
                         + [pytest.param("cortex-a53-aarch64", marks=NEEDS_A53)])
def test_random_chains_tiled_on_emulated_cores(board):
    """The DSP, Helium and NEON kernels themselves (inline asm, intrinsics)
    on band sub-views: equal to the reference on QEMU (system emulation for
    the Cortex-M boards, qemu-user for the Cortex-A53)."""
    from cuvil_mcu.sim import qemu, qemu_user
    for seed in (0, 1):
        model, feeds = tall_chain(seed)
        whole = compiler.compile_model(model, board=board, patch=False)
        c = tiled(whole, 2, None)
        x = np.stack([feeds["x0"], np.random.RandomState(seed).randint(-128, 128, feeds["x0"].shape).astype(np.int8)])
        if board.startswith("qemu-"):
            outs = qemu.simulate(c, x, board).outputs
        else:
            outs = qemu_user.compile_and_run(c, [x])
        cmp = qemu.compare(outs, qemu.reference_outputs(whole, x), whole.graph.outputs)
        assert cmp.ok, (board, seed, cmp.first_mismatch)


# --------------------------------------------------------------------------- shared models

@pytest.mark.skipif(not sm.available(), reason="shared models not found")
def test_person_detect_tiled_matches_tflm(tmp_path):
    """gen's own tiling of person_detect (DSP header, plain C, poisoned
    arena): TFLM's output on a sample, and the first region's output tensor
    (kept to the end as a second output) equal to the reference; the plan
    replayed."""
    c = compiler.compile_model(str(sm.model_path("person_detect")), board="qemu-mps2-an386")
    regions = [n for n in c.graph.nodes if n.op_type == "cuvil.TiledRegion"]
    assert regions and c.plan.arena_size < c.graph.patches["arena_before"]
    replay(c)
    g = c.graph
    g.outputs = g.outputs + [regions[0].outputs[0]]
    plan, r = compiler.plan_and_render(g, c.prefix, c.board)
    c2 = dataclasses.replace(c, plan=plan, header=r.text)
    s = sm.samples("person_detect")
    t = g.inputs[0]
    feeds = {t: s["inputs"][1].reshape(g.tensors[t].shape)}
    outs = run_poisoned(c2, feeds, tmp_path, 0xA5)
    np.testing.assert_array_equal(outs[0].reshape(-1), s["expected_tflm"][1].reshape(-1))
    assert_graph_outputs_exact(g, outs, feeds, min_unique=20)


def test_mobilenet_v2_tiled_helium(tmp_path):
    """The MobileNetV2 example as gen tiles it for the M55 (Helium header's
    plain C): the region's output and the logits equal to the reference."""
    c = compiler.compile_model(str(MOBILENET), board="qemu-mps3-an547", io="int8")
    regions = [n for n in c.graph.nodes if n.op_type == "cuvil.TiledRegion"]
    assert regions and c.plan.arena_size < c.graph.patches["arena_before"]
    # the leanest estimate is block 4 in bands of 1 row; planned, taller bands of
    # that region take no more (the plan has room the estimate misses) and run
    # fewer kernel calls: the pass takes them (here 8 bands of 3 rows)
    reg = regions[0].attrs["_region"]
    whole = compiler.compile_model(str(MOBILENET), board="qemu-mps3-an547", io="int8", patch=False)
    first = [n.name for n in whole.graph.nodes].index(reg.nodes[0].name)
    one = tiled(whole, 1, reg.cache, first, first + len(reg.nodes) - 1)
    assert reg.band > 1 and c.plan.arena_size <= one.plan.arena_size * (1 + tile.TOLERANCE), \
        (reg.band, c.plan.arena_size, one.plan.arena_size)
    g = c.graph
    g.outputs = g.outputs + [n.outputs[0] for n in regions]
    plan, r = compiler.plan_and_render(g, c.prefix, c.board)
    c2 = dataclasses.replace(c, plan=plan, header=r.text)
    t = g.inputs[0]
    feeds = {t: np.random.RandomState(3).randint(-128, 128, g.tensors[t].shape).astype(np.int8)}
    assert_graph_outputs_exact(g, run_poisoned(c2, feeds, tmp_path, 0xFF), feeds, min_unique=2)
    # and on the M55 itself (QEMU): the outputs, and the model's stack (beyond what
    # the harness alone takes, measured as benchmarks/ram.py does) within the
    # header's STACK_BOUND: Helium kernels inlined into <prefix>_run once took
    # MobileNetV2 to 536 B, which simulate's allowance for the harness let through
    if shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc"):
        from qhelpers import sim_exact
        r, _ = sim_exact(c2, feeds)
        used = r.stack - qemu.harness_stack("qemu-mps3-an547")
        assert 0 < used <= c2.stack_bound, (used, c2.stack_bound)


# --------------------------------------------------------------------------- what gen says

def _big_chain(batch: int = 1):
    """conv 3x3 (3 -> 16 channels, 48x48) -> depthwise -> pointwise (8): a
    big early tensor around which tiling pays."""
    rng = np.random.RandomState(9)
    specs = [((16, 3, 3, 3), dict(pads=[1, 1, 1, 1])), ((16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1])),
             ((8, 16, 1, 1), {})]
    nodes, inits, x0, c = [], {}, None, 3
    for i, (ws, attrs) in enumerate(specs):
        node, ini, x = conv_layer(rng, i, (batch, c, 48, 48), ws, attrs)
        if i:
            node.input[0] = f"y{i - 1}"
        else:
            x0 = x
        nodes.append(node)
        inits.update(ini)
        c = ws[0]
    return qmodel(nodes, {"x0": (x0.shape, "int8")}, {"y2": "int8"}, inits)


def test_summary_and_fallbacks():
    m = _big_chain()
    c = compiler.compile_model(m, board="qemu-mps2-an386", io="int8")
    lines = c.summary().splitlines()
    head = [ln for ln in lines if ln.startswith("patches  1 region(s)")]
    assert head and f"-> {c.plan.arena_size:,} B" in head[0], lines
    assert c.plan.arena_size < c.graph.patches["arena_before"]
    assert any(ln.startswith("patches  node ") and "+0 MACs" in ln for ln in lines), lines
    assert c.plan.tiles and c.plan.to_json().count('"band_rows"') == 1
    # no budget: nothing tiled, and the summary says why
    c0 = compiler.compile_model(m, board="qemu-mps2-an386", io="int8", ram_vs_speed=0.0)
    assert not any(n.op_type == "cuvil.TiledRegion" for n in c0.graph.nodes)
    assert "patches  none: every tiling of the layers around the peak" in c0.summary()
    assert "costs more than the --ram-vs-speed budget (0% of the MACs)" in c0.summary()
    assert c0.plan.arena_size == c.graph.patches["arena_before"]
    # a layer that cannot be tiled at the peak (batch 2)
    c2 = compiler.compile_model(_big_chain(batch=2), board="qemu-mps2-an386", io="int8")
    assert "which cannot be tiled: batch 2" in c2.summary(), c2.summary()
    # --no-patch: whole layers, nothing said
    c3 = compiler.compile_model(m, board="qemu-mps2-an386", io="int8", patch=False)
    assert "patches" not in c3.summary() and c3.plan.arena_size == c0.plan.arena_size
    with pytest.raises(Exception, match="--ram-vs-speed -1"):
        compiler.compile_model(m, board="host", ram_vs_speed=-1)


def test_cli_flags(tmp_path):
    from cuvil_mcu import cli
    import onnx
    from onnx import TensorProto, helper
    m = _big_chain()
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y2", TensorProto.INT8, [1, 8, 48, 48]))
    onnx.save(m, tmp_path / "chain.onnx")
    plan = tmp_path / "plan.json"
    gen = ["gen", str(tmp_path / "chain.onnx"), "--board", "qemu-mps2-an386", "--plan-out", str(plan), "--no-cache"]
    assert cli.main(gen + ["-o", str(tmp_path / "a")]) == 0
    import json
    tiles = json.loads(plan.read_text())["tiles"]
    assert len(tiles) == 1 and tiles[0]["layers"] and tiles[0]["bands"]
    assert cli.main(gen + ["-o", str(tmp_path / "b"), "--no-patch"]) == 0
    assert json.loads(plan.read_text())["tiles"] == []
