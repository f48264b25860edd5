import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import UnsupportedOpError
from helpers import check_op, make_model, node

RNG = np.random.RandomState(99)


def bn_params(c, prefix="bn"):
    return {
        f"{prefix}_scale": (RNG.randn(c) * 2).astype(np.float32),
        f"{prefix}_b": RNG.randn(c).astype(np.float32),
        f"{prefix}_mean": RNG.randn(c).astype(np.float32),
        f"{prefix}_var": (np.abs(RNG.randn(c)) + 0.05).astype(np.float32),
    }


def bn_node(x, y, prefix="bn", **attrs):
    return node("BatchNormalization", [x] + [f"{prefix}_{p}" for p in ("scale", "b", "mean", "var")], [y],
                name=f"{prefix}_node", **attrs)


def op_types(m):
    return [n.op_type for n in compile_model(m).graph.nodes]


@pytest.mark.parametrize("shape", [(3, 4), (2, 5, 7), (2, 3, 5, 4), (1, 3, 2, 3, 4)],
                         ids=["rank2", "rank3", "rank4", "rank5"])
def test_batchnorm_standalone(shape):
    x = RNG.randn(*shape).astype(np.float32)
    m = make_model([bn_node("x", "y", epsilon=1e-3)], {"x": (shape, "float32")}, ["y"], bn_params(shape[1]))
    assert op_types(m) == ["BatchNormalization"]
    check_op(m, {"x": x})


def test_batchnorm_opset9_default_epsilon_and_relu_fused():
    x = RNG.randn(2, 6, 5).astype(np.float32)
    m = make_model([bn_node("x", "t"), node("Relu", ["t"], ["y"])], {"x": (x.shape, "float32")}, ["y"],
                   bn_params(6), opset=9)
    (bn,) = compile_model(m).graph.nodes
    assert bn.op_type == "BatchNormalization" and bn.act == (0.0, float("inf"))
    ref, out = check_op(m, {"x": x})
    assert (out[0] >= 0).all() and (out[0] == 0).any()


def test_batchnorm_in_place_after_add():
    x = RNG.randn(1, 4, 6, 6).astype(np.float32)
    m = make_model([node("Add", ["x", "x"], ["t"]), bn_node("t", "u"), node("Mul", ["u", "x"], ["y"])],
                   {"x": (x.shape, "float32")}, ["y"], bn_params(4))
    assert op_types(m) == ["Add", "BatchNormalization", "Mul"]
    check_op(m, {"x": x})


