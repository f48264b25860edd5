"""LRN: float against onnxruntime and the reference (odd and even sizes,
the sqrt forms of beta and powf); the integer cuvil.QLRN (from
DequantizeLinear -> LRN -> QuantizeLinear): generated C bit for bit with
the reference in NCHW and in NHWC (between integer convolutions), within
one step of onnxruntime running the QDQ graph as written; its gain table
checked against the exact gain."""
from __future__ import annotations

import numpy as np
import pytest

from cuvil_mcu import ops
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.ir import Node, Tensor
from cuvil_mcu.ops.lrn import qlrn_apply, qlrn_table
from helpers import assert_close, make_model, node, run_c, run_ort, run_ref
from qhelpers import assert_exact

RNG = np.random.RandomState(7)


def spec_lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN as the ONNX operator page defines it, in float64 (any rank, any size)."""
    x = np.asarray(x, np.float64)
    c = x.shape[1]
    sq = np.zeros_like(x)
    for k in range(c):
        lo, hi = max(0, k - (size - 1) // 2), min(c - 1, k + (size - 1) - (size - 1) // 2)
        sq[:, k] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
    return x / (bias + alpha / size * sq) ** beta


def independent(m, feeds, attrs, rank):
    """onnxruntime where it runs LRN (4-D, odd sizes); else the operator's
    definition (spec_lrn) applied between the graph's quantize steps (onnx's
    reference evaluator also refuses other ranks)."""
    if rank == 4 and attrs["size"] % 2:
        return run_ort(m, feeds)
    from cuvil_mcu import quant
    g = compile_model(m, opt_level=0).graph   # the QDQ graph as written: DQ -> LRN -> Q
    x = feeds["x"]
    q = [n for n in g.nodes if n.op_type == "QuantizeLinear"]
    if q:   # Q -> DQ -> LRN -> Q -> DQ
        (xs, xz), (ys, yz) = [(g.tensors[n.inputs[1]].data, g.tensors[n.inputs[2]].data) for n in q]
        x = quant.dequantize(quant.quantize(x, xs, xz, xz.dtype.name), xs, xz)
        y = spec_lrn(x, **attrs).astype(np.float32)
        return [quant.dequantize(quant.quantize(y, ys, yz, yz.dtype.name), ys, yz)]
    return [spec_lrn(x, **attrs).astype(np.float32)]


@pytest.mark.parametrize("attrs,shape", [
    ({"size": 5}, (1, 10, 6, 6)),
    ({"size": 3, "alpha": 0.002, "beta": 0.5, "bias": 2.0}, (2, 7, 5)),
    ({"size": 4, "alpha": 0.01, "beta": 1.0, "bias": 1.5}, (1, 9, 3, 4)),
    ({"size": 6, "alpha": 0.003, "beta": 0.6, "bias": 0.8}, (1, 8, 4, 4)),
    ({"size": 1, "alpha": 0.1}, (1, 3, 2, 2)),
], ids=["alexnet", "beta05_3d", "beta1_even", "powf_even", "size1"])
def test_float_lrn(attrs, shape):
    m = make_model([node("LRN", ["x"], ["y"], **attrs)], {"x": (shape, "float32")}, ["y"])
    assert [n.op_type for n in compile_model(m).graph.nodes] == ["LRN"]
    feeds = {"x": (RNG.randn(*shape) * 10).astype(np.float32)}
    ref = run_ref(m, feeds)[0]
    assert_close(ref, independent(m, feeds, attrs, len(shape))[0], 2e-6, "reference vs independent")
    assert_close(run_c(m, feeds)[0], ref, 2e-6, "generated C vs reference")


def qdq_lrn(shape, attrs, xs, xz, ys, yz, dtype="int8", conv=False):
    """Q -> DQ -> LRN -> Q -> DQ; with conv, between two integer 1x1
    convolutions (so the layout pass runs it channels-last)."""
    c = shape[1]
    inits = {"xs": np.array(xs, np.float32), "xz": np.array(xz, dtype),
             "ys": np.array(ys, np.float32), "yz": np.array(yz, dtype)}
    nodes = [node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"])]
    src = "xd"
    if conv:
        inits.update({"w": RNG.randint(-127, 128, (c, c, 1, 1)).astype(np.int8), "ws": np.array(0.004, np.float32),
                      "wz": np.array(0, np.int8), "cs": np.array(xs, np.float32), "cz": np.array(xz, dtype)})
        nodes += [node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]), node("Conv", ["xd", "wd"], ["c1"]),
                  node("QuantizeLinear", ["c1", "cs", "cz"], ["c1q"]),
                  node("DequantizeLinear", ["c1q", "cs", "cz"], ["c1d"])]
        src = "c1d"
    nodes += [node("LRN", [src], ["l"], **attrs), node("QuantizeLinear", ["l", "ys", "yz"], ["lq"]),
              node("DequantizeLinear", ["lq", "ys", "yz"], ["y" if not conv else "ld"])]
    if conv:
        nodes += [node("Conv", ["ld", "wd"], ["c2"]), node("QuantizeLinear", ["c2", "cs", "cz"], ["c2q"]),
                  node("DequantizeLinear", ["c2q", "cs", "cz"], ["y"])]
    return make_model(nodes, {"x": (shape, "float32")}, ["y"], inits)


QCASES = {
    "alexnet_int8": ((1, 12, 5, 5), {"size": 5, "alpha": 1e-4, "beta": 0.75}, 0.5, 3, 0.3, -2, "int8", False),
    "strong_uint8": ((1, 9, 4, 4), {"size": 3, "alpha": 0.5, "beta": 0.75, "bias": 1.0}, 0.05, 120, 0.02, 130,
                     "uint8", False),
    "even_5d_nchw": ((1, 8, 2, 3, 3), {"size": 4, "alpha": 0.05, "beta": 0.6, "bias": 2.0}, 0.1, -5, 0.05, 0, "int8",
                     False),
    "between_convs": ((1, 8, 5, 5), {"size": 5, "alpha": 0.05, "beta": 0.6, "bias": 2.0}, 0.1, -5, 0.05, 0, "int8",
                      True),
}


@pytest.mark.parametrize("case", sorted(QCASES))
def test_qlrn_bit_exact_and_within_one_step_of_onnxruntime(case):
    args = QCASES[case]
    m = qdq_lrn(*args)
    c = compile_model(m)
    qlrn = [n for n in c.graph.nodes if n.op_type == "cuvil.QLRN"]
    # rank 3 and 4 run channels-last, as the other integer spatial kernels
    assert len(qlrn) == 1 and int(qlrn[0].attrs.get("_channels_last", 0)) == int(len(args[0]) in (3, 4))
    assert "LRN" not in [n.op_type for n in c.graph.nodes]
    if args[-1]:
        assert [n.op_type for n in c.graph.nodes].count("Transpose") == 2   # at the graph's edges only
    x = (RNG.randn(*args[0]) * 40 * args[2]).astype(np.float32)
    ort_out = independent(m, {"x": x}, args[1], len(args[0]))[0]
    for mode in ("fixed", "float"):
        ref = run_ref(m, {"x": x}, requant=mode)[0]
        out = run_c(m, {"x": x}, requant=mode)[0]
        assert_exact(out, ref, f"{case} {mode}: generated C vs reference")
        assert np.unique(ref).size > 15, f"{case}: output too flat"
        steps = np.rint(np.abs(out.astype(np.float64) - ort_out) / (args[4] if not args[-1] else 0.1))
        assert steps.max() <= 1, f"{case} {mode}: {steps.max()} steps from onnxruntime"


def test_qlrn_gain_table_matches_the_exact_gain():
    """The interpolated gain G(S), for every window sum S up to the largest,
    within 3e-4 relative of sx / sy * (bias + alpha / size * sx^2 * S)^-beta."""
    attrs = {"size": 5, "alpha": 0.02, "beta": 0.75, "bias": 1.0}
    n = Node("l", "cuvil.QLRN", ["x", "xs", "xz", "ys", "yz"], ["y"], attrs)
    t = lambda name, v: Tensor(name, np.asarray(v).shape, np.asarray(v).dtype.name, np.asarray(v))  # noqa: E731
    ins = [Tensor("x", (1, 8, 2, 2), "int8"), t("xs", np.float32(0.07)), t("xz", np.int8(-3)),
           t("ys", np.float32(0.01)), t("yz", np.int8(0))]
    table, qs, *_ = qlrn_table(n, ins)
    s = np.arange(0, 5 * 131 ** 2 + 1, dtype=np.int64)
    d = np.full_like(s, 1 << 20)           # y = d * G / 2^qs: a large d reads G with 20 more bits
    g = qlrn_apply(table, qs, d, s).astype(np.float64) / (1 << 20)
    exact = 0.07 / 0.01 * (1.0 + 0.02 / 5 * 0.07 ** 2 * s.astype(np.float64)) ** -0.75
    assert np.max(np.abs(g - exact) / exact) < 3e-4


def test_lrn_from_ptq():
    m = make_model([node("LRN", ["x"], ["y"], size=3, alpha=0.01, beta=0.75)], {"x": ((1, 6, 4, 4), "float32")}, ["y"])
    calib = {"x": (RNG.randn(8, 1, 6, 4, 4) * 5).astype(np.float32)}
    c = compile_model(m, quantize="int8", calibration=calib)
    assert "cuvil.QLRN" in [n.op_type for n in c.graph.nodes] and ops.get("cuvil.QLRN") is not None
    assert_exact(run_c(m, {"x": calib["x"][1]}, quantize="int8", calibration=calib)[0],
                 run_ref(m, {"x": calib["x"][1]}, quantize="int8", calibration=calib)[0], "PTQ LRN: C vs reference")


def test_strict_builds_of_the_classic_kernels():
    """The kernels of this family and its neighbours (integer QLRN, QSum,
    QAffine; float Sum, LRN) in one model, built by every compiler and
    standard of helpers.STRICT_BUILDS with -Werror (and ASan/UBSan), each
    run equal to the reference (bit for bit; float within 1e-5)."""
    from helpers import STRICT_BUILDS, check_strict_builds, run_strict_builds
    c = 6
    p = {"bn_s": RNG.uniform(0.5, 1.5, c).astype(np.float32), "bn_b": RNG.randn(c).astype(np.float32),
         "bn_m": RNG.randn(c).astype(np.float32), "bn_v": RNG.uniform(0.5, 1.5, c).astype(np.float32)}
    q = {f"{k}s": np.array(s, np.float32) for k, s in (("a", 0.05), ("b", 0.04), ("c", 0.08), ("d", 0.03))}
    q.update({f"{k}z": np.array(z, np.int8) for k, z in (("a", 2), ("b", -1), ("c", -128), ("d", 0))})
    nodes = [node("QuantizeLinear", ["x", "as", "az"], ["xq"]), node("DequantizeLinear", ["xq", "as", "az"], ["xd"]),
             node("BatchNormalization", ["xd", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"]),
             node("QuantizeLinear", ["bn", "bs", "bz"], ["bq"]), node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"]),
             node("Sum", ["xd", "bd", "bd"], ["s"]), node("Relu", ["s"], ["sr"]),
             node("QuantizeLinear", ["sr", "cs", "cz"], ["sq"]), node("DequantizeLinear", ["sq", "cs", "cz"], ["sd"]),
             node("LRN", ["sd"], ["l"], size=3, alpha=0.05), node("QuantizeLinear", ["l", "ds", "dz"], ["lq"]),
             node("DequantizeLinear", ["lq", "ds", "dz"], ["ld"]),
             node("LRN", ["ld"], ["lf"], size=5), node("Sum", ["lf", "ld", "xd"], ["y"])]
    m = make_model(nodes, {"x": ((1, c, 5, 4), "float32")}, ["y"], {**p, **q})
    kinds = {n.op_type for n in compile_model(m).graph.nodes}
    assert {"cuvil.QAffine", "cuvil.QSum", "cuvil.QLRN", "LRN", "Sum"} <= kinds, kinds
    feeds = {"x": (RNG.randn(1, c, 5, 4) * 2).astype(np.float32)}
    assert check_strict_builds(m, feeds, rel=1e-5, requant="fixed") == []
    assert run_strict_builds(compile_model(m, requant="float"), feeds, rel=1e-5,
                             builds=[STRICT_BUILDS[0], STRICT_BUILDS[-1]]) == []
