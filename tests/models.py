"""Builders of small multi-layer float32 models, shaped like what exporters
write (PyTorch: Conv without bias + BatchNormalization, Gemm with transB;
tf2onnx: MatMul + Add, dynamic batch). Weights are seeded and scaled (He /
Xavier init, BatchNorm statistics near 1) so activations stay O(1).

Every builder returns a checked onnx.ModelProto: `dscnn`, `mobilenet`,
`resnet_block`, `autoencoder`, `transformer` (LayerNormalization, opset 17)
and `transformer_legacy` (LayerNorm spelled as ReduceMean/Sub/Pow/Sqrt/Div,
shapes computed by Shape/Gather/Concat, opset 13), and `ALL` lists them.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, base: str, value) -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.fresh(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    # Weights -------------------------------------------------------------

    def he(self, shape, fan_in: int) -> np.ndarray:
        return (self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)

    def xavier(self, shape, fan_in: int) -> np.ndarray:
        return (self.rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)

    def small(self, shape, scale: float = 0.1) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    # Layers --------------------------------------------------------------

    def conv(self, x: str, cin: int, cout: int, k: tuple[int, int], stride: int = 1,
             pads: list[int] | None = None, group: int = 1, bias: bool = False) -> str:
        w = self.const("w", self.he((cout, cin // group, *k), (cin // group) * k[0] * k[1]))
        ins = [x, w] + ([self.const("b", self.small((cout,)))] if bias else [])
        if pads is None:
            pads = [k[0] // 2, k[1] // 2, k[0] // 2, k[1] // 2]
        return self.op("Conv", ins, kernel_shape=list(k), strides=[stride, stride], pads=pads, group=group)

    def bn(self, x: str, c: int) -> str:
        gamma = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
        beta = self.small((c,))
        mean = self.small((c,))
        var = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
        return self.op("BatchNormalization", [x] + [self.const(n, v) for n, v in
                       (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))], epsilon=1e-3)

    def relu6(self, x: str) -> str:
        return self.op("Clip", [x, self.const("zero", np.float32(0)), self.const("six", np.float32(6))])

    def linear(self, x: str, fin: int, fout: int) -> str:
        """MatMul + Add, as tf2onnx writes a Dense layer."""
        y = self.op("MatMul", [x, self.const("w", self.xavier((fin, fout), fin))])
        return self.op("Add", [y, self.const("b", self.small((fout,)))])

    def model(self, inputs, outputs, opset: int = 13) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="cuvil-tests")
        m.ir_version = min(m.ir_version, 9)  # onnxruntime reads IR <= 9 reliably
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        onnx.checker.check_model(m, full_check=True)
        return m


def _io(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def dscnn(seed: int = 0, channels: int = 64, classes: int = 12) -> onnx.ModelProto:
    """DS-CNN keyword spotter (MLPerf Tiny KWS shape): MFCC input 1x1x49x10,
    Conv 10x4 stride 2 (padded to 25x5), BN, Relu, four depthwise-separable
    blocks (3x3 depthwise + BN + Relu, 1x1 pointwise + BN + Relu), global
    average pool, Flatten, Gemm (transB, as PyTorch writes Linear), Softmax."""
    b = Builder("dscnn", seed)
    x = b.op("Relu", [b.bn(b.conv("input", 1, channels, (10, 4), stride=2, pads=[4, 1, 5, 1], bias=True),
                           channels)])
    for _ in range(4):
        x = b.op("Relu", [b.bn(b.conv(x, channels, channels, (3, 3), group=channels), channels)])
        x = b.op("Relu", [b.bn(b.conv(x, channels, channels, (1, 1)), channels)])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    w = b.const("fc_w", b.xavier((classes, channels), channels))
    x = b.op("Gemm", [x, w, b.const("fc_b", b.small((classes,)))], transB=1)
    b.nodes.append(helper.make_node("Softmax", [x], ["probs"], name="softmax", axis=-1))
    return b.model([_io("input", [1, 1, 49, 10])], [_io("probs", [1, classes])])


def mobilenet(seed: int = 0, classes: int = 10) -> onnx.ModelProto:
    """MobileNetV1-style: 1x3x32x32, Conv 3x3 stride 2, then depthwise 3x3 /
    pointwise 1x1 pairs (some depthwise with stride 2), each followed by BN
    and Relu6 written as Clip(0, 6); global average pool, Gemm."""
    b = Builder("mobilenet", seed)
    x = b.relu6(b.bn(b.conv("image", 3, 16, (3, 3), stride=2), 16))
    c = 16
    for cout, stride in ((32, 1), (48, 2), (48, 1), (64, 2)):
        x = b.relu6(b.bn(b.conv(x, c, c, (3, 3), stride=stride, group=c), c))
        x = b.relu6(b.bn(b.conv(x, c, cout, (1, 1)), cout))
        c = cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    w = b.const("fc_w", b.xavier((classes, c), c))
    b.nodes.append(helper.make_node("Gemm", [x, w, b.const("fc_b", b.small((classes,)))], ["logits"],
                                    name="fc", transB=1))
    return b.model([_io("image", [1, 3, 32, 32])], [_io("logits", [1, classes])])


def resnet_block(seed: int = 0) -> onnx.ModelProto:
    """Two ResNet basic blocks on 1x16x12x12: identity shortcut (Add + Relu),
    then a stride-2 block widening to 24 channels with a 1x1 stride-2
    projection shortcut (Conv + BN)."""
    b = Builder("resnet_block", seed)
    x = "x"
    y = b.op("Relu", [b.bn(b.conv(x, 16, 16, (3, 3)), 16)])
    y = b.bn(b.conv(y, 16, 16, (3, 3)), 16)
    x = b.op("Relu", [b.op("Add", [y, x])])
    y = b.op("Relu", [b.bn(b.conv(x, 16, 24, (3, 3), stride=2), 24)])
    y = b.bn(b.conv(y, 24, 24, (3, 3)), 24)
    s = b.bn(b.conv(x, 16, 24, (1, 1), stride=2, pads=[0, 0, 0, 0]), 24)
    b.nodes.append(helper.make_node("Relu", [b.op("Add", [s, y])], ["out"], name="relu_out"))
    return b.model([_io("x", [1, 16, 12, 12])], [_io("out", [1, 24, 6, 6])])


def autoencoder(seed: int = 0) -> onnx.ModelProto:
    """MLP autoencoder (MLPerf Tiny anomaly detection shape) 640 -> 128 ->
    128 -> 8 -> 128 -> 128 -> 640, MatMul + Add + Relu as tf2onnx writes
    Dense layers, with tf2onnx's dynamic batch dimension."""
    b = Builder("autoencoder", seed)
    x = "features"
    dims = [640, 128, 128, 8, 128, 128, 640]
    for i in range(len(dims) - 1):
        x = b.linear(x, dims[i], dims[i + 1])
        if i < len(dims) - 2:
            x = b.op("Relu", [x])
    b.nodes.append(helper.make_node("Identity", [x], ["reconstruction"], name="out"))
    return b.model([_io("features", ["unk__batch", 640])], [_io("reconstruction", ["unk__batch", 640])])


