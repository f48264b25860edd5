"""Run a compiled model on an emulated Cortex-M core (QEMU) and measure it.

    from cuvil_mcu.sim import qemu
    r = qemu.simulate(compiled, inputs, "qemu-mps2-an386")
    r.outputs          # per model output: (samples, *shape)
    r.instructions     # per inference (median over the samples)
    r.text, r.data, r.bss

Build: firmware.files() (harness + startup + samples + linker script from the
board's [sim] memory map) cross-compiled with arm-none-eabi-gcc, cached by a
hash of every input. Run: qemu-system-arm -M <machine> -icount shift=0 with
semihosting on stdio, under a timeout.

Counting: under -icount shift=0 one instruction is one ns of virtual time and
SysTick (core clock) ticks every `insn_per_tick` instructions (board file).
The harness reads SysTick around <prefix>_run (wraps counted in the SysTick
interrupt) and prints the ticks; instructions = ticks * insn_per_tick, exact
to within one tick (insn_per_tick instructions) plus the ~10 instructions of
the two reads. The per-inference figure is the MEDIAN over the samples (they
differ by at most a few ticks: data-dependent branches in a few kernels).

Sizes come from the ELF's section headers (arm-none-eabi-size -A): text =
code + rodata + vectors + exidx (what goes to flash besides .data's image),
data = .data, bss = .bss + .dtcm; the simulator-only samples section is
reported apart (`samples`) and counts against no budget.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import boards as boards_mod
from .. import samples
from ..boards import Board
from ..errors import BoardError, BudgetError, CuvilError, InputError, ToolError
from . import firmware

GCC = "arm-none-eabi-gcc"
QEMU = "qemu-system-arm"
APT = {GCC: "gcc-arm-none-eabi libnewlib-arm-none-eabi", QEMU: "qemu-system-arm",
       "arm-none-eabi-size": "binutils-arm-none-eabi"}
DEFAULT_TIMEOUT = 120.0
# float outputs: |qemu - reference| <= FLOAT_ATOL + FLOAT_RTOL * |reference|
# (newlib's expf/tanhf and the order of float sums differ from numpy's in the
# last bits; integer outputs must match exactly)
FLOAT_RTOL = 1e-4
FLOAT_ATOL = 1e-5


STACK_GUARD = 64  # bytes


class SimError(ToolError):
    """The firmware faulted, hung, failed or printed something unexpected."""


@dataclass
class SimResult:
    board: Board                       # the board the firmware is built for (cflags, budget)
    outputs: list[np.ndarray]          # per model output: (samples, *shape)
    ticks: list[int]                   # SysTick ticks per sample
    insn_per_tick: float
    text: int                          # code + rodata in flash
    data: int
    bss: int
    samples_bytes: int
    elf: Path
    log: str = ""
    seconds: float = 0.0
    macs: int = 0
    weights_bytes: int = 0
    arena: int = 0
    build_cached: bool = False
    warnings: str = ""                 # cross-compiler warnings (the firmware should have none)
    stack: int | None = None           # bytes of stack used (painted high-water mark), None if not reported
    extra: dict = field(default_factory=dict)
    machine: Board | None = None       # the QEMU board it ran on (board itself for QEMU boards)
    caveat: str = ""                   # what running on that machine does not tell about the board

    @property
    def instructions_each(self) -> list[int]:
        return [round(t * self.insn_per_tick) for t in self.ticks]

    @property
    def instructions(self) -> int:
        """Per inference: median over the samples, within one tick."""
        return round(statistics.median(self.ticks) * self.insn_per_tick)

    @property
    def per_mac(self) -> float | None:
        return self.instructions / self.macs if self.macs else None

    @property
    def flash_used(self) -> int:
        return self.text + self.data

    @property
    def ram_used(self) -> int:
        return self.data + self.bss


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolError(f"{name} not found on PATH (Debian/Ubuntu: apt-get install {APT.get(name, name)})")
    return path


def sim_boards() -> list[str]:
    """Boards `sim` runs: the QEMU boards and every Cortex-M board with a
    memory map (on the QEMU machine with its core)."""
    return [b.id for b in boards_mod.all_boards().values()
            if b.sim.get("qemu_machine") or (b.core in firmware.QEMU_FOR_CORE and firmware.has_memory_map(b))]


def sim_board(board: Board | str) -> Board:
    b = boards_mod.get(board) if isinstance(board, str) else board
    if b.id not in sim_boards():
        raise BoardError(f"board '{b.id}' has no simulator; boards that simulate: {', '.join(sim_boards())}")
    return b


def cache_dir() -> Path:
    base = os.environ.get("CUVIL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuvil-mcu")
    return Path(base) / "fw"


def as_inputs(compiled, inputs) -> list[np.ndarray]:
    """Normalise to a list (per model input) of (samples, *shape) arrays,
    checking shape and dtype."""
    g = compiled.graph
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    elif isinstance(inputs, dict):
        inputs = [inputs[n] for n in g.inputs]
    inputs = list(inputs)
    if len(inputs) != len(g.inputs):
        raise InputError(f"{len(inputs)} input array(s) given, the model has {len(g.inputs)} {g.inputs}")
    out = []
    for name, x in zip(g.inputs, inputs):
        t = g.tensors[name]
        x = np.asarray(x)
        layout = samples.layout_of(x.shape, t.shape)
        if layout is None:
            raise InputError(f"input '{name}' has shape {list(x.shape)}, the model expects {samples.expected(t.shape)}")
        x = samples.to_samples(x, t.shape, layout)
        if x.dtype.name != t.dtype:
            raise InputError(f"input '{name}' is {x.dtype}, the model expects {t.dtype}")
        out.append(np.ascontiguousarray(x))
    if len({x.shape[0] for x in out}) > 1:
        raise InputError(f"inputs hold different sample counts {[x.shape[0] for x in out]}")
    return out


def elf_sizes(elf: Path) -> dict[str, int]:
    """{'text', 'data', 'bss', 'samples'} from the section headers."""
    size = shutil.which("arm-none-eabi-size") or tool("arm-none-eabi-size")
    r = subprocess.run([size, "-A", str(elf)], capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolError(f"arm-none-eabi-size failed: {r.stderr.strip()}")
    out = {"text": 0, "data": 0, "bss": 0, "samples": 0}
    for line in r.stdout.splitlines():
        m = re.match(r"(\.\S+)\s+(\d+)\s+(\d+)", line)
        if not m:
            continue
        name, n = m.group(1), int(m.group(2))
        if name == firmware.SAMPLES_SECTION:
            out["samples"] += n
        elif name in (".text", ".ARM.exidx", ".rodata") or name.startswith(".text") or name.startswith(".rodata"):
            out["text"] += n
        elif name.startswith(".data"):
            out["data"] += n
        elif name.startswith(".bss") or name in (".dtcm", ".noinit"):
            out["bss"] += n
    return out


def check_elf_budget(board: Board, sizes: dict[str, int], mm: firmware.MemoryMap) -> None:
    """text+data (flash) and data+bss+stack_reserve (RAM) against the board's
    regions (and the simulated machine's, when smaller)."""
    problems = []
    flash_cap = min(x for x in (board.flash, mm.flash_len) if x)
    ram_cap = min(x for x in (board.ram, mm.ram_len) if x)
    flash = sizes["text"] + sizes["data"]
    ram = sizes["data"] + sizes["bss"] + board.stack_reserve
    if flash > flash_cap:
        problems.append(f"flash: firmware needs {flash:,} B (text+rodata {sizes['text']:,} + data {sizes['data']:,}), "
                        f"board has {flash_cap:,} B: over by {flash - flash_cap:,} B")
    if ram > ram_cap:
        problems.append(f"RAM: firmware needs {ram:,} B (data {sizes['data']:,} + bss {sizes['bss']:,} + stack "
                        f"reserve {board.stack_reserve:,}), board has {ram_cap:,} B: over by {ram - ram_cap:,} B")
    if problems:
        raise BudgetError(f"firmware does not fit board '{board.id}': " + "; ".join(problems))


def build(compiled, inputs: list[np.ndarray], board: Board, opt: str = firmware.OPT,
          extra_cflags: list[str] | tuple = ()) -> tuple[Path, bool, str]:
    """Path of the firmware ELF (built, or from the cache), whether it came
    from the cache, and the compiler's warnings (kept next to the ELF).
    Built with `board`'s cflags for the QEMU machine with its core."""
    gcc = tool(GCC)
    machine, _ = firmware.qemu_machine(board)
    files = firmware.files(compiled, board, inputs, io="semihosting", machine=machine, opt=opt,
                           extra_cflags=extra_cflags)
    cmd = firmware.gcc_command(board, gcc, "semihosting", "fw.elf", opt, extra_cflags)
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    h.update("\0".join(cmd).encode())
    key = h.hexdigest()[:24]
    elf = cache_dir() / key / "fw.elf"
    warn = elf.parent / "warnings.txt"
    if elf.exists():
        return elf, True, warn.read_text() if warn.exists() else ""
    elf.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=elf.parent) as tmp:
        t = Path(tmp)
        for name, text in files.items():
            (t / name).write_text(text)
        r = subprocess.run(cmd, cwd=t, capture_output=True, text=True)
        if r.returncode != 0:
            m = re.search(r"region `(\w+)' overflowed by (\d+) bytes", r.stderr)
            if m:
                mm = firmware.memory_map(machine)
                cap = mm.flash_len if m.group(1) == "FLASH" else mm.ram_len
                over = int(m.group(2))
                what = "flash" if m.group(1) == "FLASH" else "RAM"
                samples = sum(x.nbytes for x in inputs) if what == "RAM" else 0
                note = (f" (of which {samples:,} B are the {inputs[0].shape[0]} input samples, loaded into RAM: "
                        f"simulate fewer at once)") if samples else ""
                raise BudgetError(f"firmware does not fit board '{board.id}': {what}: needs {cap + over:,} B, "
                                  f"the simulated {what} has {cap:,} B: over by {over:,} B{note}")
            raise ToolError(f"cross-compile failed ({' '.join(cmd)}):\n{r.stderr[-4000:]}")
        (t / "warnings.txt").write_text(r.stderr)
        os.replace(t / "warnings.txt", warn)
        os.replace(t / "fw.elf", elf)
    return elf, False, r.stderr


