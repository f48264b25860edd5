"""ShuffleNet (v1, 4 groups, width 0.5: the graph the `onnx` package ships as
light_shufflenet.onnx) with seeded random weights, quantized to int8 QDQ:
the network the grouped-convolution kernels and the channel-shuffle fold
are measured on (issue #13, item 3).

    python examples/make_shufflenet.py     # -> examples/shufflenet_g4_int8.onnx

From onnx/backend/test/data/light/light_shufflenet.onnx (224x224x3, 49
Conv, 16 channel shuffles Reshape [1, 4, C/4, H, W] -> Transpose perm [0, 2,
1, 3, 4] -> Reshape [1, C, H, W]) with three changes:
- every weight is seeded random (the file's weights are 0.02 everywhere,
  from ConstantOfShape): He-normal convolutions, BatchNormalization scale
  U(0.5, 1.5) and shift N(0, 0.25), its mean and variance measured by
  onnxruntime on 4 seeded random images, layer after layer (so each layer's
  output is normalised as a trained network's is);
- Sum (two inputs) is written as Add;
- the 1000-class classifier becomes 10 classes (544 x 10), so the file stays
  small; it is 0.4% of the MACs.
Quantized with onnxruntime's quantize_static (QDQ, per-channel int8 weights,
int8 activations, MinMax on 16 seeded random images). The numbers are
meaningless as a classifier; shapes, groups and quantization are those of the
real network.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "shufflenet_g4_int8.onnx"
F32 = Path(tempfile.mkdtemp()) / "shufflenet_g4_f32.onnx"
CLASSES = 10
SIZE = 224


def source_model():
    import onnx
    return onnx.load(str(Path(onnx.__file__).parent / "backend/test/data/light/light_shufflenet.onnx"))


def _seeded(m, rng):
    """The light graph with every weight a seeded random initializer, BN mean
    0 / variance 1 for now, Sum -> Add, a CLASSES-way classifier."""
    import onnx
    from onnx import helper, numpy_helper

    g = m.graph
    shapes = {}
    for n in g.node:
        if n.op_type == "ConstantOfShape":
            shapes[n.output[0]] = n.input[0]
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}

    def shape_of(name):
        if name in shapes:
            return tuple(int(v) for v in inits[shapes[name]])
        return inits[name].shape

    new = {}
    for n in g.node:
        if n.op_type == "Conv":
            s = shape_of(n.input[1])
            fan_in = int(np.prod(s[1:]))
            new[n.input[1]] = rng.normal(0, np.sqrt(2.0 / fan_in), s)
            if len(n.input) > 2:
                new[n.input[2]] = np.zeros(s[0])
        elif n.op_type == "BatchNormalization":
            c = shape_of(n.input[1])[0]
            new[n.input[1]] = rng.uniform(0.5, 1.5, c)
            new[n.input[2]] = rng.normal(0, 0.25, c)
            new[n.input[3]] = np.zeros(c)
            new[n.input[4]] = np.ones(c)
        elif n.op_type == "Gemm":
            k = shape_of(n.input[1])[1]
            new[n.input[1]] = rng.normal(0, np.sqrt(1.0 / k), (CLASSES, k))
            new[n.input[2]] = np.zeros(CLASSES)
    nodes = []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.output[0] in new:
            continue
        if n.op_type == "Sum":
            if len(n.input) != 2:
                raise SystemExit(f"Sum with {len(n.input)} inputs")
            n = helper.make_node("Add", list(n.input), list(n.output), name=n.name or n.output[0])
        nodes.append(n)
    keep = {t.name: numpy_helper.to_array(t) for t in g.initializer if t.name not in new}
    used = {i for n in nodes for i in n.input}
    keep = {k: v for k, v in keep.items() if k in used}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in new.items()] + \
            [numpy_helper.from_array(v, k) for k, v in keep.items()]
    x = g.input[0]
    y = helper.make_tensor_value_info(g.output[0].name, onnx.TensorProto.FLOAT, [1, CLASSES])
    graph = helper.make_graph(nodes, "shufflenet_g4", [x], [y], inits)
    out = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="make_shufflenet")
    out.ir_version = 8
    onnx.checker.check_model(out)
    return out


def _bn_statistics(m, images):
    """Set each BatchNormalization's mean and variance to its input's per-channel
    statistics over `images`, in graph order (each layer sees the earlier ones
    already normalised)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    init = {t.name: i for i, t in enumerate(m.graph.initializer)}
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    for n in [n for n in m.graph.node if n.op_type == "BatchNormalization"]:
        probe = onnx.ModelProto()
        probe.CopyFrom(m)
        probe.graph.output.append(helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None))
        s = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        acts = np.concatenate([s.run([n.input[0]], {m.graph.input[0].name: im})[0] for im in images])
        mean = acts.mean(axis=(0, 2, 3))
        var = acts.var(axis=(0, 2, 3)) + 1e-3
        for name, v in ((n.input[3], mean), (n.input[4], var)):
            m.graph.initializer[init[name]].CopyFrom(numpy_helper.from_array(v.astype(np.float32), name))
    return m


