"""Integer convolutions (ops/qconv.py): QLinearConv, com.microsoft.QLinearConv
(channels_last) and ConvInteger.

Three checks, as INT8.md asks:
- the numpy reference in float-requant mode equals onnxruntime (graph
  optimizations on) exactly; in fixed-point mode it is at most 1 LSB away;
- the generated C equals the reference bit for bit, in both requant modes,
  for int8 and uint8 activations, with the NHWC kernels (what the layout pass
  produces) and with the NCHW ones (layout pass switched off), built with
  -Werror and the sanitizers;
- bad quantization parameters raise a CuvilError naming node and tensor.

onnxruntime's AVX2 kernels for uint8 activations x int8 weights multiply
with vpmaddubsw, which saturates a pair of products to int16 (the reason for
quantize_static's reduce_range); weights in [-64, 63] keep it exact, so the
uint8-activation models compared with it use 7-bit weights. The full-range
case runs C vs reference only (test_full_range_u8s8_weights).
"""
from __future__ import annotations

import contextlib
import shutil
from unittest import mock

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from cuvil_mcu import codegen, planner, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import CuvilError
from cuvil_mcu.passes import layout as layout_pass
from cuvil_mcu.sim import host
from helpers import NP2ONNX, STRICT_WARNINGS, run_ort

SANITIZE = ["-std=c99", *STRICT_WARNINGS, "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]


# --------------------------------------------------------------------------- helpers (also used by test_qgemm)

def qmodel(nodes, inputs: dict, outputs: dict, inits: dict, name: str = "q") -> onnx.ModelProto:
    """A model importing the com.microsoft domain. inputs {name: (shape,
    dtype)}, outputs {name: dtype} (shapes left to the compiler)."""
    vis = [helper.make_tensor_value_info(n, NP2ONNX[d], list(s)) for n, (s, d) in inputs.items()]
    outs = [helper.make_tensor_value_info(n, NP2ONNX[d], None) for n, d in outputs.items()]
    g = helper.make_graph(nodes, name, vis, outs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    return m


@contextlib.contextmanager
def nchw_kernels(on: bool):
    """With on=True the layout pass is skipped, so spatial ops keep NCHW
    (channels_last 0) and run the strided kernel variants."""
    if on:
        with mock.patch.object(layout_pass, "run", lambda g: g):
            yield
    else:
        yield


def compile_run(model, feeds: dict, requant: str, nchw: bool = False, mutate=None,
                cc: str = "gcc", cflags=None):
    """(C outputs, reference outputs, compiled graph): the model compiled in
    the given requant mode; mutate(graph) may edit the compiled graph (e.g.
    a fused clamp) before it is planned and rendered again."""
    with nchw_kernels(nchw):
        c = compile_model(model, requant=requant, verify_each=True)
    g = c.graph
    header = c.header
    if mutate is not None:
        mutate(g)
        header = codegen.render(g, planner.plan(g), c.prefix).text
    exe = host.build(header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs], cc=cc, cflags=cflags or SANITIZE)
    ins = [np.asarray(feeds[n], dtype=g.tensors[n].dtype)[None] for n in g.inputs]
    outs = [o[0] for o in host.run(exe, ins, c.out_specs, 1)]
    ref = reference.run(g, feeds)
    return outs, [ref[n] for n in g.outputs], g


def ref_outputs(model, feeds: dict, requant: str) -> list[np.ndarray]:
    c = compile_model(model, requant=requant)
    out = reference.run(c.graph, feeds)
    return [out[n] for n in c.graph.outputs]


def assert_exact(actual, expected, what: str):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (
        f"{what}: {actual.dtype}{list(actual.shape)} vs {expected.dtype}{list(expected.shape)}")
    bad = np.flatnonzero(actual.reshape(-1) != expected.reshape(-1))
    assert bad.size == 0, (f"{what}: {bad.size} of {actual.size} differ; first at flat {bad[0]}: "
                           f"got {actual.reshape(-1)[bad[0]]}, expected {expected.reshape(-1)[bad[0]]}")


def assert_lsb(actual, expected, lsb: int, what: str):
    d = np.abs(np.asarray(actual, np.int64) - np.asarray(expected, np.int64))
    assert d.max(initial=0) <= lsb, f"{what}: max difference {d.max()} LSB > {lsb} at flat {int(np.argmax(d))}"


def spread(y) -> int:
    """Distinct output values: a test whose outputs are all saturated checks little."""
    return len(np.unique(y))


def qrange(dtype):
    return int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)


