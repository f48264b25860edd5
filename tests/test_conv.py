import numpy as np
import pytest

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import UnsupportedOpError
from helpers import check_op, make_model, node

RNG = np.random.RandomState(2024)


def conv_model(x_shape, w_shape, bias=True, relu=False, **attrs):
    w = RNG.randn(*w_shape).astype(np.float32)
    inits = {"w": w}
    ins = ["x", "w"]
    if bias:
        inits["b"] = RNG.randn(w_shape[0]).astype(np.float32)
        ins.append("b")
    nodes = [node("Conv", ins, ["c" if relu else "y"], **attrs)]
    if relu:
        nodes.append(node("Relu", ["c"], ["y"]))
    m = make_model(nodes, {"x": (x_shape, "float32")}, ["y"], inits)
    x = RNG.randn(*x_shape).astype(np.float32)
    return m, {"x": x}


CASES = [
    # id, x shape, w shape, attributes, bias
    ("1d_pads_stride", (1, 3, 17), (4, 3, 5), dict(pads=[2, 1], strides=[2]), True),
    ("1d_dilation", (2, 2, 20), (3, 2, 4), dict(dilations=[2], pads=[3, 0]), True),
    ("1d_same_upper", (1, 4, 13), (5, 4, 4), dict(auto_pad="SAME_UPPER", strides=[3]), False),
    ("1d_depthwise", (1, 6, 15), (6, 1, 3), dict(group=6, pads=[1, 1]), True),
    ("1d_long_kernel", (1, 2, 60), (3, 2, 31), dict(pads=[15, 15]), True),
    ("1d_long_depthwise", (1, 3, 60), (3, 1, 31), dict(group=3, pads=[10, 20], strides=[2]), True),
    ("2d_notset_pads", (1, 3, 9, 9), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True),
    ("2d_valid", (1, 3, 9, 8), (4, 3, 3, 3), dict(auto_pad="VALID"), True),
    ("2d_same_upper_s2", (1, 3, 9, 8), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2]), True),
    ("2d_same_lower_s2", (1, 3, 9, 8), (4, 3, 3, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2]), True),
    ("2d_same_lower_even_k", (1, 2, 6, 7), (3, 2, 4, 2), dict(auto_pad="SAME_LOWER", strides=[2, 3]), True),
    ("2d_asym_pads", (1, 2, 8, 7), (3, 2, 3, 3), dict(pads=[1, 0, 2, 3]), True),
    ("2d_stride2", (1, 3, 10, 11), (5, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True),
    ("2d_dilation2", (1, 2, 11, 10), (3, 2, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), True),
    ("2d_dilation_stride_mixed", (1, 2, 12, 13), (3, 2, 3, 2),
     dict(dilations=[2, 3], strides=[1, 2], pads=[0, 2, 1, 0]), True),
    ("2d_group2", (1, 4, 7, 7), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True),
    ("2d_group3_1x1", (1, 6, 5, 4), (9, 2, 1, 1), dict(group=3), True),
    ("2d_depthwise_m1", (1, 5, 9, 8), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1]), True),
    ("2d_depthwise_m2_s2", (2, 3, 9, 8), (6, 1, 3, 3), dict(group=3, pads=[1, 0, 1, 1], strides=[2, 2]), True),
    ("2d_depthwise_same_upper", (1, 4, 10, 10), (4, 1, 5, 5),
     dict(group=4, auto_pad="SAME_UPPER", strides=[2, 2]), False),
    ("2d_depthwise_dilation2", (1, 3, 11, 10), (3, 1, 3, 3), dict(group=3, dilations=[2, 2], pads=[2, 1, 2, 1]), True),
    ("2d_depthwise_big_kernel", (1, 2, 12, 12), (2, 1, 7, 7), dict(group=2, pads=[3, 3, 3, 3]), True),
    ("2d_pointwise", (1, 8, 6, 5), (7, 8, 1, 1), dict(), True),
    ("2d_pointwise_batch_nobias", (2, 5, 4, 3), (6, 5, 1, 1), dict(), False),
    ("2d_1x1_stride2", (1, 4, 7, 7), (3, 4, 1, 1), dict(strides=[2, 2]), True),
    ("2d_odd_7x5_k3x2", (1, 3, 7, 5), (4, 3, 3, 2), dict(), True),
    ("2d_odd_k3x2_pads", (2, 3, 7, 5), (4, 3, 3, 2), dict(pads=[1, 0, 1, 1], strides=[2, 1]), False),
    ("2d_big_kernel_generic", (1, 2, 9, 9), (2, 2, 7, 7), dict(pads=[2, 3, 1, 3]), True),
    ("2d_kernel_larger_than_input", (1, 2, 3, 3), (3, 2, 5, 5), dict(pads=[2, 2, 2, 2]), True),
    ("2d_taps_all_outside", (1, 1, 2, 2), (2, 1, 2, 2), dict(pads=[3, 3, 3, 3], strides=[2, 2]), True),
    ("2d_kernel_shape_attr", (1, 3, 6, 6), (2, 3, 3, 3), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), True),
]


