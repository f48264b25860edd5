"""`gen --emit micropython,zephyr,platformio`: the packages follow each
ecosystem's documented layout, are deterministic, and the C they hold
compiles warning-free and computes the model's outputs -- checked without
the SDKs (none is installable here) against minimal stand-in headers
(tests/fake_micropython, tests/fake_zephyr) written from the documented APIs.
The MicroPython module is also *run*: tests/fake_micropython/driver.c
implements the stand-in API (objects on the C heap, exceptions via longjmp)
and calls the module's run() through its function object on real data; the
outputs are compared with cuvil-mcu's numpy reference."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import CuvilError
from cuvil_mcu.integrations import micropython, parse, platformio, targets, zephyr

MODS = [micropython, zephyr, platformio]

from helpers import make_model, node
import shared_models as sm
import standins

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CC = os.environ.get("CC", "cc")
WARN = ["-Wall", "-Wextra", "-Werror", "-std=c99"]


def two_io_model() -> onnx.ModelProto:
    """Float model with two inputs of odd shapes and two outputs."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((7, 3)).astype(np.float32)
    return make_model([node("Add", ["a", "b"], ["s"]), node("MatMul", ["s", "w"], ["y"]),
                       node("Relu", ["a"], ["r"])],
                      {"a": ((2, 7), "float32"), "b": ((2, 7), "float32")}, ["y", "r"], {"w": w}, name="two_io")


def int8_model_path(tmp_path_factory) -> tuple[str, dict]:
    """A real int8 model (int8 input and output): the shared KWS DS-CNN, else
    tests/models.py's dscnn quantized by cuvil-mcu with int8 I/O."""
    if sm.available():
        return str(sm.model_path("kws_dscnn")), {}
    from models import dscnn
    d = tmp_path_factory.mktemp("q")
    m = dscnn(seed=1, channels=8)
    onnx.save(m, d / "dscnn.onnx")
    x = np.random.default_rng(0).standard_normal((16, 1, 1, 49, 10)).astype(np.float32)
    return str(d / "dscnn.onnx"), dict(quantize="int8", calibration={m.graph.input[0].name: x[:, 0]}, io="int8")



def _example_reference(g):
    """The reference's first output (flattened) and its tensor for the input
    the generated examples feed: input 0 = ((i % 17) - 8) / 8, quantized
    with its scale and zero point when it is int8; other inputs zero."""
    t0 = g.tensors[g.inputs[0]]
    pat = (((np.arange(t0.size) % 17) - 8) / np.float32(8)).astype(np.float32)
    if t0.dtype == "float32":
        x = pat.reshape(t0.shape)
    else:
        s, z = np.float32(t0.quant.scale[0]), int(t0.quant.zero_point[0])
        x = np.clip(np.rint(pat / s) + z, -128, 127).astype(t0.dtype).reshape(t0.shape)
    feeds = {n: np.zeros(g.tensors[n].shape, g.tensors[n].dtype) for n in g.inputs}
    feeds[g.inputs[0]] = x
    return reference.run(g, feeds)[g.outputs[0]].reshape(-1), g.tensors[g.outputs[0]]

@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path, kw = int8_model_path(tmp_path_factory)
    return {"float": compile_model(two_io_model()), "int8": compile_model(path, **kw)}


def need(tool: str) -> None:
    import shutil
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed (make setup installs it)")


def write(files: dict, base: Path) -> None:
    for p, text in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text.encode() if isinstance(text, str) else text)