def qemu_command(board: Board, elf: Path) -> list[str]:
    return [tool(QEMU), "-M", board.sim["qemu_machine"], "-icount", "shift=0", "-display", "none",
            "-monitor", "none", "-serial", "none",
            "-semihosting-config", "enable=on,target=native,chardev=sh", "-chardev", "stdio,id=sh",
            "-kernel", str(elf)]


def _log_tail(text: str, lines: int = 20) -> str:
    keep = [ln for ln in text.splitlines() if not ln.startswith("O ")]
    return "\n".join(keep[-lines:])


def run_elf(board: Board, elf: Path, timeout: float = DEFAULT_TIMEOUT) -> tuple[str, float]:
    """Run the firmware; returns (semihosting output, seconds). Raises
    SimError on a fault, a hang (timeout) or a non-zero exit."""
    cmd = qemu_command(board, elf)
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace")
        raise SimError(f"firmware timed out after {timeout:g} s on {board.sim['qemu_machine']} (hang?); "
                       f"semihosting log:\n{_log_tail(out)}") from None
    secs = time.monotonic() - t0
    out = r.stdout.decode(errors="replace")
    err = r.stderr.decode(errors="replace")
    if r.returncode in (134, -6) or "Lockup" in err or "CUVIL FAULT" in out:
        # -6: QEMU aborted (SIGABRT; 134 from a shell) on a lockup, a fault it cannot escalate
        fault = next((ln for ln in out.splitlines() if ln.startswith("CUVIL FAULT")), "")
        qemu_says = next((ln.strip() for ln in err.splitlines() if "Lockup" in ln or "fatal" in ln), "")
        code = 134 if r.returncode == -6 else r.returncode
        raise SimError(f"firmware faulted on {board.sim['qemu_machine']} (exit {code}"
                       f"{'; ' + fault if fault else ''}{'; ' + qemu_says if qemu_says else ''}); "
                       f"semihosting log:\n{_log_tail(out)}")
    if r.returncode != 0:
        raise SimError(f"firmware exited with {r.returncode} on {board.sim['qemu_machine']}"
                       f"{': ' + err.strip()[-500:] if err.strip() else ''}; semihosting log:\n{_log_tail(out)}")
    if "CUVIL DONE" not in out:
        raise SimError(f"firmware ended without 'CUVIL DONE'; semihosting log:\n{_log_tail(out)}")
    return out, secs


