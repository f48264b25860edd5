import numpy as np
import pytest

from helpers import assert_close, check_op, check_strict_builds, make_model, node, run_c, run_ort, run_ref
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ShapeError, UnsupportedOpError

RNG = np.random.RandomState(4321)


def _x(shape, scale=1.0):
    return (RNG.randn(*shape) * scale).astype(np.float32)


def _pool_model(op, shape, attrs, opset=13, extra=()):
    return make_model([node(op, ["x"], ["y"], **attrs), *extra], {"x": (shape, "float32")},
                      ["y" if not extra else extra[-1].output[0]], opset=opset)


# (id, op, input shape, attributes, opset)
# Dimension 8 with k3 s2 pads 1/1: floor 4 outputs, ceil 5 whose last window
# (taps 7, 8, 9) has one tap beyond the end padding. Dimension 5 with k3 s3
# pads 1/1: ceil would give 3 but the third window starts in the right
# padding, so 2.
CEIL = {"kernel_shape": [3, 3], "strides": [2, 3], "pads": [1, 1, 1, 1]}
CASES = [
    ("odd_3x2", "MaxPool", (1, 2, 7, 9), {"kernel_shape": [3, 2]}, 13),
    ("odd_3x2", "AveragePool", (1, 2, 7, 9), {"kernel_shape": [3, 2]}, 13),
    ("stride2", "MaxPool", (1, 3, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 2]}, 13),
    ("stride2", "AveragePool", (1, 3, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 2]}, 13),
    ("asym_pads", "MaxPool", (1, 2, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [1, 0, 2, 1]}, 13),
    ("asym_pads", "AveragePool", (1, 2, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [1, 0, 2, 1]}, 13),
    ("asym_pads_cip", "AveragePool", (1, 2, 7, 9),
     {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [1, 0, 2, 1], "count_include_pad": 1}, 13),
    ("batch2_2x2", "MaxPool", (2, 3, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}, 13),
    ("batch2_2x2", "AveragePool", (2, 3, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}, 13),
    ("floor", "MaxPool", (1, 2, 8, 5), dict(CEIL, ceil_mode=0), 13),
    ("ceil", "MaxPool", (1, 2, 8, 5), dict(CEIL, ceil_mode=1), 13),
    ("floor_cip0", "AveragePool", (1, 2, 8, 5), dict(CEIL, ceil_mode=0, count_include_pad=0), 13),
    ("floor_cip1", "AveragePool", (1, 2, 8, 5), dict(CEIL, ceil_mode=0, count_include_pad=1), 13),
    ("ceil_cip0", "AveragePool", (1, 2, 8, 5), dict(CEIL, ceil_mode=1, count_include_pad=0), 13),
    ("ceil_cip1", "AveragePool", (1, 2, 8, 5), dict(CEIL, ceil_mode=1, count_include_pad=1), 13),
    ("ceil_nopad", "AveragePool", (1, 2, 7, 9), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, 13),
    ("valid", "MaxPool", (1, 2, 7, 9), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "VALID"}, 13),
    ("valid", "AveragePool", (1, 2, 7, 9), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "VALID"}, 13),
    ("valid_ceil", "MaxPool", (1, 2, 7, 9),
     {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "VALID", "ceil_mode": 1}, 13),
    # 7 with k2 s2: total pad 1 (odd); 9 with k3 s2: total pad 2.
    ("same_upper", "MaxPool", (1, 2, 7, 9), {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, 13),
    ("same_lower", "MaxPool", (1, 2, 7, 9), {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}, 13),
    ("same_upper_cip0", "AveragePool", (1, 2, 7, 9),
     {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, 13),
    ("same_lower_cip0", "AveragePool", (1, 2, 7, 9),
     {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}, 13),
    ("same_upper_cip1", "AveragePool", (1, 2, 7, 9),
     {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER", "count_include_pad": 1}, 13),
    ("same_lower_cip1", "AveragePool", (1, 2, 7, 9),
     {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER", "count_include_pad": 1}, 13),
    ("same_s1", "MaxPool", (1, 2, 7, 9), {"kernel_shape": [3, 4], "auto_pad": "SAME_UPPER"}, 13),
    ("dilated", "MaxPool", (1, 2, 9, 10),
     {"kernel_shape": [2, 3], "strides": [1, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]}, 13),
    ("dilated_ceil", "MaxPool", (1, 2, 9, 10),
     {"kernel_shape": [3, 2], "strides": [2, 3], "dilations": [2, 3], "pads": [2, 1, 1, 0], "ceil_mode": 1}, 13),
    ("dilated_cip0", "AveragePool", (1, 2, 9, 10),
     {"kernel_shape": [2, 3], "strides": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}, 19),
    ("dilated_cip1", "AveragePool", (1, 2, 9, 10),
     {"kernel_shape": [2, 3], "strides": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
      "count_include_pad": 1}, 19),
    ("1d", "MaxPool", (1, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 0], "ceil_mode": 1}, 13),
    ("1d_cip1", "AveragePool", (1, 3, 11),
     {"kernel_shape": [4], "strides": [3], "pads": [2, 1], "ceil_mode": 1, "count_include_pad": 1}, 13),
    ("1d_cip0", "AveragePool", (2, 3, 11), {"kernel_shape": [4], "strides": [3], "pads": [2, 1], "ceil_mode": 1}, 13),
    ("1d_same_lower", "AveragePool", (1, 3, 10), {"kernel_shape": [3], "strides": [2], "auto_pad": "SAME_LOWER"}, 13),
    ("1d_dilated", "MaxPool", (1, 2, 12), {"kernel_shape": [3], "dilations": [3], "pads": [2, 2]}, 13),
    ("old_opset", "MaxPool", (1, 2, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 8),
]


@pytest.mark.parametrize("case_id,op,shape,attrs,opset", CASES, ids=[f"{c[1]}-{c[0]}" for c in CASES])
def test_pool(case_id, op, shape, attrs, opset):
    x = _x(shape, 3.0)
    check_op(_pool_model(op, shape, attrs, opset), {"x": x})


def test_ceil_mode_output_sizes():
    # Hand-computed from the ONNX rule (see CEIL): H 8 -> 4 (floor) / 5 (ceil),
    # W 5 -> 2 (floor) / 2 (ceil: the third window would start in the padding).
    for ceil, expect in ((0, (1, 2, 4, 2)), (1, (1, 2, 5, 2))):
        g = compile_model(_pool_model("MaxPool", (1, 2, 8, 5), dict(CEIL, ceil_mode=ceil))).graph
        assert g.tensors[g.outputs[0]].shape == expect


def test_ceil_window_beyond_end_padding_is_not_counted():
    # W 3, k3 s2 pads 1/1, ceil: windows at -1..1 and 1..3; the second has taps
    # 1, 2 (input) and 3 (right padding): the mean divides by 3, not by the
    # kernel size. H is 1 with a 1-tap kernel.
    x = np.array([[[[1.0, 2.0, 4.0]]]], np.float32)
    m = _pool_model("AveragePool", x.shape, {"kernel_shape": [1, 3], "strides": [1, 2], "pads": [0, 1, 0, 1],
                                            "ceil_mode": 1, "count_include_pad": 1})
    ref, c = check_op(m, {"x": x})
    np.testing.assert_allclose(ref[0].reshape(-1), [(0 + 1 + 2) / 3, (2 + 4 + 0) / 3], rtol=1e-6)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 4, 7), (2, 3, 5, 6), (1, 2, 3, 4, 5), (1, 5, 1, 1)])
def test_global_pool(op, shape):
    check_op(_pool_model(op, shape, {}), {"x": _x(shape, 2.0)})


@pytest.mark.parametrize("op,act", [("MaxPool", "Relu"), ("AveragePool", "Clip"), ("GlobalAveragePool", "Relu")])
def test_fused_activation(op, act):
    shape = (1, 3, 7, 9)
    attrs = {} if op.startswith("Global") else {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}
    extra = [node("Relu", ["y"], ["z"])] if act == "Relu" else [node("Clip", ["y"], ["z"], min=-0.2, max=0.3)]
    m = _pool_model(op, shape, attrs, opset=10, extra=extra)
    g = compile_model(m).graph
    assert [n.op_type for n in g.nodes] == [op] and g.nodes[0].act is not None
    ref, _ = check_op(m, {"x": _x(shape)})
    assert (ref[0] >= (0 if act == "Relu" else -0.2)).all()


@pytest.mark.parametrize("op,attrs,fill", [
    ("MaxPool", {}, -np.inf),
    ("AveragePool", {"count_include_pad": 1}, 0.0),
])
def test_pads_larger_than_kernel(op, attrs, fill):
    # onnxruntime refuses pads >= kernel (a folded Pad can produce them), so
    # the independent check is onnxruntime on the same padding spelled as a
    # Pad node. Pads 3 and 2 before a 2x2 kernel give windows wholly in padding.
    shape, pads = (1, 2, 5, 6), [3, 0, 1, 2]
    x = _x(shape)
    m = _pool_model(op, shape, dict(attrs, kernel_shape=[2, 2], strides=[1, 2], pads=pads))
    spelled = make_model(
        [node("Pad", ["x", "p", "v"], ["xp"]), node(op, ["xp"], ["y"], kernel_shape=[2, 2], strides=[1, 2], **attrs)],
        {"x": (shape, "float32")}, ["y"],
        {"p": np.array([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], np.int64), "v": np.array(fill, np.float32)})
    expect = run_ort(spelled, {"x": x})[0]
    ref = run_ref(m, {"x": x})[0]
    c = run_c(m, {"x": x})[0]
    inf = np.isinf(expect)
    assert inf.any() == (op == "MaxPool") and (ref[~inf] != 0).all() == (op == "MaxPool")
    for got, want, what in ((ref, expect, "reference vs onnxruntime (Pad + pool)"), (c, ref, "C vs reference")):
        assert np.array_equal(got[inf], want[inf]), f"{what}: infinities differ"
        assert_close(np.where(inf, 0, got), np.where(inf, 0, want), 1e-5, what)


def test_macs():
    # 2x2 stride 2 over 4x4: 4 windows of 4 taps per plane, 3 planes.
    m = _pool_model("MaxPool", (1, 3, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]})
    assert compile_model(m).macs == 48


UNSUPPORTED = [
    ("3d", "MaxPool", (1, 1, 4, 4, 4), {"kernel_shape": [2, 2, 2]}, 13, "rank 5"),
    ("all_pad_window_cip0", "AveragePool", (1, 1, 6, 6), {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]}, 13, "0/0"),
    ("same_dilated", "MaxPool", (1, 1, 7, 7), {"kernel_shape": [3, 3], "dilations": [2, 2], "auto_pad": "SAME_UPPER"},
     13, "dilations"),
    ("same_neg_pad", "MaxPool", (1, 1, 6, 6), {"kernel_shape": [1, 1], "strides": [3, 3], "auto_pad": "SAME_UPPER"},
     13, "negative padding"),
]


