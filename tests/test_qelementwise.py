"""int8/uint8 element-wise ops: com.microsoft.QLinearAdd / QLinearMul, the
lookup-table ops (QLinearSigmoid, QLinearLeakyRelu, cuvil.QLut) and
QLinearConcat, in both requantization modes.

Every test checks the generated C against the numpy reference exactly. The
float mode is checked against onnxruntime (graph optimizations on): exact for
QLinearMul, QLinearConcat, QLinearLeakyRelu and QLinearAdd on x86-64 with
AVX2+FMA (onnxruntime's kernel there, which ours reproduces; other CPUs
round the Add differently, so there we allow 1 LSB), at most 1 LSB for
QLinearSigmoid and the other cuvil.QLut functions (onnxruntime evaluates
them with its own approximations in float32, we evaluate the function in
double and round once). The fixed (TFLM) mode is checked against a plain
float computation within 1 LSB, against hand-computed TFLM cases, and
against TFLM's outputs on the ResNet-8 model (three residual Adds).
"""
import math
from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import helper

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import CuvilError
from cuvil_mcu.ops.qelementwise import fma32
from cuvil_mcu.sim import host
from helpers import run_c, run_ort, run_ref
from qhelpers import MS, assert_exact, check_modes, check_strict, lsb_diff, qmodel, qparams, rand_q

MODELS = "/work/shared/models"


def _cpu_has_fma() -> bool:
    try:
        flags = open("/proc/cpuinfo").read().split()
    except OSError:
        return False
    return "fma" in flags and "avx2" in flags


# onnxruntime's QLinearAdd kernel differs per CPU kind; ours reproduces the
# x86-64 AVX2+FMA one (see ops/qelementwise.py), elsewhere they agree within 1 LSB.
ORT_ADD_LSB = 0 if _cpu_has_fma() else 1
ZP = {"int8": (3, -7, 1), "uint8": (130, 120, 128)}
BCASTS = [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (1, 3, 1, 1)), ((1, 3, 1, 1), (2, 3, 4, 5)),
          ((3, 1, 5), (1, 4, 1)), ((1,), (2, 3, 7)), ((2, 7), (1,))]


def _binary_model(op, dt, scales, bcasts=BCASTS):
    za, zb, zc = ZP[dt]
    sa, sb, sc = scales
    inits = {**qparams("a", sa, za, dt), **qparams("b", sb, zb, dt), **qparams("c", sc, zc, dt)}
    nodes, inputs = [], {}
    for i, (shape_a, shape_b) in enumerate(bcasts):
        nodes.append(helper.make_node(op, [f"a{i}", "a_s", "a_z", f"b{i}", "b_s", "b_z", "c_s", "c_z"], [f"y{i}"],
                                      domain=MS, name=f"{op}_{i}"))
        inputs[f"a{i}"], inputs[f"b{i}"] = (shape_a, dt), (shape_b, dt)
    return qmodel(nodes, inputs, {f"y{i}": dt for i in range(len(bcasts))}, inits)


@pytest.mark.parametrize("dt", ["int8", "uint8"])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_broadcast(op, dt):
    rng = np.random.RandomState(11)
    scales = (0.05, 0.031, 0.07) if op == "QLinearAdd" else (0.05, 0.031, 0.02)
    m = _binary_model(op, dt, scales)
    feeds = {}
    for i, (shape_a, shape_b) in enumerate(BCASTS):
        feeds[f"a{i}"], feeds[f"b{i}"] = rand_q(rng, shape_a, dt), rand_q(rng, shape_b, dt)
    (sa, sb, sc), (za, zb, zc) = scales, ZP[dt]
    info = np.iinfo(dt)

    def real(f):   # the exact real-valued result, rounded once
        out = []
        for i in range(len(BCASTS)):
            a = sa * (f[f"a{i}"].astype(np.float64) - za)
            b = sb * (f[f"b{i}"].astype(np.float64) - zb)
            v = a + b if op == "QLinearAdd" else a * b
            out.append(np.clip(np.rint(v / sc) + zc, info.min, info.max))
        return out

    check_modes(m, feeds, ort_lsb=ORT_ADD_LSB if op == "QLinearAdd" else 0, fixed_vs=real, fixed_lsb=1)


