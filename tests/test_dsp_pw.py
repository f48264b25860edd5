"""The pointwise pixel loop in assembly (cuvil_mcu/isa/dsp_conv.py emit_pw,
kernels/qconv2_pwblk_dsp.c.j2): random 1x1 layers with small K (8..56),
with and without the rounding's sign fix (output zero point at the clamp's
low end or not), one common shift or per-channel shifts, odd pixel counts,
run on qemu-mps2-an386 and equal to the numpy reference bit for bit."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from onnx import numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from test_isa_dsp import build

# x (NCHW), w: K in {8, 12, 16, 24, 56}, M % 4 == 0 (the natural order), pixel counts odd and even
LAYERS = [((1, 8, 5, 7), (48, 8, 1, 1)), ((1, 12, 3, 5), (20, 12, 1, 1)), ((1, 16, 4, 4), (96, 16, 1, 1)),
          ((1, 24, 3, 3), (36, 24, 1, 1)), ((1, 56, 3, 1), (8, 56, 1, 1)), ((1, 16, 7, 3), (8, 16, 1, 1)),
          ((1, 8, 1, 1), (12, 8, 1, 1))]


def _model():
    # per-tensor weight scales on layers 0 and 3: one shift for every channel
    model, feeds = build([("conv", (xs, ws, {}), {"per_channel": i not in (0, 3)}) for i, (xs, ws) in enumerate(LAYERS)],
                         seed=41)
    for t in model.graph.initializer:
        if t.name.startswith("yz") and int(t.name[2:]) % 2:   # the clamp's low end at the zero point: no sign fix
            t.CopyFrom(numpy_helper.from_array(np.array(-128, np.int8), t.name))
    return model, feeds


@pytest.mark.parametrize("rev", [False, True])
def test_pointwise_asm_on_qemu(rev, monkeypatch):
    """rev: every node takes its "rev" loop order (pixel pairs from the last
    down, as the planner picks it for an output above its input)."""
    if not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    from cuvil_mcu import codegen
    from cuvil_mcu.sim import qemu
    if rev:   # (only the "rev" orders may alias, and every kernel runs its "rev" order)
        order = codegen.Emitter.order
        monkeypatch.setattr(codegen.Emitter, "order",
                            lambda self, i, o, variant=None: order(self, i, o, variant) if variant == "rev" else None)
        monkeypatch.setattr(codegen.Emitter, "variant", lambda self: "rev")
    model, feeds = _model()
    c = compile_model(model, board="qemu-mps2-an386")
    names = set(re.findall(r"__qconv2_dsp_pw_(\w+)\(", c.header))
    assert {n.split("_")[0] for n in names} == {"n", "nc"}, names
    assert all(n.endswith("_rev") for n in names) if rev else any(not n.endswith("_rev") for n in names), names
    assert any("_e" in n for n in names) and any("_e" not in n for n in names), names
    assert any("_k" in n for n in names) and any("_k" not in n for n in names), names
    g = c.graph
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, "qemu-mps2-an386")
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        assert np.unique(ref[name]).size > 4, name
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=name)
