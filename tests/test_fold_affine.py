"""passes/fold_affine.py: per-channel affine maps (BatchNormalization, Mul /
Add / Sub by per-channel constants, as Caffe2 exports write BatchNorm)
folded into the Conv / Gemm next to them, merged when they follow each
other, refused where zero padding would make the fold wrong; the kernels
left, and the outputs against onnxruntime. In int8 (QDQ or --quantize) what
stays is an integer per-channel kernel: no float island."""
from __future__ import annotations

import numpy as np
import pytest

from cuvil_mcu import ops
from cuvil_mcu.compiler import compile_model
from helpers import check_op, make_model, node, run_c, run_ort, run_ref
from qhelpers import assert_exact

RNG = np.random.RandomState(4)


def kernels(m, **kw):
    return [n.op_type for n in compile_model(m, verify_each=True, **kw).graph.nodes if not ops.get(n.op_type).view]


def pc(c, lo=0.5, hi=1.5, shape=None):
    """A per-channel constant, shaped [C, 1, 1] as Caffe2's Unsqueeze leaves it."""
    return RNG.uniform(lo, hi, c).astype(np.float32).reshape(shape or (c, 1, 1))


def bn(prefix, c):
    return {f"{prefix}_s": pc(c, shape=(c,)), f"{prefix}_b": (RNG.randn(c) * 0.3).astype(np.float32),
            f"{prefix}_m": (RNG.randn(c) * 0.3).astype(np.float32), f"{prefix}_v": pc(c, shape=(c,))}


def bn_node(x, y, p):
    return node("BatchNormalization", [x, f"{p}_s", f"{p}_b", f"{p}_m", f"{p}_v"], [y], name=f"{p}_node")


def conv(x, y, w, pads=(0, 0, 0, 0), group=1, bias=None):
    return node("Conv", [x, w] + ([bias] if bias else []), [y], name=f"conv_{y}", pads=list(pads), group=group)


def test_caffe2_batchnorm_after_conv_folds_into_it():
    """Conv -> BatchNormalization -> Mul -> Add -> Relu: one Conv kernel."""
    inits = {"w": (RNG.randn(6, 3, 3, 3) * 0.3).astype(np.float32), "sc": pc(6), "sh": pc(6, -0.5, 0.5), **bn("bn", 6)}
    m = make_model([conv("x", "c", "w", (1, 1, 1, 1)), bn_node("c", "b", "bn"), node("Mul", ["b", "sc"], ["u"]),
                    node("Add", ["u", "sh"], ["a"]), node("Relu", ["a"], ["y"])],
                   {"x": ((1, 3, 8, 8), "float32")}, ["y"], inits, opset=9)
    assert kernels(m) == ["Conv"]
    check_op(m, {"x": RNG.randn(1, 3, 8, 8).astype(np.float32)})


def test_preactivation_batchnorm_after_concat_is_one_kernel():
    """DenseNet: Concat -> BN -> Mul -> Add -> Relu -> Conv: the three affine
    ops become one BatchNormalization with the Relu fused (the Relu keeps it
    out of the Conv)."""
    inits = {"w": (RNG.randn(4, 7, 1, 1) * 0.3).astype(np.float32), "sc": pc(7), "sh": pc(7, -0.5, 0.5), **bn("bn", 7)}
    m = make_model([node("Concat", ["x1", "x2"], ["cat"], axis=1), bn_node("cat", "b", "bn"),
                    node("Mul", ["b", "sc"], ["u"]), node("Add", ["u", "sh"], ["a"]), node("Relu", ["a"], ["r"]),
                    conv("r", "y", "w")],
                   {"x1": ((1, 3, 5, 5), "float32"), "x2": ((1, 4, 5, 5), "float32")}, ["y"], inits, opset=9)
    assert kernels(m) == ["Concat", "BatchNormalization", "Conv"]
    check_op(m, {"x1": RNG.randn(1, 3, 5, 5).astype(np.float32), "x2": RNG.randn(1, 4, 5, 5).astype(np.float32)})


