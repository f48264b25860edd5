"""Helium (MVE) depthwise kernel (cuvil_mcu/isa/mve.py,
templates/kernels/qdwdot_mve.c.j2): input rows in a channel-major ring
(rb[c][column][slot]), one VMLADAVA per pixel and channel, weights gathered
per output row into the ring's lane order. On QEMU mps3-an547 (Cortex-M55),
bit-exact with the numpy reference:
- strides 1 and 2, padding none / symmetric / asymmetric, widths 1..50,
  channels 2..256 incl. counts that are not multiples of 4, 8 or 16, batch 2,
  dilations whose window still fits 16 bytes, layers wider than the ring
  (processed in strips of output columns);
- every requant / output variant: the saturating narrow (clamp = int8
  range) with and without the rounding fix-up, a fused clamp (relu with a
  zero point other than -128, an arbitrary clamp), all shifts < 0, mixed
  shifts (some 0), left shifts (output multiplier > 1);
- layers whose window does not fit (5x5, 3x3 with dilation 2) keep the
  previous kernel (qdwconv_mve) and stay exact;
- the same headers on the host (plain C path) with -Werror and the sanitizers.

Needs arm-none-eabi-gcc and qemu-system-arm for the QEMU tests."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

from cuvil_mcu.compiler import compile_model
import shared_models as sm
from qhelpers import qmodel
from test_mve_add_pool import BOARD, _check_host, _check_qemu, _rerender, needs_qemu

# (x NCHW shape, kernel, attributes, y zero point, multiplier range of x_s * w_s / y_s)
LAYERS = [
    ((1, 64, 25, 5), (3, 3), dict(pads=[1, 1, 1, 1]), -128, (0.002, 0.02)),       # KWS: sat, no fix-up
    ((1, 21, 9, 8), (3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 1]), 5, (0.002, 0.02)),   # s2, C % 4, fix (rneg)
    ((1, 8, 1, 1), (3, 3), dict(pads=[1, 1, 1, 1]), -3, (0.002, 0.02)),           # width 1, height 1
    ((1, 13, 6, 50), (3, 3), dict(pads=[0, 1, 2, 1]), 0, (0.2, 0.9)),            # width 50, C 13, mixed shifts
    ((1, 16, 11, 12), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), -128, (1.5, 3.0)),  # left shift
    ((2, 24, 7, 9), (3, 3), {}, 7, (0.002, 0.02)),                                # batch 2, no padding
    ((1, 256, 3, 3), (3, 3), dict(pads=[1, 1, 1, 1]), -128, (0.002, 0.02)),      # 256 channels
    ((1, 40, 5, 7), (2, 2), dict(dilations=[2, 2], pads=[1, 1, 1, 1]), 11, (0.002, 0.02)),  # dilation 2
    ((1, 12, 4, 9), (1, 3), dict(dilations=[1, 2], pads=[0, 2, 0, 2]), -9, (0.002, 0.02)),   # 1x3, dilated
    ((1, 40, 4, 100), (3, 3), dict(pads=[1, 1, 1, 1]), -128, (0.002, 0.02)),     # wider than the ring: strips
    ((1, 36, 10, 33), (3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1]), 3, (0.002, 0.02)),  # s2 SAME, odd width
    ((1, 3, 12, 13), (3, 3), dict(strides=[1, 2], pads=[1, 1, 1, 1]), -128, (0.01, 0.05)),  # C 3, mixed stride
]
# not taken by qdwdot_mve (window over 16 bytes): the previous kernel
FALLBACK = [
    ((1, 17, 7, 7), (5, 5), dict(pads=[2, 2, 2, 2]), 2, (0.002, 0.02)),
    ((1, 16, 9, 9), (3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), -128, (0.002, 0.02)),
]


def _dw_layer(rng, i, xs, k, attrs, yzp, mrange, m=None):
    """A depthwise QLinearConv (m None) or a dense one with m outputs."""
    c = xs[1] if m is None else m
    w = rng.randint(-127, 128, (c, 1 if m is None else xs[1]) + k).astype(np.int8)
    x_s = np.float32(0.03)
    y_s = np.float32(0.05)
    mult = rng.uniform(*mrange, c)
    w_s = (mult * y_s / x_s).astype(np.float32)
    inits = {f"xs{i}": x_s, f"xz{i}": np.array(rng.randint(-20, 21), np.int8), f"w{i}": w, f"ws{i}": w_s,
             f"wz{i}": np.zeros(c, np.int8), f"ys{i}": y_s, f"yz{i}": np.array(yzp, np.int8),
             f"b{i}": rng.randint(-3000, 3001, c).astype(np.int32)}
    node = helper.make_node("QLinearConv", [f"x{i}", f"xs{i}", f"xz{i}", f"w{i}", f"ws{i}", f"wz{i}", f"ys{i}",
                                            f"yz{i}", f"b{i}"], [f"y{i}"], name=f"dw{i}", group=c if m is None else 1,
                            kernel_shape=list(k), **attrs)
    return node, inits, rng.randint(-128, 128, xs).astype(np.int8)


def _model(layers, seed):
    rng = np.random.RandomState(seed)
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (xs, k, attrs, yzp, mr, *m) in enumerate(layers):
        n, ini, x = _dw_layer(rng, i, xs, k, attrs, yzp, mr, *m)
        nodes.append(n)
        inits.update(ini)
        inputs[f"x{i}"] = (xs, "int8")
        outputs[f"y{i}"] = "int8"
        feeds[f"x{i}"] = x
    return qmodel(nodes, inputs, outputs, inits), feeds


def _calls(header, kernel):
    """The call lines of kernel in the run function (its ring is arena scratch:
    the 5th argument)."""
    return [ln for ln in header.split("\n") if f"__{kernel}_" in ln and ln.strip().startswith("model__")
            and not re.search(r"_(row|ring|grp)\(", ln)]      # the kernel's own out-of-line parts


@needs_qemu
def test_depthwise_dot_exact():
    model, feeds = _model(LAYERS, 1)
    c = compile_model(model, board=BOARD)
    assert len(_calls(c.header, "qdwdot_mve")) == len(LAYERS)
    # the variants the layers above are meant to reach
    for flag in ("sat1", "fix0", "fix1", "fix2", "lsh1", "tail1", "tail81", "ps3", "ps6"):
        assert f"_{flag}" in c.header, flag
    ref = _check_qemu(c, feeds)
    assert sum(int((ref[f"y{i}"] == 127).sum()) for i in range(len(LAYERS))) > 50     # saturating layers
    _check_host(c, feeds)


@needs_qemu
def test_depthwise_dot_fused_clamps_exact():
    """Relu with y zero points other than -128 (lo >= 0: no fix-up, clamp),
    an arbitrary clamp (fix-up and clamp), and Relu with zp -128 (the
    saturating narrow)."""
    model, feeds = _model(LAYERS[:6], 2)
    acts = {"dw0": (0.0, float("inf")), "dw1": (0.0, float("inf")), "dw2": (-0.3, 0.4), "dw3": (0.0, 6.0),
            "dw4": (-0.5, 0.7), "dw5": (0.0, float("inf"))}
    c = _rerender(compile_model(model, board=BOARD), lambda n: acts.get(n.name))
    assert "_sat0" in c.header and "_sat1" in c.header
    ref = _check_qemu(c, feeds)
    # the clamps bind: relu at y1's zero point, the upper bounds of y2 and y4
    assert (ref["y1"] == 5).sum() > 20 and (ref["y2"] == ref["y2"].max()).sum() >= 2
    assert (ref["y4"] == ref["y4"].max()).sum() > 20
    _check_host(c, feeds)


@needs_qemu
def test_depthwise_widths_and_channels_exact():
    """Widths 1..50 and channel counts around multiples of 4, 8 and 16."""
    layers = []
    for wd, ch in zip([1, 2, 3, 4, 5, 7, 9, 16, 31, 50], [5, 2, 4, 7, 8, 9, 15, 17, 33, 12]):
        layers.append(((1, ch, 3, wd), (3, 3), dict(pads=[1, 1, 1, 1]), -128 if wd % 2 else 4, (0.002, 0.02)))
        layers.append(((1, ch, 4, wd), (3, 3), dict(strides=[2, 2], pads=[0, 1, 1, 1]), -1, (0.002, 0.02)))
    model, feeds = _model(layers, 3)
    c = compile_model(model, board=BOARD)
    assert len(_calls(c.header, "qdwdot_mve")) == len(layers)
    _check_qemu(c, feeds)


@needs_qemu
def test_depthwise_wide_windows_fall_back_exact():
    model, feeds = _model(FALLBACK, 4)
    c = compile_model(model, board=BOARD)
    assert not _calls(c.header, "qdwdot_mve")
    assert len(_calls(c.header, "qdwconv_mve")) == len(FALLBACK)
    _check_qemu(c, feeds)
    _check_host(c, feeds)


@needs_qemu
def test_dense_conv_requant_variants_exact():
    """qdot_mve (dense convolutions): the requant without the rounding fix-up
    when lo >= 0, with the saturating narrow (y zp -128, no clamp) or a
    clamp (relu with another zero point), next to the general one. (Output
    channels not a multiple of 4, or a left shift: the layers qpw_mve and
    qdotp_mve would otherwise take, test_mve_pointwise.py.)"""
    layers = [((1, 16, 5, 6), (1, 1), {}, -128, (0.002, 0.02), 18),                  # pointwise, sat
              ((1, 3, 9, 8), (3, 3), dict(pads=[1, 1, 1, 1]), -128, (1.5, 3.0), 12),   # left shift, sat
              ((1, 24, 4, 4), (1, 1), {}, 9, (0.002, 0.02), 10),                      # relu below: clamp
              ((1, 1, 21, 10), (10, 4), dict(strides=[2, 2], pads=[4, 1, 5, 2]), -128, (0.002, 0.02), 14),
              ((1, 8, 4, 5), (3, 3), dict(pads=[1, 1, 1, 1]), 3, (0.002, 0.02), 7)]   # general
    model, feeds = _model(layers, 6)
    c = _rerender(compile_model(model, board=BOARD), lambda n: (0.0, float("inf")) if n.name == "dw2" else None)
    assert c.header.count("no -1 fix-up of the rounding") == 4   # all but the last layer
    assert "__qdwdot_mve" not in c.header and "__qdot_mve" in c.header
    _check_qemu(c, feeds)
    _check_host(c, feeds)


def test_ring_strips():
    """A layer wider than the ring is cut into strips of output columns
    (g[14] < output width) with the ring within DW_RING_BYTES."""
    import cuvil_mcu.isa.mve as mve
    model, _ = _model([LAYERS[9]], 5)
    c = compile_model(model, board=BOARD)
    (call,) = _calls(c.header, "qdwdot_mve")
    (node,) = [n.name for n in c.graph.nodes if n.op_type == "QLinearConv"]
    assert c.plan.scratch_size[node] <= mve.DW_RING_BYTES
    args = call.split("(", 1)[1].rsplit(")", 1)[0].split(", ")
    assert args[4] == f"(int8_t *)(a + {c.plan.scratch_offset[node]}u)"
    sym = args[5]
    (k,) = [k for k in c.consts if k.symbol == sym]
    g = [int(v) for v in k.data.reshape(-1)]
    assert g[2] == 100 and 1 < g[14] < 100


@needs_qemu
@pytest.mark.skipif(not sm.available(), reason="shared models not found")
@pytest.mark.parametrize("name,bound", [("kws_dscnn", 0.30), ("vww_mobilenet_v1_025", 0.36)])
def test_shared_models_exact_and_fast(name, bound):
    """The depthwise models on the M55: equal to the reference, below the
    instructions/MAC bound, firmware (text + rodata) within weights + 12 KB."""
    from cuvil_mcu.sim import qemu
    # whole layers: issue 4's code bound is the kernels'; a tiled region adds one
    # shape-specialized qdot_mve per band shape (docs/benchmarks.md, test_tiling.py); every channel
    # kept: the bounds are the dense kernels' (VWW's dropped channels leave other shapes, each its
    # own specialized kernels, and fewer MACs run than the per-MAC figure divides by)
    c = compile_model(str(sm.model_path(name)), board=BOARD, patch=False, prune=False)
    assert "__qdwdot_mve_" in c.header
    g = c.graph
    x = sm.samples(name)["inputs"][:2].reshape((2,) + g.tensors[g.inputs[0]].shape)
    r = qemu.simulate(c, [x])
    for o, e in zip(r.outputs, qemu.reference_outputs(c, [x])):
        assert np.array_equal(o, e), f"{name}: QEMU output differs from the reference"
    assert r.per_mac <= bound, r.per_mac
    assert r.text + r.data <= c.weights_bytes + 12 * 1024


def test_ring_group_choice():
    """All channels when their ring fits the free arena, else the most
    channels (a multiple of DW_MIN_GROUP) whose ring fits, else DW_MIN_GROUP."""
    import cuvil_mcu.isa.mve as mve

    def ring(cg):
        return -(-cg // 8) * 8 * 21 + 16
    g = mve.DW_MIN_GROUP
    assert mve._dw_ring_group(64, ring, 10 ** 6) == 64
    assert mve._dw_ring_group(64, ring, ring(64) - 1) == 64 - g
    assert mve._dw_ring_group(64, ring, ring(2 * g)) == 2 * g
    assert mve._dw_ring_group(64, ring, 0) == g
    assert mve._dw_ring_group(g - 3, ring, 0) == g - 3 and mve._dw_ring_group(g + 5, ring, 0) == g


@needs_qemu
def test_ring_groups_exact(monkeypatch):
    """Every layer above run 8 channels at a time (ring groups, the last one
    short when C % 8 != 0; strips of columns too for the wide one) on QEMU and through the plain C path on the host,
    the group size in the geometry (g[21]) and the ring sized for one group."""
    import cuvil_mcu.isa.mve as mve
    monkeypatch.setattr(mve, "_dw_ring_group", lambda c, ring, free: min(c, 8))
    layers = LAYERS[:2] + LAYERS[3:]
    model, feeds = _model(layers, 7)
    c = compile_model(model, board=BOARD)
    calls = _calls(c.header, "qdwdot_mve")
    assert len(calls) == len(layers)
    for call in calls:
        sym = call.split("(", 1)[1].rsplit(")", 1)[0].split(", ")[5]
        (k,) = [k for k in c.consts if k.symbol == sym]
        g = [int(v) for v in k.data.reshape(-1)]
        assert g[21] == min(g[3], 8), g
    _check_qemu(c, feeds)
    _check_host(c, feeds)
