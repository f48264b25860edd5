"""LSTM, GRU and RNN in float32 (cuvil_mcu/ops/rnn.py, templates/kernels/rnn_f32.c.j2).

Every case is checked three ways: the numpy reference against onnxruntime
(graph optimizations off), the generated C (host compiler) against the
reference, and — layout 1, which onnxruntime refuses — against
onnxruntime on the same weights in layout 0 with the data transposed.
The ONNX node suite's test_lstm_*, test_gru_*, test_rnn_* / test_simple_rnn_*
cases run in tests/test_onnx_backend.py. The PyTorch keyword models
(tests/rnn_models/) run on the host and on QEMU boards at the end.
"""
from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import UnsupportedOpError
from helpers import assert_close, check_strict_builds, make_model, run_c, run_ort, run_ref

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
# reference vs onnxruntime, generated C vs reference: relative to max(1, |expected|)
REL_ORT, REL_C = 2e-6, 2e-6


def rnn_model(op, T=5, B=2, I=3, H=4, seed=0, outputs=("Y", "Y_h", "Y_c"), bias=True, seq=None,
              h0=None, c0=None, peep=False, int8_weights=False, opset=14, rscale=0.6, wscale=0.6,
              **attrs):
    """One recurrent node over input X. h0 / c0: 'input' (a graph input),
    'const' (an initializer) or None; seq: sequence lengths (an initializer);
    wscale / rscale: the input / recurrent weights' standard deviation."""
    rng = np.random.default_rng(seed)
    G = GATES[op]
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    xshape = [B, T, I] if attrs.get("layout") else [T, B, I]
    sshape = [B, D, H] if attrs.get("layout") else [D, B, H]
    inits = {"W": (rng.standard_normal((D, G * H, I)) * wscale).astype(np.float32),
             "R": (rng.standard_normal((D, G * H, H)) * rscale).astype(np.float32)}
    inputs = {"X": (xshape, "float32")}
    names = ["X", "W", "R"]
    names.append("B" if bias else "")
    if bias:
        inits["B"] = (rng.standard_normal((D, 2 * G * H)) * 0.5).astype(np.float32)
    names.append("seq" if seq is not None else "")
    if seq is not None:
        inits["seq"] = np.asarray(seq, np.int32)
    for name, how in (("h0", h0), ("c0", c0 if op == "LSTM" else None)):
        names.append(name if how else "")
        if how == "input":
            inputs[name] = (sshape, "float32")
        elif how == "const":
            inits[name] = rng.uniform(-1, 1, sshape).astype(np.float32)
    if peep:
        names.append("P")
        inits["P"] = rng.uniform(-1, 1, (D, 3 * H)).astype(np.float32)
    while names[-1] == "":
        names.pop()
    outs = [o if o in outputs else "" for o in ("Y", "Y_h", "Y_c")[:3 if op == "LSTM" else 2]]
    while outs[-1] == "":
        outs.pop()
    nodes = []
    if int8_weights:
        # a QDQ model's weights: int8 constants with a per-row (axis 1) scale
        for w in ("W", "R"):
            f = inits.pop(w)
            scale = (np.abs(f).max(axis=2) / 127).astype(np.float32)            # [D, G*H]
            q = np.clip(np.rint(f / scale[:, :, None]), -127, 127).astype(np.int8)
            inits[f"{w}_q"], inits[f"{w}_s"] = q, scale.reshape(-1) if D == 1 else scale
            if D != 1:   # per-axis scales are 1-D: quantize each direction on its own
                raise ValueError("int8_weights: one direction")
            inits[f"{w}_z"] = np.zeros(G * H, np.int8)
            nodes.append(helper.make_node("DequantizeLinear", [f"{w}_q", f"{w}_s", f"{w}_z"], [w], axis=1))
    nodes.append(helper.make_node(op, names, outs, name=f"{op.lower()}_node", hidden_size=H, **attrs))
    m = make_model(nodes, inputs, [o for o in outs if o], inits, opset=opset if not int8_weights else 13)
    feeds = {"X": rng.standard_normal(xshape).astype(np.float32)}
    for name in ("h0", "c0"):
        if name in inputs:
            feeds[name] = rng.uniform(-1, 1, sshape).astype(np.float32)
    return m, feeds


