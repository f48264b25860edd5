"""Grouped convolutions (1 < groups < channels) and channel shuffles.

- The grouped int8 kernels: qgconv_dsp (isa/dsp_group.py: Cortex-M4 / M7 /
  M33), qgdot_mve (isa/mve_group.py: Cortex-M55), the NEON general kernel
  (Cortex-A7 / A53) and the portable one, each bit for bit against the
  numpy reference over layers with 2..8 groups, 1x1 / 3x3 / 1x3 / 5x5
  kernels, strides, padding, channels per group that are not multiples of 4
  (input and output), C % 4 != 0, batch 2, per-tensor weights without bias,
  half of the layers followed by a channel shuffle that the compiler folds
  into their stores (`_ochan`); the plain-C paths of the DSP and Helium
  headers on the host, the real kernels on QEMU (an386 / an500 / an505 /
  an547) and under qemu-user (NEON).
- The channel-shuffle fold (passes/fold_shuffle.py) on float and int8 QDQ
  models (onnxruntime's quantize_static, DequantizeLinear / QuantizeLinear
  around the Reshape / Transpose), in NCHW and written in NHWC: no run-time
  Transpose is left, the folded graph's reference equals the unfolded one's
  (int8 bit for bit, float within rounding), the generated C equals the
  reference, both agree with onnxruntime (graph optimizations off); where
  no convolution can take the permutation, one Gather is left.
- ShuffleNet (examples/shufflenet_g4_int8.onnx): generated C == reference
  on the host (on the M4 and M55: benchmarks/shufflenet.py, which checks
  the outputs as it counts instructions); every node of the reference within 1 LSB of
  onnxruntime (optimizations off, --requant float) when fed onnxruntime's
  inputs (end to end, 1-LSB differences of float rounding cascade through
  49 random layers, so the per-node comparison is the one that can hold).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.passes import fold_shuffle
from helpers import run_c, run_ort
from qhelpers import assert_exact, assert_graph_outputs_exact, lsb_diff, sim_exact
from test_isa_dsp import conv_layer, qmodel, run_host
from test_isa_neon import BOARD_PARAMS as NEON_BOARDS, check_exact as neon_exact

_MCU = pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                          reason="needs apt packages gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm")
SHUFFLENET = Path(__file__).resolve().parent.parent / "examples" / "shufflenet_g4_int8.onnx"

# x (NCHW), w, attrs; a channel shuffle after the layer (its groups)
LAYERS = [
    ((1, 24, 6, 5), (28, 6, 1, 1), dict(group=4), 4),                          # ShuffleNet's first: cg 6, mg 28
    ((1, 136, 4, 5), (136, 34, 1, 1), dict(group=4), 4),                       # cg = mg = 34
    ((1, 12, 7, 6), (9, 4, 3, 3), dict(group=3, pads=[1, 1, 1, 1]), 0),        # 3x3, mg 3
    ((2, 10, 5, 7), (6, 5, 3, 3), dict(group=2, strides=[2, 2], pads=[1, 0, 1, 1]), 2),   # batch 2, C % 4
    ((1, 14, 6, 6), (14, 7, 1, 1), dict(group=2), 0),                          # C % 4, odd cg
    ((1, 18, 5, 5), (12, 3, 1, 1), dict(group=6, strides=[2, 2]), 3),          # strided 1x1, C % 4
    ((1, 16, 5, 6), (24, 2, 1, 3), dict(group=8, pads=[0, 1, 0, 1]), 4),       # 1x3, cg 2, 8 groups
    ((1, 20, 6, 7), (10, 10, 5, 5), dict(group=2, pads=[2, 2, 2, 2]), 0),      # 5x5, every pixel near a border
    ((1, 32, 3, 3), (64, 8, 1, 1), dict(group=4), 8),                          # shuffle of 8 groups of 8
]


def _shuffle_nodes(i: int, src: str, shape, groups: int, dst: str):
    """Reshape [N, g, C/g, H, W] -> Transpose [0, 2, 1, 3, 4] -> Reshape back."""
    n, c, h, w = shape
    nodes = [helper.make_node("Reshape", [src, f"s5_{i}"], [f"r5_{i}"]),
             helper.make_node("Transpose", [f"r5_{i}"], [f"t5_{i}"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", [f"t5_{i}", f"s4_{i}"], [dst])]
    inits = {f"s5_{i}": np.array([n, groups, c // groups, h, w], np.int64),
             f"s4_{i}": np.array([n, c, h, w], np.int64)}
    return nodes, inits


def layer_model(layers=LAYERS, seed=3, **kw):
    """Each layer a parallel branch of one int8 QOperator model; layers with a
    shuffle end in one (int8 Reshape / Transpose)."""
    rng = np.random.RandomState(seed)
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (xs, ws, attrs, shuffle) in enumerate(layers):
        node, ini, x = conv_layer(rng, i, xs, ws, attrs, **kw)
        inits.update(ini)
        if shuffle:
            (kh, kw_), (sh, sw) = ws[2:], attrs.get("strides", [1, 1])
            pads = attrs.get("pads", [0, 0, 0, 0])
            oh, ow = (xs[2] + pads[0] + pads[2] - kh) // sh + 1, (xs[3] + pads[1] + pads[3] - kw_) // sw + 1
            node.output[0] = f"c{i}"
            sn, si = _shuffle_nodes(i, f"c{i}", (xs[0], ws[0], oh, ow), shuffle, f"y{i}")
            nodes += [node] + sn
            inits.update(si)
        else:
            nodes.append(node)
        inputs[f"x{i}"] = (x.shape, "int8")
        outputs[f"y{i}"] = "int8"
        feeds[f"x{i}"] = x
    return qmodel(nodes, inputs, outputs, inits), feeds


def _calls(header: str, kernel: str) -> int:
    return len(re.findall(rf"^\s*\w+__{kernel}\w*\(", header, re.M))


def _check_folded(c, n_shuffles: int):
    """No 5-D tensor, Gather or Transpose left but those the graph's NCHW
    inputs and outputs need; n_shuffles convolutions store through _ochan."""
    g = c.graph
    ops = [n.op_type for n in g.nodes]
    assert "Gather" not in ops and not any(len(g.tensors[n.outputs[0]].shape) == 5 for n in g.nodes), ops
    assert ops.count("Transpose") <= len(g.inputs) + len(g.outputs), ops
    assert sum(n.attrs.get("_ochan") is not None for n in g.nodes) == n_shuffles


N_SHUFFLES = sum(1 for layer in LAYERS if layer[3])


@pytest.mark.parametrize("board,kernel", [("host", "qconv_s8"), ("qemu-mps2-an386", "qgconv_dsp"),
                                          ("qemu-mps3-an547", "qgdot_mve")])
def test_layers_host(board, kernel):
    """Portable C, and the DSP / Helium headers through their plain-C paths
    (-Werror, sanitizers), equal to the reference; every layer on its kernel."""
    model, feeds = layer_model()
    c = compile_model(model, board=board, verify_each=True)
    _check_folded(c, N_SHUFFLES)
    assert _calls(c.header, kernel) == len(LAYERS), kernel
    assert_graph_outputs_exact(c.graph, run_host(c, feeds), feeds, min_unique=4)


@_MCU
@pytest.mark.parametrize("board,kernel", [("qemu-mps2-an386", "qgconv_dsp"), ("qemu-mps2-an500", "qgconv_dsp"),
                                          ("qemu-mps2-an505", "qgconv_dsp"), ("qemu-mps3-an547", "qgdot_mve"),
                                          ("qemu-mps2-an385", "qconv_s8")])
def test_layers_on_qemu(board, kernel):
    model, feeds = layer_model()
    c = compile_model(model, board=board)
    assert _calls(c.header, kernel) == len(LAYERS), kernel
    r, _ = sim_exact(c, feeds, min_unique=4)
    assert "warning:" not in r.warnings, r.warnings


@pytest.mark.parametrize("board", NEON_BOARDS)
def test_layers_neon(board):
    model, feeds = layer_model()
    c = compile_model(model, board=board)
    assert _calls(c.header, "qconv_neon") == len(LAYERS)
    neon_exact(c, feeds)


def test_kernel_variants_and_limits():
    """Per-tensor weights without bias (other requantization paths); a layer
    whose split activations exceed the DSP and Helium kernels' buffers keeps
    the portable kernel."""
    layers = [(LAYERS[2][:3] + (0,)), (LAYERS[1][:3] + (4,))]
    model, feeds = layer_model(layers, seed=7, bias=False, per_channel=False)
    for board, kernel in (("qemu-mps2-an386", "qgconv_dsp"), ("qemu-mps3-an547", "qgdot_mve")):
        c = compile_model(model, board=board)
        assert _calls(c.header, kernel) == 2
        assert_graph_outputs_exact(c.graph, run_host(c, feeds), feeds, min_unique=4)
    big = [((1, 256, 3, 3), (8, 128, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), 0)]
    model, feeds = layer_model(big, seed=8)
    for board in ("qemu-mps2-an386", "qemu-mps3-an547"):
        assert _calls(compile_model(model, board=board).header, "qconv_s8") == 1


def test_conv_integer_shuffled():
    """ConvInteger (int32 output) with groups, its output shuffled: the
    portable kernel stores through _ochan; the C, the reference and
    onnxruntime agree exactly."""
    rng = np.random.RandomState(4)
    x = rng.randint(-128, 128, (1, 12, 5, 4)).astype(np.int8)
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz"], ["c"], group=3, pads=[1, 1, 1, 1])]
    sn, si = _shuffle_nodes(0, "c", (1, 6, 5, 4), 3, "y")
    inits = {"w": rng.randint(-128, 128, (6, 4, 3, 3)).astype(np.int8), "xz": np.array(5, np.int8), **si}
    model = qmodel(nodes + sn, {"x": ((1, 12, 5, 4), "int8")}, {"y": "int32"}, inits)
    c = compile_model(model, verify_each=True)
    _check_folded(c, 1)
    y = run_host(c, {"x": x})[0]
    assert_exact(y, reference.run(c.graph, {"x": x})["y"], "C vs reference")
    assert_exact(y, run_ort(model, {"x": x})[0], "C vs onnxruntime")


# --------------------------------------------------------------------------- the fold on float and QDQ models

def unit_model(seed=0, c=12, groups=3, h=6, w=5, nhwc=False, producer="conv"):
    """A ShuffleNet unit in float: grouped 1x1 conv + Relu, channel shuffle,
    depthwise 3x3, grouped 1x1 conv, residual Add. producer "add": the
    shuffle reads an Add (nothing to fold into: a dense conv reads it);
    nhwc: the shuffle is written in NHWC between two Transposes."""
    rng = np.random.RandomState(seed)
    inits = {"w1": rng.randn(c, c // groups, 1, 1) * 0.4, "b1": rng.randn(c) * 0.1,
             "w2": rng.randn(c, 1, 3, 3) * 0.3, "b2": rng.randn(c) * 0.1,
             "w3": rng.randn(c, c // groups, 1, 1) * 0.4, "b3": rng.randn(c) * 0.1}
    if producer != "conv":
        inits["wd"] = rng.randn(c, c, 1, 1) * 0.3
    nodes = []
    if producer == "conv":
        nodes += [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], group=groups),
                  helper.make_node("Relu", ["c1"], ["a1"])]
    else:
        nodes += [helper.make_node("Add", ["x", "x"], ["a1"])]
    if nhwc:
        nodes += [helper.make_node("Transpose", ["a1"], ["an"], perm=[0, 2, 3, 1]),
                  helper.make_node("Reshape", ["an", "s5"], ["r5"]),
                  helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 1, 2, 4, 3]),
                  helper.make_node("Reshape", ["t5", "s4"], ["sn"]),
                  helper.make_node("Transpose", ["sn"], ["sh"], perm=[0, 3, 1, 2])]
        inits.update(s5=np.array([1, h, w, groups, c // groups], np.int64), s4=np.array([1, h, w, c], np.int64))
    else:
        sn, si = _shuffle_nodes(0, "a1", (1, c, h, w), groups, "sh")
        nodes += sn
        inits.update(si)
    if producer == "conv":
        nodes += [helper.make_node("Conv", ["sh", "w2", "b2"], ["d"], group=c, pads=[1, 1, 1, 1]),
                  helper.make_node("Conv", ["d", "w3", "b3"], ["e"], group=groups),
                  helper.make_node("Add", ["e", "x"], ["y"])]
    else:
        nodes += [helper.make_node("Conv", ["sh", "wd", "b1"], ["y"])]
    g = helper.make_graph(nodes, "unit", [helper.make_tensor_value_info("x", 1, [1, c, h, w])],
                          [helper.make_tensor_value_info("y", 1, None)],
                          [numpy_helper.from_array(np.asarray(v, np.float32 if v.dtype.kind == "f" else v.dtype), k)
                           for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = rng.uniform(-1, 1, (1, c, h, w)).astype(np.float32)
    return m, {"x": x}


def quantized(model, feeds, tmp_path, name="q"):
    from examples.ort_qdq import quantize_qdq
    f32, q8 = tmp_path / f"{name}_f32.onnx", tmp_path / f"{name}_int8.onnx"
    onnx.save(model, str(f32))
    rng = np.random.RandomState(1)
    x = feeds["x"]
    calib = [rng.uniform(-1, 1, x.shape).astype(np.float32) for _ in range(8)] + [x]
    quantize_qdq(f32, q8, [{"x": v} for v in calib])
    return onnx.load(str(q8))


def _unfolded(monkeypatch, model, **kw):
    with monkeypatch.context() as mp:
        mp.setattr(fold_shuffle, "run", lambda g: g)
        return compile_model(model, **kw)


@pytest.mark.parametrize("nhwc", [False, True])
def test_fold_float(nhwc, monkeypatch):
    model, feeds = unit_model(nhwc=nhwc)
    c = compile_model(model, verify_each=True)
    ops = [n.op_type for n in c.graph.nodes]
    assert "Transpose" not in ops and "Gather" not in ops and "Reshape" not in ops, ops
    assert [n.attrs.get("_ochan") is not None for n in c.graph.nodes if n.op_type == "Conv"] == [True, False, False]
    u = _unfolded(monkeypatch, model)
    assert "Transpose" in [n.op_type for n in u.graph.nodes]
    folded, plain = reference.run(c.graph, feeds), reference.run(u.graph, feeds)
    ort_y = run_ort(model, feeds)[0]
    y = folded[c.graph.outputs[0]]
    np.testing.assert_allclose(y, plain[u.graph.outputs[0]], rtol=0, atol=1e-6)
    np.testing.assert_allclose(y, ort_y, rtol=0, atol=1e-5)
    np.testing.assert_allclose(run_c(model, feeds)[0], y, rtol=0, atol=1e-5)


def test_fold_then_quantize():
    """--quantize int8 of a float model whose shuffle was folded: the int8
    layer keeps the channel placement (the C equals the reference, within
    the quantization error of onnxruntime's float result)."""
    model, feeds = unit_model(seed=3, c=16, groups=4, h=7, w=6)
    calib = {"x": np.random.RandomState(5).uniform(-1, 1, (8, 16, 7, 6)).astype(np.float32)}
    c = compile_model(model, board="qemu-mps2-an386", quantize="int8", calibration=calib)
    assert [n.attrs.get("_ochan") is not None for n in c.graph.nodes if n.op_type == "QLinearConv"] == \
        [True, False, False]
    y = run_host(c, feeds)[0]
    assert_exact(y, reference.run(c.graph, feeds)[c.graph.outputs[0]], "C vs reference")
    f = run_ort(model, feeds)[0]
    assert np.abs(y - f).max() <= 0.03 * np.abs(f).max()


def test_fold_into_consumer_or_gather(monkeypatch):
    """The shuffle of an Add read by a dense conv: the conv's input channels
    are permuted; read by an op that cannot take it: one Gather, and in an
    int8 graph (NHWC after the layout pass) no Transpose around it."""
    model, feeds = unit_model(producer="add")
    c = compile_model(model, verify_each=True)
    assert [n.op_type for n in c.graph.nodes] == ["Add", "Conv"]
    np.testing.assert_allclose(run_c(model, feeds)[0], run_ort(model, feeds)[0], rtol=0, atol=1e-5)
    # a MaxPool reads the shuffle instead: nothing to fold into
    m2 = onnx.ModelProto()
    m2.CopyFrom(model)
    conv = m2.graph.node[-1]
    m2.graph.node.remove(conv)
    m2.graph.node.append(helper.make_node("MaxPool", ["sh"], ["y"], kernel_shape=[2, 2]))
    c = compile_model(m2, verify_each=True)
    assert [n.op_type for n in c.graph.nodes] == ["Add", "Gather", "MaxPool"]
    np.testing.assert_allclose(run_c(m2, feeds)[0], run_ort(m2, feeds)[0], rtol=0, atol=1e-6)


def test_gather_left_in_nhwc(tmp_path):
    """int8: a shuffle after a depthwise conv (no _ochan there) read by a
    MaxPool stays one Gather, which the layout pass runs in NHWC (on the
    channel axis, 3) with no Transpose around it."""
    rng = np.random.RandomState(6)
    c, h, w = 8, 6, 6
    sn, si = _shuffle_nodes(0, "d", (1, c, h, w), 2, "sh")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["d"], group=c, pads=[1, 1, 1, 1])] + sn + \
        [helper.make_node("MaxPool", ["sh"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Conv", ["p", "w2"], ["y"])]
    inits = {"w1": rng.randn(c, 1, 3, 3).astype(np.float32), "b1": rng.randn(c).astype(np.float32),
             "w2": rng.randn(4, c, 1, 1).astype(np.float32), **si}
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, c, h, w])],
                          [helper.make_tensor_value_info("y", 1, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    feeds = {"x": rng.uniform(-1, 1, (1, c, h, w)).astype(np.float32)}
    model = quantized(m, feeds, tmp_path)
    cm = compile_model(model, board="qemu-mps2-an386", verify_each=True)
    ops = [(n.op_type, n.attrs.get("axis")) for n in cm.graph.nodes]
    i = ops.index(("Gather", 3))
    assert [o for o, _ in ops[i - 1:i + 2]] == ["QLinearConv", "Gather", "cuvil.QMaxPool"], ops
    assert [o for o, _ in ops].count("Transpose") == 2, ops
    assert_exact(run_host(cm, feeds)[0], reference.run(cm.graph, feeds)["y"], "C vs reference")


@pytest.mark.parametrize("nhwc", [False, True])
def test_fold_int8_qdq(nhwc, tmp_path, monkeypatch):
    """quantize_static's QDQ unit: folded == unfolded (bit for bit), the
    float-requant reference within 1 LSB of onnxruntime, and (NCHW) the C ==
    the reference in the host, DSP and Helium headers' host builds."""
    fmodel, feeds = unit_model(seed=2, c=16, groups=4, h=7, w=6, nhwc=nhwc)
    model = quantized(fmodel, feeds, tmp_path)
    assert sum(n.op_type == "DequantizeLinear" for n in model.graph.node) > 6
    for requant in ("fixed", "float"):
        c = compile_model(model, requant=requant, verify_each=True)
        _check_folded(c, 1)
        u = _unfolded(monkeypatch, model, requant=requant)
        assert sum(n.op_type == "Transpose" for n in u.graph.nodes) >= 3
        y = reference.run(c.graph, feeds)[c.graph.outputs[0]]
        assert_exact(y, reference.run(u.graph, feeds)[u.graph.outputs[0]], f"{requant}: folded vs unfolded")
        if requant == "float":
            d = lsb_diff(np.round(y / _out_scale(model)), np.round(run_ort(model, feeds)[0] / _out_scale(model)))
            assert d <= 1, f"float requant vs onnxruntime: {d} LSB"
    for board in (("host", "qemu-mps2-an386", "qemu-mps3-an547") if not nhwc else ()):
        c = compile_model(model, board=board)
        _check_folded(c, 1)
        y = run_host(c, feeds)[0]
        assert_exact(y, reference.run(c.graph, feeds)[c.graph.outputs[0]], board)


def _out_scale(model) -> float:
    """The scale of the DequantizeLinear that writes the graph output."""
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    dq = next(n for n in model.graph.node if n.output[0] == model.graph.output[0].name)
    return float(init[dq.input[1]])


@pytest.mark.parametrize("board", [pytest.param("qemu-mps2-an386", marks=_MCU),
                                   pytest.param("qemu-mps3-an547", marks=_MCU)] + NEON_BOARDS)
def test_fold_int8_on_boards(board, tmp_path):
    fmodel, feeds = unit_model(seed=4, c=24, groups=4, h=6, w=7)
    model = quantized(fmodel, feeds, tmp_path)
    c = compile_model(model, board=board)
    _check_folded(c, 1)
    if board.startswith("qemu-"):
        sim_exact(c, feeds)
    else:
        neon_exact(c, feeds)


def test_axis_permutation():
    """Which Reshape -> Transpose -> Reshape chains are one-axis permutations."""
    p = fold_shuffle.axis_permutation((1, 6, 2, 2), (1, 2, 3, 2, 2), [0, 2, 1, 3, 4], (1, 6, 2, 2))
    assert p is not None and p[0] == 1 and list(p[1]) == [0, 3, 1, 4, 2, 5]
    p = fold_shuffle.axis_permutation((1, 2, 2, 6), (1, 2, 2, 3, 2), [0, 1, 2, 4, 3], (1, 2, 2, 6))
    assert p is not None and p[0] == 3 and list(p[1]) == [0, 2, 4, 1, 3, 5]
    # a space-to-depth like mix of two axes, and the identity: not one axis
    assert fold_shuffle.axis_permutation((1, 4, 2, 2), (1, 4, 2, 2), [0, 1, 3, 2], (1, 4, 2, 2)) is None
    assert fold_shuffle.axis_permutation((1, 4, 2, 3), (1, 2, 2, 2, 3), [0, 1, 2, 3, 4], (1, 4, 2, 3)) is None
    assert fold_shuffle.axis_permutation((2, 4, 2), (2, 2, 2, 2), [1, 0, 2, 3], (2, 4, 2)) is None


# --------------------------------------------------------------------------- ShuffleNet

@pytest.fixture(scope="module")
def shufflenet():
    model = onnx.load(str(SHUFFLENET))
    x = np.random.RandomState(0).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)
    return model, {model.graph.input[0].name: x}


def test_shufflenet_host_and_per_node_vs_onnxruntime(shufflenet):
    model, feeds = shufflenet
    c = compile_model(model, board="host", requant="float")
    _check_folded(c, 16)
    assert_graph_outputs_exact(c.graph, run_host(c, feeds, cflags=["-O1"]), feeds)
    # each node fed onnxruntime's values of its inputs (ours where it has none)
    from cuvil_mcu import ops
    g = c.graph
    ort = _ort_tensors(model, feeds, g)
    vals = {name: t.data for name, t in g.tensors.items() if t.is_const}
    vals.update(feeds)
    compared = 0
    for n in g.nodes:
        ins = [g.tensors[i] if i else None for i in n.inputs]
        arrays = [(_ours(ort[i], g.tensors[i].shape) if i in ort else vals[i]) if i else None for i in n.inputs]
        out = np.asarray(ops.get(n.op_type).reference(n, ins, *arrays)[0]).reshape(g.tensors[n.outputs[0]].shape)
        vals[n.outputs[0]] = out
        if n.outputs[0] in ort and out.dtype == np.int8 and not ops.get(n.op_type).view:
            d = lsb_diff(out, _ours(ort[n.outputs[0]], out.shape))
            assert d <= 1, f"node {n.name} ({n.op_type}): {d} LSB from onnxruntime"
            compared += 1
    assert compared >= 70, compared


def _base(name: str) -> str:
    return re.sub(r"(_nhwc|_pre)(_\d+)?$", "", re.sub(r"(_nhwc|_pre)(_\d+)?$", "", name))


def _ort_tensors(model, feeds, g) -> dict:
    """onnxruntime's value (optimizations off) of every tensor of g that has
    one in the model (names as the layout pass derives them)."""
    import onnxruntime as ort
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o for n in m.graph.node for o in n.output}
    names = {t: _base(t) for t in g.tensors if _base(t) in have and not g.tensors[t].is_const}
    elem = {"int8": onnx.TensorProto.INT8, "float32": onnx.TensorProto.FLOAT}
    for b in sorted(set(names.values())):
        t = next(k for k, v in names.items() if v == b)
        m.graph.output.append(helper.make_tensor_value_info(b, elem[g.tensors[t].dtype], None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
    return {t: got[b] for t, b in names.items() if b in got}


def _ours(a: np.ndarray, shape) -> np.ndarray:
    """onnxruntime's NCHW array in our tensor's layout (NHWC where it differs)."""
    a = np.asarray(a)
    if a.shape != tuple(shape) and a.ndim == 4:
        a = np.moveaxis(a, 1, -1)
    return a.reshape(shape)
