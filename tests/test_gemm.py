import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ShapeError
from helpers import check_op, make_model, node

RNG = np.random.RandomState(7)
M, K, N = 5, 7, 6   # N = 6: one block of four columns plus two single ones

C_SHAPES = {"none": None, "scalar": (), "n": (N,), "1n": (1, N), "m1": (M, 1), "mn": (M, N)}


def gemm_model(ta, tb, alpha, beta, c_shape, b_const=True, c_const=True, relu=False, m=M, k=K, n=N):
    a_shape = (k, m) if ta else (m, k)
    b_shape = (n, k) if tb else (k, n)
    feeds = {"a": RNG.randn(*a_shape).astype(np.float32)}
    inputs = {"a": (a_shape, "float32")}
    inits = {}
    b = RNG.randn(*b_shape).astype(np.float32)
    if b_const:
        inits["b"] = b
    else:
        feeds["b"], inputs["b"] = b, (b_shape, "float32")
    ins = ["a", "b"]
    if c_shape is not None:
        c = np.asarray(RNG.randn(*c_shape), np.float32)
        if c_const:
            inits["c"] = c
        else:
            feeds["c"], inputs["c"] = c, (c_shape, "float32")
        ins.append("c")
    attrs = {"transA": ta, "transB": tb}
    if alpha != 1.0:
        attrs["alpha"] = alpha
    if beta != 1.0:
        attrs["beta"] = beta
    nodes = [node("Gemm", ins, ["g" if relu else "y"], **attrs)]
    if relu:
        nodes.append(node("Relu", ["g"], ["y"]))
    return make_model(nodes, inputs, ["y"], inits), feeds


@pytest.mark.parametrize("ta,tb", list(itertools.product([0, 1], [0, 1])))
@pytest.mark.parametrize("c_shape", list(C_SHAPES), ids=list(C_SHAPES))
def test_gemm_trans_and_c_broadcast(ta, tb, c_shape):
    m, feeds = gemm_model(ta, tb, 0.5, 2.0, C_SHAPES[c_shape])
    check_op(m, feeds)


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 1.0), (1.0, -1.5), (2.5, 0.0)])
def test_gemm_alpha_beta(alpha, beta):
    m, feeds = gemm_model(0, 1, alpha, beta, (M, N))
    check_op(m, feeds)


@pytest.mark.parametrize("ta,tb", list(itertools.product([0, 1], [0, 1])))
@pytest.mark.parametrize("c_shape", ["none", "n", "m1"])
def test_gemm_runtime_b_and_c(ta, tb, c_shape):
    m, feeds = gemm_model(ta, tb, 1.5, 0.5, C_SHAPES[c_shape], b_const=False, c_const=False)
    check_op(m, feeds)


def test_gemm_layouts():
    """A constant B is stored [K, N] at compile time (transposed for transB=1)
    so the kernel's inner loop reads it contiguously; a run-time transB=1 B
    needs the strided variant."""
    m, _ = gemm_model(0, 1, 1.0, 1.0, (N,))
    h = compile_model(m).header
    assert "model__matmul_f32(" in h and "matmul_f32_strided" not in h
    m, _ = gemm_model(0, 1, 1.0, 1.0, (N,), b_const=False)
    assert "model__matmul_f32_strided(" in compile_model(m).header


def test_gemm_relu_fused_and_macs():
    m, feeds = gemm_model(0, 0, 1.0, 1.0, (17,), relu=True, m=3, k=33, n=17)
    c = compile_model(m)
    (g,) = c.graph.nodes
    assert g.op_type == "Gemm" and g.act == (0.0, float("inf"))
    assert c.macs == 3 * 33 * 17
    ref, out = check_op(m, feeds)
    assert (out[0] >= 0).all() and (out[0] == 0).any()


def test_gemm_c_not_broadcastable():
    m = make_model([node("Gemm", ["a", "b", "c"], ["y"])], {"a": ((M, K), "float32")}, ["y"],
                   {"b": np.ones((K, N), np.float32), "c": np.ones((M, 2), np.float32)})
    with pytest.raises(ShapeError, match="does not broadcast"):
        compile_model(m)


MATMUL = [
    ((2, 3, 4, 5), (5, 6)),
    ((3, 4), (2, 4, 7)),
    ((1, 3, 4, 5), (2, 1, 5, 6)),
    ((2, 3, 4, 5), (2, 3, 5, 9)),
    ((5,), (5,)),
    ((5,), (5, 3)),
    ((4, 5), (5,)),
    ((2, 4, 5), (5,)),
    ((5,), (2, 5, 3)),
    ((6, 40), (40, 10)),
]


@pytest.mark.parametrize("b_const", [True, False], ids=["const_b", "runtime_b"])
@pytest.mark.parametrize("sa,sb", MATMUL, ids=[f"{a}x{b}" for a, b in MATMUL])
def test_matmul(sa, sb, b_const):
    a = RNG.randn(*sa).astype(np.float32)
    b = RNG.randn(*sb).astype(np.float32)
    if b_const:
        m = make_model([node("MatMul", ["a", "b"], ["y"])], {"a": (sa, "float32")}, ["y"], {"b": b})
        feeds = {"a": a}
    else:
        m = make_model([node("MatMul", ["a", "b"], ["y"])], {"a": (sa, "float32"), "b": (sb, "float32")}, ["y"])
        feeds = {"a": a, "b": b}
    ref, _ = check_op(m, feeds)
    assert ref[0].shape == np.matmul(a, b).shape
    batch = np.broadcast_shapes(sa[:-2], sb[:-2]) if len(sa) > 1 and len(sb) > 1 else \
        (sa[:-2] if len(sa) > 1 else sb[:-2])
    assert compile_model(m).macs == int(np.prod(batch)) * (sa[-2] if len(sa) > 1 else 1) * \
        (sb[-1] if len(sb) > 1 else 1) * sa[-1]


def test_matmul_clip_fused():
    a = RNG.randn(3, 8).astype(np.float32)
    m = make_model([node("MatMul", ["a", "b"], ["t"]), node("Clip", ["t", "lo", "hi"], ["y"])],
                   {"a": (a.shape, "float32")}, ["y"],
                   {"b": RNG.randn(8, 5).astype(np.float32), "lo": np.array(-0.5, np.float32),
                    "hi": np.array(0.75, np.float32)})
    (mm,) = compile_model(m).graph.nodes
    assert mm.act == (-0.5, 0.75)
    ref, out = check_op(m, {"a": a})
    assert out[0].min() == np.float32(-0.5) and out[0].max() == np.float32(0.75)


def test_matmul_inner_mismatch():
    g = helper.make_graph([node("MatMul", ["a", "b"], ["y"])], "t",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
                          [numpy_helper.from_array(np.ones((5, 2), np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ShapeError, match="inner dimensions differ"):
        compile_model(m)
