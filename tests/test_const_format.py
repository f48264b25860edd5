"""The header's constants, read back through C, are bit for bit the arrays
the compiler meant to store (the Emitter's Const data), whatever text they
are printed as.

Each test compiles a model, then builds one translation unit holding the
header's implementation and, for every constant, the same data printed one
literal per element (carray.c_array); the program reads every constant
through its own element type (through a pointer the compiler cannot see
through, and directly, which it may fold at compile time), writes the
elements' bytes to stdout and compares them with the one-per-element copy.
Built with gcc, g++, clang and clang++ at -O2 with strict aliasing and
-Wall -Wextra -Werror -pedantic. On a Cortex-M4 object, the bytes of each
constant are read out of the ELF section it sits in, which must be
read-only data (flash)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import shared_models as sm
from cuvil_mcu.codegen.carray import c_array
from cuvil_mcu.compiler import compile_model
from deploy_helpers import ROOT
from helpers import header_consts

KWS = ROOT / "examples" / "kws_float.onnx"
STRICT = ["-O2", "-fstrict-aliasing", "-Wall", "-Wextra", "-Werror", "-pedantic"]
C_BUILDS = {"gcc": ["-std=c99"], "g++": ["-x", "c++", "-std=c++11"], "clang": ["-std=c11"],
            "clang++": ["-x", "c++", "-std=c++17"]}


def _odd_nan(data: np.ndarray) -> bool:
    """NaNs other than the one C's NAN is (c_array prints every NaN so)."""
    if data.dtype != np.float32 or not np.isnan(data).any():
        return data.dtype.kind == "f" and data.dtype != np.float32 and bool(np.isnan(data).any())
    return bool((data[np.isnan(data)].view(np.uint32) != 0x7FC00000).any())


def readback_source(c) -> str:
    """The translation unit: header implementation, one-per-element copies,
    and a main that writes every constant's elements and checks the copies."""
    p, P = c.prefix, c.prefix.upper()
    lines = [f"#define {P}_IMPLEMENTATION", f'#include "{p}.h"', "#include <stdio.h>", ""]
    body = ["int main(void)", "{", "    size_t i;", "    int bad = 0;"]
    for j, k in enumerate(c.consts):
        n = k.data.size
        if n == 0:
            continue
        body += [f"    {{   /* {k.symbol} */",
                 f"        const {k.ctype} *volatile hide = {k.symbol};",
                 f"        const {k.ctype} *q = hide;",
                 f"        for (i = 0; i < {n}u; i++) {{",
                 f"            {k.ctype} v = q[i], w = {k.symbol}[i];",
                 "            fwrite(&v, sizeof v, 1, stdout);",
                 "            if (memcmp(&v, &w, sizeof v) != 0) bad |= 1;",
                 "        }"]
        if not _odd_nan(k.data):   # c_array prints every NaN as NAN
            lines.append(f"static const {k.ctype} old_{j}[{n}] = {{{c_array(k.data)}}};")
            body += [f"        if (memcmp(old_{j}, {k.symbol}, sizeof old_{j}) != 0) {{",
                     f'            fprintf(stderr, "{k.symbol} differs from its one-per-element copy\\n");',
                     "            bad |= 2;",
                     "        }"]
        body.append("    }")
    body += ["    return bad;", "}", ""]
    return "\n".join(lines + [""] + body)


def check_readback(c, tmp: Path, builds=("gcc", "g++", "clang", "clang++")) -> None:
    (tmp / f"{c.prefix}.h").write_text(c.header)
    src = tmp / "readback.c"
    src.write_text(readback_source(c))
    expect = [k for k in c.consts if k.data.size]
    assert expect, "the model has no constants: nothing is checked"
    ran = 0
    for cc in builds:
        if shutil.which(cc) is None:
            continue
        exe = tmp / f"readback_{cc}"
        r = subprocess.run([cc, *C_BUILDS[cc], *STRICT, "-I", str(tmp), str(src), "-o", str(exe), "-lm"],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{cc}: {r.stderr[-3000:]}"
        r = subprocess.run([str(exe)], capture_output=True)
        assert r.returncode == 0, f"{cc}: exit {r.returncode}: {r.stderr.decode()[-2000:]}"
        at = 0
        for k in expect:
            want = k.data.astype(k.data.dtype.newbyteorder("<"), copy=False).tobytes()
            got = r.stdout[at:at + len(want)]
            at += len(want)
            if got != want:
                g = np.frombuffer(got.ljust(len(want), b"\0"), k.data.dtype)
                i = int(np.flatnonzero(g.view(np.uint8) != np.frombuffer(want, np.uint8))[0]) // k.data.itemsize
                raise AssertionError(f"{cc}: {k.symbol} ({k.ctype}[{k.data.size}]) element {i}: C reads "
                                     f"{g.reshape(-1)[i]!r}, the compiler stored {k.data.reshape(-1)[i]!r}")
        assert at == len(r.stdout), f"{cc}: {len(r.stdout) - at} bytes more than the constants"
        ran += 1
    assert ran, f"none of {builds} is installed"


def special_floats_model():
    """y = x + c + d, c holding the float32 values a text format can get
    wrong: signed zeros, the extremes, subnormals, infinities, NaN, values
    whose shortest decimal needs all nine digits; d NaNs with a sign and
    payloads (which no decimal text keeps)."""
    special = np.array([0.0, -0.0, 1.0, -1.0, 3.4028235e38, -3.4028235e38, 1.1754944e-38, -1.1754942e-38,
                        1e-45, -1e-45, np.inf, -np.inf, np.nan, 0.1, 1 / 3, 16777217.0, 1e-7, 123456.79,
                        2.3509886e-38, 8.589973e9], np.float32)
    rng = np.random.RandomState(7)
    bits = rng.randint(0, 2 ** 32, 76, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bits = np.where(np.isnan(bits), np.float32(0.5), bits)   # NaN only as the one above
    c = np.concatenate([special, bits]).astype(np.float32)
    d = np.arange(c.size, dtype=np.float32)
    d[::3] = np.array([0x7FC00001, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)[
        np.arange(len(d[::3])) % 4]
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["t"], name="add"), helper.make_node("Add", ["t", "d"], ["y"], name="add2")],
        "specials", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c.size])],
        [numpy_helper.from_array(c, "c"), numpy_helper.from_array(d, "d")]),
        opset_imports=[helper.make_opsetid("", 13)])
    return m, c, d