def _transformer(name: str, seed: int, legacy: bool, tokens: int = 16, dim: int = 32,
                 heads: int = 4, hidden: int = 64) -> onnx.ModelProto:
    b = Builder(name, seed)
    hd = dim // heads

    def ln(x: str) -> str:
        gamma = b.const("ln_g", (1 + b.small((dim,))).astype(np.float32))
        beta = b.const("ln_b", b.small((dim,)))
        if not legacy:
            return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)
        mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
        d = b.op("Sub", [x, mean])
        var = b.op("ReduceMean", [b.op("Pow", [d, b.const("two", np.float32(2))])], axes=[-1], keepdims=1)
        std = b.op("Sqrt", [b.op("Add", [var, b.const("eps", np.float32(1e-5))])])
        return b.op("Add", [b.op("Mul", [b.op("Div", [d, std]), gamma]), beta])

    def shape_of(x: str, tail: list[int]) -> str:
        """Target shape [batch, tokens, *tail]; legacy exporters compute the
        leading dims at run time from Shape -> Gather -> Unsqueeze -> Concat."""
        if not legacy:
            return b.const("shape", np.array([1, tokens, *tail], np.int64))
        s = b.op("Shape", [x])
        lead = [b.op("Unsqueeze", [b.op("Gather", [s, b.const("i", np.array(i, np.int64))], axis=0),
                                   b.const("axes", np.array([0], np.int64))]) for i in (0, 1)]
        return b.op("Concat", lead + [b.const("tail", np.array(tail, np.int64))], axis=0)

    def heads_of(x: str, perm: list[int]) -> str:
        return b.op("Transpose", [b.op("Reshape", [x, shape_of(x, [heads, hd])])], perm=perm)

    x = "tokens"
    h = ln(x)
    q = heads_of(b.linear(h, dim, dim), [0, 2, 1, 3])     # 1 x H x T x hd
    k = heads_of(b.linear(h, dim, dim), [0, 2, 3, 1])     # 1 x H x hd x T
    v = heads_of(b.linear(h, dim, dim), [0, 2, 1, 3])
    scores = b.op("Div", [b.op("MatMul", [q, k]), b.const("sqrt_d", np.float32(math.sqrt(hd)))])
    attn = b.op("Softmax", [scores], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [attn, v])], perm=[0, 2, 1, 3])   # 1 x T x H x hd
    ctx = b.op("Reshape", [ctx, shape_of(ctx, [dim])])
    x = b.op("Add", [x, b.linear(ctx, dim, dim)])
    h = b.linear(ln(x), dim, hidden)
    # GELU(h) = h * 0.5 * (1 + erf(h / sqrt(2))), as exporters spell it.
    e = b.op("Erf", [b.op("Div", [h, b.const("sqrt2", np.float32(math.sqrt(2.0)))])])
    g = b.op("Mul", [b.op("Mul", [h, b.op("Add", [e, b.const("one", np.float32(1))])]),
                     b.const("half", np.float32(0.5))])
    y = b.linear(g, hidden, dim)
    b.nodes.append(helper.make_node("Add", [x, y], ["encoded"], name="residual_out"))
    return b.model([_io("tokens", [1, tokens, dim])], [_io("encoded", [1, tokens, dim])],
                   opset=13 if legacy else 17)


def transformer(seed: int = 0) -> onnx.ModelProto:
    """Pre-LN transformer encoder block on 1x16x32 tokens, 4 heads, opset 17
    LayerNormalization, MLP with GELU spelled as Div/Erf/Add/Mul."""
    return _transformer("transformer", seed, legacy=False)


def transformer_legacy(seed: int = 0) -> onnx.ModelProto:
    """`transformer` as older exporters write it (opset 13): LayerNorm as
    ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add and Reshape targets
    computed from Shape/Gather/Unsqueeze/Concat."""
    return _transformer("transformer_legacy", seed, legacy=True)


ALL = {f.__name__: f for f in (dscnn, mobilenet, resnet_block, autoencoder, transformer, transformer_legacy)}
