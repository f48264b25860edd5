"""Builders and checks shared by the int8 element-wise / pooling / softmax
tests: QOperator models with com.microsoft nodes (helpers.make_model only
imports the default domain), runs in both requantization modes."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from helpers import NP2ONNX, run_c, run_ort, run_ref

MS = "com.microsoft"


def qmodel(nodes, inputs: dict, outputs: dict, inits: dict | None = None, opset: int = 13,
           name: str = "qtest") -> onnx.ModelProto:
    """nodes: NodeProtos (any domain); inputs: {name: (shape, dtype)};
    outputs: {name: dtype} (shapes left open); inits: {name: array}."""
    vis = [helper.make_tensor_value_info(n, NP2ONNX[d], list(s)) for n, (s, d) in inputs.items()]
    outs = [helper.make_tensor_value_info(n, NP2ONNX[d], None) for n, d in outputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, name, vis, outs, inits)
    domains = sorted({n.domain for n in nodes if n.domain not in ("", "ai.onnx")})
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]
                          + [helper.make_opsetid(d, 1) for d in domains])
    m.ir_version = min(m.ir_version, 9)
    return m


def qparams(prefix: str, scale: float, zp: int, dtype: str) -> dict:
    """Initializers '<prefix>_s' (float32 scalar) and '<prefix>_z' (dtype scalar)."""
    return {f"{prefix}_s": np.array(scale, np.float32), f"{prefix}_z": np.array(zp, dtype)}


def rand_q(rng, shape, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.randint(int(info.min), int(info.max) + 1, size=shape).astype(dtype)


def lsb_diff(a, b) -> int:
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    assert a.shape == b.shape, f"shape {a.shape} != {b.shape}"
    return int(np.abs(a - b).max()) if a.size else 0


def assert_exact(actual, expected, what: str):
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.shape == e.shape and a.dtype == e.dtype, f"{what}: {a.dtype}{a.shape} vs {e.dtype}{e.shape}"
    if not np.array_equal(a, e):
        bad = np.argwhere(a != e)
        i = tuple(bad[0])
        raise AssertionError(f"{what}: {len(bad)} of {a.size} elements differ; first at {i}: "
                             f"{a[i]} vs {e[i]} (max |diff| {lsb_diff(a, e)})")


def assert_graph_outputs_exact(graph, outs, feeds: dict, min_unique: int = 0) -> dict:
    """Each of outs (one array per graph output, one sample) equals the
    numpy reference on feeds bit for bit; with min_unique, each reference
    output also has that many distinct values (else the case tests too
    little). Returns the reference outputs by name."""
    from cuvil_mcu import reference
    ref = reference.run(graph, feeds)
    for name, o in zip(graph.outputs, outs):
        assert_exact(o, ref[name], f"output {name} vs reference")
        assert np.unique(ref[name]).size >= min(min_unique, ref[name].size), \
            f"{name}: output too flat to test anything"
    return ref


def rerender(c, act_for=None):
    """Compiled model c with node.act (a fused clamp in the real domain, as
    the QDQ pass sets it) set to act_for(node) where that is not None, and
    the header rendered again."""
    import dataclasses
    from cuvil_mcu import compiler
    g = c.graph
    for n in g.nodes:
        a = act_for(n) if act_for is not None else None
        if a is not None:
            n.act = a
    plan, r = compiler.plan_and_render(g, c.prefix, c.board)
    return dataclasses.replace(c, plan=plan, header=r.text)


def with_fused_act(c, act):
    """c with every node's fused clamp set to act, rendered again."""
    return rerender(c, lambda n: act)


def clamped_exact(graph, outs, feeds: dict) -> int:
    """outs equal the reference bit for bit; returns how many reference
    values sit at their output's min or max (did a clamp bite?)."""
    ref = assert_graph_outputs_exact(graph, outs, feeds)
    return sum(int((r == r.min()).sum() + (r == r.max()).sum()) for r in (ref[n] for n in graph.outputs))


