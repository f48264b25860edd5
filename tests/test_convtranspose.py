"""ConvTranspose: the float op against onnxruntime (reference and generated
C), its integer form from QDQ models (generated C == numpy reference bit for
bit in both requantization modes; float mode == onnxruntime, which runs the
QDQ ConvTranspose in float: its float accumulation rounds differently only
at exact requantization ties, so at most 1 LSB), --quantize int8, the
output-shape rules against onnxruntime (the C builds and bad input:
test_resize.py). Every model holds
many independent layers so each check is one compile."""
from __future__ import annotations

import numpy as np
from onnx import helper

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.ops.convtranspose import convt_nchw, phases, TGeometry
from helpers import check_op, make_model, node, run_c, run_ort
from qhelpers import assert_exact, check_modes, lsb_diff, qmodel

# (input shape, weight shape [C, M/group, k...], attributes)
FLOAT_CASES = [
    ((1, 3, 4, 5), (3, 2, 3, 3), dict(strides=[2, 2])),
    ((1, 3, 4, 5), (3, 2, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ((1, 4, 4, 4), (4, 3, 2, 2), dict(strides=[2, 2])),
    ((2, 4, 3, 5), (4, 1, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1], group=4)),
    ((1, 4, 5, 5), (4, 3, 3, 3), dict(strides=[3, 2], dilations=[2, 2], pads=[0, 1, 2, 0], group=2)),
    ((1, 3, 6), (3, 5, 3), dict(strides=[2])),
    ((1, 3, 4, 4), (3, 2, 1, 1), dict(strides=[3, 3])),                       # phases without taps: bias only
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[3, 2], auto_pad="VALID")),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 8])),   # beyond the kernel's reach
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[3, 2], output_shape=[7, 6], auto_pad="SAME_UPPER")),
    ((1, 2, 3, 3), (2, 2, 2, 2), dict(dilations=[3, 2])),
]


def _float_model(seed=0, relu=True):
    rng = np.random.RandomState(seed)
    nodes, inputs, inits, outs = [], {}, {}, []
    for i, (xs, ws, a) in enumerate(FLOAT_CASES):
        inputs[f"x{i}"] = (xs, "float32")
        inits[f"w{i}"] = rng.randn(*ws).astype(np.float32)
        ins = [f"x{i}", f"w{i}"]
        if i % 3:   # every third layer without bias
            inits[f"b{i}"] = rng.randn(ws[1] * a.get("group", 1)).astype(np.float32)
            ins.append(f"b{i}")
        nodes.append(node("ConvTranspose", ins, [f"t{i}" if relu and i % 2 else f"y{i}"], **a))
        if relu and i % 2:   # fused into the kernel
            nodes.append(node("Relu", [f"t{i}"], [f"y{i}"]))
        outs.append(f"y{i}")
    feeds = {k: rng.randn(*s).astype(np.float32) for k, (s, _) in inputs.items()}
    return make_model(nodes, inputs, outs, inits), feeds


def test_float_layers_match_onnxruntime():
    model, feeds = _float_model()
    ref, _ = check_op(model, feeds, rel_c=1e-5, rel_ort=1e-5)
    assert all(np.abs(r).max() > 0.1 for r in ref)


def test_phases_cover_each_output_once():
    """The phase decomposition the kernels use writes every output exactly
    once and reads exactly the taps of the definition (checked by counting
    with the scatter reference: ones in, multiplicities out)."""
    for xs, ws, a in FLOAT_CASES:
        sp = len(xs) - 2
        from cuvil_mcu.ir import Node
        from cuvil_mcu.ops.convtranspose import convt_geometry
        geo = convt_geometry(Node("t", "ConvTranspose", [], [], a), xs, ws)
        seen = np.zeros(geo.out_hw, np.int64)
        taps = np.zeros(geo.out_hw, np.int64)
        for ph in phases(geo):
            oy = ph.ry + geo.strides[0] * np.arange(ph.geo.out_hw[0])
            ox = ph.rx + geo.strides[1] * np.arange(ph.geo.out_hw[1])
            seen[np.ix_(oy, ox)] += 1
            for q in range(ph.geo.out_hw[0]):
                for p in range(ph.geo.out_hw[1]):
                    ny = sum(1 for j, t in enumerate(ph.ky) if t is not None
                             and 0 <= q - ph.geo.pad_begin[0] + j * ph.geo.dilations[0] < geo.hw[0])
                    nx = sum(1 for j, t in enumerate(ph.kx) if t is not None
                             and 0 <= p - ph.geo.pad_begin[1] + j * ph.geo.dilations[1] < geo.hw[1])
                    taps[oy[q], ox[p]] = ny * nx
        assert (seen == 1).all(), (xs, ws, a)
        one = TGeometry(2, 1, 1, 1, 1, geo.hw, geo.k, geo.strides, geo.dilations, geo.pad_begin, geo.out_hw)
        expect = convt_nchw(np.ones((1, 1) + geo.hw), np.ones((1, 1) + geo.k), one, np.int64)[0, 0]
        assert np.array_equal(taps, expect), (xs, ws, a, sp)


# --------------------------------------------------------------------------- int8

