"""`cuvil-mcu validate`: metrics of the generated C on a dataset.

The expected numbers are computed here, independently of
cuvil_mcu/tools/validate.py: the C's outputs from the numpy reference (which
the generated C matches bit for bit on integer models, tests/test_qdq.py and
test_shared_models.py), the reference model's from onnxruntime called
directly, the metrics from their textbook formulas.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import shared_models as sm
from cuvil_mcu import cli, reference
from cuvil_mcu.compiler import compile_model
from test_ptq import N_CALIB, digits  # noqa: F401  (the digits CNN fixture, trained once per module)

need_shared = pytest.mark.skipif(not sm.available(), reason="../shared/models not present")
KWS = "kws_dscnn"


def kws_float_data(n: int, seed: int = 7) -> np.ndarray:
    x = np.load(sm.SHARED / KWS / "samples_f32.npz")["inputs"]
    rng = np.random.default_rng(seed)
    reps = np.concatenate([x] * (n // len(x) + 1))[:n]
    return (reps + rng.normal(0, 0.1, reps.shape)).astype(np.float32)


def ort_outputs(path, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))])


def textbook(c: np.ndarray, r: np.ndarray) -> dict:
    c, r = c.astype(np.float64).ravel(), r.astype(np.float64).ravel()
    d = c - r
    return {"rmse": np.sqrt(np.mean(d ** 2)), "mae": np.mean(np.abs(d)), "max": np.max(np.abs(d)),
            "l2r": np.sqrt(np.sum(d ** 2)) / np.sqrt(np.sum(r ** 2)),
            "cos": np.sum(c * r) / (np.sqrt(np.sum(c ** 2)) * np.sqrt(np.sum(r ** 2)))}


def kws_int8_outputs(x_float: np.ndarray):
    """(dequantized outputs of the int8 model's integer pipeline, the int8 inputs)."""
    c = compile_model(str(sm.model_path(KWS)))
    g = c.graph
    tin, tout = g.tensors[g.inputs[0]], g.tensors[g.outputs[0]]
    s_in, z_in = float(tin.quant.scale[0]), int(tin.quant.zero_point[0])
    q = np.clip(np.rint(x_float / s_in) + z_in, -128, 127).astype(np.int8)
    outs = np.stack([reference.run(g, {g.inputs[0]: q[i].reshape(tin.shape)})[g.outputs[0]] for i in range(len(q))])
    s_out, z_out = float(tout.quant.scale[0]), int(tout.quant.zero_point[0])
    return (outs.astype(np.float64) - z_out) * s_out, q


@need_shared
def test_kws_metrics_and_accuracy_match_an_independent_computation(tmp_path, capsys):
    n = 64
    x = kws_float_data(n)
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 12, n)
    np.savez(tmp_path / "data.npz", input_1=x)
    np.save(tmp_path / "y.npy", labels)
    rc = cli.main(["validate", str(sm.model_path(KWS)), "--data", str(tmp_path / "data.npz"), "--labels",
                   str(tmp_path / "y.npy"), "--reference", str(sm.SHARED / KWS / "model_f32.onnx"),
                   "-o", str(tmp_path / "m.json")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "RMSE" in out and "cosine" in out and "samples/s" in out
    got = json.loads((tmp_path / "m.json").read_text())["outputs"][0]
    c_out, _ = kws_int8_outputs(x)
    r_out = ort_outputs(sm.SHARED / KWS / "model_f32.onnx", x)
    want = textbook(c_out, r_out)
    # rel 1e-5: this onnxruntime session keeps its default graph optimizations, validate's turns them off:
    # the float model's sums differ in the last bits
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-9), (k, got[k], v)
    ca, ra = c_out.reshape(n, -1).argmax(1), r_out.reshape(n, -1).argmax(1)
    assert got["top1_agreement"] == pytest.approx(np.mean(ca == ra))
    assert got["accuracy"] == pytest.approx(np.mean(ca == labels))
    assert got["reference_accuracy"] == pytest.approx(np.mean(ra == labels))
    assert got["cos"] > 0.95      # a sanity floor for int8 vs float on near-real inputs


@need_shared
def test_per_layer_compares_every_quantized_layer(tmp_path, capsys):
    n = 40
    x = kws_float_data(n, seed=11)
    np.savez(tmp_path / "data.npz", input_1=x)
    rc = cli.main(["validate", str(sm.model_path(KWS)), "--data", str(tmp_path / "data.npz"), "--reference",
                   str(sm.SHARED / KWS / "model_f32.onnx"), "--per-layer", "-o", str(tmp_path / "m.json")])
    out = capsys.readouterr().out
    assert rc == 0 and "largest jump" in out
    layers = json.loads((tmp_path / "m.json").read_text())["layers"]
    # 9 convolutions, the fully connected layer and the softmax; the two views and the pool are not
    # compared (views carry no code; the pool's float tensor has its own layout name)
    assert len(layers) >= 11, [x["node"] for x in layers]
    last = layers[-1]
    assert last["tensor"] == "Identity"
    c_out, _ = kws_int8_outputs(x[:32])
    want = textbook(c_out, ort_outputs(sm.SHARED / KWS / "model_f32.onnx", x[:32]))
    assert last["rmse"] == pytest.approx(want["rmse"], rel=1e-5)
    assert last["cos"] == pytest.approx(want["cos"], rel=1e-6)


def test_digits_accuracy_with_labels_and_built_in_quantization(tmp_path, capsys, digits):  # noqa: F811
    onnx.save(digits["model"], str(tmp_path / "digits.onnx"))
    np.savez(tmp_path / "calib.npz", x=digits["x_train"][:N_CALIB])
    np.savez(tmp_path / "test.npz", x=digits["x_test"])
    np.save(tmp_path / "y.npy", digits["y_test"])
    rc = cli.main(["validate", str(tmp_path / "digits.onnx"), "--quantize", "int8", "--calibration",
                   str(tmp_path / "calib.npz"), "--data", str(tmp_path / "test.npz"), "--labels",
                   str(tmp_path / "y.npy"), "-o", str(tmp_path / "m.json")])
    assert rc == 0, capsys.readouterr().err
    got = json.loads((tmp_path / "m.json").read_text())["outputs"][0]
    c = compile_model(digits["model"], quantize="int8", calibration={"x": digits["x_train"][:N_CALIB]})
    g = c.graph
    out = np.stack([reference.run(g, {"x": xi[None]})[g.outputs[0]] for xi in digits["x_test"]])
    assert got["accuracy"] == pytest.approx(np.mean(out.reshape(len(out), -1).argmax(1) == digits["y_test"]))
    assert got["reference_accuracy"] == pytest.approx(digits["float_acc"] / 100)


@need_shared
def test_validate_on_the_emulated_m4_equals_the_host(tmp_path, capsys):
    if not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")):
        pytest.skip("arm-none-eabi-gcc / qemu-system-arm not installed")
    x = kws_float_data(12, seed=5)
    np.savez(tmp_path / "data.npz", input_1=x)
    base = ["validate", str(sm.model_path(KWS)), "--data", str(tmp_path / "data.npz"), "--reference",
            str(sm.SHARED / KWS / "model_f32.onnx")]
    assert cli.main(base + ["-o", str(tmp_path / "host.json")]) == 0
    assert cli.main(base + ["--board", "qemu-mps2-an386", "-o", str(tmp_path / "m4.json")]) == 0
    host = json.loads((tmp_path / "host.json").read_text())
    m4 = json.loads((tmp_path / "m4.json").read_text())
    assert m4["target"] == "qemu-mps2-an386"
    assert m4["outputs"] == host["outputs"]      # the DSP kernels are bit-exact with the portable ones


def _bad(tmp_path, capsys, arrays: dict, extra=(), labels=None):
    np.savez(tmp_path / "data.npz", **arrays)
    args = ["validate", str(sm.model_path(KWS)), "--data", str(tmp_path / "data.npz"), "-o", str(tmp_path / "m.json")]
    if labels is not None:
        np.save(tmp_path / "y.npy", labels)
        args += ["--labels", str(tmp_path / "y.npy")]
    rc = cli.main(args + list(extra))
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "m.json").exists()
    return err


@need_shared
def test_bad_datasets_get_one_line_naming_the_culprit(tmp_path, capsys):
    good = np.zeros((4, 49, 10, 1), np.int8)
    err = _bad(tmp_path, capsys, {"x": good})
    assert "input 'input_1'" in err and "int8[samples, 1, 49, 10, 1]" in err and "['x']" in err
    err = _bad(tmp_path, capsys, {"input_1": np.zeros((4, 49, 11, 1), np.int8)})
    assert "input 'input_1'" in err and "expected int8[samples, 1, 49, 10, 1]" in err and "[4, 49, 11, 1]" in err
    err = _bad(tmp_path, capsys, {"input_1": good.astype(np.int32)})
    assert "expected int8" in err and "got int32" in err
    err = _bad(tmp_path, capsys, {"input_1": good[:0]})
    assert "empty" in err and "0 samples" in err
    err = _bad(tmp_path, capsys, {"input_1": good}, labels=np.zeros(3, np.int64))
    assert "3 labels for 4 samples" in err
    err = _bad(tmp_path, capsys, {"input_1": good}, labels=np.zeros(4, np.float32))
    assert "integer class indices" in err