def _fold_batchnorm(m):
    """Each BatchNormalization folded into the Conv before it (what a
    training framework's export or onnxruntime's quant_pre_process does)."""
    import onnx
    from onnx import helper, numpy_helper

    g = m.graph
    init = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    producer = {n.output[0]: n for n in g.node}
    drop, rename = set(), {}
    for n in g.node:
        if n.op_type != "BatchNormalization":
            continue
        conv = producer[n.input[0]]
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        s, beta, mean, var = (init[i] for i in n.input[1:5])
        k = s / np.sqrt(var + eps)
        w = init[conv.input[1]] * k.reshape(-1, 1, 1, 1)
        b = (init[conv.input[2]] if len(conv.input) > 2 else 0) - mean
        bname = conv.output[0] + "_bias"
        init[conv.input[1]] = w
        init[bname] = b * k + beta
        if len(conv.input) > 2:
            conv.input[2] = bname
        else:
            conv.input.append(bname)
        rename[n.output[0]] = conv.output[0]
        drop.add(id(n))
    nodes = [n for n in g.node if id(n) not in drop]
    for n in nodes:
        for i, v in enumerate(n.input):
            n.input[i] = rename.get(v, v)
    outs = list(g.output)
    for o in outs:
        o.name = rename.get(o.name, o.name)
    used = {i for n in nodes for i in n.input}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32 if v.dtype.kind == "f" else v.dtype), k)
             for k, v in init.items() if k in used]
    out = helper.make_model(helper.make_graph(nodes, g.name, list(g.input), outs, inits),
                            opset_imports=list(m.opset_import), producer_name=m.producer_name)
    out.ir_version = m.ir_version
    onnx.checker.check_model(out)
    return out


def main() -> None:
    import onnx
    from ort_qdq import quantize_qdq   # examples/ort_qdq.py (this folder)

    rng = np.random.default_rng(0)
    m = _seeded(source_model(), rng)
    name = m.graph.input[0].name
    stats = [rng.uniform(-1, 1, (1, 3, SIZE, SIZE)).astype(np.float32) for _ in range(4)]
    m = _fold_batchnorm(_bn_statistics(m, stats))
    onnx.save(m, str(F32))
    calib = [{name: rng.uniform(-1, 1, (1, 3, SIZE, SIZE)).astype(np.float32)} for _ in range(16)]
    quantize_qdq(F32, OUT, calib)
    q = onnx.load(str(OUT))
    onnx.checker.check_model(q)
    print(f"wrote {OUT} ({OUT.stat().st_size:,} B) and {F32} ({F32.stat().st_size:,} B)", file=sys.stderr)


if __name__ == "__main__":
    main()
