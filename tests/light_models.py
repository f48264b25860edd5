"""The real network graphs the `onnx` package ships as backend test data
(onnx/backend/test/data/light/light_*.onnx: Caffe2 exports of SqueezeNet,
ShuffleNet, Inception v1/v2, DenseNet-121, ResNet-50, AlexNet, ZFNet,
VGG-19), with seeded random weights.

As shipped every weight is ConstantOfShape(shape, 0.02): outputs that say
nothing about a wrong index or a swapped axis. `seeded` replaces each such
node with a random initializer scaled for its role (He for Conv/Gemm
weights, BatchNorm statistics near 1, small biases), so activations stay
O(1) through a hundred layers. The copy stays IR version 3 with every
initializer also listed as a graph input, as Caffe2 wrote them.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
NAMES = ["squeezenet", "shufflenet", "inception_v1", "inception_v2", "densenet121", "resnet50",
         "bvlc_alexnet", "zfnet512", "vgg19"]


def path(name: str) -> str:
    return os.path.join(LIGHT, f"light_{name}.onnx")


def available() -> list[str]:
    return [n for n in NAMES if os.path.exists(path(n))]


def _role(name: str, users: dict, unsq: dict) -> tuple[str, int]:
    """(op type, input index) of the first node that reads `name`, looking
    through an Unsqueeze (Caffe2's per-channel Mul/Add operands)."""
    u = users.get(name, [])
    if not u:
        return "", -1
    n, i = u[0]
    if n.op_type == "Unsqueeze" and n.output[0] in users:
        return _role(n.output[0], users, unsq)
    return n.op_type, i


def _weights(shape: tuple[int, ...], role: tuple[str, int], rng) -> np.ndarray:
    op, i = role
    if op == "BatchNormalization" and i in (1, 4):        # scale, variance
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if op == "Mul":                                         # Caffe2's BatchNorm scale
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if op in ("Conv", "Gemm", "MatMul") and i == 1:
        fan_in = int(np.prod(shape[1:])) if op == "Conv" else int(shape[1] if op == "Gemm" else shape[0])
        return (rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))).astype(np.float32)
    return (0.1 * rng.standard_normal(shape)).astype(np.float32)   # biases, means, shifts


def seeded(name: str, seed: int = 0, hw: int | None = None, upto: str | None = None,
           logits: bool = False, calibrate: bool = True) -> onnx.ModelProto:
    """light_<name>.onnx with every ConstantOfShape weight replaced by a
    seeded random initializer (also listed as a graph input, IR 3 style).
    hw: the image's height and width (the fully convolutional models run at
    any size); upto: cut the graph after the node writing this tensor (the
    only output then); logits: also output the input of the final Softmax,
    whose saturated probabilities would hide errors; calibrate=False keeps
    the BatchNormalization statistics as drawn (activations then drift in
    scale with depth, and a deep network is far less sensitive to one
    rounding step: DenseNet-121's noise floor is 2 output steps instead of
    15, as in the classic-networks issue's measurement)."""
    m = onnx.load(path(name))
    g = m.graph
    if upto is not None:
        _cut(m, upto)
    if logits:
        sm = [n for n in g.node if n.op_type == "Softmax"]
        if sm:
            g.output.append(helper.make_empty_tensor_value_info(sm[-1].input[0]))
    if hw is not None:
        x = data_inputs(m)[0]
        dims = x.type.tensor_type.shape.dim
        dims[2].dim_value = dims[3].dim_value = hw
    inits = {t.name: t for t in g.initializer}
    users: dict[str, list] = {}
    for n in g.node:
        for i, x in enumerate(n.input):
            users.setdefault(x, []).append((n, i))
    rng = np.random.default_rng(seed)
    keep, new, dropped, redrawn = [], [], set(), set()
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
            new.append(numpy_helper.from_array(_weights(shape, _role(n.output[0], users, {}), rng), n.output[0]))
            dropped.add(n.input[0])
        else:
            keep.append(n)
    # a few models store some parameters as they were trained (BatchNorm
    # statistics of other weights): those are redrawn too
    for t in list(g.initializer):
        role = _role(t.name, users, {})
        if t.data_type == onnx.TensorProto.FLOAT and t.dims and role[1] >= 1 and \
                role[0] in ("Conv", "Gemm", "MatMul", "BatchNormalization", "Mul", "Add"):
            new.append(numpy_helper.from_array(_weights(tuple(t.dims), role, rng), t.name))
            redrawn.add(t.name)
    still_read = {x for n in keep for x in n.input}
    dropped -= still_read
    del g.node[:]
    g.node.extend(keep)
    kept_inits = [t for t in g.initializer if t.name not in dropped | redrawn]
    del g.initializer[:]
    g.initializer.extend(kept_inits + new)
    kept_inputs = [vi for vi in g.input if vi.name not in dropped]
    del g.input[:]
    g.input.extend(kept_inputs)
    listed = {vi.name for vi in g.input}
    for t in new:
        if t.name in listed:
            continue
        g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    if calibrate:
        _calibrate_batchnorm(m)
    if upto is not None or logits or hw is not None:
        _output_types(m)
    onnx.checker.check_model(m)
    return m


