"""Post-training int8 quantization (`gen --quantize int8 --calibration`).

- A small CNN trained here in numpy on scikit-learn's bundled digits (no
  download), exported with onnx.helper, quantized with 200 training samples
  and run as generated C on the whole held-out split: int8 accuracy within
  1 point of the float model's (onnxruntime), for minmax; within 2 points for
  percentile and entropy, whose ranges must be no wider than minmax's.
- Reported ranges against an independent numpy forward pass of a tiny model;
  percentile thresholds against numpy's exact percentile.
- The end-to-end float models (tests/models.py) quantize: C == reference of
  the int8 graph, and close to the float model.
- Every malformed calibration file through the CLI: one stderr line, exit 2,
  nothing written.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import models
from cuvil_mcu import ptq, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import host
from helpers import assert_close, run_ort

N_CALIB = 200


# --------------------------------------------------------------------------- the digits CNN, in numpy

def _im2col(x, k=3, pad=1):
    """(n, c, h, w) -> (n*h*w, c*k*k) patches of a stride-1 'same' conv."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((n, c, k, k, h, w), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + h, j:j + w]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * h * w, c * k * k)


def _col2im(dcols, shape, k=3, pad=1):
    n, c, h, w = shape
    d = dcols.reshape(n, h, w, c, k, k).transpose(0, 3, 4, 5, 1, 2)
    dxp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), dcols.dtype)
    for i in range(k):
        for j in range(k):
            dxp[:, :, i:i + h, j:j + w] += d[:, :, i, j]
    return dxp[:, :, pad:pad + h, pad:pad + w]


def _forward(p, x):
    """Conv 3x3 8 -> Relu -> MaxPool 2 -> Conv 3x3 16 -> Relu -> Flatten ->
    Gemm 10 (logits); the intermediates for backprop and range checks."""
    n = len(x)
    c1 = _im2col(x)
    z1 = c1 @ p["w1"].reshape(8, -1).T + p["b1"]
    a1 = np.maximum(z1, 0).reshape(n, 8, 8, 8).transpose(0, 3, 1, 2)
    r = a1.reshape(n, 8, 4, 2, 4, 2)
    mp = r.max(axis=(3, 5))
    c2 = _im2col(mp)
    z2 = c2 @ p["w2"].reshape(16, -1).T + p["b2"]
    a2 = np.maximum(z2, 0).reshape(n, 4, 4, 16).transpose(0, 3, 1, 2)
    f = a2.reshape(n, 256)
    logits = f @ p["w3"] + p["b3"]
    return dict(c1=c1, z1=z1, a1=a1, r=r, mp=mp, c2=c2, z2=z2, a2=a2, f=f, logits=logits)


def _train(x, y, rng, epochs=6, batch=32, lr=3e-3):
    """Adam on softmax cross-entropy; backward written out by hand."""
    p = {"w1": rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * np.float32(np.sqrt(2 / 9)),
         "b1": np.zeros(8, np.float32),
         "w2": rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * np.float32(np.sqrt(2 / 72)),
         "b2": np.zeros(16, np.float32),
         "w3": rng.standard_normal((256, 10)).astype(np.float32) * np.float32(np.sqrt(1 / 256)),
         "b3": np.zeros(10, np.float32)}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    b1, b2, t = 0.9, 0.999, 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            xb, yb, n = x[idx], y[idx], len(idx)
            a = _forward(p, xb)
            e = np.exp(a["logits"] - a["logits"].max(1, keepdims=True))
            dlo = e / e.sum(1, keepdims=True)
            dlo[np.arange(n), yb] -= 1
            dlo /= n
            g = {"w3": a["f"].T @ dlo, "b3": dlo.sum(0)}
            df = dlo @ p["w3"].T
            dz2 = df.reshape(n, 16, 4, 4).transpose(0, 2, 3, 1).reshape(-1, 16) * (a["z2"] > 0)
            g["w2"], g["b2"] = (dz2.T @ a["c2"]).reshape(p["w2"].shape), dz2.sum(0)
            dmp = _col2im(dz2 @ p["w2"].reshape(16, -1), a["mp"].shape)
            mask = a["r"] == a["mp"][:, :, :, None, :, None]
            da1 = (mask * dmp[:, :, :, None, :, None]).reshape(n, 8, 8, 8)
            dz1 = da1.transpose(0, 2, 3, 1).reshape(-1, 8) * (a["z1"] > 0)
            g["w1"], g["b1"] = (dz1.T @ a["c1"]).reshape(p["w1"].shape), dz1.sum(0)
            t += 1
            for k in p:
                m[k] = b1 * m[k] + (1 - b1) * g[k]
                v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
                step = lr * (m[k] / (1 - b1 ** t)) / (np.sqrt(v[k] / (1 - b2 ** t)) + 1e-8)
                p[k] = (p[k] - step).astype(np.float32)
    return p