def test_add_float_near_ties_matches_onnxruntime():
    """Scales with few mantissa bits put many sums next to .5: this pins the
    float mode's FMA order and the operand swap when A is the broadcast one."""
    rng = np.random.RandomState(5)
    worst, checked = 0, 0
    for trial in range(24):
        dt = "int8" if trial % 2 else "uint8"
        info = np.iinfo(dt)
        sa, sb, sc = (float(rng.randint(1, 64)) / 2.0 ** rng.randint(6, 12) for _ in range(3))
        za, zb, zc = (int(rng.randint(info.min, info.max + 1)) for _ in range(3))
        inits = {**qparams("a", sa, za, dt), **qparams("b", sb, zb, dt), **qparams("c", sc, zc, dt)}
        shapes = [((4, 64), (4, 64)), ((4, 64), (4, 1)), ((4, 1), (4, 64))]
        nodes = [helper.make_node("QLinearAdd", [f"a{i}", "a_s", "a_z", f"b{i}", "b_s", "b_z", "c_s", "c_z"],
                                  [f"y{i}"], domain=MS) for i in range(3)]
        inputs = {}
        for i, (shape_a, shape_b) in enumerate(shapes):
            inputs[f"a{i}"], inputs[f"b{i}"] = (shape_a, dt), (shape_b, dt)
        m = qmodel(nodes, inputs, {f"y{i}": dt for i in range(3)}, inits)
        feeds = {k: rand_q(rng, s, dt) for k, (s, _) in inputs.items()}
        ref = run_ref(m, feeds, requant="float")
        ort = run_ort(m, feeds, optimize=True)
        for r, o in zip(ref, ort):
            worst = max(worst, lsb_diff(r, o))
            checked += r.size
        if trial == 0:   # the C kernel takes the same operand order
            for r, c in zip(ref, run_c(m, feeds, requant="float")):
                assert_exact(c, r, "float mode near ties: C vs reference")
    assert checked == 24 * 3 * 256
    assert worst <= ORT_ADD_LSB, f"float QLinearAdd vs onnxruntime: {worst} LSB"


def _hand_model():
    """Scales that are powers of two, so TFLM's arithmetic can be followed by hand."""
    dt = "int8"
    nodes = [
        helper.make_node("QLinearAdd", ["a", "p7_s", "z_z", "b", "p7_s", "z_z", "p7_s", "z_z"], ["add_same"], domain=MS),
        helper.make_node("QLinearAdd", ["a", "p7_s", "z_z", "b", "p7_s", "z_z", "p6_s", "z_z"], ["add_half"], domain=MS),
        helper.make_node("QLinearMul", ["a", "h_s", "z_z", "b", "h_s", "z_z", "q_s", "z_z"], ["mul_one"], domain=MS),
        helper.make_node("QLinearMul", ["a", "h_s", "z_z", "b", "h_s", "z_z", "h_s", "z_z"], ["mul_half"], domain=MS),
    ]
    inits = {"p7_s": np.float32(2.0 ** -7), "p6_s": np.float32(2.0 ** -6), "h_s": np.float32(0.5),
             "q_s": np.float32(0.25), "z_z": np.int8(0)}
    return qmodel(nodes, {"a": ((6,), dt), "b": ((6,), dt)}, {n.output[0]: dt for n in nodes}, inits)


def test_tflm_hand_computed_cases():
    """TFLM's formulas by hand. Add, sa = sb = sc = 2^-7: twice_max = 2^-6,
    input multipliers 0.5 = (2^30, 0), output 2^-19 = (2^30, -18): a + b
    exactly (saturated). With sc = 2^-6 the output multiplier is (2^30, -19):
    (a + b) / 2 with RoundingDivideByPOT, halves away from zero (2.5 -> 3,
    -2.5 -> -3), where onnxruntime rounds half to even (2, -2).
    Mul, sa = sb = 0.5, sc = 0.25: M = 1 = (2^30, 1): a * b exactly. With
    sc = 0.5, M = 0.5 = (2^30, 0): SaturatingRoundingDoublingHighMul rounds
    halves up (+1.5 -> 2, -1.5 -> -1, 0.5 -> 1, -0.5 -> 0, 2.5 -> 3, its nudge
    1 - 2^30 for negative products), onnxruntime half to even."""
    a = np.array([3, 1, 2, -2, 100, -100], np.int8)
    b = np.array([5, 2, 3, -3, 100, -100], np.int8)
    m = _hand_model()
    feeds = {"a": a, "b": b}
    expect = {
        "fixed": [[8, 3, 5, -5, 127, -128], [4, 2, 3, -3, 100, -100], [15, 2, 6, 6, 127, 127], [8, 1, 3, 3, 127, 127]],
        "float": [[8, 3, 5, -5, 127, -128], [4, 2, 2, -2, 100, -100], [15, 2, 6, 6, 127, 127], [8, 1, 3, 3, 127, 127]],
    }
    a2 = np.array([3, -3, 1, -1, 5, -5], np.int8)
    b2 = np.array([1, 1, 1, 1, 1, 1], np.int8)
    expect_mul_half = {"fixed": [2, -1, 1, 0, 3, -2], "float": [2, -2, 0, 0, 2, -2]}
    for mode in ("fixed", "float"):
        for got, want in zip(run_ref(m, feeds, requant=mode), expect[mode]):
            assert_exact(got, np.array(want, np.int8), f"{mode} hand-computed case")
        for got, want in zip(run_c(m, feeds, requant=mode), expect[mode]):
            assert_exact(got, np.array(want, np.int8), f"{mode} hand-computed case (C)")
        got = run_ref(m, {"a": a2, "b": b2}, requant=mode)[3]
        assert_exact(got, np.array(expect_mul_half[mode], np.int8), f"{mode} Mul rounding of +-x.5")
    ort = run_ort(m, feeds, optimize=True)
    for got, want in zip(ort, expect["float"]):   # the float expectations are onnxruntime's
        assert_exact(got, np.array(want, np.int8), "onnxruntime on the hand-computed case")


