"""Recurrent layers in int8: the integer-only form --quantize int8 makes
(cuvil.QLSTM / QGRU / QRNN, ops/qrnn.py), QDQ models around float layers,
and --stream.

The integer reference is the oracle for the generated C (bit for bit, on
the host, under the sanitizers, and on the QEMU Cortex-M boards); the
reference itself is held against the float model (onnxruntime on the
PyTorch keyword models, our float reference on the unit cases) and its
activation tables against math.
"""
from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.ops.qrnn import ACT_ONE, GATE_FRAC, sigmoid_q, tanh_q
from helpers import run_c, run_ort, run_strict_builds
from qhelpers import assert_exact, sim_exact
from rnn_kws import model_path, samples, stream_build, stream_run
from test_rnn import merge, rnn_model

needs_qemu = pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                                reason="needs apt packages gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm")
QEMU_BOARDS = ["qemu-mps2-an385", "qemu-mps2-an386", "qemu-mps2-an500", "qemu-mps2-an505", "qemu-mps3-an547"]
INPUT = {"mfcc": (1, 49, 10)}


def test_activation_tables_follow_the_functions():
    """Integer sigmoid / tanh (Q3.12 in, Q0.15 out) over every int16 input:
    within 1.6 LSB of the exact function, monotone, symmetric."""
    x = np.arange(-32768, 32768, dtype=np.int64)
    v = x / float(1 << GATE_FRAC)
    s, t = sigmoid_q(x), tanh_q(x)
    assert np.abs(s - ACT_ONE / (1.0 + np.exp(-v))).max() <= 1.6
    assert np.abs(t - ACT_ONE * np.tanh(v)).max() <= 1.6
    assert np.all(np.diff(s) >= 0) and np.all(np.diff(t) >= 0)
    assert np.array_equal(t[1:][::-1], -t[1:]) and np.array_equal(s[1:] + s[1:][::-1], np.full(65535, ACT_ONE))
    assert s.max() < ACT_ONE and t.max() < ACT_ONE


# --------------------------------------------------------------------------- unit layers under --quantize

CASES = [
    ("LSTM", {}), ("LSTM", {"direction": "bidirectional", "seq": [9, 4]}),
    ("LSTM", {"direction": "reverse", "clip": 0.8, "h0": "const", "c0": "const"}),
    ("LSTM", {"input_forget": 1, "layout": 1, "H": 6}),
    ("GRU", {}), ("GRU", {"linear_before_reset": 1, "direction": "bidirectional"}),
    ("GRU", {"clip": 0.6, "h0": "const", "seq": [0, 9]}), ("GRU", {"layout": 1, "direction": "reverse"}),
    ("RNN", {}), ("RNN", {"direction": "bidirectional", "h0": "const", "clip": 1.5}),
]


def _host_outputs(c, x: np.ndarray) -> list[np.ndarray]:
    """The generated C of one-input model c on samples x [n, ...] (host cc)."""
    from cuvil_mcu.sim import host
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    return host.run(exe, [x], c.out_specs, len(x))


def _quantized(op, kw, seed=0):
    m, feeds = rnn_model(op, T=9, I=6, H=kw.pop("H", 8), outputs=("Y", "Y_h"), wscale=0.4, rscale=0.3, seed=seed,
                         **kw)
    xs = np.random.RandomState(1).randn(24, *feeds["X"].shape).astype(np.float32)
    return m, compile_model(m, quantize="int8", calibration={"X": xs}, verify_each=True), xs


@pytest.mark.parametrize("op,kw", CASES, ids=[f"{op}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'defaults'}"
                                              for op, kw in CASES])
def test_integer_layer_c_exact_and_close_to_float(op, kw):
    """The generated C equals the integer reference bit for bit; the
    integer reference stays within 3 LSB of h of exact real arithmetic on
    the same quantized operands (x, W, R, initial states dequantized), over
    all nine steps: what is measured is the integer recurrence, not the
    quantization of its operands."""
    from cuvil_mcu import quant
    from cuvil_mcu.ops import qrnn, rnn
    m, c, xs = _quantized(op, dict(kw))
    g = c.graph
    (n,) = [n for n in g.nodes if n.op_type.startswith("cuvil.Q")]
    assert n.op_type == f"cuvil.Q{op}", [n.op_type for n in g.nodes]
    ins = [g.tensors[i] if i else None for i in n.inputs]
    s = rnn.spec(n, ins)
    q = qrnn.qparams(n, ins, s)
    a = n.attrs
    x = np.random.RandomState(50).randn(3, *g.tensors["X"].shape).astype(np.float32)
    outs = _host_outputs(c, x)
    hs, hz = a["h_scale"], a["h_zp"]
    w, r, wb, rb, p = rnn.weights(n, ins, [t.data if t is not None and t.is_const else None for t in ins], s)
    h0 = (q.h0 - hz) * hs if q.h0 is not None else np.zeros((s.D, s.B, s.H))
    c0 = q.c0 * 2.0 ** -q.cell_pow if q.c0 is not None else np.zeros((s.D, s.B, s.H))
    worst = 0.0
    for i in range(len(x)):
        ref = reference.run(g, {"X": x[i]})
        for name, o in zip(g.outputs, outs):
            assert_exact(o[i], ref[name], f"{name} sample {i}: generated C vs integer reference")
        xq = quant.quantize(x[i], np.float32(a["x_scale"]), a["x_zp"], "int8").astype(np.float64)
        xd = rnn.time_major((xq - a["x_zp"]) * np.float32(a["x_scale"]), s.layout)
        y, yh, _ = rnn.run_float(s, xd, w, r, wb, rb, p, h0, c0)
        exact = rnn.pack_outputs(s, y, yh, yh, np.float64)[:2]
        for name, e in zip(g.outputs, exact):
            got = reference.run(g, {"X": x[i]})[name]      # float (after DequantizeLinear)
            worst = max(worst, float(np.abs(got - e).max()) / hs)
    assert worst <= 3.0, f"integer layer vs exact arithmetic on its operands: {worst:.2f} LSB of h"


