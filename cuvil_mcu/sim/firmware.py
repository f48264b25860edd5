"""Bare-metal firmware project around a generated header, shared by `sim`
(QEMU/Renode) and `gen --board <real board>` (a project to flash).

A project is a folder of: <prefix>.h, main.c (harness, from
firmware_examples/baremetal/ with model_/MODEL_ renamed to the prefix),
startup.c + cuvil_io.h (vector table, reset, SysTick, semihosting), uart.c
(the polled debug-UART writer) + cuvil_board.h (its registers and set-up,
generated from the board's [uart] table), samples.c (the inputs the harness
runs), linker.ld (the board's FLASH/RAM regions: the same numbers gen's
budget counts) and a Makefile. Real boards also get a README.md (flashing,
serial settings). `files()` returns them as {name: text}; nothing is
written here.

Build flags: the board's cflags (-mcpu/-mfpu/-mfloat-abi) at compile AND link
time, -O2 (see OPT), -ffunction-sections -fdata-sections + --gc-sections,
newlib-nano for memcpy/memset and libm, -nostartfiles (our startup.c), no
printf: the harness prints through cuvil_print with a tiny hex formatter.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..boards import Board
from ..codegen import env
from ..errors import BoardError

# -O2: what TFLM's kernels use, and what the benchmark reports. -O3 unrolls
# more (sometimes faster, always bigger); pass opt="-O3" to compare.
OPT = "-O2"
CFLAGS = ["-std=c99", "-ffunction-sections", "-fdata-sections", "-Wall", "-Wextra", "-pedantic"]
LDFLAGS = ["-T", "linker.ld", "-nostartfiles", "--specs=nano.specs", "-Wl,--gc-sections"]
LDLIBS = ["-lm"]
SAMPLES_SECTION = ".cuvil_samples"   # sim: inputs loaded straight into RAM, outside the firmware's flash
STATIC_FILES = ("startup.c", "cuvil_io.h", "uart.c")
SOURCES = ["main.c", "startup.c", "samples.c", "uart.c"]
# sim --board <real board>: the QEMU machine with the same core (cflags stay the real board's)
QEMU_FOR_CORE = {"cortex-m0plus": "qemu-mps2-an385", "cortex-m0": "qemu-mps2-an385", "cortex-m3": "qemu-mps2-an385",
                 "cortex-m4": "qemu-mps2-an386", "cortex-m7": "qemu-mps2-an500", "cortex-m33": "qemu-mps2-an505",
                 "cortex-m55": "qemu-mps3-an547"}
CORE_CAVEAT = {"cortex-m0plus": "a Cortex-M3 runs the Cortex-M0+ (ARMv6-M) code: the instructions are the same, "
                                "their cycles are not, and an instruction the M0+ lacks would not trap",
               "cortex-m0": "a Cortex-M3 runs the Cortex-M0 (ARMv6-M) code: the instructions are the same, "
                            "their cycles are not, and an instruction the M0 lacks would not trap"}


def example_dir() -> Path:
    here = Path(__file__).resolve().parent.parent
    for cand in (here.parent / "firmware_examples" / "baremetal", here / "_firmware" / "baremetal"):
        if (cand / "startup.c").exists():
            return cand
    raise FileNotFoundError("cuvil-mcu firmware_examples/baremetal not found (broken install?)")


@dataclass
class MemoryMap:
    flash_base: int
    flash_len: int
    ram_base: int
    ram_len: int


def has_memory_map(board: Board) -> bool:
    return None not in (board.flash_base, board.ram_base) and bool(board.flash) and bool(board.ram)


def memory_map(board: Board) -> MemoryMap:
    """The board's FLASH and RAM regions (flash_base/flash, ram_base/ram):
    what linker.ld places where, and what gen's budget counts."""
    if not has_memory_map(board):
        raise BoardError(f"board '{board.id}' has no flash_base/ram_base/flash/ram in boards/{board.id}.toml, "
                         f"so no linker script can be written for it")
    return MemoryMap(int(board.flash_base), int(board.flash), int(board.ram_base), int(board.ram))