def _qdq_add_relu(dt, zp_out):
    """DQ(a) + DQ(b) -> Add -> Relu -> Q: passes/qdq.py fuses the Relu into
    QLinearAdd (TFLM fuses it into ADD the same way) when the output zero
    point is not the type minimum."""
    za, zb, _ = ZP[dt]
    nodes = [helper.make_node("DequantizeLinear", ["a", "a_s", "a_z"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["bf"]),
             helper.make_node("Add", ["af", "bf"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "y_s", "y_z"], ["y"])]
    inits = {**qparams("a", 0.05, za, dt), **qparams("b", 0.031, zb, dt), **qparams("y", 0.04, zp_out, dt)}
    return qmodel(nodes, {"a": ((3, 16), dt), "b": ((3, 16), dt)}, {"y": dt}, inits)


@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_fused_relu(dt):
    zp_out = 10 if dt == "int8" else 138
    m = _qdq_add_relu(dt, zp_out)
    rng = np.random.RandomState(3)
    feeds = {"a": rand_q(rng, (3, 16), dt), "b": rand_q(rng, (3, 16), dt)}
    g = compile_model(m).graph
    adds = [n for n in g.nodes if n.op_type == "com.microsoft.QLinearAdd"]
    assert len(adds) == 1 and adds[0].act == (0.0, math.inf), [(n.op_type, n.act) for n in g.nodes]
    # onnxruntime runs Add, Relu and Q in float here: within 1 LSB of our float mode
    res = check_modes(m, feeds, ort_lsb=1)
    for mode, (y,) in res.items():
        assert y.min() == zp_out, f"{mode}: the clamp at real 0 (code {zp_out}) is missing: min {y.min()}"


# --------------------------------------------------------------------------- lookup tables

LUT_PARAMS = [(0.05, 0.0039, 0, -128), (0.11, 0.02, 17, 3), (0.013, 0.0071, -40, -100)]


def _lut_model(dt, ops):
    inits = {}
    nodes = []
    for i, (xs, ys, xz, yz) in enumerate(LUT_PARAMS):
        if dt == "uint8":
            xz, yz = xz + 128, yz + 128
        inits.update(qparams(f"x{i}", xs, xz, dt))
        inits.update(qparams(f"y{i}", ys, yz, dt))
        for op, attrs in ops:
            domain = "cuvil" if op == "QLut" else MS
            nodes.append(helper.make_node(op, ["x", f"x{i}_s", f"x{i}_z", f"y{i}_s", f"y{i}_z"],
                                          [f"{op}_{i}_{attrs.get('fn', '')}"], domain=domain, **attrs))
    return qmodel(nodes, {"x": ((256,), dt)}, {n.output[0]: dt for n in nodes}, inits)


def _all_codes(dt):
    info = np.iinfo(dt)
    return np.arange(info.min, info.max + 1).astype(dt)


@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_sigmoid_leaky_relu_tables(dt):
    """All 256 codes, three parameter sets. LeakyRelu is exact against
    onnxruntime; Sigmoid is held to 1 LSB (onnxruntime's MlasComputeLogistic
    is a rational approximation; no difference was seen on these cases)."""
    m = _lut_model(dt, [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.13})])
    feeds = {"x": _all_codes(dt)}
    ref = check_modes(m, feeds, ort_lsb=None)
    assert all(np.array_equal(f, x) for f, x in zip(ref["fixed"], ref["float"])), "tables differ between modes"
    ort = run_ort(m, feeds, optimize=True)
    for r, o, name in zip(ref["float"], ort, [o.name for o in m.graph.output]):
        assert lsb_diff(r, o) <= (1 if "Sigmoid" in name else 0), f"{name}: {lsb_diff(r, o)} LSB from onnxruntime"
    # the table is the float function, quantized
    xs, ys, xz, yz = LUT_PARAMS[0]
    if dt == "uint8":
        xz, yz = xz + 128, yz + 128
    x = xs * (feeds["x"].astype(np.float64) - xz)
    info = np.iinfo(dt)
    want = np.clip(np.rint(1 / (1 + np.exp(-x)) / ys) + yz, info.min, info.max)
    assert lsb_diff(ref["float"][0], want) <= 1


