import numpy as np
import pytest

from helpers import check_op, make_model, node

RNG = np.random.RandomState(1234)

BROADCASTS = [
    ((2, 3, 4, 5), (2, 3, 4, 5)),
    ((2, 3, 4, 5), (1, 3, 1, 1)),
    ((2, 3, 4, 5), (5,)),
    ((1,), (2, 3, 7)),
    ((3, 1, 5), (1, 4, 1)),
    ((2, 1, 3, 1, 2, 3, 1), (1, 4, 3, 2, 1, 1, 5)),
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("sa,sb", BROADCASTS)
def test_binary_broadcast(op, sa, sb):
    a = RNG.randn(*sa).astype(np.float32)
    b = RNG.randn(*sb).astype(np.float32)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    m = make_model([node(op, ["a", "b"], ["y"])], {"a": (sa, "float32"), "b": (sb, "float32")}, ["y"])
    check_op(m, {"a": a, "b": b})


@pytest.mark.parametrize("const_side", [0, 1])
def test_binary_with_constant_operand(const_side):
    x = RNG.randn(1, 8, 5, 5).astype(np.float32)
    c = RNG.randn(8, 1, 1).astype(np.float32)
    ins = ["x", "c"] if const_side == 1 else ["c", "x"]
    m = make_model([node("Sub", ins, ["y"])], {"x": (x.shape, "float32")}, ["y"], {"c": c})
    check_op(m, {"x": x})


UNARY = [
    ("Relu", {}), ("LeakyRelu", {"alpha": 0.13}), ("Sigmoid", {}), ("Tanh", {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}), ("Erf", {}),
    ("Exp", {}), ("Neg", {}), ("Abs", {}),
]


@pytest.mark.parametrize("op,attrs", UNARY, ids=[u[0] for u in UNARY])
def test_unary(op, attrs):
    x = (RNG.randn(2, 3, 17) * 3).astype(np.float32)
    opset = 14 if op == "HardSwish" else 13
    m = make_model([node(op, ["x"], ["y"], **attrs)], {"x": (x.shape, "float32")}, ["y"], opset=opset)
    check_op(m, {"x": x}, rel_c=2e-6 * 8, rel_ort=1e-5)


def test_sqrt_and_pow():
    x = np.abs(RNG.randn(4, 9)).astype(np.float32) + 0.01
    for e in (2.0, 0.5, 3.0, 1.7, -1.0):
        m = make_model([node("Pow", ["x", "e"], ["y"])], {"x": (x.shape, "float32")}, ["y"],
                       {"e": np.array(e, np.float32)})
        check_op(m, {"x": x}, rel_c=1e-5)
    m = make_model([node("Sqrt", ["x"], ["y"])], {"x": (x.shape, "float32")}, ["y"])
    check_op(m, {"x": x})


def test_clip_bounds_as_inputs_and_attributes():
    x = (RNG.randn(3, 10) * 4).astype(np.float32)
    m = make_model([node("Clip", ["x", "lo", "hi"], ["y"])], {"x": (x.shape, "float32")}, ["y"],
                   {"lo": np.array(-1.5, np.float32), "hi": np.array(2.25, np.float32)})
    check_op(m, {"x": x})
    m = make_model([node("Clip", ["x", "", "hi"], ["y"])], {"x": (x.shape, "float32")}, ["y"],
                   {"hi": np.array(0.5, np.float32)})
    check_op(m, {"x": x})
    m = make_model([node("Clip", ["x"], ["y"], min=-0.5, max=0.75)], {"x": (x.shape, "float32")}, ["y"], opset=6)
    check_op(m, {"x": x})


def test_fused_relu_matches_separate():
    x = RNG.randn(2, 4, 6).astype(np.float32)
    b = RNG.randn(4, 6).astype(np.float32)
    m = make_model([node("Add", ["x", "b"], ["t"]), node("Relu", ["t"], ["y"])],
                   {"x": (x.shape, "float32")}, ["y"], {"b": b})
    ref, c = check_op(m, {"x": x})
    assert (ref[0] >= 0).all() and (ref[0] == 0).any()
