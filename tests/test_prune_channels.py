"""passes/prune_channels.py: channels that cannot change the output are
dropped, and the result stays bit-identical.

Oracles: the same model compiled with prune=False (the dense path every
other test checks against onnxruntime and TFLM), onnxruntime on the ONNX
file (within 1 LSB: fixed-point requantization), and for the hand-built
models the channel sets their construction makes removable.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import host
from helpers import run_ort
from qhelpers import assert_exact, lsb_diff
import shared_models as sm
from test_qconv import qmodel

C, H = 12, 6


def _conv(name, x, w, b, y, group=1, pads=(0, 0, 0, 0), scale=0.02):
    m = w.shape[0]
    inits = {f"{name}_w": w.astype(np.int8), f"{name}_ws": np.full(m, scale, np.float32),
             f"{name}_wz": np.zeros(m, np.int8), f"{name}_b": b.astype(np.int32)}
    node = helper.make_node("QLinearConv", [x, "s", "z", f"{name}_w", f"{name}_ws", f"{name}_wz", "s", "z",
                                            f"{name}_b"], [y], name=name, group=group, pads=list(pads),
                            kernel_shape=list(w.shape[2:]))
    return node, inits


def chain(rng, extra_output: bool = False):
    """x -> pw1 (1x1, C -> C) -> dw (3x3, pad 1) -> pw2 (1x1, C -> 8) -> y.

    Channels of pw1's output (and the dw's), by construction:
      1: pw1 row all zero, bias 0 -> the input zero point everywhere; the dw
         sees no offset at its border either -> constant -> folded: removable
      2: pw1 row all zero, bias large -> constant != zero point; the padded
         dw's border differs from its interior -> must stay
      3: pw1 row all zero, bias large, dw taps of channel 3 all zero -> the
         dw's channel 3 is its bias alone: constant -> removable
      5, 6: pw2 never reads them (zero columns) -> removable
    Every other channel is live: 12 - 4 = 8 stay (a multiple of 4, the
    pass's alignment)."""
    w1 = rng.integers(-60, 60, (C, C, 1, 1))
    w1[w1 == 0] = 1
    b1 = rng.integers(-400, 400, C)
    w1[1] = w1[2] = w1[3] = 0
    b1[1], b1[2], b1[3] = 0, 3000, 2500
    wd = rng.integers(-60, 60, (C, 1, 3, 3))
    wd[wd == 0] = 1
    wd[3] = 0
    bd = rng.integers(-300, 300, C)
    w2 = rng.integers(-60, 60, (8, C, 1, 1))
    w2[w2 == 0] = 1
    w2[:, 5] = w2[:, 6] = 0
    b2 = rng.integers(-300, 300, 8)
    n1, i1 = _conv("pw1", "x", w1, b1, "y1")
    n2, i2 = _conv("dw", "y1", wd, bd, "y2", group=C, pads=(1, 1, 1, 1))
    n3, i3 = _conv("pw2", "y2", w2, b2, "y")
    inits = {"s": np.array(0.05, np.float32), "z": np.array(-3, np.int8), **i1, **i2, **i3}
    outs = {"y": "int8", **({"y1": "int8"} if extra_output else {})}
    return qmodel([n1, n2, n3], {"x": ((1, C, H, H), "int8")}, outs, inits)


def _kept(c, tensor: str):
    return c.graph.channels_kept.get(tensor, (None, None))[1]


def _host(c):
    """The compiled model's host executable (sim/host.py)."""
    g = c.graph
    return host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                      [g.tensors[n].nbytes for n in g.outputs])


def _feeds(rng, k: int = 4):
    return [{"x": rng.integers(-128, 128, (1, C, H, H)).astype(np.int8)} for _ in range(k)]


def test_chain_drops_what_construction_allows_and_stays_exact():
    rng = np.random.default_rng(7)
    model = chain(rng)
    dense = compile_model(model, prune=False)
    c = compile_model(model, verify_each=True)
    assert sorted(_kept(c, "y1_nhwc")) == sorted(set(range(C)) - {1, 3, 5, 6})
    assert sorted(_kept(c, "y2_nhwc")) == sorted(set(range(C)) - {1, 3, 5, 6})
    assert c.graph.tensors["y1_nhwc"].shape[-1] == 8 and dense.graph.tensors["y1_nhwc"].shape[-1] == C
    assert c.macs == dense.macs == H * H * (C * C + C * 9 + C * 8)
    assert c.macs_run == H * H * (8 * C + 8 * 9 + 8 * 8)
    assert "8 layer output channels that cannot change the result dropped" in c.summary()
    g, exe = c.graph, _host(c)
    for f in _feeds(rng):
        want = reference.run(dense.graph, f)["y"]
        assert np.unique(want).size > 20
        assert_exact(reference.run(g, f)["y"], want, "pruned reference vs dense reference")
        out = host.run(exe, [f["x"][None]], c.out_specs, 1)[0][0]
        assert_exact(out, want, "pruned C vs dense reference")
        assert lsb_diff(want, run_ort(model, f)[0]) <= 1


