"""Integer matrix products (ops/qgemm.py): com.microsoft.QGemm, QLinearMatMul
and MatMulInteger.

As in test_qconv.py: reference in float-requant mode == onnxruntime (graph
optimizations on), fixed-point mode within 1 LSB; generated C == reference
bit for bit in both modes for int8 and uint8 activations (sanitizer build);
bad quantization parameters raise a CuvilError naming node and tensor. The
uint8-activation x int8-weight layers use weights in [-64, 63] for the
comparison with onnxruntime (its AVX2 kernels saturate int16 pair sums
otherwise; see test_qconv.py).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import CuvilError
from helpers import run_ort
from test_qconv import assert_exact, assert_lsb, compile_run, qmodel, qrange, ref_outputs, spread


def _weights(rng, shape, adt, bdt, full_range=False):
    if bdt == "uint8":
        return rng.randint(0, 256, shape).astype(np.uint8)
    lim = 64 if adt == "uint8" and not full_range else 128
    return rng.randint(-lim + (lim == 128), lim, shape).astype(np.int8)


def _act_params(rng, adt):
    s = np.float32(rng.uniform(0.01, 0.05))
    zp = rng.randint(-20, 21) if adt == "int8" else rng.randint(100, 150)
    return s, zp


def _y_params(rng, adt, kk, w, wzp, a_s, b_s, alpha=1.0):
    acc_std = np.sqrt(kk) * 60.0 * np.std(w.astype(np.float64) - wzp)
    y_s = np.float32(alpha * acc_std * a_s * np.mean(b_s) / 45.0)
    y_zp = rng.randint(-10, 11) if adt == "int8" else rng.randint(118, 139)
    return y_s, y_zp


# --------------------------------------------------------------------------- QGemm

GEMM_CASES = [
    # id, M, K, N, transA, transB, C shape (None: no C), per-column B scale, alpha, B constant
    ("fc_transB_bias", 1, 16, 10, 0, 1, (10,), True, 1.0, True),
    ("odd_rows_no_trans", 3, 7, 5, 0, 0, (5,), False, 1.0, True),
    ("transA_no_bias", 4, 9, 6, 1, 1, None, True, 1.0, True),
    ("bias_mn", 3, 5, 4, 0, 1, (3, 4), True, 1.0, True),
    ("bias_m1", 3, 5, 4, 0, 0, (3, 1), False, 1.0, True),
    ("bias_scalar", 2, 6, 3, 0, 1, (1,), False, 1.0, True),
    ("alpha", 2, 11, 3, 0, 1, (3,), True, 0.37, True),
    ("run_time_b", 3, 8, 5, 0, 1, (5,), False, 1.0, False),
    ("run_time_b_transA_alpha", 5, 6, 4, 1, 0, None, True, 1.7, False),
]
GEMM_FORMS = [("u8_weights_zp128", "uint8", 128), ("u8_weights_zp7", "uint8", 7)]  # for uint8 activations


def gemm_model(adt: str, seed=3, cases=GEMM_CASES, forms=True):
    rng = np.random.RandomState(seed + (adt == "uint8"))
    layers = [c[1:] + ("int8", 0) for c in cases]
    if forms and adt == "uint8":
        layers += [(3, 9, 5, 0, 1, (5,), True, 1.0, True, bdt, zp) for _, bdt, zp in GEMM_FORMS]
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (m, kk, n, ta, tb, cshape, pc, alpha, bconst, bdt, bzp) in enumerate(layers):
        a_s, a_zp = _act_params(rng, adt)
        w = _weights(rng, (n, kk) if tb else (kk, n), adt, bdt)
        b_s = rng.uniform(0.002, 0.02, n).astype(np.float32) if pc else np.float32(rng.uniform(0.002, 0.02))
        b_z = np.full(n, bzp, bdt) if pc else np.array(bzp, bdt)
        y_s, y_zp = _y_params(rng, adt, kk, w, bzp, a_s, b_s, alpha)
        inits.update({f"as{i}": a_s, f"az{i}": np.array(a_zp, adt), f"bs{i}": b_s, f"bz{i}": b_z,
                      f"ys{i}": y_s, f"yz{i}": np.array(y_zp, adt)})
        if bconst:
            inits[f"b{i}"] = w
        else:
            inputs[f"b{i}"] = (w.shape, bdt)
            feeds[f"b{i}"] = w
        if cshape is not None:
            inits[f"c{i}"] = rng.randint(-3000, 3001, cshape).astype(np.int32)
        ins = [f"a{i}", f"as{i}", f"az{i}", f"b{i}", f"bs{i}", f"bz{i}", f"c{i}" if cshape else "", f"ys{i}", f"yz{i}"]
        attrs = dict(transA=ta, transB=tb)
        if alpha != 1.0:
            attrs["alpha"] = alpha
        nodes.append(helper.make_node("QGemm", ins, [f"y{i}"], name=f"qgemm{i}", domain="com.microsoft", **attrs))
        ashape = (kk, m) if ta else (m, kk)
        inputs[f"a{i}"] = (ashape, adt)
        lo, hi = qrange(adt)
        feeds[f"a{i}"] = rng.randint(lo, hi + 1, ashape).astype(adt)
        outputs[f"y{i}"] = adt
    return qmodel(nodes, inputs, outputs, inits), feeds


def _gemm_ids(adt):
    return [c[0] for c in GEMM_CASES] + ([f[0] for f in GEMM_FORMS] if adt == "uint8" else [])


# --------------------------------------------------------------------------- QLinearMatMul / MatMulInteger

MATMUL_CASES = [
    # id, a shape, b shape, B constant, per-column b scale
    ("2d_const", (3, 7), (7, 5), True, False),
    ("2d_const_per_column", (4, 9), (9, 6), True, True),
    ("batched_a_const_b", (2, 3, 4, 5), (5, 6), True, False),
    ("batched_b_const_per_column", (2, 3, 5), (2, 5, 4), True, True),
    ("broadcast_run_time_per_column", (3, 2, 4), (1, 4, 3), False, True),
    ("broadcast_both_run_time", (2, 1, 3, 5), (1, 4, 5, 2), False, False),
    ("2d_run_time", (3, 6), (6, 4), False, False),
    ("2d_run_time_per_column", (3, 6), (6, 4), False, True),
    ("1d_a", (5,), (5, 3), True, False),
    ("1d_b_run_time", (2, 3, 5), (5,), False, False),
]


def matmul_model(adt: str, seed=5, cases=MATMUL_CASES):
    rng = np.random.RandomState(seed + (adt == "uint8"))
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (cid, ashape, bshape, bconst, pc) in enumerate(cases):
        n = bshape[-1] if len(bshape) >= 2 else 1
        kk = ashape[-1]
        a_s, a_zp = _act_params(rng, adt)
        w = _weights(rng, bshape, adt, "int8")
        # per column: [N] for a 2-D b, else b's shape with the second-to-last dimension 1
        # (a scale per column of each matrix: the forms onnxruntime accepts)
        qshape = ((n,) if len(bshape) == 2 else bshape[:-2] + (1, n)) if pc else ()
        b_s = rng.uniform(0.002, 0.02, qshape).astype(np.float32)
        b_z = np.zeros(qshape, np.int8)
        y_s, y_zp = _y_params(rng, adt, kk, w, 0, a_s, b_s)
        inits.update({f"as{i}": a_s, f"az{i}": np.array(a_zp, adt), f"bs{i}": b_s, f"bz{i}": b_z,
                      f"ys{i}": y_s, f"yz{i}": np.array(y_zp, adt)})
        if bconst:
            inits[f"b{i}"] = w
        else:
            inputs[f"b{i}"] = (bshape, "int8")
            feeds[f"b{i}"] = w
        ins = [f"a{i}", f"as{i}", f"az{i}", f"b{i}", f"bs{i}", f"bz{i}", f"ys{i}", f"yz{i}"]
        nodes.append(helper.make_node("QLinearMatMul", ins, [f"y{i}"], name=f"qmatmul{i}"))
        inputs[f"a{i}"] = (ashape, adt)
        lo, hi = qrange(adt)
        feeds[f"a{i}"] = rng.randint(lo, hi + 1, ashape).astype(adt)
        outputs[f"y{i}"] = adt
    return qmodel(nodes, inputs, outputs, inits), feeds


INT_CASES = [
    # id, a dtype, b dtype, a shape, b shape, B constant, a zp, b zp (None: absent; list: per column)
    ("u8u8_zps_const", "uint8", "uint8", (3, 7), (7, 5), True, 120, 130),
    ("u8s8_no_zps_const", "uint8", "int8", (4, 6), (6, 3), True, None, None),
    ("s8s8_batched_run_time", "int8", "int8", (2, 3, 5), (2, 5, 4), False, -7, 3),
    ("u8u8_per_column_b_zp", "uint8", "uint8", (3, 8), (8, 4), True, 9, [120, 128, 131, 0]),
    ("s8u8_broadcast_const", "int8", "uint8", (2, 2, 3, 4), (4, 2), True, 5, 128),
    ("u8u8_1d_run_time", "uint8", "uint8", (6,), (6, 3), False, 100, 127),
]


def int_model():
    rng = np.random.RandomState(9)
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (cid, adt, bdt, ashape, bshape, bconst, az, bz) in enumerate(INT_CASES):
        lo, hi = qrange(bdt)
        if adt == "uint8" and bdt == "int8":
            lo, hi = -64, 63
        w = rng.randint(lo, hi + 1, bshape).astype(bdt)
        if bconst:
            inits[f"b{i}"] = w
        else:
            inputs[f"b{i}"] = (bshape, bdt)
            feeds[f"b{i}"] = w
        ins = [f"a{i}", f"b{i}", "", ""]
        if az is not None:
            inits[f"az{i}"] = np.array(az, adt)
            ins[2] = f"az{i}"
        if bz is not None:
            inits[f"bz{i}"] = np.array(bz, bdt)
            ins[3] = f"bz{i}"
        while ins[-1] == "":
            ins.pop()
        nodes.append(helper.make_node("MatMulInteger", ins, [f"y{i}"], name=f"mmint{i}"))
        inputs[f"a{i}"] = (ashape, adt)
        lo, hi = qrange(adt)
        feeds[f"a{i}"] = rng.randint(lo, hi + 1, ashape).astype(adt)
        outputs[f"y{i}"] = "int32"
    return qmodel(nodes, inputs, outputs, inits), feeds


# --------------------------------------------------------------------------- tests

_MODELS: dict = {}


def model_for(kind, adt):
    if (kind, adt) not in _MODELS:
        _MODELS[kind, adt] = {"gemm": gemm_model, "matmul": matmul_model}[kind](adt)
    return _MODELS[kind, adt]


def _ids(kind, adt):
    return _gemm_ids(adt) if kind == "gemm" else [c[0] for c in MATMUL_CASES]


@pytest.mark.parametrize("adt", ["int8", "uint8"])
@pytest.mark.parametrize("kind", ["gemm", "matmul"])
def test_reference_vs_onnxruntime(kind, adt):
    m, feeds = model_for(kind, adt)
    ort = run_ort(m, feeds, optimize=True)
    ref_float = ref_outputs(m, feeds, "float")
    ref_fixed = ref_outputs(m, feeds, "fixed")
    for name, o, rf, rx in zip(_ids(kind, adt), ort, ref_float, ref_fixed):
        assert spread(o) >= min(5, o.size), f"{name}: onnxruntime output nearly constant; parameters too extreme"
        assert_exact(rf, o, f"{name} ({adt}): reference (float requant) vs onnxruntime")
        assert_lsb(rx, o, 1, f"{name} ({adt}): reference (fixed requant) vs onnxruntime")


@pytest.mark.parametrize("requant", ["fixed", "float"])
@pytest.mark.parametrize("adt", ["int8", "uint8"])
@pytest.mark.parametrize("kind", ["gemm", "matmul"])
def test_c_vs_reference(kind, adt, requant):
    m, feeds = model_for(kind, adt)
    outs, ref, g = compile_run(m, feeds, requant)
    assert {n.attrs["_requant"] for n in g.nodes} == {requant}
    for name, c, r in zip(_ids(kind, adt), outs, ref):
        assert_exact(c, r, f"{name} ({adt}, {requant}): C vs reference")


def _direct_matmul_integer(a, b, az, bz):
    """(a - az) @ (b - bz) written out (per-column bz), independent of
    ops/qgemm.py's compile-time offsetting of B."""
    a = np.asarray(a, np.int64) - (az or 0)
    b = np.asarray(b, np.int64) - np.asarray(0 if bz is None else bz, np.int64)
    return np.einsum("...ik,...kj->...ij", a, b).astype(np.int32)


