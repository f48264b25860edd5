import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers import check_op, check_strict_builds, make_model, node
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ShapeError, UnsupportedOpError

RNG = np.random.RandomState(777)
SHAPE = (2, 3, 4, 5)


def _x(shape, op="ReduceSum"):
    x = RNG.randn(*shape).astype(np.float32)
    if op == "ReduceLogSum":  # log of a sum: keep the sums positive
        x = np.abs(x) + np.float32(0.1)
    if op == "ReduceProd":  # products of many terms: keep them near 1
        x = (np.float32(1) + np.float32(0.2) * x).astype(np.float32)
    return x


def _model(op, shape, axes, keepdims=None, form="input", opset=None, **attrs):
    """Reduce node with axes as an input (opset 18, ReduceSum 13) or as an
    attribute (opset 13, ReduceSum 11); axes None: not given at all.
    keepdims "both": two nodes, outputs y0 (keepdims 0) and y1 (keepdims 1)."""
    inits, ins = {}, ["x"]
    if form == "input":
        opset = opset or 18
        if axes is not None:
            inits["axes"] = np.array(axes, np.int64)
            ins.append("axes")
    else:
        opset = opset or (11 if op == "ReduceSum" else 13)
        if axes is not None:
            attrs["axes"] = axes
    if keepdims == "both":
        nodes = [node(op, ins, [f"y{kd}"], keepdims=kd, **attrs) for kd in (0, 1)]
    else:
        nodes = [node(op, ins, ["y"], **attrs, **({} if keepdims is None else {"keepdims": keepdims}))]
    return make_model(nodes, {"x": (shape, "float32")}, [n.output[0] for n in nodes], inits, opset=opset)


def _declared(nodes, inputs: dict, outputs: dict, opset: int):
    """A model whose output shapes are declared here (make_model leaves a
    shape ONNX cannot infer, e.g. after a computed Reshape, undeclared)."""
    t = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64}
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, t[d], s) for n, (s, d) in inputs.items()],
                          [helper.make_tensor_value_info(n, t[d], s) for n, (s, d) in outputs.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 9)
    return m


AXES = [[0], [1], [2], [3], [-1], [-3], [1, 2], [0, 2], [1, 3], [0, 3], [0, 1, 3], [0, 1, 2, 3], None]


@pytest.mark.parametrize("axes", AXES, ids=[str(a) for a in AXES])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_reduce_axes_input(op, axes):
    check_op(_model(op, SHAPE, axes, "both"), {"x": _x(SHAPE)})


ATTR_AXES = [[1], [-2], [0, 2], [1, 3], None]


@pytest.mark.parametrize("axes", ATTR_AXES, ids=[str(a) for a in ATTR_AXES])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_reduce_axes_attribute(op, axes):
    check_op(_model(op, SHAPE, axes, "both", form="attr"), {"x": _x(SHAPE)})


OTHERS = ["ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]


@pytest.mark.parametrize("axes", [[3], [1], [0, 2], None], ids=["last", "middle", "split", "all"])
@pytest.mark.parametrize("op", OTHERS)
def test_other_reductions(op, axes):
    x = _x(SHAPE, op)
    check_op(_model(op, SHAPE, axes, "both"), {"x": x})


@pytest.mark.parametrize("op", OTHERS)
def test_other_reductions_axes_attribute(op):
    check_op(_model(op, SHAPE, [1, 3], "both", form="attr"), {"x": _x(SHAPE, op)})


def test_logsumexp_is_stable():
    # exp(100) overflows float32: the kernel must shift by the maximum.
    x = (RNG.randn(3, 40) * 5 + 100).astype(np.float32)
    ref, _ = check_op(_model("ReduceLogSumExp", x.shape, [1], 0), {"x": x})
    assert np.isfinite(ref[0]).all()


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceSumSquare", "ReduceL2",
                                "ReduceLogSumExp"])
@pytest.mark.parametrize("empty", ["absent", "empty"])
def test_noop_with_empty_axes(op, empty):
    # With no axes and noop_with_empty_axes=1 nothing is reduced: each output
    # is the op over one element (x, x*x, |x| ...), as onnxruntime computes.
    x = _x((3, 4))
    axes = None if empty == "absent" else []
    m = _model(op, x.shape, axes, opset=13 if op == "ReduceSum" else 18, noop_with_empty_axes=1)
    ref, _ = check_op(m, {"x": x})
    assert ref[0].shape == x.shape