def test_integer_layers_strict_builds():
    """-Werror C99 / C11 / C++ with gcc and clang, ASan + UBSan, every
    integer kernel variant in one model."""
    parts = [rnn_model(op, T=9, I=6, H=8, outputs=("Y", "Y_h"), wscale=0.4, rscale=0.3, **kw)
             for op, kw in (("LSTM", {"direction": "bidirectional", "clip": 0.8, "seq": [9, 4]}),
                            ("GRU", {"linear_before_reset": 1}), ("GRU", {"h0": "const"}), ("RNN", {"layout": 1}))]
    m, feeds = merge(parts)
    calib = {k: np.random.RandomState(1).randn(16, *v.shape).astype(np.float32) for k, v in feeds.items()}
    c = compile_model(m, quantize="int8", calibration=calib)
    assert sorted(n.op_type for n in c.graph.nodes if n.op_type.startswith("cuvil.Q")) == \
        ["cuvil.QGRU", "cuvil.QGRU", "cuvil.QLSTM", "cuvil.QRNN"]
    run_strict_builds(c, feeds, exact=True)


@pytest.mark.parametrize("what", ["peepholes", "activations", "Y_c read"])
def test_layers_without_an_integer_form_are_not_quantized(what):
    kw = {"peepholes": {"peep": True}, "activations": {"activations": ["Sigmoid", "Relu", "Tanh"]},
          "Y_c read": {}}[what]
    outs = ("Y", "Y_h", "Y_c") if what == "Y_c read" else ("Y", "Y_h")
    m, feeds = rnn_model("LSTM", T=6, I=5, H=4, outputs=outs, **kw)
    xs = np.random.RandomState(1).randn(8, *feeds["X"].shape).astype(np.float32)
    with pytest.raises(Exception) as e:
        compile_model(m, quantize="int8", calibration={"X": xs})
    assert "no node of this model has an int8 form" in str(e.value)


def test_qdq_model_around_a_float_layer_matches_onnxruntime():
    """A QDQ model (QuantizeLinear/DequantizeLinear on X and Y, DequantizeLinear
    weights) compiles in mixed precision: the LSTM runs in float, as
    onnxruntime runs it, on int8 weights kept in flash; the quantized output
    is within 1 LSB of onnxruntime's."""
    from onnx import helper, numpy_helper
    m, feeds = rnn_model("LSTM", T=7, I=5, H=6, B=1, outputs=("Y",), int8_weights=True, rscale=0.3)
    g = m.graph
    lstm = g.node[-1]
    lstm.input[0], lstm.output[0] = "X_dq", "Y_f"
    for name, s, z in (("x", 0.03, 3), ("y", 1 / 128, -2)):
        g.initializer.extend([numpy_helper.from_array(np.array(s, np.float32), f"{name}_s"),
                              numpy_helper.from_array(np.array(z, np.int8), f"{name}_z")])
    g.node.insert(0, helper.make_node("QuantizeLinear", ["X", "x_s", "x_z"], ["X_q"]))
    g.node.insert(1, helper.make_node("DequantizeLinear", ["X_q", "x_s", "x_z"], ["X_dq"]))
    g.node.extend([helper.make_node("QuantizeLinear", ["Y_f", "y_s", "y_z"], ["Y_q"]),
                   helper.make_node("DequantizeLinear", ["Y_q", "y_s", "y_z"], ["Y"])])
    onnx.checker.check_model(m)
    c = compile_model(m)
    lstm_ops = [n for n in c.graph.nodes if n.op_type == "LSTM"]
    assert len(lstm_ops) == 1 and c.graph.tensors[lstm_ops[0].inputs[1]].dtype == "int8"
    assert any("mixed precision" in n and "LSTM" in n for n in c.graph.notes), c.graph.notes
    for seed in range(3):
        x = np.random.RandomState(seed).randn(7, 1, 5).astype(np.float32)
        (got,) = run_c(m, {"X": x})
        (want,) = run_ort(m, {"X": x})
        lsb = np.abs(got - want).max() * 128
        assert lsb <= 1.0 + 1e-3, f"{lsb} LSB from onnxruntime"


