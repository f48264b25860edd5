"""What older exporters write: Dropout with its mask output (all ones at
inference: dropped when unread, a constant when read) and IR version 3
models, whose initializers are also graph inputs (constants unless
--input-shape names them) and whose onnxruntime-quantized form adds
initializers that are not listed as inputs."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_mcu.compiler import compile_model
from helpers import make_model, node, run_c, run_ort

RNG = np.random.RandomState(12)


@pytest.mark.parametrize("opset", [9, 13])
def test_dropout_mask_unread_is_dropped(opset):
    m = make_model([node("Dropout", ["x"], ["d", "mask"]), node("Relu", ["d"], ["y"])],
                   {"x": ((2, 5), "float32")}, ["y"], opset=opset)
    c = compile_model(m)
    assert [n.op_type for n in c.graph.nodes if n.op_type != "Dropout"] == ["Relu"]   # Dropout: a view
    assert "mask" not in c.graph.tensors and all(len([o for o in n.outputs if o]) == 1 for n in c.graph.nodes)
    x = RNG.randn(2, 5).astype(np.float32)
    np.testing.assert_array_equal(run_c(m, {"x": x})[0], np.maximum(x, 0))


def test_dropout_mask_read_is_a_constant_of_ones():
    """The mask read by a Cast and a Mul, and itself a graph output: ones of
    the data's shape (bool from opset 10), as onnxruntime gives."""
    m = make_model([node("Dropout", ["x"], ["d", "mask"]), node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
                    node("Mul", ["d", "mf"], ["y"])], {"x": ((3, 4), "float32")}, ["y", "mask"], opset=13)
    c = compile_model(m)
    assert c.graph.tensors["mask"].is_const and c.graph.tensors["mask"].dtype == "bool"
    x = RNG.randn(3, 4).astype(np.float32)
    got, ref = run_c(m, {"x": x}), run_ort(m, {"x": x})
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1].astype(bool), ref[1])
    assert ref[1].all()


def ir3_model(k_listed=True):
    """Conv -> Add(k) with w, b and k initializers, listed as graph inputs (IR 3)."""
    w = (RNG.randn(4, 3, 3, 3) * 0.3).astype(np.float32)
    b = (RNG.randn(4) * 0.1).astype(np.float32)
    k = RNG.randn(1, 4, 1, 1).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6]),
              helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])]
    if k_listed:
        inputs.append(helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 4, 1, 1]))
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Add", ["c", "k"], ["y"])], "ir3", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                           numpy_helper.from_array(k, "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 3
    return m


def test_ir3_initializers_listed_as_inputs_are_constants(tmp_path):
    m = ir3_model()
    onnx.checker.check_model(m)
    p = tmp_path / "ir3.onnx"
    onnx.save(m, p)
    c = compile_model(str(p))
    assert c.graph.inputs == ["x"] and c.graph.tensors["w"].is_const   # (k went into the Conv's bias)
    assert any("3 initializer(s) also listed as graph inputs" in n and "--input-shape" in n for n in c.graph.notes)
    x = RNG.randn(1, 3, 6, 6).astype(np.float32)
    np.testing.assert_allclose(run_c(m, {"x": x})[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_ir3_initializer_named_in_input_shape_is_fed_at_run_time(tmp_path):
    m = ir3_model()
    p = tmp_path / "ir3.onnx"
    onnx.save(m, p)
    c = compile_model(str(p), input_shapes={"k": (1, 4, 1, 1)})
    assert c.graph.inputs == ["x", "k"] and not c.graph.tensors["k"].is_const
    assert any("fed at run time: k" in n for n in c.graph.notes)
    x, k = RNG.randn(1, 3, 6, 6).astype(np.float32), np.arange(4, dtype=np.float32).reshape(1, 4, 1, 1)
    y = run_c(m, {"x": x, "k": k}, input_shapes={"k": (1, 4, 1, 1)})[0]
    m4 = onnx.ModelProto()
    m4.CopyFrom(m)
    m4.ir_version = 4    # onnxruntime feeds an initializer that is an input from IR 4 on
    np.testing.assert_allclose(y, run_ort(m4, {"x": x, "k": k})[0], rtol=1e-5, atol=1e-5)


def test_ir3_with_unlisted_initializers_loads_as_onnxruntime_does(tmp_path):
    """onnxruntime's quantizer adds scales and zero points to an IR 3 model
    without listing them as inputs; onnx's checker refuses that by IR 3's
    rule, onnxruntime loads it, so do we (file path and CLI)."""
    m = ir3_model(k_listed=False)
    with pytest.raises(onnx.checker.ValidationError, match="not in graph input"):
        onnx.checker.check_model(m)
    p = tmp_path / "ir3q.onnx"
    onnx.save(m, p)
    x = RNG.randn(1, 3, 6, 6).astype(np.float32)
    np.testing.assert_allclose(run_c(str(p), {"x": x})[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    r = subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", "gen", str(p), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert onnx.load(str(p)).ir_version == 3
