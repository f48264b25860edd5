"""The DSP depthwise kernel on channel planes (cuvil_mcu/isa/dsp_dw.py,
kernels/qdw2_dsp.c.j2): generated C for a DSP board compiled on the host
(plain-C equivalents of the intrinsics) equals the numpy reference bit for
bit over kernel sizes, strides, pads, widths, channel counts, both
orientations and fused clamps; the same on QEMU (the real SMLAD / SMMLAR /
PKH / SSAT); its requantization arithmetic equals
quant.requantize_fixed; the int8 tap layout's word recipes and the 8-byte
record round-trip exactly; taps of -128 / 127 with every shift 1..30 and
folded biases at the record's limit are exact on the host and on QEMU."""
from __future__ import annotations

import dataclasses
import re
import shutil

import numpy as np
import pytest

from cuvil_mcu import compiler, quant, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa import dsp_dw
from helpers import check_strict_builds
from qhelpers import clamped_exact, rerender, with_fused_act
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
    """The depthwise kernels of a header, without the plane size suffix
    (_pl<words>: the arena scratch per layer) and the unrolled lines' width
    and output strides (_u<ow>x<cout>[i<cin>][l<lines> | x<lines>r<rout>[p<right><bottom>]][g<geometry>][f<left><right>])."""
    return {re.sub(r"_u\d+x\d+(i\d+)?(l\d+|x\d+r\d+(p\d\d)?)?(g\d+(_\d+)*)?(f\d\d)?", "", re.sub(r"_pl\d+$", "", k)) for k in re.findall(r"model__(qdw\w*?)\(", header)}


def _half_relu(specs, seed, board=BOARD):
    """The layers compiled for board, every other node with a fused Relu
    (the "z" kernels beside the "n" ones), and the header's qdw2_dsp kernel
    names."""
    model, feeds = build(specs, seed=seed)
    c = compile_model(model, board=board)
    relu = {n.name for n in c.graph.nodes[::2]}
    c = rerender(c, lambda n: (0.0, float("inf")) if n.name in relu else None)
    return c, feeds, set(re.findall(r"model__(qdw2_dsp\w*?)\(", c.header))


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


def _whole_everywhere(monkeypatch):
    """As if the plan had the arena free for 4 planes holding every line at each step."""
    from cuvil_mcu import codegen
    monkeypatch.setattr(dsp_dw, "ONE_PLANE", "auto")
    monkeypatch.setattr(dsp_dw, "_bands_plan", lambda *a, **k: (0, 0))       # never the one-channel plane
    monkeypatch.setattr(codegen.Emitter, "scratch_room", lambda self: 0)
    monkeypatch.setattr(codegen.Emitter, "scratch_free", lambda self: 1 << 30)


@pytest.mark.parametrize("mode", ["bands", "wide", "one", "whole"])
def test_layers_exact_on_host(mode, monkeypatch):
    # each layer is written over its (transposed) input. bands: row bands, the
    # smallest first (3 pair-rows); wide: the bands a layer not in place takes;
    # one: one channel at a time over the whole plane wherever it applies;
    # whole: 4 channels' planes holding every line wherever they apply
    if mode == "whole":
        _whole_everywhere(monkeypatch)
    else:
        monkeypatch.setattr(dsp_dw, "ONE_PLANE", "always" if mode == "one" else "never")
        monkeypatch.setattr(dsp_dw, "KP_MAX", 0)       # the bands' own sizes, not widened into free arena
    if mode == "wide":
        monkeypatch.setattr(dsp_dw, "KPS_INPLACE", dsp_dw.KPS)
    c, _ = _check(LAYERS, seed=21)
    used = [n for n in c.graph.nodes if n.op_type == "QLinearConv"]
    assert len(used) == len(LAYERS)
    calls = [ln for ln in c.header.splitlines() if re.match(r"\s*model__qdw", ln)]
    assert sum("qdw2_dsp" in ln for ln in calls) == sum(u for _, u in LAYERS), calls
    kern = {k.rsplit("_kp", 1)[0] for k in _kernels(c.header)}
    assert {"qdw2_dsp_ns_3x3s11", "qdw2_dsp_ns_3x3s22", "qdw2_dsp_ns_5x5s11"} <= kern, kern
    kp = {k.rsplit("_kp", 1)[1] for k in _kernels(c.header) if "qdw2" in k}
    if mode == "wide":
        assert kp == {"4", "5"}, kp     # 5 pair-rows per column, 4 for the 62-column layer
    elif mode == "bands":
        assert kp == {"3"}, kp
    elif mode == "whole":        # every line in one band: as many pair-rows as that takes
        assert len(kp) >= 5 and not any("_one" in k for k in _kernels(c.header)), kp
    else:
        one = sum("qdw2_dsp" in ln and "_one(" in ln for ln in calls)
        assert one == sum(u for _, u in LAYERS), calls


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
    c = with_fused_act(c, act)
    kern = _kernels(c.header)
    tag = "z" if act[0] >= 0 else "n"
    # (the "z" kernels: the scaled requantization, one shift (e<E>) or per channel (v))
    scaled = r"(e\d+|v)" if tag == "z" else ""
    assert kern and all(re.match(rf"qdw2_dsp_{tag}c{scaled}_", k) for k in kern), kern
    assert clamped_exact(c.graph, run_host(c, feeds), feeds) > 50