# cuvil.QLut function -> (node attributes, the ONNX float op that computes it, its attributes, opset)
QLUT_CASES = {
    "identity": ({}, "Identity", {}),
    "relu": ({}, "Relu", {}),
    "leaky_relu": ({"alpha": 0.2}, "LeakyRelu", {"alpha": 0.2}),
    "sigmoid": ({}, "Sigmoid", {}),
    "tanh": ({}, "Tanh", {}),
    "hardsigmoid": ({"alpha": 0.3, "beta": 0.4}, "HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    "hardswish": ({}, "HardSwish", {}),
    "gelu": ({}, "Gelu", {}),
    "erf": ({}, "Erf", {}),
    "exp": ({}, "Exp", {}),
    "elu": ({"alpha": 0.7}, "Elu", {"alpha": 0.7}),
    "selu": ({}, "Selu", {}),
    "softplus": ({}, "Softplus", {}),
    "softsign": ({}, "Softsign", {}),
    "abs": ({}, "Abs", {}),
    "neg": ({}, "Neg", {}),
    "sqrt": ({}, "Sqrt", {}),
    "log": ({}, "Log", {}),
    "sin": ({}, "Sin", {}),
    "cos": ({}, "Cos", {}),
}


def test_qlut_functions_vs_onnxruntime():
    """cuvil.QLut (what passes/qdq.py makes of a unary op between DQ and Q)
    against onnxruntime running DQ -> op -> Q in float: at most 1 LSB over
    all 256 codes (onnxruntime's float32 tanh/erf/exp... versus ours in
    double rounded once), with sqrt/log of negative codes (NaN) giving the
    lowest code in both."""
    dt = "int8"
    xs, xz, ys, yz = 0.04, -20, 0.021, 5
    inits = {**qparams("x", xs, xz, dt), **qparams("y", ys, yz, dt)}
    nodes, twin = [], [helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"])]
    for name, (attrs, op, op_attrs) in QLUT_CASES.items():
        nodes.append(helper.make_node("QLut", ["x", "x_s", "x_z", "y_s", "y_z"], [name], domain="cuvil",
                                      fn=name, **attrs))
        twin += [helper.make_node(op, ["xf"], [f"{name}_f"], **op_attrs),
                 helper.make_node("QuantizeLinear", [f"{name}_f", "y_s", "y_z"], [name])]
    outs = {name: dt for name in QLUT_CASES}
    m = qmodel(nodes, {"x": ((256,), dt)}, outs, inits)
    m_twin = qmodel(twin, {"x": ((256,), dt)}, outs, inits, opset=20)
    feeds = {"x": _all_codes(dt)}
    ref = check_modes(m, feeds, ort_lsb=None, modes=("float",))["float"]
    for name, r, o in zip(QLUT_CASES, ref, run_ort(m_twin, feeds, optimize=False)):
        assert lsb_diff(r, o) <= 1, f"QLut fn={name}: {lsb_diff(r, o)} LSB from onnxruntime's float {name}"


def test_qlut_clip_and_relu6():
    dt = "uint8"
    inits = {**qparams("x", 0.05, 128, dt), **qparams("y", 0.03, 0, dt)}
    nodes = [helper.make_node("QLut", ["x", "x_s", "x_z", "y_s", "y_z"], ["clip"], domain="cuvil", fn="clip",
                              lo=-0.5, hi=1.25),
             helper.make_node("QLut", ["x", "x_s", "x_z", "y_s", "y_z"], ["relu6"], domain="cuvil", fn="relu6")]
    m = qmodel(nodes, {"x": ((256,), dt)}, {"clip": dt, "relu6": dt}, inits)
    x = _all_codes(dt)
    real = 0.05 * (x.astype(np.float64) - 128)
    clip, relu6 = check_modes(m, {"x": x}, ort_lsb=None)["fixed"]
    assert_exact(clip, np.clip(np.rint(np.clip(real, -0.5, 1.25) / 0.03), 0, 255).astype(dt), "clip table")
    assert_exact(relu6, np.clip(np.rint(np.clip(real, 0, 6) / 0.03), 0, 255).astype(dt), "relu6 table")


# --------------------------------------------------------------------------- concat

@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_concat(dt):
    """Input 0 shares the output's parameters (a plain copy), inputs 1 and 2
    are requantized; three axes."""
    rng = np.random.RandomState(7)
    off = 0 if dt == "int8" else 128
    inits = {**qparams("y", 0.05, 3 + off, dt), **qparams("a", 0.05, 3 + off, dt),
             **qparams("b", 0.031, -7 + off, dt), **qparams("c", 0.2, 10 + off, dt)}
    cases = [(1, [(2, 3, 4), (2, 5, 4), (2, 1, 4)]), (-1, [(3, 2), (3, 7), (3, 1)]), (0, [(2, 3), (1, 3), (4, 3)])]
    nodes, inputs = [], {}
    for i, (axis, shapes) in enumerate(cases):
        ins = ["y_s", "y_z"]
        for j, (p, s) in enumerate(zip("abc", shapes)):
            inputs[f"{p}{i}"] = (s, dt)
            ins += [f"{p}{i}", f"{p}_s", f"{p}_z"]
        nodes.append(helper.make_node("QLinearConcat", ins, [f"y{i}"], domain=MS, axis=axis))
    m = qmodel(nodes, inputs, {f"y{i}": dt for i in range(len(cases))}, inits)
    feeds = {k: rand_q(rng, s, dt) for k, (s, _) in inputs.items()}
    info = np.iinfo(dt)

    def real(f):
        out = []
        for i, (axis, _) in enumerate(cases):
            parts = [np.clip(np.rint(s * (f[f"{p}{i}"].astype(np.float64) - z) / 0.05) + 3 + off, info.min, info.max)
                     for p, s, z in (("a", 0.05, 3 + off), ("b", 0.031, -7 + off), ("c", 0.2, 10 + off))]
            out.append(np.concatenate(parts, axis=axis))
        return out

    res = check_modes(m, feeds, ort_lsb=0, fixed_vs=real, fixed_lsb=1)
    for mode in res:   # the copied input is untouched
        assert_exact(res[mode][0][:, :3], feeds["a0"], f"{mode}: copied input")


def test_concat_fused_relu_clamps_copies_too():
    dt = "int8"
    nodes = [helper.make_node("DequantizeLinear", ["a", "y_s", "y_z"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["bf"]),
             helper.make_node("Concat", ["af", "bf"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "y_s", "y_z"], ["y"])]
    inits = {**qparams("y", 0.05, -20, dt), **qparams("b", 0.02, 4, dt)}
    m = qmodel(nodes, {"a": ((2, 5), dt), "b": ((2, 3), dt)}, {"y": dt}, inits)
    rng = np.random.RandomState(2)
    feeds = {"a": rand_q(rng, (2, 5), dt), "b": rand_q(rng, (2, 3), dt)}
    g = compile_model(m).graph
    assert [n.op_type for n in g.nodes] == ["com.microsoft.QLinearConcat"] and g.nodes[0].act == (0.0, math.inf)
    res = check_modes(m, feeds, ort_lsb=0)   # onnxruntime: float Concat, Relu, Q: the same rounding
    for mode, (y,) in res.items():
        assert y.min() >= -20 and (y == -20).any(), f"{mode}: relu clamp"


# --------------------------------------------------------------------------- errors

def _add_with(inits_override=None, b_dtype="int8", drop=None):
    inits = {**qparams("a", 0.05, 3, "int8"), **qparams("b", 0.031, -7 if b_dtype == "int8" else 7, b_dtype), **qparams("c", 0.07, 1, "int8")}
    inits.update(inits_override or {})
    n = helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["y"], domain=MS,
                         name="the_add")
    return qmodel([n], {"a": ((2, 3), "int8"), "b": ((2, 3), b_dtype)}, {"y": "int8"}, inits)


@pytest.mark.parametrize("bad,match", [
    ({"b_s": np.float32(0.0)}, r"the_add.*B scale 'b_s' must be finite and > 0"),
    ({"b_s": np.float32(-0.5)}, r"the_add.*'b_s' must be finite and > 0"),
    ({"c_s": np.float32(np.nan)}, r"the_add.*C scale 'c_s' must be finite"),
    ({"a_s": np.array([0.1, 0.2], np.float32)}, r"the_add.*'a_s' has 2 values"),
    ({"a_z": np.uint8(3)}, r"the_add.*zero point 'a_z' is uint8; its tensor is int8"),
])
def test_bad_quant_params(bad, match):
    with pytest.raises(CuvilError, match=match):
        compile_model(_add_with(bad))


def test_bad_inputs():
    with pytest.raises(CuvilError, match=r"the_add.*A 'a' is int8 but B 'b' is uint8"):
        compile_model(_add_with(b_dtype="uint8"))
    n = helper.make_node("QLut", ["x", "x_s", "x_z", "x_s", "x_z"], ["y"], domain="cuvil", fn="cube", name="lut")
    m = qmodel([n], {"x": ((4,), "int8")}, {"y": "int8"}, qparams("x", 0.1, 0, "int8"))
    with pytest.raises(CuvilError, match=r"lut.*fn 'cube' is not a known unary function"):
        compile_model(m)
    n = helper.make_node("QLinearSigmoid", ["x", "s", "x_z", "x_s", "x_z"], ["y"], domain=MS, name="sig")
    m = qmodel([n], {"x": ((4,), "int8"), "s": ((), "float32")}, {"y": "int8"}, qparams("x", 0.1, 0, "int8"))
    with pytest.raises(CuvilError, match=r"sig.*X scale 's' is computed at run time"):
        compile_model(m)
    n = helper.make_node("QLinearConcat", ["x_s", "x_z", "x", "x_s", "x_z", "f", "x_s", "x_z"], ["y"],
                         domain=MS, axis=0, name="cat")
    m = qmodel([n], {"x": ((4,), "int8"), "f": ((4,), "float32")}, {"y": "int8"}, qparams("x", 0.1, 0, "int8"))
    with pytest.raises(CuvilError, match=r"cat.*input 1 'f' is float32; expected int8 or uint8"):
        compile_model(m)


# --------------------------------------------------------------------------- helpers, builds, models

def _exact_fma32(x, y, z) -> np.float32:
    """Correctly rounded float32 fma by rational arithmetic (round half even)."""
    v = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    r = np.float32(float(v))          # nearest double, then float: may double-round, so
    cands = [np.nextafter(r, np.float32(-np.inf)), r, np.nextafter(r, np.float32(np.inf))]   # look around
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - v), int(np.float32(c).view(np.int32)) & 1))