def sim_exact(c, feeds: dict, min_unique: int = 0):
    """Run compiled model c for one sample on its QEMU board and assert every
    output equals the reference; returns (SimResult, reference by name)."""
    from cuvil_mcu.sim import qemu
    g = c.graph
    xs = [np.asarray(feeds[n], g.tensors[n].dtype)[None] for n in g.inputs]
    r = qemu.simulate(c, xs)
    return r, assert_graph_outputs_exact(g, [o[0] for o in r.outputs], feeds, min_unique)


def check_modes(model, feeds: dict, ort_lsb: int | None = 0, fixed_vs=None, fixed_lsb: int = 1,
                c: bool = True, modes=("fixed", "float")):
    """Per requant mode: generated C == reference exactly; float-mode
    reference vs onnxruntime (graph optimizations on) within ort_lsb (None:
    not compared); fixed-mode reference vs `fixed_vs(feeds)` (a list of
    expected arrays, e.g. a plain float computation) within fixed_lsb.
    Returns {mode: reference outputs}."""
    out = {}
    for mode in modes:
        ref = run_ref(model, feeds, requant=mode)
        if c:
            cres = run_c(model, feeds, requant=mode)
            for i, (r, x) in enumerate(zip(ref, cres)):
                assert_exact(x, r, f"{mode} mode, output {i}: generated C vs reference")
        if mode == "float" and ort_lsb is not None:
            o = run_ort(model, feeds, optimize=True)
            for i, (r, x) in enumerate(zip(ref, o)):
                d = lsb_diff(r, x)
                assert d <= ort_lsb, f"float mode, output {i}: reference vs onnxruntime differ by {d} LSB > {ort_lsb}"
        if mode == "fixed" and fixed_vs is not None:
            for i, (r, x) in enumerate(zip(ref, fixed_vs(feeds))):
                d = lsb_diff(r, x)
                assert d <= fixed_lsb, f"fixed mode, output {i}: reference vs float computation differ by {d} LSB"
        out[mode] = ref
    return out


def check_strict(model, feeds: dict, modes=("fixed", "float")):
    """Build the generated C with every compiler of helpers.STRICT_BUILDS
    (-Werror, C99/C11/C++, sanitizers) in each requant mode, run it, and
    compare with the reference exactly. Returns the builds skipped (compiler
    absent)."""
    from helpers import check_strict_builds

    skipped = []
    for mode in modes:
        skipped += check_strict_builds(model, feeds, exact=True, requant=mode)
    return skipped


def literal_qdq_pool(shape, x_q, y_q, attrs=None, channels_last: bool = False, out_shape=None) -> onnx.ModelProto:
    """One int8 pool as a literal QDQ graph: DequantizeLinear -> AveragePool
    (`attrs`) or GlobalAveragePool (attrs None) -> QuantizeLinear, input "x"
    of `shape` (NHWC when channels_last: a Transpose to NCHW first), output
    "y"; x_q, y_q: (scale, zero point). run_ort runs it with graph
    optimizations off: ONNX's literal semantics, float32 between the two."""
    nodes = [helper.make_node("DequantizeLinear", ["t" if channels_last else "x", "xs", "xz"], ["d"]),
             helper.make_node("AveragePool", ["d"], ["p"], **attrs) if attrs is not None
             else helper.make_node("GlobalAveragePool", ["d"], ["p"]),
             helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["y"])]
    if channels_last:
        nodes.insert(0, helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]))
    inits = [numpy_helper.from_array(np.array(v, dt), n)
             for n, v, dt in (("xs", x_q[0], np.float32), ("xz", x_q[1], np.int8),
                              ("ys", y_q[0], np.float32), ("yz", y_q[1], np.int8))]
    g = helper.make_graph(nodes, "literal", [helper.make_tensor_value_info("x", onnx.TensorProto.INT8, list(shape))],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.INT8,
                                                         None if out_shape is None else list(out_shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m