def test_relu_zero_point_at_minimum_takes_sat_without_correction():
    """yzp = -128 and a Relu clamp: lo = -128 = yzp, hi = 127 -> SSAT only,
    no negative-rounding correction (the KWS / VWW case)."""
    model, feeds = build([LAYERS[0][0], LAYERS[7][0]], seed=24)
    from onnx import numpy_helper
    for t in model.graph.initializer:
        if t.name.startswith("yz"):
            t.CopyFrom(numpy_helper.from_array(np.array(-128, np.int8), t.name))
    c = compile_model(model, board=BOARD)
    c = with_fused_act(c, (0.0, float("inf")))
    g = c.graph
    # KWS's layer: the one-channel plane (transposed, 25 outputs per line); the other: row bands
    # (one tensor scale: one shift, SSAT's immediate, e<E>)
    assert _kernels(c.header) == {"qdw2_dsp_zse14_3x3s11_kp4_pl108_one", "qdw2_dsp_zse14_3x3s11_kp3"}
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
    with the data half matching the row's place in its pair-row word (with
    and without a byte layout steering the pairing of single rows)."""
    for kh in range(1, 8):
        for kw in (1, 2, 3, 5):
            for ph, lay in ((0, False), (1, False), (0, True), (1, True)):
                words, macs, ew = dsp_dw.phase_words(kh, kw, ph, dsp_dw.tap_layout(kh, kw) if lay else None)
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
@pytest.mark.parametrize("board", ["qemu-mps2-an386", "qemu-mps2-an505", "qemu-mps2-an500"])
def test_on_qemu(board, monkeypatch):
    """The real instructions on M4 / M33 / M7: several shapes, both variants
    of the negative-rounding correction, outputs equal the reference; the
    one-channel planes on the M4 (every layer here takes them), the row
    bands on the M33, 4 channels' planes holding every line on the M7."""
    from cuvil_mcu.sim import qemu
    if board == "qemu-mps2-an500":
        _whole_everywhere(monkeypatch)
    else:
        monkeypatch.setattr(dsp_dw, "ONE_PLANE", "always" if board == "qemu-mps2-an386" else "never")
    layers = [LAYERS[i] for i in (0, 2, 3, 4, 5, 9, 10, 12)]
    c, feeds, _ = _half_relu([spec for spec, _ in layers], 25, board)
    g = c.graph
    kern = _kernels(c.header)
    assert any(k.startswith("qdw2_dsp_z") for k in kern) and any(k.startswith("qdw2_dsp_n") for k in kern), kern
    one = [k for k in kern if k.endswith("_one")]
    assert len(one) == (len(kern) if board == "qemu-mps2-an386" else 0), kern
    if board == "qemu-mps2-an500":
        assert "_kp3" not in "".join(kern), kern
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, board)
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=f"{board}: {name}")


def _half(v: int, hi: bool) -> int:
    h = (v >> 16 if hi else v) & 0xFFFF
    return h - 0x10000 if h & 0x8000 else h


def test_tap_layout_and_recipes_build_the_doubled_words():
    """Python model of the kernel's per-line word building (32-bit loads
    anywhere in the channel's int8 taps + 3 bytes of padding, SXTB16 [ror
    8], SADD16, PKHBT lsl 17, byte loads): every word of every phase holds
    2 w of its taps in the halves phase_words says (the half next to e: e),
    for every kernel size the kernel takes and taps including -128 / 127."""
    rng = np.random.default_rng(7)
    for kh in range(1, 8):
        for kw in range(1, 8):
            if kh * kw > 25:
                continue
            pos = dsp_dw.tap_layout(kh, kw)
            assert sorted(pos.reshape(-1)) == list(range(kh * kw))        # a permutation of the bytes
            w = rng.integers(-128, 128, (kh, kw))
            w.reshape(-1)[: 2] = (-128, 127)[: w.size]
            buf = np.zeros(kh * kw + 3, np.int64)
            buf[pos.reshape(-1)] = w.reshape(-1)
            ub = buf & 0xFF
            e = int(rng.integers(1, 32))
            for ph in (0, 1):
                words, _, ew = dsp_dw.phase_words(kh, kw, ph, pos)
                loads, recs = dsp_dw.recipes(words, pos)
                assert len(recs) == len(words)
                for n, ((lo, hi), r) in enumerate(zip(words, recs)):
                    if r[0] == "sx":
                        o, rot = loads[r[1]], r[2] // 8
                        word = int(ub[o] | ub[o + 1] << 8 | ub[o + 2] << 16 | ub[o + 3] << 24)
                        b0, b2 = (word >> 8 * rot) & 0xFF, (word >> 8 * (rot + 2)) & 0xFF
                        got = [2 * (b - 256 if b & 0x80 else b) for b in (b0, b2)]
                    elif r[0] == "e":
                        v = (e & 0xFFFF) | (((int(buf[r[1]]) << 17) & 0xFFFFFFFF) if r[1] is not None else 0)
                        got = [_half(v, False), _half(v, True) if r[1] is not None else None]
                    else:
                        v = ((2 * int(buf[r[1]])) & 0xFFFF) | ((int(buf[r[2]]) << 17) & 0xFFFFFFFF)
                        got = [_half(v, False), _half(v, True)]
                    want = [2 * int(w[s[1], s[2]]) if s[0] == "t" else (e if s[0] == "e" else None) for s in (lo, hi)]
                    assert got == want, (kh, kw, ph, n, r, got, want)
                    if n == ew:
                        assert r[0] == "e"


