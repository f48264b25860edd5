"""The ONNX backend node test suite (shipped in the `onnx` package) run through
cuvil-mcu: every case is compiled to C, built with the host compiler and
executed (cuvil_mcu.backend.CuvilBackend); outputs are compared with ONNX's
expected outputs (rtol 1e-3, atol 1e-7 unless the case says otherwise).

What runs:
- every case whose name says it tests an op we claim (OP_TESTS), and
- every other case whose graph only uses claimed ops (function-body
  expansions of unclaimed ops such as Gelu or Swish into claimed ones),
minus EXCLUDE (reason -> name patterns; each reason is printed as the skip
reason) and the cases of claimed ops whose expanded body needs ops we do not
claim (excluded automatically, reason names the ops).

Parameter inputs the node tests feed at run time (Conv W, Reshape shape,
Clip min ...) are bound as initializers by the backend; see
cuvil_mcu/backend.py.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import onnx.backend.test
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.loader import load_model_tests

from cuvil_mcu import reference
from cuvil_mcu.backend import CuvilBackend
from cuvil_mcu.errors import InputError, UnsupportedOpError

# Claimed op (float32) -> regex over node-test names (without the _cpu suffix)
# of the cases that test it.
OP_TESTS = {
    "Conv": r"^test_(basic_conv_with|basic_conv_without|conv_with)",
    "Gemm": r"^test_gemm_",
    "MatMul": r"^test_matmul_",
    "Add": r"^test_add(_|$)",
    "Sub": r"^test_sub(_|$)",
    "Mul": r"^test_mul(_|$)",
    "Div": r"^test_div(_|$)",
    "Relu": r"^test_relu(_|$)",
    "LeakyRelu": r"^test_leakyrelu(_|$)",
    "Clip": r"^test_clip(_|$)",
    "Sigmoid": r"^test_sigmoid(_|$)",
    "Tanh": r"^test_tanh(_|$)",
    "HardSigmoid": r"^test_hardsigmoid(_|$)",
    "HardSwish": r"^test_hardswish(_|$)",
    "Erf": r"^test_erf(_|$)",
    "Sqrt": r"^test_sqrt(_|$)",
    "Pow": r"^test_pow(_|$)",
    "Exp": r"^test_exp(_|$)",
    "Neg": r"^test_neg(_|$)",
    "Abs": r"^test_abs(_|$)",
    "Max": r"^test_max(_|$)",
    "Sum": r"^test_sum(_|$)",
    "LRN": r"^test_lrn(_|$)",
    "Min": r"^test_min(_|$)",
    "Softmax": r"^test_softmax_",
    "LogSoftmax": r"^test_logsoftmax_",
    "MaxPool": r"^test_maxpool_",
    "AveragePool": r"^test_averagepool_",
    "GlobalAveragePool": r"^test_globalaveragepool(_|$)",
    "GlobalMaxPool": r"^test_globalmaxpool(_|$)",
    "ReduceMean": r"^test_reduce_mean_",
    "ReduceMax": r"^test_reduce_max_",
    "ReduceSum": r"^test_reduce_sum_(?!square)",
    "Reshape": r"^test_reshape_",
    "Flatten": r"^test_flatten_",
    "Squeeze": r"^test_squeeze(_|$)",
    "Unsqueeze": r"^test_unsqueeze_",
    "Transpose": r"^test_transpose_",
    "Concat": r"^test_concat_",
    "Split": r"^test_split_(?!to_sequence)",
    "Slice": r"^test_slice(_|$)",
    "Pad": r"^test_(constant|reflect|edge|wrap)_pad",
    "Gather": r"^test_gather_(?!elements)",
    "BatchNormalization": r"^test_batchnorm_",
    "LayerNormalization": r"^test_layer_normalization_",
    "Identity": r"^test_identity(_|$)",
    "Dropout": r"^test_dropout_",
    "Constant": r"^test_constant$",
    "Shape": r"^test_shape(_|$)",
    "LSTM": r"^test_lstm_",
    "GRU": r"^test_gru_",
    "RNN": r"^test_(simple_rnn|rnn_seq)",
    "ConvTranspose": r"^test_convtranspose",
    "Resize": r"^test_resize_",
    "Upsample": r"^test_upsample_",
    # int8 / uint8
    "QLinearConv": r"^test_qlinearconv$",
    "QLinearMatMul": r"^test_qlinearmatmul_",
    "ConvInteger": r"^test_convinteger_",
    "MatMulInteger": r"^test_matmulinteger$",
    "QuantizeLinear": r"^test_quantizelinear",
    "DequantizeLinear": r"^test_dequantizelinear",
}
CLAIMED = set(OP_TESTS)
QUANTIZED = {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QuantizeLinear", "DequantizeLinear"}

# Reason -> patterns (searched in the test name). One line per reason; these
# are scope decisions, not failures to hide.
EXCLUDE = {
    "float16 scales (the IR has no float16)": [r"^test_qlinearmatmul_.*_float16$"],
    "8-bit integer quantization only (no float8/int4/int2/int16/fp4 formats)": [
        r"^test_(de)?quantizelinear_(e4m3fn|e5m2|u?int(2|4|16)|float4e2m1)"],
    "blocked quantization (block_size) is not supported": [r"^test_(de)?quantizelinear_blocked"],
    "float32 only for non-quantized ops (other element types)": [
        r"_(u?int(8|16|32|64)|float16|bfloat16|float64|double|string|bool)(_|$)",
        r"^test_div_int32_trunc",
        r"^test_reduce_max_bool_inputs",
        r"^test_pow_types_",            # integer base or exponent
    ],
    "3-D pooling (1-D and 2-D only)": [r"^test_(averagepool|maxpool)_3d_"],
    "3-D ConvTranspose (1-D and 2-D only)": [r"^test_convtranspose_3d"],
    "Resize tf_crop_and_resize (crop boxes from a roi input) is not supported": [r"^test_resize_tf_crop_and_resize"],
    "Resize antialias=1 when downscaling (an antialiasing filter) is not supported": [
        r"^test_resize_downsample_(scales|sizes)_(linear|cubic)_antialias"],
    "Resize align_corners downscaled by scales: we divide by the integer output length - 1, as onnxruntime does, "
    "the ONNX reference by scale * input length - 1 (onnxruntime fails these two cases too)": [
        r"^test_resize_downsample_scales_(linear|cubic)_align_corners$"],
    "BatchNormalization training mode (an inference compiler: running stats are constants)": [
        r"^test_batchnorm_.*_training_mode"],
    "Pad modes reflect/edge/wrap (constant padding only)": [r"^test_(reflect|edge|wrap)_pad"],
    "MaxPool's second output (argmax indices) is not supported": [r"^test_maxpool_with_argmax_"],
    "Dropout in training mode (random masks; an inference compiler)": [r"^test_training_dropout(?!_zero_ratio)"],
    "zero-size (empty) tensors: no arena buffer to run on": [
        r"_empty_set", r"^test_split_zero_size_splits", r"^test_reshape_allowzero_reordered"],
    "crop/pad target shape fed as a run-time input (static shapes only)": [r"^test_center_crop_pad_"],
    "sequence and optional values (tensors only)": [r"^test_identity_(sequence|opt)"],
}


def _ops(case) -> set[str]:
    return {n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
            for n in case.model.graph.node}


def _target(name: str) -> str | None:
    for op, pat in OP_TESTS.items():
        if re.search(pat, name):
            return op
    return None


def _reason(name: str) -> str | None:
    for why, pats in EXCLUDE.items():
        if why.startswith("float32 only") and _target(name) in QUANTIZED:
            continue  # integer element types are what those ops are about
        if any(re.search(p, name) for p in pats):
            return why
    return None


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
    CASES = {c.name: c for c in load_model_tests(kind="node")}

# name -> claimed op it tests ("composite" for expansions of unclaimed ops)
SELECTED: dict[str, str] = {}
# name -> reason it does not run
EXCLUDED: dict[str, str] = {}
for _name, _case in sorted(CASES.items()):
    _op = _target(_name)
    _extra = _ops(_case) - CLAIMED
    if _op is None:
        if _extra or not _ops(_case):
            continue
        _op = "composite"
    SELECTED[_name] = _op
    if _reason(_name):
        EXCLUDED[_name] = _reason(_name)
    elif _extra:
        EXCLUDED[_name] = "function-body expansion uses ops we do not claim: " + ", ".join(sorted(_extra))

backend_test = onnx.backend.test.BackendTest(CuvilBackend, __name__)
for _name in SELECTED:
    backend_test.include(f"^{re.escape(_name)}_cpu$")
for _name, _why in EXCLUDED.items():
    backend_test.exclude(f"^{re.escape(_name)}_cpu$")

# Only the selected cases become pytest items (the other ~1400 node cases
# test ops we do not claim, and CUDA variants are not ours). An excluded
# case is skipped with its reason rather than the runner's pattern text.
for _cls_name, _cls in backend_test.test_cases.items():
    for _attr in [a for a in vars(_cls) if a.startswith("test_")]:
        _name = _attr[: -len("_cpu")] if _attr.endswith("_cpu") else None
        if _name not in SELECTED:
            delattr(_cls, _attr)
        elif _name in EXCLUDED:
            getattr(_cls, _attr).__unittest_skip_why__ = "excluded: " + EXCLUDED[_name]
    if any(a.startswith("test_") for a in vars(_cls)):
        globals()[_cls_name] = _cls


def test_every_claimed_op_has_running_cases():
    """The name patterns must keep matching cases of every claimed op (onnx
    renames cases between releases); a claimed op with no running case
    would be a silent hole in coverage."""
    running = {op for name, op in SELECTED.items() if name not in EXCLUDED}
    assert CLAIMED - running == set(), f"claimed ops without a running node test: {sorted(CLAIMED - running)}"


def test_exclusions_are_used():
    """Every exclusion pattern must match a selected case (stale patterns hide nothing but mislead)."""
    unused = [p for pats in EXCLUDE.values() for p in pats if not any(re.search(p, n) for n in SELECTED)]
    assert unused == [], f"exclusion patterns matching no selected case: {unused}"


# The backend itself --------------------------------------------------------

def _reshape_model():
    n = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    g = helper.make_graph(n, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                                   helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_backend_runs_the_generated_c(monkeypatch):
    """The outputs come from the binary: with the numpy interpreter disabled
    the run still works, and values match numpy's Relu."""
    monkeypatch.setattr(reference, "run", lambda *a, **k: pytest.fail("numpy reference used"))
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    rep = CuvilBackend.prepare(_reshape_model())
    (y,) = rep.run([x, np.array([3, 2, 2], np.int64)])
    np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(3, 2, 2))
    (y,) = rep.run({"x": x, "shape": np.array([1, 12], np.int64)})  # another binding: recompiled
    np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(1, 12))


def test_backend_unbound_parameter_input_is_our_error():
    with pytest.raises(UnsupportedOpError, match="shape 'shape' must be a constant"):
        CuvilBackend.prepare(_reshape_model(), bind_params=False)


def test_backend_compiler_errors_propagate_from_prepare():
    g = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    with pytest.raises(UnsupportedOpError, match="Hardmax"):
        CuvilBackend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def test_backend_rejects_inputs_it_was_not_compiled_for():
    rep = CuvilBackend.prepare(_reshape_model())
    with pytest.raises(InputError, match=r"shape \[3, 4\], the model was compiled for \[2, 6\]"):
        rep.run([np.zeros((3, 4), np.float32), np.array([12], np.int64)])
    with pytest.raises(InputError, match="float64"):
        rep.run([np.zeros((2, 6)), np.array([12], np.int64)])
    assert CuvilBackend.supports_device("CPU") and not CuvilBackend.supports_device("CUDA")