# --------------------------------------------------------------------------- QLinearConv layers

CASES = [
    # id, x shape (NCHW), w shape, attributes, bias, per-channel weight scales
    ("1d_pads_stride2", (1, 3, 17), (4, 3, 5), dict(pads=[2, 1], strides=[2]), True, True),
    ("1d_dilation", (1, 2, 20), (3, 2, 4), dict(dilations=[2], pads=[3, 0]), False, False),
    ("1d_depthwise_m2", (1, 3, 15), (6, 1, 3), dict(group=3, pads=[1, 1]), True, True),
    ("2d_pads", (1, 3, 9, 8), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True, False),
    ("2d_stride2_odd", (1, 5, 11, 9), (7, 5, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 1]), True, True),
    ("2d_dilation2", (1, 2, 11, 10), (3, 2, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), True, True),
    ("2d_same_upper_s2", (1, 3, 9, 8), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2]), False, True),
    ("2d_same_lower_even_k", (1, 2, 6, 7), (3, 2, 4, 2), dict(auto_pad="SAME_LOWER", strides=[2, 3]), True, False),
    ("2d_valid_k3x2", (2, 3, 7, 6), (4, 3, 3, 2), dict(auto_pad="VALID"), True, True),
    ("2d_group2", (1, 4, 7, 7), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True, True),
    ("2d_depthwise_m1", (1, 5, 9, 8), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1]), True, True),
    ("2d_depthwise_m2_s2", (2, 3, 9, 8), (6, 1, 3, 3), dict(group=3, pads=[1, 0, 1, 1], strides=[2, 2]), True, False),
    ("2d_depthwise_dilation2", (1, 3, 11, 10), (3, 1, 3, 3),
     dict(group=3, dilations=[2, 2], pads=[2, 1, 2, 1]), False, True),
    ("2d_pointwise", (1, 8, 5, 6), (7, 8, 1, 1), {}, True, True),
    ("2d_kernel_larger_than_input", (1, 2, 3, 3), (3, 2, 5, 5), dict(pads=[2, 2, 2, 2]), True, True),
    ("2d_taps_all_outside", (1, 1, 2, 2), (2, 1, 2, 2), dict(pads=[3, 3, 3, 3], strides=[2, 2]), True, False),
]
# Extra weight forms: (id, activation dtype, weight dtype, weight zero point) on a 3x3 layer;
# stored offset by the zero point: uint8 zp 128 fits int8, the others need int16.
WEIGHT_FORMS = [
    ("u8_weights_zp128", "uint8", "uint8", 128),
    ("u8_weights_zp9", "uint8", "uint8", 9),
    ("s8_weights_zp5", "int8", "int8", 5),
]


def _layer(rng, i, xs, ws, attrs, bias, per_channel, xdt, wdt="int8", wzp=0, op="QLinearConv",
           full_range=False):
    """One QLinearConv reading x{i}, writing y{i}, with random parameters
    chosen so the outputs span a good part of the output range."""
    m = ws[0]
    taps = int(np.prod(ws[1:]))
    if wdt == "uint8":
        w = rng.randint(0, 256, ws).astype(np.uint8)
    elif xdt == "uint8" and not full_range:
        w = rng.randint(-64, 64, ws).astype(np.int8)
    else:
        w = rng.randint(-127, 128, ws).astype(np.int8)
    x_s = np.float32(rng.uniform(0.01, 0.05))
    x_zp = rng.randint(-20, 21) if xdt == "int8" else rng.randint(100, 150)
    w_s = rng.uniform(0.002, 0.02, m).astype(np.float32) if per_channel else np.float32(rng.uniform(0.002, 0.02))
    w_z = np.full(m, wzp, wdt) if per_channel else np.array(wzp, wdt)
    acc_std = np.sqrt(taps) * 60.0 * np.std(w.astype(np.float64) - wzp)
    y_s = np.float32(acc_std * x_s * np.mean(w_s) / 45.0)
    y_zp = rng.randint(-10, 11) if xdt == "int8" else rng.randint(118, 139)
    inits = {f"xs{i}": x_s, f"xz{i}": np.array(x_zp, xdt), f"w{i}": w, f"ws{i}": w_s, f"wz{i}": w_z,
             f"ys{i}": y_s, f"yz{i}": np.array(y_zp, xdt)}
    ins = [f"x{i}", f"xs{i}", f"xz{i}", f"w{i}", f"ws{i}", f"wz{i}", f"ys{i}", f"yz{i}"]
    if bias:
        inits[f"b{i}"] = rng.randint(-3000, 3001, m).astype(np.int32)
        ins.append(f"b{i}")
    kw = dict(domain="com.microsoft") if op.startswith("com.microsoft.") else {}
    node = helper.make_node(op.split(".")[-1], ins, [f"y{i}"], name=f"qconv{i}", **attrs, **kw)
    lo, hi = qrange(xdt)
    x = rng.randint(lo, hi + 1, xs).astype(xdt)
    return node, inits, x