def test_record_round_trip():
    """The 8-byte record holds every shift 1..31, folded biases up to
    |2^28 - 1| and every multiplier in [2^30, 2^31); the kernel's decode
    (modelled by unpack_record) gives back 2 bias, mult, e exactly."""
    e = np.repeat(np.arange(1, 32), 8)
    fold = np.tile([0, 1, -1, 2 ** 28 - 1, -(2 ** 28 - 1), 12345, -98765, 2 ** 27], 31)
    mult = np.tile([2 ** 30, 2 ** 31 - 1, 2 ** 30 + 1, 1518500250, 2 ** 31 - 2, 1 << 30 | 7, 2 ** 30 + 2 ** 29,
                    2 ** 31 - 3], 31)
    rec = dsp_dw.record(fold, mult, e)
    assert rec.dtype == np.int32 and rec.size == 2 * e.size
    b2, m, ee = dsp_dw.unpack_record(rec)
    np.testing.assert_array_equal(b2, 2 * fold)
    np.testing.assert_array_equal(m, mult)
    np.testing.assert_array_equal(ee, e)


def _init(model, name, value):
    from onnx import numpy_helper
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(np.asarray(value, numpy_helper.to_array(t).dtype), name))
            return
    raise KeyError(name)


# (layer, output zero point, largest shift, clamp): both phases, stride 2, 5x5, kh even, transposed
EXTREME = [
    (dw(32, 9, 11, (3, 3), pads=(1, 1, 1, 1)), 0, 30, None),
    (dw(16, 7, 9, (3, 3), (2, 2), (1, 1, 1, 1)), -128, 22, (0.0, float("inf"))),
    (dw(12, 9, 8, (5, 5), pads=(2, 2, 2, 2)), 5, 24, (-0.4, 0.3)),
    (dw(8, 5, 7, (2, 3), pads=(1, 1, 0, 1)), -20, 24, (0.0, float("inf"))),
    (dw(8, 11, 4, (3, 3), pads=(1, 1, 1, 1)), 0, 20, None),
]


def _extreme_model(seed):
    """EXTREME's layers with taps all -128, all 127, alternating -128 / 127
    or random per channel; per-channel scales giving every shift from 1 to
    the layer's largest (multiplier 0.75 2^-e); biases putting the output
    near a rounding boundary, clipped to |bias| <= 2^28 - 2^21 (the
    record's limit: the folded bias stays below 2^28) with both signs at
    the clip; the last layer has one bias of 2^29 (fast requantization,
    but too wide for the record: the older kernel)."""
    model, feeds = build([spec for spec, *_ in EXTREME], seed=seed)
    from onnx import numpy_helper
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    shifts = {}
    for i, (spec, yzp, emax, _) in enumerate(EXTREME):
        w = inits[f"w{i}"].astype(np.int64)
        c = w.shape[0]
        for ch in range(c):
            kind = ch % 4
            w[ch] = (-128 if kind == 0 else 127 if kind == 1 else
                     np.where(np.indices(w.shape[1:]).sum(0) % 2 == 0, -128, 127) if kind == 2 else
                     rng.integers(-128, 128, w.shape[1:]))
        e = 1 + np.arange(c) % emax
        e[-1] = emax
        ws = (np.float64(inits[f"ys{i}"]) / np.float64(inits[f"xs{i}"]) * 0.75 * 2.0 ** -e).astype(np.float32)
        lim = 2 ** 28 - 2 ** 21
        b = np.clip(np.rint((rng.integers(-60, 61, c) + 0.5) * 2.0 ** e / 0.75), -lim, lim).astype(np.int64)
        b[e >= 26] = np.where(np.arange(c)[e >= 26] % 2 == 0, lim, -lim)
        if i == len(EXTREME) - 1:
            b[0] = 2 ** 29
        _init(model, f"w{i}", w)
        _init(model, f"ws{i}", ws)
        _init(model, f"b{i}", b)
        _init(model, f"yz{i}", yzp)
        shifts[f"conv{i}"] = set(e.tolist())
    return model, feeds, shifts


def _compile_extreme(board, monkeypatch, seed=31, narrow=False):
    """narrow: dsp_dw's narrow-range channels solved for (the default), which
    takes the two "z" layers to the scaled kernels; else (NARROW = 0) they
    keep the doubled ones."""
    model, feeds, shifts = _extreme_model(seed)
    seen = {}
    if not narrow:
        monkeypatch.setattr(dsp_dw, "NARROW", 0)
    emit = dsp_dw.emit

    def spy(node, x, wk, folded, outs, k, p, mode, mult, *rest):
        ok = emit(node, x, wk, folded, outs, k, p, mode, mult, *rest)
        seen[node.name] = (ok, mode, set(np.asarray(mult).reshape(-1, 3)[:, 1].tolist()) if mode == "fast" else None,
                           int(np.min(wk)), int(np.max(wk)))
        return ok
    monkeypatch.setattr(dsp_dw, "emit", spy)
    c = compile_model(model, board=board)
    g = c.graph
    for n, (*_, act) in zip([n for n in g.nodes if n.op_type == "QLinearConv"], EXTREME):
        if act is not None:
            n.act = act
    seen.clear()
    plan, r = compiler.plan_and_render(g, c.prefix, c.board)
    c = dataclasses.replace(c, plan=plan, header=r.text)
    names = sorted(seen)
    assert len(names) == len(EXTREME), seen
    for i, name in enumerate(names):
        ok, mode, es, wmin, wmax = seen[name]
        assert mode == "fast" and (wmin, wmax) == (-128, 127), (name, seen[name])
        assert es == shifts[name], (name, es, shifts[name])      # every shift 1..emax reached the kernel
        assert ok == (i != len(EXTREME) - 1), (name, ok)         # the 2^29 bias: not the record's
    kern = _kernels(c.header)
    z = ("zsv_3x3s22", "zcv_2x3s11") if narrow else ("zs_3x3s22", "zc_2x3s11")
    assert {k.rsplit("_kp", 1)[0] for k in kern if "qdw2" in k} >= {
        "qdw2_dsp_ns_3x3s11", "qdw2_dsp_nc_5x5s11"} | {f"qdw2_dsp_{n}" for n in z}, kern
    return c, feeds