def parse_output(text: str, out_specs, samples: int) -> tuple[list[np.ndarray], list[int]]:
    """The S and O records main.c prints (firmware.output_lines' format)."""
    ticks: dict[int, int] = {}
    chunks: dict[tuple[int, int], list[tuple[int, str]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "S":
            ticks[int(parts[1], 16)] = int(parts[2], 16)
        elif len(parts) in (4, 5) and parts[0] == "O":
            key = (int(parts[1], 16), int(parts[2], 16))
            chunks.setdefault(key, []).append((int(parts[3], 16), parts[4] if len(parts) == 5 else ""))
    if sorted(ticks) != list(range(samples)):
        raise SimError(f"firmware reported {len(ticks)} of {samples} samples; log:\n{_log_tail(text)}")
    outs = []
    for o, (shape, dtype) in enumerate(out_specs):
        arr = np.empty((samples, *shape), dtype=dtype)
        for s in range(samples):
            try:
                raw = b"".join(firmware.parse_values(h, dtype) for _, h in sorted(chunks.get((s, o), [])))
            except ValueError as e:
                raise SimError(f"sample {s} output {o}: {e}") from None
            if len(raw) != arr[s].nbytes:
                raise SimError(f"sample {s} output {o}: firmware printed {len(raw)} bytes, expected {arr[s].nbytes}")
            arr[s] = np.frombuffer(raw, dtype=dtype).reshape(shape)
        outs.append(arr)
    return outs, [ticks[s] for s in range(samples)]


# Stack the bare-metal harness itself takes (main, printing, start-up): the most
# harness_stack() measures on the QEMU boards (an385 320 B; an386, an500, an505,
# an547 304 B); the model's own use (run function and kernels) must stay within
# the header's STACK_BOUND on top of this. (It was 384: up to 80 B of a model's
# excess went unnoticed.)
HARNESS_STACK = 320


def harness_stack(board: str) -> int:
    """The stack high-water mark of the harness alone on `board` (a one-Relu
    float model): what a model's measured stack is counted beyond."""
    import onnx
    from onnx import TensorProto, helper

    from ..compiler import compile_model
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "h", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 13)])
    r = simulate(compile_model(m, board=board), np.ones((1, 1, 4), np.float32))
    return int(r.stack)