def test_constant_off_the_zero_point_through_a_padded_depthwise_stays():
    """Channel 2 alone (the others live): a constant that is not the zero
    point, read by a 3x3 layer with padding, changes the border: kept."""
    rng = np.random.default_rng(3)
    model = chain(rng)
    c = compile_model(model)
    assert 2 in _kept(c, "y1_nhwc")
    f = _feeds(rng, 1)[0]
    d = compile_model(model, prune=False)
    want = reference.run(d.graph, f)["y"]
    # the border outputs really depend on channel 2: the dense layer's border differs from its interior
    ch2 = reference.run(d.graph, f, all_tensors=True)["y2_nhwc"][0, :, :, 2]    # NHWC
    assert ch2[0, 0] != ch2[2, 2]
    assert_exact(reference.run(c.graph, f)["y"], want, "pruned vs dense")


def test_folding_into_a_following_pointwise():
    """A constant channel (not the zero point) read by a 1x1 layer without
    padding goes into that layer's bias."""
    rng = np.random.default_rng(11)
    w1 = rng.integers(-50, 50, (8, 8, 1, 1))
    w1[w1 == 0] = 2
    w1[2] = w1[6] = w1[7] = w1[4] = 0
    b1 = rng.integers(-200, 200, 8)
    b1[2], b1[6], b1[7], b1[4] = 4000, -4000, 900, 0
    w2 = rng.integers(-50, 50, (4, 8, 1, 1))
    w2[w2 == 0] = 3
    n1, i1 = _conv("a", "x", w1, b1, "t")
    n2, i2 = _conv("b", "t", w2, rng.integers(-100, 100, 4), "y")
    model = qmodel([n1, n2], {"x": ((1, 8, 5, 5), "int8")}, {"y": "int8"},
                   {"s": np.array(0.05, np.float32), "z": np.array(5, np.int8), **i1, **i2})
    c = compile_model(model, verify_each=True)
    dense = compile_model(model, prune=False)
    assert sorted(_kept(c, "t_nhwc")) == [0, 1, 3, 5]
    exe = _host(c)
    for _ in range(3):
        f = {"x": rng.integers(-128, 128, (1, 8, 5, 5)).astype(np.int8)}
        want = reference.run(dense.graph, f)["y"]
        assert np.unique(want).size > 10
        assert_exact(host.run(exe, [f["x"][None]], c.out_specs, 1)[0][0], want, "pruned C vs dense reference")
        assert lsb_diff(want, run_ort(model, f)[0]) <= 1


def test_graph_outputs_separate_weights_and_keep_channels_keep_everything():
    rng = np.random.default_rng(5)
    c = compile_model(chain(rng, extra_output=True))
    assert _kept(c, "y1_nhwc") is None and c.graph.tensors["y1"].shape[1] == C   # y1 is a graph output (NCHW)
    model = chain(rng)
    for kw in ({"prune": False}, {"weights": "separate"}, {"opt_level": 0}):
        c = compile_model(model, **kw)
        assert not c.graph.channels_kept, kw
        assert c.macs_run == c.macs, kw


@pytest.mark.skipif(not sm.available(), reason="shared models not found")
def test_vww_dead_channels():
    """MLPerf Tiny's VWW MobileNet: 85-98 % zero weights in its last
    pointwise layers. Bit-identical to the dense graph on the real samples,
    and what the weights alone say is dropped: every pointwise row that is
    all zeros in the ONNX file is gone or kept for alignment only."""
    import onnx
    path = str(sm.model_path("vww_mobilenet_v1_025"))
    c = compile_model(path)
    dense = compile_model(path, prune=False)
    assert c.macs == dense.macs_run
    assert c.macs_run < 0.55 * c.macs
    assert c.plan.arena_size <= dense.plan.arena_size
    assert c.weights_bytes < 0.5 * dense.weights_bytes
    x = sm.samples("vww_mobilenet_v1_025")
    for s in range(x["inputs"].shape[0]):
        f = {c.graph.inputs[0]: x["inputs"][s:s + 1].reshape(c.graph.tensors[c.graph.inputs[0]].shape)}
        assert_exact(reference.run(c.graph, f)[c.graph.outputs[0]], reference.run(dense.graph, f)[dense.graph.outputs[0]],
                     f"sample {s}")
    # the weights alone: the 128 x 128 pointwise layers' zero rows, counted in the ONNX file
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    zero_rows = sorted(int((w.reshape(w.shape[0], -1) == 0).all(1).sum()) for w in inits.values()
                       if w.ndim == 4 and w.shape[:2] == (128, 128))
    assert zero_rows == [71, 98, 101, 109, 109]
    # every pointwise layer's zero rows are dropped from its output (but for at most 3 kept to stay
    # a multiple of 4), where the output is pruned at all
    checked = 0
    for n in dense.graph.nodes:
        kept = c.graph.channels_kept.get(n.outputs[0], (None, None))[1]
        w = dense.graph.tensors[n.inputs[3]].data if n.op_type == "QLinearConv" else None
        if kept is None or w is None or n.attrs.get("group", 1) != 1:
            continue
        zero = set(np.flatnonzero((w.reshape(w.shape[0], -1) == 0).all(1)).tolist())
        assert len(zero & set(kept)) <= 3, n.name
        checked += len(zero)
    assert checked == 71 + 98 + 109 + 109 + 101 + 4 + 21 + 224 + 234   # the last one through pool and flatten