def _assert_exact(g, outs, feeds):
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, outs):
        r = ref[name]
        np.testing.assert_array_equal(o.reshape(r.shape), r, err_msg=name)
        assert np.unique(r).size >= 4, name
        assert (r == -128).any() and (r == 127).any() or name != "y0", name     # saturates both ways


@pytest.mark.parametrize("narrow", [False, True])
def test_extreme_taps_and_every_shift_on_host(narrow, monkeypatch):
    """Taps of -128 and 127, every shift the kernel takes (1..30 with zero
    point 0, 1..22 with -128), folded biases at the record's limits, Relu,
    a clamp and the full int8 range: bit-exact with the reference; with the
    narrow-range channels re-centred and solved for (shifts up to 22 with
    zero point -128 on the scaled kernel) too."""
    c, feeds = _compile_extreme(BOARD, monkeypatch, narrow=narrow)
    _assert_exact(c.graph, run_host(c, feeds), feeds)


@pytest.mark.skipif(not _have_cross(), reason="arm-none-eabi-gcc / qemu-system-arm not installed")
@pytest.mark.parametrize("board,narrow", [("qemu-mps2-an386", False), ("qemu-mps2-an505", False),
                                          ("qemu-mps2-an386", True)])
def test_extreme_taps_and_every_shift_on_qemu(board, narrow, monkeypatch):
    """The same on the real instructions (SXTB16 / SADD16 / PKHBT of the
    word building, the record's decode, SMMLA of the re-centred channels)
    on M4 and M33."""
    from cuvil_mcu.sim import qemu
    c, feeds = _compile_extreme(board, monkeypatch, narrow=narrow)
    g = c.graph
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, board)
    _assert_exact(g, r.outputs, feeds)


# the unrolled forms of qdw2_dsp (literal widths and strides): lines of one band
# unrolled (6x6, 3x3, a lone phase-1 line), lines looping over chunks of
# dsp_dw.CHUNK outputs with and without an odd rest, the 4-column conversion
# with a literal input stride (stride 2, an odd column count, transposed), a
# 5x5 kernel; odd channel counts and C % 4 == 2 go to the older kernels
UNROLLED = [
    dw(16, 6, 6, (3, 3), pads=(1, 1, 1, 1)),
    dw(8, 3, 3, (3, 3), pads=(1, 1, 1, 1)),
    dw(12, 6, 6, (3, 3), (2, 2), (0, 0, 1, 1)),
    dw(8, 10, 48, (3, 3), pads=(1, 1, 1, 1)),
    dw(4, 5, 51, (3, 3), pads=(1, 1, 1, 1)),
    dw(8, 12, 13, (3, 3), (2, 2), (1, 1, 1, 1)),
    dw(8, 11, 2, (3, 2), pads=(1, 0, 1, 0)),
    dw(8, 9, 9, (5, 5), pads=(2, 2, 2, 2)),
    dw(6, 6, 6, (3, 3), pads=(1, 1, 1, 1)),
    dw(5, 7, 7, (3, 3), (2, 2), (1, 1, 1, 1)),
]


@pytest.mark.skipif(not _have_cross(), reason="arm-none-eabi-gcc / qemu-system-arm not installed")
def test_unrolled_forms_on_an386(monkeypatch):
    """Random layers in every unrolled form on the M4 (QEMU mps2-an386), in
    row bands (the one-channel planes are tested above), half of them with a
    fused Relu (the "z" kernels), bit-exact with the numpy reference."""
    from cuvil_mcu.sim import qemu
    monkeypatch.setattr(dsp_dw, "ONE_PLANE", "never")
    monkeypatch.setattr(dsp_dw, "KPS_INPLACE", dsp_dw.KPS)     # one band for the 6x6 layer
    assert dsp_dw.UNROLL_MAX < 48 and 48 % dsp_dw.CHUNK == 0 and 51 % dsp_dw.CHUNK % 2 and 36 <= dsp_dw.LINES_MAX
    c, feeds, names = _half_relu(UNROLLED, 41)
    g = c.graph
    assert any(re.search(r"_u6x16l6[g_]", k) for k in names), names           # 6x6: lines unrolled
    assert any(re.search(r"_u3x8l3[g_]", k) for k in names), names            # one phase-1 line
    assert any(re.search(r"_u11x8i16", k) for k in names), names           # transposed: literal input stride
    assert any(k.startswith("qdw2_dsp_z") for k in names) and any(k.startswith("qdw2_dsp_n") for k in names)
    assert re.search(r"for \(; pc != pe; pc \+= \d+", c.header)         # lines looping over chunks
    calls = [ln for ln in c.header.splitlines() if re.match(r"\s*model__qdw", ln)]
    assert sum("qdw2_dsp" in ln for ln in calls) == len(UNROLLED) - 2, calls
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, BOARD)
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=name)
        assert np.unique(ref[name]).size >= 4, name