def test_matmul_integer():
    m, feeds = int_model()
    ort = run_ort(m, feeds, optimize=True)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    ref = ref_outputs(m, feeds, "fixed")
    for i, ((cid, *_), r, o) in enumerate(zip(INT_CASES, ref, ort)):
        assert_exact(r, o, f"{cid}: reference vs onnxruntime")
    # per-column zero points, also by explicit sums
    i = [c[0] for c in INT_CASES].index("u8u8_per_column_b_zp")
    assert_exact(ref[i], _direct_matmul_integer(feeds[f"a{i}"], inits[f"b{i}"], 9, inits[f"bz{i}"]),
                 "per-column b zero points vs explicit sums")
    outs, ref2, _ = compile_run(m, feeds, "fixed")
    for (cid, *_), c, r in zip(INT_CASES, outs, ref2):
        assert_exact(c, r, f"{cid}: C vs reference")


@pytest.mark.parametrize("act", [(0.0, float("inf")), (0.0, 6.0), (-1.0, 0.5)], ids=["relu", "relu6", "clip"])
def test_fused_clamp(act):
    cases = [c for c in GEMM_CASES if c[0] in ("fc_transB_bias", "run_time_b")]
    m, feeds = gemm_model("uint8", seed=13, cases=cases, forms=False)
    plain = ref_outputs(m, feeds, "float")
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}

    def set_act(g):
        for n in g.nodes:
            n.act = act

    outs, ref, _ = compile_run(m, feeds, "float", mutate=set_act)
    for i, (c, r, p) in enumerate(zip(outs, ref, plain)):
        ys, yz = float(inits[f"ys{i}"]), int(inits[f"yz{i}"])
        lo = max(0, yz + int(np.floor(act[0] / ys + 0.5)))
        hi = 255 if np.isinf(act[1]) else min(255, yz + int(np.floor(act[1] / ys + 0.5)))
        assert_exact(r, np.clip(p, lo, hi).astype(np.uint8), f"{cases[i][0]}: clamp")
        assert (r == lo).any(), f"{cases[i][0]}: the clamp never bites"
        assert_exact(c, r, f"{cases[i][0]}: C vs reference")


