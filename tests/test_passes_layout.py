"""passes.cancel_transposes and passes.fuse_pad: the compiled graph loses the
nodes, and the outputs still match onnxruntime on the original model."""
import numpy as np
import pytest

from cuvil_mcu import frontend, passes
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.ir import verify
from helpers import check_op, make_model, node

RNG = np.random.RandomState(31337)


def _rand(*shape):
    return RNG.randn(*shape).astype(np.float32)


def _ops(m):
    return [n.op_type for n in compile_model(m, verify_each=True).graph.nodes]


def _check(m, feeds, rel=1e-5):
    """Outputs (names and values) of the compiled model vs onnxruntime on the original."""
    c = compile_model(m, verify_each=True)
    assert c.graph.outputs == [o.name for o in m.graph.output]
    check_op(m, feeds, rel_c=rel, rel_ort=rel)


# --- cancel_transposes -----------------------------------------------------

def test_nchw_nhwc_pair_cancels():
    x = _rand(1, 3, 4, 5)
    m = make_model([node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
                    node("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2]),
                    node("Relu", ["b"], ["y"])], {"x": (x.shape, "float32")}, ["y"])
    _check(m, {"x": x})
    assert _ops(m) == ["Relu"]


def test_pair_writing_a_graph_output_renames_the_producer():
    x = _rand(2, 3, 4)
    m = make_model([node("Relu", ["x"], ["r"]),
                    node("Transpose", ["r"], ["a"], perm=[1, 2, 0]),
                    node("Transpose", ["a"], ["y"], perm=[2, 0, 1])], {"x": (x.shape, "float32")}, ["y"])
    _check(m, {"x": x})
    c = compile_model(m, verify_each=True)
    assert [(n.op_type, n.outputs) for n in c.graph.nodes] == [("Relu", ["y"])]


def test_pair_from_graph_input_to_graph_output_becomes_identity_view():
    x = _rand(2, 3, 4)
    m = make_model([node("Transpose", ["x"], ["a"]), node("Transpose", ["a"], ["y"])],
                   {"x": (x.shape, "float32")}, ["y"])
    _check(m, {"x": x})
    assert _ops(m) == ["Identity"]


def test_pair_whose_inner_output_is_also_read_keeps_the_first():
    x = _rand(1, 2, 3, 5)
    m = make_model([node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
                    node("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2]),
                    node("Neg", ["a"], ["y1"]),
                    node("Add", ["b", "x"], ["y2"])], {"x": (x.shape, "float32")}, ["y1", "y2"])
    _check(m, {"x": x})
    assert _ops(m) == ["Transpose", "Neg", "Add"]


def test_pair_whose_inner_output_is_a_graph_output():
    x = _rand(3, 4)
    m = make_model([node("Transpose", ["x"], ["a"]), node("Transpose", ["a"], ["b"]), node("Abs", ["b"], ["y"])],
                   {"x": (x.shape, "float32")}, ["a", "y"])
    _check(m, {"x": x})
    assert _ops(m) == ["Transpose", "Abs"]


def test_non_cancelling_pair_merges_into_one():
    x = _rand(2, 3, 4, 5)
    m = make_model([node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
                    node("Transpose", ["a"], ["y"], perm=[2, 0, 3, 1])], {"x": (x.shape, "float32")}, ["y"])
    _check(m, {"x": x}, rel=0)
    c = compile_model(m, verify_each=True)
    assert [n.op_type for n in c.graph.nodes] == ["Transpose"]
    assert c.graph.nodes[0].inputs == ["x"]


def test_chain_of_three_cancels():
    x = _rand(2, 3, 4)
    m = make_model([node("Sigmoid", ["x"], ["s"]),
                    node("Transpose", ["s"], ["a"], perm=[1, 0, 2]),
                    node("Transpose", ["a"], ["b"], perm=[0, 2, 1]),
                    node("Transpose", ["b"], ["c"], perm=[2, 0, 1]),
                    node("Mul", ["c", "x"], ["y"])], {"x": (x.shape, "float32")}, ["y"])
    _check(m, {"x": x})
    assert _ops(m) == ["Sigmoid", "Mul"]


def test_lone_identity_transpose_removed():
    x = _rand(2, 3, 4)
    m = make_model([node("Transpose", ["x"], ["a"], perm=[0, 1, 2]), node("Tanh", ["a"], ["y"])],
                   {"x": (x.shape, "float32")}, ["y"])
    _check(m, {"x": x})
    assert _ops(m) == ["Tanh"]


def test_transpose_with_other_op_between_is_kept():
    x = _rand(1, 3, 4, 4)
    b = _rand(3)
    m = make_model([node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]), node("Add", ["a", "b"], ["t"]),
                    node("Transpose", ["t"], ["y"], perm=[0, 3, 1, 2])], {"x": (x.shape, "float32")}, ["y"],
                   {"b": b})
    _check(m, {"x": x})
    assert _ops(m) == ["Transpose", "Add", "Transpose"]