def simulate(compiled, inputs, board: Board | str | None = None, timeout: float = DEFAULT_TIMEOUT,
             opt: str = firmware.OPT, extra_cflags: list[str] | tuple = (), check_budget: bool = True) -> SimResult:
    """Build the firmware for `compiled` with `inputs` (per model input,
    (samples, *shape) or one sample; a bare array for a one-input model; or
    a dict by input name), run it on the board's QEMU machine and return the
    outputs, SysTick counts and ELF sizes. Raises BoardError (no simulator),
    ToolError (missing toolchain/QEMU), BudgetError (exit 3), SimError
    (fault, hang, bad exit), InputError (shape/dtype)."""
    b = sim_board(board if board is not None else compiled.board)
    machine, caveat = firmware.qemu_machine(b)
    # extra firmware flags from the environment (e.g. -O3, or the tests' -DCUVIL_TEST_FAULT through the CLI)
    extra_cflags = [*extra_cflags, *shlex.split(os.environ.get("CUVIL_SIM_CFLAGS", ""))]
    xs = as_inputs(compiled, inputs)
    samples = xs[0].shape[0] if xs else 1
    if not xs:
        raise InputError("the model has no inputs to simulate")
    tool(GCC)
    tool(QEMU)
    elf, cached, warnings = build(compiled, xs, b, opt, extra_cflags)
    sizes = elf_sizes(elf)
    if check_budget:
        check_elf_budget(b, sizes, firmware.memory_map(machine))
    text, secs = run_elf(machine, elf, timeout)
    outs, ticks = parse_output(text, compiled.out_specs, samples)
    m = re.search(r"^K ([0-9a-f]{8})$", text, re.M)
    stack = int(m.group(1), 16) if m else None
    # within STACK_GUARD of the bottom counts as through it: a stack buffer the
    # kernels only partly write leaves painted words below the deepest frame
    if check_budget and stack is not None and b.stack_reserve and stack > b.stack_reserve - STACK_GUARD:
        raise BudgetError(f"firmware does not fit board '{b.id}': the stack ran through its whole reserve of "
                          f"{b.stack_reserve:,} B (stack_reserve in the board file); outputs cannot be trusted")
    bound = getattr(compiled, "stack_bound", 0)   # (stated for the boards' default build, -O2)
    if check_budget and stack is not None and bound and opt == firmware.OPT and stack > HARNESS_STACK + bound:
        raise BudgetError(f"the model used {stack - HARNESS_STACK:,} B of stack beyond the harness's "
                          f"{HARNESS_STACK:,} B, over the header's <NAME>_STACK_BOUND of {bound:,} B")
    return SimResult(board=b, outputs=outs, ticks=ticks, insn_per_tick=float(machine.sim["insn_per_tick"]),
                     text=sizes["text"], data=sizes["data"], bss=sizes["bss"], samples_bytes=sizes["samples"],
                     elf=elf, log=text, seconds=secs, macs=compiled.macs, weights_bytes=compiled.weights_bytes,
                     arena=compiled.plan.arena_size, build_cached=cached,
                     warnings=warnings, stack=stack, machine=machine, caveat=caveat)


