"""com.microsoft.QLinearSoftmax, int8 and uint8, both requantization modes.

Generated C vs the numpy reference: exact. Float mode vs onnxruntime
(optimizations on): exact (its exp table, float32 sum and rounding are
reproduced). Fixed mode (TFLM's integer softmax, gemmlowp fixed point) vs
the exact softmax in double: within 1 LSB; the fixed-point building blocks
against the functions they approximate; hand-computed cases from TFLM's
formulas; and the keyword-spotting model against the TFLM interpreter's
outputs (bit-exact; VWW, person detection and ResNet-8 also end in this
softmax and are checked in test_qpool.py / test_qelementwise.py).
"""
import math

import numpy as np
import pytest
from onnx import helper

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import CuvilError
from cuvil_mcu.ops.qsoftmax import exp_on_negative_values, one_over_one_plus_x, reciprocal
from helpers import run_c, run_ort, run_ref
from qhelpers import MS, assert_exact, check_modes, lsb_diff, qmodel, qparams, rand_q
from test_qelementwise import MODELS, _run_model_samples

# (input shape, opset, axis)
CASES = [((3, 10), 13, -1), ((2, 5, 3), 13, 1), ((2, 3, 4), 12, 1), ((4, 1000), 13, -1), ((2, 7), 11, None)]


def _softmax_model(dt, xs, y_params):
    off = 0 if dt == "int8" else 128
    inits = qparams("x", xs, 3 + off, dt)
    nodes, inputs, outs = [], {}, {}
    for j, (ys, yz) in enumerate(y_params):
        inits.update(qparams(f"y{j}", ys, yz, dt))
        for i, (shape, opset, axis) in enumerate(CASES):
            inputs[f"x{i}"] = (shape, dt)
            attrs = {"opset": opset} if axis is None else {"opset": opset, "axis": axis}
            name = f"y{j}_{i}"
            nodes.append(helper.make_node("QLinearSoftmax", [f"x{i}", "x_s", "x_z", f"y{j}_s", f"y{j}_z"], [name],
                                          domain=MS, **attrs))
            outs[name] = dt
    return qmodel(nodes, inputs, outs, inits)


def _exact(dt, xs, xz, y_params):
    info = np.iinfo(dt)

    def run(feeds):
        out = []
        for ys, yz in y_params:
            for i, (shape, opset, axis) in enumerate(CASES):
                x = xs * (feeds[f"x{i}"].astype(np.float64) - xz)
                if opset < 13:
                    v = x.reshape(int(np.prod(shape[:axis or 1])), -1)
                    e = np.exp(v - v.max(-1, keepdims=True))
                    p = (e / e.sum(-1, keepdims=True)).reshape(shape)
                else:
                    e = np.exp(x - x.max(axis, keepdims=True))
                    p = e / e.sum(axis, keepdims=True)
                out.append(np.clip(np.rint(p / np.float32(ys)) + yz, info.min, info.max))
        return out
    return run


@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_softmax(dt):
    """Output 1/256 at the type minimum (TFLM's only output parameters),
    1/255 (onnxruntime's quantizer) and an arbitrary pair (our generalized
    fixed-mode output); opset 11/12 (2-D coercion) and 13 axes; a long row
    (1000 classes) and a single element."""
    rng = np.random.RandomState(31)
    qmin = np.iinfo(dt).min
    y_params = [(1 / 256, qmin), (1 / 255, qmin), (0.004, 5)]
    xs = 0.0625
    m = _softmax_model(dt, xs, y_params)
    feeds = {f"x{i}": rand_q(rng, shape, dt) for i, (shape, _, _) in enumerate(CASES)}
    xz = 3 + (0 if dt == "int8" else 128)
    check_modes(m, feeds, ort_lsb=0, fixed_vs=_exact(dt, xs, xz, y_params), fixed_lsb=1)