def test_full_range_u8s8_weights():
    """uint8 activations with full-range int8 B (onnxruntime saturates here):
    C vs reference, reference vs an explicit float32-requant computation."""
    rng = np.random.RandomState(17)
    a = rng.randint(0, 256, (4, 32)).astype(np.uint8)
    w = rng.randint(-128, 128, (6, 32)).astype(np.int8)
    inits = {"as": np.float32(0.02), "az": np.array(131, np.uint8), "b": w, "bs": np.float32(0.004),
             "bz": np.array(0, np.int8), "c": rng.randint(-999, 999, 6).astype(np.int32),
             "ys": np.float32(0.9), "yz": np.array(128, np.uint8)}
    n = helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], ["y"],
                         name="fc", domain="com.microsoft", transB=1)
    m = qmodel([n], {"a": (a.shape, "uint8")}, {"y": "uint8"}, inits)
    outs, ref, _ = compile_run(m, {"a": a}, "float")
    assert_exact(outs[0], ref[0], "C vs reference")
    acc = (a.astype(np.int64) - 131) @ w.T.astype(np.int64) + inits["c"]
    scale = np.float32(np.float32(0.02) * np.float32(0.004)) / np.float32(0.9)
    y = np.clip(np.rint(acc.astype(np.float32) * scale) + 128, 0, 255).astype(np.uint8)
    assert spread(y) >= 8
    assert_exact(ref[0], y, "reference vs explicit computation")