def conv_model(xdt: str, cases=CASES, forms=True, seed=7):
    """All CASES (plus the weight forms for xdt) as parallel layers of one
    model: one compile and one C build covers them all."""
    rng = np.random.RandomState(seed + (xdt == "uint8"))
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    layers = [(c[1], c[2], c[3], c[4], c[5], "int8", 0) for c in cases]
    if forms:
        layers += [((1, 3, 7, 6), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True, wdt == "uint8", wdt, wzp)
                   for _, adt, wdt, wzp in WEIGHT_FORMS if adt == xdt]
    for i, (xs, ws, attrs, bias, pc, wdt, wzp) in enumerate(layers):
        n, ini, x = _layer(rng, i, xs, ws, attrs, bias, pc, xdt, wdt, wzp)
        nodes.append(n)
        inits.update(ini)
        inputs[f"x{i}"] = (xs, xdt)
        outputs[f"y{i}"] = xdt
        feeds[f"x{i}"] = x
    return qmodel(nodes, inputs, outputs, inits), feeds


def _ids(xdt, cases=CASES):
    return [c[0] for c in cases] + [f[0] for f in WEIGHT_FORMS if f[1] == xdt]


_MODELS: dict = {}


def model_for(xdt):
    if xdt not in _MODELS:
        _MODELS[xdt] = conv_model(xdt)
    return _MODELS[xdt]


@pytest.mark.parametrize("xdt", ["int8", "uint8"])
def test_reference_vs_onnxruntime(xdt):
    m, feeds = model_for(xdt)
    ort = run_ort(m, feeds, optimize=True)
    ref_float = ref_outputs(m, feeds, "float")
    ref_fixed = ref_outputs(m, feeds, "fixed")
    for name, o, rf, rx in zip(_ids(xdt), ort, ref_float, ref_fixed):
        assert spread(o) >= 8, f"{name}: onnxruntime output nearly constant; test parameters too extreme"
        assert_exact(rf, o, f"{name} ({xdt}): reference (float requant) vs onnxruntime")
        assert_lsb(rx, o, 1, f"{name} ({xdt}): reference (fixed requant) vs onnxruntime")


@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("requant", ["fixed", "float"])
@pytest.mark.parametrize("xdt", ["int8", "uint8"])
def test_c_vs_reference(xdt, requant, nchw):
    m, feeds = model_for(xdt)
    outs, ref, g = compile_run(m, feeds, requant, nchw=nchw)
    convs = [n for n in g.nodes if n.op_type == "QLinearConv"]
    assert len(convs) == len(_ids(xdt))
    assert {n.attrs.get("_channels_last", 0) for n in convs} == {0 if nchw else 1}
    assert {n.attrs["_requant"] for n in convs} == {requant}
    for name, c, r in zip(_ids(xdt), outs, ref):
        assert_exact(c, r, f"{name} ({xdt}, {requant}, {'nchw' if nchw else 'nhwc'}): C vs reference")
    if not nchw:  # the NHWC reference is tied to the NCHW one (checked against onnxruntime)
        for name, r, r0 in zip(_ids(xdt), ref, ref_outputs(m, feeds, requant)):
            assert_exact(r, r0, f"{name}: NHWC reference vs NCHW reference")