@pytest.mark.parametrize("case_id,op,shape,attrs,opset,msg", UNSUPPORTED, ids=[c[0] for c in UNSUPPORTED])
def test_unsupported(case_id, op, shape, attrs, opset, msg):
    with pytest.raises(UnsupportedOpError, match=msg):
        compile_model(_pool_model(op, shape, attrs, opset))


def test_indices_output_unsupported():
    m = make_model([node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2])], {"x": ((1, 1, 4, 4), "float32")},
                   ["y", "idx"], opset=13)
    with pytest.raises(UnsupportedOpError, match="Indices"):
        compile_model(m)


def test_shape_errors():
    m = _pool_model("MaxPool", (1, 1, 3, 3), {"kernel_shape": [5, 1]})
    with pytest.raises(ShapeError, match="larger than the padded input"):
        compile_model(m)


def test_strict_builds():
    shape = (1, 3, 7, 9)
    nodes = [node("MaxPool", ["x"], ["a"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1),
             node("Relu", ["a"], ["ar"]),
             node("AveragePool", ["x"], ["b"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                  count_include_pad=1),
             node("GlobalMaxPool", ["x"], ["c"]),
             node("GlobalAveragePool", ["x"], ["d"])]
    m = make_model(nodes, {"x": (shape, "float32")}, ["ar", "b", "c", "d"], opset=13)
    check_strict_builds(m, {"x": _x(shape)})
