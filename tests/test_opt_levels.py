"""-O0..-O3 (and --optimize level=N) change what gen produces, and every
level computes the model: float within tolerance of onnxruntime, int8
bit-exact with TFLM from -O1 on (integer kernels), -O0 running the QDQ
graph literally in float (close to TFLM, not exact)."""
from __future__ import annotations

import numpy as np
import onnx

import shared_models
from cuvil_mcu.compiler import compile_model
from deploy_helpers import ROOT, host_outputs, cli, fails_cleanly
from helpers import assert_close, run_ort


def test_float_levels():
    model = onnx.load(ROOT / "examples" / "kws_float.onnx")
    x = np.load(ROOT / "examples" / "kws_input.npy")
    ref = np.stack([run_ort(model, {model.graph.input[0].name: s})[0] for s in x])
    cs = {o: compile_model(model, opt_level=o) for o in range(4)}
    kernels = {o: sum(c.op_counts.values()) for o, c in cs.items()}
    assert kernels[0] > kernels[1], kernels                      # BatchNorm / Relu not fused at -O0
    assert "BatchNormalization" in cs[0].op_counts and "BatchNormalization" not in cs[1].op_counts
    assert "conv2d_f32_k3x3" not in cs[2].header and "conv2d_f32_k3x3" in cs[3].header
    assert len({cs[o].header for o in (0, 1, 3)}) == 3
    assert cs[1].header == cs[2].header                           # the host has no ISA kernels
    for o, c in cs.items():
        assert_close(host_outputs(c, x), ref, 1e-5, f"-O{o} vs onnxruntime")


def test_int8_levels_on_a_dsp_board():
    if not shared_models.available():
        import pytest
        pytest.skip("../shared/models not present")
    s = shared_models.samples("kws_dscnn")
    x = s["inputs"].reshape(-1, 1, 49, 10, 1)
    cs = {o: compile_model(str(shared_models.model_path("kws_dscnn")), board="qemu-mps2-an386", opt_level=o)
          for o in range(4)}
    assert "DequantizeLinear" in cs[0].op_counts and "QLinearConv" not in cs[0].op_counts
    assert "QLinearConv" in cs[1].op_counts
    assert "__smlad" not in cs[1].header and "__smlad" in cs[2].header   # DSP kernels from -O2
    # -O0 runs the QDQ graph literally, as onnxruntime does with its optimizations off
    m = onnx.load(shared_models.model_path("kws_dscnn"))
    ort = np.stack([run_ort(m, {m.graph.input[0].name: xi})[0] for xi in x]).reshape(s["expected_tflm"].shape)
    y0 = host_outputs(cs[0], x).reshape(s["expected_tflm"].shape)
    assert np.abs(y0.astype(int) - ort).max() <= 1, (y0, ort)
    np.testing.assert_array_equal(host_outputs(cs[1], x).reshape(s["expected_tflm"].shape), s["expected_tflm"])


def test_cli_spellings(tmp_path):
    model = ROOT / "examples" / "kws_float.onnx"
    for args, name in ((["-O0"], "a"), (["--optimize", "level=0"], "b"), (["-O3"], "c"), ([], "d")):
        r = cli("gen", model, *args, "-o", tmp_path / name)
        assert r.returncode == 0, r.stderr
    h = {n: (tmp_path / n / "model.h").read_bytes() for n in "abcd"}
    assert h["a"] == h["b"] and h["c"] == h["d"] and h["a"] != h["c"]
    fails_cleanly(cli("gen", model, "--optimize", "speed", "-o", tmp_path / "e"), tmp_path / "e")
    r = cli("gen", model, "-O7", "-o", tmp_path / "f")
    assert r.returncode != 0 and not (tmp_path / "f").exists()
    helptext = cli("gen", "--help").stdout
    assert all(f"{n}:" in helptext for n in range(4)) and "instruction-set kernels" in helptext