def merge(models_feeds):
    """One model holding every (model, feeds) pair's graph side by side
    (names prefixed m0_, m1_, ...), and the merged feeds: one compile and
    one build for many layers."""
    from onnx import compose
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for i, (m, f) in enumerate(models_feeds):
        p = compose.add_prefix(m, f"m{i}_")
        nodes += p.graph.node
        inputs += p.graph.input
        outputs += p.graph.output
        inits += p.graph.initializer
        feeds.update({f"m{i}_{k}": v for k, v in f.items()})
    opset = max(o.version for m, _ in models_feeds for o in m.opset_import if o.domain in ("", "ai.onnx"))
    g = helper.make_graph(nodes, "merged", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 9)
    onnx.checker.check_model(m)
    return m, feeds


def check(m, feeds, ort_model=None, ort_feeds=None, to_layout=None):
    """reference vs onnxruntime (on ort_model/ort_feeds when given, outputs
    mapped by to_layout), generated C vs reference; returns the reference."""
    ref = run_ref(m, feeds)
    o = run_ort(ort_model or m, ort_feeds or feeds)
    if to_layout is not None:
        o = [to_layout(i, v) for i, v in enumerate(o)]
    c = run_c(m, feeds)
    for i, (r, x, y) in enumerate(zip(ref, o, c)):
        assert_close(r, x, REL_ORT, f"output {i}: reference vs onnxruntime")
        assert_close(y, r, REL_C, f"output {i}: generated C vs reference")
        assert np.unique(r).size > 1 or r.size == 1, f"output {i} is constant: the case tests nothing"
    return ref


ACTS = {"LSTM": ["HardSigmoid", "Relu", "Softsign", "Sigmoid", "Elu", "Softplus"],
        "GRU": ["LeakyRelu", "ScaledTanh", "Softsign", "Affine"],
        "RNN": ["ScaledTanh", "ThresholdedRelu"]}
CASES = [
    ("LSTM", {}), ("LSTM", {"direction": "reverse"}), ("LSTM", {"direction": "bidirectional"}),
    ("LSTM", {"clip": 0.4}), ("LSTM", {"input_forget": 1}),
    ("LSTM", {"peep": True, "h0": "input", "c0": "input"}),
    ("LSTM", {"direction": "bidirectional", "peep": True, "h0": "const", "c0": "const", "seq": [5, 2]}),
    ("LSTM", {"direction": "reverse", "seq": [3, 0], "bias": False}),
    ("LSTM", {"outputs": ("Y_c",)}), ("LSTM", {"outputs": ("Y",), "H": 7, "B": 1, "T": 9}),
    ("LSTM", {"direction": "bidirectional", "clip": 0.7, "activations": ACTS["LSTM"],
              "activation_alpha": [0.3, 0.8], "activation_beta": [0.2]}),
    ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("GRU", {"direction": "reverse", "linear_before_reset": 1}),
    ("GRU", {"direction": "bidirectional", "h0": "input", "seq": [4, 1]}),
    ("GRU", {"clip": 0.3, "h0": "const"}), ("GRU", {"outputs": ("Y_h",), "H": 5}),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1, "activations": ACTS["GRU"],
             "activation_alpha": [0.2, 1.5, 0.7], "activation_beta": [0.6, 0.1]}),
    ("RNN", {}), ("RNN", {"direction": "bidirectional", "h0": "input", "seq": [2, 5]}),
    ("RNN", {"clip": 0.5, "activations": ["Sigmoid"]}),
    ("RNN", {"direction": "bidirectional", "activations": ACTS["RNN"], "activation_alpha": [0.9, 0.1],
             "activation_beta": [1.3]}),
]


@pytest.mark.parametrize("op,kw", CASES, ids=[f"{op}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'defaults'}"
                                              for op, kw in CASES])