def reference_outputs(compiled, inputs) -> list[np.ndarray]:
    """cuvil_mcu.reference on the compiled graph, per sample, stacked."""
    from .. import reference
    g = compiled.graph
    xs = as_inputs(compiled, inputs)
    per = [reference.run(g, {n: x[s] for n, x in zip(g.inputs, xs)}) for s in range(xs[0].shape[0])]
    return [np.stack([p[o] for p in per]) for o in g.outputs]


@dataclass
class Comparison:
    ok: bool
    first_mismatch: str = ""
    max_abs: float = 0.0


def compare(outputs: list[np.ndarray], ref: list[np.ndarray], names: list[str],
            atol: float = FLOAT_ATOL, rtol: float = FLOAT_RTOL) -> Comparison:
    """Integer outputs: bit for bit. Float: within atol + rtol*|ref| (default
    FLOAT_ATOL, FLOAT_RTOL; fp16 layers: precision.FP16_ATOL/RTOL)."""
    worst = 0.0
    for name, got, want in zip(names, outputs, ref):
        if got.dtype.kind == "f":
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            bad = ~(diff <= atol + rtol * np.abs(want.astype(np.float64)))
            bad |= np.isnan(got) != np.isnan(want)
            worst = max(worst, float(np.nanmax(diff)) if diff.size else 0.0)
        else:
            bad = got != want
            if got.size:
                worst = max(worst, float(np.abs(got.astype(np.int64) - want.astype(np.int64)).max()))
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return Comparison(False, f"output '{name}' sample {idx[0]} index {list(idx[1:])}: "
                                     f"simulator {got[idx]!r}, reference {want[idx]!r}", worst)
    return Comparison(True, "", worst)


def report(compiled, result: SimResult, cmp: Comparison | None) -> list[str]:
    """The lines `cuvil-mcu sim` prints."""
    r, b = result, result.board
    n = len(r.ticks)
    lines = []
    nwarn = r.warnings.count("warning:")
    if nwarn:
        first = next(ln for ln in r.warnings.splitlines() if "warning:" in ln)
        lines.append(f"warning  the firmware built with {nwarn} compiler warning(s), first: {first.strip()}")
    if cmp is not None:
        tol = "exact" if all(o.dtype.kind != "f" for o in r.outputs) else \
            f"float within {FLOAT_ATOL:g} + {FLOAT_RTOL:g}*|ref|"
        lines.append(f"outputs  {'identical to the host reference' if cmp.ok else 'DIFFER from the host reference'} "
                     f"({tol}, {n} sample{'s' if n != 1 else ''})" + ("" if cmp.ok else f": {cmp.first_mismatch}"))
    spread = f", samples {min(r.instructions_each):,}..{max(r.instructions_each):,}" if n > 1 else ""
    m = r.machine or b
    if m is not b:
        lines.append(f"machine  {b.id} ({b.core}) runs on QEMU {m.sim['qemu_machine']} ({m.id}), the machine with its "
                     f"core, built with {b.id}'s flags" + (f"; caveat: {r.caveat}" if r.caveat else ""))
    lines.append(f"instrs   {r.instructions:,} instructions per inference on {m.sim['qemu_machine']} "
                 f"(median of {n}{spread}; SysTick x {r.insn_per_tick:g}, within one tick)")
    if r.macs:
        lines.append(f"per MAC  {r.instructions / r.macs:.3f} instructions ({r.macs:,} MACs)")
    lines.append(f"firmware text+rodata {r.text:,} B (weights {r.weights_bytes:,} + code {r.text - r.weights_bytes:,}), "
                 f"data {r.data:,} B, bss {r.bss:,} B (arena {r.arena:,})")
    flash_cap = min(x for x in (b.flash, m.flash) if x)
    ram_cap = min(x for x in (b.ram, m.ram) if x)
    lines.append(f"budget   flash {r.text + r.data:,} / {flash_cap:,} B, RAM {r.data + r.bss + b.stack_reserve:,} / "
                 f"{ram_cap:,} B (incl. stack reserve {b.stack_reserve:,})")
    if r.stack is not None:
        lines.append(f"stack    {r.stack:,} B used (high-water mark of the painted stack) of the {b.stack_reserve:,} B "
                     f"reserve")
    return lines


__all__ = ["simulate", "SimResult", "SimError", "reference_outputs", "compare", "report", "sim_board",
           "CuvilError"]
