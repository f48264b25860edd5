"""The DSP depthwise kernel on channel planes (cuvil_mcu/isa/dsp_dw.py,
kernels/qdw2_dsp.c.j2): generated C for a DSP board compiled on the host
(plain-C equivalents of the intrinsics) equals the numpy reference bit for
bit over kernel sizes, strides, pads, widths, channel counts, both
orientations and fused clamps; the same on QEMU (the real SMLAD / SMMLAR /
PKH / SSAT); its requantization arithmetic equals
quant.requantize_fixed."""
from __future__ import annotations

import dataclasses
import re
import shutil

import numpy as np
import pytest

from cuvil_mcu import codegen, planner, quant, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa import dsp_dw
from helpers import check_strict_builds
from test_isa_dsp import build, run_host

BOARD = "qemu-mps2-an386"


def dw(c, h, w, k, s=(1, 1), pads=(0, 0, 0, 0), n=1):
    """A depthwise QLinearConv layer spec for test_isa_dsp.build (NCHW in the model)."""
    attrs = dict(group=c, pads=list(pads), strides=list(s))
    return ("conv", ((n, c, h, w), (c, 1) + tuple(k), attrs), {})


# (layer, uses qdw2): widths 1..50, heights 1..25, both orientations, odd and even counts
LAYERS = [
    (dw(64, 25, 5, (3, 3), pads=(1, 1, 1, 1)), True),             # KWS: transposed, 25 outputs per line
    (dw(8, 14, 48, (3, 3), pads=(1, 1, 1, 1)), True),             # VWW width: 50 columns, bands of 8 lines
    (dw(16, 13, 48, (3, 3), (2, 2), (0, 0, 1, 1)), True),          # VWW stride 2, asymmetric pad
    (dw(12, 7, 9, (3, 3), (2, 2), (1, 1, 1, 1)), True),            # C % 8 == 4, odd sizes
    (dw(20, 9, 4, (5, 5), pads=(2, 1, 2, 2)), True),              # 5x5, asymmetric pads, transposed
    (dw(4, 1, 13, (1, 3), pads=(0, 1, 0, 0)), True),              # one line (kh 1), left pad only
    (dw(36, 11, 1, (3, 1), pads=(1, 0, 1, 0)), True),             # width 1: transposed to one line of 11
    (dw(8, 6, 6, (3, 3)), True),                                  # no padding, 4x4 out
    (dw(24, 10, 3, (3, 3), (1, 2), (0, 1, 2, 1)), True),           # mixed strides
    (dw(16, 3, 7, (2, 3), (2, 1), (1, 0, 1, 1)), True),            # kh even, stride 2 lines
    (dw(12, 5, 5, (4, 2), (1, 1), (2, 1, 1, 0)), True),            # kh even, stride 1: phase-1 lines
    (dw(256, 3, 3, (3, 3), pads=(1, 1, 1, 1)), True),             # many channels, 3 outputs per line
    (dw(8, 2, 7, (3, 3), (1, 2), (1, 1, 1, 1)), True),             # 2 x 4 outputs
    (dw(8, 9, 7, (3, 3), (2, 1), (1, 1, 1, 1), n=2), True),       # batch 2, stride 2 lines
    (dw(4, 9, 60, (3, 3), pads=(1, 1, 1, 1)), True),              # 62 columns: 4 pair-rows per column
    (dw(8, 13, 9, (1, 4), (2, 2), (0, 1, 0, 2)), True),            # transposed to kw 1, stride 2: a column unread
    (dw(6, 5, 5, (3, 3), pads=(1, 1, 1, 1)), False),              # C % 4 == 2: the older kernels
]


def _kernels(header: str) -> set[str]:
    return set(re.findall(r"model__(qdw\w*?)\(", header))


