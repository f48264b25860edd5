"""The small U-Net of examples/make_unet.py end to end (ConvTranspose up,
bilinear Resize up, concat skips): the float model against onnxruntime, and
its int8 QDQ form (onnxruntime's quantize_static) compiled to integer
kernels only, the generated C equal to the numpy reference bit for bit, and
against onnxruntime (graph optimizations on, as users run it): every
logit equal in --requant float mode, within 1 LSB of the output scale in
--requant fixed (TFLM's arithmetic: each layer's rounding may differ by
one LSB from onnxruntime's; 1 LSB is what 16 seeded samples reach, 205 of
the 2048 logits of a sample differ)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import host
from helpers import run_ort

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SAMPLES = 4
FIXED_LSB = 1


def _inputs():
    rng = np.random.RandomState(7)
    return rng.uniform(-1, 1, (SAMPLES, 1, 3, 32, 32)).astype(np.float32)


def _run_c(c, x):
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    return host.run(exe, [x], c.out_specs, len(x))[0]


def test_unet_float_matches_onnxruntime():
    model = onnx.load(str(EXAMPLES / "unet_float.onnx"))
    c = compile_model(model)
    kinds = {n.op_type for n in c.graph.nodes}
    assert {"ConvTranspose", "Resize"} <= kinds, kinds
    xs = _inputs()
    y = _run_c(c, xs)
    for s in range(SAMPLES):
        o = run_ort(model, {"image": xs[s]})[0]
        err = float(np.abs(y[s] - o).max())
        assert err <= 1e-5 * float(np.abs(o).max()), f"sample {s}: {err} vs max {np.abs(o).max()}"


def _out_scale(model) -> float:
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "logits")
    return float(inits[dq.input[1]])


@pytest.mark.parametrize("mode,bound", [("float", 0), ("fixed", FIXED_LSB)])
def test_unet_int8(mode, bound):
    model = onnx.load(str(EXAMPLES / "unet_int8.onnx"))
    c = compile_model(model, requant=mode)
    kinds = [n.op_type for n in c.graph.nodes]
    assert "cuvil.QConvTranspose" in kinds and "cuvil.QResize" in kinds, kinds
    assert not any("mixed precision" in n for n in c.graph.notes), c.graph.notes
    xs = _inputs()
    y = _run_c(c, xs)
    scale = _out_scale(model)
    worst = 0
    for s in range(SAMPLES):
        ref = reference.run(c.graph, {"image": xs[s]})["logits"]
        assert np.array_equal(y[s], ref), f"sample {s}: generated C differs from the reference"
        o = run_ort(model, {"image": xs[s]}, optimize=True)[0]
        worst = max(worst, int(np.rint(np.abs(y[s] - o).max() / scale)))
    assert worst <= bound, f"{mode} mode: {worst} LSB from onnxruntime (bound {bound})"