def _export(p) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Flatten", ["r2"], ["f"], name="flat", axis=1),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], name="fc"),
             helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=1)]
    g = helper.make_graph(nodes, "digits_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(v, k) for k, v in p.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.fixture(scope="module")
def digits():
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]       # 1797 x 1 x 8 x 8 in [0, 1]
    y = d.target
    rng = np.random.default_rng(20240611)
    perm = rng.permutation(len(x))
    tr, te = perm[:1437], perm[1437:]                        # 80 / 20 split
    p = _train(x[tr], y[tr], rng)
    model = _export(p)
    import onnxruntime as ort
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    pred = np.array([int(np.argmax(s.run(None, {"x": x[i:i + 1]})[0])) for i in te])
    float_acc = 100.0 * float(np.mean(pred == y[te]))
    assert float_acc >= 90.0, f"the float CNN reaches only {float_acc:.2f}% (setup problem, not PTQ)"
    return dict(model=model, params=p, x_train=x[tr], x_test=x[te], y_test=y[te], float_acc=float_acc,
                compiled={})


def _quantized(digits, method: str, percentile: float = 99.99):
    key = (method, percentile)
    if key not in digits["compiled"]:
        c = compile_model(digits["model"], quantize="int8", calibration={"x": digits["x_train"][:N_CALIB]},
                          calibrate=method, percentile=percentile, verify_each=True)
        g = c.graph
        exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                         [g.tensors[n].nbytes for n in g.outputs])
        xt = digits["x_test"]
        out = host.run(exe, [xt], c.out_specs, len(xt))[0].reshape(len(xt), -1)
        acc = 100.0 * float(np.mean(out.argmax(1) == digits["y_test"]))
        digits["compiled"][key] = (c, out, acc)
    return digits["compiled"][key]


def test_digits_int8_accuracy_minmax(digits):
    """The generated int8 C, on all 360 held-out digits, within 1.0 point of
    the float model under onnxruntime."""
    c, out, acc = _quantized(digits, "minmax")
    print(f"\ndigits held-out accuracy: float (onnxruntime) {digits['float_acc']:.2f}%, "
          f"int8 generated C (minmax) {acc:.2f}%  [{len(digits['y_test'])} samples]")
    counts = Counter(n.op_type for n in c.graph.nodes)
    # every compute op runs in int8: float only at the edges (one Q in, one DQ out)
    assert counts["QLinearConv"] == 2 and counts["com.microsoft.QGemm"] == 1, counts
    assert counts["cuvil.QMaxPool"] == 1, counts
    assert counts["QuantizeLinear"] == 1 and counts["DequantizeLinear"] == 1, counts
    assert not {"Conv", "Gemm", "MaxPool"} & set(counts), counts
    assert abs(acc - digits["float_acc"]) <= 1.0, (
        f"int8 accuracy {acc:.2f}% vs float {digits['float_acc']:.2f}%: more than 1.0 point apart")


def test_digits_int8_c_matches_reference(digits):
    """The generated C and the numpy reference of the quantized graph agree
    (integer path exact; the float edge within float rounding)."""
    c, out, _ = _quantized(digits, "minmax")
    for i in range(0, 40, 3):
        ref = reference.run(c.graph, {"x": digits["x_test"][i:i + 1]})["prob"].reshape(-1)
        assert_close(out[i], ref, 1e-6, f"held-out sample {i}: C vs reference")