def test_matches_onnxruntime(op, kw):
    m, feeds = rnn_model(op, **kw)
    check(m, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_layout_1_matches_layout_0_in_onnxruntime(op):
    """onnxruntime refuses layout 1: compare with its layout-0 result on the
    same weights, inputs and outputs transposed (batch first)."""
    kw = dict(direction="bidirectional", h0="input", seq=[5, 3], **({"c0": "input"} if op == "LSTM" else {}))
    m1, f1 = rnn_model(op, layout=1, seed=4, **kw)
    m0, _ = rnn_model(op, seed=4, **kw)
    f0 = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for k, v in f1.items()}
    check(m1, f1, m0, f0, lambda i, v: np.ascontiguousarray(np.transpose(v, (2, 0, 1, 3)) if i == 0
                                                            else np.swapaxes(v, 0, 1)))


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_int8_weights_stay_int8_in_flash(op):
    """A QDQ model's DequantizeLinear weights feeding the layer: the int8
    weights and per-row scales are what goes into flash (not float copies),
    and the result matches onnxruntime on the same model."""
    kw = {"linear_before_reset": 1} if op == "GRU" else {}
    m, feeds = rnn_model(op, H=8, I=6, T=6, int8_weights=True, h0="input", **kw)
    check(m, feeds)
    c = compile_model(m)
    g = c.graph
    (n,) = [n for n in g.nodes if n.op_type == op]
    assert g.tensors[n.inputs[1]].dtype == "int8" and g.tensors[n.inputs[2]].dtype == "int8"
    # against the same layer with float weights: each weight 1 byte instead
    # of 4, plus one float scale per row for the x part and the h part
    gh = GATES[op] * 8
    mf, _ = rnn_model(op, H=8, I=6, T=6, h0="input", **kw)
    assert c.weights_bytes == compile_model(mf).weights_bytes - 3 * gh * (6 + 8) + 2 * 4 * gh


def test_strict_builds_and_sanitizers():
    """-Wall -Wextra -Werror -pedantic as C99 / C11 / C++ (gcc, clang),
    AddressSanitizer + UBSan, for every kernel variant family."""
    m, feeds = merge([rnn_model("LSTM", direction="bidirectional", peep=True, clip=0.5, seq=[5, 3], h0="input",
                                c0="input"),
                      rnn_model("GRU", linear_before_reset=1, outputs=("Y_h",)),
                      rnn_model("GRU", direction="reverse", int8_weights=True),
                      rnn_model("RNN", layout=1, activations=["Relu"])])
    check_strict_builds(m, feeds, rel=REL_C)


# --------------------------------------------------------------------------- bad input

def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def test_runtime_sequence_lens_is_refused_by_name():
    m, _ = rnn_model("LSTM", seq=[5, 2])
    _make_input(m, "seq", onnx.TensorProto.INT32)
    with pytest.raises(UnsupportedOpError) as e:
        compile_model(m)
    msg = _one_line(e)
    assert "lstm_node" in msg and "sequence_lens 'seq'" in msg and "run-time" in msg, msg


def _make_input(m, name, elem_type):
    """Turn initializer `name` of model m into a graph input of the same shape."""
    init = [i for i in m.graph.initializer if i.name == name][0]
    m.graph.initializer.remove(init)
    m.graph.input.append(helper.make_tensor_value_info(name, elem_type, list(init.dims)))


def test_unknown_activation_is_refused_by_name():
    m, _ = rnn_model("GRU")
    a = [x for x in m.graph.node[0].attribute] + [helper.make_attribute("activations", ["Sigmoid", "Swish"])]
    del m.graph.node[0].attribute[:]
    m.graph.node[0].attribute.extend(a)
    with pytest.raises(UnsupportedOpError) as e:
        compile_model(m)
    msg = _one_line(e)
    assert "gru_node" in msg and "activations" in msg and "'Swish'" in msg, msg