# the "scaled" requantization of the "z" kernels (taps times 256, SMMLA, ASR E): per-channel
# shifts kept (v), made one (e<E>, SSAT's immediate), channels of constant output
SCALED = [
    (dw(16, 6, 6, (3, 3), pads=(1, 1, 1, 1)), (3, 16), "v"),           # shifts 3..16: kept per channel
    (dw(8, 10, 20, (3, 3), (2, 2), (1, 1, 1, 1)), (5, 6), "e"),        # 5..6: one shift where exact
    (dw(12, 9, 30, (3, 3), pads=(1, 1, 1, 1)), (6, 6), "e"),           # constant channels of 2^26 biases
]


def _scaled_model(seed):
    """SCALED's layers with per-channel scales 0.75 2^-e (e in the layer's
    range), biases near rounding boundaries; the last layer's channels 1
    and 2 get biases of +-2^26 (outputs 127 / -128 for every input: far
    outside 256 acc's int32 range, taken as constants)."""
    model, feeds = build([spec for spec, *_ in SCALED], seed=seed)
    from onnx import numpy_helper
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    for i, (spec, (e0, e1), _) in enumerate(SCALED):
        c = inits[f"w{i}"].shape[0]
        e = e0 + np.arange(c) % (e1 - e0 + 1)
        ws = (np.float64(inits[f"ys{i}"]) / np.float64(inits[f"xs{i}"]) * 0.75 * 2.0 ** -e).astype(np.float32)
        b = np.rint((rng.integers(-40, 41, c) + 0.5) * 2.0 ** e / 0.75).astype(np.int64)
        if i == len(SCALED) - 1:
            b[1], b[2] = 2 ** 26, -2 ** 26
        _init(model, f"ws{i}", ws)
        _init(model, f"b{i}", b)
        _init(model, f"yz{i}", -128)
    return model, feeds


@pytest.mark.skipif(not _have_cross(), reason="arm-none-eabi-gcc / qemu-system-arm not installed")
def test_scaled_requant_on_an386_and_host():
    """The scaled "z" kernels with a Relu (per-channel shifts, one shift,
    constant channels) bit-exact with the reference on the host and on the
    M4 (QEMU mps2-an386)."""
    from cuvil_mcu.sim import qemu
    model, feeds = _scaled_model(43)
    c = with_fused_act(compile_model(model, board=BOARD), (0.0, float("inf")))
    g = c.graph
    kern = sorted(re.findall(r"model__(qdw2_dsp\w*?)\(", c.header))
    tags = [re.match(r"qdw2_dsp_zs(e\d+|v)_", k) for k in dict.fromkeys(kern)]
    assert all(tags) and len(tags) == len(SCALED), kern
    assert sorted(t.group(1)[0] for t in tags) == sorted(want for *_, want in SCALED), kern
    ref = reference.run(g, feeds)
    for outs in (run_host(c, feeds), qemu.simulate(c, {n: feeds[n] for n in g.inputs}, BOARD).outputs):
        for name, o in zip(g.outputs, outs):
            np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=name)
            assert np.unique(ref[name]).size >= 4, name
    last = ref[g.outputs[-1]]
    assert (last[:, 1] == 127).all() and (last[:, 2] == -128).all()


def test_one_shift_solves_what_common_shift_cannot():
    """dsp_dw.one_shift on per-channel shifts 3..10 (VWW's 3x3x256 layer:
    3..16) with a few levels per channel: dsp_conv.common_shift
    finds no rows (for this seed), the solver's one shift gives the same
    int8 as the original requantization (requant_dw without the sign fix,
    saturated: quant's fast arithmetic) for every acc of each channel's
    range, computed as the kernel does (SMMLA, ASR, SSAT)."""
    from cuvil_mcu.isa.dsp_conv import common_shift, scaled_rows
    rng = np.random.default_rng(0)
    c, yzp = 8, -128
    e = np.arange(3, 11)
    mult = rng.integers(2 ** 30, 2 ** 31, c)
    nudge = (1 << (e - 1)) + yzp * (1 << e)
    tab = np.stack([mult, e, nudge], axis=1)
    span = 3 << e                                             # 2..6 levels either side
    bot = (rng.integers(20, 100, c) << e) - span              # inside the int8 range of outputs
    top = bot + 2 * span
    rows = scaled_rows(tab)
    assert common_shift(rows, bot, top) is None
    one = dsp_dw.one_shift(rows, bot, top)
    assert one is not None and set(one[:, 1].tolist()) == {10}, one
    for ch in range(c):
        acc = np.arange(bot[ch], top[ch] + 1, dtype=np.int64)
        want = np.clip(dsp_dw.requant_dw(acc, mult[ch], e[ch], yzp, corr=False), -128, 127)
        m, big_e, n = (int(v) for v in one[ch])
        got = np.clip((((256 * acc * m) >> 32) + n) >> big_e, -128, 127)
        assert np.unique(want).size >= 4, ch
        np.testing.assert_array_equal(got, want, err_msg=f"channel {ch}: {tab[ch]} -> {one[ch]}")