def test_fma32_is_correctly_rounded():
    rng = np.random.RandomState(9)
    x = rng.randint(-255, 256, 400).astype(np.float32)
    y = (rng.randint(1, 2 ** 12, 400) / 2.0 ** rng.randint(5, 20, 400)).astype(np.float32)
    z = (rng.randint(-2 ** 20, 2 ** 20, 400) / 2.0 ** rng.randint(5, 30, 400)).astype(np.float32)
    # x * y + z = a float32 midpoint -+ 2^-46: rounding the double sum to float
    # would land on the midpoint and pick the even neighbour, the wrong one
    e = np.float32(2.0 ** -23)
    x[:2] = [1 + e, -(1 + e)]
    y[:2] = [1 - e, 1 - e]
    z[:2] = [2.0 ** 24 + 2, 2.0 ** 24 + 6]
    naive = (x[:2].astype(np.float64) * y[:2] + z[:2]).astype(np.float32)
    assert list(naive) == [2.0 ** 24 + 4, 2.0 ** 24 + 4]
    got = fma32(x, y, z)
    assert list(got[:2]) == [2.0 ** 24 + 2, 2.0 ** 24 + 6]
    for i in range(400):
        assert got[i] == _exact_fma32(x[i], y[i], z[i]), (x[i], y[i], z[i], got[i])