@pytest.mark.parametrize("xs,ws,attrs,bias", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_conv(xs, ws, attrs, bias):
    m, feeds = conv_model(xs, ws, bias=bias, **attrs)
    # reference (float64 accumulation) vs onnxruntime and vs C (float32 accumulation): sums of at most a
    # few hundred products; 1e-5 of the output range holds.
    check_op(m, feeds)


def test_conv_relu_fused():
    m, feeds = conv_model((1, 3, 8, 8), (4, 3, 3, 3), pads=[1, 1, 1, 1], relu=True)
    c = compile_model(m)
    (conv,) = c.graph.nodes
    assert conv.op_type == "Conv" and conv.act == (0.0, float("inf"))
    ref, out = check_op(m, feeds)
    assert (out[0] >= 0).all() and (out[0] == 0).any()


@pytest.mark.parametrize("ws,group,kernel", [
    ((6, 1, 3, 3), 3, "dwconv2d_f32_k3x3"),
    ((4, 3, 1, 1), 1, "matmul_f32"),
    ((4, 3, 3, 3), 1, "conv2d_f32_k3x3"),
    ((4, 1, 7, 7), 1, "conv2d_f32("),
])
def test_kernel_choice_and_macs(ws, group, kernel):
    cin = ws[1] * group
    m, _ = conv_model((1, cin, 9, 9), ws, group=group)
    c = compile_model(m)
    assert f"model__{kernel}" in c.header
    oh = 9 - ws[2] + 1
    assert c.macs == ws[0] * oh * oh * ws[1] * ws[2] * ws[3]


def test_conv3d_unsupported():
    m, _ = conv_model((1, 2, 4, 4, 4), (3, 2, 3, 3, 3))
    with pytest.raises(UnsupportedOpError, match="3-D convolution"):
        compile_model(m)


def test_runtime_weight_unsupported():
    m = make_model([node("Conv", ["x", "w"], ["y"])],
                   {"x": ((1, 2, 5, 5), "float32"), "w": ((3, 2, 3, 3), "float32")}, ["y"])
    with pytest.raises(UnsupportedOpError, match="weight 'w' is computed at run time"):
        compile_model(m)


def test_dscnn_block_end_to_end():
    """DS-CNN-style block: Conv(10x4, stride 2)+BN+Relu, depthwise 3x3+BN+Relu,
    pointwise+BN+Relu, Flatten, Gemm. Every BN folds, every Relu fuses."""
    def bn(prefix, c):
        return {f"{prefix}_s": (RNG.rand(c) + 0.5).astype(np.float32), f"{prefix}_b": RNG.randn(c).astype(np.float32),
                f"{prefix}_m": (RNG.randn(c) * 0.1).astype(np.float32),
                f"{prefix}_v": (RNG.rand(c) + 0.5).astype(np.float32)}

    def bn_node(x, y, prefix):
        return node("BatchNormalization", [x, f"{prefix}_s", f"{prefix}_b", f"{prefix}_m", f"{prefix}_v"], [y])

    c = 16
    inits = {"w0": (RNG.randn(c, 1, 10, 4) * 0.2).astype(np.float32), "b0": RNG.randn(c).astype(np.float32),
             "w1": (RNG.randn(c, 1, 3, 3) * 0.3).astype(np.float32),
             "w2": (RNG.randn(c, c, 1, 1) * 0.25).astype(np.float32),
             "wf": (RNG.randn(c * 13 * 5, 12) * 0.05).astype(np.float32), "bf": RNG.randn(12).astype(np.float32),
             **bn("n0", c), **bn("n1", c), **bn("n2", c)}
    nodes = [
        node("Conv", ["x", "w0", "b0"], ["c0"], strides=[2, 2], pads=[4, 1, 5, 1]), bn_node("c0", "n0", "n0"),
        node("Relu", ["n0"], ["r0"]),
        node("Conv", ["r0", "w1"], ["c1"], group=c, pads=[1, 1, 1, 1]), bn_node("c1", "n1", "n1"),
        node("Relu", ["n1"], ["r1"]),
        node("Conv", ["r1", "w2"], ["c2"]), bn_node("c2", "n2", "n2"), node("Relu", ["n2"], ["r2"]),
        node("Flatten", ["r2"], ["f"]), node("Gemm", ["f", "wf", "bf"], ["y"]),
    ]
    m = make_model(nodes, {"x": ((1, 1, 25, 10), "float32")}, ["y"], inits)
    g = compile_model(m).graph
    assert [n.op_type for n in g.nodes] == ["Conv", "Conv", "Conv", "Flatten", "Gemm"]
    assert all(n.act == (0.0, float("inf")) for n in g.nodes[:3])
    check_op(m, {"x": RNG.randn(1, 1, 25, 10).astype(np.float32)})