# stride-2 3x3 layers whose bands are all full (x runs, qdw2_dsp's xrun): 4 lines a
# band (5 pair-rows), the band's last pair-row converted from its low row alone (the
# high row, inside the input, is read by no line); a band of 24 x 4 outputs unrolled
# whole, one of 25 x 4 a loop over the columns; a height whose last band is short
# (the line form, with top padding)
XRUNS = [
    dw(8, 16, 48, (3, 3), (2, 2), (0, 0, 1, 1)),      # 8 x 24 out: runs unrolled
    dw(12, 16, 50, (3, 3), (2, 2), (0, 0, 1, 1)),     # 8 x 25 out: a loop over the runs
    dw(4, 9, 40, (3, 3), (2, 2), (1, 1, 1, 1)),       # 5 lines: not every band full
]


@pytest.mark.skipif(not _have_cross(), reason="arm-none-eabi-gcc / qemu-system-arm not installed")
def test_xruns_on_an386_and_host(monkeypatch):
    """The x-run forms (unrolled, looped) and the one-row conversion, with and
    without a fused Relu, bit-exact with the reference on the M4 (QEMU
    mps2-an386) and on the host (plain C of the intrinsics)."""
    from cuvil_mcu.sim import qemu
    monkeypatch.setattr(dsp_dw, "ONE_PLANE", "never")
    monkeypatch.setattr(dsp_dw, "KPS_INPLACE", dsp_dw.KPS)     # bands of 5 pair-rows: 4 lines
    monkeypatch.setattr(dsp_dw, "KP_MAX", 0)
    assert 24 * 4 <= dsp_dw.XRUN_UNROLL < 25 * 4
    c, feeds, names = _half_relu(XRUNS, 43)
    g = c.graph
    assert sum(bool(re.search(r"_u24x8x4r192_", k)) for k in names) == 1, names
    assert sum(bool(re.search(r"_u25x12x4r300_", k)) for k in names) == 1, names
    assert sum("x4r" not in k and "_u20x4" in k for k in names) == 1, names
    assert re.search(r"for \(; pc != pe; pc \+= 10, yq \+= 12\)", c.header)    # the looped runs
    assert "__dw_sxtb16_r24(x3)" in c.header                                    # one-row conversion
    assert any(k.startswith("qdw2_dsp_z") for k in names) and any(k.startswith("qdw2_dsp_n") for k in names)
    ref = reference.run(g, feeds)
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, BOARD)
    for name, o, h in zip(g.outputs, r.outputs, run_host(c, feeds)):
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=f"an386 {name}")
        np.testing.assert_array_equal(np.asarray(h).reshape(ref[name].shape), ref[name], err_msg=f"host {name}")
        assert np.unique(ref[name]).size >= 4, name


# lines unrolled at stride 1 with one column of padding at a line's end (both ends,
# left only, right only): those columns are not read, x_zp times their taps starts /
# ends the end outputs' accumulators (dsp_dw.edge_sums, kernel tag f<left><right>)
EDGES = [
    (dw(8, 6, 6, (3, 3), pads=(1, 1, 1, 1)), "f11"),
    (dw(8, 5, 6, (3, 3), pads=(1, 1, 1, 0)), "f10"),
    (dw(8, 5, 6, (3, 3), pads=(1, 0, 1, 1)), "f01"),
    (dw(12, 3, 3, (3, 3), pads=(1, 1, 1, 1)), "f11"),
]


def _dw_float(model, feeds, i, relu):
    """Layer i computed independently: int64 sums over the x_zp-padded input,
    then the float scale, round half to even, y_zp and the clamp (the
    fixed-point multiplier may differ from it by 1 LSB, a missed padding tap
    by many)."""
    from onnx import numpy_helper
    t = {n.name: numpy_helper.to_array(n) for n in model.graph.initializer}
    node = model.graph.node[i]
    pads = [a for a in node.attribute if a.name == "pads"][0].ints
    sh, sw = ([a for a in node.attribute if a.name == "strides"] or [None])[0].ints or (1, 1)
    x = feeds[f"x{i}"].astype(np.int64)[0]                                   # C, H, W
    w = t[f"w{i}"].astype(np.int64)[:, 0]                                   # C, kh, kw
    xp = np.pad(x, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=int(t[f"xz{i}"]))
    kh, kw = w.shape[1:]
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    acc = t[f"b{i}"].astype(np.int64)[:, None, None] + sum(
        w[:, a, b, None, None] * (xp[:, a:a + sh * (oh - 1) + 1:sh, b:b + sw * (ow - 1) + 1:sw] - int(t[f"xz{i}"]))
        for a in range(kh) for b in range(kw))
    s = np.float64(t[f"xs{i}"]) * t[f"ws{i}"].astype(np.float64) / np.float64(t[f"ys{i}"])
    y = np.rint(acc * s[:, None, None]) + int(t[f"yz{i}"])
    return np.clip(y, int(t[f"yz{i}"]) if relu else -128, 127)[None]


def _exact_and_near_independent(model, feeds, c, where, relu):
    """c run on where ("host" or a QEMU board): its outputs bit-exact with the
    numpy reference (and not nearly constant), and within 1 LSB of _dw_float
    (layers conv<i> in relu with a Relu)."""
    g = c.graph
    if where == "host":
        outs = run_host(c, feeds)
    else:
        from cuvil_mcu.sim import qemu
        outs = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, where).outputs
    ref = reference.run(g, feeds)
    for i, (name, o) in enumerate(zip(g.outputs, outs)):
        o = np.asarray(o).reshape(ref[name].shape)
        np.testing.assert_array_equal(o, ref[name], err_msg=name)
        assert np.unique(o).size >= 8, name
        ind = _dw_float(model, feeds, i, f"conv{i}" in relu)
        ind = ind if ind.shape == o.shape else ind.transpose(0, 2, 3, 1)          # NHWC
        d = np.abs(o.astype(np.int64) - ind)
        assert d.max() <= 1, f"{name}: {int(d.max())} LSB from the independent convolution at {np.unravel_index(d.argmax(), d.shape)}"