# --------------------------------------------------------------------------- the PyTorch keyword models

@pytest.fixture(scope="module", params=["lstm", "gru"])
def kws(request):
    kind = request.param
    m = onnx.load(model_path(kind))
    calib, _ = samples(64, seed=5)
    c = compile_model(m, input_shapes=INPUT, quantize="int8", calibration={"mfcc": calib})
    return kind, m, c, calib


def test_keyword_model_int8_against_float(kws):
    """int8 vs the float model in onnxruntime on 200 test utterances:
    argmax agreement and logit error (measured: LSTM 99.0% / mean 1.7%,
    GRU 98.5% / 1.2% of the largest |logit|)."""
    kind, m, c, _ = kws
    assert [n.op_type for n in c.graph.nodes if n.op_type.startswith("cuvil.Q")] == [f"cuvil.Q{kind.upper()}"]
    x, labels = samples(200, seed=6)
    (q,) = _host_outputs(c, x)          # the generated C: bit-exact with the reference (next test)
    agree, rel = 0, []
    for i in range(len(x)):
        (f,) = run_ort(m, {"mfcc": x[i]})
        agree += int(q[i].argmax() == f.argmax())
        rel.append(float(np.abs(q[i] - f).max() / np.abs(f).max()))
    assert agree >= 0.975 * len(x), f"{kind}: argmax agreement {agree}/{len(x)}"
    assert np.mean(rel) <= 0.025, f"{kind}: mean relative logit error {np.mean(rel):.4f}"


def test_keyword_model_int8_c_exact_on_host(kws):
    kind, m, c, calib = kws
    x, _ = samples(4, seed=7)
    (outs,) = _host_outputs(c, x)
    for i in range(len(x)):
        assert_exact(outs[i], reference.run(c.graph, {"mfcc": x[i]})["logits"], f"{kind} sample {i}")


@needs_qemu
@pytest.mark.parametrize("board", QEMU_BOARDS)
def test_keyword_model_int8_on_boards(kws, board):
    """Bit for bit with the integer reference on each emulated core."""
    kind, m, _, calib = kws
    c = compile_model(m, board=board, input_shapes=INPUT, quantize="int8", calibration={"mfcc": calib})
    x, _ = samples(1, seed=8)
    r, _ = sim_exact(c, {"mfcc": x[0]}, min_unique=5)
    assert "warning:" not in r.warnings, r.warnings


def test_keyword_model_int8_streams_bit_exact(kws, tmp_path):
    """--stream at one frame per call (state kept in the arena, calibrated
    on whole utterances): after the 49th frame the logits equal the
    whole-window int8 model's bit for bit, for each of two utterances
    with a reset in between."""
    kind, m, c, calib = kws
    s = compile_model(m, input_shapes={"mfcc": (1, 1, 10)}, stream=True, quantize="int8",
                      calibration={"mfcc": calib}, verify_each=True)
    g = s.graph
    assert [t.dtype for t in (g.tensors[n] for n in g.inputs)] == \
        ["float32", "int8"] + (["int16"] if kind == "lstm" else [])
    x, _ = samples(2, seed=9)
    frames = np.concatenate([x[i, 0][:, None, None, :] for i in range(2)])      # [98, 1, 1, 10]
    exe = stream_build(s.header, tmp_path)
    outs = stream_run(exe, frames, 49, (1, 12), np.float32)
    for i in range(2):
        whole = reference.run(c.graph, {"mfcc": x[i]})["logits"]
        assert_exact(outs[49 * i + 48], whole, f"{kind} utterance {i}: 49 streamed frames vs whole window")
    assert s.plan.arena_size < c.plan.arena_size, (s.plan.arena_size, c.plan.arena_size)


@needs_qemu
@pytest.mark.parametrize("board", ["qemu-mps2-an385", "qemu-mps2-an386"])
def test_every_integer_variant_on_boards(board):
    """The DSP-extension kernel path (M4) and the plain C one (M3) of every
    variant — bidirectional LSTM with clip and sequence lengths, GRU with
    linear_before_reset 0 and 1, an RNN in layout 1 with an odd hidden size
    (the row-pair tail) — bit for bit with the integer reference."""
    parts = [rnn_model(op, T=7, I=kw.pop("I", 6), H=kw.pop("H", 8), outputs=("Y", "Y_h"), wscale=0.4, rscale=0.3,
                       **kw)
             for op, kw in (("LSTM", {"direction": "bidirectional", "clip": 0.8, "seq": [7, 3]}),
                            ("GRU", {"linear_before_reset": 1, "I": 5}), ("GRU", {"h0": "const", "H": 6}),
                            ("RNN", {"layout": 1, "H": 5, "I": 3}))]
    m, feeds = merge(parts)
    calib = {k: np.random.RandomState(1).randn(16, *v.shape).astype(np.float32) for k, v in feeds.items()}
    c = compile_model(m, board=board, quantize="int8", calibration=calib)
    r, _ = sim_exact(c, feeds, min_unique=3)
    assert "warning:" not in r.warnings, r.warnings
