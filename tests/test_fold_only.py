"""Shape-computing ops (ops/fold_only.py): folded at load time on constant
inputs; the few with kernels (Cast f32->f32, Expand, Floor/Ceil) also run."""
import numpy as np
import pytest
from onnx import helper, numpy_helper

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import UnsupportedOpError
from helpers import NP2ONNX, check_op, make_model, node

RNG = np.random.RandomState(5150)


def _model(nodes, inputs, outputs, inits=None, opset=13):
    """Like helpers.make_model, with the output types given (ONNX's own
    inference cannot see through Shape-computing chains)."""
    g = helper.make_graph(
        nodes, "fold",
        [helper.make_tensor_value_info(n, NP2ONNX[d], list(s)) for n, (s, d) in inputs.items()],
        [helper.make_tensor_value_info(n, NP2ONNX[d], list(s)) for n, (s, d) in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def _only_kernels(m):
    return [n.op_type for n in compile_model(m).graph.nodes]


def test_constant_of_shape_from_shape_chain():
    x = RNG.randn(2, 3, 4).astype(np.float32)
    value = numpy_helper.from_array(np.array([1.5], np.float32))
    m = _model([node("Shape", ["x"], ["s"]), node("ConstantOfShape", ["s"], ["c"], value=value),
                node("ConstantOfShape", ["s"], ["z"]),
                node("Add", ["x", "c"], ["y"])],
               {"x": (x.shape, "float32")}, {"y": (x.shape, "float32"), "z": (x.shape, "float32")})
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)
    assert _only_kernels(m) == ["Add"]


def test_constant_of_shape_int64_value():
    x = RNG.randn(3, 2).astype(np.float32)
    value = numpy_helper.from_array(np.array([7], np.int64))
    m = _model([node("Shape", ["x"], ["s"]), node("ConstantOfShape", ["s"], ["c"], value=value)],
               {"x": (x.shape, "float32")}, {"c": (x.shape, "int64")})
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 5, 1, "int64"), (10, 1, -3, "int64"), (2, 2, 1, "int64"), (-3, 7, 2, "int32"),
    (0.5, 3.1, 0.7, "float32"), (1.0, -1.0, -0.25, "float32"),
])
def test_range(start, limit, delta, dtype):
    n = max(int(np.ceil((limit - start) / delta)), 0)
    x = RNG.randn(2).astype(np.float32)
    inits = {"a": np.array(start, dtype), "b": np.array(limit, dtype), "d": np.array(delta, dtype)}
    m = _model([node("Range", ["a", "b", "d"], ["r"]), node("Cast", ["r"], ["rf"], to=1),
                node("Concat", ["x", "rf"], ["y"], axis=0)],
               {"x": ((2,), "float32")}, {"y": ((2 + n,), "float32"), "r": ((n,), dtype)}, inits, opset=11)
    check_op(m, {"x": x}, rel_c=0, rel_ort=1e-6)


def test_torch_reshape_pattern_equal_where():
    # torch exports view(-1, C) as Shape/Equal/Where chains feeding Reshape
    x = RNG.randn(2, 3, 4).astype(np.float32)
    target = np.array([-1, 4], np.int64)
    m = _model([node("Equal", ["target", "minus1"], ["is_neg"]),
                node("Shape", ["x"], ["s"]),
                node("Slice", ["s", "zero", "two"], ["s2"]),
                node("Where", ["is_neg", "ones", "target"], ["t2"]),
                node("Not", ["is_neg"], ["keep"]),
                node("Reshape", ["x", "target"], ["y"]),
                node("Mul", ["t2", "s2"], ["prod"])],
               {"x": (x.shape, "float32")},
               {"y": ((6, 4), "float32"), "keep": ((2,), "bool"), "prod": ((2,), "int64")},
               {"target": target, "minus1": np.array(-1, np.int64), "ones": np.array([1, 1], np.int64),
                "zero": np.array([0], np.int64), "two": np.array([2], np.int64)})
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)
    assert _only_kernels(m) == ["Reshape"]


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_compare_folded(op):
    a = np.array([[1, 5, 3], [4, 2, 6]], np.int64)
    b = np.array([3, 2, 3], np.int64)
    x = RNG.randn(2, 3).astype(np.float32)
    m = _model([node(op, ["a", "b"], ["c"]), node("Cast", ["c"], ["cf"], to=1), node("Mul", ["x", "cf"], ["y"])],
               {"x": ((2, 3), "float32")}, {"y": ((2, 3), "float32"), "c": ((2, 3), "bool")},
               {"a": a, "b": b}, opset=16)
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical_folded(op):
    a = np.array([[True, False, True], [False, False, True]])
    b = np.array([True, False, False])
    x = RNG.randn(2, 3).astype(np.float32)
    m = _model([node(op, ["a", "b"], ["c"]), node("Not", ["c"], ["nc"]),
                node("Where", ["nc", "two", "z"], ["w"]), node("Mul", ["x", "w"], ["y"])],
               {"x": ((2, 3), "float32")}, {"y": ((2, 3), "float32"), "nc": ((2, 3), "bool")},
               {"a": a, "b": b, "z": np.array(-0.5, np.float32), "two": np.array([[2.0], [3.0]], np.float32)})
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)


