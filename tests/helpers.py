"""Shared test helpers: build small ONNX models, run them through the
generated C (host compiler), the numpy reference and onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import host

NP2ONNX = {"float32": TensorProto.FLOAT, "int8": TensorProto.INT8, "uint8": TensorProto.UINT8,
           "int32": TensorProto.INT32, "int64": TensorProto.INT64, "bool": TensorProto.BOOL}


def make_model(nodes, inputs: dict, outputs: list, inits: dict | None = None, opset: int = 13,
               out_dtype: str = "float32", name: str = "test") -> onnx.ModelProto:
    """nodes: onnx NodeProtos; inputs: {name: (shape, dtype)}; outputs: names
    (shapes left to inference); inits: {name: np.ndarray}."""
    vis = [helper.make_tensor_value_info(n, NP2ONNX[d], list(s)) for n, (s, d) in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    # Output types come from ONNX's own shape inference (an independent check
    # of ours), falling back to rank-less outputs of out_dtype.
    g = helper.make_graph(nodes, name, vis, [helper.make_empty_tensor_value_info(n) for n in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 9)  # onnxruntime reads IR <= 9 reliably
    inferred = onnx.shape_inference.infer_shapes(m)
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    del m.graph.output[:]
    for n in outputs:
        vi = known.get(n)
        if vi is not None and vi.type.tensor_type.elem_type:
            m.graph.output.append(vi)
        else:
            m.graph.output.append(helper.make_tensor_value_info(n, NP2ONNX[out_dtype], None))
    onnx.checker.check_model(m)
    return m


def node(op, ins, outs, name=None, **attrs):
    return helper.make_node(op, ins, outs, name=name or f"{op.lower()}_{outs[0]}", **attrs)


def run_c(model, feeds: dict, **kw) -> list[np.ndarray]:
    """Outputs of the generated C, compiled with the host cc (graph output order)."""
    c = compile_model(model, verify_each=True, **kw)
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    ins = [np.asarray(feeds[n], dtype=g.tensors[n].dtype)[None] for n in g.inputs]
    return [o[0] for o in host.run(exe, ins, c.out_specs, 1)]


def run_ref(model, feeds: dict, **kw) -> list[np.ndarray]:
    c = compile_model(model, **kw)
    out = reference.run(c.graph, feeds)
    return [out[n] for n in c.graph.outputs]


def run_ort(model, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def assert_close(actual, expected, rel: float = 1e-5, what: str = ""):
    """|actual - expected| <= rel * max(1, max|expected|), elementwise, with
    both sides shown on failure."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
    err = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    worst = int(np.argmax(err)) if err.size else 0
    assert err.size == 0 or err.max() <= rel * scale, (
        f"{what}: max error {err.max():.3g} > {rel * scale:.3g} at flat index {worst}: "
        f"got {actual.reshape(-1)[worst]!r}, expected {expected.reshape(-1)[worst]!r}")


def check_op(model, feeds: dict, rel_c: float = 1e-5, rel_ort: float = 1e-5):
    """The three-way check every op test makes: reference vs onnxruntime, and
    generated C vs reference."""
    ref = run_ref(model, feeds)
    ort_out = run_ort(model, feeds)
    c_out = run_c(model, feeds)
    for i, (r, o, c) in enumerate(zip(ref, ort_out, c_out)):
        assert_close(r, o, rel_ort, f"output {i}: reference vs onnxruntime")
        assert_close(c, r, rel_c, f"output {i}: generated C vs reference")
    return ref, c_out