@pytest.mark.parametrize("op", ["Mul", "Add", "Sub", "SubReversed", "BatchNormalization"])
@pytest.mark.parametrize("pads", [(0, 0, 0, 0), (1, 1, 1, 1)], ids=["valid", "padded"])
def test_affine_before_conv(op, pads):
    """x -> affine -> Conv: folded into the Conv's weights and bias, except a
    shift before a padded Conv (its border would see t where zeros are)."""
    c = pc(5, -1.0, 1.0)
    inits = {"w": (RNG.randn(3, 5, 3, 3) * 0.3).astype(np.float32), "b0": (RNG.randn(3) * 0.1).astype(np.float32),
             "c": c, **bn("bn", 5)}
    first = {"Mul": node("Mul", ["x", "c"], ["a"]), "Add": node("Add", ["c", "x"], ["a"]),
             "Sub": node("Sub", ["x", "c"], ["a"]), "SubReversed": node("Sub", ["c", "x"], ["a"]),
             "BatchNormalization": bn_node("x", "a", "bn")}[op]
    m = make_model([first, conv("a", "y", "w", pads, bias="b0")], {"x": ((1, 5, 6, 6), "float32")}, ["y"], inits)
    shifts = op != "Mul"
    expect = ["Conv"] if not (shifts and any(pads)) else [op if op != "SubReversed" else "Sub", "Conv"]
    assert kernels(m) == expect
    check_op(m, {"x": RNG.randn(1, 5, 6, 6).astype(np.float32)}, rel_c=2e-5)


def test_scale_before_grouped_padded_conv_and_two_readers():
    """A pure per-channel scale read by a depthwise and a grouped Conv, both
    padded: folded into both (zero padding commutes with a scale)."""
    inits = {"c": pc(6, -2.0, 2.0), "w1": (RNG.randn(6, 1, 3, 3) * 0.3).astype(np.float32),
             "w2": (RNG.randn(4, 3, 3, 3) * 0.3).astype(np.float32)}
    m = make_model([node("Mul", ["x", "c"], ["a"]), conv("a", "y1", "w1", (1, 1, 1, 1), group=6),
                    conv("a", "y2", "w2", (1, 1, 1, 1), group=2)],
                   {"x": ((1, 6, 5, 5), "float32")}, ["y1", "y2"], inits)
    assert kernels(m) == ["Conv", "Conv"]
    check_op(m, {"x": RNG.randn(1, 6, 5, 5).astype(np.float32)}, rel_c=2e-5)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_affine_before_and_after_gemm(trans_b):
    """[N, K] -> Mul -> Add -> Gemm -> Mul -> Add: one Gemm."""
    w = (RNG.randn(*((5, 8) if trans_b else (8, 5))) * 0.3).astype(np.float32)
    inits = {"w": w, "cb": (RNG.randn(5) * 0.1).astype(np.float32), "s1": pc(8, shape=(8,)),
             "t1": pc(8, -1, 1, shape=(1, 8)), "s2": pc(5, shape=(5,)), "t2": pc(5, -1, 1, shape=(5,))}
    m = make_model([node("Mul", ["x", "s1"], ["a"]), node("Add", ["a", "t1"], ["b"]),
                    node("Gemm", ["b", "w", "cb"], ["g"], transB=trans_b, alpha=0.7, beta=1.3),
                    node("Mul", ["g", "s2"], ["u"]), node("Add", ["u", "t2"], ["y"])],
                   {"x": ((3, 8), "float32")}, ["y"], inits)
    assert kernels(m) == ["Gemm"]
    check_op(m, {"x": RNG.randn(3, 8).astype(np.float32)}, rel_c=2e-5)


