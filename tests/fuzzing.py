"""Seeded fuzzing of `cuvil-mcu gen` with hostile and careless models (issue 11).

Every case is one mutated model: structured protobuf mutations (attributes
set to extreme or meaningless values, ops swapped, nodes dropped or
duplicated, initializers with wrong dims, types or data, graph inputs with
huge or zero dimensions, opsets and IR versions out of range, hostile tensor
names, external data pointing outside the folder) or byte-level damage
(bit flips, cut, spliced, duplicated chunks) of the shared models, the
example models and small builders. `gen` runs in a forked child (imports
paid once) under setrlimit bounds on address space, CPU time and file size,
and a wall-clock limit. Each case must end one of two ways:

- exit 0, nothing on stderr, only the expected files; the header compiles
  with -std=c99 -Wall -Wextra -Werror -pedantic, runs on a seeded input and
  matches the numpy reference (bit for bit for integer outputs) and
  onnxruntime (when onnxruntime accepts the model: float outputs within
  1e-3 of max(1, |y|), int8 outputs within the base model's own distance
  from onnxruntime plus one step);
- exit 2 or 3 with exactly one stderr line "cuvil-mcu: error: ..." that is
  not an internal error, and nothing left in the output folder.

Anything else (a hang, a blow-up, a crash, an internal error, a traceback,
two lines, a leftover file, a header that does not compile, wrong numbers)
is a failure, reported with the case's seed and mutation so it can be
replayed: `python benchmarks/fuzz.py --seed S --only N`.
"""
from __future__ import annotations

import dataclasses
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "models"

INTS = [0, 1, -1, 2, 3, 5, 7, 8, 255, 256, 2 ** 15, 2 ** 16, 2 ** 20, 2 ** 24, 2 ** 30, 2 ** 31 - 1, 2 ** 31,
        2 ** 32, 2 ** 40, 2 ** 62, 2 ** 63 - 1, -2, -2 ** 31, -2 ** 62, -2 ** 63]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-45, 1e-30, 1e30, 3.4e38, -3.4e38, math.inf, -math.inf, math.nan]
HOSTILE_NAMES = ["x */ int evil_injected(void) { return 42; } /* ", 'q"uo\\te', "line\nbreak", "??=??/",
                 "\u00fcn\u00efc\u00f8d\u00e9 \u2603", "n" * 10000, "$(touch pwned)", "%s%n%x", "a b", "-", "0",
                 "model", "MODEL_IMPLEMENTATION", "\\", "\t", "#define X"]
ATTR_NAMES = ["axis", "axes", "pads", "strides", "kernel_shape", "dilations", "group", "keepdims", "perm",
              "epsilon", "alpha", "beta", "to", "mode", "auto_pad", "ceil_mode", "count_include_pad",
              "transA", "transB", "allowzero", "split", "value", "storage_order", "noop_with_empty_axes"]
OPS = ["Conv", "Relu", "Add", "Mul", "Sub", "Div", "MatMul", "Gemm", "Reshape", "Transpose", "Concat",
       "Slice", "Gather", "MaxPool", "AveragePool", "GlobalAveragePool", "Softmax", "LogSoftmax",
       "ReduceMean", "ReduceSum", "Pad", "Clip", "Sigmoid", "Tanh", "Expand", "ConstantOfShape", "Range",
       "Cast", "Where", "Equal", "Split", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size",
       "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "BatchNormalization",
       "LayerNormalization", "Pow", "Sqrt", "Exp", "Max", "Min", "LSTM", "GRU", "Erf", "HardSwish",
       "ConvInteger", "MatMulInteger", "NonZero", "TopK", "Det", "Loop", "If", "Scan", "Resize", "LRN",
       "Tile", "ScatterND", "Einsum", "NotAnOp"]
DOMAINS = ["", "ai.onnx", "com.microsoft", "ai.onnx.ml", "org.evil"]


# ---------------------------------------------------------------------------
# base models

