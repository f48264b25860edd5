"""Real network graphs the `onnx` package ships (tests/light_models.py:
light_*.onnx with seeded weights), end to end on the host: a CI-sized
subset (the first blocks of Inception v1, ResNet-50, DenseNet-121 and
ShuffleNet, most at 64 x 64), holding what the classic networks need: LRN,
Sum, Caffe2's BatchNorm as BatchNormalization + Mul + Add before and after
convolutions, channel shuffles. benchmarks/light_models.py runs the whole
networks.

- float: the generated C against onnxruntime;
- int8: onnxruntime's quantize_static (QDQ; Sum and LRN quantized too) in
  both requantization modes: the generated C bit for bit with the
  reference, and every integer node of the compiled graph, fed
  onnxruntime's own values of its inputs, against onnxruntime's value of
  its output (the QDQ graph run as written): a node-by-node check, since a
  one-step difference anywhere spreads through the layers after it.
  "float" mode equals onnxruntime on every node but rare ties in the
  convolutions' float32 rescaling; "fixed" (TFLM's double-rounding
  multiply) is at most one step off.
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import helper

import light_models as lm
from cuvil_mcu import ops, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import host

pytest.importorskip("onnxruntime.quantization")
logging.getLogger().setLevel(logging.ERROR)

# name -> (image size or None, cut after this tensor, op types the compiled float graph must hold)
CASES = {
    "inception_v1": (64, "r23", {"LRN", "Concat"}),
    "resnet50": (64, "r24", {"Sum"}),
    "densenet121": (64, "r52", {"BatchNormalization", "Concat"}),
    "shufflenet": (None, "r27", {"Sum", "Transpose"}),
}
# int8 op types each compiled QDQ graph must hold (the new integer kernels)
INT8_OPS = {"inception_v1": {"cuvil.QLRN"}, "resnet50": {"cuvil.QSum", "cuvil.QAffine"},
            "densenet121": {"cuvil.QAffine"}, "shufflenet": {"cuvil.QSum"}}


def _ort(m, feeds, extra_outputs=()):
    import onnxruntime as ort
    if extra_outputs:
        m2 = onnx.ModelProto()
        m2.CopyFrom(m)
        m2.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in extra_outputs)
        m = m2
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    names = [o.name for o in m.graph.output]
    return dict(zip(names, ort.InferenceSession(m.SerializeToString(), so,
                                                providers=["CPUExecutionProvider"]).run(None, feeds)))


def _c(c, feeds):
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    return dict(zip(g.outputs, (o[0] for o in host.run(exe, [feeds[n][None] for n in g.inputs], c.out_specs, 1))))


@pytest.fixture(scope="module", params=sorted(CASES))
def model(request):
    hw, upto, _ = CASES[request.param]
    return request.param, lm.seeded(request.param, hw=hw, upto=upto)


def test_float_matches_onnxruntime(model):
    name, m = model
    c = compile_model(m)
    kinds = {n.op_type for n in c.graph.nodes}
    assert CASES[name][2] <= kinds, f"{name}: compiled graph lacks {CASES[name][2] - kinds}"
    feeds = lm.image(m)
    ref, got = _ort(m, feeds), _c(c, feeds)
    for o in c.graph.outputs:
        r, y = ref[o], got[o]
        err = float(np.abs(y.astype(np.float64) - r).max())
        assert err <= 1e-5 * max(1.0, float(np.abs(r).max())), \
            f"{name} {o}: max error {err:.3g} against onnxruntime (largest |output| {np.abs(r).max():.3g})"


def _ort_value(vals: dict, name: str, shape) -> np.ndarray | None:
    """onnxruntime's value of a compiled-graph tensor: the same name, or the
    NHWC copy the layout pass made of it (suffix _nhwc, or _pre where a
    transpose was moved below an element-wise op)."""
    for suffix in ("", "_nhwc", "_pre"):
        base = name[:len(name) - len(suffix)] if suffix else name
        if name.endswith(suffix) and base in vals:
            v = vals[base]
            if v.shape != tuple(shape) and v.ndim >= 3:
                v = np.moveaxis(v, 1, -1)
            return v if v.shape == tuple(shape) else None
    return None


def test_int8_node_by_node_against_onnxruntime(model):
    name, m = model
    q = lm.quantized(m, extra_ops=("Sum", "LRN"))
    feeds = lm.image(q)
    quantized = [n.output[0] for n in q.graph.node if n.op_type == "QuantizeLinear"]
    ortv = _ort(q, feeds, quantized)
    for mode in ("fixed", "float"):
        c = compile_model(q, requant=mode)
        g = c.graph
        kinds = {n.op_type for n in g.nodes}
        assert INT8_OPS[name] <= kinds, f"{name}: compiled int8 graph lacks {INT8_OPS[name] - kinds}"
        got, ref = _c(c, feeds), reference.run(g, feeds)
        for o in g.outputs:
            assert np.array_equal(got[o], ref[o]), f"{name} {mode}: generated C differs from the reference on {o}"
        checked, worst, differ, total = 0, 0, 0, 0
        for n in g.nodes:
            if not n.op_type.startswith(("QLinear", "com.microsoft.Q", "cuvil.Q")):
                continue
            ins, arrays = [g.tensors[i] if i else None for i in n.inputs], []
            for t in ins:
                arrays.append(None if t is None else t.data if t.is_const else _ort_value(ortv, t.name, t.shape))
            want = _ort_value(ortv, n.outputs[0], g.tensors[n.outputs[0]].shape)
            if want is None or any(a is None for t, a in zip(ins, arrays) if t is not None):
                continue
            y = ops.get(n.op_type).reference(n, ins, *arrays)[0]
            d = np.abs(y.astype(np.int64) - want.astype(np.int64))
            checked, total = checked + 1, total + d.size
            worst, differ = max(worst, int(d.max())), differ + int((d > 0).sum())
        integer = sum(1 for n in g.nodes if n.op_type.startswith(("QLinear", "com.microsoft.Q", "cuvil.Q")))
        assert checked >= 0.8 * integer, f"{name} {mode}: only {checked} of {integer} integer nodes matched by name"
        assert worst <= 1, f"{name} {mode}: a node is {worst} steps from onnxruntime"
        if mode == "float":
            assert differ <= 1e-4 * total, f"{name} float: {differ} of {total} outputs one step from onnxruntime"
        else:
            assert differ <= 5e-3 * total, f"{name} fixed: {differ} of {total} outputs one step from onnxruntime"
