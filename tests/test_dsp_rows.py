"""The first-layer convolution that reads its window rows straight from the
input (cuvil_mcu/isa/dsp_rows.py, kernels/qconvr_dsp.c.j2): bit-exact with
the numpy reference on the host (plain C, sanitizers) and on QEMU (the
M4's assembly at -O2, -O0 and -Os); layers outside its limits keep the
paired-channel kernel (qconv2_dsp)."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa import dsp_rows
from test_dsp_conv import _set_weights
from test_isa_dsp import build, check

ROWS = [
    # x (NCHW), w, attrs
    ((1, 1, 15, 12), (8, 1, 10, 8), dict(strides=[2, 2], pads=[4, 3, 5, 3])),   # micro_speech-like, one block
    ((1, 1, 13, 10), (16, 1, 10, 4), dict(strides=[2, 2], pads=[4, 1, 5, 1])),  # KWS-like, 2 blocks (windows copied)
    ((2, 2, 7, 6), (8, 2, 3, 4), dict(pads=[1, 2, 1, 1])),                      # C = 2: rows of 8 bytes, batch 2
    ((1, 1, 6, 9), (8, 1, 2, 8), dict(pads=[0, 6, 1, 5])),                      # words wholly / partly off the row's ends
    ((1, 3, 5, 5), (8, 3, 3, 4), dict(pads=[1, 1, 1, 1], strides=[1, 2])),      # C = 3: rows of 12 bytes
]
OTHERS = [
    ((1, 1, 13, 10), (6, 1, 10, 4), dict(strides=[2, 2], pads=[4, 1, 5, 1])),   # M % 8 != 0: the gather
    ((1, 1, 5, 3), (8, 1, 3, 4), dict(pads=[1, 1, 1, 0])),                      # rows of 3 bytes (W C < 4)
    ((1, 1, 7, 6), (8, 1, 3, 3), dict(pads=[1, 1, 1, 1])),                      # window rows of 3 bytes
]


def rows_calls(header: str) -> list[str]:
    """The qconvr_dsp variants the model body calls (kh x ll, c: the
    rounding's sign fix, a: the window copy in the arena, w: every window
    copied)."""
    return re.findall(r"^\s*\w+__qconvr_dsp_(\w+?)\(\(int8_t \*\)\(a \+", header, re.M)


def room(monkeypatch, where):
    """The kernel where the leanest plan has no room for the gather's
    buffers (as in micro_speech): at most 100 free bytes at its step, which
    hold each layer's window copy ("arena") or none ("stack")."""
    from cuvil_mcu import codegen
    free = 100 if where == "arena" else 0
    monkeypatch.setattr(codegen.Emitter, "scratch_free", lambda self: free)


def model(layers, seed, no_fix=()):
    """The layers as parallel branches; those in no_fix with the output zero
    point at -128 (the clamp's low end: the assembly without the rounding's
    sign fix)."""
    m, feeds = build([("conv", a, {}) for a in layers], seed=seed)
    for i in no_fix:
        _set_weights(m, f"yz{i}", np.array(-128, np.int8))
    return m, feeds


def test_pack_order():
    """Block words: 2 bias, then per row / group / half the channels' (2 w[k],
    2 w[k + 2]) halfwords, then the requantization rows."""
    wr = np.arange(16 * 8, dtype=np.int64).reshape(16, 8) - 60        # M 16, kh 1, ll 8
    folded = np.arange(16, dtype=np.int64) * 1000 - 7
    table = np.arange(48, dtype=np.int64) + 5
    words = dsp_rows.pack(wr, folded, table, 1, 8)
    per = 8 + 2 * 2 * 8 + 24
    assert words.size == 2 * per
    blk = words[per:2 * per]                                         # channels 8..15
    np.testing.assert_array_equal(blk[:8], 2 * folded[8:])
    half = blk[8:8 + 32].reshape(4, 8).astype(np.int64) & 0xFFFFFFFF   # (group, half) x channel
    lo = (half & 0xFFFF).astype(np.int16)
    hi = (half >> 16).astype(np.int16)
    for gh, k in enumerate((0, 1, 4, 5)):
        np.testing.assert_array_equal(lo[gh], 2 * wr[8:, k])
        np.testing.assert_array_equal(hi[gh], 2 * wr[8:, k + 2])
    np.testing.assert_array_equal(blk[40:], table[24:])


