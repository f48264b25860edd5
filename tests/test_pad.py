import numpy as np
import pytest

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ShapeError, UnsupportedOpError
from helpers import check_op, make_model, node, run_c, run_ort, run_ref

RNG = np.random.RandomState(2024)


def _rand(*shape):
    return RNG.randn(*shape).astype(np.float32)


PADS = [
    # shape, pads (begin..., end...), value
    ((5,), [2, 3], 0.0),
    ((5,), [-1, 2], 1.5),
    ((3, 4), [1, 0, 2, 3], -0.75),
    ((3, 4), [0, -1, 0, -2], 0.0),                  # pure crop
    ((3, 4), [-1, 2, 1, -3], 2.0),                  # crop and pad on the same tensor
    ((1, 3, 5, 5), [0, 0, 1, 1, 0, 0, 1, 1], 0.0),  # spatial, as before a Conv
    ((1, 3, 5, 6), [0, 0, 2, 0, 0, 0, 1, 3], -1e30),
    ((2, 3, 4, 5), [1, -1, 0, 2, 0, 1, -2, 1], 3.25),
    ((2, 3, 2, 3, 2), [0, 1, 1, 0, 2, 1, 0, 1, 1, 0], -1.0),
    ((2, 2, 2, 2, 2), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0.0),   # no-op
    ((3, 4), [0, -2, 0, -2], 0.0),                  # crops everything along axis 1: empty
]


@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("shape,pads,value", PADS, ids=[f"{p[0]}-{p[1]}-{p[2]}" for p in PADS])
def test_pad_inputs_form(opset, shape, pads, value):
    m = make_model([node("Pad", ["x", "pads", "v"], ["p"]), node("Concat", ["p", "p"], ["y"], axis=0)],
                   {"x": (shape, "float32")}, ["y"],
                   {"pads": np.array(pads, np.int64), "v": np.array(value, np.float32)}, opset=opset)
    check_op(m, {"x": _rand(*shape)}, rel_c=0, rel_ort=0)


@pytest.mark.parametrize("shape,pads,value", PADS[:9], ids=[f"{p[0]}-{p[1]}" for p in PADS[:9]])
def test_pad_attribute_form_opset2(shape, pads, value):
    m = make_model([node("Pad", ["x"], ["y"], pads=pads, value=value, mode="constant")],
                   {"x": (shape, "float32")}, ["y"], opset=2)
    check_op(m, {"x": _rand(*shape)}, rel_c=0, rel_ort=0)


@pytest.mark.parametrize("opset", [2, 13])
def test_pad_minus_infinity(opset):
    # -inf (the MaxPool padding value) survives as INFINITY in the C; compared exactly
    x = _rand(1, 2, 3, 4)
    pads = [0, 0, 1, 2, 0, 0, 2, 1]
    if opset == 2:
        m = make_model([node("Pad", ["x"], ["y"], pads=pads, value=float("-inf"))],
                       {"x": (x.shape, "float32")}, ["y"], opset=2)
    else:
        m = make_model([node("Pad", ["x", "pads", "v"], ["y"])], {"x": (x.shape, "float32")}, ["y"],
                       {"pads": np.array(pads, np.int64), "v": np.array(-np.inf, np.float32)}, opset=opset)
    ref, ort, c = run_ref(m, {"x": x})[0], run_ort(m, {"x": x})[0], run_c(m, {"x": x})[0]
    np.testing.assert_array_equal(ref, ort)
    np.testing.assert_array_equal(c, ref)
    assert np.isneginf(c).sum() == c.size - x.size


def test_pad_attribute_form_default_value():
    m = make_model([node("Pad", ["x"], ["y"], pads=[1, 0, 0, 2])], {"x": ((2, 3), "float32")}, ["y"], opset=2)
    check_op(m, {"x": _rand(2, 3)}, rel_c=0, rel_ort=0)


def test_pad_without_constant_value_input_pads_zero():
    m = make_model([node("Pad", ["x", "pads"], ["y"])], {"x": ((2, 3, 4), "float32")}, ["y"],
                   {"pads": np.array([0, 1, 2, 1, 0, 1], np.int64)}, opset=13)
    check_op(m, {"x": _rand(2, 3, 4)}, rel_c=0, rel_ort=0)


AXES = [
    ((1, 3, 5, 5), [2, 3], [1, 2, 0, 1]),
    ((1, 3, 5, 5), [-1, -2], [1, -1, 2, 0]),
    ((2, 3, 4), [1], [-1, 3]),
    ((2, 3, 4, 5, 3), [0, 4, 2], [1, 0, 1, 0, 2, -1]),
]


@pytest.mark.parametrize("shape,axes,pads", AXES, ids=[f"{a[0]}-{a[1]}" for a in AXES])
def test_pad_axes_input_opset18(shape, axes, pads):
    m = make_model([node("Pad", ["x", "pads", "v", "axes"], ["y"])], {"x": (shape, "float32")}, ["y"],
                   {"pads": np.array(pads, np.int64), "v": np.array(-4.5, np.float32),
                    "axes": np.array(axes, np.int64)}, opset=18)
    check_op(m, {"x": _rand(*shape)}, rel_c=0, rel_ort=0)


def test_pad_axes_input_without_value():
    m = make_model([node("Pad", ["x", "pads", "", "axes"], ["y"])], {"x": ((2, 3, 4), "float32")}, ["y"],
                   {"pads": np.array([2, 1], np.int64), "axes": np.array([1], np.int64)}, opset=18)
    check_op(m, {"x": _rand(2, 3, 4)}, rel_c=0, rel_ort=0)


def test_pad_int_data_folded_and_runtime():
    # int32 run-time data (4-byte move type, bit pattern of a negative fill value)
    x = RNG.randint(-50, 50, (3, 4)).astype(np.int32)
    m = make_model([node("Pad", ["x", "pads", "v"], ["y"])], {"x": (x.shape, "int32")}, ["y"],
                   {"pads": np.array([1, 0, 0, 2], np.int64), "v": np.array(-7, np.int32)}, opset=13)
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)


@pytest.mark.parametrize("mode,opset", [("reflect", 13), ("edge", 13), ("wrap", 19)])
def test_pad_other_modes_unsupported(mode, opset):
    m = make_model([node("Pad", ["x", "pads"], ["y"], mode=mode)], {"x": ((1, 2, 4, 4), "float32")}, ["y"],
                   {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}, opset=opset)
    with pytest.raises(UnsupportedOpError, match=f"mode '{mode}' is not supported"):
        compile_model(m)


def test_pad_runtime_pads_unsupported():
    m = make_model([node("Pad", ["x", "pads"], ["y"])], {"x": ((2, 3), "float32"), "pads": ((4,), "int64")},
                   ["y"], opset=13)
    with pytest.raises(UnsupportedOpError, match="pads 'pads' must be a constant"):
        compile_model(m)


def test_pad_cropping_too_much_is_a_shape_error():
    from onnx import TensorProto, helper, numpy_helper
    g = helper.make_graph([node("Pad", ["x", "pads"], ["y"])], "bad",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
                          [numpy_helper.from_array(np.array([0, -2, 0, -2], np.int64), "pads")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ShapeError, match="crop more than"):
        compile_model(m)