def test_macs():
    m, feeds = model_for("gemm", "int8")
    assert compile_model(m).macs == sum(mm * kk * nn for _, mm, kk, nn, *_ in GEMM_CASES)
    m, feeds = model_for("matmul", "int8")
    ort = run_ort(m, feeds, optimize=True)
    assert compile_model(m).macs == sum(int(np.prod(o.shape)) * a[-1] for (_, a, *_), o in zip(MATMUL_CASES, ort))


# --------------------------------------------------------------------------- bad input

def _bad_gemm(**change):
    case = ("fc", 2, 6, 4, 0, 1, (4,), True, 1.0, True)
    m, _ = gemm_model("int8", cases=[case], forms=False)
    g = m.graph
    g.node[0].name = "bad_fc"
    for name, v in change.items():
        if v is None:
            g.node[0].input[[t for t in g.node[0].input].index(name)] = ""
            continue
        init = next(t for t in g.initializer if t.name == name)
        init.CopyFrom(numpy_helper.from_array(np.asarray(v), name))
    return m


@pytest.mark.parametrize("change,tensor,words", [
    (dict(as0=np.float32(0.0)), "as0", "finite and > 0"),
    (dict(ys0=np.float32(-1.0)), "ys0", "finite and > 0"),
    (dict(bs0=np.array([0.01, np.nan, 0.01, 0.01], np.float32)), "bs0", "finite and > 0"),
    (dict(bs0=np.array([0.01, np.inf, 0.01, 0.01], np.float32)), "bs0", "finite and > 0"),
    (dict(bs0=np.array([0.01, 0.01, 0.01], np.float32), bz0=np.zeros(3, np.int8)), "bs0", "4 channels"),
    (dict(bz0=np.array([0, 0, 2, 0], np.int8)), "bz0", "zero points"),
    (dict(c0=np.zeros(4, np.float32)), "c0", "int32"),
], ids=["a_scale_zero", "y_scale_negative", "b_scale_nan", "b_scale_inf", "b_scale_length",
        "b_zp_per_column_nonzero", "bias_float"])