def test_wrong_number_of_activations_is_refused():
    m, _ = rnn_model("LSTM", direction="bidirectional", activations=["Sigmoid", "Tanh", "Tanh"])
    with pytest.raises(UnsupportedOpError, match=r"lstm_node.*activations has 3 entries.*takes 6"):
        compile_model(m)


def test_runtime_weights_are_refused():
    m, _ = rnn_model("RNN")
    _make_input(m, "R", onnx.TensorProto.FLOAT)
    with pytest.raises(UnsupportedOpError, match=r"rnn_node.*input R 'R' must be a constant"):
        compile_model(m)


def test_cli_errors_are_one_line_and_write_nothing(tmp_path):
    """A run-time sequence_lens and an unknown activation, through `gen`:
    exit 2, one stderr line naming the node and the input / attribute, no
    files; --stream on a bidirectional layer likewise."""
    from test_cli import cli, fails
    m, _ = rnn_model("LSTM", seq=[5, 2])
    _make_input(m, "seq", onnx.TensorProto.INT32)
    onnx.save(m, tmp_path / "seq.onnx")
    m, _ = rnn_model("GRU", activations=["Sigmoid", "Swish"])
    onnx.save(m, tmp_path / "act.onnx")
    m, _ = rnn_model("RNN", direction="bidirectional")
    onnx.save(m, tmp_path / "bi.onnx")
    for model, extra, words in (("seq.onnx", [], ["lstm_node", "sequence_lens 'seq'"]),
                                ("act.onnx", [], ["gru_node", "activations", "'Swish'"]),
                                ("bi.onnx", ["--stream"], ["rnn_node", "bidirectional", "--stream"])):
        out = tmp_path / f"out_{model}"
        msg = fails(cli("gen", tmp_path / model, "-o", out, *extra), out=out)
        assert all(w in msg for w in words), msg


# --------------------------------------------------------------------------- the PyTorch keyword models

from rnn_kws import model_path, samples, stream_build, stream_run  # noqa: E402

KWS_INPUT = {"mfcc": (1, 49, 10)}
# generated C / QEMU vs onnxruntime on the keyword models: relative to max |logit|
REL_KWS = 1e-5


@pytest.fixture(scope="module", params=["lstm", "gru"])
def kws_float(request):
    return request.param, onnx.load(model_path(request.param))


def test_keyword_model_float_on_host(kws_float):
    kind, m = kws_float
    c = compile_model(m, input_shapes=KWS_INPUT)
    assert [n.op_type for n in c.graph.nodes].count(kind.upper()) == 1
    x, _ = samples(6, seed=3)
    from cuvil_mcu.sim import host
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    (outs,) = host.run(exe, [x], c.out_specs, len(x))
    for i in range(len(x)):
        (want,) = run_ort(m, {"mfcc": x[i]})
        assert_close(outs[i], want, REL_KWS, f"{kind} sample {i}: generated C vs onnxruntime")


_QEMU = pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                           reason="needs apt packages gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm")


@_QEMU
@pytest.mark.parametrize("board", ["qemu-mps2-an386", "qemu-mps3-an547"])
def test_keyword_model_float_on_boards(kws_float, board):
    """newlib's expf / tanhf and the FPU on the emulated core: within
    REL_KWS of onnxruntime (and of the host reference, sim's own check)."""
    from cuvil_mcu.sim import qemu
    kind, m = kws_float
    c = compile_model(m, board=board, input_shapes=KWS_INPUT)
    x, _ = samples(2, seed=4)
    r = qemu.simulate(c, [x])
    assert "warning:" not in r.warnings, r.warnings
    cmp = qemu.compare(r.outputs, qemu.reference_outputs(c, [x]), c.graph.outputs)
    assert cmp.ok, cmp.first_mismatch
    for i in range(len(x)):
        (want,) = run_ort(m, {"mfcc": x[i]})
        assert_close(r.outputs[0][i], want, REL_KWS, f"{kind} on {board}, sample {i}: vs onnxruntime")