def test_digits_softmax_output_params(digits):
    c, out, _ = _quantized(digits, "minmax")
    e = c.calibration["prob"]
    if e["method"] != "fixed":
        pytest.skip("Softmax has no int8 kernel in this build (stays float)")
    assert (e["scale"], e["zero_point"]) == (1.0 / 256.0, -128)
    # DequantizeLinear of int8 at 1/256, zero point -128: multiples of 1/256 in [0, 255/256]
    assert np.array_equal(out * 256, np.rint(out * 256)) and out.min() >= 0 and out.max() <= 255 / 256


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_digits_other_calibrations(digits, method):
    """percentile / entropy: a working model within 2 points, and every range
    inside minmax's, at least one strictly narrower."""
    mm, _, _ = _quantized(digits, "minmax")
    c, _, acc = _quantized(digits, method)
    print(f"\ndigits held-out accuracy: float {digits['float_acc']:.2f}%, int8 ({method}) {acc:.2f}%")
    assert abs(acc - digits["float_acc"]) <= 2.0, f"{method}: {acc:.2f}% vs float {digits['float_acc']:.2f}%"
    assert set(c.calibration) == set(mm.calibration)
    narrower = []
    for name, e in c.calibration.items():
        ref = mm.calibration[name]
        assert e["min"] >= ref["min"] - 1e-12 and e["max"] <= ref["max"] + 1e-12, (name, e, ref)
        assert e["min"] <= 0.0 <= e["max"], (name, e)
        if e["max"] - e["min"] < ref["max"] - ref["min"] - 1e-9:
            narrower.append(name)
        if e["method"] == method:
            assert e["scale"] <= ref["scale"] * (1 + 1e-6), (name, e, ref)
    # percentile 99.99 always cuts the conv outputs' top values; the KL search
    # cuts where the tail costs less than the resolution it buys: somewhere
    assert ({"r1", "r2"} <= set(narrower)) if method == "percentile" else narrower, \
        f"{method} narrowed only {narrower}"


def test_digits_percentile_threshold_independent(digits):
    """The percentile range of the first conv's output (post-Relu) against
    numpy's exact percentile of |x| over the same samples: at most one
    histogram bin (absmax / 2048) above it, never below."""
    c, _, _ = _quantized(digits, "percentile", 99.9)
    a = _forward(digits["params"], digits["x_train"][:N_CALIB])["a1"]
    v = np.abs(a.astype(np.float64)).reshape(-1)
    exact = float(np.percentile(v, 99.9, method="inverted_cdf"))
    got = c.calibration["r1"]["max"]
    assert c.calibration["r1"]["min"] == 0.0
    assert exact - 1e-5 <= got <= exact + v.max() / ptq.BINS + 1e-5, (got, exact, v.max())
    assert abs(c.calibration["r1"]["observed_max"] - v.max()) <= 1e-5 * v.max()


# --------------------------------------------------------------------------- ranges vs independent numpy

def _tiny_model(rng):
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32) * 0.5
    b = rng.standard_normal(3).astype(np.float32) * 0.3
    w2 = rng.standard_normal((4, 48)).astype(np.float32) * 0.2
    b2 = rng.standard_normal(4).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(v, k) for k, v in dict(w=w, b=b, w2=w2, b2=b2).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, (w, b, w2, b2)


def _tiny_forward(x, w, b, w2, b2):
    """Direct loops over output positions (float64), independent of im2col
    and of the compiler's reference."""
    n = len(x)
    c = np.zeros((n, 3, 4, 4))
    for i in range(4):
        for j in range(4):
            c[:, :, i, j] = np.einsum("nchw,mchw->nm", x[:, 0, :, i:i + 3, j:j + 3], w) + b
    r = np.maximum(c, 0)
    y = r.reshape(n, 48) @ w2.T.astype(np.float64) + b2
    return {"x": x, "r": r, "f": r, "y": y}


def _expected_params(v):
    lo, hi = min(float(v.min()), 0.0), max(float(v.max()), 0.0)
    scale = (hi - lo) / 255.0
    return lo, hi, scale, int(np.clip(np.rint(-128 - lo / scale), -128, 127))


def test_reported_ranges_match_numpy():
    rng = np.random.default_rng(7)
    model, wts = _tiny_model(rng)
    x = (rng.standard_normal((17, 1, 2, 6, 6)) * 1.5 + 0.2).astype(np.float32)
    c = compile_model(model, quantize="int8", calibration={"x": x}, verify_each=True)
    vals = _tiny_forward(x.astype(np.float64), *[a.astype(np.float64) for a in wts])
    assert set(c.calibration) == {"x", "r", "f", "y"}, sorted(c.calibration)
    for name in ("x", "r", "f", "y"):
        lo, hi, scale, zp = _expected_params(vals[name])
        e = c.calibration[name]
        assert e["samples"] == 17
        assert abs(e["min"] - lo) <= 1e-5 * max(1, abs(lo)) and abs(e["max"] - hi) <= 1e-5 * max(1, hi), (name, e, lo, hi)
        assert abs(e["scale"] - scale) <= 1e-5 * scale, (name, e["scale"], scale)
        assert e["zero_point"] == zp, (name, e["zero_point"], zp)
    assert c.calibration["r"]["min"] == 0.0 and c.calibration["r"]["zero_point"] == -128  # post-Relu
    assert c.calibration["f"]["method"] == "shared" and c.calibration["f"]["source"] == "r"
    assert c.calibration["x"]["min"] < 0 < c.calibration["x"]["max"]

    # the int8 model itself, on the calibration samples (inside every range, so
    # nothing clips): each output within 3 output steps of the float model
    counts = Counter(n.op_type for n in c.graph.nodes)
    assert counts["QLinearConv"] == 1 and counts["com.microsoft.QGemm"] == 1, counts
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    xt = x
    out = host.run(exe, [xt], c.out_specs, len(xt))[0]
    ys = c.calibration["y"]["scale"]
    for i in range(len(xt)):
        expect = run_ort(model, {"x": xt[i]})[0]
        err = np.abs(out[i] - expect).max()
        assert err <= 3 * ys, f"sample {i}: int8 off by {err:.4g} = {err / ys:.2f} output steps"