@pytest.mark.parametrize("where", ["host", BOARD])
def test_edge_columns_folded(where, monkeypatch):
    """The edge-folded kernels (with and without a fused Relu: the scaled "z"
    and the doubled "n" requantization) equal the numpy reference bit for bit
    on the host (strict flags) and on the M4, and an independent int64
    convolution with the float scale within 1 LSB."""
    if where != "host" and not _have_cross():
        pytest.skip("arm-none-eabi-gcc / qemu-system-arm not installed")
    monkeypatch.setattr(dsp_dw, "ONE_PLANE", "never")
    monkeypatch.setattr(dsp_dw, "KPS_INPLACE", dsp_dw.KPS)     # one band: the lines unrolled
    model, feeds = build([spec for spec, _ in EDGES], seed=43)
    c = compile_model(model, board=BOARD)
    relu = {"conv0", "conv2"}
    assert relu <= {n.name for n in c.graph.nodes}
    c = rerender(c, lambda n: (0.0, float("inf")) if n.name in relu else None)
    names = re.findall(r"model__(qdw2_dsp\w*?)\(", c.header)
    for _, tag in EDGES:
        assert any(re.search(rf"l\d+g[\d_]+{tag}_kp", k) for k in names), (tag, names)
    assert any(k.startswith("qdw2_dsp_z") for k in names) and any(k.startswith("qdw2_dsp_n") for k in names), names
    _exact_and_near_independent(model, feeds, c, where, relu)


def test_stream_taps_build_phase_one_words_by_loads():
    """A 3x3 stride-1 channel stream (qdw2_dsp's v.blob): with the copies of
    w[0][0], w[2][2], w[0][1] in the pad bytes, phase 1's words are all
    32-bit loads (no byte packing) and every word of both phases holds 2 w of
    the taps phase_words names (modelled from the stream's bytes: the loads,
    SXTB16 [ror 8] and the doubling), taps including -128 / 127."""
    rng = np.random.default_rng(11)
    pos = dsp_dw.tap_layout(3, 3)
    pos1 = pos.copy()
    pos1[0, 0], pos1[2, 2], pos1[0, 1] = 9, 10, 11
    w = rng.integers(-128, 128, (5, 3, 3))
    w[0, 0, 0], w[1, 0, 1], w[2, 2, 2] = -128, 127, -128
    taps = np.zeros((5, 9), np.int64)
    taps[:, pos.reshape(-1)] = w.reshape(5, 9)
    st = dsp_dw.stream_taps(taps, pos, pos1)
    assert st.shape == (5, 12)
    for ch in range(5):
        ub = st[ch].astype(np.int64) & 0xFF
        for ph, p in ((0, pos), (1, pos1)):
            words, _, _ = dsp_dw.phase_words(3, 3, ph, pos)
            loads, recs = dsp_dw.recipes(words, p)
            if ph:
                assert [r[0] for r in recs] == ["sx"] * 4 + ["e"] and loads == [2, 8], (loads, recs)
            for (lo, hi), r in zip(words, recs):
                if r[0] != "sx":
                    assert r[0] == "e" and st[ch][r[1]] == w[ch][hi[1], hi[2]], (ph, r)
                    continue
                o, rot = loads[r[1]], r[2] // 8
                assert o + 3 < st.shape[1]
                b0, b2 = ub[o + rot], ub[o + rot + 2]
                got = [int(b) - 256 if b & 0x80 else int(b) for b in (b0, b2)]
                assert got == [int(w[ch][lo[1], lo[2]]), int(w[ch][hi[1], hi[2]])], (ch, ph, r, got)


# channel streams (record, edge sums, taps in one array): a one-band layer with its lines
# unrolled and both edges folded, a banded one looping over its lines (both phases), a 5x5
STREAMS = [
    dw(16, 6, 6, (3, 3), pads=(1, 1, 1, 1)),
    dw(8, 20, 24, (3, 3), pads=(1, 1, 1, 1)),
    dw(8, 9, 10, (5, 5), pads=(2, 2, 2, 2)),
]


@pytest.mark.parametrize("where", ["host", BOARD])
def test_channel_streams(where, monkeypatch):
    """The kernels reading one stream a channel (with and without a fused
    Relu) equal the numpy reference bit for bit on the host (strict flags)
    and on the M4, and an independent int64 convolution with the float scale
    within 1 LSB."""
    if where != "host" and not _have_cross():
        pytest.skip("arm-none-eabi-gcc / qemu-system-arm not installed")
    monkeypatch.setattr(dsp_dw, "ONE_PLANE", "never")
    monkeypatch.setattr(dsp_dw, "KPS_INPLACE", dsp_dw.KPS)
    model, feeds = build(STREAMS, seed=47)
    c = compile_model(model, board=BOARD)
    relu = {"conv0", "conv1"}
    c = rerender(c, lambda n: (0.0, float("inf")) if n.name in relu else None)
    assert c.header.count("one stream a channel: record, edge sums, taps") == len(STREAMS), "a layer not on streams"
    names = re.findall(r"model__(qdw2_dsp\w*?)\(", c.header)
    assert any(re.search(r"_u6x16l6g[\d_]+f11_kp", k) for k in names), names
    assert any(re.search(r"_3x3s11_u24x8_kp", k) for k in names), names
    _exact_and_near_independent(model, feeds, c, where, relu)