@pytest.mark.skipif(not sm.available(), reason="shared models not found")
def test_validate_per_layer_matches_the_channels_kept(tmp_path, capsys):
    """validate --per-layer on VWW compares the pruned layers too, against
    the float model's tensor at the channels kept: every layer the dense
    graph compares is compared, and where channels were dropped the
    agreement is the dense layer's (a misaligned channel map would not be)."""
    import json
    from cuvil_mcu import cli
    name = "vww_mobilenet_v1_025"
    x = sm.samples(name)["inputs"][:4]
    np.savez(tmp_path / "d.npz", input_1_int8=x)
    layers = {}
    for tag, extra in (("pruned", []), ("dense", ["--keep-channels"])):
        rc = cli.main(["validate", str(sm.model_path(name)), "--data", str(tmp_path / "d.npz"), "--reference",
                       str(sm.SHARED / name / "model_f32.onnx"), "--per-layer", "-o", str(tmp_path / f"{tag}.json"),
                       *extra])
        assert rc == 0, capsys.readouterr().out
        layers[tag] = {r["tensor"]: r for r in json.loads((tmp_path / f"{tag}.json").read_text())["layers"]}
    assert set(layers["pruned"]) == set(layers["dense"]) and len(layers["dense"]) >= 27
    c = compile_model(str(sm.model_path(name)))
    pruned = [t for t in layers["pruned"] if t in c.graph.channels_kept]
    assert len(pruned) >= 12
    for t in pruned:
        assert layers["pruned"][t]["cos"] > layers["dense"][t]["cos"] - 0.01, t


def _random_chain(rng):
    """pw -> dw (random stride, padding) -> conv (1x1 or 3x3, random padding), with random zero rows,
    zero columns and biases (some 0, some far off): the cases the pass must tell apart."""
    c, m = int(rng.choice([8, 12, 16])), int(rng.choice([4, 8]))
    hw = int(rng.integers(7, 11))

    def weights(shape):
        w = rng.integers(-40, 41, shape)
        w[w == 0] = 1
        return w
    w1, b1 = weights((c, c, 1, 1)), rng.integers(-300, 300, c)
    dead = rng.random(c) < 0.4
    w1[dead] = 0
    b1[dead] = rng.choice([0, 0, -2000, 2500, 40], dead.sum())
    wd, bd = weights((c, 1, 3, 3)), rng.integers(-300, 300, c)
    wd[rng.random(c) < 0.15] = 0
    k = int(rng.choice([1, 3]))
    w2, b2 = weights((m, c, k, k)), rng.integers(-300, 300, m)
    w2[:, rng.random(c) < 0.3] = 0
    pd = [int(rng.integers(0, 2))] * 4
    p2 = [int(rng.integers(0, 2)) if k == 3 else 0] * 4
    n1, i1 = _conv("pw1", "x", w1, b1, "y1")
    n2, i2 = _conv("dw", "y1", wd, bd, "y2", group=c, pads=pd)
    n2.attribute.append(helper.make_attribute("strides", [int(rng.integers(1, 3))] * 2))
    n3, i3 = _conv("c2", "y2", w2, b2, "y", pads=p2)
    z = int(rng.integers(-20, 20))
    inits = {"s": np.array(0.05, np.float32), "z": np.array(z, np.int8), **i1, **i2, **i3}
    return qmodel([n1, n2, n3], {"x": ((1, c, hw, hw), "int8")}, {"y": "int8"}, inits), (1, c, hw, hw)