@pytest.mark.parametrize("xs", [0.002, 0.03, 0.25, 1.7])
def test_softmax_input_scales(xs):
    """Small to large input scales (the diff_min cut-off, the multiplier's
    left shift) against onnxruntime (float mode) and the exact softmax
    (fixed mode), reference only; C is covered above."""
    rng = np.random.RandomState(int(xs * 1000))
    dt = "int8"
    y_params = [(1 / 256, -128)]
    m = _softmax_model(dt, xs, y_params)
    feeds = {f"x{i}": rand_q(rng, shape, dt) for i, (shape, _, _) in enumerate(CASES)}
    want = _exact(dt, xs, 3, y_params)(feeds)
    for r, w in zip(run_ref(m, feeds, requant="fixed"), want):
        assert lsb_diff(r, w) <= 1, f"fixed mode vs exact softmax: {lsb_diff(r, w)} LSB"
    for r, o in zip(run_ref(m, feeds, requant="float"), run_ort(m, feeds, optimize=True)):
        assert lsb_diff(r, o) == 0, f"float mode vs onnxruntime: {lsb_diff(r, o)} LSB"


def test_tflm_hand_computed_cases():
    """From TFLM's formulas: n equal inputs have exp = 1 (INT32_MAX in
    Q0.31) each, the Q12.19 sum is n * 2^19, the reciprocal of 2 is (1.0 -
    ulp, 1 bit over unit) so each output is RDBPOT(2^31 - 2, 24) = 128 ->
    -128 + 128 = 0; four equal: 64 -> -64; one input far above the rest:
    256 - 128 = 128, saturated to 127 (uint8: 255, 128, 64)."""
    for dt, qmin in (("int8", -128), ("uint8", 0)):
        off = 0 if dt == "int8" else 128
        inits = {**qparams("x", 0.1, off, dt), **qparams("y", 1 / 256, qmin, dt)}
        nodes = [helper.make_node("QLinearSoftmax", [x, "x_s", "x_z", "y_s", "y_z"], [f"y_{x}"], domain=MS, opset=13)
                 for x in ("two", "four", "one_big")]
        m = qmodel(nodes, {"two": ((1, 2), dt), "four": ((1, 4), dt), "one_big": ((1, 3), dt)},
                   {n.output[0]: dt for n in nodes}, inits)
        feeds = {"two": np.array([[5, 5]]) + off, "four": np.array([[-7, -7, -7, -7]]) + off,
                 "one_big": np.array([[120, -120, -100]]) + off}
        feeds = {k: v.astype(dt) for k, v in feeds.items()}
        want = [np.array([[qmin + 128] * 2]), np.array([[qmin + 64] * 4]),
                np.array([[qmin + 255, qmin, qmin]])]
        for got, c, w in zip(run_ref(m, feeds, requant="fixed"), run_c(m, feeds, requant="fixed"), want):
            assert_exact(got, w.astype(dt), f"{dt} reference")
            assert_exact(c, w.astype(dt), f"{dt} C")


def test_single_element():
    """A slice of one element is probability 1: the largest code in both
    modes (float mode: t * floor(1/y_scale) overflows float32 to inf, where
    onnxruntime's int conversion is undefined; we saturate)."""
    for dt in ("int8", "uint8"):
        off = 0 if dt == "int8" else 128
        inits = {**qparams("x", 0.0625, off, dt), **qparams("y", 1 / 256, -128 + off, dt),
                 **qparams("w", 0.004, 5, dt)}
        nodes = [helper.make_node("QLinearSoftmax", ["x", "x_s", "x_z", p + "_s", p + "_z"], [p], domain=MS, opset=13)
                 for p in ("y", "w")]
        m = qmodel(nodes, {"x": ((3, 1), dt)}, {"y": dt, "w": dt}, inits)
        feeds = {"x": np.array([[0], [5], [100]], dt)}
        hi = np.iinfo(dt).max
        for mode in ("fixed", "float"):
            for got in run_ref(m, feeds, requant=mode) + run_c(m, feeds, requant=mode):
                assert_exact(got, np.full((3, 1), hi, dt), f"{dt} {mode} single element")


