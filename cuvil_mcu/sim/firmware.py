"""Bare-metal firmware project around a generated header, shared by `sim`
(QEMU/Renode) and `gen --board <real board>` (a project to flash).

A project is a folder of: <prefix>.h, main.c (harness, from
firmware_examples/baremetal/ with model_/MODEL_ renamed to the prefix),
startup.c + cuvil_io.h (vector table, reset, SysTick, semihosting/UART),
samples.c (the inputs the harness runs), linker.ld (the board's memory map)
and a Makefile. `files()` returns them as {name: text}; nothing is written here.

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
STATIC_FILES = ("startup.c", "cuvil_io.h")


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


def memory_map(board: Board, simulate: bool) -> MemoryMap:
    """Simulation: the QEMU machine's code/RAM regions ([sim]). Real board:
    flash_base/ram_base with the board's flash/RAM sizes."""
    if simulate:
        s = board.sim
        if not s.get("qemu_machine"):
            raise BoardError(f"board '{board.id}' has no [sim] table")
        return MemoryMap(int(s["code_base"]), int(s["code_size"]), int(s["ram_base"]), int(s["ram_size"]))
    if board.sim.get("qemu_machine"):
        return memory_map(board, True)
    if board.flash_base is None or board.ram_base is None or not board.flash or not board.ram:
        raise BoardError(f"board '{board.id}' has no flash_base/ram_base/flash/ram in boards/{board.id}.toml, "
                         f"so no linker script can be written for it")
    return MemoryMap(board.flash_base, board.flash, board.ram_base, board.linker_ram or board.ram)


def cpu_flags(board: Board) -> list[str]:
    if not board.cflags or not any(f.startswith("-mcpu=") for f in board.cflags):
        raise BoardError(f"board '{board.id}' is not a Cortex-M board (no -mcpu in its cflags)")
    return list(board.cflags)


def build_flags(board: Board, io: str, opt: str = OPT, extra: list[str] | tuple = ()) -> tuple[list[str], list[str]]:
    """(compile flags without the cpu flags, link flags without them).
    io: "semihosting" | "uart" | "none"."""
    defs = []
    if io == "semihosting":
        defs.append("-DCUVIL_SEMIHOSTING")
    elif io == "uart":
        base = board.renode.get("uart_base")
        if base is None:
            raise BoardError(f"board '{board.id}' has no [renode] uart_base for the harness's UART writer")
        defs.append(f"-DCUVIL_UART_BASE=0x{int(base):08X}u")
    return [opt, *CFLAGS, *defs, *extra], list(LDFLAGS)


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
                   section: str | None, note: str) -> str:
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
        p=prefix, n_samples=n, arrays=arrays, in_bytes=in_bytes, out_bytes=out_bytes, section=section, note=note)


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


def output_lines(outputs: list[np.ndarray]) -> list[str]:
    """The "O <sample> <output> <hex>" lines main.c prints for these outputs
    (per output (samples, *shape)); 64 bytes per line."""
    lines = []
    for s in range(outputs[0].shape[0] if outputs else 0):
        for o, arr in enumerate(outputs):
            raw = np.ascontiguousarray(arr[s]).tobytes()
            for i in range(0, max(len(raw), 1), 64):
                lines.append(f"O {s:08x} {o:02x} {raw[i:i + 64].hex()}")
    return lines


def files(compiled, board: Board, inputs: list[np.ndarray] | None = None, io: str = "none",
          simulate: bool = False, opt: str = OPT, extra_cflags: list[str] | tuple = (),
          target: str = "firmware") -> dict[str, str]:
    """The project as {file name: text}. inputs None: one sample at each
    input's zero point (all zero bytes for float), a stand-in for sensor data."""
    g = compiled.graph
    in_t = [g.tensors[n] for n in g.inputs]
    out_t = [g.tensors[n] for n in g.outputs]
    if inputs is None:
        inputs = default_inputs(compiled)
        note = "one sample at the inputs' zero points; replace with your sensor data"
    else:
        note = f"{inputs[0].shape[0] if inputs else 0} sample(s) from cuvil-mcu's caller"
    mm = memory_map(board, simulate)
    cpu = cpu_flags(board)
    cflags, ldflags = build_flags(board, io, opt, extra_cflags)
    ex = example_dir()
    out = {
        f"{compiled.prefix}.h": compiled.header,
        "main.c": rename((ex / "main.c").read_text(), compiled.prefix),
        "samples.c": samples_source(compiled.prefix, inputs, [t.nbytes for t in in_t], [t.nbytes for t in out_t],
                                    SAMPLES_SECTION if simulate else None, note),
        "linker.ld": env().get_template("firmware/linker.ld.j2").render(
            board_name=board.name, board_id=board.id, flash_base=mm.flash_base, flash_len=mm.flash_len,
            ram_base=mm.ram_base, ram_len=mm.ram_len, stack_reserve=board.stack_reserve,
            samples_in_ram=simulate),
        "Makefile": env().get_template("firmware/Makefile.j2").render(
            board_name=board.name, board_id=board.id, target=target, cpuflags=cpu, cflags=cflags,
            ldflags=ldflags, ldlibs=LDLIBS, header=f"{compiled.prefix}.h", qemu=_qemu_line(board, io, target),
            renode_cflags=_renode_defs(board), renode_uart=board.renode.get("uart", "")),
    }
    for name in STATIC_FILES:
        out[name] = (ex / name).read_text()
    return out


def _qemu_line(board: Board, io: str, target: str) -> str:
    if io != "semihosting" or not board.sim.get("qemu_machine"):
        return ""
    return (f"qemu-system-arm -M {board.sim['qemu_machine']} -icount shift=0 -display none -monitor none "
            f"-serial none -semihosting-config enable=on,target=native,chardev=sh -chardev stdio,id=sh "
            f"-kernel {target}.elf")


def _renode_defs(board: Board) -> list[str]:
    base = board.renode.get("uart_base")
    return [f"-DCUVIL_UART_BASE=0x{int(base):08X}u"] if base is not None else []


def project(compiled, out: Path) -> dict[Path, str]:
    """`gen --board <Cortex-M board>`: the firmware project next to the
    header (QEMU boards: semihosting, `make run`; real boards: cuvil_print is
    a weak no-op hook). {} for boards without a memory map (host, Cortex-A,
    boards without flash_base/ram_base)."""
    b = compiled.board
    if not any(f.startswith("-mcpu=cortex-m") for f in b.cflags):
        return {}
    simulate = bool(b.sim.get("qemu_machine"))
    if not simulate and (b.flash_base is None or b.ram_base is None or not b.flash or not b.ram):
        return {}
    fs = files(compiled, b, None, io="semihosting" if simulate else "none", simulate=False)
    return {out / name: text for name, text in fs.items() if name != f"{compiled.prefix}.h"}


def gcc_command(board: Board, gcc: str, io: str, elf: str, opt: str = OPT,
                extra_cflags: list[str] | tuple = ()) -> list[str]:
    """The same command the Makefile runs (run inside the project folder)."""
    cflags, ldflags = build_flags(board, io, opt, extra_cflags)
    cpu = cpu_flags(board)
    return [gcc, *cpu, *cflags, "main.c", "startup.c", "samples.c", *cpu, *ldflags, *LDLIBS, "-o", elf]