def test_keyword_model_float_streams(kws_float, tmp_path):
    """--stream, one frame per call, the state left in the arena: after 49
    frames the logits match onnxruntime on the whole utterance, for two
    utterances with model_reset() in between; the header says how."""
    kind, m = kws_float
    c = compile_model(m, input_shapes={"mfcc": (1, 1, 10)}, stream=True, verify_each=True)
    assert "model_reset(arena)" in c.header and "MODEL_NUM_STATES" in c.header
    g = c.graph
    for inp, out, _ in g.state:       # aliased: the same bytes
        assert c.plan.tensor_offset[inp] == c.plan.tensor_offset[out]
    x, _ = samples(2, seed=9)
    frames = np.concatenate([x[i, 0][:, None, None, :] for i in range(2)])
    outs = stream_run(stream_build(c.header, tmp_path), frames, 49, (1, 12), np.float32)
    for i in range(2):
        (want,) = run_ort(m, {"mfcc": x[i]})
        assert_close(outs[49 * i + 48], want, REL_KWS, f"{kind} utterance {i}: streamed vs onnxruntime")


def test_kernel_tanh_and_sigmoid_over_every_step(tmp_path):
    """The kernels' own tanh / sigmoid (templates/kernels/rnn_act_f32.c.j2),
    called from a program that includes a generated header, on every
    step of 3e-5 over [-12, 12]: within 4.5e-7 relative (tanh) and
    2.5e-7 absolute (sigmoid) of numpy's float64 functions."""
    import subprocess
    m, _ = rnn_model("LSTM")
    (tmp_path / "model.h").write_text(compile_model(m).header)
    (tmp_path / "main.c").write_text(r"""
#include <stdio.h>
#define MODEL_IMPLEMENTATION
#include "model.h"
int main(void)
{
    float v, out[2];
    while (fread(&v, sizeof v, 1, stdin) == 1) {
        out[0] = model__rnn_tanh(v);
        out[1] = model__rnn_sigmoid(v);
        fwrite(out, sizeof out, 1, stdout);
    }
    return 0;
}
""")
    exe = tmp_path / "act"
    subprocess.run(["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{tmp_path}",
                    str(tmp_path / "main.c"), "-o", str(exe), "-lm"], check=True, capture_output=True)
    x = np.arange(-12.0, 12.0, 3e-5).astype(np.float32)
    r = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True, timeout=120)
    t, s = np.frombuffer(r.stdout, np.float32).reshape(-1, 2).T.astype(np.float64)
    xd = x.astype(np.float64)
    exact_t = np.tanh(xd)
    rel = np.abs(t - exact_t) / np.maximum(np.abs(exact_t), 1e-30)
    assert rel.max() <= 4.5e-7, f"tanh: {rel.max():.3g} at x = {x[np.argmax(rel)]!r}"
    ab = np.abs(s - 1.0 / (1.0 + np.exp(-xd)))
    assert ab.max() <= 2.5e-7, f"sigmoid: {ab.max():.3g} at x = {x[np.argmax(ab)]!r}"


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("last_step", [False, True])
def test_batch_first_pattern_runs_without_copies(op, last_step):
    """PyTorch's batch_first export (Transpose -> layer -> Squeeze ->
    Transpose [-> Gather(-1)]) with batch 3: no Transpose is left, the
    layer reads x in layout 1 (and writes only Y_h when only the last
    step is read), and the result still matches onnxruntime."""
    rng = np.random.default_rng(5)
    B, T, I, H = 3, 6, 4, 5
    G = GATES[op]
    inits = {"W": rng.standard_normal((1, G * H, I)).astype(np.float32) * 0.5,
             "R": rng.standard_normal((1, G * H, H)).astype(np.float32) * 0.5,
             "B": rng.standard_normal((1, 2 * G * H)).astype(np.float32) * 0.5,
             "h0": np.zeros((1, B, H), np.float32), "axes": np.array([1], np.int64),
             "last": np.array(-1, np.int64)}
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node(op, ["xt", "W", "R", "B", "", "h0"], outs, hidden_size=H, name="layer"),
             helper.make_node("Squeeze", ["Y", "axes"], ["ys"]),
             helper.make_node("Transpose", ["ys"], ["y"], perm=[1, 0, 2])]
    if last_step:
        nodes.append(helper.make_node("Gather", ["y", "last"], ["z"], axis=1))
    m = make_model(nodes, {"x": ([B, T, I], "float32")}, ["z" if last_step else "y"], inits, opset=14)
    x = rng.standard_normal((B, T, I)).astype(np.float32)
    c = compile_model(m, verify_each=True)
    ops_left = [n.op_type for n in c.graph.nodes]
    assert "Transpose" not in ops_left and "Gather" not in ops_left, ops_left
    (layer,) = [n for n in c.graph.nodes if n.op_type == op]
    assert layer.attrs["layout"] == 1 and layer.inputs[0] == "x"
    assert (layer.outputs[0] == "") == last_step
    (got,) = run_c(m, {"x": x})
    (want,) = run_ort(m, {"x": x})
    assert_close(got, want, REL_ORT, "generated C vs onnxruntime")


