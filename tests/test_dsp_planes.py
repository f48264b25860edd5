"""A pointwise layer (isa/dsp_conv.py emit_pw) storing its output as its
depthwise consumer's int16 channel planes (isa/dsp_dw.py, the "_pin"
kernels: no int8 NHWC -> planes conversion): chains pw -> dw on the host
(the C fallbacks of both kernels) and on the M4 (the assembly), bit-exact
with the numpy reference and within 1 LSB of independent float / int64
computations of each layer; the planner sizes the tensor as the planes."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa import dsp_conv
from qhelpers import rerender
from test_isa_dsp import _have_cross, conv_layer, qmodel, run_host

BOARD = "qemu-mps2-an386"

# (K, C, H, W, dw pads (top, left, bottom, right)): VWW's 6x6x128 after K 64 (the unrolled K
# kernel) and K 128 (K unrolled with xe in the arena), a small one with other pads and a
# wider than high map
CHAINS = [(64, 128, 6, 6, (1, 1, 1, 1)), (128, 128, 6, 6, (1, 1, 1, 1)), (32, 16, 4, 8, (1, 0, 1, 1))]


def _chains(seed, big=True):
    """Each chain x<2i> -> pw conv<2i> -> dw conv<2i+1> -> y<2i+1>, the pw's output
    zero point -128 (a fused Relu is then int8's whole range: its SSAT kernels),
    the dw's input quantization the pw's output's. big: first a stride-2 depthwise
    layer on 48x48x16 (output y<2n>, last): the arena's peak, so the planes fit the
    free arena at the chains' steps (else they are not taken: the arena must not grow)."""
    rng = np.random.RandomState(seed)
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    if big:
        b = 2 * len(CHAINS)
        nb, inib, xb = conv_layer(rng, b, (1, 16, 48, 48), (16, 1, 3, 3), dict(group=16, pads=[0, 0, 1, 1], strides=[2, 2]))
        nodes.append(nb)
        inits.update(inib)
        inputs[f"x{b}"] = (xb.shape, "int8")
        feeds[f"x{b}"] = xb
    for q, (kk, c, h, w, pads) in enumerate(CHAINS):
        i, j = 2 * q, 2 * q + 1
        # (one weight scale: one shift for every channel, the pw's SSAT-immediate kernels)
        n0, ini0, x = conv_layer(rng, i, (1, kk, h, w), (c, kk, 1, 1), {}, per_channel=False)
        ini0[f"yz{i}"] = np.array(-128, np.int8)
        n1, ini1, _ = conv_layer(rng, j, (1, c, h, w), (c, 1, 3, 3),
                                 dict(group=c, pads=[pads[0], pads[1], pads[2], pads[3]], strides=[1, 1]))
        n1.input[0] = f"y{i}"
        ini1[f"xs{j}"], ini1[f"xz{j}"] = ini0[f"ys{i}"], ini0[f"yz{i}"]
        nodes += [n0, n1]
        inits.update(ini0)
        inits.update(ini1)
        inputs[f"x{i}"] = (x.shape, "int8")
        outputs[f"y{j}"] = "int8"
        feeds[f"x{i}"] = x
    if big:
        outputs[f"y{b}"] = "int8"
    return qmodel(nodes, inputs, outputs, inits), feeds


def _pw_float(t, x, i):
    """pw layer i in float (NCHW), round half to even, the Relu, int8."""
    xf = x.astype(np.float64) - float(t[f"xz{i}"])
    w = t[f"w{i}"].astype(np.float64)[:, :, 0, 0]
    s = float(t[f"xs{i}"]) * np.broadcast_to(t[f"ws{i}"].astype(np.float64), (w.shape[0],)) / float(t[f"ys{i}"])
    acc = np.einsum("mk,nkhw->nmhw", w, xf) + t[f"b{i}"].astype(np.float64)[None, :, None, None]
    return np.clip(np.rint(acc * s[None, :, None, None]) + float(t[f"yz{i}"]), int(t[f"yz{i}"]), 127)


def _dw_int64(t, x, j, pads):
    """dw layer j on x (NCHW int8): int64 sums over the x_zp-padded input, the float
    scale, round half to even, the Relu, int8."""
    x = x.astype(np.int64)[0]
    w = t[f"w{j}"].astype(np.int64)[:, 0]
    xz = int(t[f"xz{j}"])
    xp = np.pad(x, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=xz)
    oh, ow = xp.shape[1] - 2, xp.shape[2] - 2
    acc = t[f"b{j}"].astype(np.int64)[:, None, None] + sum(
        w[:, a, b, None, None] * (xp[:, a:a + oh, b:b + ow] - xz) for a in range(3) for b in range(3))
    s = np.float64(t[f"xs{j}"]) * t[f"ws{j}"].astype(np.float64) / np.float64(t[f"ys{j}"])
    return np.clip(np.rint(acc * s[:, None, None]) + int(t[f"yz{j}"]), int(t[f"yz{j}"]), 127)[None]


def _compile(seed, planes=True, monkeypatch=None, big=True):
    if not planes:
        monkeypatch.setattr(dsp_conv, "PLANES_OUT", False)
    model, feeds = _chains(seed, big)
    c = compile_model(model, board=BOARD, patch=False)    # (no tiled regions: graph nodes)
    c = rerender(c, lambda n: (0.0, float("inf")))      # every layer with a Relu (the pw's scaled kernels)
    return model, feeds, c


@pytest.mark.parametrize("where", ["host", BOARD])
def test_pw_writes_the_depthwise_planes(where):
    if where != "host" and not _have_cross():
        pytest.skip("arm-none-eabi-gcc / qemu-system-arm not installed")
    model, feeds, c = _compile(5)
    g = c.graph
    # every chain took the planes: the pw's halfword-store kernels, the dw's "_pin" ones
    pws = re.findall(r"^ +model__(qconv2_dsp_pw_\w*_h\d+_p\d+x\d+k\d+l\d+t\d+)\(", c.header, re.M)
    dws = re.findall(r"^ +model__(qdw2_dsp_\w*_pin)\(", c.header, re.M)
    assert len(pws) == len(dws) == len(CHAINS), (pws, dws)
    # the planner sized each pw -> dw tensor as the planes (4 plane words a channel, whole)
    for q, (kk, ch, h, w, pads) in enumerate(CHAINS):
        t = f"y{2 * q}_nhwc"       # (the layout pass's NHWC tensor)
        kp = (h + pads[0] + pads[2] + 1) // 2
        wcols = w + pads[1] + pads[3]
        plane = -(-wcols * kp // 4) * 4
        assert g.store_bytes[t] == 4 * plane * ch and c.plan.tensor_bytes[t] == 4 * plane * ch
    if where == "host":
        outs = run_host(c, feeds)
    else:
        from cuvil_mcu.sim import qemu
        outs = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, where).outputs
    ref = reference.run(g, feeds, all_tensors=True)
    t = {n.name: numpy_helper.to_array(n) for n in model.graph.initializer}
    for q, (kk, ch, h, w, pads) in enumerate(CHAINS):
        i, j = 2 * q, 2 * q + 1
        o = np.asarray(outs[q]).reshape(ref[f"y{j}"].shape)
        np.testing.assert_array_equal(o, ref[f"y{j}"], err_msg=f"y{j}")
        assert np.unique(o).size >= 8
        # the reference's pw output (NHWC) near the float pw, its dw output near the int64 dw of it
        mid = ref[f"y{i}_nhwc"].transpose(0, 3, 1, 2)
        assert np.unique(mid).size >= 8
        assert np.abs(mid.astype(np.int64) - _pw_float(t, feeds[f"x{i}"], i)).max() <= 1
        ind = _dw_int64(t, mid, j, pads)
        assert np.abs(o.astype(np.int64) - ind).max() <= 1, f"y{j}"


def test_planes_left_out_give_the_same_outputs(monkeypatch):
    """Without the planes store (PLANES_OUT off) the same model converts in the dw
    (no "_pin" kernel, NHWC tensors) and computes the same outputs on the host."""
    _, feeds, c1 = _compile(9)
    _, _, c0 = _compile(9, planes=False, monkeypatch=monkeypatch)
    assert "_pin(" in c1.header and "_pin(" not in c0.header and not c0.graph.store_bytes
    assert c1.plan.arena_size == c0.plan.arena_size
    for a, b in zip(run_host(c1, feeds), run_host(c0, feeds)):
        np.testing.assert_array_equal(a, b)


def test_planes_only_where_they_fit():
    """Without the big layer the chains' own tensors are the arena's peak: planes that
    would grow it are not taken (the 6x6x128 ones, 16 KB against 4.6 KB of NHWC)."""
    _, _, c = _compile(5, big=False)
    assert not re.search(r"^ +model__qdw2_dsp_\w*u6x128\w*_pin\(", c.header, re.M)
    assert all(b < 16384 for b in c.graph.store_bytes.values())


def test_strict_builds():
    """Both kernels' host C (the planes stores by memcpy, the fill) under gcc / clang
    as C99, C11 and C++ with -Werror and the sanitizers: bit-exact."""
    from helpers import run_strict_builds
    _, feeds, c = _compile(13)
    assert "_pin(" in c.header
    run_strict_builds(c, feeds, exact=True)