@pytest.mark.parametrize("src,to,values", [
    ("float32", "int32", [-2.7, -0.5, 0.0, 0.5, 1.9, 100.2]),
    ("float32", "int64", [-2.7, 3.999, 7.0]),
    ("float32", "bool", [0.0, -0.0, 1e-20, -3.0]),
    ("int64", "float32", [-3, 0, 2 ** 40 + 1]),
    ("bool", "float32", [True, False]),
    ("int32", "int8", [-128, 5, 127]),
])
def test_cast_folded(src, to, values):
    c = np.array(values, dtype=src)
    m = _model([node("Cast", ["c"], ["y"], to=NP2ONNX[to]), node("Identity", ["x"], ["xo"])],
               {"x": ((2,), "float32")}, {"y": (c.shape, to), "xo": ((2,), "float32")}, {"c": c})
    check_op(m, {"x": RNG.randn(2).astype(np.float32)}, rel_c=0, rel_ort=0)


def test_cast_float_to_float_runtime_is_a_view():
    x = RNG.randn(3, 5).astype(np.float32)
    m = make_model([node("Cast", ["x"], ["c"], to=1), node("Relu", ["c"], ["y"])], {"x": (x.shape, "float32")}, ["y"])
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)
    assert "Cast 'cast_c'" in compile_model(m).header  # present as a view, no code


def test_cast_runtime_to_int_unsupported():
    m = make_model([node("Cast", ["x"], ["y"], to=7)], {"x": ((3,), "float32")}, ["y"])
    with pytest.raises(UnsupportedOpError, match=r"Cast is only supported on constant inputs \(folded at "
                                                  r"compile time\); input 'x'"):
        compile_model(m)


@pytest.mark.parametrize("op,ins", [("Equal", 2), ("Less", 2), ("Greater", 2), ("Not", 1), ("Where", 3),
                                    ("Range", 3), ("ConstantOfShape", 1)])
def test_runtime_inputs_unsupported(op, ins):
    dtypes = {"Not": "bool", "Range": "int64", "ConstantOfShape": "int64"}
    names = ["a", "b", "c"][:ins]
    inputs = {n: ((1,), dtypes.get(op, "float32")) for n in names}
    if op == "Where":
        inputs["a"] = ((1,), "bool")
    out_dtype = "bool" if op in ("Equal", "Less", "Greater", "Not") else "float32"
    m = _model([node(op, names, ["y"])], inputs, {"y": ((1,), out_dtype)})
    with pytest.raises(UnsupportedOpError, match=f"{op} is only supported on constant inputs "
                                                 r"\(folded at compile time\)"):
        compile_model(m)


EXPANDS = [
    ((3, 1), [2, 3, 4]),
    ((1, 4, 1, 1), [2, 1, 3, 5]),        # a 1 in the shape keeps the input's dimension
    ((5,), [1]),
    ((2, 1, 3), [2, 4, 3]),
    ((1,), [2, 3, 2, 2, 3]),
    ((4, 1, 2, 1, 3, 1), [4, 2, 2, 2, 3, 2]),
]


@pytest.mark.parametrize("shape,target", EXPANDS, ids=[f"{e[0]}-{e[1]}" for e in EXPANDS])
def test_expand_runtime(shape, target):
    x = RNG.randn(*shape).astype(np.float32)
    m = make_model([node("Expand", ["x", "s"], ["y"])], {"x": (shape, "float32")}, ["y"],
                   {"s": np.array(target, np.int64)})
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)


def test_expand_constant_from_shape_is_folded():
    x = RNG.randn(2, 3, 4).astype(np.float32)
    b = RNG.randn(1, 4).astype(np.float32)
    m = _model([node("Shape", ["x"], ["s"]), node("Expand", ["b", "s"], ["e"]), node("Sub", ["x", "e"], ["y"])],
               {"x": (x.shape, "float32")}, {"y": (x.shape, "float32")}, {"b": b})
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)
    assert _only_kernels(m) == ["Sub"]


@pytest.mark.parametrize("op", ["Floor", "Ceil"])
def test_floor_ceil_runtime_and_folded(op):
    x = (RNG.randn(3, 7) * 4).astype(np.float32)
    x[0, :4] = [-2.0, -0.5, 0.5, 3.0]
    c = (RNG.randn(7) * 3).astype(np.float32)
    m = make_model([node(op, ["x"], ["fx"]), node(op, ["c"], ["fc"]), node("Add", ["fx", "fc"], ["y"])],
                   {"x": (x.shape, "float32")}, ["y"], {"c": c})
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)
    assert _only_kernels(m) == [op, "Add"]
