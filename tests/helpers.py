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
    fallback = []
    for n in outputs:
        vi = known.get(n)
        if vi is not None and vi.type.tensor_type.elem_type:
            m.graph.output.append(vi)
        else:
            fallback.append(n)
            m.graph.output.append(helper.make_tensor_value_info(n, NP2ONNX[out_dtype], None))
    if fallback:
        # ONNX could not infer these outputs (and the checker wants a shape):
        # give them their rank with symbolic dimensions, from our frontend.
        from cuvil_mcu.frontend.onnx_loader import from_model
        g = from_model(m)
        for vi in m.graph.output:
            if vi.name in fallback:
                vi.CopyFrom(helper.make_tensor_value_info(
                    vi.name, NP2ONNX[g.tensors[vi.name].dtype], [f"d{i}" for i in range(len(g.tensors[vi.name].shape))]))
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
    """The numpy reference on the compiled (optimized) graph; kw as compile_model
    (e.g. requant="float")."""
    c = compile_model(model, **kw)
    out = reference.run(c.graph, feeds)
    return [out[n] for n in c.graph.outputs]


def run_ort(model, feeds: dict, optimize: bool = False) -> list[np.ndarray]:
    """onnxruntime on the original model. optimize=True keeps ORT's graph
    optimizations (QDQ -> fused QLinear kernels), as its users run it."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    if not optimize:
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


def host_has_fma() -> bool:
    """An x86-64 host whose CPU has FMA3 (so -mfma code runs)."""
    import platform
    from pathlib import Path
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return "fma" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


# -mfma where the host runs it: the GNU-mode builds below then really fuse
# a * b + c, as firmware does on every Cortex-M / Cortex-A FPU
HOST_FMA = ["-mfma"] if host_has_fma() else []

# Compilers x flags the generated C must build with, warning-free: ISO C
# and C++; the sanitizers (index 5); the GNU modes firmware projects use
# (gcc's default -ffp-contract=fast, MicroPython's -std=gnu99, Arduino /
# PlatformIO gnu11), where compilers contract a * b + c into fused
# multiply-adds. (cc, extra flags)
STRICT_BUILDS = [
    ("gcc", ["-std=c99"]),
    ("gcc", ["-std=c11"]),
    ("clang", ["-std=c99"]),
    ("g++", ["-x", "c++"]),
    ("clang++", ["-x", "c++"]),
    ("gcc", ["-std=c99", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]),
    ("gcc", ["-std=gnu99", *HOST_FMA]),
    ("clang", ["-std=gnu11", "-ffp-contract=fast", *HOST_FMA]),
]
STRICT_WARNINGS = ["-O1", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def check_strict_builds(model, feeds: dict, rel: float = 1e-5, exact: bool = False, **compile_kw):
    """Build the generated C with every compiler of STRICT_BUILDS that is
    installed (-Werror), run it, and compare each run with the reference:
    within rel of the output range, or bit for bit with exact=True.
    compile_kw go to compile_model (e.g. requant="float"). Returns the
    (cc, flags) that were skipped because the compiler is absent."""
    c = compile_model(model, **compile_kw)
    return run_strict_builds(c, feeds, rel, exact, what=f"{compile_kw or ''} ")


def run_strict_builds(c, feeds: dict, rel: float = 1e-5, exact: bool = False, builds=None,
                      what: str = "") -> list:
    """check_strict_builds for an already compiled model c, over builds
    (default STRICT_BUILDS). Returns the (cc, flags) skipped."""
    import shutil

    g = c.graph
    ref = reference.run(g, feeds)
    ins = [np.asarray(feeds[n], dtype=g.tensors[n].dtype)[None] for n in g.inputs]
    skipped = []
    for cc, flags in (STRICT_BUILDS if builds is None else builds):
        if shutil.which(cc) is None:
            skipped.append((cc, flags))
            continue
        exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                         [g.tensors[n].nbytes for n in g.outputs], cc=cc, cflags=STRICT_WARNINGS + flags)
        outs = host.run(exe, ins, c.out_specs, 1)
        for name, o in zip(g.outputs, outs):
            where = f"{what}{cc} {' '.join(flags)}: output '{name}' vs reference"
            if exact:
                assert o[0].shape == ref[name].shape and o[0].dtype == ref[name].dtype, (
                    f"{where}: {o[0].dtype}{o[0].shape} vs {ref[name].dtype}{ref[name].shape}")
                assert np.array_equal(o[0], ref[name]), (
                    f"{where}: {int((o[0] != ref[name]).sum())} elements differ")
            else:
                assert_close(o[0], ref[name], rel, where)
    return skipped


C_DTYPES = {"float": np.float32, "double": np.float64, "int8_t": np.int8, "uint8_t": np.uint8,
            "int16_t": np.int16, "uint16_t": np.uint16, "int32_t": np.int32, "uint32_t": np.uint32,
            "int64_t": np.int64, "uint64_t": np.uint64}


def header_consts(header: str) -> dict[str, tuple[str, np.ndarray]]:
    """The header's inline constant arrays, parsed from the text: {symbol:
    (C type, values)}. Both forms: one literal per element (small arrays;
    integers and the float literals Python's float() reads), and the
    union of little-endian 64-bit words with the element array."""
    import re
    out = {}
    for m in re.finditer(r"static const union \{ uint64_t w\[(\d+)\]; ([a-z0-9_]+) v\[(\d+)\]; \} "
                         r"(\w+)__u \w+ = \{ \{([^}]*)\} \};", header):
        words = [int(w, 16) for w in m.group(5).replace("\n", "").split(",") if w.strip()]
        assert len(words) == int(m.group(1)), f"{m.group(4)}: {len(words)} words, declared {m.group(1)}"
        raw = np.array(words, np.uint64).astype("<u8").tobytes()
        dt = np.dtype(C_DTYPES[m.group(2)]).newbyteorder("<")
        n = int(m.group(3))
        out[m.group(4)] = (m.group(2), np.frombuffer(raw[:n * dt.itemsize], dt).astype(dt.newbyteorder("=")))
    for m in re.finditer(r"static const ([a-z0-9_]+) (\w+)\[(\d+)\] \w+ = \{([^}]*)\};", header):
        ctype, body = m.group(1), m.group(4).replace("\n", " ")
        items = [v.strip() for v in body.split(",") if v.strip()]
        if ctype in ("float", "double"):
            vals = [float(v.rstrip("f")) for v in items]
        else:
            vals = [int(eval(v.replace("LL", ""), {})) for v in items]   # noqa: S307 ('(-2147483647 - 1)')
        out[m.group(2)] = (ctype, np.array(vals, C_DTYPES[ctype]))
    return out
