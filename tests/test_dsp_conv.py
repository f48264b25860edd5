"""The paired-channel halfword convolution (cuvil_mcu/isa/dsp_conv.py,
kernels/qconv2_dsp.c.j2) on a DSP board (qemu-mps2-an386): the generated C
compiled on the host (plain-C intrinsics) and on QEMU (M4 / M7 / M33) must
equal the numpy reference bit for bit; layers whose weights break the
pairing's preconditions must keep the older qconv_dsp kernel."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa import dsp_conv, dsp_pwsk
from qhelpers import clamped_exact, with_fused_act
from test_isa_dsp import build, check

LAYERS = [
    # x (NCHW), w, attrs
    ((1, 64, 5, 5), (16, 64, 1, 1), {}),                                       # KWS-like pointwise, K % 8 == 0
    ((1, 12, 4, 7), (6, 12, 1, 1), {}),                                        # K = 12 (a 2-pair K step), M % 4 == 2
    ((1, 4, 7, 6), (5, 4, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),     # M odd, stride 2, odd pixel count
    ((2, 8, 6, 5), (7, 8, 3, 3), dict(pads=[1, 0, 1, 1])),                     # batch 2, uneven padding
    ((1, 16, 8, 8), (9, 16, 1, 1), dict(strides=[2, 2])),                      # strided pointwise, M = 4k + 1
    ((1, 8, 3, 3), (3, 8, 5, 5), dict(pads=[2, 2, 2, 2])),                     # kernel larger than input, M = 3
    ((1, 1, 13, 10), (8, 1, 10, 4), dict(strides=[2, 2], pads=[4, 1, 5, 1])),   # KWS first layer (row = 4 bytes)
    ((1, 3, 9, 8), (6, 3, 3, 3), dict(pads=[1, 1, 1, 1])),                     # IC first layer, K = 27
    ((1, 3, 11, 10), (8, 3, 3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1])),    # VWW first layer
    ((1, 1, 7, 6), (5, 1, 3, 3), dict(pads=[1, 1, 1, 1])),                     # rows of 3 bytes (byte gather)
    ((1, 2, 6, 7), (4, 2, 2, 3), dict(pads=[0, 1, 1, 0], strides=[1, 2])),      # rows of 6 bytes, K = 12
    ((1, 1, 9, 9), (6, 1, 3, 5), dict(pads=[1, 2, 1, 2])),                     # rows of 5 bytes, K = 15
    ((1, 1, 15, 12), (8, 1, 10, 8), dict(strides=[2, 2], pads=[4, 3, 5, 3])),   # micro_speech-like, K = 80
]


def kernels(header: str) -> set[str]:
    return set(re.findall(r"__(qconv2?_dsp)_\w+\(", header))


def uses_qconv2(c, n, rows=0):
    """Exactly n calls of qconv2_dsp kernels in the model body, and rows
    calls of the first layers' qconvr_dsp (dsp_rows.py: taken where the
    gather's buffers do not fit the leanest plan's room; these models have
    it)."""
    calls = re.findall(r"^\s*\w+__qconv2_dsp_\w+\(", c.header, re.M)
    assert len(calls) == n, f"{len(calls)} qconv2_dsp calls, expected {n}"
    calls = re.findall(r"^\s*\w+__qconvr_dsp_\w+?\(\(int8_t \*\)\(a \+", c.header, re.M)
    assert len(calls) == rows, f"{len(calls)} qconvr_dsp calls, expected {rows}"


@pytest.mark.parametrize("requant", ["fixed", "float"])
def test_layers_exact(requant):
    c = check(*build([("conv", a, {}) for a in LAYERS], seed=21), requant)
    uses_qconv2(c, len(LAYERS) if requant == "fixed" else 0)


def test_per_tensor_no_bias_left_shift_huge_bias():
    """Per-tensor weights without bias; multipliers > 1 (left shifts: the
    general requantization row); then a bias near 2^30 (rq_mid)."""
    layers = [("conv", ((1, 8, 5, 6), (6, 8, 3, 3), dict(pads=[1, 1, 1, 1])), dict(bias=False, per_channel=False)),
              ("conv", ((1, 3, 5, 6), (5, 3, 3, 3), dict(pads=[1, 1, 1, 1])), dict(bias=False, per_channel=False)),
              ("conv", ((1, 8, 5, 6), (6, 8, 1, 1), {}), dict(big=True))]
    c = check(*build(layers, seed=22))
    uses_qconv2(c, 3)
    assert "qconv2_dsp_fast" in c.header and "qconv2_dsp_fixed" in c.header
    from test_isa_dsp import huge_bias_model
    c = check(*huge_bias_model([("conv", LAYERS[7], {})]))
    assert "qconv2_dsp_mid" in c.header
    uses_qconv2(c, 2)


@pytest.mark.parametrize("act", [(0.0, float("inf")), (-0.3, 0.4)])
def test_fused_clamp(act):
    from test_isa_dsp import run_host
    model, feeds = build([("conv", a, {}) for a in (LAYERS[0], LAYERS[3], LAYERS[8])], seed=23)
    c = compile_model(model, board="qemu-mps2-an386")
    c = with_fused_act(c, act)
    assert "_qconv2_dsp_fast_" in c.header
    assert clamped_exact(c.graph, run_host(c, feeds), feeds) > 20


def test_unfused_zero_point(monkeypatch):
    from cuvil_mcu.isa import dsp
    monkeypatch.setattr(dsp, "NUDGE_MAX", 0)
    c = check(*build([("conv", a, {}) for a in (LAYERS[1], LAYERS[6])], seed=24))
    assert "__qconv2_dsp_fastu" in c.header


# --- the preconditions -------------------------------------------------------

def test_pair_preconditions():
    k = 64
    a = np.full(k, 3, np.int64)
    b = np.full(k, -2, np.int64)
    assert dsp_conv.pair_ok(a, b) and dsp_conv.pair_ok(b, a)
    # int16: w[hi] == -128 with w[lo] < 0 does not fit; w[lo] >= 0 does
    b[5] = -128
    assert not dsp_conv.pair_ok(b, b) and dsp_conv.pair_ok(np.abs(b), b)
    assert dsp_conv.pair_channels(np.stack([b, b])) is None
    assert dsp_conv.pair_channels(np.stack([b, np.abs(b)])) == [(0, 1)]
    assert dsp_conv.pair_channels(np.stack([np.abs(b), b])) == [(0, 1)]
    lo, hi = np.full(k, -1, np.int64), np.full(k, -2, np.int64)
    hi[3] = -128
    assert dsp_conv.pair_channels(np.stack([lo, hi])) == [(1, 0)]          # swapped
    # |A| < 2^23: the exact edge (A in [sum min(127 w, -128 w), sum max(...)])
    edge = np.zeros(2 ** 16, np.int64)
    edge[:2 ** 16 - 1] = 1                                                 # max 127 (2^16 - 1) < 2^23
    assert dsp_conv.pair_ok(np.zeros_like(edge), edge)
    edge[-1] = 1                                                           # min -128 * 2^16 = -2^23: still fits
    assert dsp_conv.pair_ok(np.zeros_like(edge), edge)
    edge[0] = 2                                                            # -2^23 - 128
    assert not dsp_conv.pair_ok(np.zeros_like(edge), edge)


def _set_weights(model, name, w):
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(w, name))


def test_bound_fallback_and_swap():
    """Layer 0: every pair's channels full of +-127 over K = 576 (|A| can
    reach 127 * 576 * 128 > 2^23 in either order): qconv_dsp. Layer 1:
    int16 fit fails for one order only (a -128 in channel 1 over negative
    channel 0 weights): swapped pair, qconv2_dsp. Both exact."""
    rng = np.random.RandomState(25)
    model, feeds = build([("conv", ((1, 64, 4, 5), (4, 64, 3, 3), dict(pads=[1, 1, 1, 1])), {}),
                          ("conv", ((1, 16, 5, 5), (6, 16, 1, 1), {}), {})], seed=25)
    w0 = (rng.randint(0, 2, (4, 64, 3, 3)) * 254 - 127).astype(np.int8)
    _set_weights(model, "w0", w0)
    w1 = rng.randint(-60, 61, (6, 16, 1, 1)).astype(np.int8)
    w1[0, :, 0, 0] = -np.abs(w1[0, :, 0, 0]) - 1
    w1[1, 3, 0, 0] = -128
    w1[5, 5, 0, 0] = -128
    w1[4, 5, 0, 0] = -7
    _set_weights(model, "w1", w1)
    c = check(model, feeds)
    assert kernels(c.header) == {"qconv_dsp", "qconv2_dsp"}
    uses_qconv2(c, 1)
    wr = w1.reshape(6, 16).astype(np.int64)
    assert dsp_conv.pair_channels(np.concatenate([wr, np.zeros((2, 16), np.int64)])) == [(1, 0), (2, 3), (5, 4),
                                                                                          (6, 7)]


def test_accumulator_wraps_exactly():
    """T = 256 A + B leaves int32 (bias and A near their limits) while
    T - S stays exact: large positive activations times weights near the
    A bound, bias ~2^29, on the host (wrapping plain C)."""
    model, feeds = build([("conv", ((1, 64, 3, 4), (4, 64, 3, 3), dict(pads=[1, 1, 1, 1])), {})], seed=26)
    w = np.full((4, 64, 3, 3), 100, np.int8)
    w[1::2] = 113                                 # 113 * 576 * 127 = 8.27e6 < 2^23: hi channels near the bound
    _set_weights(model, "w0", w)
    _set_weights(model, "b0", np.array([2 ** 29, -2 ** 29, 2 ** 28, 12345], np.int32))
    feeds["x0"] = np.where(np.random.RandomState(1).rand(*feeds["x0"].shape) < 0.9, 127, -128).astype(np.int8)
    c = compile_model(model, board="qemu-mps2-an386")
    uses_qconv2(c, 1)
    ref = reference.run(c.graph, feeds)
    assert np.unique(ref["y0"]).size > 1
    from test_isa_dsp import run_host
    np.testing.assert_array_equal(run_host(c, feeds)[0], ref["y0"])


# --- the real instructions ---------------------------------------------------

@pytest.mark.parametrize("board", ["qemu-mps2-an386", "qemu-mps2-an500", "qemu-mps2-an505"])
def test_on_qemu(board, monkeypatch):
    import shutil
    if not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    from cuvil_mcu.sim import qemu
    from test_isa_dsp import huge_bias_model
    layers = [("conv", a, {}) for a in (LAYERS[0], LAYERS[1], LAYERS[2], LAYERS[3], LAYERS[4], LAYERS[6],
                                        LAYERS[7], LAYERS[8], LAYERS[9], LAYERS[11])]
    layers.append(("conv", ((1, 8, 5, 6), (6, 8, 1, 1), {}), dict(big=True)))
    # the natural-order asm: K unrolled (K-pairs 2..8), and the loop entered at each step it can be
    first = len(layers) + 1                     # conv0 is huge_bias_model's own layer
    # (stride 2: qconv2_blocks_dsp; stride 1: the pointwise pixel loop, qconv2_pwblk_dsp)
    layers += [("conv", ((1, kk, 3, 3), (4, kk, 1, 1), {"strides": [s, s]}), {})
               for s in (2, 1) for kk in (4, 8, 12, 16, 20, 24, 28, 32)]
    layers.append(("conv", ((1, 16, 5, 6), (6, 16, 1, 1), {}), {}))                        # dead channels
    layers.append(("conv", ((1, 64, 4, 5), (4, 64, 3, 3), dict(pads=[1, 1, 1, 1])), {}))   # bound fails: qconv_dsp
    model, feeds = huge_bias_model(layers)
    rng = np.random.RandomState(27)
    _set_weights(model, f"w{len(layers)}", (rng.randint(0, 2, (4, 64, 3, 3)) * 254 - 127).astype(np.int8))
    _set_weights(model, f"b{len(layers) - 1}", np.array([2 ** 30 + 5, -2 ** 30 - 7, 7, -9, 0, 100], np.int32))
    # the output zero point at -128 on every other natural-order layer: the asm without the
    # rounding's sign fix (n, the clamp's low end is the zero point) and with it (nc)
    for i in (1, 3, 5, 7, 9, 11, 13, 15):
        _set_weights(model, f"yz{first + i}", np.array(-128, np.int8))
    # the K = 8 pointwise layer without the sign fix would take the small-K kernel (test_dsp_pwsk.py)
    monkeypatch.setattr(dsp_pwsk, "MAX_M", 0)
    c = compile_model(model, board=board)
    uses_qconv2(c, len(layers))
    assert kernels(c.header) == {"qconv_dsp", "qconv2_dsp"}
    for kern in ("qconv2_dsp_fasts", "qconv2_dsp_mid", "qconv2_dsp_fixed", "_g10x4", "_g3x3", "_pw(", "_nc_k2_pw",
                 "_n_k4_pw", "_nc_k6_pw", "_n_k8_pw", "_nc_pw", "_n_pw", "_pw_nc_k2", "_pw_sl_k4", "_pw_nc_k6",
                 "_pw_sl_k8", "_pw_nc", "_pw_s"):
        assert kern in c.header, kern
    g = c.graph
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, board)
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=f"{board}: {name}")


def dead_channel_model(extra=()):
    """Layer 0: channels 0 and 1 with biases near +-2^30 (outputs always 127
    / -128, as dead channels of real models) push the accumulator bound past
    2^30, where the fast requantization does not hold for them."""
    model, feeds = build([("conv", ((1, 16, 5, 6), (6, 16, 1, 1), {}), {})] + list(extra), seed=28)
    b = np.array([2 ** 30 + 5, -2 ** 30 - 7, 7, -9, 0, 100], np.int32)
    _set_weights(model, "b0", b)
    return model, feeds


def test_constant_channels_keep_fast_requant():
    model, feeds = dead_channel_model()
    c = check(model, feeds)
    assert "qconv2_dsp_fasts_pw" in c.header and "qconv2_dsp_mid" not in c.header
    ref = reference.run(c.graph, feeds)["y0"]
    assert (ref[:, 0] == 127).all() and (ref[:, 1] == -128).all()    # NCHW at the model boundary
    # without the rewrite the same layer needs rq_mid
    orig = dsp_conv.constant_channels
    try:
        dsp_conv.constant_channels = lambda wr, folded, rq, dsp: (wr, folded, dsp_conv.acc_bound(wr, folded), None)
        c = check(model, feeds)
        assert "qconv2_dsp_mids_pw" in c.header
    finally:
        dsp_conv.constant_channels = orig


def test_requant_fast2_matches_quant():
    """The kernels' SMMLAR requantization == TFLM's fixed point + zero point
    for |acc| < 2^30, right shifts 1..31, any Q31 multiplier (and mult 0)."""
    from cuvil_mcu import quant
    rng = np.random.default_rng(3)
    n = 500_000
    acc = rng.integers(-2 ** 30 + 1, 2 ** 30, n)
    acc[:4001] = np.arange(-2000, 2001)
    acc[4001:4007] = [2 ** 30 - 1, -2 ** 30 + 1, 2 ** 29, -2 ** 29, -1, 1]
    mult = rng.integers(2 ** 30, 2 ** 31, n)
    mult[:1000] = 2 ** 31 - 1
    mult[1000:2000] = 2 ** 30
    e = rng.integers(1, 32, n)
    zp = rng.integers(-128, 128, n)
    np.testing.assert_array_equal(dsp_conv.requant_fast2(acc, mult, e, zp),
                                  quant.requantize_fixed(acc, mult, -e) + zp)
    a = np.arange(-70000, 70001)
    for sh in (1, 2, 5, 13, 31):
        for m in (0, 2 ** 30, 1518500250, 2 ** 31 - 1):
            for z in (-128, 0, 5):
                np.testing.assert_array_equal(dsp_conv.requant_fast2(a, m, sh, z),
                                              quant.requantize_fixed(a, m, -sh) + z)


def _all_variants_model():
    """Layers that reach every qconv2_dsp variant: pointwise, general 3x3,
    gathers of 4-byte / 9-byte / 3-byte rows, the general requantization rows."""
    from test_isa_dsp import huge_bias_model
    return huge_bias_model([("conv", a, {}) for a in (LAYERS[0], LAYERS[2], LAYERS[6], LAYERS[7], LAYERS[9])]
                           + [("conv", ((1, 8, 5, 6), (6, 8, 1, 1), {}), dict(big=True))])


def test_strict_host_builds():
    """gcc / clang C99, C11, C++, sanitizers, -Werror: the plain-C paths."""
    from helpers import check_strict_builds
    check_strict_builds(*_all_variants_model(), exact=True, board="qemu-mps2-an386")


@pytest.mark.parametrize("lang", ["c99", "c++11"])
def test_arm_builds_every_opt_level(tmp_path, lang):
    """The inline assembly takes every register (r7 saved on the stack, as
    it may be the frame pointer) or 13 of them: it must build (-Werror) at
    every optimisation level, with a frame pointer too (-O0 keeps the C
    loops), in C and C++ (-O2 on M4 / M7 / M33: test_on_qemu); the conv
    kernels, and the fully connected and depthwise ones in a second header."""
    import shutil
    import subprocess
    cc = "arm-none-eabi-gcc" if lang == "c99" else "arm-none-eabi-g++"
    if shutil.which(cc) is None:
        pytest.skip(f"needs {cc}")
    from test_isa_dsp import build
    model, _ = _all_variants_model()
    c = compile_model(model, board="qemu-mps2-an386")
    # the fully connected kernel's asm (4 pairs: every register; buffered and
    # direct) and the depthwise kernels (one-channel planes, row bands)
    fc, _ = build([("fc", (1, 64, 12), {}), ("fc", (1, 300, 8), {}), ("conv", ((1, 8, 9, 8), (8, 1, 3, 3),
                   dict(group=8, pads=[1, 1, 1, 1])), {}), ("conv", ((1, 8, 14, 48), (8, 1, 3, 3),
                   dict(group=8, pads=[1, 1, 1, 1])), {})], seed=3)
    cf = compile_model(fc, board="qemu-mps2-an386")
    assert "_fasts_b_pt(" in cf.header and "_fasts_d_pt(" in cf.header and "_one(" in cf.header, cf.header
    (tmp_path / "fc.h").write_text(cf.header.replace("MODEL_", "FC_").replace("model_", "fc_"))
    (tmp_path / "model.h").write_text(c.header)
    src = tmp_path / "tu.c"
    src.write_text(f"#define {c.prefix.upper()}_IMPLEMENTATION\n#include \"model.h\"\n"
                   "#define FC_IMPLEMENTATION\n#include \"fc.h\"\n")
    opts = (["-O0"], ["-Og"], ["-O1"], ["-Os"], ["-O3"], ["-O2", "-fno-omit-frame-pointer"])
    if lang != "c99":
        opts = opts[:2]
    m4 = ["-mcpu=cortex-m4", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
    for cpu, opt in [(m4, o) for o in opts] + [(["-mcpu=cortex-m33"], ["-Og"])]:
        if True:
            cmd = [cc, "-mthumb", *cpu, *opt, "-x", "c" if lang == "c99" else "c++", f"-std={lang}", "-Wall",
                   "-Wextra", "-Werror", "-pedantic", "-c", str(src), "-o", str(tmp_path / "tu.o")]
            r = subprocess.run(cmd, capture_output=True, text=True)
            assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stderr[-3000:]}"


# first convolutions (the image models' layer 0: few input channels, the window gathered)
FIRST = [
    ((1, 3, 13, 12), (16, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),   # MobileNetV2-like, K = 27 unrolled
    ((1, 3, 12, 11), (8, 3, 3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1])),    # VWW-like (pad after only)
    ((2, 3, 9, 8), (5, 3, 3, 3), dict(pads=[1, 1, 1, 1])),                      # odd M, stride 1, batch 2
    ((1, 1, 10, 9), (8, 1, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),     # one channel: rows of 3 bytes
    ((1, 4, 9, 10), (16, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),    # C % 4 == 0: the general kernel
    ((1, 3, 7, 9), (12, 3, 3, 3), dict(strides=[1, 2], pads=[2, 1, 0, 1])),     # uneven strides and padding
    ((1, 3, 5, 5), (8, 3, 3, 3), dict(pads=[2, 2, 2, 2])),                      # most windows on the border
]


# first layers whose pixel pairs run through qconv2_ublocks_dsp's row kernel (runs of pairs
# inside the input gathered in assembly): rows of 7 outputs (a row's pairs start at its
# first or its second pixel, pairs across rows; VWW-like padding after only), stride 1
# with 16 channels (IC-like)
# with even rows (the last pair past the right edge) and a last output row partly below
# the input: those pairs too (pad_gathers: x_zp bytes in the gather; VWW-like, and stride 1
# with padding on every side)
ROWS = [
    ((1, 3, 10, 11), (16, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 3, 13, 14), (8, 3, 3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1])),
    ((1, 3, 12, 12), (8, 3, 3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1])),
    ((1, 3, 8, 10), (8, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
]
PADDED = {2: "2 | tl", 3: "2 | tl"}     # ROWS whose border pairs take the row kernel


def test_first_conv_rows_on_qemu():
    """The row kernel bit-exact on the M4 (VWW's first layer: test_sim's shared models on QEMU)."""
    import re
    import shutil
    if not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    from cuvil_mcu.sim import qemu
    board = "qemu-mps2-an386"
    for i, a in enumerate(ROWS):
        # (one model each: as parallel branches the planner runs one of them from the last pair down)
        model, feeds = build([("conv", a, {})], seed=37 + i)
        c = compile_model(model, board=board)
        assert re.search(r"static void \w*__qconv2_ublocks_dsp_row_\w*\(", c.header), a
        if i in PADDED:
            assert PADDED[i] in c.header and "int32_t flags" in c.header, a
        g = c.graph
        r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, board)
        ref = reference.run(g, feeds)[g.outputs[0]]
        assert np.unique(ref).size > 4
        np.testing.assert_array_equal(r.outputs[0].reshape(ref.shape), ref, err_msg=f"{board}: {a}")


def _exact_on(c, feeds, board):
    """Every output of c on the QEMU board equal to the numpy reference (and not near-constant)."""
    from cuvil_mcu.sim import qemu
    g = c.graph
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, board)
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        assert np.unique(ref[name]).size > 4, name
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=f"{board}: {name}")


# first layers whose input rows go through the ring of sign-extended rows (dsp_conv.ring_plan:
# w c % 8 == 0, pl c even, even output rows): batch 2 with an 8-byte conversion step first
# (w c = 24) and VWW's padding; padding rows on top and below (two after) and x_zp columns on
# both sides, 16-byte steps only (w c = 48)
RING = [
    ((2, 3, 10, 8), (16, 3, 3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1])),
    ((1, 3, 12, 16), (8, 3, 3, 3), dict(strides=[2, 2], pads=[1, 2, 2, 3])),
]


def test_first_conv_ring_on_qemu(tmp_path, monkeypatch):
    """The ring kernel bit-exact on the M4, and its C (inline assembly) built
    with -Werror at -O0 with a frame pointer. gen takes it only where the
    ring fits the arena's free run at the node (no arena growth); here it may
    take the node's whole room, so both layers run it."""
    import re
    import shutil
    import subprocess
    if not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    from cuvil_mcu import codegen
    monkeypatch.setattr(codegen.Emitter, "scratch_free", codegen.Emitter.scratch_room)
    board = "qemu-mps2-an386"
    model, feeds = build([("conv", a, {}) for a in RING], seed=41)
    c = compile_model(model, board=board)
    assert len(re.findall(r"static void \w*__qconv2_ublocks_dsp_ring_\w*\(", c.header)) == 2
    assert "qconv2_ublocks_dsp_row_" not in c.header
    _exact_on(c, feeds, board)
    (tmp_path / "model.h").write_text(c.header)
    src = tmp_path / "tu.c"
    src.write_text(f"#define {c.prefix.upper()}_IMPLEMENTATION\n#include \"model.h\"\n")
    cmd = ["arm-none-eabi-gcc", "-mthumb", "-mcpu=cortex-m4", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O0",
           "-fno-omit-frame-pointer", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", str(src),
           "-o", str(tmp_path / "tu.o")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]


def test_first_convs_on_qemu():
    """Random first layers bit-exact on the M4 (the gather's inside and
    border paths, K = 27 unrolled, odd M, one and four input channels, the
    blocks unrolled per layer)."""
    import shutil
    if not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    board = "qemu-mps2-an386"
    model, feeds = build([("conv", a, {}) for a in FIRST], seed=31)
    c = compile_model(model, board=board)
    assert "_k14_g3x9" in c.header and "_g3x3" in c.header
    # M <= 16: the blocks unrolled per layer (qconv2_ublocks_dsp; here with the sign fix,
    # VWW's first layer without: test_sim's shared models on QEMU)
    assert "__qconv2_ublocks_dsp_ck14_b4_" in c.header and "__qconv2_ublocks_dsp_ck14_b2_" in c.header
    _exact_on(c, feeds, board)