def op_zoo(seed: int = 0) -> onnx.ModelProto:
    """A float model through the shape-computing and data-moving ops the
    shared models lack: Shape -> Gather -> Unsqueeze -> Concat -> Reshape,
    ConstantOfShape, Range, Expand, Where, Cast, Pad, pools with ceil_mode,
    Slice, Transpose, ReduceMean, Softmax, MatMul, Clip."""
    rng = np.random.default_rng(seed)
    f = np.float32
    inits = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(f) * 0.3, "b": rng.standard_normal(4).astype(f),
        "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "idx0": np.array(0, np.int64),
        "minus1": np.array([-1], np.int64), "axes0": np.array([0], np.int64),
        "starts": np.array([1], np.int64), "ends": np.array([3], np.int64), "sl_axes": np.array([1], np.int64),
        "r0": np.array(0, np.int64), "r1": np.array(4, np.int64), "r2": np.array(1, np.int64),
        "eshape": np.array([2, 1, 4], np.int64),
        "mm": rng.standard_normal((16, 5)).astype(f) * 0.2, "lo": np.array(-2, f), "hi": np.array(2, f),
        "cos_shape": np.array([1, 5], np.int64), "half": np.array(0.5, f),
    }
    n = helper.make_node
    nodes = [
        n("Pad", ["x", "pads"], ["xp"], mode="constant", name="pad"),
        n("Conv", ["xp", "w", "b"], ["c"], strides=[1, 1], name="conv"),
        n("Relu", ["c"], ["r"], name="relu"),
        n("MaxPool", ["r"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, name="maxpool"),
        n("AveragePool", ["r"], ["ap"], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1],
          count_include_pad=1, name="avgpool"),
        n("Add", ["mp", "ap"], ["s"], name="add"),
        n("Shape", ["s"], ["shp"], name="shape"),
        n("Gather", ["shp", "idx0"], ["batch"], axis=0, name="gather_batch"),
        n("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsq"),
        n("Concat", ["batch1", "minus1"], ["tshape"], axis=0, name="concat_shape"),
        n("Reshape", ["s", "tshape"], ["flat"], name="reshape"),
        n("Slice", ["flat", "starts", "ends", "sl_axes"], ["sl"], name="slice"),
        n("MatMul", ["flat", "mm"], ["m"], name="matmul"),
        n("Range", ["r0", "r1", "r2"], ["rng"], name="range"),
        n("Cast", ["rng"], ["rngf"], to=TensorProto.FLOAT, name="cast"),
        n("ConstantOfShape", ["cos_shape"], ["ones"], value=numpy_helper.from_array(np.array([1.5], f)),
          name="cos"),
        n("Add", ["m", "ones"], ["m2"], name="add_ones"),
        n("Clip", ["m2", "lo", "hi"], ["cl"], name="clip"),
        n("Greater", ["cl", "half"], ["gt"], name="greater"),
        n("Where", ["gt", "cl", "half"], ["wh"], name="where"),
        n("Softmax", ["wh"], ["sm"], axis=-1, name="softmax"),
        n("Expand", ["rngf", "eshape"], ["ex"], name="expand"),
        n("Transpose", ["ex"], ["tr"], perm=[2, 0, 1], name="transpose"),
        n("ReduceMean", ["tr"], ["rm"], axes=[1], keepdims=0, name="reducemean"),
    ]
    g = helper.make_graph(nodes, "zoo", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("sm", TensorProto.FLOAT, [1, 5]),
                           helper.make_tensor_value_info("rm", TensorProto.FLOAT, [4, 1]),
                           helper.make_tensor_value_info("sl", TensorProto.FLOAT, [1, 2])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def base_models(full: bool = False) -> dict[str, bytes]:
    """name -> serialized model. The suite uses the small ones; full adds
    the larger shared models and the example MobileNetV2 and ShuffleNet."""
    sys.path.insert(0, str(ROOT / "tests"))
    import models
    out: dict[str, bytes] = {}
    small = ["hello_world", "micro_speech", "kws_dscnn"]
    big = ["ad_fc_autoencoder", "ic_resnet8", "vww_mobilenet_v1_025", "person_detect"]
    for name in small + (big if full else []):
        for kind in ("int8", "f32"):
            p = SHARED / name / f"model_{kind}.onnx"
            if p.exists():
                out[f"{name}_{kind}"] = p.read_bytes()
    ex = ROOT / "examples"
    for name in ["kws_float", "unet_float", "unet_int8"] + (["mobilenet_v2_035_96_int8", "shufflenet_g4_int8"]
                                                             if full else []):
        if (ex / f"{name}.onnx").exists():
            out[name] = (ex / f"{name}.onnx").read_bytes()
    for name, build in models.ALL.items():
        out[name] = build().SerializeToString()
    out["zoo"] = op_zoo().SerializeToString()
    return out


# ---------------------------------------------------------------------------
# mutations: each takes (rng, model) and returns a description, or None
# when it does not apply to this model

def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _tensor_names(m) -> list[str]:
    g = m.graph
    names = {vi.name for vi in g.input} | {vi.name for vi in g.output} | {t.name for t in g.initializer}
    for n in g.node:
        names.update(x for x in list(n.input) + list(n.output) if x)
    return sorted(names)


def _node_with(rng, m, pred):
    cands = [n for n in m.graph.node if pred(n)]
    return _pick(rng, cands) if cands else None


def mut_attr_int(rng, m):
    n = _node_with(rng, m, lambda n: any(a.type in (AttributeProto.INT, AttributeProto.INTS) for a in n.attribute))
    if n is None:
        return None
    a = _pick(rng, [a for a in n.attribute if a.type in (AttributeProto.INT, AttributeProto.INTS)])
    near = rng.random() < 0.5    # a plausible neighbour of the value, or an extreme

    def value(old):
        return int(old + _pick(rng, [-2, -1, 1, 2])) if near else _pick(rng, INTS)
    if a.type == AttributeProto.INT:
        a.i = v = value(a.i)
    elif len(a.ints) and rng.random() < 0.7:
        i = int(rng.integers(len(a.ints)))
        a.ints[i] = v = value(a.ints[i])
    elif rng.random() < 0.5 and len(a.ints):
        del a.ints[-1]
        v = "one fewer"
    else:
        a.ints.append(v := value(1))
    return f"{n.op_type} '{n.name}' attribute {a.name} gets {v}"


def mut_attr_float(rng, m):
    n = _node_with(rng, m, lambda n: any(a.type == AttributeProto.FLOAT for a in n.attribute))
    if n is None:
        return None
    a = _pick(rng, [a for a in n.attribute if a.type == AttributeProto.FLOAT])
    a.f = _pick(rng, FLOATS)
    return f"{n.op_type} '{n.name}' attribute {a.name} = {a.f}"


def mut_attr_drop(rng, m):
    n = _node_with(rng, m, lambda n: len(n.attribute) > 0)
    if n is None:
        return None
    i = int(rng.integers(len(n.attribute)))
    name = n.attribute[i].name
    del n.attribute[i]
    return f"{n.op_type} '{n.name}' loses attribute {name}"


def mut_attr_add(rng, m):
    if not m.graph.node:
        return None
    n = _pick(rng, list(m.graph.node))
    name = _pick(rng, ATTR_NAMES)
    for i, a in enumerate(n.attribute):
        if a.name == name:
            del n.attribute[i]
            break
    r = rng.random()
    if r < 0.35:
        val = _pick(rng, INTS)
    elif r < 0.6:
        val = [_pick(rng, INTS) for _ in range(int(rng.integers(0, 9)))]
    elif r < 0.75:
        val = _pick(rng, FLOATS)
    elif r < 0.9:
        val = _pick(rng, ["SAME_UPPER", "VALID", "NOTSET", "reflect", "edge", "constant", "bogus", ""])
    else:
        val = numpy_helper.from_array(rng.standard_normal(int(rng.integers(0, 4))).astype(np.float32))
    if isinstance(val, list) and not val:
        n.attribute.append(helper.make_attribute(name, [], attr_type=AttributeProto.INTS))
    else:
        n.attribute.append(helper.make_attribute(name, val))
    return f"{n.op_type} '{n.name}' gets attribute {name}={str(val)[:40]}"


def mut_op_type(rng, m):
    if not m.graph.node:
        return None
    n = _pick(rng, list(m.graph.node))
    old = n.op_type
    n.op_type = _pick(rng, OPS)
    return f"node '{n.name}' {old} -> {n.op_type}"


def mut_domain(rng, m):
    if not m.graph.node:
        return None
    n = _pick(rng, list(m.graph.node))
    n.domain = _pick(rng, DOMAINS)
    return f"node '{n.name}' domain '{n.domain}'"


def mut_node_delete(rng, m):
    if not m.graph.node:
        return None
    i = int(rng.integers(len(m.graph.node)))
    name = m.graph.node[i].name
    del m.graph.node[i]
    return f"node '{name}' deleted"


def mut_node_dup(rng, m):
    if not m.graph.node:
        return None
    src = _pick(rng, list(m.graph.node))
    new = m.graph.node.add()
    new.CopyFrom(src)
    if rng.random() < 0.5:
        del new.output[:]
        new.output.extend(f"{o}_dup" for o in src.output)
        new.name = src.name + "_dup" if rng.random() < 0.5 else src.name
    return f"node '{src.name}' duplicated"


def mut_node_io(rng, m):
    if not m.graph.node:
        return None
    n = _pick(rng, list(m.graph.node))
    names = _tensor_names(m)
    r = rng.random()
    if r < 0.25 and len(n.input) > 1:
        perm = rng.permutation(len(n.input))
        ins = [n.input[int(i)] for i in perm]
        del n.input[:]
        n.input.extend(ins)
        return f"node '{n.name}' inputs permuted"
    if r < 0.45 and n.input:
        del n.input[-1]
        return f"node '{n.name}' loses its last input"
    if r < 0.7:
        n.input.append(_pick(rng, names + ["", "nowhere"]))
        return f"node '{n.name}' gets input {n.input[-1][:30]!r}"
    if r < 0.85 and n.input:
        n.input[int(rng.integers(len(n.input)))] = _pick(rng, names + ["", "nowhere"])
        return f"node '{n.name}' input replaced"
    n.output.append(_pick(rng, ["extra_out", "", *names]))
    return f"node '{n.name}' gets output {n.output[-1][:30]!r}"


def mut_node_order(rng, m):
    nodes = list(m.graph.node)
    if len(nodes) < 2:
        return None
    order = rng.permutation(len(nodes)) if rng.random() < 0.5 else np.arange(len(nodes))[::-1]
    copies = [onnx.NodeProto.FromString(nodes[int(i)].SerializeToString()) for i in order]
    del m.graph.node[:]
    m.graph.node.extend(copies)
    return "nodes reordered"


def mut_node_name(rng, m):
    if len(m.graph.node) < 2:
        return None
    a, b = rng.choice(len(m.graph.node), 2, replace=False)
    if rng.random() < 0.5:
        m.graph.node[int(a)].name = m.graph.node[int(b)].name
        return "two nodes share a name"
    m.graph.node[int(a)].name = _pick(rng, HOSTILE_NAMES)
    return "hostile node name"


def _init(rng, m, pred=lambda t: True):
    cands = [t for t in m.graph.initializer if pred(t)]
    return _pick(rng, cands) if cands else None


def mut_init_dims(rng, m):
    t = _init(rng, m)
    if t is None:
        return None
    r = rng.random()
    dims = list(t.dims)
    if r < 0.4 and dims:
        dims[int(rng.integers(len(dims)))] = _pick(rng, [0, 1, 2, dims[0] + 1, 2 ** 31, 2 ** 40, -1])
    elif r < 0.7:
        dims.append(_pick(rng, [1, 2, 0]))
    elif dims:
        dims.pop()
    del t.dims[:]
    t.dims.extend(dims)
    return f"initializer '{t.name}' dims {dims}"


def mut_init_dtype(rng, m):
    t = _init(rng, m)
    if t is None:
        return None
    t.data_type = int(_pick(rng, list(range(0, 29)) + [99, -1]))
    return f"initializer '{t.name}' data_type {t.data_type}"


def mut_init_values(rng, m):
    """Values inside the data: shapes, axes, pads and indices to extremes,
    weights to NaN/Inf/huge, scales to 0 or negative."""
    t = _init(rng, m, lambda t: t.data_type in (TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32,
                                                TensorProto.INT8, TensorProto.UINT8) and 0 < np.prod(t.dims) <= 1 << 20)
    if t is None:
        return None
    a = numpy_helper.to_array(t).copy()
    flat = a.reshape(-1)
    k = int(rng.integers(1, min(4, flat.size) + 1))
    idx = rng.choice(flat.size, k, replace=False)
    near = rng.random() < 0.5    # plausible neighbours, or extremes
    if a.dtype == np.float32:
        flat[idx] = [flat[i] * _pick(rng, [-1.0, 0.5, 2.0, 10.0]) if near else _pick(rng, FLOATS) for i in idx]
    else:
        info = np.iinfo(a.dtype)
        flat[idx] = [max(info.min, min(info.max, int(flat[i]) + _pick(rng, [-2, -1, 1, 2]) if near
                                       else _pick(rng, INTS))) for i in idx]
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    return f"initializer '{t.name}' values at {idx.tolist()} -> {flat[idx].tolist()}"


def mut_init_raw(rng, m):
    t = _init(rng, m)
    if t is None:
        return None
    r = rng.random()
    if t.HasField("raw_data") and r < 0.4:
        cut = int(rng.integers(0, len(t.raw_data) + 1))
        t.raw_data = t.raw_data[:cut]
        return f"initializer '{t.name}' raw_data cut to {cut} B"
    if t.HasField("raw_data") and r < 0.6:
        t.raw_data = t.raw_data + bytes(int(rng.integers(1, 64)))
        return f"initializer '{t.name}' raw_data extended"
    if r < 0.8:
        t.ClearField("raw_data")
        t.int32_data.extend([15360] * max(1, int(np.prod(t.dims)) if t.dims else 1))
        return f"initializer '{t.name}' values moved to int32_data"
    t.ClearField("raw_data")
    t.float_data.extend([1.0] * int(rng.integers(0, 9)))
    return f"initializer '{t.name}' float_data"


def mut_init_external(rng, m):
    t = _init(rng, m)
    if t is None:
        return None
    loc = _pick(rng, ["../../../../etc/passwd", "/etc/passwd", "missing.bin", "..", ".", "", "/dev/zero",
                      "/proc/self/mem", "model.onnx"])
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    e = t.external_data.add()
    e.key, e.value = "location", loc
    if rng.random() < 0.5:
        e = t.external_data.add()
        e.key, e.value = _pick(rng, ["offset", "length"]), str(_pick(rng, INTS))
    return f"initializer '{t.name}' external data at {loc!r}"


def mut_input_dims(rng, m):
    ins = [vi for vi in m.graph.input if vi.type.HasField("tensor_type")]
    if not ins:
        return None
    vi = _pick(rng, ins)
    dims = vi.type.tensor_type.shape.dim
    r = rng.random()
    if r < 0.6 and len(dims):
        d = dims[int(rng.integers(len(dims)))]
        if rng.random() < 0.8:
            d.dim_value = _pick(rng, [0, 1, 2, 3, 2 ** 16, 2 ** 20, 2 ** 31 - 1, 2 ** 31, 2 ** 40, 2 ** 62, -1])
        else:
            d.dim_param = _pick(rng, ["N", "", "batch"])
    elif r < 0.8:
        dims.add().dim_value = _pick(rng, [1, 2, 7])
    elif r < 0.9 and len(dims):
        del dims[-1]
    else:
        vi.type.tensor_type.elem_type = int(_pick(rng, list(range(0, 17)) + [99]))
    return f"input '{vi.name[:30]}' type changed"


def mut_graph_io(rng, m):
    g = m.graph
    r = rng.random()
    if r < 0.2:
        del g.output[:]
        return "no graph outputs"
    if r < 0.4 and len(g.input):
        del g.input[int(rng.integers(len(g.input)))]
        return "a graph input removed"
    if r < 0.6:
        name = _pick(rng, _tensor_names(m) + ["nowhere"])
        g.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
        return f"extra graph output {name[:30]!r}"
    if r < 0.8 and len(g.output):
        g.output.append(g.output[0])
        return "duplicate graph output"
    g.input.append(helper.make_tensor_value_info(_pick(rng, ["extra", *_tensor_names(m)]), TensorProto.FLOAT,
                                                 [1, 2]))
    return "extra graph input"


def mut_opset(rng, m):
    if rng.random() < 0.8:
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = int(_pick(rng, [0, 1, 6, 7, 9, 10, 11, 12, 13, 17, 18, 21, 23, 99, -1]))
                return f"opset {o.version}"
    m.ir_version = int(_pick(rng, [0, 1, 2, 3, 4, 7, 10, 11, 12, 99]))
    return f"ir_version {m.ir_version}"


def mut_rename(rng, m):
    names = _tensor_names(m)
    if not names:
        return None
    old, new = _pick(rng, names), _pick(rng, HOSTILE_NAMES)
    g = m.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.name == old:
            vi.name = new
    for t in g.initializer:
        if t.name == old:
            t.name = new
    for n in g.node:
        for seq in (n.input, n.output):
            for i, x in enumerate(seq):
                if x == old:
                    seq[i] = new
    return f"tensor {old[:30]!r} renamed {new[:30]!r}"


def mut_constant_node(rng, m):
    """A Constant node (odd values, odd shapes) takes over a node input."""
    n = _node_with(rng, m, lambda n: len(n.input) > 0)
    if n is None:
        return None
    kind = rng.random()
    if kind < 0.5:
        v = np.array([_pick(rng, INTS) for _ in range(int(rng.integers(0, 5)))], np.int64)
    else:
        v = np.full(tuple(int(rng.integers(0, 4)) for _ in range(int(rng.integers(0, 4)))),
                    _pick(rng, FLOATS), np.float32)
    out = f"const_{int(rng.integers(1 << 30))}"
    m.graph.node.insert(0, helper.make_node("Constant", [], [out], value=numpy_helper.from_array(v)))
    n.input[int(rng.integers(len(n.input)))] = out
    return f"node '{n.name}' input <- Constant {v.dtype}{list(v.shape)}"


# weighted towards mutations that leave a model onnx's checker accepts
# (they reach cuvil's own code); the others mostly test the first line
STRUCTURED = [mut_attr_int] * 4 + [mut_init_values] * 4 + [mut_input_dims] * 2 + [mut_attr_add] * 2 + [
    mut_attr_float, mut_attr_drop, mut_op_type, mut_domain, mut_node_delete, mut_node_dup, mut_node_io,
    mut_node_io, mut_node_name, mut_init_dims, mut_init_dtype, mut_init_raw, mut_graph_io, mut_opset,
    mut_rename, mut_rename, mut_constant_node, mut_constant_node]
RARE = [mut_node_order, mut_init_external]    # one case in 20


def byte_mutation(rng, data: bytes, other: bytes) -> tuple[bytes, str]:
    b = bytearray(data)
    r = rng.random()
    if r < 0.35:
        k = int(rng.integers(1, 9))
        for _ in range(k):
            i = int(rng.integers(len(b)))
            b[i] ^= 1 << int(rng.integers(8))
        return bytes(b), f"{k} bit flip(s)"
    if r < 0.5:
        i = int(rng.integers(len(b)))
        n = int(rng.integers(1, 17))
        b[i:i + n] = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        return bytes(b), f"{n} random bytes at {i}"
    if r < 0.6:
        cut = int(rng.integers(1, len(b)))
        return bytes(b[:cut]), f"cut at {cut}"
    if r < 0.7:
        i, j = sorted(int(x) for x in rng.integers(0, len(b), 2))
        return bytes(b[:j] + b[i:]), f"bytes [{i}, {j}) duplicated"
    if r < 0.8:
        i, j = sorted(int(x) for x in rng.integers(0, len(b), 2))
        return bytes(b[:i] + b[j:]), f"bytes [{i}, {j}) removed"
    if r < 0.9:
        i = int(rng.integers(len(b)))
        v = _pick(rng, [0x00, 0xFF, 0x7F, 0x80])
        b[i] = v
        return bytes(b), f"byte {i} = {v:#x}"
    i, j = int(rng.integers(len(b))), int(rng.integers(len(other)))
    return bytes(b[:i] + other[j:]), f"spliced at {i} with another model from {j}"


@dataclasses.dataclass
class Case:
    index: int
    base: str
    board: str
    mutations: list[str]
    data: bytes
    requant: str = "fixed"     # fixed: TFLM's arithmetic; float: onnxruntime's (then int8 is compared to it)


def make_case(seed: int, index: int, bases: dict[str, bytes]) -> Case:
    rng = np.random.default_rng([seed, index])
    names = sorted(bases)
    base = _pick(rng, names)
    board = _pick(rng, ["host"] * 6 + ["qemu-mps2-an386", "qemu-mps3-an547"])
    requant = _pick(rng, ["fixed", "float"])
    data = bases[base]
    muts = []
    if rng.random() < 0.3:
        for _ in range(int(rng.integers(1, 3))):
            data, what = byte_mutation(rng, data, bases[_pick(rng, names)])
            muts.append(what)
    else:
        m = onnx.ModelProto.FromString(data)
        for _ in range(int(rng.integers(1, 4))):
            for _ in range(10):
                try:
                    what = _pick(rng, RARE if rng.random() < 0.05 else STRUCTURED)(rng, m)
                except Exception:   # an earlier mutation broke what this one reads (e.g. external data)
                    what = None
                if what:
                    muts.append(what)
                    break
        data = m.SerializeToString()
    return Case(index, base, board, muts, data, requant)


# ---------------------------------------------------------------------------
# running gen in a bounded child

@dataclasses.dataclass
class Outcome:
    case: Case
    kind: str            # ok | error | failure kinds (hang, blowup, crash, internal, ...)
    detail: str = ""
    seconds: float = 0.0
    rss_mb: float = 0.0
    checked_ort: bool = False

    @property
    def failed(self) -> bool:
        return self.kind not in ("ok", "error")

    def line(self, seed: int) -> str:
        return (f"case {self.case.index} (seed {seed}, base {self.case.base}, board {self.case.board}, "
                f"{'; '.join(self.case.mutations)[:300]}): {self.kind}: {self.detail[:600]}")


def _vsize() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _bounded_child(fn, timeout: float, mem: int, fsize: int, out: Path, err: Path):
    """Run fn() in a forked child with stdout/stderr to files, address space
    `mem` bytes above the current one, CPU `timeout` s, files up to `fsize`
    bytes. Returns (exit code, signal, timed out, seconds, max RSS in MB)."""
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.monotonic()
    base = _vsize()
    pid = os.fork()
    if pid == 0:   # the child: never returns
        code = 99
        try:
            resource.setrlimit(resource.RLIMIT_AS, (base + mem, base + mem))
            cpu = int(timeout) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            fo = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            fe = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fo, 1)
            os.dup2(fe, 2)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            code = fn()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            try:
                traceback.print_exc()
                sys.stderr.write("\nESCAPED EXCEPTION\n")
            except BaseException:
                pass
            code = 98
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:
                pass
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 97)
    deadline = t0 + timeout
    while True:
        wpid, status, ru = os.wait4(pid, os.WNOHANG)
        if wpid:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, ru = os.wait4(pid, 0)
            return None, signal.SIGKILL, True, time.monotonic() - t0, ru.ru_maxrss / 1024
        time.sleep(0.002)
    secs = time.monotonic() - t0
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status), False, secs, ru.ru_maxrss / 1024
    return os.WEXITSTATUS(status), None, False, secs, ru.ru_maxrss / 1024


