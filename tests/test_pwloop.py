"""The bookkeeping around the K loop of the pointwise block kernels
(cuvil_mcu/isa/dsp_conv.py emit_pw, kernels/qconv2_pwblk_dsp.c.j2): the
_x kernels (K past 2 NKP_UNROLL_PW, xe in the arena) split each pixel
pair's inputs without a loop (immediate offsets, two 4-byte groups a STM,
an odd last group alone) and load xe's pointer inside the block's
bias-load run; K past 2 NKP_UNROLL_PW_X keeps its K loop. Random 1x1
layers (K 68: 17 groups a pixel, the odd group; K 100: 25; K 128: 32; K 132:
the K loop), scaled with one shift ("sl") and with the rounding's sign fix
("nc": two bias loads a block), even and odd pixel counts, run on the host
(the C fallback, strict builds), on the M4 and on the M7 (the biases by
LDM/LDRD), equal to the numpy reference bit for bit and within 1 LSB of an
independent float convolution."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from onnx import numpy_helper

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa import dsp_pwsk
from test_dsp_pw import exact_and_near_float
from test_isa_dsp import build

# (x NCHW, w): K 68, 100, 128 (the _x kernels), 132 (the K loop); pixel counts even and odd
LAYERS = [((1, 68, 2, 3), (8, 68, 1, 1)), ((1, 100, 3, 1), (8, 100, 1, 1)), ((1, 128, 2, 2), (16, 128, 1, 1)),
          ((1, 132, 1, 3), (8, 132, 1, 1))]


def _kernel(header: str, name: str) -> str:
    """The text of the kernel function whose name ends with name."""
    m = re.search(r"static void (\w+%s)\(" % re.escape(name), header)
    assert m, name
    start = m.start()
    end = header.find("#endif", start)
    return header[start:end]


@pytest.mark.parametrize("sign_fix", [False, True])
@pytest.mark.parametrize("where", ["host", "qemu-mps2-an386", "qemu-mps2-an500"])
def test_x_kernels_split_unrolled(where, sign_fix, monkeypatch):
    if where != "host" and not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    monkeypatch.setattr(dsp_pwsk, "MAX_M", 0)
    model, feeds = build([("conv", (xs, ws, {}), {"per_channel": True}) for xs, ws in LAYERS], seed=53)
    if not sign_fix:           # the clamp's low end at the zero point: no sign fix, scaled
        for t in model.graph.initializer:
            if t.name.startswith("yz"):
                t.CopyFrom(numpy_helper.from_array(np.array(-128, np.int8), t.name))
    c = compile_model(model, board="qemu-mps2-an386" if where == "host" else where)
    names = re.findall(r"^\s*\w+__qconv2_dsp_pw_(\w+)\(", c.header, re.M)
    assert len(names) == len(LAYERS), names
    assert all(n.startswith("nc_" if sign_fix else "sl_") for n in names), names
    xs = [n for n in names if "_x" in n]
    assert [re.search(r"_x(\d+)", n).group(1) for n in xs] == ["34", "50", "64"], names
    for n, kx in zip(xs, (34, 50, 64)):
        blk = re.search(r"(_x\d+_m\d+(?:_u)?)", n).group(1)
        text = _kernel(c.header, "pwblk_dsp_" + n.split("_x")[0] + blk)
        # no split loop: one STM per two 4-byte groups of both pixels, the odd group's STM of 4
        assert "bne 5b" not in text and "subs r3" not in text, n
        assert text.count("stmia r0!, {r4-r11}") == kx // 4, n
        assert text.count("stmia r0!, {r4-r7}") == kx // 2 % 2, n
        # xe's pointer inside the bias-load run (before the last single bias load; before the LDM or LDRD)
        last = "ldr r12, [r1], #4" if where != "qemu-mps2-an500" else (
            "ldm r1!, {r6, r8, r10, r12}" if not sign_fix else "ldrd r8, r12, [r1], #8")
        assert f'"ldr r0, [sp, #8]\\n\\t"\n                    "{last}' in text, n
    exact_and_near_float(c, model, feeds, where)