def test_full_range_u8s8_weights():
    """Full int8 weight range with uint8 activations (onnxruntime's AVX2 path
    saturates here, see the module doc): C vs reference, and the reference
    vs an int64 convolution written out in the test."""
    rng = np.random.RandomState(3)
    n, inits, x = _layer(rng, 0, (1, 16, 6, 6), (8, 16, 3, 3), dict(pads=[1, 1, 1, 1]), True, True,
                         "uint8", full_range=True)
    m = qmodel([n], {"x0": (x.shape, "uint8")}, {"y0": "uint8"}, inits)
    outs, ref, _ = compile_run(m, {"x0": x}, "float")
    assert_exact(outs[0], ref[0], "C vs reference")
    # independent: direct loops over output positions, float32 requant as onnxruntime
    w = inits["w0"].astype(np.int64)
    xp = np.pad(x[0].astype(np.int64) - int(inits["xz0"]), [(0, 0), (1, 1), (1, 1)])
    acc = np.array([[[np.sum(xp[:, i:i + 3, j:j + 3] * w[o]) for j in range(6)] for i in range(6)]
                    for o in range(8)]) + inits["b0"].astype(np.int64)[:, None, None]
    scale = (inits["xs0"] * inits["ws0"] / inits["ys0"]).astype(np.float32)
    y = np.rint(acc.astype(np.float32) * scale[:, None, None]) + int(inits["yz0"])
    assert_exact(ref[0][0], np.clip(y, 0, 255).astype(np.uint8), "reference vs direct loops")


def test_channels_last_contrib_op():
    """com.microsoft.QLinearConv with channels_last=1 (NHWC in the model):
    onnxruntime runs it too, so the NHWC reference is checked directly."""
    rng = np.random.RandomState(11)
    nodes, inits, inputs, feeds = [], {}, {}, {}
    layers = [("uint8", (1, 7, 6, 3), (5, 3, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 1]), True, True),
              ("uint8", (1, 9, 8, 4), (8, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1]), True, True),
              ("int8", (2, 6, 7, 4), (6, 2, 3, 2), dict(group=2, pads=[0, 1, 1, 0]), False, False)]
    for i, (xdt, xs, ws, attrs, bias, pc) in enumerate(layers):
        n, ini, x = _layer(rng, i, (xs[0], xs[3], xs[1], xs[2]), ws, dict(attrs, channels_last=1), bias, pc, xdt,
                           op="com.microsoft.QLinearConv")
        nodes.append(n)
        inits.update(ini)
        inputs[f"x{i}"] = (xs, xdt)
        feeds[f"x{i}"] = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    m = qmodel(nodes, inputs, {f"y{i}": layers[i][0] for i in range(len(layers))}, inits)
    ort = run_ort(m, feeds, optimize=True)
    for requant in ("float", "fixed"):
        outs, ref, g = compile_run(m, feeds, requant)
        assert [n.op_type for n in g.nodes] == ["com.microsoft.QLinearConv"] * 3
        for i, (c, r, o) in enumerate(zip(outs, ref, ort)):
            assert spread(o) >= 8
            assert_exact(c, r, f"layer {i} ({requant}): C vs reference")
            if requant == "float":
                assert_exact(r, o, f"layer {i}: reference vs onnxruntime")
            else:
                assert_lsb(r, o, 1, f"layer {i}: reference (fixed) vs onnxruntime")


@pytest.mark.parametrize("act,bounds", [((0.0, float("inf")), "relu"), ((0.0, 6.0), "relu6"),
                                        ((-1.5, 0.75), "clip")])
def test_fused_clamp(act, bounds):
    """node.act (set by the QDQ pass for a Relu/Clip) clamps in the integer
    domain: lo = y_zp + round(lo / y_scale), hi likewise (TFLM's
    CalculateActivationRangeQuantized)."""
    cases = [c for c in CASES if c[0] in ("2d_pads", "2d_depthwise_m2_s2", "1d_pads_stride2")]
    m, feeds = conv_model("int8", cases, forms=False, seed=5)
    plain = ref_outputs(m, feeds, "fixed")
    ys = {i: float(numpy_helper.to_array(t)) for t in m.graph.initializer
          for i in range(len(cases)) if t.name == f"ys{i}"}
    yz = {i: int(numpy_helper.to_array(t)) for t in m.graph.initializer
          for i in range(len(cases)) if t.name == f"yz{i}"}

    def set_act(g):
        for n in g.nodes:
            if n.op_type == "QLinearConv":
                n.act = act

    for nchw in (False, True):
        outs, ref, _ = compile_run(m, feeds, "fixed", nchw=nchw, mutate=set_act)
        for i, (c, r, p) in enumerate(zip(outs, ref, plain)):
            lo = max(-128, yz[i] + int(np.floor(act[0] / ys[i] + 0.5)))
            hi = 127 if np.isinf(act[1]) else min(127, yz[i] + int(np.floor(act[1] / ys[i] + 0.5)))
            assert_exact(r, np.clip(p, lo, hi).astype(np.int8), f"{cases[i][0]} {bounds}: clamp")
            assert (r == lo).any(), f"{cases[i][0]} {bounds}: the clamp never bites"
            assert_exact(c, r, f"{cases[i][0]} {bounds}: C vs reference")