def qemu_machine(board: Board) -> tuple[Board, str]:
    """The QEMU board a firmware for `board` runs on: itself when it has a
    [sim] machine, else the mps2/mps3 machine with the same core, and the
    caveat that comes with it ("" when none)."""
    from .. import boards as boards_mod
    if board.sim.get("qemu_machine"):
        return board, ""
    qid = QEMU_FOR_CORE.get(board.core)
    if qid is None:
        raise BoardError(f"board '{board.id}' ({board.core}) has no QEMU machine with the same core; "
                         f"cores QEMU simulates here: {', '.join(sorted(QEMU_FOR_CORE))}")
    return boards_mod.get(qid), CORE_CAVEAT.get(board.core, "")


def cpu_flags(board: Board) -> list[str]:
    if not board.cflags or not any(f.startswith("-mcpu=") for f in board.cflags):
        raise BoardError(f"board '{board.id}' is not a Cortex-M board (no -mcpu in its cflags)")
    return list(board.cflags)


def build_flags(board: Board, io: str, opt: str = OPT, extra: list[str] | tuple = ()) -> tuple[list[str], list[str]]:
    """(compile flags without the cpu flags, link flags without them).
    io: "semihosting" (QEMU) | "uart" (the board's debug UART, cuvil_board.h)."""
    if io not in ("semihosting", "uart"):
        raise ValueError(f"io {io!r}")
    if io == "uart" and not board.uart:
        raise BoardError(f"board '{board.id}' has no [uart] table for the harness's UART writer")
    defs = ["-DCUVIL_SEMIHOSTING"] if io == "semihosting" else []
    return [opt, *CFLAGS, *defs, *extra], list(LDFLAGS)


def board_header(board: Board, io: str) -> str:
    """cuvil_board.h: the debug UART's registers (uart.py) and the harness clock."""
    from . import uart
    u = board.uart if io == "uart" else {}
    kw = dict(board_name=board.name, board_id=board.id, uart=None, clock_hz=None)
    if io == "uart":
        kw["clock_hz"] = board.harness_clock_hz
    if u:
        for key in ("kind", "base", "name", "tx_pin", "baud", "clock_hz"):
            if key not in u:
                raise BoardError(f"boards/{board.id}.toml: [uart] needs '{key}'")
        kw.update(uart=u, kind_macro=u["kind"].upper().replace("-", "_"),
                  divisors=sorted(uart.divisors(board).items()), setup=uart.setup_ops(board))
    return env().get_template("firmware/cuvil_board.h.j2").render(**kw)


def rename(source: str, prefix: str) -> str:
    """main.c is written for the default name `model`: model_x -> <prefix>_x,
    MODEL_X -> <PREFIX>_X, "model.h" -> "<prefix>.h"."""
    if prefix == "model":
        return source
    source = source.replace('"model.h"', f'"{prefix}.h"')
    source = re.sub(r"\bmodel_", prefix + "_", source)
    return re.sub(r"\bMODEL_", prefix.upper() + "_", source)


def _hex_body(data: bytes) -> str:
    rows = []
    for i in range(0, len(data), 20):
        rows.append("    " + ", ".join(f"0x{b:02x}" for b in data[i:i + 20]) + ",")
    return "\n".join(rows) if rows else "    0"


def samples_source(prefix: str, inputs: list[np.ndarray], in_bytes: list[int], out_bytes: list[int],
                   out_elem: list[int], section: str | None, note: str) -> str:
    """inputs: per model input, (samples, *shape) arrays in the input's dtype."""
    n = inputs[0].shape[0] if inputs else 1
    arrays = []
    for s in range(n):
        for i, x in enumerate(inputs):
            raw = np.ascontiguousarray(x[s]).tobytes()
            if len(raw) != in_bytes[i]:
                raise ValueError(f"sample {s} input {i}: {len(raw)} bytes, expected {in_bytes[i]}")
            arrays.append({"sample": s, "input": i, "nbytes": len(raw), "symbol": f"cuvil_sample_{s}_{i}",
                           "body": _hex_body(raw)})
    return env().get_template("firmware/samples.c.j2").render(
        p=prefix, n_samples=n, arrays=arrays, in_bytes=in_bytes, out_bytes=out_bytes, out_elem=out_elem,
        section=section, note=note)