@pytest.mark.parametrize("name", sorted(models.ALL))
def test_e2e_models_quantize(name):
    """Every float model of the end-to-end suite (DS-CNN, MobileNet blocks,
    residual block, autoencoder, transformers) quantizes on 32 random
    samples: the generated C equals the reference of the int8 graph, and on
    calibration samples every output is within 8% of the output's largest
    magnitude from the float model under onnxruntime (measured: <= 4.1%)."""
    model = models.ALL[name](seed=0)
    g0 = compile_model(model).graph
    rng = np.random.default_rng(1)
    cal = {n: rng.standard_normal((32, *g0.tensors[n].shape)).astype(np.float32) for n in g0.inputs}
    c = compile_model(model, quantize="int8", calibration=cal, verify_each=True)
    g = c.graph
    ops_used = Counter(n.op_type for n in g.nodes)
    assert not {"Conv", "Gemm"} & set(ops_used), ops_used  # every conv / fully-connected layer is int8
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    xs = [cal[n][:4] for n in g.inputs]
    outs = host.run(exe, xs, c.out_specs, 4)
    for s in range(4):
        feeds = {n: x[s] for n, x in zip(g.inputs, xs)}
        ref = reference.run(g, feeds)
        flt = run_ort(model, feeds)
        for i, o in enumerate(g.outputs):
            assert_close(outs[i][s], ref[o], 1e-5, f"{name} sample {s} output {o}: C vs reference")
            err = float(np.abs(outs[i][s] - flt[i]).max())
            bound = 0.08 * float(np.abs(flt[i]).max())
            assert err <= bound, f"{name} sample {s} output {o}: int8 off by {err:.4g} > {bound:.4g}"


def test_matmul_add_becomes_one_qgemm():
    """tf2onnx's fully-connected form MatMul + Add(bias) -> Relu quantizes as
    one QGemm (per-column weights, int32 bias, fused Relu), not a QGemm and a
    QLinearAdd with an int8 bias."""
    rng = np.random.default_rng(9)
    w = rng.standard_normal((16, 8)).astype(np.float32) * 0.3
    b = rng.standard_normal(8).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.standard_normal((20, 1, 16)).astype(np.float32)
    c = compile_model(model, quantize="int8", calibration={"x": x}, verify_each=True)
    counts = Counter(n.op_type for n in c.graph.nodes)
    assert counts == Counter({"QuantizeLinear": 1, "com.microsoft.QGemm": 1, "DequantizeLinear": 1}), counts
    assert c.calibration["y"]["min"] == 0.0 and set(c.calibration) == {"x", "y"}
    gq = c.graph
    exe = host.build(c.header, c.prefix, [gq.tensors[n].nbytes for n in gq.inputs],
                     [gq.tensors[n].nbytes for n in gq.outputs])
    out = host.run(exe, [x], c.out_specs, len(x))[0]
    ys = c.calibration["y"]["scale"]
    for i in range(len(x)):
        err = float(np.abs(out[i] - run_ort(model, {"x": x[i]})[0]).max())
        assert err <= 2 * ys, f"sample {i}: off by {err / ys:.2f} output steps"