def test_macs():
    m, feeds = model_for("int8")
    ort = run_ort(m, feeds, optimize=True)
    expected = 0
    for (cid, xs, ws, attrs, *_), o in zip(CASES, ort):
        expected += int(np.prod(o.shape)) * int(np.prod(ws[1:]))   # outputs x (C/group x kernel)
    expected += sum(int(np.prod(o.shape)) * 3 * 9 for o in ort[len(CASES):])
    assert compile_model(m).macs == expected


@pytest.mark.parametrize("cc,flags", [("g++", ["-x", "c++", *STRICT_WARNINGS]),
                                      ("clang", ["-std=c11", *STRICT_WARNINGS])])
def test_strict_builds(cc, flags):
    """The kernels compile warning-free as C++ and with clang, both layouts."""
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed")
    cases = [c for c in CASES if c[0] in ("2d_group2", "2d_depthwise_m2_s2")]
    for xdt, requant, nchw in (("uint8", "float", False), ("int8", "fixed", True)):
        m, feeds = conv_model(xdt, cases, forms=True, seed=9)
        outs, ref, _ = compile_run(m, feeds, requant, nchw=nchw, cc=cc, cflags=flags)
        for c, r in zip(outs, ref):
            assert_exact(c, r, f"{cc} {xdt} {requant}: C vs reference")


# --------------------------------------------------------------------------- ConvInteger

INT_CASES = [
    # id, x dtype, w dtype, x shape, w shape, attrs, x zp, w zp (None: input absent; list: per channel)
    ("u8u8_zps", "uint8", "uint8", (1, 3, 8, 7), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), 120, 130),
    ("u8s8_no_zps", "uint8", "int8", (1, 3, 8, 7), (4, 3, 3, 2), dict(strides=[2, 1]), None, None),
    ("s8s8_x_zp", "int8", "int8", (1, 4, 7, 7), (6, 2, 3, 3), dict(group=2, pads=[0, 1, 1, 0]), -7, 0),
    ("u8u8_per_channel_w_zp", "uint8", "uint8", (1, 2, 9, 6), (3, 2, 2, 3), dict(dilations=[2, 1]), 3, [120, 128, 131]),
    ("s8s8_depthwise_m2", "int8", "int8", (1, 3, 8, 8), (6, 1, 3, 3),
     dict(group=3, pads=[1, 1, 1, 1], strides=[2, 2]), 5, 0),
    ("u8u8_1d", "uint8", "uint8", (1, 3, 16), (2, 3, 4), dict(pads=[2, 1]), 100, 127),
]


def int_model(ort_only=False):
    """All INT_CASES as parallel ConvInteger layers; ort_only: the per-channel
    w zero points replaced by their first value (onnxruntime rejects them)."""
    rng = np.random.RandomState(21)
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (cid, xdt, wdt, xs, ws, attrs, xz, wz) in enumerate(INT_CASES):
        if ort_only and isinstance(wz, list):
            wz = wz[0]
        lo, hi = qrange(wdt)
        inits[f"w{i}"] = rng.randint(lo, hi + 1, ws).astype(wdt)
        ins = [f"x{i}", f"w{i}"]
        if xz is not None:
            inits[f"xz{i}"] = np.array(xz, xdt)
            ins.append(f"xz{i}")
        if wz is not None:
            inits[f"wz{i}"] = np.array(wz, wdt)
            ins.append(f"wz{i}")
        nodes.append(helper.make_node("ConvInteger", ins, [f"y{i}"], name=f"convint{i}", **attrs))
        inputs[f"x{i}"] = (xs, xdt)
        outputs[f"y{i}"] = "int32"
        lo, hi = qrange(xdt)
        feeds[f"x{i}"] = rng.randint(lo, hi + 1, xs).astype(xdt)
    return qmodel(nodes, inputs, outputs, inits), feeds


