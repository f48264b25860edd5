"""--precision fp16 / int8,fp16:<layers>.

The half weights are checked against numpy's float16 conversion (an
independent IEEE implementation): the C conversion must give exactly
np.float16(w) for every weight, and outputs computed in float32 from them
equal the reference run with the half-rounded weights within float32
tolerance. Native fp16 arithmetic (Cortex-A76 under qemu-user) stays within
the documented fp16 tolerance."""
from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.precision import FP16_ATOL, FP16_RTOL
from deploy_helpers import ROOT, host_outputs, cli, fails_cleanly
from helpers import assert_close, header_consts, run_strict_builds

KWS = ROOT / "examples" / "kws_float.onnx"


def test_flash_halves_and_outputs_follow_the_half_weights():
    x = np.load(ROOT / "examples" / "kws_input.npy")
    c32, c16 = compile_model(str(KWS)), compile_model(str(KWS), precision="fp16")
    assert c16.weights_bytes <= 0.55 * c32.weights_bytes, (c16.weights_bytes, c32.weights_bytes)
    assert len(c16.fp16_nodes) == 10 and "fp16     10 layer(s)" in c16.summary()
    # every weight array the header stores is numpy's float16 of the float32 layer's weights
    halves = [v for ctype, v in header_consts(c16.header).values() if ctype == "uint16_t"]
    assert len(halves) == 10
    stored = sorted(np.sort(v).tobytes() for v in halves)
    by_name = {n.name: n for n in c32.graph.nodes}
    expect = sorted(np.sort(np.asarray(c32.graph.tensors[by_name[name].inputs[1]].data, np.float32)
                            .astype(np.float16).view(np.uint16).reshape(-1)).tobytes() for name in c16.fp16_nodes)
    assert stored == expect
    ref = np.stack([reference.run(c16.graph, {"input": xi})["probs"] for xi in x])
    y16 = host_outputs(c16, x)
    assert_close(y16, ref, 1e-5, "fp16 weights, float32 arithmetic vs reference")
    y32 = host_outputs(c32, x)
    assert np.abs(y16 - y32).max() < 1e-3 and not np.array_equal(y16, y32)
    assert (y16.reshape(4, -1).argmax(1) == y32.reshape(4, -1).argmax(1)).all()


def test_half_conversion_is_exact_for_special_values():
    """Subnormals, the largest half, signed zeros: one Gemm whose weights are
    those values, times identity inputs, reads them back through the C."""
    vals = np.array([0.0, -0.0, 5.96e-8, -6.1e-5, 6.1035156e-05, 1.0, -2.5, 65504.0, 0.333, 1e-7, 3.0e-6, 7.0],
                    np.float32)
    w = vals.reshape(12, 1)
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], name="g")], "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [12, 1])],
        [numpy_helper.from_array(w, "w")]), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 9
    c = compile_model(m, precision="fp16")
    y = host_outputs(c, np.eye(12, dtype=np.float32)[None])
    np.testing.assert_array_equal(y[0, :, 0], vals.astype(np.float16).astype(np.float32))


def test_strict_builds_and_range_error():
    c = compile_model(str(KWS), precision="fp16")
    x = np.load(ROOT / "examples" / "kws_input.npy")[0]
    run_strict_builds(c, {"input": x}, rel=1e-5)   # gcc/clang C99/C11, g++/clang++, ASan/UBSan
    m = onnx.load(KWS)
    big = next(i for i in m.graph.initializer if numpy_helper.to_array(i).ndim == 4)
    a = numpy_helper.to_array(big).copy()
    a.flat[0] = 1e6
    big.CopyFrom(numpy_helper.from_array(a, big.name))
    with pytest.raises(Exception, match="beyond fp16's 65504"):
        compile_model(m, precision="fp16")


def test_native_fp16_on_cortex_a76():
    from cuvil_mcu import boards
    from cuvil_mcu.sim import qemu_user
    b = boards.get("cortex-a76-aarch64")
    if shutil.which(b.sim["cc"]) is None or shutil.which(b.sim["qemu"]) is None:
        pytest.skip("aarch64 cross gcc / qemu-user not installed")
    x = np.load(ROOT / "examples" / "kws_input.npy")
    c = compile_model(str(KWS), board="cortex-a76-aarch64", precision="fp16")
    ref = np.stack([reference.run(c.graph, {"input": xi})["probs"] for xi in x])
    y = qemu_user.compile_and_run(c, [x])[0]
    err = np.abs(y.astype(np.float64) - ref)
    assert (err <= FP16_ATOL + FP16_RTOL * np.abs(ref)).all(), err.max()
    assert err.max() > 1e-6   # really computed in fp16, not float32
    c.header = "#define MODEL_FP16_PORTABLE\n" + c.header
    y32 = qemu_user.compile_and_run(c, [x])[0]
    assert_close(y32, ref, 1e-5, "MODEL_FP16_PORTABLE on the A76")


def test_mixed_int8_fp16(tmp_path):
    """int8 for every layer but the Gemm, which stays float with half weights."""
    calib = ROOT / "examples" / "kws_calib.npz"
    c = compile_model(str(KWS), precision="int8,fp16:Gemm", calibration=str(calib))
    assert "QLinearConv" in c.op_counts and "Gemm" in c.op_counts and "com.microsoft.QGemm" not in c.op_counts
    assert c.fp16_nodes == ["Gemm_108"] and "fp16     1 layer(s) with IEEE half weights: Gemm_108" in c.summary()
    x = np.load(ROOT / "examples" / "kws_input.npy")
    ref = np.stack([reference.run(c.graph, {"input": xi})["probs"] for xi in x])
    assert_close(host_outputs(c, x), ref, 1e-5, "mixed int8 + fp16 vs reference")
    r = cli("gen", KWS, "--precision", "int8,fp16:conv_nonexistent", "--calibration", calib, "-o", tmp_path / "a")
    assert "conv_nonexistent" in fails_cleanly(r, tmp_path / "a")
    r = cli("gen", KWS, "--precision", "fp8", "-o", tmp_path / "b")
    assert "--precision" in fails_cleanly(r, tmp_path / "b")