def files_in(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*")) if d.exists() else []


EXPECTED_FILES = {"host": {"model.h", ".cuvil-mcu-files"}}   # the header and gen's manifest (outputs.py)
STRICT = ["-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-pedantic"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"]
MAX_RUN_ARENA = 256 << 20


class Fuzzer:
    """Runs cases one by one; `outcomes` holds the results (`summary` counts them)."""

    def __init__(self, seed: int, work: Path, timeout: float = 60.0, mem: int = 3 << 30,
                 sanitize: bool = False, full: bool = False, ort: bool = True):
        from cuvil_mcu import cli, compiler, ops, reference  # noqa: F401  (imported once, before the forks)
        ops.registry()
        self.seed, self.work, self.timeout, self.mem = seed, work, timeout, mem
        self.sanitize, self.ort = sanitize, ort
        self.bases = base_models(full)
        self.outcomes: list[Outcome] = []
        self.ort_bounds: dict[str, int] = {}
        if ort:
            import onnxruntime  # noqa: F401  (no session before forking)

    def case(self, index: int) -> Case:
        return make_case(self.seed, index, self.bases)

    def run(self, index: int) -> Outcome:
        case = self.case(index)
        d = Path(tempfile.mkdtemp(prefix=f"case{index}_", dir=self.work))
        model = d / "model.onnx"
        model.write_bytes(case.data)
        out = d / "out"
        try:
            o = self._check(case, model, out, d)
        except Exception as e:   # a failure of the harness itself is reported as one
            o = Outcome(case, "harness", f"{type(e).__name__}: {e}")
        self.outcomes.append(o)
        if not o.failed:
            _rmtree(d)
            case.data = b""    # (the parent's memory is every child's: keep it flat)
        return o

    def _check(self, case: Case, model: Path, out: Path, d: Path) -> Outcome:
        argv = ["gen", str(model), "-o", str(out), "--no-cache", "--board", case.board, "--requant", case.requant]
        rc, sig, hung, secs, rss = _bounded_child(lambda: _gen_child(argv, d / "compiled.pkl"), self.timeout,
                                                  self.mem, 1 << 30, d / "stdout", d / "stderr")
        stderr = (d / "stderr").read_text(errors="replace")
        o = Outcome(case, "", seconds=secs, rss_mb=rss)
        if hung or sig in (signal.SIGXCPU,):
            o.kind, o.detail = "hang", f"over {self.timeout:.0f} s"
        elif "MemoryError" in stderr or sig == signal.SIGKILL:
            o.kind, o.detail = "blowup", stderr.strip()[-400:] or f"signal {sig}"
        elif sig is not None:
            o.kind, o.detail = "crash", f"signal {sig}; {stderr.strip()[-400:]}"
        elif "internal error" in stderr or "Traceback" in stderr or rc in (70, 97, 98, 99):
            o.kind, o.detail = "internal", stderr.strip()[-800:]
        elif rc != 0:
            lines = stderr.strip().splitlines()
            left = files_in(out)
            if rc not in (2, 3):
                o.kind, o.detail = "exit", f"exit {rc}: {stderr.strip()[:300]}"
            elif len(lines) != 1 or not lines[0].startswith("cuvil-mcu: error: "):
                o.kind, o.detail = "multiline", f"{len(lines)} stderr lines: {stderr[:600]!r}"
            elif left:
                o.kind, o.detail = "leftover", f"{left} after: {lines[0]}"
            else:
                o.kind, o.detail = "error", lines[0]
        elif stderr.strip():
            o.kind, o.detail = "noisy", stderr.strip()[:400]
        else:
            self._success(o, model, out, d / "compiled.pkl")
        return o

    def _success(self, o: Outcome, model: Path, out: Path, stash: Path) -> None:
        import pickle
        from cuvil_mcu import reference
        from cuvil_mcu.sim import host
        header = out / "model.h"
        if not header.exists():
            o.kind, o.detail = "missing", f"exit 0 but {files_in(out)}"
            return
        if o.case.board in EXPECTED_FILES and set(files_in(out)) != EXPECTED_FILES[o.case.board]:
            o.kind, o.detail = "files", f"{files_in(out)}"
            return
        with open(stash, "rb") as f:
            g, arena, prefix, out_specs = pickle.load(f)
        text = header.read_text()
        rng = np.random.default_rng([self.seed, o.case.index, 1])
        feeds = {}
        for name in g.inputs:
            t = g.tensors[name]
            if t.dtype.startswith("float"):
                feeds[name] = rng.standard_normal(t.shape).astype(t.dtype)
            elif t.dtype == "bool":
                feeds[name] = rng.integers(0, 2, t.shape).astype(bool)
            else:
                info = np.iinfo(t.dtype)
                feeds[name] = rng.integers(max(info.min, -128), min(info.max, 127) + 1, t.shape).astype(t.dtype)
        cflags = STRICT + (SANITIZE if self.sanitize else [])
        try:
            exe = host.build(text, prefix, [g.tensors[n].nbytes for n in g.inputs],
                             [g.tensors[n].nbytes for n in g.outputs], cflags=cflags)
        except Exception as e:
            o.kind, o.detail = "compile", str(e)[-1500:]
            return
        if arena > MAX_RUN_ARENA:
            o.kind, o.detail = "ok", f"compiled; not run (arena {arena:,} B)"
            return
        try:
            got = _run_exe(exe, [feeds[n] for n in g.inputs], out_specs, self.timeout, self.sanitize)
        except Exception as e:
            o.kind, o.detail = "run", str(e)[-800:]
            return
        values = reference.run(g, feeds, all_tensors=True)
        ref = {n: values[n] for n in g.outputs}
        # Degenerate numbers: a non-finite or huge float value anywhere (a
        # weight set to inf, a clamp to -3e38), or a tiny one among the
        # constants (a scale of 1e-38). Then a float result depends on the
        # order of operations (float64 sums in the reference, float32 in the
        # kernels; a padded tap inf * 0 in the reference, skipped by the
        # kernel) and onnxruntime's conversions of inf/NaN are its own: only
        # integer outputs are compared, with the reference, exactly.
        with np.errstate(all="ignore"):
            self.degenerate = any(
                np.asarray(v).dtype.kind == "f" and np.asarray(v).size
                and not np.all(np.abs(np.asarray(v, np.float64)) < 1e30) for v in values.values()) or any(
                t.is_const and t.data.dtype.kind == "f" and np.any((t.data != 0) & (np.abs(t.data) < 1e-30))
                for t in g.tensors.values())
        for name, y in zip(g.outputs, got):
            if self.degenerate and y.dtype.kind == "f":
                continue
            bad = _compare(y, np.asarray(ref[name]), 1e-4)
            if bad:
                o.kind, o.detail = "mismatch", f"C vs reference, output '{name[:40]}': {bad}"
                return
        o.kind, o.detail = "ok", "matches the reference"
        if self.ort:
            self._vs_ort(o, model, g, feeds, got)

    def _vs_ort(self, o: Outcome, model: Path, g, feeds, got) -> None:
        d = model.parent

        def session():
            import onnxruntime as ort
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            so.intra_op_num_threads = so.inter_op_num_threads = 1
            s = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
            res = s.run(None, {k: v for k, v in feeds.items()})
            np.savez(d / "ort.npz", *res)
            return 0

        rc, sig, hung, _, _ = _bounded_child(session, self.timeout, self.mem, 1 << 30, d / "ort.out", d / "ort.err")
        if rc != 0:
            o.detail += "; onnxruntime refuses the model"
            return
        with np.load(d / "ort.npz") as z:
            theirs = [z[f"arr_{i}"] for i in range(len(z.files))]
        if len(theirs) != len(got):
            o.kind, o.detail = "ort", f"onnxruntime gives {len(theirs)} outputs, we give {len(got)}"
            return
        if _quantized(g) and o.case.requant != "float":
            o.detail += "; a quantized model in fixed-point requantization (not onnxruntime's arithmetic)"
            return
        if self.degenerate:
            o.detail += "; degenerate values (inf, NaN, beyond 1e30): not compared with onnxruntime"
            return
        bound = self.ort_bound(o.case.base)
        for name, y, t in zip(g.outputs, got, theirs):
            t = np.asarray(t).reshape(y.shape) if np.asarray(t).size == y.size else np.asarray(t)
            lsb = _lsb(g, name)
            if lsb is None:
                bad = _compare(y, t, 1e-3)
            elif y.dtype.kind in "iu":
                bad = _compare(y, t, 0, int_tol=bound)
            else:
                bad = _compare(y, t, 0, abs_tol=(bound + 0.01) * lsb)
            if bad:
                o.kind, o.detail = "ort", f"C vs onnxruntime, output '{name[:40]}': {bad}"
                return
        o.checked_ort = True
        o.detail += " and onnxruntime"

    def ort_bound(self, base: str) -> int:
        """Outputs of quantized models (float requantization), in output
        steps: the unmutated base model's own largest distance from
        onnxruntime (which runs some ops, e.g. Softmax, in float between
        dequantize and quantize), plus one step."""
        if base not in self.ort_bounds:
            self.ort_bounds[base] = 1 + _base_distance(self.bases[base], self.work, self.seed)
        return self.ort_bounds[base]


def _quantized(g) -> bool:
    return any(t.dtype in ("int8", "uint8") for t in g.tensors.values())


def _lsb(g, name: str) -> float | None:
    """One output step: 1 for an integer output, the scale of the
    DequantizeLinear that makes a float output; None: a float computation."""
    if g.tensors[name].dtype in ("int8", "uint8", "int32"):
        return 1.0
    p = g.producers().get(name)
    if p is not None and p.op_type == "DequantizeLinear" and g.tensors[p.inputs[1]].is_const:
        return float(np.max(g.tensors[p.inputs[1]].data))
    return None


def _gen_child(argv: list[str], stash: Path) -> int:
    """`cuvil-mcu gen` in the forked child; on success the compiled graph (what
    the header was rendered from) is pickled for the parent's checks."""
    import pickle
    from cuvil_mcu import cli, compiler
    real, got = compiler.compile_model, []

    def keep(*a, **k):
        c = real(*a, **k)
        got.append(c)
        return c

    compiler.compile_model = keep
    rc = cli.main(argv)
    if rc == 0 and got:
        c = got[-1]
        with open(stash, "wb") as f:
            pickle.dump((c.graph, c.plan.arena_size, c.prefix, c.out_specs), f)
    return rc


def _base_distance(data: bytes, work: Path, seed: int) -> int:
    from cuvil_mcu.compiler import compile_model
    from cuvil_mcu.sim import host
    m = onnx.ModelProto.FromString(data)
    c = compile_model(m, requant="float")
    g = c.graph
    if not _quantized(g):
        return 0
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in g.inputs:
        t = g.tensors[name]
        feeds[name] = (rng.standard_normal(t.shape).astype(t.dtype) if t.dtype.startswith("float")
                       else rng.integers(-128 if t.dtype == "int8" else 0, 128 if t.dtype == "int8" else 256,
                                         t.shape).astype(t.dtype))
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    got = _run_exe(exe, [feeds[n] for n in g.inputs], c.out_specs, 60)
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    steps = [0]
    for name, a, b in zip(g.outputs, got, theirs):
        lsb = _lsb(g, name)
        if lsb:
            steps.append(int(np.ceil(np.abs(a.astype(np.float64) - np.asarray(b, np.float64).reshape(a.shape)).max()
                                     / lsb - 1e-6)))
    return max(steps)


def _run_exe(exe: Path, inputs: list[np.ndarray], out_specs, timeout: float,
             sanitize: bool = False) -> list[np.ndarray]:
    """The host harness on one sample, under a time and (without ASan, which
    reserves terabytes of address space) a memory bound."""
    def limit():
        if not sanitize:
            resource.setrlimit(resource.RLIMIT_AS, (2 * MAX_RUN_ARENA + (1 << 30),) * 2)

    with tempfile.TemporaryDirectory() as tmp:
        fin, fout = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        fin.write_bytes(b"".join(np.ascontiguousarray(x).tobytes() for x in inputs))
        r = subprocess.run([str(exe), str(fin), str(fout), "1"], capture_output=True, text=True, timeout=timeout,
                           preexec_fn=limit)
        if r.returncode != 0:
            raise RuntimeError(f"exit {r.returncode}: {r.stderr.strip()[-1500:]}")
        raw = fout.read_bytes()
    outs, pos = [], 0
    for shape, dtype in out_specs:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        outs.append(np.frombuffer(raw[pos:pos + n], dtype=dtype).reshape(shape))
        pos += n
    return outs


def _compare(got: np.ndarray, want: np.ndarray, rel: float, int_tol: int = 0, abs_tol: float = 0.0) -> str:
    """'' when equal: integers within int_tol, floats with the same NaN and
    infinity positions and within abs_tol + rel * max(1, max|want|) elsewhere."""
    if got.shape != want.shape:
        return f"shape {list(got.shape)} vs {list(want.shape)}"
    if got.dtype.kind in "iub" or want.dtype.kind in "iub":
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        if diff.size and diff.max() > int_tol:
            i = int(np.argmax(diff))
            return f"max diff {diff.max()} > {int_tol} at {i}: {got.reshape(-1)[i]} vs {want.reshape(-1)[i]}"
        return ""
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        i = int(np.argmax(np.isnan(g) != np.isnan(w)))
        return f"NaN at {i}: {g.reshape(-1)[i]} vs {w.reshape(-1)[i]}"
    fin = np.isfinite(w)
    inf = np.isinf(w)
    if not np.array_equal(g[inf], w[inf]):
        i = int(np.flatnonzero(inf)[np.argmax(g[inf] != w[inf])])
        return f"infinity at {i}: {g.reshape(-1)[i]} vs {w.reshape(-1)[i]}"
    if fin.any():
        scale = max(1.0, float(np.abs(w[fin]).max()))
        err = np.abs(np.where(fin, g - w, 0))
        err = np.where(np.isnan(err), np.inf, err)
        if err.max() > abs_tol + rel * scale:
            i = int(np.argmax(err))
            return (f"max error {err.max():.3g} > {abs_tol + rel * scale:.3g} at {i}: {g.reshape(-1)[i]!r} vs "
                    f"{w.reshape(-1)[i]!r}")
    return ""


def _rmtree(d: Path) -> None:
    import shutil
    shutil.rmtree(d, ignore_errors=True)


def summary(outcomes: list[Outcome]) -> dict:
    from collections import Counter
    kinds = Counter(o.kind for o in outcomes)
    return {"cases": len(outcomes), "clean_errors": kinds.get("error", 0), "successes": kinds.get("ok", 0),
            "checked_vs_onnxruntime": sum(o.checked_ort for o in outcomes),
            "failures": {k: v for k, v in kinds.items() if k not in ("ok", "error")},
            "max_seconds": round(max((o.seconds for o in outcomes), default=0), 2),
            "max_rss_mb": round(max((o.rss_mb for o in outcomes), default=0), 1)}
