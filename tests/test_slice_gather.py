import numpy as np
import pytest

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ShapeError, UnsupportedOpError
from helpers import check_op, make_model, node

RNG = np.random.RandomState(99)
I64_MAX, I64_MIN = 2 ** 63 - 1, -(2 ** 63)
I32_MIN = -(2 ** 31)


def _rand(*shape):
    return RNG.randn(*shape).astype(np.float32)


SLICES_V10 = [
    # shape, starts, ends, axes, steps
    ((10,), [2], [7], None, None),
    ((10,), [-3], [I64_MAX], None, None),
    ((10,), [-1], [I64_MIN], None, [-1]),                 # full reverse
    ((10,), [8], [1], None, [-3]),
    ((10,), [-100], [100], [0], [3]),                     # clamped both ends
    ((4, 7), [1, -5], [3, -1], [0, 1], None),
    ((4, 7), [0], [I64_MAX], [-1], [2]),
    ((4, 7), [3, 6], [I32_MIN, 0], [0, 1], [-2, -2]),
    ((1, 6, 5, 5), [1, 1], [5, 4], [1, 3], None),
    ((1, 6, 5, 5), [-1, 0], [-7, 5], [-3, -1], [-1, 2]),
    ((2, 3, 4, 5, 6), [1, 2, 0], [3, -1, 100], [4, 2, 0], [1, 1, 1]),
    ((2, 3, 4, 5, 6), [5, -2], [-100, -5], [-1, 1], [-2, -1]),
    ((3, 5, 4), [10], [-100], [1], [-1]),                 # start clamped to dim-1
    ((3, 5, 4), [-100], [3], [2], [-1]),                  # start clamped to 0, empty range
    ((2, 3, 4, 5, 6, 7), [1, 2, 3], [2, 0, 7], [1, 3, 5], [1, -1, 2]),
]


@pytest.mark.parametrize("opset", [10, 13])
@pytest.mark.parametrize("shape,starts,ends,axes,steps", SLICES_V10,
                         ids=[f"{s[0]}-{s[1]}-{s[2]}-{s[3]}-{s[4]}" for s in SLICES_V10])
def test_slice_inputs_form(opset, shape, starts, ends, axes, steps):
    ins = ["x", "starts", "ends"]
    inits = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64)}
    if axes is not None or steps is not None:
        ins.append("axes" if axes is not None else "")
        if axes is not None:
            inits["axes"] = np.array(axes, np.int64)
    if steps is not None:
        ins.append("steps")
        inits["steps"] = np.array(steps, np.int64)
    x = _rand(*shape)
    # the slice feeds a Concat with itself so an empty slice is also exercised inside a graph
    m = make_model([node("Slice", ins, ["s"]), node("Concat", ["s", "s"], ["y"], axis=0)],
                   {"x": (shape, "float32")}, ["y"], inits, opset=opset)
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)


def test_slice_int32_bounds():
    x = _rand(5, 6)
    m = make_model([node("Slice", ["x", "s", "e", "a", "st"], ["y"])], {"x": (x.shape, "float32")}, ["y"],
                   {"s": np.array([4, -2], np.int32), "e": np.array([0, 2 ** 31 - 1], np.int32),
                    "a": np.array([0, 1], np.int32), "st": np.array([-2, 1], np.int32)})
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)


SLICES_V1 = [
    ((10,), [2], [-2], None),
    ((4, 7), [1, 2], [100, -1], None),
    ((4, 7, 3), [-2], [I64_MAX], [1]),
    ((2, 6, 5, 5), [1, 0, 1], [4, 3, 5], [1, 2, 3]),
]


@pytest.mark.parametrize("shape,starts,ends,axes", SLICES_V1, ids=[f"{s[0]}-{s[3]}" for s in SLICES_V1])
def test_slice_attribute_form_opset9(shape, starts, ends, axes):
    attrs = {"starts": starts, "ends": ends}
    if axes is not None:
        attrs["axes"] = axes
    m = make_model([node("Slice", ["x"], ["y"], **attrs)], {"x": (shape, "float32")}, ["y"], opset=9)
    check_op(m, {"x": _rand(*shape)}, rel_c=0, rel_ort=0)


