"""Board files against the firmware they produce: gen's budget is the linker
script's regions (a model just under it links with arm-none-eabi-gcc, one
just over is refused by gen with the numbers), every real board gets a
project that builds warning-free with its debug-UART writer and README, the
UART register values match the reference manuals' worked numbers, and the
RP2040 boot loader bytes are the assembled source with the boot ROM's CRC.

The RAM side of the budget is checked on every board; the flash side on every
board with at most 2 MB of flash (13.9 MB of weights to compile in all). The
4 MB QEMU boards' flash boundary (16 MB more) runs with CUVIL_SLOW_TESTS=1.
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
from onnx import helper, numpy_helper, TensorProto

from qhelpers import qmodel, qparams
from cuvil_mcu import boards
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import BudgetError
from cuvil_mcu.sim import firmware, rp2040, uart

HAVE_GCC = shutil.which("arm-none-eabi-gcc") is not None
needs_gcc = pytest.mark.skipif(not HAVE_GCC, reason="arm-none-eabi-gcc missing: apt-get install gcc-arm-none-eabi "
                                                    "libnewlib-arm-none-eabi")
SLOW = os.environ.get("CUVIL_SLOW_TESTS") == "1"
ENV = dict(os.environ, PYTHONHASHSEED="0")
ENV.pop("CUVIL_DEBUG", None)

LINKED = [b for b in boards.all_boards().values()
          if firmware.has_memory_map(b) and any(f.startswith("-mcpu=cortex-m") for f in b.cflags)]
REAL = [b for b in LINKED if not b.sim.get("qemu_machine")]


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", *map(str, args)], env=ENV, cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def make(d: Path):
    return subprocess.run(["make"], cwd=d, capture_output=True, text=True, timeout=900)


def pad_model(n: int) -> onnx.ModelProto:
    """x float32[1, 1] -> Pad -> y[1, n]: an arena of 4n (+ the 4-byte input), no weights."""
    pads = numpy_helper.from_array(np.array([0, 0, 0, n - 1], np.int64), "pads")
    g = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["y"])], "ram",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [pads])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def weights_model(m: int, n: int = 64) -> onnx.ModelProto:
    """QLinearMatMul a int8[1, m] x b int8[m, n]: m*n bytes of weights, a small arena."""
    b = (np.arange(m * n).reshape(m, n) % 3 - 1).astype(np.int8)
    inits = {"b": b, **qparams("a", 0.02, 0, "int8"), **qparams("bq", 0.01, 0, "int8"),
             **qparams("y", 0.5, 0, "int8")}
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_z", "b", "bq_s", "bq_z", "y_s", "y_z"], ["y"])
    model = qmodel([node], {"a": ((1, m), "int8")}, {"y": "int8"}, inits)
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 1  # a file needs the output shape
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = n
    return model


def _numbers(err: str, what: str) -> tuple[int, int, int]:
    m = re.search(rf"{what}: needs ([\d,]+) B \(.*?\), board has ([\d,]+) B: over by ([\d,]+) B", err)
    assert m, err
    need, have, over = (int(v.replace(",", "")) for v in m.groups())
    assert need - have == over > 0, err
    return need, have, over


def _boundary(tmp_path, board, build, size_of, step: int, what: str, cap: int):
    """build(k) -> model; size_of(compiled) -> bytes gen counts for `what`
    (about linear in k). The largest k (a multiple of step) gen accepts links
    with the generated project; k + step is refused by gen, with the numbers."""
    c0, c1 = compile_model(build(step * 16), board=board.id), compile_model(build(step * 32), board=board.id)
    per = (size_of(c1) - size_of(c0)) / (step * 16)
    base = size_of(c0) - per * step * 16
    k = int((cap - base) // per) // step * step

    def fits(k):
        try:
            compile_model(build(k), board=board.id)
            return True
        except BudgetError:
            return False
    # the linear guess, corrected where a kernel packs its weights in blocks (MVE)
    while not fits(k):
        k -= step
    while fits(k + step):
        k += step
    under, over = tmp_path / "under.onnx", tmp_path / "over.onnx"
    onnx.save(build(k), under)
    onnx.save(build(k + step), over)
    r = run_cli("gen", over, "--board", board.id, "-o", tmp_path / "o_over")
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    need_over, have, by = _numbers(r.stderr, what)
    assert have == cap, r.stderr
    assert not (tmp_path / "o_over").exists()  # nothing half-written
    r = run_cli("gen", under, "--board", board.id, "-o", tmp_path / "o_under")
    assert r.returncode == 0, r.stderr
    m = re.search(rf"^budget\s+{'RAM  ' if what == 'RAM' else 'flash'}\s+([\d,]+) / ([\d,]+) B", r.stdout, re.M)
    assert m and int(m.group(2).replace(",", "")) == cap, r.stdout
    need_under = int(m.group(1).replace(",", ""))
    # the next model size is refused and this one is accepted: the boundary is between them
    assert need_under <= cap < need_over, (need_under, cap, need_over)
    if HAVE_GCC:
        mk = make(tmp_path / "o_under")
        assert mk.returncode == 0, mk.stderr[-3000:]
        assert "warning" not in mk.stderr.lower(), mk.stderr[-3000:]
    return tmp_path / "o_under"


def _ram_need(board):
    return lambda c: c.plan.arena_size + board.stack_reserve + board.data_reserve + board.ram_margin


def _samples_in_flash(board, c) -> int:
    """Real boards' projects keep one input sample in flash; QEMU boards' load it into RAM."""
    return 0 if board.sim.get("qemu_machine") else sum(c.graph.tensors[n].nbytes for n in c.graph.inputs)


def _flash_need(board):
    return lambda c: c.weights_bytes + _samples_in_flash(board, c) + board.code_reserve + board.flash_margin


@pytest.mark.parametrize("board", LINKED, ids=[b.id for b in LINKED])
def test_ram_budget_is_the_linker_region(tmp_path, board):
    out = _boundary(tmp_path, board, pad_model, _ram_need(board), 4, "RAM", board.ram)  # the arena grows in 16s
    ld = (out / "linker.ld").read_text()
    assert f"RAM   (rwx) : ORIGIN = 0x{board.ram_base:08x}, LENGTH = {board.ram}" in ld


FLASH_BOARDS = [pytest.param(b, id=b.id, marks=[] if b.flash <= 2 * 1024 * 1024 or SLOW else
                             pytest.mark.skip(reason="4 MB of weights to compile: CUVIL_SLOW_TESTS=1 runs it"))
                for b in LINKED]


@pytest.mark.parametrize("board", FLASH_BOARDS)
def test_flash_budget_is_the_linker_region(tmp_path, board):
    out = _boundary(tmp_path, board, weights_model, _flash_need(board), 4, "flash", board.flash)
    ld = (out / "linker.ld").read_text()
    assert f"FLASH (rx)  : ORIGIN = 0x{board.flash_base:08x}, LENGTH = {board.flash}" in ld
    if HAVE_GCC:
        # the code around the weights fits the code_reserve gen counted for it
        size = subprocess.run(["arm-none-eabi-size", "-A", str(out / "firmware.elf")], capture_output=True,
                              text=True).stdout
        flash = sum(int(m.group(2)) for m in re.finditer(r"^(\.boot2|\.text|\.ARM\.exidx|\.data)\s+(\d+)", size, re.M))
        c = compile_model(str(tmp_path / "under.onnx"), board=board.id)
        assert flash - c.weights_bytes - _samples_in_flash(board, c) <= board.code_reserve, size


# ---- every real board: a project that builds, prints on its UART, says how to flash ----

@needs_gcc
@pytest.mark.parametrize("board", REAL, ids=[b.id for b in REAL])
def test_real_board_project(tmp_path, board):
    src = tmp_path / "m.onnx"
    onnx.save(weights_model(32, 8), src)
    out = tmp_path / "out"
    r = run_cli("gen", src, "--board", board.id, "-o", out)
    assert r.returncode == 0, r.stderr
    mk = make(out)
    assert mk.returncode == 0 and "warning" not in mk.stderr.lower(), mk.stderr
    elf = out / "firmware.elf"
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True).stdout
    assert "bkpt" not in dis  # no semihosting: it faults without a debugger
    syms = {ln.split()[-1]: int(ln.split()[0], 16) for ln in
            subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True).stdout.splitlines()
            if len(ln.split()) == 3}
    assert syms["cuvil_vector_table"] == board.flash_base + (256 if board.boot2 else 0)
    assert {"cuvil_io_init", "cuvil_print"} <= set(syms)
    hdr = subprocess.run(["arm-none-eabi-readelf", "-h", str(elf)], capture_output=True, text=True).stdout
    assert int(re.search(r"Entry point address:\s+(0x[0-9a-f]+)", hdr).group(1), 16) & ~1 == syms["cuvil_entry"]
    # the UART writer is compiled in, for the board's UART
    u = board.uart
    bh = (out / "cuvil_board.h").read_text()
    assert f"#define CUVIL_UART_BASE 0x{u['base']:08X}u" in bh
    assert f"#define CUVIL_UART_KIND_{u['kind'].upper().replace('-', '_')} 1" in bh
    assert bh.count("u }, /*") == len(u.get("setup", []))
    readme = (out / "README.md").read_text()
    assert f"{u['baud']} baud, 8 data bits, no parity, 1 stop bit" in readme and u["tx_pin"] in readme
    assert all(line in readme for line in board.flashing) and board.flashing


def test_uart_register_values_match_the_manuals():
    """Worked numbers, computed by hand from each reference manual's formula."""
    def div(board_id, **over):
        b = boards.get(board_id)
        b.uart = {**b.uart, **over}
        return uart.divisors(b)
    # RM0090 (STM32F4), 16 MHz, oversampling 16: USARTDIV 8.68 -> mantissa 8, fraction 11 -> 0x8B
    assert div("stm32f4-discovery") == {"CUVIL_UART_BRR": 0x8B}
    # STM32F7/H7/U5: BRR = f / baud = 138.9 -> 139 at 16 MHz; 555.6 -> 556 at 64 MHz; 34.7 -> 35 at 4 MHz
    assert div("nucleo-f746zg") == {"CUVIL_UART_BRR": 139}
    assert div("nucleo-h7a3zi-q") == {"CUVIL_UART_BRR": 556}
    assert div("nucleo-u575zi-q") == {"CUVIL_UART_BRR": 35}
    # RM0432 LPUART: BRR = 256 f / baud = 8888.9 -> 8889 at 4 MHz
    assert div("nucleo-l4r5zi") == {"CUVIL_UART_BRR": 8889}
    # nRF52840 PS BAUDRATE table: 115200 -> 0x01D7E000; P0.06 / P1.03 (port << 5 | pin)
    assert div("nrf52840dk") == {"CUVIL_UART_BAUDRATE": 0x01D7E000, "CUVIL_UART_PSEL": 6}
    assert div("arduino-nano-33-ble")["CUVIL_UART_PSEL"] == (1 << 5) | 3
    # PL011: 12 MHz / (16 x 115200) = 6.5104 -> IBRD 6, FBRD round(0.5104 x 64) = 33
    assert div("rpi-pico") == {"CUVIL_UART_IBRD": 6, "CUVIL_UART_FBRD": 33}
    # LPUART (i.MX RT): 24 MHz / (OSR x SBR) closest to 115200 is 115384.6 (OSR x SBR = 208)
    baud = div("mimxrt1060-evk")["CUVIL_UART_BAUD"]
    osr, sbr = (baud >> 24) + 1, baud & 0x1FFF
    assert osr * sbr == 208 and 8 <= osr <= 32
    with pytest.raises(Exception, match="no 1234 baud"):
        div("nrf52840dk", baud=1234)
    with pytest.raises(Exception, match="outside 0x300"):
        div("nucleo-l4r5zi", clock_hz=32768, baud=115200)