def _calibrate_batchnorm(m: onnx.ModelProto) -> None:
    """BatchNormalization statistics drawn at random are not those of the
    activations, which then grow layer after layer: set each one's mean and
    variance to what its input carries on a seeded image (per channel). A
    BatchNormalization's input depends on the ones before it, so one
    onnxruntime run per level of depth, the statistics fed as inputs (they
    are graph inputs, IR 3 style)."""
    import onnxruntime as ort

    g = m.graph
    bns = [n for n in g.node if n.op_type == "BatchNormalization"]
    if not bns:
        return
    prod = {o: n for n in g.node for o in n.output}
    depth: dict[str, int] = {}

    def level(name: str) -> int:    # BatchNormalizations on the longest path to tensor `name`
        if name not in depth:
            n = prod.get(name)
            depth[name] = 0 if n is None else \
                max([level(i) for i in n.input if i] + [0]) + (n.op_type == "BatchNormalization")
        return depth[name]

    import sys
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(g.node)))
    levels = [level(n.input[0]) for n in bns]
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    _cut(probe, *dict.fromkeys(n.input[0] for n in bns))
    image_name = data_inputs(m)[0].name
    x = next(vi for vi in probe.graph.input if vi.name == image_name).type.tensor_type.shape.dim
    fed = {n.input[i] for n in bns for i in (3, 4)}
    stats = {t.name: numpy_helper.to_array(t) for t in probe.graph.initializer if t.name in fed}
    kept = [t for t in probe.graph.initializer if t.name not in fed]
    del probe.graph.initializer[:]
    probe.graph.initializer.extend(kept)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {image_name: np.random.default_rng(2).standard_normal([d.dim_value for d in x]).astype(np.float32)}
    where = {o.name: i for i, o in enumerate(probe.graph.output)}
    found: dict[str, np.ndarray] = {}
    for lv in range(max(levels) + 1):
        outs = sess.run(None, {**feeds, **stats})
        for n, nl in zip(bns, levels):
            if nl == lv:
                v = outs[where[n.input[0]]]
                axes = tuple(i for i in range(v.ndim) if i != 1)
                found[n.input[3]] = v.mean(axis=axes).astype(np.float32)
                found[n.input[4]] = (v.var(axis=axes) + 1e-3).astype(np.float32)
        stats.update({k: v for k, v in found.items() if k in stats})
    for t in g.initializer:
        if t.name in found:
            t.CopyFrom(numpy_helper.from_array(found[t.name], t.name))


def _cut(m: onnx.ModelProto, *outputs: str) -> None:
    """Keep the nodes the given tensors depend on; they become the outputs."""
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}
    missing = [o for o in outputs if o not in prod]
    if missing:
        raise KeyError(f"no node writes {missing}")
    need, keep = set(outputs), set()
    for n in reversed(list(g.node)):
        if any(o in need for o in n.output):
            keep.add(id(n))
            need.update(n.input)
    nodes = [n for n in g.node if id(n) in keep]
    del g.node[:]
    g.node.extend(nodes)
    del g.output[:]
    g.output.extend(helper.make_empty_tensor_value_info(o) for o in outputs)
    del g.value_info[:]
    inits = [t for t in g.initializer if t.name in need]
    del g.initializer[:]
    g.initializer.extend(inits)
    inputs = [vi for vi in g.input if vi.name in need]
    del g.input[:]
    g.input.extend(inputs)


