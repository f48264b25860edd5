"""A tiled region pointwise -> stride-2 3x3 depthwise (VWW's node 2 shape:
8 -> 16 channels over 48x48) on int16 channel planes (ops/tiled.py
_planes_emit): the pointwise (isa/dsp_pwsk.py, halfword stores at plane
offsets with base bumps past STRH's 4,095) writes the depthwise's planes
(isa/dsp_dw.py "_pin" x runs), the kept halo row a word copy per plane and
column. On the host (both kernels' C fallbacks) and on the M4 (the
assembly): bit-exact with the numpy reference of the untiled graph and
within 1 LSB of independent float / int64 computations of each layer."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from onnx import numpy_helper

from cuvil_mcu import compiler, reference
from cuvil_mcu.ops import tiled as tiled_op
from cuvil_mcu.passes import tile
from test_isa_dsp import _have_cross, conv_layer, qmodel, run_host

BOARD = "qemu-mps2-an386"


def _model(seed, h=48, w=48, c=8, m=16):
    rng = np.random.RandomState(seed)
    n0, ini0, x = conv_layer(rng, 0, (1, c, h, w), (m, c, 1, 1), {}, per_channel=False)
    ini0["yz0"] = np.array(-128, np.int8)
    n1, ini1, _ = conv_layer(rng, 1, (1, m, h, w), (m, 1, 3, 3), dict(group=m, pads=[0, 0, 1, 1], strides=[2, 2]),
                             per_channel=False)
    n1.input[0] = "y0"
    ini1["xs1"], ini1["xz1"] = ini0["ys0"], ini0["yz0"]
    return qmodel([n0, n1], {"x0": (x.shape, "int8")}, {"y1": "int8"}, {**ini0, **ini1}), {"x0": x}


def _compile(seed, **kw):
    model, feeds = _model(seed, **kw)
    whole = compiler.compile_model(model, board=BOARD, patch=False)
    for n in whole.graph.nodes:
        if n.op_type == "QLinearConv":
            n.act = (0.0, float("inf"))          # Relu: the pw's SSAT kernels, the dw's scaled ones
    convs = [i for i, n in enumerate(whole.graph.nodes) if n.op_type == "QLinearConv"]
    g2 = tile.apply(whole.graph, convs[0], convs[-1], 4, (True,))
    plan, r = compiler.plan_and_render(g2, whole.prefix, whole.board, preserve_inputs=False)
    c = dataclasses.replace(whole, graph=g2, plan=plan, header=r.text, stack_bound=r.stack_bound)
    return model, feeds, c, whole


def _pw_float(t, x):
    xf = x.astype(np.float64) - float(t["xz0"])
    w = t["w0"].astype(np.float64)[:, :, 0, 0]
    s = float(t["xs0"]) * float(t["ws0"]) / float(t["ys0"])
    acc = np.einsum("mk,nkhw->nmhw", w, xf) + t["b0"].astype(np.float64)[None, :, None, None]
    return np.clip(np.rint(acc * s) + float(t["yz0"]), int(t["yz0"]), 127)


def _dw_s2_int64(t, x):
    """The stride-2 3x3 depthwise on x (NCHW int8) padded at the bottom and right by x_zp."""
    x = x.astype(np.int64)[0]
    w = t["w1"].astype(np.int64)[:, 0]
    xz = int(t["xz1"])
    xp = np.pad(x, ((0, 0), (0, 1), (0, 1)), constant_values=xz)
    oh, ow = (xp.shape[1] - 3) // 2 + 1, (xp.shape[2] - 3) // 2 + 1
    acc = t["b1"].astype(np.int64)[:, None, None] + sum(
        w[:, a, b, None, None] * (xp[:, a:a + 2 * oh:2, b:b + 2 * ow:2] - xz) for a in range(3) for b in range(3))
    s = np.float64(t["xs1"]) * np.float64(t["ws1"]) / np.float64(t["ys1"])
    return np.clip(np.rint(acc * s) + int(t["yz1"]), int(t["yz1"]), 127)[None]


@pytest.mark.parametrize("where", ["host", BOARD])
def test_region_pointwise_writes_the_depthwise_planes(where):
    if where != "host" and not _have_cross():
        pytest.skip("arm-none-eabi-gcc / qemu-system-arm not installed")
    model, feeds, c, whole = _compile(3)
    hd = c.header
    # the region ran on planes: 12 bands of 2 rows, the pw's planes store (16 planes of 148 words,
    # 3 pair-rows a column), the x runs reading them (the last band with the bottom row folded)
    assert "(int16 planes)" in hd and "of 12 (int16 planes)" in hd
    assert re.search(r"model__qconv2_pwsk_dsp_k8_m16_\w+_h592k3\(", hd)
    assert re.search(r"^ +model__qdw2_dsp_\w*x2r\d+p10_kp3_pl148_pin\(", hd, re.M)
    assert re.search(r"^ +model__qdw2_dsp_\w*x2r\d+p11_kp3_pl148_pin\(", hd, re.M)
    # the pair loop's base bumps: channels 7 and 14 past STRH's immediate
    body = hd[hd.index("_h592k3_pairs("):]
    assert "addw r0, r0, #4092" in body and "strh" in body
    g = whole.graph
    if where == "host":
        out = run_host(c, feeds)[0]
    else:
        from cuvil_mcu.sim import qemu
        out = qemu.simulate(c, {n: feeds[n] for n in c.graph.inputs}, where).outputs[0]
    ref = reference.run(g, feeds, all_tensors=True)
    o = np.asarray(out).reshape(ref["y1"].shape)
    np.testing.assert_array_equal(o, ref["y1"])
    assert np.unique(o).size >= 8
    t = {n.name: numpy_helper.to_array(n) for n in model.graph.initializer}
    mid = ref["y0_nhwc"].transpose(0, 3, 1, 2)
    assert np.unique(mid).size >= 8
    assert np.abs(mid.astype(np.int64) - _pw_float(t, feeds["x0"])).max() <= 1
    assert np.abs(o.astype(np.int64) - _dw_s2_int64(t, mid)).max() <= 1


def test_planes_left_out_give_the_same_outputs(monkeypatch):
    """Without the planes (tiled.PLANES off) the region runs its int8 band rows and
    the depthwise converts them: the same outputs on the host, no larger arena."""
    _, feeds, c1, _ = _compile(7)
    monkeypatch.setattr(tiled_op, "PLANES", False)
    _, _, c0, _ = _compile(7)
    assert "(int16 planes)" in c1.header and "(int16 planes)" not in c0.header and "_pin(" not in c0.header
    assert c1.plan.arena_size <= c0.plan.arena_size
    np.testing.assert_array_equal(run_host(c1, feeds)[0], run_host(c0, feeds)[0])


def test_pointwise_refusing_leaves_no_planes(monkeypatch):
    """A pointwise that does not take the planes (dsp_pwsk.PLANES_OUT off): the
    region runs its int8 bands, the depthwise probes' "_pin" kernels are not left
    in the header (a static function unused: -Werror), the outputs exact."""
    from cuvil_mcu.isa import dsp_pwsk
    monkeypatch.setattr(dsp_pwsk, "PLANES_OUT", False)
    model, feeds, c, whole = _compile(3)
    assert "(int16 planes)" not in c.header and "_pin" not in c.header and "_h592" not in c.header
    ref = reference.run(whole.graph, feeds)
    np.testing.assert_array_equal(np.asarray(run_host(c, feeds)[0]).reshape(ref["y1"].shape), ref["y1"])


def test_vww_summary_tells_the_planes_bands():
    """gen's summary of VWW's tiled region as it is lowered on the M4: 12
    bands of 2 rows (24 output rows), and the halo copies of the planes: one
    kept row a band after the first, a word (an int16 pair) per channel plane
    and column of the 48-wide pointwise output: 11 x 16 x 48 x 4 B; the host
    board keeps the int8 bands the tile pass chose."""
    import shared_models as sm
    if not sm.available():
        pytest.skip("../shared/models not present")
    lines = compiler.compile_model(str(sm.model_path("vww_mobilenet_v1_025")), board=BOARD).summary().splitlines()
    node = [ln for ln in lines if ln.startswith("patches  node 2:")]
    assert len(node) == 1, lines
    assert "2 layers in 12 bands of 2 rows" in node[0]
    assert f"{11 * 16 * 48 * 4:,} B of halo rows moved per run" in node[0]
    host = [ln for ln in compiler.compile_model(str(sm.model_path("vww_mobilenet_v1_025")), board="host")
            .summary().splitlines() if ln.startswith("patches  node 2:")]
    assert len(host) == 1 and "12 bands" not in host[0] and "33,792 B" not in host[0], host