def test_uart_setup_table_errors_name_the_entry():
    b = boards.get("stm32f4-discovery")
    b.uart = {**b.uart, "setup": [["set", 1, 2, 3], ["poke", 1, 2]]}
    with pytest.raises(Exception, match=r"setup\[1\]"):
        uart.setup_ops(b)
    b.uart = {**b.uart, "setup": [["write", 1, 2, 3]]}
    with pytest.raises(Exception, match=r"setup\[0\].*expected 2"):
        uart.setup_ops(b)


def test_rp2040_boot2_bytes_and_crc(tmp_path):
    # the boot ROM's CRC: CRC-32/MPEG-2, check value of "123456789" is 0x0376E6E7
    assert rp2040.crc32_mpeg2(b"123456789") == 0x0376E6E7
    img = rp2040.boot2_image()
    assert len(img) == 256 and int.from_bytes(img[252:], "little") == rp2040.crc32_mpeg2(img[:252])
    if shutil.which("arm-none-eabi-as") and shutil.which("arm-none-eabi-objcopy"):
        src = firmware.example_dir() / "boot2_rp2040.S"
        subprocess.run(["arm-none-eabi-as", "-mcpu=cortex-m0plus", str(src), "-o", str(tmp_path / "b.o")],
                       check=True)
        subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", str(tmp_path / "b.o"), str(tmp_path / "b.bin")],
                       check=True)
        assert (tmp_path / "b.bin").read_bytes() == rp2040.BOOT2_CODE


@needs_gcc
def test_rp2040_image_starts_with_checked_boot2(tmp_path):
    onnx.save(weights_model(32, 8), tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert run_cli("gen", tmp_path / "m.onnx", "--board", "rpi-pico", "-o", out).returncode == 0
    assert make(out).returncode == 0
    binary = (out / "firmware.bin").read_bytes()  # starts at 0x10000000
    assert int.from_bytes(binary[252:256], "little") == rp2040.crc32_mpeg2(binary[:252])
    assert binary[:len(rp2040.BOOT2_CODE)] == rp2040.BOOT2_CODE
    sp, reset = int.from_bytes(binary[256:260], "little"), int.from_bytes(binary[260:264], "little")
    assert sp == 0x20000000 + boards.get("rpi-pico").ram and 0x10000100 < reset < 0x10000000 + len(binary)
