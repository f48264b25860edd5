import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ShapeError
from helpers import check_op, make_model, node

RNG = np.random.RandomState(777)


def _rand(*shape):
    return RNG.randn(*shape).astype(np.float32)


CONCATS = [
    ([(5,), (3,)], 0),
    ([(2, 3), (2, 4), (2, 1)], 1),
    ([(2, 3), (2, 4), (2, 1)], -1),
    ([(1, 3, 4, 5), (1, 2, 4, 5)], 1),
    ([(1, 3, 4, 5), (1, 3, 4, 5), (1, 3, 4, 5)], -2),
    ([(2, 3, 4, 5), (2, 3, 4, 2)], 3),
    ([(2, 3, 5), (1, 3, 5)], 0),
    ([(2, 1, 3, 2, 3), (2, 2, 3, 2, 3)], -4),
]


@pytest.mark.parametrize("shapes,axis", CONCATS, ids=[f"{s}-ax{a}" for s, a in CONCATS])
def test_concat_runtime_inputs(shapes, axis):
    names = [f"x{i}" for i in range(len(shapes))]
    m = make_model([node("Concat", names, ["y"], axis=axis)],
                   {n: (s, "float32") for n, s in zip(names, shapes)}, ["y"])
    check_op(m, {n: _rand(*s) for n, s in zip(names, shapes)}, rel_c=0, rel_ort=0)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat_with_constant_inputs_copied_from_flash(axis):
    shape = [2, 3, 4]
    cshape = list(shape)
    cshape[axis] = 3
    c0, c1 = _rand(*cshape), _rand(*cshape)
    m = make_model([node("Concat", ["c0", "x", "c1", "x"], ["y"], axis=axis)], {"x": (shape, "float32")}, ["y"],
                   {"c0": c0, "c1": c1})
    check_op(m, {"x": _rand(*shape)}, rel_c=0, rel_ort=0)


def test_concat_single_input_and_opset4():
    x = _rand(3, 4)
    m = make_model([node("Concat", ["x"], ["y"], axis=1)], {"x": (x.shape, "float32")}, ["y"], opset=4)
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)


def test_concat_int64_shape_chain_is_folded():
    # Shape -> Gather -> Concat -> Reshape, the exporter pattern: all folded.
    x = _rand(2, 3, 4)
    inits = {"i0": np.array(0, np.int64), "ax0": np.array([0], np.int64), "m1": np.array([-1], np.int64)}
    g = helper.make_graph([node("Shape", ["x"], ["s"]),
                           node("Gather", ["s", "i0"], ["d0"], axis=0),
                           node("Unsqueeze", ["d0", "ax0"], ["d0u"]),
                           node("Concat", ["d0u", "m1"], ["shape"], axis=0),
                           node("Reshape", ["x", "shape"], ["y"])], "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 9
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)
    assert [n.op_type for n in compile_model(m).graph.nodes] == ["Reshape"]


def test_concat_mismatched_shapes_is_a_shape_error():
    g = helper.make_graph([node("Concat", ["a", "b"], ["y"], axis=1)], "bad",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ShapeError, match="outside axis 1"):
        compile_model(m)


# --- Split -----------------------------------------------------------------

def _split_model(x_shape, n_out, opset, axis=None, split=None, num_outputs=None, split_as_input=False):
    attrs = {}
    if axis is not None:
        attrs["axis"] = axis
    if num_outputs is not None:
        attrs["num_outputs"] = num_outputs
    ins, inits = ["x"], {}
    if split is not None:
        if split_as_input:
            ins.append("split")
            inits["split"] = np.array(split, np.int64)
        else:
            attrs["split"] = split
    outs = [f"y{i}" for i in range(n_out)]
    return make_model([node("Split", ins, outs, **attrs)], {"x": (x_shape, "float32")}, outs, inits, opset=opset)


SPLITS = [
    # shape, outputs, opset, axis, split, num_outputs, split as input
    ((6,), 3, 11, None, None, None, False),            # equal, default axis 0
    ((2, 7, 3), 3, 11, 1, [2, 4, 1], None, False),     # attribute form
    ((2, 7, 3), 2, 11, -1, [1, 2], None, False),
    ((2, 7, 3), 3, 13, 1, [3, 0, 4], None, True),      # input form, an empty chunk
    ((1, 6, 4, 5), 2, 13, 1, None, None, False),       # equal, input form opset
    ((1, 6, 4, 5), 2, 13, -2, [1, 3], None, True),
    ((2, 3, 4, 5, 6), 3, 13, 4, [1, 2, 3], None, True),
    ((2, 7, 3), 3, 18, 1, None, 3, False),             # num_outputs, uneven: 3, 3, 1
    ((10, 3), 4, 18, 0, None, 4, False),               # 3, 3, 3, 1
    ((2, 8), 4, 18, -1, None, 4, False),               # even
    ((6, 2), 4, 18, 0, None, 4, False),                # 2, 2, 2, 0: an empty last chunk
    ((2, 7, 3), 2, 18, 1, [5, 2], None, True),
]


@pytest.mark.parametrize("shape,n_out,opset,axis,split,num,as_input", SPLITS,
                         ids=[f"{s[0]}-op{s[2]}-ax{s[3]}-{s[4]}-{s[5]}" for s in SPLITS])
def test_split(shape, n_out, opset, axis, split, num, as_input):
    m = _split_model(shape, n_out, opset, axis, split, num, as_input)
    check_op(m, {"x": _rand(*shape)}, rel_c=0, rel_ort=0)


def test_split_uneven_without_sizes_is_a_shape_error():
    m = helper.make_model(helper.make_graph(
        [node("Split", ["x"], ["a", "b"], axis=0)], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ShapeError, match="does not split evenly"):
        compile_model(m)


def test_split_num_outputs_with_negative_last_chunk_is_a_shape_error():
    m = helper.make_model(helper.make_graph(
        [node("Split", ["x"], ["a", "b", "c", "d"], axis=0, num_outputs=4)], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "abcd"]),
        opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(ShapeError, match="the last one would have -1 elements"):
        compile_model(m)


def test_split_then_concat_roundtrip_other_order():
    x = _rand(1, 5, 3, 3)
    m = make_model([node("Split", ["x", "sp"], ["a", "b", "c"], axis=1),
                    node("Concat", ["c", "a", "b"], ["y"], axis=1)],
                   {"x": (x.shape, "float32")}, ["y"], {"sp": np.array([2, 1, 2], np.int64)})
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)