def test_empty_axes_input_reduces_all():
    x = _x((3, 4))
    ref, _ = check_op(_model("ReduceMean", x.shape, [], 0), {"x": x})
    assert ref[0].shape == ()


def test_general_strides_rank6():
    # Kept and reduced dimensions alternate three times each.
    shape = (2, 3, 2, 3, 2, 3)
    nodes = [node(op, ["x"], [f"{op}{i}"], axes=axes, keepdims=i % 2)
             for i, axes in enumerate(([0, 2, 4], [1, 3, 5], [0, 1, 3, 4])) for op in ("ReduceSum", "ReduceMax")]
    m = make_model(nodes, {"x": (shape, "float32")}, [n.output[0] for n in nodes], opset=11)
    check_op(m, {"x": _x(shape)})


def test_size_one_dims_and_long_rows():
    check_op(_model("ReduceMean", (2, 1, 5), [1], 0), {"x": _x((2, 1, 5))})
    # 3000 terms in one float accumulator: still within 1e-5 of the float64 reference.
    x = _x((2, 3000))
    check_op(_model("ReduceSum", x.shape, [1], 1), {"x": x})
    check_op(_model("ReduceMean", x.shape, [1], 1), {"x": x})


def test_fused_relu():
    x = _x(SHAPE)
    m = make_model([node("ReduceMean", ["x"], ["t"], axes=[1]), node("Relu", ["t"], ["y"])],
                   {"x": (SHAPE, "float32")}, ["y"], opset=13)
    g = compile_model(m).graph
    assert [n.op_type for n in g.nodes] == ["ReduceMean"] and g.nodes[0].act is not None
    ref, _ = check_op(m, {"x": x})
    assert (ref[0] == 0).any() and (ref[0] > 0).any()


def test_integer_reduction_folds_at_load_time():
    # Shape -> ReduceProd -> Reshape: the element count is computed at load time.
    x = _x((2, 3, 4))
    m = _declared([node("Shape", ["x"], ["s"]), node("ReduceProd", ["s"], ["n"], keepdims=1),
                   node("Reshape", ["x", "n"], ["f"]), node("Relu", ["f"], ["y"])],
                  {"x": (x.shape, "float32")}, {"y": ((24,), "float32")}, opset=13)
    g = compile_model(m).graph
    assert "ReduceProd" not in [n.op_type for n in g.nodes]
    ref, _ = check_op(m, {"x": x})
    assert ref[0].shape == (24,)


def test_macs():
    assert compile_model(_model("ReduceSum", SHAPE, [1], 1)).macs == 120


def test_errors():
    for axes, msg in (([4], "out of range"), ([1, -3], "repeat")):
        m = _declared([node("ReduceSum", ["x", "ax"], ["y"])], {"x": (SHAPE, "float32")},
                      {"y": (None, "float32")}, opset=13)
        m.graph.initializer.append(helper.make_tensor("ax", TensorProto.INT64, [len(axes)], axes))
        with pytest.raises(ShapeError, match=msg):
            compile_model(m)
    m = _declared([node("ReduceSum", ["x", "ax"], ["y"])], {"x": (SHAPE, "float32"), "ax": ((1,), "int64")},
                  {"y": (None, "float32")}, opset=13)
    with pytest.raises(UnsupportedOpError, match="must be a constant"):
        compile_model(m)
    with pytest.raises(UnsupportedOpError, match="alternates"):
        shape = (2,) * 9
        compile_model(_model("ReduceSum", shape, [0, 2, 4, 6, 8], 1))


def test_strict_builds():
    nodes = [node(op, ["x"], [op], axes=axes, keepdims=0)
             for op, axes in (("ReduceMean", [1, 3]), ("ReduceMax", [0]), ("ReduceMin", [2]), ("ReduceProd", [3]),
                              ("ReduceL1", [1]), ("ReduceL2", [1]), ("ReduceSumSquare", [1]),
                              ("ReduceLogSumExp", [1, 2]))]
    nodes.append(node("ReduceSum", ["x"], ["ReduceSum"], axes=[0, 2]))
    m = make_model(nodes, {"x": (SHAPE, "float32")}, [n.output[0] for n in nodes], opset=11)
    check_strict_builds(m, {"x": _x(SHAPE)})