# stride-2 3x3 x runs of one band, one shift (VWW's 12 ->
# 6 x64): the right padding column and the last line's third row when it is padding are
# not read, x_zp times their taps is added per channel (kernel tag p<right><bottom>); with
# a fused Relu (the scaled kernels with one shift, seed 47), the last two without (the
# doubled "n" kernels: not folded)
XFOLD = [
    (dw(8, 6, 6, (3, 3), (2, 2), (0, 0, 1, 1)), "p11"),       # 3 x 3 out: both
    (dw(12, 12, 12, (3, 3), (2, 2), (0, 0, 1, 1)), "p11"),    # 6 x 6 out
    (dw(8, 6, 7, (3, 3), (2, 2), (0, 0, 1, 0)), "p01"),       # bottom row only
    (dw(8, 7, 6, (3, 3), (2, 2), (0, 0, 0, 1)), "p10"),       # right column only
    (dw(8, 7, 7, (3, 3), (2, 2), (0, 0, 1, 1)), ""),          # no Relu ("n"): nothing folded
    (dw(4, 6, 6, (3, 3), (2, 2), (1, 1, 1, 1)), ""),          # top / left padding, no Relu
]


@pytest.mark.parametrize("looped", [False, True])
@pytest.mark.parametrize("where", ["host", BOARD])
def test_xruns_padding_folded(where, looped, monkeypatch):
    """The x runs with the right padding column and / or the bottom padding row
    folded, unrolled and looped over the columns (each run's row word in the
    plane, the last column's run after the loop), with and without a fused
    Relu (the scaled "z" and the doubled "n" requantization), equal the numpy
    reference bit for bit on the host (plain C of the intrinsics) and on the
    M4, and an independent int64 convolution with the float scale within 1
    LSB; the forms are the ones named."""
    if where != "host" and not _have_cross():
        pytest.skip("arm-none-eabi-gcc / qemu-system-arm not installed")
    monkeypatch.setattr(dsp_dw, "ONE_PLANE", "never")
    if looped:
        monkeypatch.setattr(dsp_dw, "XRUN_UNROLL", 0)
    model, feeds = build([spec for spec, _ in XFOLD], seed=47)
    c = compile_model(model, board=BOARD)
    relu = {"conv0", "conv1", "conv2", "conv3"}
    assert relu <= {n.name for n in c.graph.nodes}
    c = rerender(c, lambda n: (0.0, float("inf")) if n.name in relu else None)
    calls = [k for k in re.findall(r"model__(qdw2_dsp\w*?)\(\(int8_t \*\)", c.header)]
    assert len(calls) == len(XFOLD), calls
    for k, (_, tag) in zip(calls, XFOLD):
        assert re.search(rf"_3x3s22_u\d+x\d+x\d+r\d+{tag}g[\d_]+_kp", k), (tag, k)
    assert "__DW_LD2(" in c.header and "bias2r" in c.header
    assert ("for (; pc != pe; pc += " in c.header) == looped
    assert any(k.startswith("qdw2_dsp_z") for k in calls) and any(k.startswith("qdw2_dsp_n") for k in calls), calls
    _exact_and_near_independent(model, feeds, c, where, relu)


@pytest.mark.parametrize("looped", [False, True])
def test_xruns_padding_folded_builds_strict(tmp_path, looped, monkeypatch):
    """The folded x runs (fused Relu layers of XFOLD), unrolled and looped, with
    -Werror: the plain C on the host (gcc / clang as C99, C11, C++,
    sanitizers; bit-exact), and the DSP path under arm-none-eabi-gcc (-O2,
    -O3, -Os) and clang for the M4 (C99, -pedantic -Wall -Wextra), where
    installed."""
    import subprocess

    from cuvil_mcu import boards
    from helpers import run_strict_builds
    if looped:
        monkeypatch.setattr(dsp_dw, "XRUN_UNROLL", 0)
    model, feeds = build([spec for spec, _ in XFOLD], seed=47)
    c = compile_model(model, board=BOARD)
    relu = {"conv0", "conv1", "conv2", "conv3"}
    c = rerender(c, lambda n: (0.0, float("inf")) if n.name in relu else None)
    assert "bias2r" in c.header and "__DW_LD2(" in c.header
    assert ("for (; pc != pe; pc += " in c.header) == looped
    run_strict_builds(c, feeds, exact=True)
    (tmp_path / "model.h").write_text(c.header)
    (tmp_path / "t.c").write_text("#define MODEL_IMPLEMENTATION\n#include \"model.h\"\n"
                                  "int use(void *a) { return model_run(a); }\n")
    flags = list(boards.get(BOARD).cflags)
    cmds = [["arm-none-eabi-gcc", *flags, lv] for lv in ("-O2", "-O3", "-Os")]
    cmds.append(["clang", "--target=arm-none-eabi", *[f for f in flags if not f.startswith("-specs")],
                 "-isystem", "/usr/lib/arm-none-eabi/include", "-O2"])
    for cmd in cmds:
        if shutil.which(cmd[0]) is None:
            continue
        r = subprocess.run([*cmd, "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-c", "t.c", "-o", "t.o"],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, f"{cmd}:\n{r.stderr[-3000:]}"
