import numpy as np
import pytest

from helpers import check_op, check_strict_builds, make_model, node
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ShapeError

RNG = np.random.RandomState(99)
SHAPE = (2, 3, 4, 5)
AXES = [None, 0, 1, 2, 3, -1, -2, -4]


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", AXES, ids=[f"axis{a}" if a is not None else "default" for a in AXES])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_axis(op, axis, opset):
    # opset 11 flattens to 2-D at axis (default 1), 13 uses one axis (default -1):
    # for axes other than the last the results differ, and onnxruntime checks both.
    attrs = {} if axis is None else {"axis": axis}
    m = make_model([node(op, ["x"], ["y"], **attrs)], {"x": (SHAPE, "float32")}, ["y"], opset=opset)
    check_op(m, {"x": (RNG.randn(*SHAPE) * 3).astype(np.float32)})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((1, 10), -1), ((7,), 0), ((3, 1), 1), ((2, 37, 3), 1)])
def test_softmax_shapes(op, shape, axis):
    m = make_model([node(op, ["x"], ["y"], axis=axis)], {"x": (shape, "float32")}, ["y"], opset=13)
    check_op(m, {"x": RNG.randn(*shape).astype(np.float32)})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_large_inputs_are_stable(op):
    # exp(200) overflows float32: the maximum must be subtracted first.
    x = (RNG.randn(4, 16) * 50 + 200).astype(np.float32)
    m = make_model([node(op, ["x"], ["y"], axis=1)], {"x": (x.shape, "float32")}, ["y"], opset=13)
    ref, c = check_op(m, {"x": x})
    assert np.isfinite(c[0]).all()


def test_in_place():
    # The Add result dies at the Softmax: the Softmax may write over it.
    x = RNG.randn(3, 4, 6).astype(np.float32)
    b = RNG.randn(6).astype(np.float32)
    m = make_model([node("Add", ["x", "b"], ["t"]), node("Softmax", ["t"], ["y"], axis=1)],
                   {"x": (x.shape, "float32")}, ["y"], {"b": b}, opset=13)
    c = compile_model(m)
    assert c.plan.tensor_offset["t"] == c.plan.tensor_offset["y"]
    check_op(m, {"x": x})


def test_axis_out_of_range():
    m = make_model([node("Softmax", ["x"], ["y"], axis=-1)], {"x": ((2, 3), "float32")}, ["y"], opset=13)
    m.graph.node[0].attribute[0].i = 2
    with pytest.raises(ShapeError, match="out of range"):
        compile_model(m)


def test_strict_builds():
    nodes = [node("Softmax", ["x"], ["s"], axis=1), node("LogSoftmax", ["x"], ["l"], axis=-1)]
    m = make_model(nodes, {"x": (SHAPE, "float32")}, ["s", "l"], opset=13)
    check_strict_builds(m, {"x": RNG.randn(*SHAPE).astype(np.float32)})