def test_bad_qgemm(change, tensor, words):
    with pytest.raises(CuvilError) as e:
        compile_model(_bad_gemm(**change))
    msg = str(e.value)
    assert "bad_fc" in msg and f"'{tensor}'" in msg and words in msg, msg


def test_qgemm_float_output_unsupported():
    m = _bad_gemm(yz0=None)
    with pytest.raises(CuvilError, match=r"bad_fc.*float output"):
        compile_model(m)


@pytest.mark.parametrize("change,tensor,words", [
    (dict(bs0=np.float32(0.0)), "bs0", "finite and > 0"),
    (dict(bs0=np.array([0.1, 0.2], np.float32), bz0=np.zeros(2, np.int8)), "bs0", "per column"),
    (dict(as0=np.array([0.1, 0.2], np.float32), az0=np.zeros(2, np.int8)), "as0", "per-tensor"),
    (dict(bs0=np.full(5, 0.01, np.float32), bz0=np.array([0, 1, 0, 0, 0], np.int8)), "bz0", "zero points"),
], ids=["b_scale_zero", "b_scale_length", "a_scale_per_row", "b_zp_per_column_nonzero"])
def test_bad_qlinear_matmul(change, tensor, words):
    m, _ = matmul_model("int8", cases=[("bad", (3, 4), (4, 5), True, False)])
    m.graph.node[0].name = "bad_mm"
    for name, v in change.items():
        init = next(t for t in m.graph.initializer if t.name == name)
        init.CopyFrom(numpy_helper.from_array(np.asarray(v), name))
    with pytest.raises(CuvilError) as e:
        compile_model(m)
    msg = str(e.value)
    assert "bad_mm" in msg and f"'{tensor}'" in msg and words in msg, msg


def test_multiplier_above_one():
    """in_scale * w_scale / out_scale > 1: a positive shift in fixed point."""
    rng = np.random.RandomState(23)
    a = rng.randint(-6, 7, (5, 3)).astype(np.int8)
    inits = {"as": np.float32(0.5), "az": np.array(1, np.int8), "b": rng.randint(-4, 5, (4, 3)).astype(np.int8),
             "bs": np.array([0.5, 0.25, 0.75, 1.5], np.float32), "bz": np.zeros(4, np.int8),
             "c": rng.randint(-9, 10, 4).astype(np.int32), "ys": np.float32(0.3), "yz": np.array(-3, np.int8)}
    n = helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], ["y"],
                         name="fc", domain="com.microsoft", transB=1)
    m = qmodel([n], {"a": (a.shape, "int8")}, {"y": "int8"}, inits)
    o = run_ort(m, {"a": a}, optimize=True)[0]
    assert spread(o) >= 8 and (np.abs(o.astype(int)) < 127).mean() > 0.5
    for requant in ("float", "fixed"):
        outs, ref, _ = compile_run(m, {"a": a}, requant)
        assert_exact(outs[0], ref[0], f"{requant}: C vs reference")
        if requant == "float":
            assert_exact(ref[0], o, "reference (float requant) vs onnxruntime")
        else:
            assert_lsb(ref[0], o, 1, "reference (fixed requant) vs onnxruntime")