def test_random_chains_stay_exact():
    """40 random chains: pruned == dense reference bit for bit; the C of some on the host too."""
    rng = np.random.default_rng(2026)
    hit = built = 0
    for i in range(40):
        model, shape = _random_chain(rng)
        dense, c = compile_model(model, prune=False), compile_model(model, verify_each=True)
        hit += bool(c.graph.channels_kept)
        f = {"x": rng.integers(-128, 128, shape).astype(np.int8)}
        want = reference.run(dense.graph, f)["y"]
        assert_exact(reference.run(c.graph, f)["y"], want, f"chain {i}: pruned vs dense")
        if built < 3 and c.graph.channels_kept:
            built += 1
            assert_exact(host.run(_host(c), [f["x"][None]], c.out_specs, 1)[0][0], want, f"chain {i}: C vs dense")
    assert hit >= 15 and built == 3, hit     # the cases exercise the pass


def test_classifier_tail_pool_flatten_fully_connected():
    """pw -> global average pool -> Reshape [1, C] -> QGemm: channel 1 (zero row, bias 0: the zero
    point), 2 (zero row, bias far off: a constant the pool keeps) go into the QGemm's bias; 5 and 6
    are rows of B that are all zero. 8 - 4 = 4 channels stay."""
    rng = np.random.default_rng(21)
    w1 = rng.integers(-50, 50, (8, 8, 1, 1))
    w1[w1 == 0] = 2
    w1[1] = w1[2] = 0
    b1 = rng.integers(-200, 200, 8)
    b1[1], b1[2] = 0, 3000
    n1, i1 = _conv("pw", "x", w1, b1, "t")
    pool = helper.make_node("QLinearGlobalAveragePool", ["t", "s", "z", "s", "z"], ["p"], name="gap",
                            domain="com.microsoft", channels_last=0)
    flat = helper.make_node("Reshape", ["p", "shape"], ["f"], name="flat")
    bm = rng.integers(-60, 60, (8, 3))
    bm[5] = bm[6] = 0
    fc = helper.make_node("QGemm", ["f", "s", "z", "B", "bs", "bz", "C", "ys", "z"], ["y"], name="fc",
                          domain="com.microsoft")
    inits = {"s": np.array(0.05, np.float32), "z": np.array(-7, np.int8), **i1,
             "shape": np.array([1, 8], np.int64), "B": bm.astype(np.int8), "bs": np.array(0.01, np.float32),
             "bz": np.array(0, np.int8), "C": rng.integers(-500, 500, 3).astype(np.int32),
             "ys": np.array(0.04, np.float32)}
    model = qmodel([n1, pool, flat, fc], {"x": ((1, 8, 5, 5), "int8")}, {"y": "int8"}, inits)
    dense, c = compile_model(model, prune=False), compile_model(model, verify_each=True)
    kept = {t: k for t, (_, k) in c.graph.channels_kept.items()}
    assert kept and all(k == [0, 3, 4, 7] for k in kept.values()), kept
    fc_node = next(n for n in c.graph.nodes if n.op_type == "com.microsoft.QGemm")
    assert c.graph.tensors[fc_node.inputs[3]].shape == (4, 3)
    exe = _host(c)
    seen = set()
    for _ in range(6):
        f = {"x": rng.integers(-128, 128, (1, 8, 5, 5)).astype(np.int8)}
        want = reference.run(dense.graph, f)["y"]
        seen.update(want.reshape(-1).tolist())
        assert_exact(host.run(exe, [f["x"][None]], c.out_specs, 1)[0][0], want, "pruned C vs dense reference")
        assert lsb_diff(want, run_ort(model, f)[0]) <= 1
    assert len(seen) > 6


def test_a_one_channel_row_is_not_a_channel_vector():
    """A layer of one output channel over a 1 x W map ([1, 1, W, 1] in NHWC) followed by a pointwise
    layer: W must not be taken for the channels (nothing to drop, and no crash)."""
    rng = np.random.default_rng(4)
    n1, i1 = _conv("a", "x", rng.integers(-50, 50, (1, 4, 1, 1)), np.array([10]), "t")
    w2 = rng.integers(-50, 50, (4, 1, 1, 1))
    w2[1] = 0
    n2, i2 = _conv("b", "t", w2, rng.integers(-50, 50, 4), "y")
    model = qmodel([n1, n2], {"x": ((1, 4, 1, 6), "int8")}, {"y": "int8"},
                   {"s": np.array(0.05, np.float32), "z": np.array(0, np.int8), **i1, **i2})
    c = compile_model(model, verify_each=True)
    assert not c.graph.channels_kept
    f = {"x": rng.integers(-128, 128, (1, 4, 1, 6)).astype(np.int8)}
    assert lsb_diff(reference.run(c.graph, f)["y"], run_ort(model, f)[0]) <= 1