def test_pass_alone_keeps_the_graph_valid():
    x = _rand(2, 3)
    m = make_model([node("Transpose", ["x"], ["a"]), node("Transpose", ["a"], ["y1"]),
                    node("Transpose", ["x"], ["y2"], perm=[0, 1])], {"x": (x.shape, "float32")}, ["y1", "y2"])
    g = frontend.onnx_loader.from_model(m)
    g = passes.cancel_transposes.run(g)
    verify(g)
    assert g.outputs == ["y1", "y2"]
    assert all(n.op_type == "Identity" for n in g.nodes)


# --- fuse_pad --------------------------------------------------------------

def _pad(pads, value=0.0, opset=13, axes=None):
    """Pad node (inputs form, or attribute form for opset < 11) and its initializers."""
    if opset < 11:
        return node("Pad", ["x"], ["p"], pads=pads, value=value), {}
    ins = ["x", "pads", "v"]
    inits = {"pads": np.array(pads, np.int64), "v": np.array(value, np.float32)}
    if axes is not None:
        ins.append("axes")
        inits["axes"] = np.array(axes, np.int64)
    return node("Pad", ins, ["p"]), inits


CONVS = [
    # x shape, pads, conv attrs, opset
    ((1, 3, 6, 7), [0, 0, 1, 2, 0, 0, 1, 0], {"pads": [1, 0, 0, 1]}, 13),
    ((1, 3, 6, 7), [0, 0, 1, 1, 0, 0, 1, 1], {}, 11),
    ((1, 3, 6, 7), [0, 0, 2, 1, 0, 0, 0, 1], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 13),
    ((1, 3, 6, 7), [0, 0, 0, 1, 0, 0, 2, 0], {"auto_pad": "SAME_LOWER"}, 13),
    ((1, 3, 6, 7), [0, 0, 1, 1, 0, 0, 1, 1], {"auto_pad": "VALID", "strides": [1, 2]}, 13),
    ((1, 3, 6, 7), [0, 0, 1, 1, 0, 0, 1, 1], {"dilations": [2, 1], "pads": [1, 1, 1, 1]}, 10),
    ((2, 4, 9), [0, 0, 3, 0, 0, 1], {"strides": [2]}, 13),                     # 1-D conv
]


@pytest.mark.parametrize("shape,pads,attrs,opset", CONVS, ids=[f"{c[0]}-{c[2]}-op{c[3]}" for c in CONVS])
def test_pad_folds_into_conv(shape, pads, attrs, opset):
    x = _rand(*shape)
    k = 3 if len(shape) == 4 else 5
    w = _rand(5, shape[1], *([k] * (len(shape) - 2)))
    pad, inits = _pad(pads, 0.0, opset)
    m = make_model([pad, node("Conv", ["p", "w", "b"], ["y"], **attrs)], {"x": (shape, "float32")}, ["y"],
                   dict(inits, w=w, b=_rand(5)), opset=opset)
    _check(m, {"x": x}, rel=1e-4)
    c = compile_model(m, verify_each=True)
    assert [n.op_type for n in c.graph.nodes] == ["Conv"]
    assert c.graph.nodes[0].inputs[0] == "x"


def test_pad_with_axes_input_folds_into_conv_opset18():
    x = _rand(1, 2, 5, 5)
    pad, inits = _pad([1, 2, 0, 1], 0.0, opset=18, axes=[-2, 3])
    m = make_model([pad, node("Conv", ["p", "w"], ["y"], strides=[2, 2])], {"x": (x.shape, "float32")}, ["y"],
                   dict(inits, w=_rand(3, 2, 3, 3)), opset=18)
    _check(m, {"x": x}, rel=1e-4)
    assert _ops(m) == ["Conv"]