def direct_conv_integer(x, w, xz, wz, attrs):
    """ConvInteger by plain loops over every output element (independent of
    ops/qconv.py; onnxruntime rejects per-channel w zero points)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
    (sh, sw), (dh, dw), group = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1]), attrs.get("group", 1)
    oh, ow = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    wz = np.broadcast_to(np.asarray(0 if wz is None else wz, np.int64), (m,))
    y = np.zeros((n, m, oh, ow), np.int64)
    for b, o, i, j in np.ndindex(n, m, oh, ow):
        g = o // (m // group)
        for ci, a, e in np.ndindex(cg, kh, kw):
            r, q = i * sh - pt + a * dh, j * sw - pl + e * dw
            if 0 <= r < h and 0 <= q < wd:
                y[b, o, i, j] += (int(x[b, g * cg + ci, r, q]) - (xz or 0)) * (int(w[o, ci, a, e]) - wz[o])
    return y.astype(np.int32)


def test_conv_integer():
    m, feeds = int_model()
    ort = run_ort(*int_model(ort_only=True), optimize=True)   # same data, per-tensor w zero points
    ref = ref_outputs(m, feeds, "fixed")
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for i, ((cid, xdt, wdt, xs, ws, attrs, xz, wz), r, o) in enumerate(zip(INT_CASES, ref, ort)):
        if isinstance(wz, list):   # per-channel: onnxruntime rejects it
            o = direct_conv_integer(feeds[f"x{i}"], inits[f"w{i}"], xz, wz, attrs)
        assert_exact(r, o, f"{cid}: reference vs onnxruntime")
    for nchw in (False, True):
        outs, ref2, g = compile_run(m, feeds, "fixed", nchw=nchw)
        assert {n.attrs.get("_channels_last", 0) for n in g.nodes if n.op_type == "ConvInteger"} == {int(not nchw)}
        for (cid, *_), c, r in zip(INT_CASES, outs, ref2):
            assert_exact(c, r, f"{cid} ({'nchw' if nchw else 'nhwc'}): C vs reference")


# --------------------------------------------------------------------------- bad input

def _bad_model(**change):
    rng = np.random.RandomState(1)
    n, inits, x = _layer(rng, 0, (1, 3, 6, 6), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True, True, "int8")
    n.name = "bad_conv"
    inits.update(change)
    return qmodel([n], {"x0": (x.shape, "int8")}, {"y0": "int8"}, inits)


@pytest.mark.parametrize("change,tensor,words", [
    (dict(xs0=np.float32(0.0)), "xs0", "finite and > 0"),
    (dict(xs0=np.float32(np.inf)), "xs0", "finite and > 0"),
    (dict(ys0=np.float32(np.nan)), "ys0", "finite and > 0"),
    (dict(ws0=np.array([0.01, -0.02, 0.01, 0.01], np.float32)), "ws0", "finite and > 0"),
    (dict(ws0=np.array([0.01, 0.02, 0.01], np.float32)), "ws0", "4 channels"),
    (dict(wz0=np.array([0, 1, 0, 0], np.int8)), "wz0", "mixed zero points on per-channel weights"),
    (dict(xz0=np.array([1, 2], np.int8)), "xz0", "zero point"),
    (dict(b0=np.zeros(3, np.int32)), "b0", "must be [4]"),
], ids=["x_scale_zero", "x_scale_inf", "y_scale_nan", "w_scale_negative", "w_scale_length",
        "w_zp_per_channel_nonzero", "x_zp_two_values", "bias_length"])
def test_bad_qparams(change, tensor, words):
    with pytest.raises(CuvilError) as e:
        compile_model(_bad_model(**change))
    msg = str(e.value)
    assert "bad_conv" in msg and f"'{tensor}'" in msg and words in msg, msg


def test_run_time_weights_rejected():
    rng = np.random.RandomState(1)
    n, inits, x = _layer(rng, 0, (1, 3, 6, 6), (4, 3, 3, 3), {}, False, False, "int8")
    w = inits.pop("w0")
    m = qmodel([n], {"x0": (x.shape, "int8"), "w0": (w.shape, "int8")}, {"y0": "int8"}, inits)
    with pytest.raises(CuvilError, match=r"qconv0.*'w0'.*run time"):
        compile_model(m)
