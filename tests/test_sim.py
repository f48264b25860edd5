"""Bare-metal firmware on emulated Cortex-M cores (QEMU), the `sim` command,
and the firmware projects `gen --board` writes.

The oracle is the numpy reference interpreter (cuvil_mcu.reference) on the
compiled graph, computed on the host, and TFLM's own outputs shipped with the
shared models (../shared/models, samples_int8.npz). The firmware's outputs
come back over semihosting; nothing here compares the firmware with itself.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import models
import shared_models as sm
from cuvil_mcu import cli, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import BudgetError, InputError
from cuvil_mcu.sim import firmware, qemu

HAVE_GCC = shutil.which("arm-none-eabi-gcc") is not None
HAVE_QEMU = shutil.which("qemu-system-arm") is not None
needs_gcc = pytest.mark.skipif(not HAVE_GCC, reason="arm-none-eabi-gcc missing: apt-get install gcc-arm-none-eabi "
                                                    "libnewlib-arm-none-eabi")
needs_qemu = pytest.mark.skipif(not (HAVE_GCC and HAVE_QEMU), reason="needs apt packages gcc-arm-none-eabi "
                                                                     "libnewlib-arm-none-eabi qemu-system-arm")
needs_models = pytest.mark.skipif(not sm.available(), reason=f"reference models not found at {sm.SHARED}")

BOARDS = ["qemu-mps2-an386", "qemu-mps2-an385", "qemu-mps2-an500", "qemu-mps2-an505", "qemu-mps3-an547"]
ENV = dict(os.environ, PYTHONHASHSEED="0")
ENV.pop("CUVIL_DEBUG", None)


def run_cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", *map(str, args)], env=env or ENV, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def one_error_line(r, code=None) -> str:
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert r.returncode != 0
    if code is not None:
        assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert lines and lines[0].startswith("cuvil-mcu: error:"), r.stderr
    return r.stderr


def shared_inputs(name, c):
    s = sm.samples(name)
    g = c.graph
    x = s["inputs"]
    return x.reshape((x.shape[0],) + g.tensors[g.inputs[0]].shape), s


_REF: dict[str, np.ndarray] = {}


def host_reference(name) -> np.ndarray:
    """The numpy reference on the host-compiled graph (portable kernels), all 8 samples."""
    if name not in _REF:
        c = compile_model(str(sm.model_path(name)), board="host")
        x, _ = shared_inputs(name, c)
        g = c.graph
        _REF[name] = np.stack([reference.run(g, {g.inputs[0]: xi})[g.outputs[0]] for xi in x])
    return _REF[name]


# ---- every shared int8 model on every QEMU Cortex-M board ----

@needs_qemu
@needs_models
@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", sm.NAMES)
def test_shared_model_on_qemu(name, board):
    c = compile_model(str(sm.model_path(name)), board=board)
    x, s = shared_inputs(name, c)
    r = qemu.simulate(c, x, board)
    out = r.outputs[0]
    # bit for bit with the reference interpreter (numpy, on the host-compiled graph: the
    # arithmetic the C must reproduce does not depend on the board)
    ref = host_reference(name).reshape(out.shape)
    assert np.array_equal(out, ref), f"{name} on {board}: {int((out != ref).sum())} elements differ from the reference"
    assert np.array_equal(out.reshape(s["expected_tflm"].shape), s["expected_tflm"])
    assert len(r.ticks) == 8 and min(r.ticks) > 0
    assert "warning:" not in r.warnings, f"{name} on {board}: the firmware build warned:\n{r.warnings}"
    print(f"\n{name} on {board}: {r.instructions:,} instructions/inference, {r.per_mac:.3f}/MAC, "
          f"text+rodata {r.text:,} B (weights {c.weights_bytes:,}), bss {r.bss:,} B")


# ---- float ----

@needs_qemu
def test_float_dscnn_an386():
    c = compile_model(models.dscnn(), board="qemu-mps2-an386")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 1, 1, 49, 10)).astype(np.float32)
    r = qemu.simulate(c, x, "qemu-mps2-an386")
    ref = qemu.reference_outputs(c, x)
    cmp = qemu.compare(r.outputs, ref, c.graph.outputs)
    assert cmp.ok, cmp.first_mismatch
    np.testing.assert_allclose(r.outputs[0], ref[0], rtol=qemu.FLOAT_RTOL, atol=qemu.FLOAT_ATOL)
    assert not np.array_equal(r.outputs[0][0], r.outputs[0][1])  # different inputs, different outputs
    print(f"\ndscnn float on an386: {r.instructions:,} instructions, {r.per_mac:.2f}/MAC, "
          f"max |diff| {cmp.max_abs:.2e}")


def test_compare_reports_first_mismatch():
    a = [np.array([[1, 2, 3]], dtype=np.int8)]
    b = [np.array([[1, 2, 4]], dtype=np.int8)]
    cmp = qemu.compare(a, b, ["y"])
    assert not cmp.ok and "sample 0 index [2]" in cmp.first_mismatch and "3" in cmp.first_mismatch
    f = [np.array([[1.0, 2.0]], dtype=np.float32)]
    assert qemu.compare(f, [f[0] * (1 + 0.5 * qemu.FLOAT_RTOL)], ["y"]).ok
    assert not qemu.compare(f, [f[0] * (1 + 3 * qemu.FLOAT_RTOL)], ["y"]).ok


# ---- failures of the firmware ----

@needs_qemu
@needs_models
def test_fault_is_reported():
    c = compile_model(str(sm.model_path("hello_world")), board="qemu-mps2-an386")
    x, _ = shared_inputs("hello_world", c)
    with pytest.raises(qemu.SimError, match="faulted") as e:
        qemu.simulate(c, x[:1], "qemu-mps2-an386", extra_cflags=["-DCUVIL_TEST_FAULT"])
    msg = str(e.value)
    assert "CUVIL FAULT" in msg and "semihosting log" in msg and "S 00000000" in msg  # log shown


@needs_qemu
@needs_models
def test_lockup_is_reported():
    """A fault inside the fault handler: the core locks up and QEMU aborts (exit 134)."""
    c = compile_model(str(sm.model_path("hello_world")), board="qemu-mps2-an386")
    x, _ = shared_inputs("hello_world", c)
    with pytest.raises(qemu.SimError, match=r"faulted on mps2-an386 \(exit 134; .*Lockup") as e:
        qemu.simulate(c, x[:1], "qemu-mps2-an386", extra_cflags=["-DCUVIL_TEST_FAULT", "-DCUVIL_TEST_LOCKUP"])
    assert "S 00000000" in str(e.value)  # the semihosting log up to the fault


@needs_qemu
@needs_models
def test_hang_times_out():
    c = compile_model(str(sm.model_path("hello_world")), board="qemu-mps2-an385")
    x, _ = shared_inputs("hello_world", c)
    with pytest.raises(qemu.SimError, match="timed out after 3 s"):
        qemu.simulate(c, x[:1], "qemu-mps2-an385", timeout=3, extra_cflags=["-DCUVIL_TEST_HANG"])


def _fc_model(k: int, n: int) -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "fc",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor("w", TensorProto.FLOAT, [k, n], w.reshape(-1).tolist())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@needs_qemu
def test_budget_counts_the_code_around_the_weights(tmp_path):
    """524,000 B of weights fit qemu-mps3-an547's 512 KB flash (524,288 B) by
    themselves, not with the code, start-up and input sample the firmware
    also puts there: gen's budget (board.code_reserve) refuses them, with the
    numbers, instead of a link that overflows later."""
    m = _fc_model(262, 500)
    with pytest.raises(BudgetError, match=r"flash: needs 556,828 B \(constants 524,060, code 32,768\), "
                                          r"board has 524,288 B: over by 32,540 B"):
        compile_model(m, board="qemu-mps3-an547")
    onnx.save(m, tmp_path / "big.onnx")
    np.save(tmp_path / "x.npy", np.zeros((1, 262), dtype=np.float32))
    r = run_cli("sim", tmp_path / "big.onnx", "--board", "qemu-mps3-an547", "--input", tmp_path / "x.npy")
    err = one_error_line(r, code=3)
    assert "524,288" in err and "over by 32,540 B" in err


def test_elf_budget_check_numbers():
    from cuvil_mcu import boards
    b = boards.get("qemu-mps3-an547")
    mm = firmware.memory_map(b)
    qemu.check_elf_budget(b, {"text": 500_000, "data": 24_288, "bss": 0, "samples": 0}, mm)  # exactly full
    with pytest.raises(BudgetError, match=r"needs 524,289 B .* has 524,288 B: over by 1 B"):
        qemu.check_elf_budget(b, {"text": 500_001, "data": 24_288, "bss": 0, "samples": 0}, mm)
    with pytest.raises(BudgetError, match=r"RAM: firmware needs 4,194,305 B"):
        qemu.check_elf_budget(b, {"text": 0, "data": 0, "bss": 4194305 - 8192, "samples": 0}, mm)


@needs_qemu
@needs_models
@pytest.mark.parametrize("board", ["qemu-mps2-an386", "qemu-mps3-an547"])
@pytest.mark.parametrize("opt", ["-O0", "-Os"])
def test_kernels_at_other_optimization_levels(board, opt):
    """The DSP / Helium kernels (inline asm with pinned registers where GCC
    would spill) build warning-free and stay bit-exact at -O0 (a debug
    build: no register pinning possible, intrinsics instead) and -Os."""
    name = "kws_dscnn"
    c = compile_model(str(sm.model_path(name)), board=board)
    x = sm.samples(name)["inputs"][:1].reshape((1,) + c.graph.tensors[c.graph.inputs[0]].shape)
    r = qemu.simulate(c, x, board, opt=opt, extra_cflags=["-Werror"])
    cmp = qemu.compare(r.outputs, qemu.reference_outputs(c, x), c.graph.outputs)
    assert cmp.ok, cmp.first_mismatch
    assert np.array_equal(r.outputs[0].reshape(-1), sm.samples(name)["expected_tflm"][0].reshape(-1))


@needs_qemu
@needs_models
def test_stack_high_water_mark():
    """The harness paints the stack reserve at reset and reports the deepest
    word overwritten: KWS on the M4 (its kernels' buffers are arena scratch)
    stays within the harness's own stack plus the header's STACK_BOUND; with
    the reserve cut to 384 B (less than the harness and the kernels) the run is
    refused as a budget error, not trusted."""
    import dataclasses
    from cuvil_mcu import boards
    name = "kws_dscnn"
    b = boards.get("qemu-mps2-an386")
    c = compile_model(str(sm.model_path(name)), board=b.id)
    x = sm.samples(name)["inputs"][:1].reshape((1,) + c.graph.tensors[c.graph.inputs[0]].shape)
    r = qemu.simulate(c, x, b)
    assert r.stack is not None and 256 < r.stack <= qemu.HARNESS_STACK + c.stack_bound, r.stack
    assert any(ln.startswith("stack") and f"{r.stack:,} B used" in ln for ln in qemu.report(c, r, None))
    small = dataclasses.replace(b, stack_reserve=384)
    with pytest.raises(BudgetError, match=r"stack ran through its whole reserve of 384 B"):
        qemu.simulate(c, x, small)


# ---- counting ----

@needs_qemu
@needs_models
def test_instruction_counts_scale_and_repeat():
    board = "qemu-mps2-an386"
    counts = {}
    for name in ("hello_world", "kws_dscnn"):
        c = compile_model(str(sm.model_path(name)), board=board)
        x, _ = shared_inputs(name, c)
        r = qemu.simulate(c, x, board)
        counts[name] = (r, c)
    hello, kws = counts["hello_world"][0], counts["kws_dscnn"][0]
    assert hello.instructions * 1000 < kws.instructions
    # per MAC within a plausible band for int8 kernels on an M4 (not a benchmark target)
    assert 0.5 < kws.per_mac < 20
    # kws is data-independent to within a few ticks across samples
    assert max(kws.ticks) - min(kws.ticks) < 0.01 * min(kws.ticks)
    # determinism: the same ELF run twice gives the same ticks, to the tick
    log1, _ = qemu.run_elf(kws.board, kws.elf)
    log2, _ = qemu.run_elf(kws.board, kws.elf)
    t1 = qemu.parse_output(log1, counts["kws_dscnn"][1].out_specs, 8)[1]
    t2 = qemu.parse_output(log2, counts["kws_dscnn"][1].out_specs, 8)[1]
    assert t1 == t2 == kws.ticks


# ---- the CLI ----

@needs_qemu
@needs_models
def test_sim_cli_end_to_end(tmp_path):
    name = "ad_fc_autoencoder"
    c = compile_model(str(sm.model_path(name)), board="qemu-mps2-an386")
    x, _ = shared_inputs(name, c)
    np.save(tmp_path / "x.npy", x[:3])
    r = run_cli("sim", sm.model_path(name), "--board", "qemu-mps2-an386", "--input", tmp_path / "x.npy",
                "-o", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    assert "identical to the host reference" in r.stdout
    assert re.search(r"[\d,]+ instructions per inference on mps2-an386", r.stdout)
    assert re.search(r"per MAC\s+[\d.]+ instructions", r.stdout)
    assert re.search(r"text\+rodata [\d,]+ B .* data [\d,]+ B, bss [\d,]+ B", r.stdout)
    y = np.load(tmp_path / "y.npy")
    assert np.array_equal(y, host_reference(name)[:3].reshape(y.shape))


@needs_qemu
@needs_models
def test_run_board_qemu_takes_the_sim_path(tmp_path):
    name = "hello_world"
    c = compile_model(str(sm.model_path(name)), board="qemu-mps2-an505")
    x, _ = shared_inputs(name, c)
    np.save(tmp_path / "x.npy", x[0])  # one sample, no samples axis
    rc = cli.main(["run", str(sm.model_path(name)), "--board", "qemu-mps2-an505", "--input",
                   str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy")])
    assert rc == 0
    y = np.load(tmp_path / "y.npy")
    assert y.shape == c.graph.tensors[c.graph.outputs[0]].shape
    assert np.array_equal(y, host_reference(name)[0].reshape(y.shape))


@needs_qemu
@needs_models
def test_sim_cli_fault_and_hang(tmp_path):
    """Through the CLI: a clear first line, the semihosting log after it, exit != 0."""
    m = sm.model_path("hello_world")
    np.save(tmp_path / "x.npy", np.zeros((1, 1), np.int8))
    r = run_cli("sim", m, "--board", "qemu-mps2-an386", "--input", tmp_path / "x.npy",
                env=dict(ENV, CUVIL_SIM_CFLAGS="-DCUVIL_TEST_FAULT"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("cuvil-mcu: error: firmware faulted on mps2-an386") and "CUVIL FAULT" in first
    assert "S 00000000" in r.stderr
    r = run_cli("sim", m, "--board", "qemu-mps2-an386", "--input", tmp_path / "x.npy", "--timeout", "2",
                env=dict(ENV, CUVIL_SIM_CFLAGS="-DCUVIL_TEST_HANG"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[0].startswith("cuvil-mcu: error: firmware timed out after 2 s")


@needs_models
def test_sim_bad_input(tmp_path):
    m = sm.model_path("kws_dscnn")
    np.save(tmp_path / "shape.npy", np.zeros((1, 49, 11, 1), np.int8))
    err = one_error_line(run_cli("sim", m, "--board", "qemu-mps2-an386", "--input", tmp_path / "shape.npy"))
    assert "shape [1, 49, 11, 1]" in err and "[1, 49, 10, 1]" in err
    np.save(tmp_path / "dtype.npy", np.zeros((1, 49, 10, 1), np.float32))
    err = one_error_line(run_cli("sim", m, "--board", "qemu-mps2-an386", "--input", tmp_path / "dtype.npy"))
    assert "float32" in err and "int8" in err
    err = one_error_line(run_cli("sim", m, "--board", "qemu-nope", "--input", tmp_path / "dtype.npy"))
    assert "unknown board 'qemu-nope'" in err
    err = one_error_line(run_cli("sim", m, "--board", "cortex-a7-neon", "--input", tmp_path / "dtype.npy"))
    assert "has no simulator" in err and "qemu-mps2-an386" in err and "qemu-mps3-an547" in err
    with pytest.raises(InputError, match="expects int8"):
        qemu.as_inputs(compile_model(str(m), board="qemu-mps2-an386"), np.zeros((1, 49, 10, 1), np.float32))


@needs_models
def test_sim_missing_tools(tmp_path):
    """PATH without the cross compiler, then without QEMU: the apt package is named."""
    m = sm.model_path("hello_world")
    np.save(tmp_path / "x.npy", np.zeros((1, 1), np.int8))
    empty = tmp_path / "bin"
    empty.mkdir()
    r = run_cli("sim", m, "--board", "qemu-mps2-an386", "--input", tmp_path / "x.npy",
                env=dict(ENV, PATH=str(empty)))
    err = one_error_line(r)
    assert "arm-none-eabi-gcc not found" in err and "apt-get install gcc-arm-none-eabi" in err
    if HAVE_GCC:
        (empty / "arm-none-eabi-gcc").symlink_to(shutil.which("arm-none-eabi-gcc"))
        r = run_cli("sim", m, "--board", "qemu-mps2-an386", "--input", tmp_path / "x.npy",
                    env=dict(ENV, PATH=str(empty)))
        err = one_error_line(r)
        assert "qemu-system-arm not found" in err and "apt-get install qemu-system-arm" in err


# ---- gen --board: the firmware project ----

def _make(d: Path, *args):
    return subprocess.run(["make", *args], cwd=d, capture_output=True, text=True, timeout=300)


@needs_gcc
@needs_models
@pytest.mark.parametrize("board", ["nucleo-f746zg", "nrf52840dk"])
@pytest.mark.parametrize("model", ["kws_dscnn", "float_dscnn"])
def test_gen_project_builds_warning_free(tmp_path, board, model):
    if model == "float_dscnn":
        onnx.save(models.dscnn(), tmp_path / "m.onnx")
        src = tmp_path / "m.onnx"
    else:
        src = sm.model_path(model)
    out = tmp_path / "out"
    r = run_cli("gen", src, "--board", board, "-o", out)
    assert r.returncode == 0, r.stderr
    for f in ("model.h", "main.c", "startup.c", "cuvil_io.h", "uart.c", "cuvil_board.h", "samples.c", "linker.ld",
              "Makefile", "README.md"):
        assert (out / f).exists(), f
    ld = (out / "linker.ld").read_text()
    b = __import__("cuvil_mcu.boards", fromlist=["get"]).get(board)
    assert f"ORIGIN = 0x{b.flash_base:08x}, LENGTH = {b.flash}" in ld
    assert f"ORIGIN = 0x{b.ram_base:08x}, LENGTH = {b.ram}" in ld
    assert "CUVIL_SEMIHOSTING" not in (out / "Makefile").read_text()  # a real board: no semihosting
    mk = _make(out)
    assert mk.returncode == 0, mk.stderr
    assert "warning" not in mk.stderr.lower(), mk.stderr
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(out / "firmware.elf")], capture_output=True,
                         text=True).stdout
    assert "bkpt" not in dis  # no semihosting call: it would fault without a debugger
    syms = subprocess.run(["arm-none-eabi-nm", str(out / "firmware.elf")], capture_output=True, text=True).stdout
    vec = int(next(ln.split()[0] for ln in syms.splitlines() if ln.endswith(" cuvil_vector_table")), 16)
    assert vec == b.flash_base


@needs_gcc
@needs_models
def test_gen_arena_in_dtcm_override(tmp_path):
    out = tmp_path / "out"
    assert run_cli("gen", sm.model_path("kws_dscnn"), "--board", "nucleo-f746zg", "-o", out).returncode == 0
    # uncomment the #define main.c documents
    main = (out / "main.c").read_text()
    line = next(ln for ln in main.splitlines() if ln.startswith("#define MODEL_ARENA_ATTR"))
    i = main.index(line)
    assert main.rfind("/*", 0, i) > main.rfind("*/", 0, i)  # inside a comment as shipped
    (out / "main.c").write_text(main.replace("#define MODEL_IMPLEMENTATION", line + "\n#define MODEL_IMPLEMENTATION"))
    mk = _make(out)
    assert mk.returncode == 0 and "warning" not in mk.stderr.lower(), mk.stderr
    table = subprocess.run(["arm-none-eabi-objdump", "-t", str(out / "firmware.elf")], capture_output=True,
                           text=True).stdout
    arena = next(ln for ln in table.splitlines() if ln.split()[-1:] == ["arena"])
    assert " .dtcm\t" in arena
    assert int(arena.split()[0], 16) == 0x20000000  # DTCM on the F746 starts RAM
    # the same override runs correctly on QEMU (the .dtcm section exists in the sim linker script too)
    if HAVE_QEMU:
        c = compile_model(str(sm.model_path("kws_dscnn")), board="qemu-mps2-an500")
        x, _ = shared_inputs("kws_dscnn", c)
        attr = "-D" + line[len("#define "):].replace(" ", "=", 1)
        r = qemu.simulate(c, x[:2], "qemu-mps2-an500", extra_cflags=[attr])
        assert np.array_equal(r.outputs[0], host_reference("kws_dscnn")[:2].reshape(r.outputs[0].shape))


def test_gen_host_writes_only_the_header(tmp_path):
    out = tmp_path / "out"
    onnx.save(_fc_model(4, 3), tmp_path / "m.onnx")
    assert run_cli("gen", tmp_path / "m.onnx", "-o", out).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [".cuvil-mcu-files", "model.h"]   # + gen's manifest


@needs_gcc
def test_gen_project_with_name_prefix(tmp_path):
    out = tmp_path / "out"
    onnx.save(_fc_model(4, 3), tmp_path / "m.onnx")
    assert run_cli("gen", tmp_path / "m.onnx", "--board", "nrf52840dk", "--name", "kws", "-o", out).returncode == 0
    main = (out / "main.c").read_text()
    assert '#include "kws.h"' in main and "kws_run(arena)" in main and "KWS_ARENA_ATTR" in main
    assert "model_" not in main and "MODEL_" not in main
    mk = _make(out)
    assert mk.returncode == 0 and "warning" not in mk.stderr.lower(), mk.stderr


# ---- real boards: sim on the QEMU machine with the same core, run on the host ----

@needs_qemu
@needs_models
@pytest.mark.parametrize("board,machine", [("rpi-pico", "mps2-an385"), ("stm32f4-discovery", "mps2-an386"),
                                           ("nucleo-h7a3zi-q", "mps2-an500"), ("nucleo-u575zi-q", "mps2-an505")])
def test_sim_real_board_runs_on_the_machine_with_its_core(tmp_path, board, machine):
    x = sm.samples("hello_world")["inputs"][:3].reshape(3, 1, 1)
    np.save(tmp_path / "x.npy", x)
    r = run_cli("sim", sm.model_path("hello_world"), "--board", board, "--input", tmp_path / "x.npy",
                "-o", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    assert f"runs on QEMU {machine}" in r.stdout and f"built with {board}'s flags" in r.stdout
    assert ("caveat: a Cortex-M3 runs the Cortex-M0+" in r.stdout) == (board == "rpi-pico")
    assert f"instructions per inference on {machine}" in r.stdout
    want = host_reference("hello_world")[:3]
    assert np.array_equal(np.load(tmp_path / "y.npy").reshape(want.shape), want)


def test_run_real_board_says_host_build_and_sim_help_names_its_default(tmp_path):
    onnx.save(_fc_model(4, 3), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    r = run_cli("run", tmp_path / "m.onnx", "--board", "nucleo-f746zg", "--input", tmp_path / "x.npy")
    assert r.returncode == 0, r.stderr
    assert "a host build of the C generated for nucleo-f746zg" in r.stdout and "sim --board nucleo-f746zg" in r.stdout
    h = run_cli("sim", "--help").stdout
    flat = "".join(h.split())  # argparse wraps at hyphens
    assert "defaultqemu-mps2-an386" in flat and "defaulthost" not in flat