def test_refused_node_stays_float(monkeypatch):
    """When an integer op rejects a node (here QLinearConv, made to refuse
    'conv'), that node stays float and the rest is still quantized."""
    from cuvil_mcu import ops
    from cuvil_mcu.ops.base import unsupported
    qconv = ops.get("QLinearConv")
    real_check = qconv.check

    def check(node, ins):
        if node.name == "conv":
            raise unsupported(node, "refused for this test")
        return real_check(node, ins)

    monkeypatch.setattr(qconv, "check", check)
    rng = np.random.default_rng(8)
    model, _ = _tiny_model(rng)
    x = rng.standard_normal((6, 1, 2, 6, 6)).astype(np.float32)
    c = compile_model(model, quantize="int8", calibration={"x": x}, verify_each=True)
    counts = Counter(n.op_type for n in c.graph.nodes)
    assert counts["Conv"] == 1 and counts["com.microsoft.QGemm"] == 1 and "QLinearConv" not in counts, counts
    assert set(c.calibration) == {"r", "f", "y"}, sorted(c.calibration)
    assert any("Conv 'conv'" in n for n in c.graph.notes), c.graph.notes


def test_entropy_threshold_clips_outliers():
    """|N(0,1)| plus a few far outliers: the KL search cuts the tail (near
    the 4-sigma region with 128 levels), minmax would keep 50."""
    rng = np.random.default_rng(3)
    v = np.concatenate([np.abs(rng.standard_normal(100_000)), [50.0] * 3])
    hist = np.histogram(v, bins=ptq.BINS, range=(0, v.max()))[0]
    t = ptq.entropy_threshold(hist, float(v.max()), 128)
    assert 2.5 <= t <= 8.0, t
    # uniform data has no tail to cut
    u = rng.uniform(0, 1, 100_000)
    hu = np.histogram(u, bins=ptq.BINS, range=(0, u.max()))[0]
    assert ptq.entropy_threshold(hu, float(u.max()), 255) >= 0.99 * u.max()


def test_percentile_threshold_vs_numpy():
    rng = np.random.default_rng(4)
    v = np.abs(rng.laplace(size=50_000))
    hist = np.histogram(v, bins=ptq.BINS, range=(0, v.max()))[0]
    for q in (50.0, 99.0, 99.99, 100.0):
        exact = float(np.percentile(v, q, method="inverted_cdf"))
        t = ptq.percentile_threshold(hist, float(v.max()), q)
        assert exact - 1e-9 <= t <= exact + v.max() / ptq.BINS + 1e-9, (q, t, exact)


def test_option_errors():
    rng = np.random.default_rng(0)
    model, _ = _tiny_model(rng)
    x = rng.standard_normal((3, 1, 2, 6, 6)).astype(np.float32)
    from cuvil_mcu.errors import CuvilError
    for kw, words in [(dict(quantize="int8"), "--calibration"),
                      (dict(calibration={"x": x}), "--quantize"),
                      (dict(quantize="int4", calibration={"x": x}), "int4"),
                      (dict(quantize="int8", calibration={"x": x}, calibrate="kl"), "'kl'"),
                      (dict(quantize="int8", calibration={"x": x}, calibrate="percentile", percentile=0.0), "0.0")]:
        with pytest.raises(CuvilError, match=words):
            compile_model(model, **kw)


# --------------------------------------------------------------------------- the CLI

ENV = dict(os.environ, PYTHONHASHSEED="0")
ENV.pop("CUVIL_DEBUG", None)