def test_slice_runtime_bounds_unsupported():
    m = make_model([node("Slice", ["x", "s", "e"], ["y"])],
                   {"x": ((4, 5), "float32"), "s": ((1,), "int64")}, ["y"], {"e": np.array([3], np.int64)})
    with pytest.raises(UnsupportedOpError, match="starts 's' must be a constant"):
        compile_model(m)


def test_slice_step_zero_is_a_shape_error():
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.array(v, np.int64), k)
             for k, v in {"s": [0], "e": [3], "a": [0], "st": [0]}.items()]
    g = helper.make_graph([node("Slice", ["x", "s", "e", "a", "st"], ["y"])], "bad",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ShapeError, match="step 0"):
        compile_model(m)


# --- Gather ----------------------------------------------------------------

GATHERS = [
    # shape, axis, indices (constant)
    ((7,), 0, np.array(3)),                       # scalar index: rank 0 output
    ((7,), 0, np.array([6, 0, -1, 2])),
    ((5, 4), 0, np.array(-2)),
    ((5, 4), 1, np.array([[3, 0], [1, -4]])),
    ((5, 4), -1, np.array([0, 1, 2])),            # a range: strided copy
    ((2, 6, 3), 1, np.array([5, 3, 1])),          # reversed progression
    ((2, 6, 3), 1, np.array([2, 2, 2])),          # repeated: stride 0
    ((2, 6, 3), -2, np.array([[1], [4]])),
    ((1, 3, 4, 5), 1, np.array(1)),
    ((1, 3, 4, 5), 3, np.array([4, 0, 3])),
    ((2, 3, 4, 5, 3), 2, np.array([[-1, 0, 2]])),
    ((2, 3, 4, 5, 3), 0, np.array(1)),
]


@pytest.mark.parametrize("idx_dtype", ["int64", "int32"])
@pytest.mark.parametrize("shape,axis,idx", GATHERS, ids=[f"{g[0]}-ax{g[1]}-{g[2].tolist()}" for g in GATHERS])
def test_gather_constant_indices(idx_dtype, shape, axis, idx):
    m = make_model([node("Gather", ["x", "i"], ["y"], axis=axis)], {"x": (shape, "float32")}, ["y"],
                   {"i": idx.astype(idx_dtype)})
    ref, _ = check_op(m, {"x": _rand(*shape)}, rel_c=0, rel_ort=0)
    assert ref[0].shape == shape[:axis % len(shape)] + idx.shape + shape[axis % len(shape) + 1:]


def test_gather_opset1_default_axis():
    m = make_model([node("Gather", ["x", "i"], ["y"])], {"x": ((4, 3), "float32")}, ["y"],
                   {"i": np.array([3, 1], np.int64)}, opset=1)
    check_op(m, {"x": _rand(4, 3)}, rel_c=0, rel_ort=0)


def test_gather_runtime_indices_unsupported():
    m = make_model([node("Gather", ["x", "i"], ["y"], axis=0)],
                   {"x": ((4, 3), "float32"), "i": ((2,), "int64")}, ["y"])
    with pytest.raises(UnsupportedOpError, match="indices 'i' are computed at run time"):
        compile_model(m)
    # an embedding lookup (constant table, run-time ids) is refused the same way
    m = make_model([node("Gather", ["t", "i"], ["y"], axis=0)], {"i": ((2,), "int64")}, ["y"],
                   {"t": _rand(10, 3)})
    with pytest.raises(UnsupportedOpError, match="indices 'i' are computed at run time"):
        compile_model(m)


def test_gather_index_out_of_range_is_a_shape_error():
    m = make_model([node("Gather", ["x", "i"], ["y"], axis=1)], {"x": ((4, 3), "float32")}, ["y"],
                   {"i": np.array([0, 3], np.int64)})
    with pytest.raises(ShapeError, match="index 3 out of range for axis 1 of size 3"):
        compile_model(m)