def _qdq_layer(rng, i, xs, ws, a, per_channel, relu, inits, nodes):
    c, mg = ws[0], ws[1]
    group = a.get("group", 1)
    m = mg * group
    w = rng.randint(-127, 128, ws).astype(np.int8)
    sc = (rng.rand(mg) * 0.01 + 0.002).astype(np.float32) if per_channel else np.array(0.004, np.float32)
    inits.update({f"w{i}": w, f"ws{i}": sc, f"wz{i}": np.zeros(sc.shape, np.int8),
                  f"b{i}": rng.randint(-600, 600, m).astype(np.int32),
                  f"bs{i}": (np.float32(0.05) * np.broadcast_to(np.tile(sc, group) if per_channel else sc, (m,)))
                  .astype(np.float32), f"bz{i}": np.zeros(m, np.int32)})
    nodes += [helper.make_node("DequantizeLinear", [f"x{i}", "xs", "xz"], [f"xf{i}"]),
              helper.make_node("DequantizeLinear", [f"w{i}", f"ws{i}", f"wz{i}"], [f"wf{i}"], axis=1),
              helper.make_node("DequantizeLinear", [f"b{i}", f"bs{i}", f"bz{i}"], [f"bf{i}"], axis=0),
              helper.make_node("ConvTranspose", [f"xf{i}", f"wf{i}", f"bf{i}"], [f"yf{i}"], **a)]
    last = f"yf{i}"
    if relu:
        nodes.append(helper.make_node("Relu", [last], [f"yr{i}"]))
        last = f"yr{i}"
    nodes.append(helper.make_node("QuantizeLinear", [last, "ys", "yz"], [f"y{i}"]))


INT8_CASES = [
    ((1, 8, 5, 5), (8, 6, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), True, False),
    ((1, 8, 4, 4), (8, 8, 2, 2), dict(strides=[2, 2]), True, True),
    ((1, 4, 5, 5), (4, 3, 3, 3), dict(strides=[2, 2], group=2), True, False),
    ((1, 6, 4, 5), (6, 1, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1], group=6), False, True),
    ((1, 5, 7), (5, 4, 3), dict(strides=[2], pads=[1, 0]), True, False),
    ((1, 4, 3, 3), (4, 4, 3, 3), dict(strides=[3, 2], dilations=[2, 1], output_shape=[10, 8]), False, False),
    ((1, 8, 6, 7), (8, 4, 3, 3), dict(strides=[2, 2], pads=[4, 3, 4, 3]), True, False),   # phases start inside x
]


def qdq_model(seed=0, cases=INT8_CASES):
    rng = np.random.RandomState(seed)
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(3, np.int8),
             "ys": np.array(0.15, np.float32), "yz": np.array(-5, np.int8)}
    nodes, inputs = [], {}
    for i, (xs, ws, a, per_channel, relu) in enumerate(cases):
        inputs[f"x{i}"] = (xs, "int8")
        _qdq_layer(rng, i, xs, ws, a, per_channel, relu, inits, nodes)
    model = qmodel(nodes, inputs, {f"y{i}": "int8" for i in range(len(cases))}, inits)
    feeds = {k: rng.randint(-128, 128, s).astype(np.int8) for k, (s, _) in inputs.items()}
    return model, feeds


def test_qdq_int8_both_modes():
    model, feeds = qdq_model()
    c = compile_model(model)
    assert {n.op_type for n in c.graph.nodes} <= {"cuvil.QConvTranspose", "Transpose", "Reshape"}, \
        [n.op_type for n in c.graph.nodes]
    out = check_modes(model, feeds, ort_lsb=1)
    o = run_ort(model, feeds, optimize=True)
    exact = sum(int((r == x).sum()) for r, x in zip(out["float"], o))
    total = sum(r.size for r in out["float"])
    assert exact >= total - 2, f"float mode: only {exact} of {total} outputs equal onnxruntime's"
    for f, x in zip(out["fixed"], out["float"]):
        assert lsb_diff(f, x) <= 1, "fixed vs float requantization beyond 1 LSB"
        assert np.unique(f).size > 20


def test_quantize_int8_float_model():
    """--quantize int8: Conv -> ConvTranspose -> Resize all become integer
    kernels (no float left in between); the C equals the reference and
    stays within 3% of the float model's range."""
    rng = np.random.RandomState(0)
    inits = {"w1": rng.randn(8, 3, 3, 3).astype(np.float32) * 0.3, "b1": rng.randn(8).astype(np.float32) * 0.1,
             "wt": rng.randn(8, 4, 2, 2).astype(np.float32) * 0.3, "bt": rng.randn(8).astype(np.float32) * 0.1,
             "roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)}
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), node("Relu", ["c1"], ["r1"]),
             node("ConvTranspose", ["r1", "wt", "bt"], ["ct"], strides=[2, 2], group=2), node("Relu", ["ct"], ["r2"]),
             node("Resize", ["r2", "roi", "sc"], ["y"], mode="linear")]
    model = make_model(nodes, {"x": ((1, 3, 8, 8), "float32")}, ["y"], inits)
    calib = {"x": rng.randn(16, 1, 3, 8, 8).astype(np.float32)}
    x = calib["x"][3]
    f = run_ort(model, {"x": x})[0]
    for mode in ("fixed", "float"):
        c = compile_model(model, quantize="int8", calibration=calib, requant=mode)
        kinds = [n.op_type for n in c.graph.nodes]
        assert "cuvil.QConvTranspose" in kinds and "cuvil.QResize" in kinds, kinds
        assert not any("mixed precision" in n for n in c.graph.notes), c.graph.notes
        from cuvil_mcu import reference
        ref = reference.run(c.graph, {"x": x})[c.graph.outputs[0]]
        y = run_c(model, {"x": x}, quantize="int8", calibration=calib, requant=mode)[0]
        assert_exact(y, ref, f"{mode}: generated C vs reference")
        err = float(np.abs(y - f).max())
        assert err <= 0.03 * float(np.abs(f).max()), f"{mode}: int8 vs float error {err}"