def _output_types(m: onnx.ModelProto) -> None:
    """Graph outputs typed and shaped by ONNX's shape inference (after a cut
    or a new input size the stored ones are stale or absent)."""
    g = m.graph
    del g.value_info[:]
    names = [o.name for o in g.output]
    del g.output[:]
    g.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    inferred = onnx.shape_inference.infer_shapes(m)
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    del g.output[:]
    g.output.extend(known[n] for n in names)


def quantized(m: onnx.ModelProto, samples: int = 4, seed: int = 5, extra_ops: tuple[str, ...] = ()) -> onnx.ModelProto:
    """onnxruntime's quantize_static (QDQ, int8 activations and per-channel
    int8 weights) of float model m, calibrated on seeded normal inputs; m is
    converted to opset 13 first (per-channel DequantizeLinear needs it), and
    stays IR version 3. extra_ops: op types to quantize beyond onnxruntime's
    defaults (which leave Sum and LRN float unless a neighbour quantizes
    their tensors)."""
    import tempfile

    from onnx import version_converter

    from examples.ort_qdq import quantize_qdq

    m13 = version_converter.convert_version(m, 13)
    x = data_inputs(m13)[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    feeds = [{x.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)]
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(m13, src)
        kw = {}
        if extra_ops:
            from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry
            kw["op_types_to_quantize"] = sorted(set(QDQRegistry) | set(QLinearOpsRegistry) | set(extra_ops))
        quantize_qdq(src, dst, feeds, **kw)
        return onnx.load(dst)


def image(m: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    """A seeded normal input for the model's image input."""
    x = data_inputs(m)[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    return {x.name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def data_inputs(m: onnx.ModelProto) -> list:
    """The graph inputs that are not initializers (the image)."""
    inits = {t.name for t in m.graph.initializer}
    return [vi for vi in m.graph.input if vi.name not in inits]


INTEGER_PREFIXES = ("QLinear", "com.microsoft.Q", "cuvil.Q")


def node_by_node(q: onnx.ModelProto, g, feeds: dict) -> dict:
    """Every integer node of compiled graph g (of QDQ model q), fed
    onnxruntime's own values of its inputs (q run as written, graph
    optimizations off), against onnxruntime's value of its output: a
    one-step difference anywhere spreads through the layers after it, so
    this is where two implementations are compared. Tensors are matched by
    name, or as the NHWC copy the layout pass made (suffix _nhwc, or _pre
    where a transpose moved below an element-wise op). Returns {op type:
    [nodes, outputs, outputs off by one or more, largest difference]} and
    the number of integer nodes not matched under key None."""
    import onnxruntime as ort

    from cuvil_mcu import ops

    probe = onnx.ModelProto()
    probe.CopyFrom(q)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n.output[0])
                              for n in q.graph.node if n.op_type == "QuantizeLinear")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    outs = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    vals = dict(zip([o.name for o in probe.graph.output], outs))

    def value(name, shape):
        for suffix in ("", "_nhwc", "_pre"):
            base = name[:len(name) - len(suffix)] if suffix else name
            if name.endswith(suffix) and base in vals:
                v = vals[base]
                if v.shape != tuple(shape) and v.ndim >= 3:
                    v = np.moveaxis(v, 1, -1)
                return v if v.shape == tuple(shape) else None
        return None

    stats: dict = {None: 0}
    for n in g.nodes:
        if not n.op_type.startswith(INTEGER_PREFIXES):
            continue
        ins = [g.tensors[i] if i else None for i in n.inputs]
        arrays = [None if t is None else t.data if t.is_const else value(t.name, t.shape) for t in ins]
        want = value(n.outputs[0], g.tensors[n.outputs[0]].shape)
        if want is None or any(a is None for t, a in zip(ins, arrays) if t is not None):
            stats[None] += 1
            continue
        y = ops.get(n.op_type).reference(n, ins, *arrays)[0]
        d = np.abs(y.astype(np.int64) - want.astype(np.int64))
        s = stats.setdefault(n.op_type, [0, 0, 0, 0])
        s[0], s[1], s[2], s[3] = s[0] + 1, s[1] + d.size, s[2] + int((d > 0).sum()), max(s[3], int(d.max()))
    return stats
