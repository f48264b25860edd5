"""Per-node instructions and estimated cycles of a compiled model on a QEMU board.

    from cuvil_mcu.sim import profile
    p = profile.run(compiled, x, "qemu-mps2-an386")      # one sample
    p.layers[i].instructions, p.layers[i].cycles, p.cycles, p.per_mac

The profiling build is the model's header with a call to a marker function
before every node of <prefix>_run and one after the last (`instrument`); the
firmware runs once under QEMU's execution trace (sim/cycles.py) and the
marker's executions cut the trace into one segment per node. No timer is
read and nothing is printed inside the run, so the profile's instruction sum
is the run's instruction count (plus two per node for the marker calls).

Profiles are cached as JSON next to the firmware cache, keyed by the header
(without its first line, which names the board), the core, its compiler
flags and the wait states: `cached()` lets `gen` print a latency for a real
board whose core was profiled on its QEMU twin.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field

import numpy as np

from .. import ops
from . import cycles

VERSION = 1   # bump when the timing models change: old cached profiles are ignored


def marker_name(prefix: str) -> str:
    return f"{prefix}__prof_mark"


def _hook(prefix: str) -> str:
    m = marker_name(prefix)
    return (f"/* profiling build: a call between nodes; the trace counts executions of this function */\n"
            f"void {m}(unsigned node);\n"
            f"__attribute__((noinline)) void {m}(unsigned node)\n"
            f"{{\n    __asm__ volatile(\"\" : : \"r\"(node) : \"memory\");\n}}\n")


def instrument(header: str, prefix: str) -> tuple[str, list[str]]:
    """Insert a marker call before each node comment of <prefix>_run and
    one before its final return; return the header and the node comments."""
    lines = header.split("\n")
    start = next(i for i, ln in enumerate(lines) if ln.strip().endswith(f"int {prefix}_run(void *arena)"))
    mark = marker_name(prefix)
    out, comments, n = lines[:start], [], 0
    for ln in lines[start:]:
        m = re.match(r"\s*/\* (\d+): (.*) \*/$", ln)
        if m and n >= 0:
            out.append(f"    {mark}({n}u);")
            comments.append(m.group(2))
            n += 1
        if ln.strip() == f"return {prefix.upper()}_OK;" and n > 0:
            out.append(f"    {mark}({n}u);")
            n = -1
        out.append(ln)
    text = "\n".join(out)
    anchor = "/* ---- kernels ---- */"
    if anchor not in text:
        raise ValueError("header has no kernels section to put the profiling hook before")
    return text.replace(anchor, _hook(prefix) + "\n" + anchor, 1), comments


@dataclass
class Layer:
    index: int
    op: str
    name: str
    macs: int
    instructions: int
    cycles: int

    @property
    def cycles_per_mac(self) -> float | None:
        return self.cycles / self.macs if self.macs else None


@dataclass
class Profile:
    board: str
    core: str
    model: str                 # timing model name
    wait_states: int
    clock_hz: int | None
    macs: int
    layers: list[Layer]
    instructions: int          # sum over the layers (trace)
    cycles: int
    stack: int | None = None   # measured stack high-water mark of the profiling run
    systick_instructions: int | None = None   # the profiling run's own SysTick count, for a cross-check
    extra: dict = field(default_factory=dict)

    @property
    def per_mac(self) -> float | None:
        return self.cycles / self.macs if self.macs else None

    @property
    def ms(self) -> float | None:
        return self.cycles / self.clock_hz * 1e3 if self.clock_hz else None

    def line(self) -> str:
        """The `cycles` line sim prints."""
        per = f", {self.per_mac:.3f} cycles/MAC" if self.macs else ""
        at = (f", {self.ms:.3f} ms at {self.clock_hz / 1e6:g} MHz" if self.clock_hz else "")
        return (f"cycles   ~{self.cycles:,} per inference ({self.model}, {self.wait_states} wait states)"
                f"{per}{at}")

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        d = json.loads(text)
        d["layers"] = [Layer(**x) for x in d["layers"]]
        return cls(**d)


def cache_key(header: str, board, wait_states: int) -> str:
    body = header.split("\n", 1)[1] if "\n" in header else header
    h = hashlib.sha256()
    for part in (str(VERSION), body, board.core, " ".join(board.cflags), str(wait_states)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


def cached(compiled, board=None, wait_states: int | None = None) -> Profile | None:
    """A profile of this header on a board with the same core and flags, if one was made."""
    b = board or compiled.board
    ws = b.flash_wait_states if wait_states is None else wait_states
    p = cycles.cache_dir() / f"{cache_key(compiled.header, b, ws)}.json"
    if not p.exists():
        return None
    try:
        prof = Profile.from_json(p.read_text())
    except (ValueError, TypeError, KeyError):
        return None
    prof.clock_hz = b.clock_hz     # cycles belong to the core; the time to the board that asks
    prof.macs = compiled.macs      # and the MACs to the model (the header does not say which count)
    return prof


def twin(board):
    """A QEMU board with the same core and compiler flags (its profile is this board's), or None."""
    from .. import boards
    if board.sim.get("qemu_machine"):
        return board
    return next((b for b in boards.all_boards().values() if b.sim.get("qemu_machine") and b.core == board.core
                 and list(b.cflags) == list(board.cflags)), None)


def latency_lines(compiled, run_sim: bool = False) -> list[str]:
    """gen's lines: the latency at the board's clock from a cached profile
    (or a quick profiling run on the core's QEMU twin with run_sim), and the
    stack that run measured."""
    b = compiled.board
    p = cached(compiled) if cycles.has_model(b) else None
    tw = twin(b) if cycles.has_model(b) else None
    if p is None and run_sim and tw is not None:
        p = run(compiled, None, tw, wait_states=b.flash_wait_states)
    lines = []
    if p is not None and b.clock_hz:
        lines.append(f"latency  ~{p.cycles / b.clock_hz * 1e3:.3f} ms at {b.clock_hz / 1e6:g} MHz ({p.cycles:,} cycles, "
                     f"{p.per_mac or 0:.3f}/MAC, {p.model}, {p.wait_states} wait states; profiled on {p.board})")
    elif cycles.has_model(b) and tw is not None:
        lines.append(f"latency  not profiled yet: `cuvil-mcu gen --latency` (or sim/report on {tw.id}) measures it")
    if p is not None and p.stack is not None:   # RAM itself is the summary's RAM line (arena + stack bound)
        lines.append(f"stack    {p.stack:,} B measured on {p.board} (high-water mark of the harness and "
                     f"{compiled.prefix}_run)" + (f", within the {b.stack_reserve:,} B stack reserve"
                                                   if b.stack_reserve else ""))
    return lines


def _node_macs(g, n) -> int:
    ins = [g.tensors[t] if t else None for t in n.inputs]
    outs = [g.tensors[t] for t in n.outputs if t]
    return ops.get(n.op_type).macs(n, ins, outs)


def run(compiled, inputs=None, board=None, wait_states: int | None = None, timeout: float = 600.0,
        use_cache: bool = True) -> Profile:
    """Profile one inference (the first sample of `inputs`, or the inputs'
    zero points) on `board` (default: the compiled board) under the core's
    timing model."""
    from . import firmware, qemu
    b = qemu.sim_board(board if board is not None else compiled.board)
    ws = b.flash_wait_states if wait_states is None else int(wait_states)
    key = cache_key(compiled.header, b, ws)
    path = cycles.cache_dir() / f"{key}.json"
    if use_cache and path.exists():
        try:
            return dataclasses.replace(Profile.from_json(path.read_text()), macs=compiled.macs)
        except (ValueError, TypeError, KeyError):
            pass
    model = cycles.model_for(b)
    xs = firmware.default_inputs(compiled) if inputs is None else [x[:1] for x in qemu.as_inputs(compiled, inputs)]
    header, _comments = instrument(compiled.header, compiled.prefix)
    prof_c = dataclasses.replace(compiled, header=header)
    elf, _, _ = qemu.build(prof_c, xs, b)
    tr = cycles.trace(b, elf, timeout=timeout, want_regs=ws > 0)
    machine, _ = firmware.qemu_machine(b)   # the ELF is linked for the QEMU machine's memory map
    mm = firmware.memory_map(machine)
    est = cycles.estimate(tr, model, ws, marker=marker_name(compiled.prefix),
                          flash=(mm.flash_base, mm.flash_len), elf_words=cycles.read_words(elf) if ws else None)
    g = compiled.graph
    if len(est.segments) != len(g.nodes):
        raise qemu.SimError(f"profiling run: {len(est.segments)} node segments in the trace, the model has "
                            f"{len(g.nodes)} nodes")
    layers = [Layer(i, n.op_type, n.name, _node_macs(g, n), s.instructions, s.cycles)
              for i, (n, s) in enumerate(zip(g.nodes, est.segments))]
    st = re.search(r"^K ([0-9a-f]{8})$", tr.log, re.M)
    ticks = re.search(r"^S 00000000 ([0-9a-f]{16})$", tr.log, re.M)
    p = Profile(board=b.id, core=b.core, model=model.name, wait_states=ws, clock_hz=b.clock_hz,
                macs=compiled.macs, layers=layers, instructions=est.instructions, cycles=est.cycles,
                stack=int(st.group(1), 16) if st else None,
                systick_instructions=round(int(ticks.group(1), 16) * float(machine.sim["insn_per_tick"])) if ticks
                else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(p.to_json())
    tmp.replace(path)
    return p


def zero_input(compiled) -> list[np.ndarray]:
    from . import firmware
    return firmware.default_inputs(compiled)