def raw_model(n, outputs, opset):
    """A model without onnx's checker (it rejects these training-form nodes before we can)."""
    g = helper.make_graph([n], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in bn_params(3).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_batchnorm_training_mode_unsupported():
    m = raw_model(bn_node("x", "y", training_mode=1), ["y"], 15)
    with pytest.raises(UnsupportedOpError, match="training_mode=1"):
        compile_model(m)


def test_batchnorm_training_outputs_unsupported():
    n = node("BatchNormalization", ["x", "bn_scale", "bn_b", "bn_mean", "bn_var"], ["y", "rm", "rv"])
    m = raw_model(n, ["y", "rm", "rv"], 9)
    with pytest.raises(UnsupportedOpError, match="training outputs"):
        compile_model(m)


def test_batchnorm_runtime_scale_unsupported():
    p = bn_params(3)
    del p["bn_scale"]
    m = make_model([bn_node("x", "y")], {"x": ((2, 3, 4), "float32"), "bn_scale": ((3,), "float32")}, ["y"], p)
    with pytest.raises(UnsupportedOpError, match="scale 'bn_scale' is computed at run time"):
        compile_model(m)


# --- folding --------------------------------------------------------------------------------------
# check_op compares the reference of the compiled (folded) graph with onnxruntime on the original model.

def conv_bn_relu(bias=True, group=1, cin=3, cout=8):
    inits = {"w": RNG.randn(cout, cin // group, 3, 3).astype(np.float32), **bn_params(cout)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = RNG.randn(cout).astype(np.float32)
        ins.append("b")
    nodes = [node("Conv", ins, ["c"], pads=[1, 1, 1, 1], group=group), bn_node("c", "n"),
             node("Relu", ["n"], ["y"])]
    shape = (1, cin, 7, 6)
    return make_model(nodes, {"x": (shape, "float32")}, ["y"], inits), {"x": RNG.randn(*shape).astype(np.float32)}


@pytest.mark.parametrize("bias,group,cin,cout", [(True, 1, 3, 8), (False, 1, 3, 8), (True, 4, 4, 8)],
                         ids=["bias", "no_bias", "depthwise_x2"])
def test_fold_conv_bn_relu(bias, group, cin, cout):
    m, feeds = conv_bn_relu(bias, group, cin, cout)
    c = compile_model(m)
    (conv,) = c.graph.nodes
    assert conv.op_type == "Conv" and len(conv.inputs) == 3 and c.graph.tensors[conv.inputs[2]].is_const
    assert conv.act == (0.0, float("inf"))
    assert any("BatchNormalization" in f for f in conv.fused) and any("Relu" in f for f in conv.fused)
    check_op(m, feeds)


@pytest.mark.parametrize("tb,with_c,alpha,beta", [(0, True, 1.0, 1.0), (1, True, 0.5, 2.0), (1, False, 1.5, 1.0),
                                                  (0, False, 1.0, 1.0)])
def test_fold_gemm_bn(tb, with_c, alpha, beta):
    k, n = 9, 6
    inits = {"b": RNG.randn(*((n, k) if tb else (k, n))).astype(np.float32), **bn_params(n)}
    ins = ["a", "b"]
    if with_c:
        inits["c"] = RNG.randn(n).astype(np.float32)
        ins.append("c")
    m = make_model([node("Gemm", ins, ["g"], transB=tb, alpha=alpha, beta=beta), bn_node("g", "y")],
                   {"a": ((4, k), "float32")}, ["y"], inits)
    assert op_types(m) == ["Gemm"]
    check_op(m, {"a": RNG.randn(4, k).astype(np.float32)})


def test_fold_matmul_2d_into_gemm():
    m = make_model([node("MatMul", ["a", "b"], ["t"]), bn_node("t", "y")], {"a": ((3, 10), "float32")}, ["y"],
                   {"b": RNG.randn(10, 5).astype(np.float32), **bn_params(5)})
    assert op_types(m) == ["Gemm"]
    check_op(m, {"a": RNG.randn(3, 10).astype(np.float32)})


def test_batched_matmul_bn_not_folded():
    # BN's channel axis 1 is MatMul's batch axis here: the scale cannot go into B.
    m = make_model([node("MatMul", ["a", "b"], ["t"]), bn_node("t", "y")], {"a": ((2, 3, 10), "float32")}, ["y"],
                   {"b": RNG.randn(10, 5).astype(np.float32), **bn_params(3)})
    assert op_types(m) == ["MatMul", "BatchNormalization"]
    check_op(m, {"a": RNG.randn(2, 3, 10).astype(np.float32)})


def test_no_fold_when_conv_output_is_shared_or_a_graph_output():
    w = RNG.randn(4, 2, 3, 3).astype(np.float32)
    x = RNG.randn(1, 2, 5, 5).astype(np.float32)
    shared = make_model([node("Conv", ["x", "w"], ["c"]), bn_node("c", "n"), node("Add", ["c", "n"], ["y"])],
                        {"x": (x.shape, "float32")}, ["y"], {"w": w, **bn_params(4)})
    assert op_types(shared) == ["Conv", "BatchNormalization", "Add"]
    check_op(shared, {"x": x})
    out = make_model([node("Conv", ["x", "w"], ["c"]), bn_node("c", "y")],
                     {"x": (x.shape, "float32")}, ["c", "y"], {"w": w, **bn_params(4)})
    assert op_types(out) == ["Conv", "BatchNormalization"]
    check_op(out, {"x": x})


def test_fold_keeps_shared_weights_intact():
    # Two convs share W; only the one followed by BN gets scaled weights.
    w = RNG.randn(3, 3, 3, 3).astype(np.float32)
    x = RNG.randn(1, 3, 6, 6).astype(np.float32)
    m = make_model([node("Conv", ["x", "w"], ["c1"]), bn_node("c1", "n1"), node("Conv", ["x", "w"], ["c2"]),
                    node("Add", ["n1", "c2"], ["y"])], {"x": (x.shape, "float32")}, ["y"], {"w": w, **bn_params(3)})
    assert op_types(m) == ["Conv", "Conv", "Add"]
    check_op(m, {"x": x})