def cc(args, cwd=None):
    r = subprocess.run([CC, *map(str, args)], capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


def check_readme(text: str, c) -> None:
    """The README lists the model, its I/O with quant params, arena and flash."""
    g = c.graph
    assert f"{c.plan.arena_size} bytes" in text and f"{c.weights_bytes} bytes" in text
    for n in g.inputs + g.outputs:
        t = g.tensors[n]
        row = next((ln for ln in text.splitlines() if f"`{n}`" in ln and ln.startswith("|")), None)
        assert row is not None, f"no README row for {n}"
        assert t.dtype in row and str(list(t.shape)) in row
        if t.quant is not None and t.dtype in ("int8", "uint8"):
            assert str(int(t.quant.zero_point.reshape(-1)[0])) in row
            assert abs(float(row.split("|")[8]) - float(t.quant.scale.reshape(-1)[0])) < 1e-6 * abs(
                float(t.quant.scale.reshape(-1)[0]))


# ---------------------------------------------------------------------------
# plumbing shared by the targets

def test_targets_registered():
    assert {"micropython", "zephyr", "platformio"} <= set(targets())
    assert [m.NAME for m in parse("zephyr, micropython,zephyr")] == ["zephyr", "micropython"]
    with pytest.raises(CuvilError, match=r"unknown target\(s\) cmake.*choose from"):
        parse("micropython,cmake")


@pytest.mark.parametrize("mod", MODS, ids=lambda m: m.NAME)
def test_deterministic(compiled, mod, tmp_path):
    for c in compiled.values():
        a, b = mod.emit(c, tmp_path), mod.emit(c, tmp_path)
        assert a == b and list(a) == list(b)
        # the same model compiled again gives the same bytes too
    c2 = compile_model(two_io_model())
    assert mod.emit(c2, tmp_path) == mod.emit(compiled["float"], tmp_path)


@pytest.mark.parametrize("mod", MODS, ids=lambda m: m.NAME)
def test_readme_lists_model(compiled, mod, tmp_path):
    for c in compiled.values():
        files = mod.emit(c, tmp_path)
        readme = next(t for p, t in files.items() if p.name == "README.md")
        check_readme(readme, c)
        assert "```sh" in readme
        # the package carries the header itself (drop-in, self-contained)
        assert any(t == c.header for t in files.values())
        assert all(tmp_path in p.parents for p in files)


# ---------------------------------------------------------------------------
# MicroPython

FAKE_MPY = HERE / "fake_micropython"
# The unix port's flags for user C modules (its Makefile's CWARN, -std and -O),
# plus -Wshadow -Wundef.
MPY_FLAGS = ["-Wall", "-Werror", "-Wextra", "-Wno-unused-parameter", "-Wpointer-arith", "-Wdouble-promotion",
             "-Wfloat-conversion", "-std=gnu99", "-Os", "-Wshadow", "-Wundef"]


def mpy_sdk_name(name: str) -> bool:
    """An identifier that belongs to MicroPython (the modules' own are mod<m>_...)."""
    return bool(re.match(r"(mp_|MP_|MICROPY_|nlr_)", name)) or name in ("qstr", "byte", "BYTEARRAY_TYPECODE")


def write_qstrdefs(sources: list[str], gen: Path) -> None:
    """genhdr/qstrdefs.generated.h as MicroPython's makeqstrdata.py writes it
    (the hash field is not read by the stand-in): every MP_QSTR_ name used."""
    names = sorted(set().union(*(re.findall(r"MP_QSTR_(\w+)", s) for s in sources)) | {"run"})
    (gen / "genhdr").mkdir(parents=True, exist_ok=True)
    (gen / "genhdr" / "qstrdefs.generated.h").write_text(
        'QDEF0(MP_QSTRnull, 0, 0, "")\n' + "".join(f'QDEF1(MP_QSTR_{n}, 0, {len(n)}, "{n}")\n' for n in names))


def mpy_build(c, tmp_path, extra=(), also=()) -> tuple[Path, Path]:
    """Emit the module, compile it against the stand-in headers (warnings are
    errors) and link it with the driver; `also`: more compiled models linked
    into the same executable (two models in one firmware). Returns (driver
    exe, module dir)."""
    mods = []
    for k in (c, *also):
        write(micropython.emit(k, tmp_path), tmp_path)
        m = micropython.module_name(k.prefix)
        mods.append((m, tmp_path / "micropython" / m))
    gen = tmp_path / "gen"
    write_qstrdefs([(d / f"mod{m}.c").read_text() for m, d in mods], gen)
    inc = ["-I", FAKE_MPY, "-I", FAKE_MPY / "port", "-I", gen]
    objs = []
    for m, d in mods:
        obj = tmp_path / f"mod{m}.o"
        cc([*MPY_FLAGS, *extra, *inc, "-I", d, "-c", d / f"mod{m}.c", "-o", obj])
        objs.append(obj)
    exe = tmp_path / f"driver_{mods[0][0]}"
    cc(["-std=c99", "-O1", *extra, *inc, f"-DMOD_OBJ={micropython.c_prefix(mods[0][0])}_user_cmodule",
        FAKE_MPY / "driver.c", *objs, "-o", exe, "-lm"])
    return exe, mods[0][1]


def mpy_run(exe, tmp_path, kind, arrays):
    """(first line of the driver's output, output bytes); the whole output is
    in the line list when more lines come (release:/reenter: kinds)."""
    ins = []
    for i, a in enumerate(arrays):
        p = tmp_path / f"in{i}.bin"
        p.write_bytes(np.ascontiguousarray(a).tobytes())
        ins.append(p)
    out = tmp_path / "out.bin"
    if out.exists():
        out.unlink()
    r = subprocess.run([exe, kind, out, *ins], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    ok = [ln for ln in lines if ln.startswith("OK")]
    return (lines[0] if len(lines) == 1 else lines), (out.read_bytes() if ok else b"")


def mpy_attrs(exe) -> dict:
    r = subprocess.run([exe, "attrs"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    import ast
    return {k: ast.literal_eval(v) for k, v in (ln.split(" = ", 1) for ln in r.stdout.splitlines())}


def test_micropython_layout(compiled, tmp_path):
    c = compiled["int8"]
    files = micropython.emit(c, tmp_path)
    base = tmp_path / "micropython" / "cuvilmodel"
    assert sorted(p.relative_to(tmp_path).as_posix() for p in files) == sorted(
        f"micropython/cuvilmodel/{f}" for f in
        ["modcuvilmodel.c", "model.h", "micropython.mk", "micropython.cmake", "README.md"])
    mk = files[base / "micropython.mk"].splitlines()
    # documented: expand $(USERMOD_DIR) into a local variable, add sources to
    # SRC_USERMOD_C (scanned for qstrs and MP_REGISTER_MODULE), -I to CFLAGS_USERMOD
    assert "CUVILMODEL_MOD_DIR := $(USERMOD_DIR)" in mk
    assert "SRC_USERMOD_C += $(CUVILMODEL_MOD_DIR)/modcuvilmodel.c" in mk
    assert "CFLAGS_USERMOD += -I$(CUVILMODEL_MOD_DIR)" in mk
    cm = re.sub(r"\s+", " ", files[base / "micropython.cmake"])
    assert "add_library(usermod_cuvilmodel INTERFACE)" in cm
    assert "target_sources(usermod_cuvilmodel INTERFACE ${CMAKE_CURRENT_LIST_DIR}/modcuvilmodel.c )" in cm
    assert "target_include_directories(usermod_cuvilmodel INTERFACE ${CMAKE_CURRENT_LIST_DIR} )" in cm
    assert "target_link_libraries(usermod INTERFACE usermod_cuvilmodel)" in cm
    src = files[base / "modcuvilmodel.c"]
    assert "#define MODEL_IMPLEMENTATION" in src and '#include "model.h"' in src
    assert "MP_REGISTER_MODULE(MP_QSTR_cuvilmodel, modcuvilmodel_user_cmodule);" in src
    assert "static MP_DEFINE_CONST_FUN_OBJ_1(modcuvilmodel_run_obj, modcuvilmodel_run);" in src
    assert re.search(r"static unsigned char modcuvilmodel_arena\[MODEL_ARENA_SIZE\]", src)
    assert "malloc" not in src and "m_new" not in src
    readme = files[base / "README.md"]
    assert "make -C $MPY/ports/unix USER_C_MODULES=" in readme
    assert "make -C $MPY/ports/rp2 BOARD=RPI_PICO USER_C_MODULES=" in readme and "micropython.cmake" in readme
    # what a user needs: the submodules, or the variables that leave btree and TLS out
    assert "make -C $MPY/ports/unix submodules" in readme
    assert "MICROPY_PY_BTREE=0 MICROPY_PY_SSL=0" in readme and "lib/micropython-lib" in readme
    # list of ints on an int8 input: quantized as real numbers, said in the README
    assert "a list of ints too" in readme
    assert "RuntimeError" in readme and "MICROPY_PY_THREAD_GIL=0" in readme
    # --name sets the module name
    c2 = compile_model(two_io_model(), name="kws")
    assert {p.name for p in micropython.emit(c2, tmp_path)} >= {"modkws.c", "kws.h"}


def test_micropython_names_do_not_clash_with_the_header(tmp_path):
    """--name kws8: the header owns kws8_*; the module's C names are
    modkws8_* (MicroPython's build failed with "conflicting types for
    'kws8_run'" when the module named its run() kws8_run)."""
    c = compile_model(two_io_model(), name="kws8")
    src = micropython.emit(c, tmp_path)[tmp_path / "micropython" / "kws8" / "modkws8.c"]
    code = standins.strip_c(src)
    defined = set(re.findall(r"^(?:static |const )[^=(;]*?\b(\w+)\s*[\[(=]", code, re.M))
    defined |= set(re.findall(r"MP_DEFINE_CONST_\w+\((\w+),", code))
    assert "modkws8_run" in defined and "modkws8_user_cmodule" in defined
    assert not [d for d in defined if d.startswith(("kws8_", "KWS8_"))], sorted(defined)


def test_micropython_module_includes_what_it_uses(compiled, tmp_path):
    """Every MicroPython name the module uses is declared by a stand-in
    header the module includes itself (the stand-ins declare what the real
    header of the same name declares), and by no other name."""
    decls = standins.per_file(FAKE_MPY)
    decls["py/qstr.h"] |= {f"MP_QSTR_{n}" for n in ("run", "__name__")}
    for c in (compiled["int8"], compiled["float"], compile_model(two_io_model(), name="kws8")):
        src = next(t for p, t in micropython.emit(c, tmp_path).items() if p.name.startswith("mod"))
        decls["py/qstr.h"] |= {f"MP_QSTR_{n}" for n in re.findall(r"MP_QSTR_(\w+)", src)}
        assert standins.missing_includes(src, decls, mpy_sdk_name) == {}
    # the check fails when an include is missing: BYTEARRAY_TYPECODE is py/binary.h's
    src = src if "BYTEARRAY_TYPECODE" in src else \
        next(t for p, t in micropython.emit(compiled["int8"], tmp_path).items() if p.name.startswith("mod"))
    assert standins.missing_includes(src.replace('#include "py/binary.h"\n', ""), decls, mpy_sdk_name) == {
        "BYTEARRAY_TYPECODE": ["py/binary.h"]}
    assert standins.missing_includes(src + "\nint x = mp_obj_new_foo();\n", decls, mpy_sdk_name) == {
        "mp_obj_new_foo": []}


def test_micropython_int8_runs(compiled, tmp_path):
    c = compiled["int8"]
    g = c.graph
    exe, _ = mpy_build(c, tmp_path)
    tin, tout = g.tensors[g.inputs[0]], g.tensors[g.outputs[0]]
    s_in, z_in = float(tin.quant.scale[0]), int(tin.quant.zero_point[0])
    a = mpy_attrs(exe)
    assert a["__name__"] == "cuvilmodel" and a["run"] == "<fun_builtin_1>"
    assert a["input_shape"] == tin.shape and a["output_shape"] == tout.shape
    assert a["arena_size"] == c.plan.arena_size
    assert a["input_zero_point"] == z_in and a["output_zero_point"] == int(tout.quant.zero_point[0])
    assert np.float32(a["input_scale"]) == tin.quant.scale[0]
    assert np.float32(a["output_scale"]) == tout.quant.scale[0]
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, tin.shape).astype(np.int8)
    ref = reference.run(g, {g.inputs[0]: x})[g.outputs[0]]
    for kind in ("bytes", "bytearray", "array:b", "array:B"):
        line, out = mpy_run(exe, tmp_path, kind, [x])
        assert line == "OK b", (kind, line)
        assert np.array_equal(np.frombuffer(out, np.int8).reshape(ref.shape), ref), kind
    # floats are quantized by the module like ONNX QuantizeLinear (round half to even, saturate)
    real = (rng.standard_normal(tin.shape) * 40).astype(np.float32)
    real.flat[:4] = [(0.5 - z_in) * s_in, 1e9, -1e9, np.float32(2.5) * np.float32(s_in)]
    q = np.clip(np.rint(real / np.float32(s_in)) + z_in, -128, 127).astype(np.int8)  # float32 division, as the header
    ref_q = reference.run(g, {g.inputs[0]: q})[g.outputs[0]]
    for kind in ("array:f", "list_f", "tuple_f"):
        line, out = mpy_run(exe, tmp_path, kind, [real])
        assert line == "OK b", (kind, line)
        assert np.array_equal(np.frombuffer(out, np.int8).reshape(ref.shape), ref_q), kind
    # a list of ints is real numbers too (quantized), as the error text and README say
    ints = rng.integers(-3, 4, tin.shape).astype(np.int32)
    qi = np.clip(np.rint(ints.astype(np.float32) / np.float32(s_in)) + z_in, -128, 127).astype(np.int8)
    line, out = mpy_run(exe, tmp_path, "list_i", [ints])
    assert line == "OK b" and np.array_equal(np.frombuffer(out, np.int8).reshape(ref.shape),
                                             reference.run(g, {g.inputs[0]: qi})[g.outputs[0]])
    # wrong length -> ValueError with the expected size; wrong type -> the module's TypeError
    line, _ = mpy_run(exe, tmp_path, "bytes", [x.reshape(-1)[:-1]])
    assert line.startswith("EXC ValueError: cuvilmodel.run: input 0") and \
        f"needs {tin.size} values, got {tin.size - 1}" in line
    line, _ = mpy_run(exe, tmp_path, "list_f", [real.reshape(-1)[:7]])
    assert line.startswith("EXC ValueError:") and f"needs {tin.size} values, got 7" in line
    line, _ = mpy_run(exe, tmp_path, "list_bad", [real])
    assert line.startswith("EXC TypeError: cuvilmodel.run: input 0") and "item 0 is not a number" in line
    accepted = ("bytes, bytearray, array('b') or array('B') holding quantized int8 values, or array('f') or a "
                "list/tuple of real numbers, which run() quantizes (ints in a list are real numbers too)")
    # str offers a buffer in MicroPython: refused all the same (490 characters were taken as input bytes)
    for kind in ("array:h", "none", "int", "dict", "str"):
        line, _ = mpy_run(exe, tmp_path, kind, [x])
        assert line == f"EXC TypeError: cuvilmodel.run: input 0 ({g.inputs[0]}) must be {accepted}", (kind, line)


def test_micropython_float_two_io_runs(compiled, tmp_path):
    c = compiled["float"]
    g = c.graph
    exe, _ = mpy_build(c, tmp_path)
    a = mpy_attrs(exe)
    assert a["run"] == "<fun_builtin_var>"
    assert a["input_shape"] == ((2, 7), (2, 7)) and a["output_shape"] == ((2, 3), (2, 7))
    assert "input_scale" not in a and "output_zero_point" not in a
    rng = np.random.default_rng(4)
    xa, xb = (rng.standard_normal((2, 7)).astype(np.float32) for _ in range(2))
    ref = reference.run(g, {"a": xa, "b": xb})
    for kind in ("array:f", "list_f"):
        line, out = mpy_run(exe, tmp_path, kind, [xa, xb])
        assert line == "OK tuple f f", (kind, line)
        y = np.frombuffer(out, np.float32)
        np.testing.assert_allclose(y[:6].reshape(2, 3), ref["y"], rtol=1e-5, atol=1e-6)
        assert np.array_equal(y[6:].reshape(2, 7), ref["r"])
    line, _ = mpy_run(exe, tmp_path, "array:f", [xa])
    assert line.startswith("EXC TypeError: function takes")
    line, _ = mpy_run(exe, tmp_path, "bytes", [xa, xb])  # raw bytes are not floats
    assert line == "EXC TypeError: two_io.run: input 0 (a) must be array('f') or a list/tuple of numbers" or \
        line == "EXC TypeError: cuvilmodel.run: input 0 (a) must be array('f') or a list/tuple of numbers", line
    line, _ = mpy_run(exe, tmp_path, "array:f", [xa, xb[:, :5]])
    assert line.startswith("EXC ValueError:") and "input 1 (b) needs 14 values, got 10" in line


def test_micropython_double_float_port(compiled, tmp_path):
    """The unix port's mp_float_t is double: the module still compiles
    warning-free (-Wdouble-promotion -Wfloat-conversion) and runs."""
    c = compiled["int8"]
    g = c.graph
    exe, _ = mpy_build(c, tmp_path, extra=["-DFAKE_MP_FLOAT_DOUBLE"])
    x = np.random.default_rng(9).integers(-128, 128, g.tensors[g.inputs[0]].shape).astype(np.int8)
    line, out = mpy_run(exe, tmp_path, "array:b", [x])
    assert line == "OK b"
    assert np.array_equal(np.frombuffer(out, np.int8), reference.run(g, {g.inputs[0]: x})[g.outputs[0]].reshape(-1))
    s = np.float32(g.tensors[g.inputs[0]].quant.scale[0])
    real = np.random.default_rng(10).standard_normal(x.shape).astype(np.float32) * s * 50
    line, out = mpy_run(exe, tmp_path, "list_f", [real])
    q = np.clip(np.rint(real / s) + int(g.tensors[g.inputs[0]].quant.zero_point[0]), -128, 127).astype(np.int8)
    assert line == "OK b" and np.array_equal(np.frombuffer(out, np.int8),
                                             reference.run(g, {g.inputs[0]: q})[g.outputs[0]].reshape(-1))


def test_micropython_one_run_at_a_time(compiled, tmp_path):
    """A run() entered while another is loading its input (another thread on
    a port without a GIL) gets the module's busy RuntimeError and the first
    run's result is right; an exception inside run() releases the arena."""
    c = compiled["int8"]
    g = c.graph
    exe, _ = mpy_build(c, tmp_path)
    tin = g.tensors[g.inputs[0]]
    s, z = np.float32(tin.quant.scale[0]), int(tin.quant.zero_point[0])
    real = np.random.default_rng(11).standard_normal(tin.shape).astype(np.float32) * s * 30
    q = np.clip(np.rint(real / s) + z, -128, 127).astype(np.int8)
    want = reference.run(g, {g.inputs[0]: q})[g.outputs[0]].reshape(-1)
    lines, out = mpy_run(exe, tmp_path, "reenter:list_f", [real])
    assert lines[0] == ("REENTER EXC RuntimeError: cuvilmodel.run: busy: another thread is running cuvilmodel "
                        "(one arena per model; serialize the calls, e.g. with a _thread lock)"), lines
    assert lines[1] == "OK b" and np.array_equal(np.frombuffer(out, np.int8), want)
    lines, out = mpy_run(exe, tmp_path, "release:list_f", [real])
    assert lines[0].startswith("EXC TypeError: cuvilmodel.run: input 0") and "item 0 is not a number" in lines[0]
    assert lines[1] == "OK b" and np.array_equal(np.frombuffer(out, np.int8), want)


def test_micropython_two_models_in_one_firmware(compiled, tmp_path):
    """Two modules (--name kws8 and the default) link into one executable and
    each runs its own model."""
    a = compile_model(two_io_model(), name="kws8")
    exe, _ = mpy_build(a, tmp_path, also=[compiled["int8"]])
    assert mpy_attrs(exe)["__name__"] == "kws8"
    xa, xb = (np.random.default_rng(s).standard_normal((2, 7)).astype(np.float32) for s in (1, 2))
    line, out = mpy_run(exe, tmp_path, "array:f", [xa, xb])
    assert line == "OK tuple f f"
    assert np.array_equal(np.frombuffer(out, np.float32)[6:].reshape(2, 7), np.maximum(xa, 0))
    exe2, _ = mpy_build(compiled["int8"], tmp_path / "b", also=[a])
    g = compiled["int8"].graph
    x = np.random.default_rng(5).integers(-128, 128, g.tensors[g.inputs[0]].shape).astype(np.int8)
    line, out = mpy_run(exe2, tmp_path, "bytes", [x])
    assert line == "OK b" and np.array_equal(np.frombuffer(out, np.int8),
                                             reference.run(g, {g.inputs[0]: x})[g.outputs[0]].reshape(-1))


# Functions MicroPython's lib/libm defines (1c3c201; what the qemu, stm32,
# samd, nrf and mimxrt ports link with -nostdlib), read from its sources.
MPY_LIBM = frozenset("""acosf acoshf asinf asinhf atan2f atanf atanhf ceilf copysignf cosf coshf erfcf erff
expf expm1f floorf fmodf frexpf ldexpf lgammaf log10f log1pf logf modff nearbyintf powf roundf scalbnf sinf
sinhf sqrtf tanf tanhf tgammaf truncf""".split())
# What else a Cortex-M3 build of the module may call: libgcc's soft-float,
# MicroPython's own C library (shared/libc/string0.c) and runtime, and the
# stand-in port's setjmp NLR and atomic sections.
LIBGCC_OR_MPY = re.compile(r"^(__aeabi_\w+|__gnu_\w+|memcpy|memset|memmove|memcmp|mp_\w+|nlr_\w+|setjmp|fake_\w+)$")


@pytest.mark.parametrize("kind", ["int8", "float"])
def test_micropython_needs_no_libm_function_minimal_libms_lack(compiled, tmp_path, kind):
    """The module (with its header) for a Cortex-M3 without FPU, as the qemu
    port builds it: every undefined symbol is in MicroPython's lib/libm,
    libgcc or MicroPython itself (lrintf in the quantize helpers was not)."""
    need("arm-none-eabi-gcc")
    c = compiled[kind] if kind == "int8" else compile_model(str(ROOT / "examples" / "kws_float.onnx"))
    write(micropython.emit(c, tmp_path), tmp_path)
    m = micropython.module_name(c.prefix)
    d = tmp_path / "micropython" / m
    gen = tmp_path / "gen"
    write_qstrdefs([(d / f"mod{m}.c").read_text()], gen)
    obj = tmp_path / "m.o"
    r = subprocess.run(["arm-none-eabi-gcc", "-mthumb", "-mcpu=cortex-m3", *MPY_FLAGS, "-fsingle-precision-constant",
                        "-DNDEBUG", "-I", str(FAKE_MPY), "-I", str(FAKE_MPY / "port"), "-I", str(gen), "-I", str(d), "-c",
                        str(d / f"mod{m}.c"), "-o", str(obj)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    nm = subprocess.run(["arm-none-eabi-nm", "-u", str(obj)], capture_output=True, text=True, check=True)
    undefined = {ln.split()[-1] for ln in nm.stdout.splitlines() if ln.strip()}
    assert undefined, "nm found no undefined symbol: the check would pass vacuously"
    assert {u for u in undefined if not LIBGCC_OR_MPY.match(u)} <= MPY_LIBM


def test_quantize_helpers_round_like_onnx(tmp_path):
    """model_input_0_quantize (no lrintf) against numpy's QuantizeLinear
    (float32 division, round half to even, saturate) on ties, ranges and NaN."""
    x = np.random.default_rng(0).standard_normal((8, 2, 7)).astype(np.float32)
    c = compile_model(two_io_model(), quantize="int8", calibration={"a": x, "b": x}, io="int8")
    g = c.graph
    t = g.tensors[g.inputs[0]]
    s, z = np.float32(t.quant.scale[0]), int(t.quant.zero_point[0])
    steps = np.arange(-300, 301, dtype=np.float32) * np.float32(0.5)
    reals = np.concatenate([steps * s, np.float32([1e30, -1e30, np.inf, -np.inf, np.nan, 0.0, -0.0,
                                                    65536.5 * s, -70000 * s]),
                            np.random.default_rng(1).standard_normal(2000).astype(np.float32) * s * 100])
    reals = reals.astype(np.float32)
    (tmp_path / "model.h").write_text(c.header)
    (tmp_path / "in.bin").write_bytes(reals.tobytes())
    (tmp_path / "q.c").write_text(
        '#include <stdio.h>\n#include "model.h"\nint main(void)\n{\n    float v;\n    FILE *f = fopen("in.bin", "rb");\n'
        '    while (fread(&v, 4, 1, f) == 1) {\n        printf("%d\\n", (int)model_input_0_quantize(v));\n    }\n'
        '    return 0;\n}\n')
    cc([*WARN, "-pedantic", "q.c", "-o", "q"], cwd=tmp_path)
    got = np.array(subprocess.run(["./q"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split(),
                   dtype=np.int64)
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.where(np.isnan(reals), np.float32(0), np.clip(reals / s, -65536, 65536))
    want = np.clip(np.rint(v) + z, -128, 127).astype(np.int64)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(float(reals[i]), int(got[i]), int(want[i])) for i in bad[:10]]


def test_header_usage_comment_declares_the_input_type(compiled):
    """The usage notes at the top of the header declare `in` with the type
    of input 0 (an int8 model's said `float *in = (int8_t *)...`)."""
    for c, ctype in ((compiled["int8"], "int8_t"), (compiled["float"], "float")):
        assert f"       {ctype} *in = ({ctype} *)model_input(arena, 0);" in c.header.split("*/", 1)[0]


@pytest.mark.parametrize("name,ok", [("model", True), ("kws", True), ("Net2", True), ("class", False),
                                     ("Import", False), ("math", False), ("time", False), ("2net", False)])
def test_micropython_check_name(name, ok):
    if ok:
        micropython.check_name(name)
    else:
        with pytest.raises(CuvilError, match="Python identifier"):
            micropython.check_name(name)


# ---------------------------------------------------------------------------
# Zephyr

FAKE_ZEPHYR = HERE / "fake_zephyr"
SAMPLE = ROOT / "firmware_examples" / "zephyr"

# zephyr/module.yml as Zephyr's scripts/zephyr_module.py validates it (its
# pykwalify METADATA_SCHEMA): key -> type, a dict for a nested map, [type]
# for a sequence. Keys outside the schema are errors, as in pykwalify.
MODULE_YML = {
    "name": str,
    "build": {"cmake": str, "kconfig": str, "cmake-ext": bool, "kconfig-ext": bool, "sysbuild-cmake": str,
              "sysbuild-kconfig": str, "sysbuild-cmake-ext": bool, "sysbuild-kconfig-ext": bool,
              "depends": [str],
              "settings": {"board_root": str, "dts_root": str, "soc_root": str, "arch_root": str,
                           "module_ext_root": str, "sca_root": str}},
    "tests": [str], "samples": [str], "boards": [str],
    "blobs": [{"path": str, "sha256": str, "type": str, "version": str, "license-path": str, "url": str,
               "description": str, "doc-url": str}],
}
BLOB_REQUIRED = {"path", "sha256", "type", "version", "license-path", "url", "description"}


def _schema_errors(value, schema, where="") -> list[str]:
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{where or 'document'}: a map is required, got {type(value).__name__}"]
        errs = [f"{where}{k}: key not in the schema" for k in value if k not in schema]
        for k, v in value.items():
            if k in schema:
                errs += _schema_errors(v, schema[k], f"{where}{k}.")
        return errs
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{where[:-1]}: a sequence is required"]
        return [e for i, v in enumerate(value) for e in _schema_errors(v, schema[0], f"{where}{i}.")]
    return [] if isinstance(value, schema) else [f"{where[:-1]}: {schema.__name__} required, got {value!r}"]


def zephyr_module(module_root: Path) -> dict:
    """What Zephyr's build reads from a module: zephyr/module.yml checked
    against the schema, 'cmake' a folder holding a CMakeLists.txt, 'kconfig'
    a file; returns the metadata with 'name-sanitized' added."""
    yaml = pytest.importorskip("yaml")
    meta = yaml.safe_load((module_root / "zephyr" / "module.yml").read_text())
    errs = _schema_errors(meta, MODULE_YML)
    for i, b in enumerate(meta.get("blobs", [])):
        errs += [f"blobs.{i}.{k}: required" for k in BLOB_REQUIRED - set(b)]
    assert not errs, errs
    build = meta.get("build", {})
    if "cmake" in build:
        assert (module_root / build["cmake"] / "CMakeLists.txt").is_file(), "cmake: no CMakeLists.txt there"
    if "kconfig" in build:
        assert (module_root / build["kconfig"]).is_file(), "kconfig: no such file"
    meta.setdefault("name", module_root.name)
    meta["name-sanitized"] = re.sub("[^a-zA-Z0-9]", "_", meta["name"])
    return meta


def kconfig_modules_snippet(module_roots: list[Path]) -> str:
    """The Kconfig.modules file Zephyr's build writes for its modules: per
    module a menu sourcing the module's Kconfig and a ZEPHYR_<NAME>_MODULE
    symbol."""
    out = []
    for root in module_roots:
        meta = zephyr_module(root)
        kfile = (root / meta.get("build", {}).get("kconfig", "zephyr/Kconfig")).resolve()
        out += [f'menu "{meta["name"]} ({root.as_posix()})"', f'osource "{kfile.as_posix()}"',
                f'config ZEPHYR_{meta["name-sanitized"].upper()}_MODULE', "\tbool", "\tdefault y", "endmenu", ""]
    return "\n".join(out)


def kconfig_load(module_roots: list[Path], build: Path, conf: str | None = None, chosen: dict | None = None):
    """Zephyr's configuration step with kconfiglib (the parser Zephyr uses):
    the stand-in Kconfig.zephyr, the modules' Kconfig files through
    Kconfig.modules, Zephyr's preprocessor functions (stand-in
    kconfigfunctions.py over `chosen`), then prj.conf `conf`. Any warning
    (undefined symbol, bad value, ...) fails the test."""
    kconfiglib = pytest.importorskip("kconfiglib")
    fn_dir = str(FAKE_ZEPHYR / "scripts" / "kconfig")
    if fn_dir not in sys.path:
        sys.path.insert(0, fn_dir)
    import kconfigfunctions
    kconfigfunctions.CHOSEN.clear()
    kconfigfunctions.CHOSEN.update(chosen or {})
    build.mkdir(parents=True, exist_ok=True)
    (build / "Kconfig.modules").write_text(kconfig_modules_snippet(module_roots))
    old = {k: os.environ.get(k) for k in ("KCONFIG_BINARY_DIR", "KCONFIG_WARN_UNDEF", "KCONFIG_FUNCTIONS")}
    os.environ.update(KCONFIG_BINARY_DIR=str(build), KCONFIG_WARN_UNDEF="y", KCONFIG_FUNCTIONS="kconfigfunctions")
    try:
        k = kconfiglib.Kconfig(str(FAKE_ZEPHYR / "Kconfig.zephyr"), warn_to_stderr=False)
        if conf is not None:
            (build / "prj.conf").write_text(conf)
            k.load_config(str(build / "prj.conf"))
    finally:
        for key, v in old.items():
            os.environ.pop(key, None) if v is None else os.environ.__setitem__(key, v)
    assert not k.warnings, k.warnings
    return k


def autoconf(module_roots, build: Path, conf: str, chosen=None) -> Path:
    """build/autoconf.h as Zephyr's build writes it (kconfiglib's
    write_autoconf) for prj.conf `conf`; compile with -imacros it."""
    k = kconfig_load(module_roots, build, conf, chosen)
    k.write_autoconf(str(build / "autoconf.h"))
    return build / "autoconf.h"


def zephyr_sdk_name(name: str) -> bool:
    return bool(re.match(r"(k_|printk$|vprintk$|arch_|sys_clock|z_|Z_)", name))


def test_zephyr_layout(compiled, tmp_path):
    c = compiled["int8"]
    files = zephyr.emit(c, tmp_path)
    root = tmp_path / "zephyr" / "model"
    assert sorted(p.relative_to(root).as_posix() for p in files) == sorted(
        ["zephyr/module.yml", "CMakeLists.txt", "Kconfig", "include/model.h", "include/cuvil_model.h",
         "src/model.c", "README.md"])
    write(files, tmp_path)
    meta = zephyr_module(root)
    assert meta["name"] == "cuvil_model" and meta["build"] == {"cmake": ".", "kconfig": "Kconfig"}
    cm = [ln.strip() for ln in files[root / "CMakeLists.txt"].splitlines() if ln.strip() and not ln.startswith("#")]
    assert cm[0] == "if(CONFIG_CUVIL_MODEL_MODEL)" and cm[-1] == "endif()"
    assert "zephyr_library_named(cuvil_model)" in cm and "zephyr_include_directories(include)" in cm
    srcs = [re.fullmatch(r"zephyr_library_sources\((.*)\)", ln) for ln in cm]
    srcs = [s.group(1) for s in srcs if s]
    assert srcs == ["src/model.c"] and (root / srcs[0]).is_file()
    src = files[root / "src" / "model.c"]
    assert "#define MODEL_IMPLEMENTATION" in src and "CONFIG_CUVIL_MODEL_MODEL_ARENA_SECTION" in src
    # the README's command names the board's Zephyr name
    cb = compile_model(two_io_model(), board="nucleo-f746zg", name="kws")
    readme = zephyr.emit(cb, tmp_path)[tmp_path / "zephyr" / "kws" / "README.md"]
    assert "west build -b nucleo_f746zg <app> -- -DZEPHYR_EXTRA_MODULES=" in readme
    assert "CONFIG_CUVIL_MODEL_KWS=y" in readme


def test_zephyr_module_yml_check_can_fail(tmp_path):
    """The schema check refuses what zephyr_module.py refuses."""
    root = tmp_path / "m"
    (root / "zephyr").mkdir(parents=True)
    for text, why in (("name: x\nbuild:\n  cmake: .\n  kconfg: Kconfig\n", "build.kconfg: key not in the schema"),
                      ("name: [x]\n", "name: str required"),
                      ("build:\n  depends: x\n", "build.depends: a sequence is required"),
                      ("build:\n  cmake: nowhere\n", "cmake: no CMakeLists.txt there")):
        (root / "zephyr" / "module.yml").write_text(text)
        with pytest.raises(AssertionError, match=re.escape(why)):
            zephyr_module(root)


def test_zephyr_kconfig_with_kconfiglib(compiled, tmp_path):
    """The module's Kconfig, parsed by kconfiglib inside the stand-in Zephyr
    tree: the model is off until prj.conf enables it; the arena placement
    choice and its section name; DTCM offered only when the devicetree
    chooses an enabled zephyr,dtcm; two models side by side."""
    write(zephyr.emit(compiled["int8"], tmp_path), tmp_path)
    write(zephyr.emit(compile_model(two_io_model(), name="kws8"), tmp_path), tmp_path)
    roots = [tmp_path / "zephyr" / "model", tmp_path / "zephyr" / "kws8"]
    k = kconfig_load(roots, tmp_path / "b0")
    assert k.syms["ZEPHYR_CUVIL_MODEL_MODULE"].str_value == "y" and k.syms["ZEPHYR_CUVIL_KWS8_MODULE"].str_value == "y"
    assert k.syms["CUVIL_MODEL_MODEL"].str_value == "n" and k.syms["CUVIL_MODEL_KWS8"].str_value == "n"
    assert "The neural network" in k.syms["CUVIL_MODEL_MODEL"].nodes[0].help

    def section(conf, chosen=None, name="MODEL"):
        kk = kconfig_load(roots, tmp_path / "b1", conf, chosen)
        choice = kk.syms[f"CUVIL_MODEL_{name}_ARENA_BSS"].choice
        return (choice.selection.name.rsplit("_", 1)[-1], kk.syms[f"CUVIL_MODEL_{name}_ARENA_SECTION"].str_value,
                kk.syms[f"CUVIL_MODEL_{name}_ARENA_DTCM"].visibility)

    on = "CONFIG_CUVIL_MODEL_MODEL=y\n"
    assert section(on) == ("BSS", "", 0)
    assert section(on + "CONFIG_CUVIL_MODEL_MODEL_ARENA_NOINIT=y\n") == ("NOINIT", ".noinit.cuvil_model_arena", 0)
    # DTCM: not selectable (kconfiglib keeps the default) without a chosen zephyr,dtcm
    kk = kconfig_load(roots, tmp_path / "b2", on)
    dtcm = kk.syms["CUVIL_MODEL_MODEL_ARENA_DTCM"]
    assert dtcm.visibility == 0 and not dtcm.set_value(2) or dtcm.str_value == "n"
    assert section(on + "CONFIG_CUVIL_MODEL_MODEL_ARENA_DTCM=y\n", {"zephyr,dtcm": True}) == \
        ("DTCM", ".dtcm_bss.cuvil_model_arena", 2)
    assert section(on + "CONFIG_CUVIL_MODEL_MODEL_ARENA_DTCM=y\n", {"zephyr,dtcm": False})[0] == "BSS"
    assert section(on + 'CONFIG_CUVIL_MODEL_MODEL_ARENA_CUSTOM=y\nCONFIG_CUVIL_MODEL_MODEL_ARENA_SECTION=".sram2"\n') \
        == ("CUSTOM", ".sram2", 0)
    # the two models configure independently
    assert section("CONFIG_CUVIL_MODEL_KWS8=y\nCONFIG_CUVIL_MODEL_KWS8_ARENA_NOINIT=y\n" + on, name="KWS8")[:2] == \
        ("NOINIT", ".noinit.cuvil_kws8_arena")


@pytest.mark.parametrize("placement,conf,section", [
    ("BSS", "", None), ("NOINIT", "CONFIG_CUVIL_MODEL_MODEL_ARENA_NOINIT=y\n", ".noinit.cuvil_model_arena"),
    ("DTCM", "CONFIG_CUVIL_MODEL_MODEL_ARENA_DTCM=y\n", ".dtcm_bss.cuvil_model_arena"),
    ("CUSTOM", 'CONFIG_CUVIL_MODEL_MODEL_ARENA_CUSTOM=y\nCONFIG_CUVIL_MODEL_MODEL_ARENA_SECTION=".sram2"\n', ".sram2")])
def test_zephyr_module_compiles(compiled, tmp_path, placement, conf, section):
    """src/model.c with the autoconf.h kconfiglib writes for each placement
    (-imacros, as Zephyr's build): the arena lands in the chosen section."""
    c = compiled["int8"]
    write(zephyr.emit(c, tmp_path), tmp_path)
    root = tmp_path / "zephyr" / "model"
    ac = autoconf([root], tmp_path / "build", "CONFIG_CUVIL_MODEL_MODEL=y\n" + conf, {"zephyr,dtcm": True})
    assert f"#define CONFIG_CUVIL_MODEL_MODEL_ARENA_{placement} 1" in ac.read_text()
    obj = tmp_path / "model.o"
    cc([*WARN, "-pedantic", "-imacros", ac, "-I", root / "include", "-c", root / "src" / "model.c", "-o", obj])
    if section:
        assert section.encode() + b"\0" in obj.read_bytes(), f"arena not in section {section}"
    else:
        assert b".noinit" not in obj.read_bytes()


def test_zephyr_sample_includes_what_it_uses():
    """Each Zephyr name the sample (and the PlatformIO example's Zephyr
    branch) uses is declared by a header it includes itself; the stand-ins
    declare what Zephyr's headers of the same path declare."""
    decls = standins.per_file(FAKE_ZEPHYR)
    main = (SAMPLE / "src" / "main.c").read_text()
    assert standins.missing_includes(main, decls, zephyr_sdk_name) == {}
    assert standins.missing_includes(main.replace("#include <zephyr/sys/time_units.h>\n", ""), decls,
                                     zephyr_sdk_name) == {"k_cyc_to_us_floor32": ["zephyr/sys/time_units.h"]}
    c = compile_model(two_io_model(), board="mimxrt1060-evk")
    cpp = next(t for p, t in platformio.emit(c, Path("/x")).items() if p.name == "main.cpp")
    zephyr_branch = cpp.split("#elif defined(__ZEPHYR__)", 1)[1].split("#else", 1)[0]
    assert standins.missing_includes(zephyr_branch, decls, zephyr_sdk_name) == {}


@pytest.mark.parametrize("kind", ["int8", "float"])
def test_zephyr_sample_runs(compiled, tmp_path, kind):
    """firmware_examples/zephyr: its prj.conf through kconfiglib into
    autoconf.h, src/main.c + the module's C built with it against the
    stand-in kernel on the host: prints output 0 (x1000) as the reference
    computes it."""
    c = compiled[kind]
    g = c.graph
    write(zephyr.emit(c, tmp_path), tmp_path)
    root = tmp_path / "zephyr" / "model"
    ac = autoconf([root], tmp_path / "build", (SAMPLE / "prj.conf").read_text())
    inc = ["-imacros", ac, "-I", root / "include", "-I", FAKE_ZEPHYR]
    objs = []
    for src in (root / "src" / "model.c", SAMPLE / "src" / "main.c", FAKE_ZEPHYR / "kernel_host.c"):
        o = tmp_path / (src.stem + ".o")
        cc([*WARN, "-pedantic", *inc, "-c", src, "-o", o])
        objs.append(o)
    exe = tmp_path / "sample"
    cc([*objs, "-o", exe, "-lm"])
    r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m = re.search(r"output 0 \((\d+) values, x1000\):([-\d ]+)", r.stdout)
    assert m, r.stdout
    got = np.array(m.group(2).split(), dtype=np.int64)
    assert "model_run:" in r.stdout and " cycles, " in r.stdout
    # the reference on the sample's input pattern, computed independently
    y, to = _example_reference(g)
    if to.dtype != "float32":
        y = (y.astype(np.int32) - int(to.quant.zero_point[0])).astype(np.float32) * np.float32(to.quant.scale[0])
    want = np.rint(y.astype(np.float32) * np.float32(1000)).astype(np.int64)[:16]
    assert int(m.group(1)) == to.size and len(got) == len(want)
    if to.dtype == "float32":
        assert np.abs(got - want).max() <= 1, (got, want)
    else:
        assert np.array_equal(got, want), (got, want)
        assert f"argmax {int(np.argmax(want))}" in r.stdout


def test_zephyr_sample_files(tmp_path):
    conf = (SAMPLE / "prj.conf").read_text()
    assert "CONFIG_CUVIL_MODEL_MODEL=y" in conf.splitlines()
    # every line of prj.conf sets a symbol that exists (kconfiglib warns otherwise)
    c = compile_model(two_io_model())
    write(zephyr.emit(c, tmp_path), tmp_path)
    k = kconfig_load([tmp_path / "zephyr" / "model"], tmp_path / "build", conf)
    assert k.syms["CUVIL_MODEL_MODEL"].str_value == "y" and k.syms["MAIN_STACK_SIZE"].str_value == "4096"
    cm = (SAMPLE / "CMakeLists.txt").read_text()
    assert "find_package(Zephyr REQUIRED HINTS $ENV{ZEPHYR_BASE})" in cm
    assert "target_sources(app PRIVATE src/main.c)" in cm
    main = (SAMPLE / "src" / "main.c").read_text()
    assert "k_cycle_get_32()" in main and "model_run(model_arena)" in main
    readme = (SAMPLE / "README.md").read_text()
    from cuvil_mcu import boards
    assert "-- -DZEPHYR_EXTRA_MODULES=$(realpath out/zephyr/model)" in readme
    assert "west build -b nucleo_f746zg " in readme and "west build -b native_sim " in readme
    for b in boards.all_boards().values():
        if b.zephyr_board:
            assert f"| {b.id} | `{b.zephyr_board}` |" in readme, b.id


@pytest.mark.parametrize("name,ok", [("model", True), ("kws_2", True), ("Net", True), ("2net", False),
                                     ("my-net", False), ("na.me", False)])
def test_zephyr_check_name(name, ok):
    if ok:
        zephyr.check_name(name)
    else:
        with pytest.raises(CuvilError, match="Kconfig symbol"):
            zephyr.check_name(name)


# ---------------------------------------------------------------------------
# PlatformIO

STR, LIST_STR = "str", "list[str]"
# The library.json fields PlatformIO documents (docs.platformio.org, "library.json"),
# with their types: "a|b" = either.
PIO_FIELDS = {
    "name": STR, "version": STR, "description": STR, "keywords": f"{STR}|{LIST_STR}",
    "homepage": STR, "license": STR, "authors": "dict|list[dict]", "repository": "dict",
    "frameworks": f"{STR}|{LIST_STR}", "platforms": f"{STR}|{LIST_STR}", "headers": f"{STR}|{LIST_STR}",
    "dependencies": "dict|list[dict]", "examples": f"{STR}|{LIST_STR}|list[dict]", "export": "dict",
    "build": "dict", "scripts": "dict", "system": f"{STR}|{LIST_STR}",
}
PIO_BUILD = {"flags": f"{STR}|{LIST_STR}", "unflags": f"{STR}|{LIST_STR}", "includeDir": STR, "srcDir": STR,
             "srcFilter": f"{STR}|{LIST_STR}", "extraScript": STR, "libArchive": "bool",
             "libLDFMode": STR, "libCompatMode": STR, "builder": STR}
PIO_EXPORT = {"include": f"{STR}|{LIST_STR}", "exclude": f"{STR}|{LIST_STR}"}
PIO_EXAMPLE = {"name": STR, "base": STR, "files": LIST_STR}


def _is(v, spec: str) -> bool:
    checks = {"str": lambda x: isinstance(x, str), "bool": lambda x: isinstance(x, bool),
              "dict": lambda x: isinstance(x, dict),
              "list[str]": lambda x: isinstance(x, list) and all(isinstance(i, str) for i in x),
              "list[dict]": lambda x: isinstance(x, list) and all(isinstance(i, dict) for i in x)}
    return any(checks[s](v) for s in spec.split("|"))


def validate_library_json(data: dict, root: Path) -> None:
    for k in ("name", "version"):
        assert k in data, f"library.json: '{k}' is required"
    for where, fields, obj in (("", PIO_FIELDS, data), ("build.", PIO_BUILD, data.get("build", {})),
                               ("export.", PIO_EXPORT, data.get("export", {}))):
        for k, v in obj.items():
            assert k in fields, f"library.json: unknown field {where}{k}"
            assert _is(v, fields[k]), f"library.json: {where}{k} must be {fields[k]}, is {v!r}"
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", data["name"]) and len(data["name"]) <= 100
    assert re.fullmatch(r"\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?", data["version"]), "version must be semver"
    assert len(data.get("description", "")) <= 1000
    for e in data.get("examples", []):
        if isinstance(e, dict):
            assert set(e) <= set(PIO_EXAMPLE) and all(_is(e[k], PIO_EXAMPLE[k]) for k in e)
            assert all((root / e["base"] / f).is_file() for f in e["files"])
    b = data.get("build", {})
    assert (root / b.get("includeDir", "include")).is_dir() and (root / b.get("srcDir", "src")).is_dir()
    for h in [data["headers"]] if isinstance(data.get("headers"), str) else data.get("headers", []):
        assert (root / b.get("includeDir", "include") / h).is_file()
    for p in data.get("export", {}).get("include", []):
        assert (root / p).exists(), f"export.include {p} does not exist"


def test_platformio_library(compiled, tmp_path):
    import configparser
    c = compile_model(two_io_model(), board="nucleo-f746zg")
    files = platformio.emit(c, tmp_path)
    root = tmp_path / "platformio" / "model"
    assert sorted(p.relative_to(root).as_posix() for p in files) == sorted(
        ["library.json", "include/model.h", "src/model.c", "examples/platformio.ini", "examples/src/main.cpp",
         "README.md"])
    write(files, tmp_path)
    data = json.loads(files[root / "library.json"])
    validate_library_json(data, root)
    assert data["name"] == "cuvil-model" and data["headers"] == "model.h"
    assert "arena" in data["description"]
    ini = configparser.ConfigParser()
    ini.read_string(files[root / "examples" / "platformio.ini"])
    env = ini["env:nucleo_f746zg"]
    assert env["platform"] == "ststm32" and env["board"] == c.board.platformio_board
    assert env["framework"] == "arduino"
    dep = env["lib_deps"].strip()
    assert dep.startswith("symlink://")
    assert (root / "examples" / dep[len("symlink://"):] / "library.json").is_file()
    readme = files[root / "README.md"]
    assert "pio run -e nucleo_f746zg" in readme and "board = nucleo_f746zg" in readme
    # the other boards: a PlatformIO platform for every platformio_board
    from cuvil_mcu import boards
    for b in boards.all_boards().values():
        plat, board, fw = platformio.platform_of(compile_model(two_io_model(), board=b.id))
        assert board == b.platformio_board and "<" not in plat, b.id
        assert (fw is None) == (plat == "native")


@pytest.mark.parametrize("kind", ["int8", "float"])
def test_platformio_example_runs_native(compiled, tmp_path, kind):
    """The example's host ("native") branch, built as PlatformIO would (the
    library's .c as C, main.cpp as C++), prints the reference's output."""
    c = compiled[kind]
    g = c.graph
    write(platformio.emit(c, tmp_path), tmp_path)
    root = tmp_path / "platformio" / "model"
    ini = (root / "examples" / "platformio.ini").read_text()
    assert "[env:native]" in ini and "platform = native" in ini
    lib_o, main_o, exe = tmp_path / "lib.o", tmp_path / "main.o", tmp_path / "ex"
    cc([*WARN, "-pedantic", "-O2", "-I", root / "include", "-c", root / "src" / "model.c", "-o", lib_o])
    r = subprocess.run(["g++", "-Wall", "-Wextra", "-Werror", "-std=c++11", "-I", str(root / "include"), "-c",
                        str(root / "examples" / "src" / "main.cpp"), "-o", str(main_o)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    subprocess.run(["g++", str(lib_o), str(main_o), "-o", str(exe), "-lm"], check=True)
    r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    got = np.array(re.search(r"output 0:([-\d. ]+)", r.stdout).group(1).split(), dtype=np.float64)
    y, to = _example_reference(g)
    if to.dtype != "float32":
        y = (y.astype(np.int32) - int(to.quant.zero_point[0])) * float(to.quant.scale[0])
    np.testing.assert_allclose(got, y[:16], atol=6e-5, rtol=1e-4)
    assert "model_run: " in r.stdout


def test_platformio_zephyr_framework_files(tmp_path):
    """PlatformIO's Zephyr framework files: prj.conf through kconfiglib into
    autoconf.h; main.cpp's Zephyr branch (C++) with the library's C against
    the stand-in kernel prints output 0 (x1000) as the reference computes it."""
    c = compile_model(two_io_model(), board="mimxrt1060-evk")
    files = platformio.emit(c, tmp_path)
    root = tmp_path / "platformio" / "model" / "examples"
    assert "framework = zephyr" in files[root / "platformio.ini"]
    assert "target_sources(app PRIVATE ../src/main.cpp)" in files[root / "zephyr" / "CMakeLists.txt"]
    write(files, tmp_path)
    ac = autoconf([], tmp_path / "build", (root / "zephyr" / "prj.conf").read_text())
    assert "#define CONFIG_CPP 1" in ac.read_text()
    inc = ["-imacros", str(ac), "-I", str(tmp_path / "platformio" / "model" / "include"), "-I", str(FAKE_ZEPHYR)]
    r = subprocess.run(["g++", "-Wall", "-Wextra", "-Werror", "-std=c++11", "-D__ZEPHYR__", *inc, "-c",
                        str(root / "src" / "main.cpp"), "-o", str(tmp_path / "m.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cc([*WARN, "-pedantic", *inc, "-c", tmp_path / "platformio" / "model" / "src" / "model.c", "-o", tmp_path / "l.o"])
    cc([*WARN, "-pedantic", *inc, "-c", FAKE_ZEPHYR / "kernel_host.c", "-o", tmp_path / "k.o"])
    subprocess.run(["g++", str(tmp_path / "m.o"), str(tmp_path / "l.o"), str(tmp_path / "k.o"), "-o",
                    str(tmp_path / "ex"), "-lm"], check=True)
    out = subprocess.run([tmp_path / "ex"], capture_output=True, text=True, timeout=60, check=True).stdout
    got = np.array(re.search(r"output 0 \(x1000\):([-\d ]+)", out).group(1).split(), dtype=np.int64)
    y, _ = _example_reference(c.graph)
    want = np.rint(y.astype(np.float32) * np.float32(1000)).astype(np.int64)[:16]
    assert np.abs(got - want).max() <= 1, (got, want)
    assert re.search(r"model_run: \d+ cycles, \d+ us", out), out


FAKE_ARDUINO = HERE / "fake_arduino"


@pytest.mark.parametrize("kind", ["int8", "float"])
def test_platformio_arduino_branch_runs(compiled, tmp_path, kind):
    """main.cpp's Arduino branch (C++) against the ArduinoCore-API stand-ins,
    linked with the tests' host core: setup() prints output 0 as the
    reference computes it (4 decimals; Serial's CR LF reads as a newline)."""
    c = compiled[kind]
    write(platformio.emit(c, tmp_path), tmp_path)
    root = tmp_path / "platformio" / "model"
    gxx = ["g++", "-Wall", "-Wextra", "-Werror", "-std=c++11", "-DARDUINO=10819", "-I", str(root / "include"),
           "-I", str(FAKE_ARDUINO)]
    for src, obj in ((root / "examples" / "src" / "main.cpp", "m.o"), (FAKE_ARDUINO / "core_host.cpp", "core.o")):
        r = subprocess.run([*gxx, "-c", str(src), "-o", str(tmp_path / obj)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    cc([*WARN, "-pedantic", "-I", root / "include", "-c", root / "src" / "model.c", "-o", tmp_path / "l.o"])
    subprocess.run(["g++", *(str(tmp_path / o) for o in ("m.o", "core.o", "l.o")), "-o", str(tmp_path / "ex"),
                    "-lm"], check=True)
    out = subprocess.run([tmp_path / "ex"], capture_output=True, text=True, timeout=60, check=True).stdout
    got = np.array(re.search(r"output 0:([-\d. ]+)\n", out).group(1).split(), dtype=np.float64)
    y, to = _example_reference(c.graph)
    if to.dtype != "float32":
        y = (y.astype(np.int32) - int(to.quant.zero_point[0])) * float(to.quant.scale[0])
    np.testing.assert_allclose(got, y[:16], atol=6e-5, rtol=1e-4)
    assert re.search(r"model_run: \d+ us\n", out), out


@pytest.mark.parametrize("name,ok", [("model", True), ("kws_2", True), ("Net", True), ("my.net", False),
                                     ("_x", False), ("a" * 95, False)])
def test_platformio_check_name(name, ok):
    if ok:
        platformio.check_name(name)
    else:
        with pytest.raises(CuvilError, match="PlatformIO library name"):
            platformio.check_name(name)


# ---------------------------------------------------------------------------
# the command line

ENV = dict(os.environ, PYTHONHASHSEED="0")
ENV.pop("CUVIL_DEBUG", None)


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", *map(str, args)], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=120)


def tree(d: Path) -> dict:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_cli_emit_all(tmp_path):
    onnx.save(two_io_model(), tmp_path / "m.onnx")
    outs = []
    for run in ("a", "b"):
        r = cli("gen", tmp_path / "m.onnx", "--board", "nucleo-f746zg", "--emit", "micropython,zephyr,platformio",
                "-o", tmp_path / run)
        assert r.returncode == 0, r.stderr
        outs.append(tree(tmp_path / run))
    assert outs[0] == outs[1], "gen --emit is not deterministic"
    names = set(outs[0])
    assert {"model.h", "micropython/cuvilmodel/modcuvilmodel.c", "micropython/cuvilmodel/micropython.mk",
            "zephyr/model/zephyr/module.yml", "zephyr/model/src/model.c", "platformio/model/library.json",
            "platformio/model/examples/platformio.ini"} <= names
    assert outs[0]["micropython/cuvilmodel/model.h"] == outs[0]["model.h"]


@pytest.mark.parametrize("args,words", [
    (["--emit", "micropython,cmake"], ["unknown target", "cmake", "micropython", "zephyr", "platformio"]),
    (["--emit", "micropython", "--name", "Class"], ["'class'", "Python identifier", "keyword"]),
    (["--emit", "micropython", "--name", "math"], ["'math'", "built-in module"]),
    (["--emit", "zephyr,platformio", "--name", "my-net"], ["my-net"]),
])
def test_cli_bad_emit(tmp_path, args, words):
    onnx.save(two_io_model(), tmp_path / "m.onnx")
    out = tmp_path / "out"
    r = cli("gen", tmp_path / "m.onnx", *args, "-o", out)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuvil-mcu: error: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not out.exists() or not any(out.rglob("*")), "files written after an error"


def test_micropython_firmware_example():
    d = ROOT / "firmware_examples" / "micropython"
    readme = (d / "README.md").read_text()
    assert "make -C ports/unix USER_C_MODULES=/abs/path/to/out/micropython" in readme
    assert ("make -C ports/rp2 BOARD=RPI_PICO USER_C_MODULES=/abs/path/to/out/micropython/cuvilmodel/"
            "micropython.cmake") in readme
    src = (d / "main.py").read_text()
    compile(src, "main.py", "exec")
    assert "import cuvilmodel" in src and "cuvilmodel.run(" in src
    assert "MICROPY_PY_BTREE=0 MICROPY_PY_SSL=0" in readme and "make -C ports/qemu BOARD=MPS2_AN385" in readme


def test_micropython_firmware_example_expected_output():
    """The README's expected output lines are what main.py prints for the
    shared KWS model: the reference on main.py's input pattern (quantized by
    the module), dequantized, formatted as MicroPython's %.4f does (a tie
    rounds away from zero: 0.03125 -> 0.0313)."""
    if not sm.available():
        pytest.skip("shared models not available (../shared/models)")
    from decimal import ROUND_HALF_UP, Decimal
    c = compile_model(str(sm.model_path("kws_dscnn")))
    y, to = _example_reference(c.graph)
    real = [float(np.float64(to.quant.scale[0]) * (int(q) - int(to.quant.zero_point[0]))) for q in y]
    shown = [str(Decimal(v).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)) for v in real]
    readme = (ROOT / "firmware_examples" / "micropython" / "README.md").read_text()
    assert "output [" + ", ".join(f"'{v}'" for v in shown[:16]) + "]" in readme
    assert f"argmax {int(np.argmax(real))}" in readme


def test_micropython_int8_two_io(tmp_path):
    """Several quantized inputs/outputs: attributes become tuples (None where
    an input carries no quantization), run(x0, x1) returns a tuple."""
    x = np.random.default_rng(0).standard_normal((8, 2, 7)).astype(np.float32)
    c = compile_model(two_io_model(), quantize="int8", calibration={"a": x, "b": x}, io="int8")
    g = c.graph
    exe, _ = mpy_build(c, tmp_path)
    a = mpy_attrs(exe)
    t = [g.tensors[n] for n in g.inputs + g.outputs]
    assert a["input_shape"] == (t[0].shape, t[1].shape) and a["output_shape"] == (t[2].shape, t[3].shape)
    for key, ts in (("input", t[:2]), ("output", t[2:])):
        scales = tuple(None if u.quant is None else float(np.float32(u.quant.scale[0])) for u in ts)
        zps = tuple(None if u.quant is None else int(u.quant.zero_point[0]) for u in ts)
        assert tuple(None if v is None else float(np.float32(v)) for v in a[f"{key}_scale"]) == scales
        assert a[f"{key}_zero_point"] == zps
    rng = np.random.default_rng(1)
    xs = [rng.integers(-128, 128, u.shape).astype(np.int8) for u in t[:2]]
    ref = reference.run(g, dict(zip(g.inputs, xs)))
    line, out = mpy_run(exe, tmp_path, "array:b", xs)
    assert line == "OK tuple b b", line
    want = np.concatenate([ref[n].reshape(-1) for n in g.outputs])
    assert np.array_equal(np.frombuffer(out, np.int8), want)