def test_pad_folds_into_average_pool_only_with_count_include_pad():
    x = _rand(1, 2, 5, 6)
    for cip, fused in ((1, True), (0, False)):
        pad, inits = _pad([0, 0, 1, 2, 0, 0, 1, 1])
        m = make_model([pad, node("AveragePool", ["p"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                  count_include_pad=cip)], {"x": (x.shape, "float32")}, ["y"], inits)
        _check(m, {"x": x})
        assert _ops(m) == (["AveragePool"] if fused else ["Pad", "AveragePool"])


def test_pad_folds_into_max_pool_only_with_minus_inf():
    x = _rand(1, 2, 5, 6)
    for value, fused in ((float("-inf"), True), (0.0, False)):
        # no window lies wholly in padding (there onnxruntime's MaxPool gives -FLT_MAX)
        pad, inits = _pad([0, 0, 0, 1, 0, 0, 1, 1], value)
        m = make_model([pad, node("MaxPool", ["p"], ["y"], kernel_shape=[2, 3], pads=[1, 0, 0, 1])],
                       {"x": (x.shape, "float32")}, ["y"], inits)
        _check(m, {"x": x})
        assert _ops(m) == (["MaxPool"] if fused else ["Pad", "MaxPool"])


def test_pool_with_ceil_mode_is_not_fused():
    x = _rand(1, 2, 5, 6)
    pad, inits = _pad([0, 0, 1, 1, 0, 0, 0, 0], float("-inf"))
    m = make_model([pad, node("MaxPool", ["p"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
                   {"x": (x.shape, "float32")}, ["y"], inits)
    _check(m, {"x": x})
    assert _ops(m) == ["Pad", "MaxPool"]


NOT_FUSED = [
    ("channel pads", [0, 1, 1, 1, 0, 0, 1, 1], 0.0),
    ("negative pads", [0, 0, 1, -1, 0, 0, 1, 1], 0.0),
    ("non-zero value", [0, 0, 1, 1, 0, 0, 1, 1], 0.5),
]


@pytest.mark.parametrize("why,pads,value", NOT_FUSED, ids=[n[0] for n in NOT_FUSED])
def test_pad_that_is_not_plain_zero_padding_stays(why, pads, value):
    x = _rand(1, 2, 6, 6)
    pad, inits = _pad(pads, value)
    cin = 2 + pads[1] + pads[5]
    m = make_model([pad, node("Conv", ["p", "w"], ["y"])], {"x": (x.shape, "float32")}, ["y"],
                   dict(inits, w=_rand(3, cin, 3, 3)))
    _check(m, {"x": x}, rel=1e-4)
    assert _ops(m) == ["Pad", "Conv"]


def test_pad_read_twice_stays():
    x = _rand(1, 2, 6, 6)
    pad, inits = _pad([0, 0, 1, 1, 0, 0, 1, 1])
    m = make_model([pad, node("Conv", ["p", "w"], ["y1"]), node("Relu", ["p"], ["y2"])],
                   {"x": (x.shape, "float32")}, ["y1", "y2"], dict(inits, w=_rand(3, 2, 3, 3)))
    _check(m, {"x": x}, rel=1e-4)
    assert _ops(m) == ["Pad", "Conv", "Relu"]


def test_two_pads_in_a_row_into_conv():
    x = _rand(1, 2, 5, 5)
    m = make_model([node("Pad", ["x", "p1"], ["a"]), node("Pad", ["a", "p2"], ["p"]),
                    node("Conv", ["p", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": (x.shape, "float32")}, ["y"],
                   {"p1": np.array([0, 0, 1, 0, 0, 0, 0, 2], np.int64),
                    "p2": np.array([0, 0, 0, 1, 0, 0, 1, 0], np.int64), "w": _rand(4, 2, 3, 3)})
    _check(m, {"x": x}, rel=1e-4)
    assert _ops(m) == ["Pad", "Conv"]  # the inner Pad feeds a Pad, not a Conv