def test_special_float_values_read_back_exactly(tmp_path):
    m, c, d = special_floats_model()
    comp = compile_model(m)
    stored = {k.data.tobytes() for k in comp.consts}
    assert c.tobytes() in stored and d.tobytes() in stored
    check_readback(comp, tmp_path)


def test_float_model_constants_read_back_exactly(tmp_path):
    check_readback(compile_model(str(KWS)), tmp_path)


def test_header_text_holds_the_constants_compactly():
    """Parsed from the text (tests/helpers.header_consts, independent of
    the formatter), the header's arrays are the constants; the constants
    section takes at most 2.5 bytes of text per byte of data."""
    kws = compile_model(str(KWS))
    for c in (kws, compile_model(special_floats_model()[0])):
        parsed = header_consts(c.header)
        assert set(parsed) == {k.symbol for k in c.consts}
        for k in c.consts:
            ctype, v = parsed[k.symbol]
            assert ctype == k.ctype and v.tobytes() == k.data.tobytes(), k.symbol
    a, b = kws.header.index("/* ---- constants"), kws.header.index("/* ---- kernels")
    assert b - a <= 2.5 * kws.weights_bytes, (b - a, kws.weights_bytes)


def test_fp16_constants_read_back_exactly(tmp_path):
    c = compile_model(str(KWS), precision="fp16")
    assert any(k.ctype == "uint16_t" for k in c.consts)
    check_readback(c, tmp_path, builds=("gcc", "clang++"))


@pytest.mark.skipif(not sm.available(), reason="../shared/models not present")
def test_int8_model_constants_read_back_exactly(tmp_path):
    c = compile_model(str(sm.model_path("kws_dscnn")))
    assert {k.ctype for k in c.consts} >= {"int8_t", "int32_t"}
    check_readback(c, tmp_path, builds=("gcc", "clang++"))


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="arm-none-eabi-gcc not installed")
@pytest.mark.skipif(not sm.available(), reason="../shared/models not present")
def test_cortex_m4_object_holds_the_constants_in_read_only_data(tmp_path):
    """The DSP kernels' layouts (int8, int16, int32 arrays) for a Cortex-M4:
    each constant's bytes, as the ELF object holds them, are the Const
    data, in a read-only data section (tables gcc folds into the code, the
    kernels' geometry, are not in the object: 95% of the bytes must be)."""
    c = compile_model(str(sm.model_path("kws_dscnn")), board="qemu-mps2-an386")
    (tmp_path / "model.h").write_text(c.header)
    src = tmp_path / "impl.c"
    src.write_text('#define MODEL_IMPLEMENTATION\n#include "model.h"\n'
                   "int (*keep)(void *) = model_run;\n")
    obj = tmp_path / "impl.o"
    r = subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard",
                        "-mfpu=fpv4-sp-d16", "-std=c99", *STRICT, "-c", str(src), "-o", str(obj)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    table = subprocess.run(["arm-none-eabi-objdump", "-t", str(obj)], capture_output=True, text=True).stdout
    syms = {}
    for line in table.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[-1].startswith("model__w"):
            syms[parts[-1]] = (parts[-3], int(parts[0], 16), int(parts[-2], 16))
    sections = {}
    kinds = set()
    checked = 0
    for k in c.consts:
        name = next((s for s in (k.symbol, k.symbol + "__u") if s in syms), None)
        if name is None:
            continue   # a table gcc folded into the code (the kernels' geometry)
        sec, addr, size = syms[name]
        assert sec.startswith(".rodata"), f"{name} is in {sec}, not read-only data"
        if sec not in sections:
            out = tmp_path / f"sec{len(sections)}.bin"
            subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", f"--only-section={sec}", str(obj), str(out)],
                           check=True)
            sections[sec] = out.read_bytes()
        want = k.data.astype(k.data.dtype.newbyteorder("<"), copy=False).tobytes()
        assert size >= len(want), f"{name}: {size} B in the object, {len(want)} B of data"
        assert sections[sec][addr:addr + len(want)] == want, f"{name}: the object's bytes differ from the data"
        kinds.add(k.ctype)
        checked += k.data.nbytes
    assert {"int8_t", "int32_t"} <= kinds, kinds
    total = sum(k.data.nbytes for k in c.consts)
    assert checked >= 0.95 * total, f"only {checked} of {total} constant bytes are in the object"