def _check(layers, seed, requant="fixed"):
    model, feeds = build([spec for spec, _ in layers], seed=seed)
    c = compile_model(model, board=BOARD, requant=requant, verify_each=True)
    outs = run_host(c, feeds)
    ref = reference.run(c.graph, feeds)
    for name, o in zip(c.graph.outputs, outs):
        r = ref[name]
        if not np.array_equal(o, r):
            bad = np.argwhere(o != r)
            raise AssertionError(f"{name}: {len(bad)} of {r.size} differ, first at {tuple(bad[0])}: "
                                 f"{o[tuple(bad[0])]} vs {r[tuple(bad[0])]}")
        assert np.unique(r).size >= min(4, r.size), f"{name}: output too flat to test anything"
    return c, feeds


def test_layers_exact_on_host():
    c, _ = _check(LAYERS, seed=21)
    used = [n for n in c.graph.nodes if n.op_type == "QLinearConv"]
    assert len(used) == len(LAYERS)
    calls = [ln for ln in c.header.splitlines() if re.match(r"\s*model__qdw", ln)]
    assert sum("qdw2_dsp" in ln for ln in calls) == sum(u for _, u in LAYERS), calls
    kern = {k.rsplit("_kp", 1)[0] for k in _kernels(c.header)}
    assert {"qdw2_dsp_ns_3x3s11", "qdw2_dsp_ns_3x3s22", "qdw2_dsp_ns_5x5s11"} <= kern, kern
    kp = {k.rsplit("_kp", 1)[1] for k in _kernels(c.header) if "qdw2" in k}
    assert kp == {"4", "5"}, kp     # 5 pair-rows per column, 4 for the 62-column layer


def test_strict_builds():
    """gcc / clang as C99, C11 and C++ with -Werror (and the sanitizers): bit-exact."""
    model, feeds = build([LAYERS[i][0] for i in (2, 4, 10)], seed=26)
    check_strict_builds(model, feeds, exact=True, board=BOARD)


def test_float_requant_not_taken():
    c, _ = _check(LAYERS[:2], seed=22, requant="float")
    assert not any("qdw2" in k for k in _kernels(c.header))


@pytest.mark.parametrize("act", [(0.0, float("inf")), (0.0, 0.5), (-0.3, 0.4)])
def test_fused_clamps(act):
    """Relu, Relu6-like and a clamp below the zero point: lo >= yzp drops
    the negative-rounding correction ("z" variants), else it stays ("n");
    a clamp inside int8 is the "c" variant."""
    layers = [LAYERS[0], LAYERS[2], LAYERS[4], LAYERS[10]]
    model, feeds = build([spec for spec, _ in layers], seed=23)
    c = compile_model(model, board=BOARD)
    g = c.graph
    for n in g.nodes:
        n.act = act
    c = dataclasses.replace(c, header=codegen.render(g, planner.plan(g), c.prefix, target=c.board).text)
    kern = _kernels(c.header)
    tag = "z" if act[0] >= 0 else "n"
    assert kern and all(k.startswith(f"qdw2_dsp_{tag}c_") for k in kern), kern
    outs = run_host(c, feeds)
    ref = reference.run(g, feeds)
    clamped = 0
    for name, o in zip(g.outputs, outs):
        np.testing.assert_array_equal(o, ref[name], err_msg=name)
        clamped += int((ref[name] == ref[name].min()).sum() + (ref[name] == ref[name].max()).sum())
    assert clamped > 50


def test_relu_zero_point_at_minimum_takes_sat_without_correction():
    """yzp = -128 and a Relu clamp: lo = -128 = yzp, hi = 127 -> SSAT only,
    no negative-rounding correction (the KWS / VWW case)."""
    model, feeds = build([LAYERS[0][0], LAYERS[7][0]], seed=24)
    from onnx import numpy_helper
    for t in model.graph.initializer:
        if t.name.startswith("yz"):
            t.CopyFrom(numpy_helper.from_array(np.array(-128, np.int8), t.name))
    c = compile_model(model, board=BOARD)
    g = c.graph
    for n in g.nodes:
        n.act = (0.0, float("inf"))
    c = dataclasses.replace(c, header=codegen.render(g, planner.plan(g), c.prefix, target=c.board).text)
    assert _kernels(c.header) == {"qdw2_dsp_zs_3x3s11_kp5"}
    outs = run_host(c, feeds)
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, outs):
        np.testing.assert_array_equal(o, ref[name], err_msg=name)
        assert (ref[name] == -128).sum() > 10