def _bad_cases(d: Path, model_path: Path):
    """name -> (calibration file, extra argv, words the one stderr line must hold)."""
    rng = np.random.default_rng(11)
    good = rng.standard_normal((5, 1, 2, 6, 6)).astype(np.float32)
    cases = {}

    def npz(name, **arrays):
        np.savez(d / name, **arrays)
        return d / name

    cases["missing_file"] = (d / "nope.npz", [], ["nope.npz", "no such file"])
    (d / "text.npz").write_text("x,y\n1,2\n")
    cases["not_npz"] = (d / "text.npz", [], ["text.npz", "not an .npz"])
    (d / "cut.npz").write_bytes((npz("full.npz", x=good)).read_bytes()[:60])
    cases["truncated_npz"] = (d / "cut.npz", [], ["cut.npz", "cannot read"])
    cases["missing_input"] = (npz("wrong_key.npz", image=good), [], ["missing input(s) ['x']", "'image'"])
    cases["wrong_shape"] = (npz("shape.npz", x=good[:, :, :, :5]), [],
                            ["input 'x'", "[5, 1, 2, 5, 6]", "[samples, 1, 2, 6, 6]", "[samples, 2, 6, 6]"])
    nan = good.copy()
    nan[3, 0, 1, 2, 2] = np.nan
    cases["nan"] = (npz("nan.npz", x=nan), [], ["input 'x'", "NaN/inf", "sample 3"])
    inf = good.copy()
    inf[0, 0, 0, 0, 0] = -np.inf
    cases["inf"] = (npz("inf.npz", x=inf), [], ["input 'x'", "NaN/inf", "sample 0"])
    cases["zero_samples"] = (npz("empty.npz", x=good[:0]), [], ["input 'x'", "0 samples"])
    cases["complex_dtype"] = (npz("complex.npz", x=good.astype(np.complex64)), [], ["input 'x'", "complex64"])
    cases["string_dtype"] = (npz("str.npz", x=np.array(["a", "b"])), [], ["input 'x'", "<U1"])
    cases["object_dtype"] = (npz("obj.npz", x=np.array([{"a": 1}], dtype=object)), [], ["obj.npz", "cannot read"])
    cases["no_calibration"] = (None, [], ["--quantize int8 needs --calibration"])
    cases["bad_percentile"] = (npz("ok.npz", x=good), ["--calibrate", "percentile", "--percentile", "120"],
                               ["--percentile 120"])
    return cases


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """All CLI cases as concurrent subprocesses (start-up time dominates)."""
    d = tmp_path_factory.mktemp("ptq_cli")
    model, _ = _tiny_model(np.random.default_rng(5))
    onnx.save(model, d / "tiny.onnx")
    runs = {}
    for name, (calib, extra, words) in _bad_cases(d, d / "tiny.onnx").items():
        out = d / f"out_{name}"
        argv = ["gen", d / "tiny.onnx", "--quantize", "int8", "-o", out, "--plan-out", out / "plan.json", *extra]
        if calib is not None:
            argv += ["--calibration", calib]
        runs[name] = (subprocess.Popen([sys.executable, "-m", "cuvil_mcu.cli", *map(str, argv)], env=ENV,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out, words)
    x = np.random.default_rng(6).standard_normal((9, 2, 6, 6)).astype(np.float32)  # samples on the batch axis
    np.savez(d / "good.npz", x=x)
    out = d / "out_good"
    runs["good"] = (subprocess.Popen([sys.executable, "-m", "cuvil_mcu.cli", "gen", str(d / "tiny.onnx"),
                                      "--quantize", "int8", "--calibration", str(d / "good.npz"),
                                      "--calibrate", "entropy", "-o", str(out), "--plan-out", str(out / "plan.json")],
                                     env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out, [])
    done = {}
    for name, (proc, out, words) in runs.items():
        so, se = proc.communicate(timeout=180)
        done[name] = (proc.returncode, so, se, out, words)
    done["_x"] = x
    return done


BAD = ["missing_file", "not_npz", "truncated_npz", "missing_input", "wrong_shape", "nan", "inf", "zero_samples",
       "complex_dtype", "string_dtype", "object_dtype", "no_calibration", "bad_percentile"]


@pytest.mark.parametrize("case", BAD)
def test_cli_bad_calibration(cli_runs, case):
    rc, so, se, out, words = cli_runs[case]
    lines = se.strip().splitlines()
    assert "Traceback" not in se and "internal error" not in se, se
    assert rc == 2, f"exit {rc}; stderr: {se}"
    assert len(lines) == 1, f"expected one stderr line:\n{se}"
    assert lines[0].startswith("cuvil-mcu: error: "), lines[0]
    for w in words:
        assert w in lines[0], f"{w!r} not in: {lines[0]}"
    assert not out.exists() or not any(out.iterdir()), f"{out} holds {list(out.iterdir())}"


def test_cli_gen_reports_calibration(cli_runs):
    rc, so, se, out, _ = cli_runs["good"]
    assert rc == 0, se
    assert (out / "model.h").exists()
    line = [s for s in so.splitlines() if s.startswith("int8 ")]
    assert len(line) == 1 and "entropy calibration on 9 sample(s)" in line[0], so
    plan = json.loads((out / "plan.json").read_text())
    cal = plan["calibration"]
    assert set(cal) == {"x", "r", "f", "y"} and "buffers" in plan
    # the input's range is the observed one or inside it (entropy), always with 0
    x = cli_runs["_x"]
    assert cal["x"]["observed_min"] == pytest.approx(min(float(x.min()), 0.0), rel=1e-6)
    assert cal["x"]["observed_max"] == pytest.approx(float(x.max()), rel=1e-6)
    assert cal["x"]["observed_min"] <= cal["x"]["min"] <= 0 <= cal["x"]["max"] <= cal["x"]["observed_max"]
    assert all(e["method"] in ("entropy", "shared") for e in cal.values())