def test_fixed_point_functions():
    """gemmlowp's exp_on_negative_values (Q5.26 -> Q0.31), one_over_one_plus_x
    (Q0.31) and GetReciprocal against the real functions."""
    a = np.concatenate([np.arange(0, -2 ** 31, -(2 ** 31) // 4999), [-1, -2 ** 24, -(2 ** 26) * 16 - 12345]])
    a = a[a > -2 ** 31]
    e = exp_on_negative_values(a)
    want = np.exp(a / 2.0 ** 26) * 2.0 ** 31
    # gemmlowp's 4th-order Taylor polynomial on [-1/4, 0): remainder (1/8)^5 / 5! ~ 2.5e-7
    assert np.abs(e - want).max() < 2 ** 31 * 2.6e-7, np.abs(e - want).max() / 2 ** 31
    assert e[0] == 2 ** 31 - 1
    x = np.arange(0, 2 ** 31, 2 ** 31 // 4999)
    r = one_over_one_plus_x(x)
    assert np.abs(r - 2.0 ** 31 / (1 + x / 2.0 ** 31)).max() < 2 ** 31 * 2e-8
    total = np.array([2 ** 19, 2 ** 19 + 1, 3 * 2 ** 19, 1000 * 2 ** 19 + 12345, 2 ** 30])
    scale, nbou = reciprocal(total)
    got = scale / 2.0 ** 31 / 2.0 ** nbou          # 1 / (total in Q12.19)
    assert np.allclose(got * total / 2.0 ** 19, 1.0, rtol=2e-8, atol=0)


def test_long_rows():
    """TFLM sums the exponentials in Q12.19: a fixed-mode row of more than
    4095 elements is refused with a clear error; the float mode runs it."""
    dt = "int8"
    inits = {**qparams("x", 0.05, 0, dt), **qparams("y", 1 / 256, -128, dt)}
    m = qmodel([helper.make_node("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, opset=13,
                                 name="sm")], {"x": ((1, 5000), dt)}, {"y": dt}, inits)
    with pytest.raises(CuvilError, match=r"'sm'.*softmax over 5000 elements"):
        compile_model(m, requant="fixed")
    x = rand_q(np.random.RandomState(3), (1, 5000), dt)
    assert lsb_diff(run_ref(m, {"x": x}, requant="float")[0], run_ort(m, {"x": x}, optimize=True)[0]) == 0


def test_errors():
    dt = "int8"
    inits = {**qparams("x", 0.05, 0, dt), **qparams("y", 1 / 256, -128, dt), "nan_s": np.float32(np.nan)}
    cases = [
        (helper.make_node("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, name="sm"),
         r"'sm'.*attribute 'opset' is required"),
        (helper.make_node("QLinearSoftmax", ["x", "nan_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, opset=13,
                          name="sm"), r"'sm'.*X scale 'nan_s' must be finite and > 0"),
        (helper.make_node("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, opset=13, axis=2,
                          name="sm"), r"'sm'.*axis 2 out of range for rank 2"),
    ]
    for node, match in cases:
        with pytest.raises(CuvilError, match=match):
            compile_model(qmodel([node], {"x": ((2, 3), dt)}, {"y": dt}, inits))


def test_kws_matches_tflm():
    """MLPerf Tiny keyword spotting (DS-CNN): average pool then softmax, fixed
    mode bit-exact with the TFLM interpreter on the 8 stored samples (C), and
    within onnxruntime's own distance from TFLM (15 LSB: onnxruntime runs the
    softmax in float between Q/DQ) in float mode."""
    d = np.load(f"{MODELS}/kws_dscnn/samples_int8.npz")
    c, out = _run_model_samples(f"{MODELS}/kws_dscnn/model_int8.onnx", d["inputs"], "fixed")
    assert any(n.op_type == "com.microsoft.QLinearSoftmax" for n in c.graph.nodes)
    assert_exact(out, d["expected_tflm"].reshape(out.shape), "KWS: C (fixed) vs TFLM")
    _, out_f = _run_model_samples(f"{MODELS}/kws_dscnn/model_int8.onnx", d["inputs"], "float")
    assert lsb_diff(out_f, d["expected_tflm"].reshape(out.shape)) <= 15
    assert math.isfinite(float(out_f.astype(np.float64).sum()))