def default_inputs(compiled) -> list[np.ndarray]:
    """One sample per input at its zero point (zeros for float): what a
    generated project runs until the user puts sensor data in samples.c."""
    out = []
    for n in compiled.graph.inputs:
        t = compiled.graph.tensors[n]
        x = np.zeros((1, *t.shape), dtype=t.dtype)
        q = getattr(t, "quant", None)
        if q is not None and getattr(q, "zero_point", None) is not None:
            x[...] = np.asarray(q.zero_point).reshape(-1)[0]
        out.append(x)
    return out


RECORD_BYTES = 64  # bytes of values per O record (main.c)


def value_hex(arr: np.ndarray) -> list[str]:
    """Each element's bit pattern, most significant digit first, 2 hex digits
    a byte (what main.c prints): int8 -1 -> "ff", float32 1.0 -> "3f800000"."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    size = flat.dtype.itemsize
    bits = flat.view(np.dtype(f"<u{size}")) if size in (1, 2, 4, 8) else None
    if bits is None:
        raise ValueError(f"cannot print {flat.dtype} values")
    return [format(int(v), f"0{2 * size}x") for v in bits]


def output_lines(outputs: list[np.ndarray]) -> list[str]:
    """The "O <sample> <output> <index> <values>" records main.c prints for
    these outputs (per output (samples, *shape))."""
    lines = []
    for s in range(outputs[0].shape[0] if outputs else 0):
        for o, arr in enumerate(outputs):
            vals = value_hex(arr[s])
            per = max(1, RECORD_BYTES // arr.dtype.itemsize)
            for i in range(0, max(len(vals), 1), per):
                lines.append(f"O {s:08x} {o:02x} {i:08x} {''.join(vals[i:i + per])}")
    return lines


def parse_values(hex_text: str, dtype) -> bytes:
    """Inverse of value_hex for one record: little-endian bytes."""
    dt = np.dtype(dtype)
    w = 2 * dt.itemsize
    if len(hex_text) % w:
        raise ValueError(f"{len(hex_text)} hex digits is not a whole number of {dt} values")
    words = [int(hex_text[i:i + w], 16) for i in range(0, len(hex_text), w)]
    return np.array(words, dtype=f"<u{dt.itemsize}").tobytes()


def io_for(board: Board) -> str:
    """How a project for this board prints: QEMU boards through semihosting,
    real boards on their debug UART."""
    return "semihosting" if board.sim.get("qemu_machine") else "uart"


def files(compiled, board: Board, inputs: list[np.ndarray] | None = None, io: str | None = None,
          machine: Board | None = None, opt: str = OPT, extra_cflags: list[str] | tuple = (),
          target: str = "firmware") -> dict[str, str]:
    """The project as {file name: text}, compiled with `board`'s cflags.
    inputs None: one sample at each input's zero point (all zero bytes for
    float), a stand-in for sensor data. machine: simulate on this QEMU board
    (its memory map; the samples go to a RAM section the simulator loads, not
    counted as firmware flash); None: the project for `board` itself."""
    g = compiled.graph
    in_t = [g.tensors[n] for n in g.inputs]
    out_t = [g.tensors[n] for n in g.outputs]
    io = io or io_for(machine or board)
    if inputs is None:
        inputs = default_inputs(compiled)
        note = "one sample at the inputs' zero points; replace with your sensor data"
    else:
        note = f"{inputs[0].shape[0] if inputs else 0} sample(s) from cuvil-mcu's caller"
    simulate = machine is not None
    # the inputs go to a RAM section the simulator loads (not firmware flash) when the firmware runs on
    # QEMU: sim, and QEMU boards' own projects (`make run`)
    samples_in_ram = simulate or bool(board.sim.get("qemu_machine"))
    mm = memory_map(machine or board)
    boot2 = board.boot2 and not simulate
    srcs = SOURCES + (["boot2.c"] if boot2 else [])
    cpu = cpu_flags(board)
    cflags, ldflags = build_flags(board, io, opt, extra_cflags)
    ex = example_dir()
    out = {
        f"{compiled.prefix}.h": compiled.header,
        "main.c": rename((ex / "main.c").read_text(), compiled.prefix),
        "cuvil_board.h": board_header(board, io),
        "samples.c": samples_source(compiled.prefix, inputs, [t.nbytes for t in in_t], [t.nbytes for t in out_t],
                                    [np.dtype(t.dtype).itemsize for t in out_t],
                                    SAMPLES_SECTION if samples_in_ram else None, note),
        "linker.ld": env().get_template("firmware/linker.ld.j2").render(
            board_name=(machine or board).name, board_id=(machine or board).id, flash_base=mm.flash_base,
            flash_len=mm.flash_len, ram_base=mm.ram_base, ram_len=mm.ram_len, stack_reserve=board.stack_reserve,
            samples_in_ram=samples_in_ram, boot2=boot2),
        "Makefile": env().get_template("firmware/Makefile.j2").render(
            board_name=board.name, board_id=board.id, target=target, cpuflags=cpu, cflags=cflags,
            ldflags=ldflags, ldlibs=LDLIBS, srcs=srcs, header=f"{compiled.prefix}.h",
            qemu=_qemu_line(machine or board, io, target),
            renode=f"{compiled.prefix}.resc" if board.renode and io == "uart" else ""),
    }
    for name in STATIC_FILES:
        out[name] = (ex / name).read_text()
    if boot2:
        from . import rp2040
        out["boot2.c"] = rp2040.boot2_source()
    if not simulate and io == "uart":
        out["README.md"] = readme(compiled, board, target)
    return out


def _qemu_line(board: Board, io: str, target: str) -> str:
    if io != "semihosting" or not board.sim.get("qemu_machine"):
        return ""
    return (f"qemu-system-arm -M {board.sim['qemu_machine']} -icount shift=0 -display none -monitor none "
            f"-serial none -semihosting-config enable=on,target=native,chardev=sh -chardev stdio,id=sh "
            f"-kernel {target}.elf")


def readme(compiled, board: Board, target: str = "firmware") -> str:
    """README.md of a real board's project: build, flash, where the output appears."""
    return env().get_template("firmware/README.md.j2").render(
        board=board, uart=board.uart, target=target, prefix=compiled.prefix, flashing=board.flashing,
        clock_hz=board.harness_clock_hz, renode=bool(board.renode))


def project(compiled, out: Path) -> dict[Path, str]:
    """`gen --board <Cortex-M board>`: the firmware project next to the
    header (QEMU boards: semihosting, `make run`; real boards: the debug UART
    and a README). {} for boards without a memory map (host, Cortex-A)."""
    b = compiled.board
    if not any(f.startswith("-mcpu=cortex-m") for f in b.cflags) or not has_memory_map(b):
        return {}
    fs = files(compiled, b)
    return {out / name: text for name, text in fs.items() if name != f"{compiled.prefix}.h"}


def gcc_command(board: Board, gcc: str, io: str, elf: str, opt: str = OPT,
                extra_cflags: list[str] | tuple = ()) -> list[str]:
    """The same command the Makefile runs (run inside the project folder)."""
    cflags, ldflags = build_flags(board, io, opt, extra_cflags)
    cpu = cpu_flags(board)
    return [gcc, *cpu, *cflags, *SOURCES, *cpu, *ldflags, *LDLIBS, "-o", elf]