@pytest.mark.parametrize("where", ["arena", "stack"])
def test_layers_exact_on_host(where, monkeypatch):
    room(monkeypatch, where)
    c = check(*model(ROWS + OTHERS, seed=41, no_fix=(0, 3)))
    names = rows_calls(c.header)
    assert len(names) == len(ROWS), names
    assert all(("a" in n) == (where == "arena") for n in names), names
    assert sorted(n.replace("a", "") for n in names) == ["10x4cw", "10x8", "2x8", "3x12c", "3x8c"], names
    assert len(re.findall(r"^\s*\w+__qconv2_dsp_\w+\(", c.header, re.M)) == len(OTHERS)


M4 = "qemu-mps2-an386"


@pytest.mark.parametrize("board, opt, where", [(M4, o, w) for o in ("-O2", "-O0", "-Os") for w in ("arena", "stack")]
                         + [("qemu-mps2-an500", "-O2", "stack"), ("qemu-mps2-an505", "-O2", "arena")])
def test_on_qemu(board, opt, where, monkeypatch):
    """The assembly on the M4 at -O2 / -O0 / -Os, the M7 and the M33; the
    window copy in the arena or on the stack (micro_speech)."""
    if not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    from cuvil_mcu.sim import qemu
    room(monkeypatch, where)
    m, feeds = model(ROWS, seed=42, no_fix=(0, 3))
    c = compile_model(m, board=board)
    names = rows_calls(c.header)
    assert len(names) == len(ROWS) and all(("a" in n) == (where == "arena") for n in names), names
    g = c.graph
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, board, opt=opt, extra_cflags=["-Werror"])
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        assert np.unique(ref[name]).size > 4
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=f"{board} {opt}: {name}")


@pytest.mark.parametrize("where", ["arena", "stack"])
def test_strict_host_builds(where, monkeypatch):
    """gcc / clang C99, C11, C++, sanitizers, -Werror: the plain-C path."""
    from helpers import check_strict_builds
    room(monkeypatch, where)
    check_strict_builds(*model(ROWS[:2], seed=43, no_fix=(0,)), exact=True, board=M4)


@pytest.mark.parametrize("lang", ["c99", "c++11"])
def test_arm_builds_every_opt_level(tmp_path, lang, monkeypatch):
    """The naked assembly and its callers build (-Werror -pedantic) at every
    optimisation level, with a frame pointer too, in C and C++."""
    import subprocess
    cc = "arm-none-eabi-gcc" if lang == "c99" else "arm-none-eabi-g++"
    if shutil.which(cc) is None:
        pytest.skip(f"needs {cc}")
    room(monkeypatch, "stack")
    c = compile_model(model(ROWS, seed=44, no_fix=(0,))[0], board=M4)
    assert len(rows_calls(c.header)) == len(ROWS)
    (tmp_path / "model.h").write_text(c.header)
    src = tmp_path / "tu.c"
    src.write_text(f"#define {c.prefix.upper()}_IMPLEMENTATION\n#include \"model.h\"\n")
    m4 = ["-mcpu=cortex-m4", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
    for opt in (["-O0"], ["-Og"], ["-O1"], ["-Os"], ["-O3"], ["-O2", "-fno-omit-frame-pointer"]):
        cmd = [cc, "-mthumb", *m4, *opt, "-x", "c" if lang == "c99" else "c++", f"-std={lang}", "-Wall", "-Wextra",
               "-Werror", "-pedantic", "-c", str(src), "-o", str(tmp_path / "tu.o")]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stderr[-3000:]}"


def test_choice_on_shared_models():
    """micro_speech's leanest plan has 8 free bytes at its first conv: the
    rows kernel, no scratch (arena = its one buffer); KWS's has room for the
    gather's buffers (fewer cycles): the paired-channel kernel stays."""
    import shared_models as sm
    if not sm.available():
        pytest.skip(f"reference models not found at {sm.SHARED}")
    c = compile_model(str(sm.model_path("micro_speech")), board=M4)
    assert rows_calls(c.header) == ["10x8"], rows_calls(c.header)
    assert c.plan.scratch_size == {}, c.plan.scratch_size
    c = compile_model(str(sm.model_path("kws_dscnn")), board=M4)
    assert rows_calls(c.header) == [] and "_g10x4a(" in c.header
