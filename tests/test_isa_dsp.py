"""DSP-extension int8 kernels (cuvil_mcu/isa/dsp.py): the generated C for a
DSP board (qemu-mps2-an386) compiled on the host, where the templates use
plain-C equivalents of the intrinsics, must equal the numpy reference bit
for bit; the kernels are checked to be the ones emitted. The fast
requantization is checked against quant.requantize_fixed directly."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from cuvil_mcu import quant, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa.dsp import requant_fast, requant_mid
from cuvil_mcu.sim import host
from helpers import NP2ONNX
from qhelpers import assert_graph_outputs_exact, clamped_exact, with_fused_act

BOARD = "qemu-mps2-an386"
STRICT = ["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsanitize=address,undefined",
          "-fno-sanitize-recover=all"]


def qmodel(nodes, inputs, outputs, inits):
    vis = [helper.make_tensor_value_info(n, NP2ONNX[d], list(s)) for n, (s, d) in inputs.items()]
    outs = [helper.make_tensor_value_info(n, NP2ONNX[d], None) for n, d in outputs.items()]
    g = helper.make_graph(nodes, "dsp", vis, outs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    return m


def _qp(rng, i, taps, m, wstd, xdt, per_channel, big=False):
    x_s = np.float32(rng.uniform(0.01, 0.05))
    x_zp = int(rng.randint(-20, 21)) if xdt == "int8" else int(rng.randint(100, 150))
    w_s = rng.uniform(0.002, 0.02, m).astype(np.float32) if per_channel else np.float32(rng.uniform(0.002, 0.02))
    y_s = np.float32(np.sqrt(taps) * 60.0 * wstd * x_s * np.mean(w_s) / 45.0)
    if big:   # multipliers > 1: left shifts, the general requantization path (weights are tiny then)
        y_s = np.float32(x_s * np.max(w_s) / 1.5)
    y_zp = int(rng.randint(-10, 11)) if xdt == "int8" else int(rng.randint(118, 139))
    return x_s, x_zp, w_s, y_s, y_zp


def conv_layer(rng, i, xs, ws, attrs, xdt="int8", bias=True, per_channel=True, big=False):
    """QLinearConv (NCHW in the model; the layout pass makes it NHWC)."""
    m, taps = ws[0], int(np.prod(ws[1:]))
    w = rng.randint(-127, 128, ws).astype(np.int8) if not big else rng.randint(-1, 2, ws).astype(np.int8)
    x_s, x_zp, w_s, y_s, y_zp = _qp(rng, i, taps, m, np.std(w.astype(np.float64)), xdt, per_channel, big)
    inits = {f"xs{i}": x_s, f"xz{i}": np.array(x_zp, xdt), f"w{i}": w, f"ws{i}": w_s,
             f"wz{i}": np.zeros(m, np.int8) if per_channel else np.array(0, np.int8),
             f"ys{i}": y_s, f"yz{i}": np.array(y_zp, xdt)}
    ins = [f"x{i}", f"xs{i}", f"xz{i}", f"w{i}", f"ws{i}", f"wz{i}", f"ys{i}", f"yz{i}"]
    if bias:
        inits[f"b{i}"] = rng.randint(-3000, 3001, m).astype(np.int32)
        ins.append(f"b{i}")
    node = helper.make_node("QLinearConv", ins, [f"y{i}"], name=f"conv{i}", **attrs)
    lo, hi = np.iinfo(xdt).min, np.iinfo(xdt).max
    return node, inits, rng.randint(lo, hi + 1, xs).astype(xdt)


def fc_layer(rng, i, m, kk, n, xdt="int8", bias=True, per_channel=False, big=False):
    """com.microsoft.QGemm with a constant B [kk, n]."""
    b = rng.randint(-127, 128, (kk, n)).astype(np.int8) if not big else rng.randint(-1, 2, (kk, n)).astype(np.int8)
    x_s, x_zp, w_s, y_s, y_zp = _qp(rng, i, kk, n, np.std(b.astype(np.float64)), xdt, per_channel, big)
    inits = {f"xs{i}": x_s, f"xz{i}": np.array(x_zp, xdt), f"w{i}": b, f"ws{i}": w_s,
             f"wz{i}": np.zeros(n, np.int8) if per_channel else np.array(0, np.int8),
             f"ys{i}": y_s, f"yz{i}": np.array(y_zp, xdt)}
    c = rng.randint(-3000, 3001, n).astype(np.int32)
    if bias:
        inits[f"b{i}"] = c
    ins = [f"x{i}", f"xs{i}", f"xz{i}", f"w{i}", f"ws{i}", f"wz{i}", f"b{i}" if bias else "", f"ys{i}", f"yz{i}"]
    node = helper.make_node("QGemm", ins, [f"y{i}"], name=f"fc{i}", domain="com.microsoft")
    lo, hi = np.iinfo(xdt).min, np.iinfo(xdt).max
    return node, inits, rng.randint(lo, hi + 1, (m, kk)).astype(xdt)


def build(layers, seed):
    """Every layer as a parallel branch of one model (one compile, one build)."""
    rng = np.random.RandomState(seed)
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (kind, args, kw) in enumerate(layers):
        node, ini, x = (conv_layer if kind == "conv" else fc_layer)(rng, i, *args, **kw)
        nodes.append(node)
        inits.update(ini)
        xdt = kw.get("xdt", "int8")
        inputs[f"x{i}"] = (x.shape, xdt)
        outputs[f"y{i}"] = xdt
        feeds[f"x{i}"] = x
    return qmodel(nodes, inputs, outputs, inits), feeds


def float_pointwise(model, feeds, i) -> np.ndarray:
    """Layer i of a build() model as an independent float 1x1 convolution
    (NCHW, the model's own scales and zero points, round half to even,
    clamped to int8): the kernels' fixed-point requantization may differ
    from it by 1 LSB."""
    ini = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = feeds[f"x{i}"].astype(np.float64) - float(ini[f"xz{i}"])
    w = ini[f"w{i}"].astype(np.float64)[:, :, 0, 0]                       # [M][K]
    scale = float(ini[f"xs{i}"]) * np.asarray(ini[f"ws{i}"], np.float64).reshape(-1) / float(ini[f"ys{i}"])
    acc = np.einsum("mk,nkhw->nmhw", w, x) + ini[f"b{i}"].astype(np.float64)[None, :, None, None]
    y = np.rint(acc * np.broadcast_to(scale, (w.shape[0],))[None, :, None, None]) + float(ini[f"yz{i}"])
    return np.clip(y, -128, 127)


def run_host(c, feeds, cflags=STRICT):
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs], cflags=cflags)
    ins = [np.asarray(feeds[n], dtype=g.tensors[n].dtype)[None] for n in g.inputs]
    return [o[0] for o in host.run(exe, ins, c.out_specs, 1)]


def check(model, feeds, requant="fixed", board=BOARD):
    c = compile_model(model, board=board, requant=requant, verify_each=True)
    assert_graph_outputs_exact(c.graph, run_host(c, feeds), feeds, min_unique=4)
    return c


CONV = [
    # x (NCHW), w, attrs
    ((1, 8, 5, 6), (7, 8, 1, 1), {}),                                           # pointwise, odd M
    ((1, 64, 5, 5), (16, 64, 1, 1), {}),                                        # pointwise, K % 4 == 0
    ((1, 13, 4, 7), (6, 13, 1, 1), {}),                                         # pointwise, odd K (tail), odd pixels
    ((1, 3, 9, 8), (5, 3, 3, 3), dict(pads=[1, 1, 1, 1])),                       # first-layer style, L = 9
    ((1, 16, 7, 6), (8, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 5, 11, 9), (7, 5, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 1])),      # batch 2, stride 2, odd
    ((1, 16, 8, 8), (9, 16, 1, 1), dict(strides=[2, 2])),                       # strided pointwise
    ((1, 1, 13, 10), (8, 1, 10, 4), dict(strides=[2, 2], pads=[4, 1, 5, 1])),     # KWS first layer
    ((1, 1, 15, 12), (8, 1, 10, 8), dict(strides=[2, 2], pads=[4, 3, 5, 3])),     # micro_speech's
    ((1, 2, 3, 3), (3, 2, 5, 5), dict(pads=[2, 2, 2, 2])),                       # kernel larger than input
    ((1, 1, 2, 2), (2, 1, 2, 2), dict(pads=[3, 3, 3, 3], strides=[2, 2])),       # taps all outside
    ((1, 6, 6, 7), (4, 6, 2, 3), dict(auto_pad="SAME_UPPER", strides=[1, 2])),
    ((1, 8, 9, 8), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),            # depthwise
    ((2, 7, 9, 8), (7, 1, 3, 3), dict(group=7, pads=[0, 0, 1, 1], strides=[2, 2])),   # depthwise, C % 4, s2
    ((1, 12, 5, 6), (12, 1, 3, 2), dict(group=12, pads=[2, 0, 1, 1], strides=[1, 2])),
    ((1, 3, 4, 4), (3, 1, 5, 5), dict(group=3, pads=[2, 2, 2, 2])),             # every pixel on the border
]
FC = [(1, 64, 12), (1, 13, 7), (3, 37, 9), (1, 640, 128), (2, 8, 5), (1, 4, 1)]


@pytest.mark.parametrize("requant", ["fixed", "float"])
def test_conv_layers(requant):
    model, feeds = build([("conv", a, {}) for a in CONV], seed=3)
    c = check(model, feeds, requant)
    for kern in ("__qconv2_dsp_", "__qdwconv_dsp_"):   # qconv2: paired channels (tests/test_dsp_conv.py)
        assert (kern in c.header) == (requant == "fixed"), f"{kern} used exactly in fixed mode"


def test_conv_per_tensor_no_bias_and_left_shift():
    layers = [("conv", ((1, 8, 5, 6), (6, 8, 3, 3), dict(pads=[1, 1, 1, 1])), dict(bias=False, per_channel=False)),
              ("conv", ((1, 8, 5, 6), (6, 8, 1, 1), {}), dict(big=True))]
    c = check(*build(layers, seed=5))
    assert "qconv2_dsp_fast" in c.header and "qconv2_dsp_fixed" in c.header


def huge_bias_model(layers=()):
    """Layer 0: a bias near 2^30 and multipliers in [0.5, 1) (shift 0), so
    the kernels need the general in-kernel requantization (rq_mid)."""
    model, feeds = build([("conv", ((1, 8, 5, 6), (6, 8, 1, 1), {}), dict(big=True))] + list(layers), seed=8)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for t in model.graph.initializer:
        if t.name == "b0":
            t.CopyFrom(numpy_helper.from_array(np.array([2 ** 30 + 5, -2 ** 30, 7, -9, 0, 100], np.int32), "b0"))
        if t.name == "ys0":   # every multiplier < 1, the largest in [0.5, 1)
            y_s = np.float32(inits["xs0"] * inits["ws0"].max() * 1.2)
            t.CopyFrom(numpy_helper.from_array(np.array(y_s, np.float32), "ys0"))
    return model, feeds


def test_conv_huge_bias_and_zero_shift():
    c = check(*huge_bias_model())
    assert "qconv2_dsp_mid" in c.header


def test_conv_fallbacks():
    """uint8 activations, depthwise multiplier 2, dilation: the portable
    kernels (groups: tests/test_group_conv.py). (The NCHW input's 3-channel
    transpose takes copy_c3_dsp: a data move, not a conv.)"""
    layers = [("conv", ((1, 4, 6, 6), (4, 4, 3, 3), dict(pads=[1, 1, 1, 1])), dict(xdt="uint8")),
              ("conv", ((1, 4, 6, 6), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1])), dict(xdt="uint8")),
              ("conv", ((1, 4, 7, 7), (8, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1])), {}),
              ("conv", ((1, 3, 11, 10), (3, 3, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])), {})]
    c = check(*build(layers, seed=9))
    assert "_dsp_" not in c.header.replace("__copy_c3_dsp_", "")


@pytest.mark.parametrize("requant", ["fixed", "float"])
def test_fc_layers(requant):
    model, feeds = build([("fc", a, {}) for a in FC]
                         + [("fc", (1, 24, 10), dict(bias=False, per_channel=True)),
                            ("fc", (2, 8, 24), dict(big=True))], seed=4)
    c = check(model, feeds, requant)
    assert ("__qfc2_dsp_" in c.header) == (requant == "fixed")   # paired channels (tests/test_dsp_fc.py)


def test_fc_uint8_falls_back():
    c = check(*build([("fc", (1, 20, 6), dict(xdt="uint8"))], seed=2))
    assert "__qfc_dsp_" not in c.header and "__qfc2_dsp_" not in c.header


def test_same_c_on_portable_board():
    """The same model on a board without DSP uses none of these kernels."""
    model, feeds = build([("conv", CONV[0], {}), ("fc", FC[0], {})], seed=6)
    c = check(model, feeds, board="qemu-mps2-an385")
    assert "_dsp_" not in c.header


@pytest.mark.parametrize("act", [(0.0, float("inf")), (-0.3, 0.4)])
def test_fused_clamp(act):
    """A fused Relu / Clip (node.act, set by the QDQ pass): the clamp with
    lo / hi inside int8 (not the SSAT-only variant) in every kernel."""
    model, feeds = build([("conv", a, {}) for a in (CONV[1], CONV[4], CONV[12], CONV[14])]
                         + [("fc", FC[0], {})], seed=11)
    c = compile_model(model, board=BOARD)
    c = with_fused_act(c, act)
    assert "_dsp_fast_" in c.header and "_dsp_fasts_" not in c.header
    assert clamped_exact(c.graph, run_host(c, feeds), feeds) > 50   # the clamp did bite


def test_unfused_zero_point(monkeypatch):
    """Layers whose zero point cannot ride in the rounding nudge ("fastu")."""
    from cuvil_mcu.isa import dsp
    monkeypatch.setattr(dsp, "NUDGE_MAX", 0)
    model, feeds = build([("conv", a, {}) for a in (CONV[1], CONV[5], CONV[12], CONV[13])]
                         + [("fc", FC[2], {})], seed=12)
    c = check(model, feeds)
    assert "__qconv2_dsp_fastu" in c.header and "__qdwpad_dsp_fastu" in c.header
    assert "__qdwconv_dsp_fastu" in c.header and "__qfc2_dsp_fastu" in c.header


def test_requant_fast_matches_quant():
    """{{p}}__rq's arithmetic == TFLM's MultiplyByQuantizedMultiplier
    (quant.requantize_fixed) wherever the kernels use it: |acc| < 2^30,
    right shift e in 1..31, any Q31 multiplier quantize_multiplier makes."""
    rng = np.random.default_rng(0)
    n = 1_000_000
    acc = rng.integers(-2 ** 30 + 1, 2 ** 30, n)
    acc[:4001] = np.arange(-2000, 2001)
    acc[4001:4011] = [2 ** 30 - 1, -2 ** 30 + 1, 2 ** 29, -2 ** 29, 1 << 20, -(1 << 20), 3 << 25, -(3 << 25), 7, -7]
    mult = rng.integers(2 ** 30, 2 ** 31, n)
    mult[:2000] = 2 ** 30
    mult[2000:4000] = 2 ** 31 - 1
    e = rng.integers(1, 32, n)
    np.testing.assert_array_equal(requant_fast(acc, mult, e), quant.requantize_fixed(acc, mult, -e))
    # exhaustive over small accumulators at every shift, with ties of both signs
    a = np.arange(-70000, 70001)
    for sh in range(1, 32):
        for m in (2 ** 30, 2 ** 30 + 1, 1518500250, 2 ** 31 - 1):
            np.testing.assert_array_equal(requant_fast(a, m, sh), quant.requantize_fixed(a, m, -sh))


def test_requant_mid_matches_quant():
    """{{p}}__rq_mid == quant.requantize_fixed for any int32 acc, right shifts 0..31."""
    rng = np.random.default_rng(1)
    n = 1_000_000
    acc = rng.integers(-2 ** 31, 2 ** 31, n)
    acc[:6] = [-2 ** 31, 2 ** 31 - 1, 0, -1, 1, -2 ** 30]
    mult = rng.integers(0, 2 ** 31, n)
    mult[6:2000] = 2 ** 31 - 1
    e = rng.integers(0, 32, n)
    np.testing.assert_array_equal(requant_mid(acc, mult, e), quant.requantize_fixed(acc, mult, -e))
    a = np.arange(-70000, 70001)
    for sh in range(0, 32):
        for m in (0, 1, 2 ** 30, 1518500250, 2 ** 31 - 1):
            np.testing.assert_array_equal(requant_mid(a, m, sh), quant.requantize_fixed(a, m, -sh))


def _have_cross() -> bool:
    import shutil
    return shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None


@pytest.mark.skipif(not _have_cross(), reason="arm-none-eabi-gcc / qemu-system-arm not installed (apt-get "
                                              "install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm)")
@pytest.mark.parametrize("board", ["qemu-mps2-an386", "qemu-mps2-an500", "qemu-mps2-an505"])
def test_on_qemu(board):
    """The real intrinsics (SMLAD, SXTB16, SMMULR, ...) on emulated M4 / M7 /
    M33 cores: pointwise, 3x3 with padding and stride, depthwise, FC, both
    in-kernel requantizations; outputs equal the reference bit for bit."""
    from cuvil_mcu.sim import qemu
    layers = [("conv", CONV[0], {}), ("conv", CONV[2], {}), ("conv", CONV[5], {}), ("conv", CONV[7], {}),
              ("conv", CONV[12], {}), ("conv", CONV[13], {}), ("fc", FC[2], {}), ("fc", FC[3], {}),
              ("conv", ((1, 8, 5, 6), (6, 8, 1, 1), {}), dict(big=True))]
    model, feeds = huge_bias_model(layers)
    c = compile_model(model, board=board)
    kernels = ("__qconv2_dsp_", "__qdwconv_dsp_", "__qfc2_dsp_", "_dsp_fast", "_dsp_mid", "_dsp_fixed")
    for kern in kernels:
        assert kern in c.header, kern
    g = c.graph
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, board)
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=f"{board}: {name}")


# --- QLinearAdd through the scaled-input tables (qadd_tab_dsp) -----------------

ADD_CASES = [   # (scale a, zp a, scale b, zp b, scale y, zp y, fused Relu)
    (0.05, 3, 0.031, -7, 0.07, -2, False),
    (0.02, -128, 0.02, -128, 0.03, -128, True),      # ResNet's add + Relu (saturating: SSAT with the shift)
    (0.11, 20, 0.004, -100, 0.09, 9, False),         # very different input scales
    (0.5, 0, 0.49, 1, 0.0123, 4, True),              # output scale far below the inputs'
]


def _add_model():
    from qhelpers import MS
    nodes, inits = [], {}
    for i, (sa, za, sb, zb, sy, zy, relu) in enumerate(ADD_CASES):
        for n, s, z in (("a", sa, za), ("b", sb, zb), ("y", sy, zy)):
            inits[f"{n}{i}_s"], inits[f"{n}{i}_z"] = np.float32(s), np.int8(z)
        ins = [f"a{i}", f"a{i}_s", f"a{i}_z", f"b{i}", f"b{i}_s", f"b{i}_z", f"y{i}_s", f"y{i}_z"]
        nodes.append(helper.make_node("QLinearAdd", ins, [f"y{i}"], domain=MS, name=f"add{i}"))
    shape = (1, 8, 13, 7)
    model = qmodel(nodes, {f"{p}{i}": (shape, "int8") for i in range(len(ADD_CASES)) for p in "ab"},
                   {f"y{i}": "int8" for i in range(len(ADD_CASES))}, inits)
    rng = np.random.RandomState(31)
    feeds = {f"{p}{i}": rng.randint(-128, 128, shape).astype(np.int8) for i in range(len(ADD_CASES)) for p in "ab"}
    return model, feeds


def test_add_tables_arithmetic():
    """The tables' sums requantized as the kernel does equal TFLM's add on
    every pair of int8 inputs."""
    from cuvil_mcu.isa.dsp import add_tables
    from cuvil_mcu.ops.qelementwise import add_fast_plan, add_fixed_params
    x = np.arange(-128, 128, dtype=np.int64)
    for sa, za, sb, zb, sy, zy, relu in ADD_CASES:
        lo = zy if relu else -128
        params = add_fixed_params(sa, sb, sy)
        plan = add_fast_plan("int8", za, zb, zy, params, lo, 127)
        ta, tb = add_tables(plan)
        d = (ta.astype(np.int64)[(x & 0xFF)][:, None] + tb.astype(np.int64)[(x & 0xFF)][None, :]) & 0xFFFFFFFF
        d = np.where(d >= 2 ** 31, d - 2 ** 32, d)
        nudge = (1 << 31) if plan["mmr"] else plan["nh"] * (1 << 31) + plan["nl"]
        w = (d * plan["mo"] + nudge) >> 32
        e = plan["e"]
        y = np.clip(((w + (w >> 31) + plan["c"]) >> e) if e else w + plan["c"], lo, 127)
        m1, s1, m2, s2, mo, so = params
        v1 = quant.requantize_fixed((x[:, None] - za) * (1 << 20), m1, s1)
        v2 = quant.requantize_fixed((x[None, :] - zb) * (1 << 20), m2, s2)
        ref = np.clip(quant.requantize_fixed(v1 + v2, mo, so) + zy, lo, 127)
        np.testing.assert_array_equal(y, ref, err_msg=str((sa, za, sb, zb, sy, zy, relu)))


def _add_exact_on(board, c, feeds):
    """The add models' outputs equal the reference bit for bit: the host
    build (plain C) or QEMU (the DSP instructions)."""
    if board == "host-c":
        assert_graph_outputs_exact(c.graph, run_host(c, feeds), feeds, min_unique=4)
        return
    import shutil
    if not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    from cuvil_mcu.sim import qemu
    r = qemu.simulate(c, {n: feeds[n] for n in c.graph.inputs}, board)
    ref = reference.run(c.graph, feeds)
    for name, o in zip(c.graph.outputs, r.outputs):
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=name)


@pytest.mark.parametrize("board", ["host-c", "qemu-mps2-an386"])
def test_add_tables(board, monkeypatch):
    """The table kernel in the DSP header (the fallback of qadd_mla_dsp, so
    that one is switched off here): plain C on the host, the real SMMULR /
    SSAT on QEMU; both equal the reference bit for bit."""
    from qhelpers import rerender
    from cuvil_mcu.isa import dsp
    monkeypatch.setattr(dsp, "add_mla_plan", lambda *a, **kw: None)
    model, feeds = _add_model()
    relu = {f"add{i}" for i, case in enumerate(ADD_CASES) if case[-1]}
    c = rerender(compile_model(model, board=BOARD), lambda n: (0.0, float("inf")) if n.name in relu else None)
    assert c.header.count("__qadd_tab_dsp_") >= len(ADD_CASES) and "__qadd_s8_" not in c.header
    assert "asr #" in c.header and "y < 4 ? 4 : y" in c.header    # SSAT with the shift; the Relu's clamp
    _add_exact_on(board, c, feeds)


# --- QLinearAdd as x * alpha + t[u] >> m (qadd_mla_dsp) ---------------------------

def _tflm_add(x, sa, za, sb, zb, sy, zy, lo, hi):
    """TFLM's int8 add written out (MBQM with left shift 20): y[i, j] for
    A = x[i], B = x[j]."""
    from cuvil_mcu.ops.qelementwise import add_fixed_params
    m1, s1, m2, s2, mo, so = add_fixed_params(np.float32(sa), np.float32(sb), np.float32(sy))
    v1 = quant.requantize_fixed((x[:, None] - za) * (1 << 20), m1, s1)
    v2 = quant.requantize_fixed((x[None, :] - zb) * (1 << 20), m2, s2)
    return np.clip(quant.requantize_fixed(v1 + v2, mo, so) + zy, lo, hi)


def test_add_mla_arithmetic():
    """The plan's multiply-accumulate and shift, evaluated here in int64,
    equal TFLM's add on every pair of int8 inputs and stay within int32:
    the ADD_CASES (with and without Relu) with A and B in either order
    (the larger-scale input is the linear one) and 40 random scale / zero
    point triples, every one of which must find a plan."""
    from cuvil_mcu.isa.dsp import add_mla_plan
    from cuvil_mcu.ops.qelementwise import add_fixed_params
    x = np.arange(-128, 128, dtype=np.int64)
    rng = np.random.RandomState(11)
    rand = [(*np.exp(rng.uniform(-6, 0, 2)), *rng.randint(-128, 128, 1), np.exp(rng.uniform(-6, 0)), 0, 0)
            for _ in range(40)]
    swapped = [(sb, zb, sa, za, sy, zy, relu) for sa, za, sb, zb, sy, zy, relu in ADD_CASES]
    cases = [(c, (0, 1)) for c in ADD_CASES + swapped] + \
        [((float(sa), int(rng.randint(-128, 128)), float(sb), int(zb), float(sy), int(rng.randint(-128, 128)),
           bool(i % 3 == 0)), (0, 1)) for i, (sa, sb, zb, sy, _, _) in enumerate(rand)]
    for (sa, za, sb, zb, sy, zy, relu), lins in cases:
        lo = max(zy, -128) if relu else -128
        plan = add_mla_plan("int8", za, zb, zy, add_fixed_params(np.float32(sa), np.float32(sb), np.float32(sy)),
                            lo, 127, lins=lins)
        what = str((sa, za, sb, zb, sy, zy, relu, lins))
        assert plan is not None and plan["lin"] == (0 if sa >= sb else 1), what
        t = plan["t"].astype(np.int64)[x & 0xFF]
        v = plan["alpha"] * x[:, None] + t[None, :]          # rows: the linear input
        assert v.min() >= -2 ** 31 and v.max() < 2 ** 31, what
        y = np.clip(v >> plan["m"], lo, 127)
        want = _tflm_add(x, sa, za, sb, zb, sy, zy, lo, 127)
        np.testing.assert_array_equal(y, want if plan["lin"] == 0 else want.T, err_msg=what)


def _add_mla_model():
    """Each ADD_CASES node (and one of wide scale ratio) on all 256 x 256
    input pairs; then a chain on an
    odd element count (the kernel's one-element tail) whose second Add
    writes over its first's output (in place)."""
    from qhelpers import MS
    nodes, inits = [], {}
    for i, (sa, za, sb, zb, sy, zy, relu) in enumerate(ADD_CASES):
        for n, s, z in (("a", sa, za), ("b", sb, zb), ("y", sy, zy)):
            inits[f"{n}{i}_s"], inits[f"{n}{i}_z"] = np.float32(s), np.int8(z)
        ins = ["a", f"a{i}_s", f"a{i}_z", "b", f"b{i}_s", f"b{i}_z", f"y{i}_s", f"y{i}_z"]
        nodes.append(helper.make_node("QLinearAdd", ins, [f"y{i}"], domain=MS, name=f"add{i}"))
    for n, s, z in (("c", 0.03, 5), ("d", 0.05, -9), ("z", 0.06, 2), ("w", 0.08, -1),
                    ("p", 0.6, 66), ("q", 0.005, -104), ("r", 0.0025, -62)):
        inits[f"{n}_s"], inits[f"{n}_z"] = np.float32(s), np.int8(z)
    # A's scale 240 times the output's: alpha needs more than 16 bits (MLA, not SMLABB)
    nodes.append(helper.make_node("QLinearAdd", ["a", "p_s", "p_z", "b", "q_s", "q_z", "r_s", "r_z"], ["yw"],
                                  domain=MS, name="wide"))
    nodes.append(helper.make_node("QLinearAdd", ["c", "c_s", "c_z", "d", "d_s", "d_z", "z_s", "z_z"], ["z"],
                                  domain=MS, name="chain0"))
    nodes.append(helper.make_node("QLinearAdd", ["z", "z_s", "z_z", "c", "c_s", "c_z", "w_s", "w_z"], ["w"],
                                  domain=MS, name="chain1"))
    grid, odd = (1, 256, 256), (1, 3, 5, 9)   # odd: 135 = 16 * 8 + 4 + 3
    model = qmodel(nodes, {"a": (grid, "int8"), "b": (grid, "int8"), "c": (odd, "int8"), "d": (odd, "int8")},
                   {**{f"y{i}": "int8" for i in range(len(ADD_CASES))}, "yw": "int8", "w": "int8"}, inits)
    codes = np.arange(-128, 128, dtype=np.int8)
    a, b = np.meshgrid(codes, codes, indexing="ij")
    rng = np.random.RandomState(32)
    feeds = {"a": a.reshape(grid), "b": b.reshape(grid),
             "c": rng.randint(-128, 128, odd).astype(np.int8), "d": rng.randint(-128, 128, odd).astype(np.int8)}
    return model, feeds


@pytest.mark.parametrize("board", ["host-c", "qemu-mps2-an386"])
def test_add_mla(board):
    """qadd_mla_dsp in the DSP header on all input pairs of the ADD_CASES
    (Relu clamps included; 16- and 32-bit multipliers), the 4- and 1-element
    tails, B as the linear input (the chain's first Add: the operands swap)
    and an in-place Add: plain C on
    the host, the real SSAT with the shift on QEMU; equal to the reference
    bit for bit."""
    from qhelpers import rerender
    model, feeds = _add_mla_model()
    relu = {f"add{i}" for i, case in enumerate(ADD_CASES) if case[-1]}
    c = rerender(compile_model(model, board=BOARD), lambda n: (0.0, float("inf")) if n.name in relu else None)
    calls = [ln.strip() for ln in c.header.split("\n") if "__qadd_mla_dsp_" in ln and ln.strip().startswith("model")]
    assert len(calls) == len(ADD_CASES) + 3 and "__qadd_tab_dsp_" not in c.header, calls
    assert "smlatb" in c.header and "mla %[t0]" in c.header, "both multiplier widths"
    assert "asr #" in c.header and "y0 < 4 ? 4 : y0" in c.header    # SSAT with the shift; the Relu's clamp
    (_, _, u0), (out, x, u) = ([p.strip() for p in ln.split("(", 1)[1].split(",")[:3]] for ln in calls[-2:])
    assert out in (x, u), f"the chain's second Add is not in place: {calls[-1]}"
    assert u0 == u, f"the chain's first Add (B of the larger scale) did not swap: {calls[-2:]}"   # both read c
    _add_exact_on(board, c, feeds)