def _triple(p, dt):
    return [f"{p}{dt}", f"{p}{dt}_s", f"{p}{dt}_z"]


def test_strict_builds_all_ops():
    """Every kernel of this family (int8 and uint8, both modes) in one model:
    warning-free under -Wall -Wextra -Werror -pedantic as C99, C11 and C++,
    gcc and clang, and clean under the sanitizers; outputs exact."""
    rng = np.random.RandomState(4)
    nodes, inputs, inits, outs = [], {}, {}, {}
    for dt, off in (("int8", 0), ("uint8", 128)):
        for p, s, z in (("a", 0.05, 3), ("b", 0.031, -7), ("c", 0.07, 1), ("sm", 1 / 256, -128)):
            inits.update(qparams(f"{p}{dt}", s, z + off, dt))
        A, B = _triple("a", dt), _triple("b", dt)
        C, SM = _triple("c", dt)[1:], _triple("sm", dt)[1:]
        inputs[A[0]], inputs[B[0]] = ((2, 3, 4, 5), dt), ((1, 3, 1, 5), dt)
        specs = [
            ("QLinearAdd", MS, A + B + C, {}), ("QLinearMul", MS, A + B + C, {}),
            ("QLinearSigmoid", MS, A + C, {}), ("QLinearLeakyRelu", MS, A + C, {"alpha": 0.1}),
            ("QLut", "cuvil", A + C, {"fn": "tanh"}),
            ("QLinearConcat", MS, C + A + [A[0]] + B[1:], {"axis": 1}),
            ("QLinearAveragePool", MS, A + A[1:], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
            ("QLinearAveragePool", MS, A + C, {"kernel_shape": [2, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
            ("QLinearAveragePool", MS, A + C, {"kernel_shape": [4, 5]}),
            ("QLinearGlobalAveragePool", MS, A + A[1:], {}),
            ("QLinearGlobalAveragePool", MS, A + C, {"channels_last": 1}),
            ("QMaxPool", "cuvil", A[:1], {"kernel_shape": [2, 2], "strides": [2, 1], "pads": [0, 1, 1, 0]}),
            ("QLinearSoftmax", MS, A + SM, {"opset": 13, "axis": -1}),
            ("QLinearSoftmax", MS, A + C, {"opset": 13, "axis": 1}),
        ]
        for i, (op, dom, ins, attrs) in enumerate(specs):
            name = f"{op}_{dt}_{i}"
            nodes.append(helper.make_node(op, ins, [name], domain=dom, **attrs))
            outs[name] = dt
    m = qmodel(nodes, inputs, outs, inits)
    feeds = {k: rand_q(rng, s, d) for k, (s, d) in inputs.items()}
    check_strict(m, feeds)


def _run_model_samples(path, inputs, requant):
    """The generated C of a model file on all samples (one build)."""
    c = compile_model(path, requant=requant)
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    x = np.asarray(inputs, g.tensors[g.inputs[0]].dtype).reshape((len(inputs),) + g.tensors[g.inputs[0]].shape)
    return c, host.run(exe, [x], c.out_specs, len(inputs))[0]


def test_resnet8_residual_adds_match_tflm():
    """MLPerf Tiny ResNet-8 (three residual QLinearAdds, average pool,
    softmax) in fixed mode: bit-exact with the TFLM interpreter's outputs on
    all 8 stored samples, reference and C."""
    d = np.load(f"{MODELS}/ic_resnet8/samples_int8.npz")
    c, out = _run_model_samples(f"{MODELS}/ic_resnet8/model_int8.onnx", d["inputs"], "fixed")
    assert sum(n.op_type == "com.microsoft.QLinearAdd" for n in c.graph.nodes) == 3
    want = d["expected_tflm"].reshape(out.shape)
    assert_exact(out, want, "ResNet-8 C vs TFLM")
    from cuvil_mcu import reference
    g = c.graph
    for i in range(len(d["inputs"])):
        r = reference.run(g, {g.inputs[0]: d["inputs"][i].reshape(g.tensors[g.inputs[0]].shape)})
        assert_exact(r[g.outputs[0]].reshape(want[i].shape), want[i], f"ResNet-8 reference vs TFLM, sample {i}")


# ---- the specialised same-shape fixed-mode QLinearAdd (qadd_s8) ----

# (sa, sb, sc, za, zb, zc): equal scales (per-input shift 0 on both), a 2x
# ratio (shift exactly -1 on the smaller), wide ratios (deep input shifts),
# output scales far below and above the inputs', zero points at the code
# range ends.
QADD_CASES = [
    (0.05, 0.05, 0.05, 0, 0, 0),
    (0.1, 0.05, 0.07, 3, -7, 1),
    (0.0371, 0.0021, 0.09, -128, 127, -5),
    (0.0125, 0.3, 0.011, 100, -100, 127),
    (0.02, 0.0199, 0.25, -3, 5, -128),
    (0.0049, 0.0052, 0.0031, 17, -60, 40),
]


def _add_all_pairs_model(dt, case):
    sa, sb, sc, za, zb, zc = case
    inits = {**qparams("a", sa, za, dt), **qparams("b", sb, zb, dt), **qparams("c", sc, zc, dt)}
    nodes = [helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["y"],
                              domain=MS, name="add")]
    codes = np.arange(256).astype(np.uint8).view(np.int8).astype(dt) if dt == "int8" \
        else np.arange(256).astype(dt)
    a, b = np.meshgrid(codes, codes, indexing="ij")
    shape = (1, 256, 256)
    m = qmodel(nodes, {"a": (shape, dt), "b": (shape, dt)}, {"y": dt}, inits)
    return m, {"a": a.reshape(shape), "b": b.reshape(shape)}


@pytest.mark.parametrize("case", QADD_CASES)
def test_qadd_fast_all_pairs(case):
    """All 256 x 256 input pairs: the specialised kernel (generated C on the
    host) equals the reference recipe exactly, and TFLM's recipe is written
    out again here (MultiplyByQuantizedMultiplier with left shift 20) as the
    independent oracle of the reference."""
    from cuvil_mcu import quant
    from cuvil_mcu.ops.qelementwise import add_fixed_params
    dt = "int8"
    m, feeds = _add_all_pairs_model(dt, case)
    c = compile_model(m, requant="fixed")
    assert "qadd_s8" in c.header, "the same-shape fixed-mode Add did not take the specialised kernel"
    ref = run_ref(m, feeds, requant="fixed")[0]
    out = run_c(m, feeds, requant="fixed")[0]
    assert_exact(out, ref, "qadd_s8 vs reference")
    sa, sb, sc, za, zb, zc = case
    m1, s1, m2, s2, mo, so = add_fixed_params(np.float32(sa), np.float32(sb), np.float32(sc))
    a64, b64 = feeds["a"].astype(np.int64), feeds["b"].astype(np.int64)
    v = quant.requantize_fixed((a64 - za) * (1 << 20), m1, s1) + quant.requantize_fixed((b64 - zb) * (1 << 20), m2, s2)
    tflm = np.clip(quant.requantize_fixed(v, mo, so) + zc, -128, 127)
    assert_exact(ref.astype(np.int64), tflm, "reference vs TFLM's recipe")


def test_qadd_fast_random_scales():
    """Many random scale / zero point triples through the compile-time plan
    (add_fast_plan verifies itself on all pairs); a sample of them also
    through the generated C. Counts how many take the fast kernel."""
    from cuvil_mcu.ops.qelementwise import add_fast_plan, add_fixed_params
    rng = np.random.RandomState(5)
    fast = 0
    for i in range(60):
        sa, sb, sc = np.exp(rng.uniform(-6, 0, 3)).astype(np.float32)
        za, zb, zc = (int(z) for z in rng.randint(-128, 128, 3))
        fast += add_fast_plan("int8", za, zb, zc, add_fixed_params(sa, sb, sc), -128, 127) is not None
        if i < 3:
            m, feeds = _add_all_pairs_model("int8", (float(sa), float(sb), float(sc), za, zb, zc))
            assert_exact(run_c(m, feeds, requant="fixed")[0], run_ref(m, feeds, requant="fixed")[0],
                         f"case {i}: generated C vs reference")
    print(f"\n{fast}/60 random int8 Adds take the specialised kernel")
    assert fast >= 55


def test_qadd_fast_strict():
    """The specialised kernel builds warning-free as C99/C11/C++ with sanitizers."""
    m, feeds = _add_all_pairs_model("int8", QADD_CASES[1])
    check_strict(m, feeds, modes=("fixed",))


@pytest.mark.skipif(not __import__("shutil").which("qemu-system-arm"), reason="qemu-system-arm not installed")
def test_qadd_fast_instructions_an386():
    """Instructions per element of a same-shape int8 Add on Cortex-M4 (QEMU
    mps2-an386, -icount counts are exact and repeatable): <= 25."""
    from cuvil_mcu.sim import qemu
    rng = np.random.RandomState(3)
    dt, n = "int8", 4096
    sa, sb, sc, za, zb, zc = QADD_CASES[1]
    inits = {**qparams("a", sa, za, dt), **qparams("b", sb, zb, dt), **qparams("c", sc, zc, dt)}
    node = helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["y"],
                            domain=MS, name="add")
    m = qmodel([node], {"a": ((1, n), dt), "b": ((1, n), dt)}, {"y": dt}, inits)
    c = compile_model(m, board="qemu-mps2-an386", requant="fixed")
    feeds = {"a": rand_q(rng, (2, 1, n), dt), "b": rand_q(rng, (2, 1, n), dt)}
    r = qemu.simulate(c, [feeds[k] for k in c.graph.inputs], "qemu-mps2-an386")
    ref = np.stack([run_ref(m, {"a": feeds["a"][i], "b": feeds["b"][i]}, requant="fixed")[0] for i in range(2)])
    assert np.array_equal(r.outputs[0].reshape(ref.shape), ref)
    per = r.instructions / n
    print(f"\nsame-shape int8 QLinearAdd on an386: {per:.2f} instructions/element")
    assert per <= 25


def test_qadd_fast_64bit_multiply_path(monkeypatch):
    """The kernel's 64-bit multiply-add form (taken when the constant parts
    scaled for the SMMULR form would overflow int32; no QADD_CASES case
    needs it) equals the reference on all pairs too."""
    from cuvil_mcu.ops import qelementwise as qe
    real = qe.add_fast_plan

    def no_mmr(*a, **kw):
        plan = real(*a, **kw)
        if plan is not None:
            plan["mmr"] = False
        return plan
    monkeypatch.setattr(qe, "add_fast_plan", no_mmr)
    m, feeds = _add_all_pairs_model("int8", QADD_CASES[2])
    c = compile_model(m, requant="fixed")
    assert "smmulr" not in c.header and "qadd_s8" in c.header
    assert_exact(run_c(m, feeds, requant="fixed")[0], run_ref(m, feeds, requant="fixed")[0], "64-bit form")


@pytest.mark.skipif(not __import__("shutil").which("qemu-system-arm"), reason="qemu-system-arm not installed")
@pytest.mark.parametrize("case", [QADD_CASES[1], QADD_CASES[3]])
def test_qadd_fast_all_pairs_on_m4(case):
    """All 256 x 256 input pairs through the DSP board's Add (qadd_mla_dsp:
    SMLABB or MLA, SSAT with the shift) on an emulated Cortex-M4
    (mps2-an386): equal to the reference."""
    from cuvil_mcu.sim import qemu
    m, feeds = _add_all_pairs_model("int8", case)
    c = compile_model(m, board="qemu-mps2-an386", requant="fixed")
    assert "__qadd_mla_dsp_" in c.header
    r = qemu.simulate(c, [feeds[k][None] for k in c.graph.inputs], "qemu-mps2-an386")
    ref = run_ref(m, feeds, requant="fixed")[0]
    assert_exact(r.outputs[0].reshape(ref.shape), ref, "qadd_s8 on an386 vs reference")
