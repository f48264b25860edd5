"""--emit so: lib<name>.so for the host and the Cortex-A boards, and the
Python binding cuvil_mcu.load(path).run(x).

The int8 KWS model's outputs are compared bit for bit with TensorFlow Lite
Micro's (../shared/models), an implementation independent of ours; the
cross-built libraries run under qemu-user from a C program linked against
them."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import cuvil_mcu
import cuvil_mcu.runtime
from deploy_helpers import ROOT, cli, fails_cleanly, gen, kws_int8

# A C program that links lib<p>.so: reads N samples, runs them through the
# library's create/run/destroy, writes the outputs (written for prefix kws).
APP = r"""
#include <stdio.h>
#include <stdlib.h>
#include "libkws.h"

int main(int argc, char **argv)
{
    FILE *fi = fopen(argv[1], "rb"), *fo = fopen(argv[2], "wb");
    long n = strtol(argv[3], NULL, 10), s;
    void *arena = kws_create();
    if (argc != 4 || fi == NULL || fo == NULL || arena == NULL) return 2;
    if (kws_abi_version() != LIBKWS_ABI_VERSION || kws_arena_size() != KWS_ARENA_SIZE) return 4;
    for (s = 0; s < n; ++s) {
        int st;
        if (fread(kws_input(arena, 0), 1, KWS_INPUT_0_BYTES, fi) != KWS_INPUT_0_BYTES) return 2;
        st = kws_run(arena);
        if (st != KWS_OK) { fprintf(stderr, "%s\n", kws_status_str(st)); return 3; }
        fwrite(kws_output(arena, 0), 1, KWS_OUTPUT_0_BYTES, fo);
    }
    kws_destroy(arena);
    fclose(fi);
    return fclose(fo) == 0 ? 0 : 2;
}
"""


def assert_same(actual, expected, what):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (what, actual.shape, expected.shape)
    bad = np.argwhere(actual != expected)
    assert bad.size == 0, f"{what}: {len(bad)} elements differ, first at {bad[0].tolist()}: " \
                          f"got {actual[tuple(bad[0])]}, expected {expected[tuple(bad[0])]}"


def test_host_so_from_python_is_bit_exact_with_tflm(tmp_path):
    model, x, expected = kws_int8()
    gen(model, "--emit", "so", "--name", "kws", "-o", tmp_path)
    assert {"kws.h", "libkws.so", "libkws.c", "libkws.h"} <= {p.name for p in tmp_path.iterdir()}
    m = cuvil_mcu.load(tmp_path / "libkws.so")
    assert m.input_names == ["input_1"] and m.info["inputs"][0]["dtype"] == "int8"
    y = m.run(x)                                   # all 8 samples (leading samples axis)
    assert_same(y.reshape(expected.shape), expected, "libkws.so (host) vs TFLM")
    one = m.run({"input_1": x[3]})                 # one sample, by input name
    assert one.shape == (1, 12)
    assert_same(one.reshape(12), expected[3], "sample 3 by name")
    with pytest.raises(cuvil_mcu.runtime.InputError, match="shape"):
        m.run(x[0, :, :10])
    with pytest.raises(cuvil_mcu.runtime.InputError, match="int8"):
        m.run(x.astype(np.int32))


def test_float_so_matches_the_header_build(tmp_path):
    """Float KWS example: the library and `cuvil-mcu run` (the header built
    by the host harness) give the same bits."""
    gen(ROOT / "examples" / "kws_float.onnx", "--emit", "so", "-o", tmp_path)
    x = np.load(ROOT / "examples" / "kws_input.npy")
    y = cuvil_mcu.load(tmp_path / "libmodel.so").run(x)
    r = cli("run", ROOT / "examples" / "kws_float.onnx", "--input", ROOT / "examples" / "kws_input.npy",
            "-o", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    assert_same(y, np.load(tmp_path / "y.npy"), "libmodel.so vs cuvil-mcu run")


@pytest.mark.parametrize("board", ["cortex-a7-neon", "cortex-a53-aarch64"])
def test_cross_so_under_qemu_user(tmp_path, board):
    from cuvil_mcu import boards
    b = boards.get(board)
    for tool in (b.sim["cc"], b.sim["qemu"]):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (make setup)")
    model, x, expected = kws_int8()
    out = tmp_path / "out"
    gen(model, "--emit", "so", "--name", "kws", "--board", board, "-o", out)
    kind = subprocess.run(["file", "-b", str(out / "libkws.so")], capture_output=True, text=True).stdout
    assert "shared object" in kind and ("ARM aarch64" if "a53" in board else "ARM, EABI5") in kind, kind
    (tmp_path / "app.c").write_text(APP)
    exe = tmp_path / "app"
    r = subprocess.run([b.sim["cc"], *b.cflags, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
                        "-I", str(out), str(tmp_path / "app.c"), "-L", str(out), "-lkws", "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (tmp_path / "in.bin").write_bytes(x.tobytes())
    r = subprocess.run([b.sim["qemu"], "-cpu", b.sim["cpu"], "-L", b.sim["sysroot"],
                        "-E", f"LD_LIBRARY_PATH={out}", str(exe), str(tmp_path / "in.bin"),
                        str(tmp_path / "out.bin"), str(len(x))], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    y = np.frombuffer((tmp_path / "out.bin").read_bytes(), np.int8).reshape(expected.shape)
    assert_same(y, expected, f"libkws.so on {board} (qemu-user) vs TFLM")


def test_so_is_deterministic(tmp_path):
    model = ROOT / "examples" / "kws_float.onnx"
    gen(model, "--emit", "so", "-o", tmp_path / "a", "--no-cache")
    gen(model, "--emit", "so", "-o", tmp_path / "b", "--no-cache")
    for name in ("libmodel.so", "libmodel.c", "libmodel.h", "model.h"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_so_bad_inputs(tmp_path):
    model = ROOT / "examples" / "kws_float.onnx"
    line = fails_cleanly(cli("gen", model, "--emit", "so", "--board", "qemu-mps2-an386", "-o", tmp_path / "m"),
                         tmp_path / "m")
    assert "qemu-mps2-an386" in line and "shared" in line
    line = fails_cleanly(cli("gen", model, "--emit", "so", "-o", tmp_path / "c", env={"CC": "no-such-cc"}),
                         tmp_path / "c")
    assert "no-such-cc" in line
    line = fails_cleanly(cli("gen", model, "--emit", "so,nonsense", "-o", tmp_path / "e"), tmp_path / "e")
    assert "nonsense" in line
    with pytest.raises(cuvil_mcu.runtime.ToolError, match="no such"):
        cuvil_mcu.load(tmp_path / "libnothing.so")
