"""Sum: float (several inputs, numpy broadcasting, fused Relu) against
onnxruntime and the reference, and the integer cuvil.QSum that the QDQ pass
makes of DequantizeLinear x n -> Sum -> QuantizeLinear: generated C bit for
bit with the reference in both requantization modes, "float" bit for bit
with onnxruntime running the QDQ graph as written, "fixed" within one step
of it, and for two inputs identical to QLinearAdd's fixed recipe."""
from __future__ import annotations

import numpy as np
import pytest

from cuvil_mcu import ops
from cuvil_mcu.compiler import compile_model
from helpers import check_op, make_model, node, run_c, run_ort, run_ref
from qhelpers import assert_exact

RNG = np.random.RandomState(18)


def op_types(m):
    return [n.op_type for n in compile_model(m).graph.nodes if not ops.get(n.op_type).view]


@pytest.mark.parametrize("shapes", [
    [(2, 3, 4)] * 3,
    [(1, 8, 5, 5), (1, 8, 1, 1), (5,), (1, 1, 5, 1)],
    [(4, 1), (1, 6)],
    [(3, 7)],
], ids=["same3", "bcast4", "outer2", "one"])
def test_float_sum(shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    m = make_model([node("Sum", names, ["y"])], {n: (s, "float32") for n, s in zip(names, shapes)}, ["y"])
    assert op_types(m) == ["Sum"]
    check_op(m, {n: RNG.randn(*s).astype(np.float32) for n, s in zip(names, shapes)})


def test_float_sum_with_constant_and_relu_is_one_kernel():
    c = RNG.randn(1, 6, 1, 1).astype(np.float32)
    m = make_model([node("Sum", ["a", "b", "c"], ["s"]), node("Relu", ["s"], ["y"])],
                   {"a": ((1, 6, 4, 4), "float32"), "b": ((1, 6, 4, 4), "float32")}, ["y"], {"c": c})
    g = compile_model(m).graph
    assert [n.op_type for n in g.nodes] == ["Sum"] and g.nodes[0].act == (0.0, float("inf"))
    ref, out = check_op(m, {"a": RNG.randn(1, 6, 4, 4).astype(np.float32),
                            "b": RNG.randn(1, 6, 4, 4).astype(np.float32)})
    assert (out[0] == 0).any() and (out[0] > 0).any()


def qdq_sum(shapes, scales, zps, y_scale, y_zp, dtype="int8", relu=False, opset=13):
    """Float inputs quantized and dequantized (the form quantize_static
    writes around an op), then Sum [-> Relu] -> Q -> DQ."""
    nodes, inits, inputs = [], {}, {}
    names = []
    for i, (s, sc, z) in enumerate(zip(shapes, scales, zps)):
        inputs[f"x{i}"] = (s, "float32")
        inits[f"s{i}"], inits[f"z{i}"] = np.array(sc, np.float32), np.array(z, dtype)
        nodes += [node("QuantizeLinear", [f"x{i}", f"s{i}", f"z{i}"], [f"q{i}"]),
                  node("DequantizeLinear", [f"q{i}", f"s{i}", f"z{i}"], [f"d{i}"])]
        names.append(f"d{i}")
    inits["ys"], inits["yz"] = np.array(y_scale, np.float32), np.array(y_zp, dtype)
    nodes.append(node("Sum", names, ["sum"]))
    last = "sum"
    if relu:
        nodes.append(node("Relu", ["sum"], ["r"]))
        last = "r"
    nodes += [node("QuantizeLinear", [last, "ys", "yz"], ["yq"]), node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    return make_model(nodes, inputs, ["y"], inits, opset=opset)


CASES = {
    "three_int8": ([(1, 4, 6, 6)] * 3, [0.05, 0.02, 0.11], [3, -7, 0], 0.09, -4, "int8", False),
    "bcast_uint8_relu": ([(1, 4, 6, 6), (1, 4, 1, 1), (6,)], [0.03, 0.2, 0.01], [128, 100, 77], 0.05, 0, "uint8", True),
    "two_int8": ([(2, 5, 3)] * 2, [0.013, 0.07], [1, -2], 0.04, 5, "int8", False),
    "five_int8": ([(1, 3, 4, 4)] * 5, [0.02, 0.03, 0.04, 0.05, 0.06], [0, 1, 2, 3, 4], 0.1, 0, "int8", False),
}


def _feeds(m, scale=3.0, seed=0):
    rng = np.random.RandomState(seed)
    g = compile_model(m).graph
    return {n: (rng.randn(*g.tensors[n].shape) * scale).astype(np.float32) for n in g.inputs}


@pytest.mark.parametrize("case", sorted(CASES))
def test_qsum_bit_exact_and_against_onnxruntime(case):
    m = qdq_sum(*CASES[case])
    c = compile_model(m)
    assert [n.op_type for n in c.graph.nodes if n.op_type.startswith(("cuvil", "Sum"))] == ["cuvil.QSum"]
    feeds = _feeds(m)
    ort_out = run_ort(m, feeds)[0]
    scale = CASES[case][3]
    for mode in ("fixed", "float"):
        ref = run_ref(m, feeds, requant=mode)[0]
        out = run_c(m, feeds, requant=mode)[0]
        assert_exact(out, ref, f"{case} {mode}: generated C vs reference")
        steps = np.rint(np.abs(out.astype(np.float64) - ort_out) / scale).astype(np.int64)
        assert np.unique(ref).size > 20, f"{case}: output too flat to test anything"
        if mode == "float":
            assert steps.max() == 0, f"{case} float: {int((steps > 0).sum())} outputs differ from onnxruntime"
        else:
            assert steps.max() <= 1, f"{case} fixed: up to {steps.max()} steps from onnxruntime"


def test_qsum_fixed_two_inputs_is_qlinearadd():
    """For two inputs the n-input recipe is TFLM's ADD (QLinearAdd's fixed mode)."""
    shapes, scales, zps, ys, yz, dt, _ = CASES["two_int8"]
    m_sum = qdq_sum(shapes, scales, zps, ys, yz, dt)
    add = make_model([node("QuantizeLinear", ["x0", "s0", "z0"], ["q0"]), node("DequantizeLinear", ["q0", "s0", "z0"], ["d0"]),
                      node("QuantizeLinear", ["x1", "s1", "z1"], ["q1"]), node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"]),
                      node("Add", ["d0", "d1"], ["a"]), node("QuantizeLinear", ["a", "ys", "yz"], ["yq"]),
                      node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])],
                     {"x0": (shapes[0], "float32"), "x1": (shapes[1], "float32")}, ["y"],
                     {"s0": np.array(scales[0], np.float32), "z0": np.array(zps[0], dt),
                      "s1": np.array(scales[1], np.float32), "z1": np.array(zps[1], dt),
                      "ys": np.array(ys, np.float32), "yz": np.array(yz, dt)})
    assert "com.microsoft.QLinearAdd" in [n.op_type for n in compile_model(add).graph.nodes]
    feeds = _feeds(m_sum, seed=4)
    a, b = run_ref(m_sum, feeds, requant="fixed")[0], run_ref(add, feeds, requant="fixed")[0]
    assert_exact(a, b, "QSum (2 inputs) vs QLinearAdd, fixed")
    assert_exact(run_c(m_sum, feeds)[0], b, "QSum (2 inputs) generated C vs QLinearAdd reference, fixed")


def test_qsum_from_ptq():
    """--quantize int8 of a float Sum gives the integer kernel, C = reference."""
    m = make_model([node("Sum", ["a", "b", "c"], ["y"])], {k: ((1, 3, 5, 5), "float32") for k in "abc"}, ["y"])
    calib = {k: RNG.randn(8, 1, 3, 5, 5).astype(np.float32) for k in "abc"}
    c = compile_model(m, quantize="int8", calibration=calib)
    assert "cuvil.QSum" in [n.op_type for n in c.graph.nodes]
    feeds = {k: v[0] for k, v in calib.items()}
    assert_exact(run_c(m, feeds, quantize="int8", calibration=calib)[0],
                 run_ref(m, feeds, quantize="int8", calibration=calib)[0], "PTQ Sum: C vs reference")