def test_batch_first_pattern_left_alone_when_states_are_read():
    """Y_h is a model output: the layer keeps layout 0 (its Y_h layout would change)."""
    rng = np.random.default_rng(6)
    inits = {"W": rng.standard_normal((1, 12, 4)).astype(np.float32),
             "R": rng.standard_normal((1, 12, 4)).astype(np.float32), "axes": np.array([1], np.int64)}
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("GRU", ["xt", "W", "R"], ["Y", "Y_h"], hidden_size=4, name="layer"),
             helper.make_node("Squeeze", ["Y", "axes"], ["ys"]),
             helper.make_node("Transpose", ["ys"], ["y"], perm=[1, 0, 2])]
    m = make_model(nodes, {"x": ([2, 5, 4], "float32")}, ["y", "Y_h"], inits, opset=14)
    c = compile_model(m, verify_each=True)
    assert [n.op_type for n in c.graph.nodes].count("Transpose") == 2
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    for got, want in zip(run_c(m, {"x": x}), run_ort(m, {"x": x})):
        assert_close(got, want, REL_ORT, "generated C vs onnxruntime")


@_QEMU
def test_every_float_variant_on_the_m4():
    """FMA and the kernels' tanh / sigmoid on a Cortex-M4F: every float
    variant (peepholes, clip, int8 weights, layout 1, odd sizes) within the
    float tolerance of the reference."""
    from cuvil_mcu.sim import qemu
    m, feeds = merge([rnn_model("LSTM", direction="bidirectional", peep=True, clip=0.5, seq=[5, 3], h0="input",
                                c0="input"),
                      rnn_model("GRU", linear_before_reset=1, outputs=("Y_h",), H=5),
                      rnn_model("GRU", direction="reverse", int8_weights=True),
                      rnn_model("RNN", layout=1, activations=["Relu"], H=3)])
    c = compile_model(m, board="qemu-mps2-an386")
    g = c.graph
    xs = [np.asarray(feeds[n], g.tensors[n].dtype)[None] for n in g.inputs]
    r = qemu.simulate(c, xs)
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        assert_close(o[0], ref[name], REL_C, f"{name} on the M4 vs reference")


def test_stream_refusals_name_the_node():
    from cuvil_mcu.errors import CuvilError
    cases = [(rnn_model("LSTM", direction="reverse")[0], "direction=reverse"),
             (rnn_model("GRU", seq=[5, 2])[0], "sequence_lens"),
             (make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": ([2], "float32")}, ["y"]), "no recurrent")]
    for m, words in cases:
        with pytest.raises(CuvilError, match=words):
            compile_model(m, stream=True)
    # a run-time initial state that other nodes read too
    m, _ = rnn_model("RNN", h0="input")
    m.graph.node.append(helper.make_node("Relu", ["h0"], ["h0_relu"]))
    m.graph.output.append(helper.make_tensor_value_info("h0_relu", onnx.TensorProto.FLOAT, [1, 2, 4]))
    with pytest.raises(CuvilError, match="rnn_node.*shares its initial state 'h0'"):
        compile_model(m, stream=True)