def test_not_per_channel_is_left_alone():
    """A constant varying along another axis is not a per-channel map; a
    lone per-channel Mul stays the element-wise op it was."""
    inits = {"c": RNG.randn(1, 1, 4, 1).astype(np.float32), "d": pc(3)}
    m = make_model([node("Mul", ["x", "c"], ["a"]), node("Add", ["a", "d"], ["y"])],
                   {"x": ((1, 3, 4, 4), "float32")}, ["y"], inits)
    assert kernels(m) == ["Mul", "Add"]
    check_op(m, {"x": RNG.randn(1, 3, 4, 4).astype(np.float32)})


def qdq(x, s, z, name):
    return [node("QuantizeLinear", [x, s, z], [f"{name}_q"]), node("DequantizeLinear", [f"{name}_q", s, z], [name])]


def test_int8_batchnorm_is_integer():
    """DQ -> BatchNormalization -> Relu -> Q (the pre-activation BatchNorm of
    an onnxruntime QDQ DenseNet): one integer cuvil.QAffine, no float
    kernel, C = reference in both modes, equal to onnxruntime running the
    QDQ graph as written (one rounding, 2^-k of a step from the real map)."""
    c = 6
    p = bn("bn", c)
    p["bn_s"][2] = -p["bn_s"][2]       # a negative scale too
    inits = {"xs": np.array(0.04, np.float32), "xz": np.array(-3, np.int8), "ys": np.array(0.03, np.float32),
             "yz": np.array(-128, np.int8), **p}
    m = make_model(qdq("x", "xs", "xz", "xd") + [bn_node("xd", "b", "bn"), node("Relu", ["b"], ["r"])]
                   + qdq("r", "ys", "yz", "y"), {"x": ((1, c, 5, 5), "float32")}, ["y"], inits)
    ks = kernels(m)
    assert "BatchNormalization" not in ks and "cuvil.QAffine" in ks and ks.count("DequantizeLinear") == 1
    x = (RNG.randn(1, c, 5, 5) * 2).astype(np.float32)
    ort_out = run_ort(m, {"x": x})[0]
    for mode in ("fixed", "float"):
        ref = run_ref(m, {"x": x}, requant=mode)[0]
        assert_exact(run_c(m, {"x": x}, requant=mode)[0], ref, f"{mode}: generated C vs reference")
        steps = np.rint(np.abs(ref.astype(np.float64) - ort_out) / 0.03)
        assert steps.max() == 0 and np.unique(ref).size > 20, f"{mode}: {steps.max()} steps from onnxruntime"


def test_ptq_preactivation_batchnorm_has_no_float_island():
    """--quantize int8 of Concat -> BN -> Mul -> Add -> Relu -> Conv: every
    kernel integer but the input quantize and output dequantize."""
    inits = {"w": (RNG.randn(4, 7, 1, 1) * 0.3).astype(np.float32), "sc": pc(7), "sh": pc(7, -0.5, 0.5), **bn("bn", 7)}
    m = make_model([node("Concat", ["x1", "x2"], ["cat"], axis=1), bn_node("cat", "b", "bn"),
                    node("Mul", ["b", "sc"], ["u"]), node("Add", ["u", "sh"], ["a"]), node("Relu", ["a"], ["r"]),
                    conv("r", "y", "w")],
                   {"x1": ((1, 3, 5, 5), "float32"), "x2": ((1, 4, 5, 5), "float32")}, ["y"], inits, opset=9)
    calib = {"x1": RNG.randn(8, 1, 3, 5, 5).astype(np.float32), "x2": RNG.randn(8, 1, 4, 5, 5).astype(np.float32)}
    c = compile_model(m, quantize="int8", calibration=calib)
    floats = [n.op_type for n in c.graph.nodes if any(c.graph.tensors[o].dtype == "float32" for o in n.outputs if o)
              and n.op_type != "DequantizeLinear"]
    assert floats == [], f"float kernels left: {floats}"
    feeds = {k: v[0] for k, v in calib.items()}
    assert_exact(run_c(m, feeds, quantize="int8", calibration=calib)[0],
                 run_ref(m, feeds, quantize="int8", calibration=calib)[0], "C vs reference")