def test_requant_dw_matches_quant():
    """SMMLAR(2 acc, mult, nudge) [- (acc < 0)] >> e == requantize_fixed +
    yzp for |acc| < 2^30, mult in [2^30, 2^31), e in 1..31; without the
    correction, equal after any clamp whose low bound is >= yzp."""
    rng = np.random.default_rng(5)
    n = 400_000
    acc = rng.integers(-2 ** 30 + 1, 2 ** 30, n)
    acc[:4001] = np.arange(-2000, 2001)
    mult = rng.integers(2 ** 30, 2 ** 31, n)
    mult[:1000] = 2 ** 30
    mult[1000:2000] = 2 ** 31 - 1
    e = rng.integers(1, 32, n)
    e[4001:8000] = rng.integers(1, 12, 3999)
    yzp = rng.integers(-128, 128, n)
    want = quant.requantize_fixed(acc, mult, -e) + yzp
    np.testing.assert_array_equal(dsp_dw.requant_dw(acc, mult, e, yzp), want)
    lo = np.maximum(yzp, -128)
    got = np.clip(dsp_dw.requant_dw(acc, mult, e, yzp, corr=False), lo, 127)
    np.testing.assert_array_equal(got, np.clip(want, lo, 127))
    a = np.arange(-70000, 70001)
    for sh in range(1, 32):
        for m in (2 ** 30, 2 ** 30 + 1, 1518500250, 2 ** 31 - 1):
            for z in (-128, -5, 0, 127):
                w = quant.requantize_fixed(a, m, -sh) + z
                np.testing.assert_array_equal(dsp_dw.requant_dw(a, m, sh, z), w)
                np.testing.assert_array_equal(np.clip(dsp_dw.requant_dw(a, m, sh, z, corr=False), z, 127),
                                              np.clip(w, z, 127))


def test_phase_words_cover_every_tap_once():
    """Every tap of the window appears in exactly one MAC of each phase,
    with the data half matching the row's place in its pair-row word."""
    for kh in range(1, 8):
        for kw in (1, 2, 3, 5):
            for ph in (0, 1):
                words, macs, ew = dsp_dw.phase_words(kh, kw, ph)
                assert words[ew][0] == ("e",)
                seen = []
                for j, col in enumerate(macs):
                    for g, (op, wi, dh, whalf) in enumerate(col):
                        rows = (2 * g - ph, 2 * g + 1 - ph)
                        if op == "pair":
                            assert words[wi] == (("t", rows[0], j), ("t", rows[1], j))
                            seen += [(rows[0], j), (rows[1], j)]
                        else:
                            r = rows[0] if dh == "b" else rows[1]
                            slot = words[wi][0 if whalf == "b" else 1]
                            assert slot == ("t", r, j)
                            seen.append((r, j))
                assert sorted(seen) == sorted((i, j) for i in range(kh) for j in range(kw))


def _have_cross() -> bool:
    return shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None


@pytest.mark.skipif(not _have_cross(), reason="arm-none-eabi-gcc / qemu-system-arm not installed")
@pytest.mark.parametrize("board", ["qemu-mps2-an386", "qemu-mps2-an505"])
def test_on_qemu(board):
    """The real instructions on M4 / M33: several shapes, both variants of
    the negative-rounding correction, outputs equal the reference."""
    from cuvil_mcu.sim import qemu
    layers = [LAYERS[i] for i in (0, 2, 3, 4, 5, 9, 10, 12)]
    model, feeds = build([spec for spec, _ in layers], seed=25)
    c = compile_model(model, board=board)
    g = c.graph
    for n in g.nodes[::2]:
        n.act = (0.0, float("inf"))
    c = dataclasses.replace(c, header=codegen.render(g, planner.plan(g), c.prefix, target=c.board).text)
    kern = _kernels(c.header)
    assert any(k.startswith("qdw2_dsp_z") for k in kern) and any(k.startswith("qdw2_dsp_n") for k in kern), kern
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, board)
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=f"{board}: {name}")
