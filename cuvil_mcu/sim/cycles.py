"""Cycle-approximate cost of a firmware run, from QEMU's execution trace.

QEMU counts instructions, not cycles. This module runs the firmware once
more with `-d in_asm,exec,nochain` (every translated block's instructions,
then one line per block executed; `nochain` makes the trace complete), and
weights every executed instruction with the documented timing of the core
(docs/cycles.md says which rules come from which manual, and the limits).

    from cuvil_mcu.sim import cycles
    t = cycles.trace(board, elf)                       # run QEMU, parse the trace
    est = cycles.estimate(t, cycles.model_for(board), wait_states=0)
    est.cycles, est.instructions, est.segments         # totals, per marked segment

The trace is parsed into translated blocks (TBs: QEMU's unit of translation,
a straight run of instructions ending at a branch or a page/size limit) and
the sequence of TB executions. A block's cost is static (the sum over its
instructions, with the pipeline rules that act between neighbours inside the
block) plus its final branch, taken or not, which the next executed block's
address tells. Instruction identities come from arm-none-eabi-objdump of the
same ELF (GNU syntax, knows Helium), keyed by address.

Segments: the profiling build (sim/profile.py) calls a marker function
between the nodes of <prefix>_run; every execution of the marker's block
closes one segment, so per-node costs need no timer and no printing.
"""
from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BoardError, ToolError

OBJDUMP = "arm-none-eabi-objdump"
NM = "arm-none-eabi-nm"

# ---------------------------------------------------------------- decoding

COND = {"eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al"}
REGNAMES = {**{f"r{i}": f"r{i}" for i in range(13)}, "sb": "r9", "sl": "r10", "fp": "r11", "ip": "r12",
            "sp": "sp", "lr": "lr", "pc": "pc"}
_REG_RE = re.compile(r"\b(r1[0-2]|r[0-9]|sb|sl|fp|ip|sp|lr|pc)\b")
_TARGET_RE = re.compile(r"\b([0-9a-f]+) <")

LOADS = {"ldr", "ldrb", "ldrh", "ldrsb", "ldrsh", "ldrex", "ldrexb", "ldrexh", "ldrt", "ldrbt", "ldrht",
         "ldrsbt", "ldrsht", "lda", "ldab", "ldah", "ldaex"}
STORES = {"str", "strb", "strh", "strex", "strexb", "strexh", "strt", "strbt", "strht", "stl", "stlb", "stlh"}
LDM = {"ldm", "ldmia", "ldmdb", "ldmfd", "ldmea", "pop"}
STM = {"stm", "stmia", "stmdb", "stmea", "stmfd", "push"}
MUL = {"mul", "mla", "mls", "smull", "umull", "smlal", "umlal", "umaal"}
LONG_MUL = {"smull", "umull", "smlal", "umlal", "umaal", "smlald", "smlaldx", "smlsld", "smlsldx", "smlalbb",
            "smlalbt", "smlaltb", "smlaltt"}
DIV = {"sdiv", "udiv"}
NO_DEST = {"cmp", "cmn", "tst", "teq", "nop", "dmb", "dsb", "isb", "bkpt", "svc", "wfi", "wfe", "sev", "yield",
           "cpsid", "cpsie", "msr", "vcmp", "vcmpe", "vpst", "vpt", "vctp", "csdb", "pld", "pli", "vmsr"}
BRANCH_DIRECT = {"b", "bl", "cbz", "cbnz", "le", "letp", "wls", "wlstp", "lctp"}
BRANCH_REG = {"bx", "blx", "bxns", "blxns"}
FP_MAC = {"vmla", "vmls", "vnmla", "vnmls", "vfma", "vfms", "vfnma", "vfnms"}
FP_DIV = {"vdiv", "vsqrt"}
FP_MEM = {"vldr", "vstr"}
FP_MULTI = {"vldm", "vldmia", "vldmdb", "vstm", "vstmia", "vstmdb", "vpush", "vpop"}
# Helium (MVE) memory instructions; every other instruction with a q register is a vector ALU/MAC op
MVE_MEM = {"vldrb", "vldrh", "vldrw", "vldrd", "vstrb", "vstrh", "vstrw", "vstrd", "vld20", "vld21", "vld40",
           "vld41", "vld42", "vld43", "vst20", "vst21", "vst40", "vst41", "vst42", "vst43"}
MVE_MAC = {"vmladav", "vmladava", "vmlsdav", "vmlsdava", "vmlav", "vmlava", "vmlaldav", "vmlaldava",
           "vrmlaldavh", "vrmlaldavha", "vmul", "vmla", "vmlas", "vqdmulh", "vqrdmulh", "vmulh", "vrmulh",
           "vmull", "vmullb", "vmullt", "vqdmlah", "vqrdmlah", "vfma", "vfms", "vaddv", "vaddva", "vaddlv",
           "vaddlva"}
LOB = {"dls", "dlstp", "wls", "wlstp", "le", "letp", "lctp"}
_KNOWN = (LOADS | STORES | LDM | STM | MUL | LONG_MUL | DIV | NO_DEST | BRANCH_DIRECT | BRANCH_REG | FP_MAC
          | FP_DIV | FP_MEM | FP_MULTI | MVE_MEM | MVE_MAC | LOB
          | {"ldrd", "strd", "tbb", "tbh", "it", "mov", "movw", "movt", "mvn", "add", "adc", "sub", "sbc", "rsb",
             "and", "orr", "orn", "eor", "bic", "lsl", "lsr", "asr", "ror", "rrx", "neg", "adr", "addw", "subw",
             "clz", "rbit", "rev", "rev16", "revsh", "sxtb", "sxth", "uxtb", "uxth", "sxtb16", "uxtb16", "sxtab",
             "sxtah", "uxtab", "uxtah", "sxtab16", "uxtab16", "bfi", "bfc", "ubfx", "sbfx", "ssat", "usat",
             "ssat16", "usat16", "sel", "pkhbt", "pkhtb", "qadd", "qsub", "qdadd", "qdsub", "mrs", "cpy",
             "vmov", "vmrs", "vadd", "vsub", "vmul", "vnmul", "vneg", "vabs", "vcvt", "vcvtr", "vcvta", "vcvtn",
             "vcvtm", "vcvtp", "vdup", "vsel", "vmaxnm", "vminnm", "vrinta", "vrintn", "vrintm", "vrintp",
             "vrintx", "vrintz", "vrintr", "vcvtb", "vcvtt"})
_IT_RE = re.compile(r"^it[te]{0,3}$")


@dataclass(frozen=True)
class Insn:
    pc: int
    size: int                     # 2 or 4 bytes
    op: str                       # base mnemonic: no width (.w/.n), type (.s8) or condition suffix
    cond: str | None              # condition (conditional branch, or inside an IT block)
    text: str                     # mnemonic + operands as objdump printed them
    kind: str                     # alu, mul, div, ld, st, ldrd, strd, ldm, stm, b, bl, bx, tb, it, barrier,
    #                               fp, fpmac, fpdiv, fpld, fpst, fpmulti, vmem, vmac, valu, lob, pcload, pcalu
    dst: frozenset = frozenset()
    addr: frozenset = frozenset()  # registers that form the address of a memory access
    nregs: int = 0                # words moved by LDM/STM/PUSH/POP/VLDM/VSTM (and 2 for LDRD/STRD)
    target: int | None = None     # direct branch target
    wide_data: bool = False       # 64-bit FP load/store (VLDR.64)
    shifted: bool = False         # shifted/extended operand (M7 dual-issue rule)
    pc_relative: bool = False     # literal load [pc, #imm]
    reg_offset: bool = False      # [Rn, Rm] addressing
    writeback: bool = False
    loaded: frozenset = frozenset()  # registers a single load writes with memory data (not its writeback base)

    @property
    def end(self) -> int:
        return self.pc + self.size


def _split_mnemonic(m: str) -> tuple[str, str | None, str]:
    """'addne.w' -> ('add', 'ne', ''); 'vmla.f32' -> ('vmla', None, 'f32');
    'bne.n' -> ('b', 'ne', ''); 'movs' -> ('mov', None, ''); 'vldrbt.s8' -> ('vldrb', None, 's8')."""
    parts = m.lower().split(".")
    head, suffix = parts[0], ".".join(p for p in parts[1:] if p not in ("w", "n"))
    if head in _KNOWN or _IT_RE.match(head):
        return head, None, suffix
    if head[:-2] in _KNOWN and head[-2:] in COND:
        return head[:-2], head[-2:], suffix
    if head.endswith("s") and head[:-1] in _KNOWN:
        return head[:-1], None, suffix
    if head[-2:] in COND and head[:-3] in _KNOWN and head[-3] == "s":
        return head[:-3], head[-2:], suffix
    # MVE predicated forms: vldrbt / vmladavat (then / else suffix inside a VPT block)
    if head[-1:] in ("t", "e") and head[:-1] in _KNOWN and head.startswith("v"):
        return head[:-1], None, suffix
    return head, None, suffix


def _regs(text: str) -> list[str]:
    return [REGNAMES[r] for r in _REG_RE.findall(text)]


def _reglist_words(text: str) -> int:
    m = re.search(r"\{([^}]*)\}", text)
    if not m:
        return 0
    n = 0
    for item in m.group(1).split(","):
        item = item.strip()
        r = re.fullmatch(r"([rsdq])(\d+)-[rsdq](\d+)", item)
        if r:
            k = int(r.group(3)) - int(r.group(2)) + 1
            n += k * {"r": 1, "s": 1, "d": 2, "q": 4}[r.group(1)]
        elif item:
            n += {"d": 2, "q": 4}.get(item[0], 1) if re.fullmatch(r"[dq]\d+", item) else 1
    return n


def decode(pc: int, size: int, mnemonic: str, operands: str) -> Insn:
    op, cond, suffix = _split_mnemonic(mnemonic)
    literal = re.search(r"@ \(([0-9a-f]+) <", operands)     # objdump names a literal load's address
    ops = operands.split("@")[0].strip()   # drop objdump's "@ 0x40" / "@ (addr <sym>)" comments
    text = f"{mnemonic} {ops}".strip()
    regs = _regs(ops)
    kw: dict = {}
    mem = re.search(r"\[([^\]]*)\](!?)(.*)$", ops)
    if mem:
        inner = _regs(mem.group(1))
        kw["addr"] = frozenset(inner)
        kw["pc_relative"] = bool(inner) and inner[0] == "pc"
        kw["reg_offset"] = len(inner) > 1
        kw["writeback"] = bool(mem.group(2)) or bool(mem.group(3).strip().startswith(","))
    if op in LOADS:
        dst = set(regs[:1])
        if kw.get("writeback"):
            dst |= set(_regs(mem.group(1))[:1])
        kind = "pcload" if "pc" in regs[:1] else "ld"
        kw["dst"] = frozenset(dst)
        kw["loaded"] = frozenset(regs[:1])
        if kw.get("pc_relative") and literal:
            kw["target"] = int(literal.group(1), 16)
    elif op in STORES:
        kind = "st"
        if kw.get("writeback"):
            kw["dst"] = frozenset(_regs(mem.group(1))[:1])
    elif op in ("ldrd", "strd"):
        kind = op
        kw["nregs"] = 2
        if op == "ldrd":
            kw["dst"] = frozenset(regs[:2] + (_regs(mem.group(1))[:1] if kw.get("writeback") else []))
    elif op in LDM or op in STM:
        n = _reglist_words(ops)
        kw["nregs"] = n
        base = [] if op in ("push", "pop") else regs[:1]
        kw["addr"] = frozenset(base or ["sp"])
        listed = set(_regs(re.search(r"\{([^}]*)\}", ops).group(1))) if "{" in ops else set()
        if op in LDM:
            kind = "ldm"
            kw["dst"] = frozenset(listed | ({"sp"} if op == "pop" or "!" in ops else set()))
            if "pc" in listed:
                kind = "ldmpc"
        else:
            kind = "stm"
    elif op in BRANCH_DIRECT and op not in LOB:
        kind = "bl" if op == "bl" else "b"
        t = _TARGET_RE.search(ops)
        kw["target"] = int(t.group(1), 16) if t else None
        if op == "bl":
            kw["dst"] = frozenset({"lr"})
    elif op in BRANCH_REG:
        kind = "bx"
    elif op in ("tbb", "tbh"):
        kind = "tb"
    elif _IT_RE.match(op):
        kind = "it"
    elif op in ("dmb", "dsb", "isb"):
        kind = "barrier"
    elif op in DIV:
        kind = "div"
        kw["dst"] = frozenset(regs[:1])
    elif op in LOB:
        kind = "lob"
        t = _TARGET_RE.search(ops)
        kw["target"] = int(t.group(1), 16) if t else None
    elif op.startswith("v"):
        vector = bool(re.search(r"\bq[0-7]\b", ops)) or op in ("vpst", "vpt", "vctp")
        if vector:
            kind = "vmem" if op in MVE_MEM else ("vmac" if op in MVE_MAC else "valu")
        elif op in FP_MEM:
            kind = "fpld" if op == "vldr" else "fpst"
            kw["wide_data"] = bool(re.match(r"\s*d\d", ops))
        elif op in FP_MULTI:
            kind = "fpmulti"
            kw["nregs"] = _reglist_words(ops)
        elif op in FP_MAC:
            kind = "fpmac"
        elif op in FP_DIV:
            kind = "fpdiv"
        else:
            kind = "fp"
        kw["dst"] = frozenset(r for r in regs[:1] if op in ("vmov", "vmrs") and r != "pc")
        if op in ("vmov",) and len(regs) >= 2 and re.match(r"\s*r", ops):
            kw["dst"] = frozenset(regs[:2] if re.match(r"\s*r\w+,\s*r", ops) else regs[:1])
        elif vector and op in MVE_MAC and regs and re.match(r"\s*r", ops):
            kw["dst"] = frozenset(regs[:2] if op.startswith(("vmlaldav", "vrmlaldavh", "vaddlv")) else regs[:1])
    else:
        if op in MUL or op in LONG_MUL or op.startswith(("smla", "smul", "smmla", "smmul", "smmls", "smlsd",
                                                          "smuad", "smusd", "usad")):
            kind = "mul"
        else:
            kind = "alu"
        if op in NO_DEST:
            dst = set()
        elif op in LONG_MUL:
            dst = set(regs[:2])
        else:
            dst = set(regs[:1])
        kw["dst"] = frozenset(dst)
        kw["shifted"] = bool(re.search(r"\b(lsl|lsr|asr|ror|rrx)\b", ops)) or op in (
            "sxtb", "sxth", "uxtb", "uxth", "sxtb16", "uxtb16", "sxtab", "sxtah", "uxtab", "uxtah", "sxtab16",
            "uxtab16", "bfi", "bfc", "ubfx", "sbfx", "rev", "rev16", "revsh", "rbit")
        if "pc" in dst:
            kind = "pcalu"
    return Insn(pc=pc, size=size, op=op, cond=cond, text=text, kind=kind, **kw)


_OBJ_LINE = re.compile(r"^\s*([0-9a-f]+):\t([0-9a-f ]+?)\s*\t(\S+)(?:\t(.*))?$")


def disassemble(elf: Path, arch: str | None = None) -> dict[int, Insn]:
    """Every instruction of the ELF's code sections, by address. arch: an
    objdump -m architecture (armv8.1-m.main for Helium code, which the
    default decoding reads as coprocessor instructions)."""
    objdump = shutil.which(OBJDUMP)
    if objdump is None:
        raise ToolError(f"{OBJDUMP} not found on PATH (Debian/Ubuntu: apt-get install binutils-arm-none-eabi)")
    r = subprocess.run([objdump, "-d", *([f"-m{arch}"] if arch else []), str(elf)], capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolError(f"{OBJDUMP} failed on {elf}: {r.stderr.strip()[-500:]}")
    out: dict[int, Insn] = {}
    for line in r.stdout.splitlines():
        m = _OBJ_LINE.match(line)
        if not m or m.group(3).startswith("."):
            continue
        raw = m.group(2).split()
        size = sum(len(x) // 2 for x in raw)
        if size not in (2, 4):
            continue
        pc = int(m.group(1), 16)
        out[pc] = decode(pc, size, m.group(3), m.group(4) or "")
    return out


def symbols(elf: Path) -> dict[str, tuple[int, int]]:
    """Function symbols: name -> (address, size), Thumb bit cleared."""
    nm = shutil.which(NM)
    if nm is None:
        raise ToolError(f"{NM} not found on PATH (Debian/Ubuntu: apt-get install binutils-arm-none-eabi)")
    r = subprocess.run([nm, "-S", "--defined-only", str(elf)], capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tTwW":
            out[p[3]] = (int(p[0], 16) & ~1, int(p[1], 16))
        elif len(p) == 3 and p[1] in "tTwW":      # assembly labels carry no size
            out.setdefault(p[2], (int(p[0], 16) & ~1, 0))
    return out


# ---------------------------------------------------------------- the trace

@dataclass
class Trace:
    """What QEMU executed: translated blocks (their instruction addresses)
    and the sequence of block executions (indices into `blocks`)."""
    blocks: list[list[int]]
    execs: list[int]
    partial: dict[int, int] = field(default_factory=dict)   # exec index -> instructions it really ran
    regs: dict[int, list[dict[str, int]]] = field(default_factory=dict)  # block -> entry registers (a few runs)
    insns: dict[int, Insn] = field(default_factory=dict)
    syms: dict[str, tuple[int, int]] = field(default_factory=dict)
    log: str = ""                                            # semihosting output of the traced run

    def executed_instructions(self, start: int = 0, stop: int | None = None) -> int:
        stop = len(self.execs) if stop is None else stop
        n = 0
        for i in range(start, stop):
            n += self.partial.get(i, len(self.blocks[self.execs[i]]))
        return n


_TRACE_RE = re.compile(r"^Trace \d+: (0x[0-9a-f]+) \[[0-9a-f]+/([0-9a-f]+)/")
_REG_DUMP = re.compile(r"R(\d\d)=([0-9a-f]{8})")
REG_SAMPLES = 4   # entry-register snapshots kept per block (flash wait-state classification)


def parse_log(lines, want_regs: bool = False) -> tuple[list[list[int]], list[int], dict[int, int], dict]:
    blocks: list[list[int]] = []
    by_ptr: dict[str, int] = {}
    execs: list[int] = []
    partial: dict[int, int] = {}
    regs: dict[int, list[dict[str, int]]] = {}
    pending: list[int] | None = None
    reg_target: dict[str, int] | None = None
    for line in lines:
        c = line[:1]
        if c == "0" and pending is not None and line.startswith("0x"):
            pending.append(int(line[2:10], 16))
            continue
        if c == "T" and line.startswith("Trace "):
            m = _TRACE_RE.match(line)
            ptr = m.group(1)
            if pending is not None:
                by_ptr[ptr] = len(blocks)
                blocks.append(pending)
                pending = None
            b = by_ptr.get(ptr)
            if b is None:   # a block translated before the log started: cannot happen with in_asm from reset
                raise ToolError(f"QEMU trace: block {ptr} at 0x{m.group(2)} executed before it was translated")
            execs.append(b)
            reg_target = None
            if want_regs:
                snaps = regs.setdefault(b, [])
                if len(snaps) < REG_SAMPLES:
                    reg_target = {}
                    snaps.append(reg_target)
            continue
        if c == "I" and line.startswith("IN:"):
            pending = []
            continue
        if c == "R" and reg_target is not None:
            for k, v in _REG_DUMP.findall(line):
                reg_target[f"r{int(k)}" if int(k) < 13 else {13: "sp", 14: "lr", 15: "pc"}[int(k)]] = int(v, 16)
            continue
        if c == "c" and line.startswith("cpu_io_recompile: rewound execution of TB to "):
            # an I/O access mid-block under -icount: the block ran up to (not including) that address,
            # and QEMU re-executes from there as a new block
            if execs:
                partial[len(execs) - 1] = int(line.rsplit(" ", 1)[1], 16)   # an address: resolved in trace()
            continue
        if c == "S" and line.startswith("Stopped execution of TB chain before "):
            # the block was entered but exited before its first instruction (icount budget): not executed
            if execs:
                execs.pop()
                partial.pop(len(execs), None)
    return blocks, execs, partial, regs


def trace(board, elf: Path, timeout: float = 600.0, want_regs: bool = False) -> Trace:
    """Run `elf` on the board's QEMU machine with the execution trace on."""
    from . import firmware, qemu
    b, _ = firmware.qemu_machine(qemu.sim_board(board))   # a real board runs on its core's QEMU machine
    with tempfile.TemporaryDirectory(prefix="cuvil-trace-") as tmp:
        log = Path(tmp) / "trace.log"
        cmd = qemu.qemu_command(b, elf) + ["-d", "in_asm,exec,nochain" + (",cpu" if want_regs else ""),
                                            "-D", str(log)]
        try:
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise qemu.SimError(f"traced firmware run timed out after {timeout:g} s on "
                                f"{b.sim['qemu_machine']}") from None
        out = r.stdout.decode(errors="replace")
        if r.returncode != 0 or "CUVIL DONE" not in out:
            raise qemu.SimError(f"traced firmware run failed on {b.sim['qemu_machine']} (exit {r.returncode}): "
                                f"{r.stderr.decode(errors='replace').strip()[-500:]}")
        with open(log, errors="replace") as f:
            blocks, execs, partial, regs = parse_log(f, want_regs)
    arch = "armv8.1-m.main" if any(f.startswith("-mcpu=cortex-m55") for f in b.cflags) else None
    insns = disassemble(elf, arch)
    blocks = [_rebuild(pcs, insns) for pcs in blocks]
    partial = {i: (blocks[execs[i]].index(a) if a in blocks[execs[i]] else len(blocks[execs[i]]))
               for i, a in partial.items()}
    return Trace(blocks, execs, partial, regs, insns, symbols(elf), out)


def _rebuild(listed: list[int], insns: dict[int, Insn]) -> list[int]:
    """A block's instruction addresses from its first to its last listed
    address, stepping by objdump's sizes: QEMU's in_asm disassembler does not
    know Helium and lists a 32-bit MVE instruction as two halfwords."""
    if not listed:
        return listed
    out, p, last = [], listed[0], listed[-1]
    while p <= last:
        out.append(p)
        ins = insns.get(p)
        p += ins.size if ins is not None else 2
    return out


# ---------------------------------------------------------------- timing models

DATAPROC = {"alu", "mul", "pcalu"}
MEMORY = {"ld", "st", "ldrd", "strd", "ldm", "ldmpc", "stm", "pcload", "fpld", "fpst", "fpmulti", "vmem"}


class M4Timing:
    """Cortex-M4 r0p1 TRM (Arm DDI 0439) table 3-1 and section 3.3.2 'Load/store
    timing'; FPU timings from the same manual's FPU chapter (DDI 0439 7.2.3).

    P (pipeline refill after a taken branch, 1..3 in the TRM): 2, plus 1 when
    the target is a 32-bit instruction that is not word aligned (it needs
    two fetches); 3 after a load into the PC (LDR PC, POP {pc}, TBB/TBH),
    which the TRM gives as "three cycles for the pipeline reload"."""

    name = "Cortex-M4 TRM timing"
    core = "cortex-m4"
    DIV = 7           # SDIV/UDIV take 2..12 (early termination on the operands' sizes): the middle
    P = 2
    P_LOAD = 3

    def refill(self, target: int, insns: dict[int, Insn]) -> int:
        t = insns.get(target)
        return self.P + (1 if t is not None and t.size == 4 and target % 4 else 0)

    def insn(self, ins: Insn, prev: Insn | None) -> int:
        """Cycles of one instruction, without the refill of a taken branch."""
        k = ins.kind
        if k == "ld":
            c = 2
            if prev is not None and prev.kind == "ld" and not (prev.loaded & ins.addr):
                c = 1     # pipelined after a load whose result is not this address
        elif k == "st":
            c = 2 if ins.reg_offset else 1
            if ins.reg_offset and prev is not None and prev.kind == "ld" and not (prev.loaded & ins.addr):
                c = 1
        elif k in ("ldrd", "strd"):
            c = 3
        elif k in ("ldm", "stm"):
            c = 1 + ins.nregs
        elif k == "ldmpc":
            c = 1 + ins.nregs + self.P_LOAD
        elif k == "pcload":
            c = 2 + self.P_LOAD
        elif k == "tb":
            c = 3 + self.P_LOAD
        elif k == "div":
            c = self.DIV
        elif k == "it":
            c = 0 if prev is not None and prev.size == 2 and prev.kind not in ("b", "bl", "bx", "it") else 1
        elif k == "barrier":
            c = 1 + (self.P if ins.op == "isb" else 0)
        elif k == "fpld" or k == "fpst":
            c = 3 if ins.wide_data else 2
        elif k == "fpmulti":
            c = 1 + ins.nregs
        elif k == "fpmac":
            c = 3
        elif k == "fpdiv":
            c = 14
        elif k == "pcalu":
            c = 1 + self.P
        else:
            c = 1
        if k in MEMORY and prev is not None and prev.kind in DATAPROC and (prev.dst & ins.addr):
            c += 1        # address from the preceding data-processing result: no forwarding path
        return c

    def block(self, pcs: list[int], insns: dict[int, Insn]) -> int:
        total, prev = 0, None
        for pc in pcs:
            ins = insns.get(pc)
            if ins is None:
                total += 1
                prev = None
                continue
            total += self.insn(ins, prev)
            prev = ins
        return total

    def branch(self, last: Insn, next_pc: int | None, insns: dict[int, Insn], state: dict) -> int:
        """Extra cycles at the end of a block: the refill of a taken branch."""
        if next_pc is None or next_pc == last.end:
            return 0                       # not taken / fall-through
        k = last.kind
        if k in ("b", "bl", "bx", "lob"):
            return self.refill(next_pc, insns)
        return 0                           # loads into PC carry their refill in insn()


class M3Timing(M4Timing):
    """Cortex-M3 r2p1 TRM (Arm DDI 0337) table 3-1: the M4's rules except the
    multiplier: MLA/MLS 2, SMULL/UMULL 3..5 and SMLAL/UMLAL 4..7 (early
    termination on the operands: the middle, 4 and 6)."""
    name = "Cortex-M3 TRM timing"
    core = "cortex-m3"

    def insn(self, ins: Insn, prev: Insn | None) -> int:
        if ins.kind == "mul":
            if ins.op in ("mla", "mls"):
                return 2
            if ins.op in ("smull", "umull"):
                return 4
            if ins.op in ("smlal", "umlal"):
                return 6
        return super().insn(ins, prev)


class M33Timing(M4Timing):
    """Cortex-M33: Arm's TRM (DDI 0553) publishes no per-instruction cycle
    table; the M33 runs the same Armv8-M Mainline + DSP instructions on a
    3-stage pipeline, so the M4 table is used (docs/cycles.md: limits)."""
    name = "Cortex-M33 (M4 TRM timing)"
    core = "cortex-m33"


class M7Timing(M4Timing):
    """Cortex-M7: Arm publishes no cycle tables. An in-order dual-issue
    approximation: two neighbouring instructions issue together unless the
    second reads the first's result, both access memory, both multiply, both
    use a shifted operand, or the first is a branch; a load's result reaches
    an instruction issued right after it one cycle late; LDM/STM move 64 bits
    per cycle; branches predicted with a per-address last-outcome bit
    (backwards taken, forwards not taken when unseen): 0 extra cycles when
    right, MISPREDICT when wrong."""
    name = "Cortex-M7 dual-issue approximation"
    core = "cortex-m7"
    MISPREDICT = 6
    DIV = 7

    def _single(self, ins: Insn) -> int:
        k = ins.kind
        if k in ("ldm", "stm", "fpmulti"):
            return 1 + (ins.nregs + 1) // 2
        if k == "ldmpc":
            return 1 + (ins.nregs + 1) // 2 + self.MISPREDICT // 2
        if k in ("ldrd", "strd"):
            return 1
        if k == "div":
            return self.DIV
        if k == "fpdiv":
            return 14
        if k == "tb" or k == "pcload":
            return 2 + self.MISPREDICT // 2
        if k == "pcalu":
            return 1 + self.MISPREDICT // 2
        return 1

    @staticmethod
    def _reads(ins: Insn) -> set:
        regs = set(_regs(ins.text.split(" ", 1)[1] if " " in ins.text else ""))
        return regs - set(ins.dst) if ins.kind not in MEMORY else regs

    def block(self, pcs: list[int], insns: dict[int, Insn]) -> int:
        seq = [insns.get(pc) for pc in pcs]
        total, i, load_dst = 0, 0, frozenset()
        while i < len(seq):
            a = seq[i]
            if a is None:
                total, i, load_dst = total + 1, i + 1, frozenset()
                continue
            cost = self._single(a)
            if load_dst & self._reads(a):
                cost += 1                                     # load-use
            b = seq[i + 1] if i + 1 < len(seq) else None
            if cost == 1 and b is not None and self._pairs(a, b):
                if not (load_dst & self._reads(b)):
                    total += 1
                    load_dst = (a.dst if a.kind in MEMORY else frozenset()) | (
                        b.dst if b.kind in MEMORY else frozenset())
                    i += 2
                    continue
            total += cost
            load_dst = a.dst if a.kind in ("ld", "ldrd", "ldm") else frozenset()
            i += 1
        return total

    def _pairs(self, a: Insn, b: Insn) -> bool:
        if a.kind in ("b", "bl", "bx", "tb", "it", "lob", "barrier", "pcload", "pcalu", "ldmpc") or b.kind in (
                "it", "barrier", "div", "fpdiv", "ldm", "stm", "ldmpc", "tb", "pcload", "pcalu", "fpmulti"):
            return False
        if a.dst & self._reads(b) or a.dst & b.dst:
            return False
        if a.kind in MEMORY and b.kind in MEMORY:
            return False
        if a.kind == "mul" and b.kind == "mul":
            return False
        if a.shifted and b.shifted:
            return False
        if a.kind.startswith("fp") and b.kind.startswith("fp"):
            return False
        return self._single(a) == 1 and self._single(b) == 1

    def branch(self, last: Insn, next_pc: int | None, insns: dict[int, Insn], state: dict) -> int:
        if next_pc is None:
            return 0
        taken = next_pc != last.end
        if last.kind in ("bl",) or (last.kind in ("b", "bx") and last.cond is None):
            return 0 if last.kind in ("b", "bl") else (self.MISPREDICT // 2 if taken else 0)
        if last.kind not in ("b", "bx", "lob"):
            return 0
        hist = state.setdefault("m7_hist", {})
        guess = hist.get(last.pc)
        if guess is None:
            guess = last.target is not None and last.target < last.pc
        hist[last.pc] = taken
        return 0 if guess == taken else self.MISPREDICT


class M55Timing(M4Timing):
    """Cortex-M55: scalar instructions with the M4 table (Arm's M55 TRM has no
    per-instruction table for them); Helium is dual-beat on the M55 (a
    128-bit vector instruction takes 2 cycles), and a vector memory
    instruction next to a vector ALU/MAC instruction overlaps by one beat
    pair (the second costs 1); VPST/VCTP 1; low-overhead loops: the LE/LETP
    branch back costs nothing after the first iteration."""
    name = "Cortex-M55 dual-beat approximation"
    core = "cortex-m55"

    def insn(self, ins: Insn, prev: Insn | None) -> int:
        k = ins.kind
        if k in ("vmem", "vmac", "valu"):
            if ins.op in ("vpst", "vpt", "vctp"):
                return 1
            if prev is not None and prev.kind in ("vmem", "vmac", "valu") and prev.op not in (
                    "vpst", "vpt", "vctp") and (prev.kind == "vmem") != (k == "vmem"):
                return 1
            return 2
        if k == "lob":
            return 1
        return super().insn(ins, prev)

    def block(self, pcs: list[int], insns: dict[int, Insn]) -> int:
        total, prev, overlapped = 0, None, False
        for pc in pcs:
            ins = insns.get(pc)
            if ins is None:
                total, prev = total + 1, None
                continue
            c = self.insn(ins, prev)
            # an overlapped pair: the next vector instruction cannot overlap the same one again
            if c == 1 and overlapped and ins.kind in ("vmem", "vmac", "valu") and ins.op not in ("vpst", "vpt",
                                                                                             "vctp"):
                c = 2
            overlapped = c == 1 and ins.kind in ("vmem", "vmac", "valu")
            total += c
            prev = ins
        return total

    def branch(self, last: Insn, next_pc: int | None, insns: dict[int, Insn], state: dict) -> int:
        if last.kind == "lob" and last.op in ("le", "letp") and next_pc is not None and next_pc != last.end:
            seen = state.setdefault("m55_loops", set())
            if last.pc in seen:
                return -1            # the LE itself is not executed again: the loop branch is free
            seen.add(last.pc)
        return super().branch(last, next_pc, insns, state)


MODELS = {"cortex-m3": M3Timing, "cortex-m4": M4Timing, "cortex-m33": M33Timing, "cortex-m7": M7Timing, "cortex-m55": M55Timing}


def model_for(board):
    """The timing model of the board's core; BoardError for cores without one."""
    core = getattr(board, "core", board)
    cls = MODELS.get(core)
    if cls is None:
        raise BoardError(f"no cycle model for core '{core}' (models: {', '.join(sorted(MODELS))})")
    return cls()


def has_model(board) -> bool:
    return getattr(board, "core", board) in MODELS


# ---------------------------------------------------------------- flash wait states

def _region(value: int, flash: tuple[int, int]) -> bool:
    return flash[0] <= value < flash[0] + flash[1]


def flash_loads(tr: Trace, flash: tuple[int, int], elf_words) -> dict[int, int]:
    """Per block: how many data words its loads read from flash, judged from
    the registers at block entry (QEMU's `-d cpu`) with the base register
    followed through moves/adds inside the block and literal-pool loads read
    from the ELF. A load whose base cannot be followed counts as RAM."""
    out = {}
    for b, snaps in tr.regs.items():
        votes = []
        for snap in snaps:
            tag = {r: _region(v, flash) for r, v in snap.items()}
            n = 0
            for pc in tr.blocks[b]:
                ins = tr.insns.get(pc)
                if ins is None:
                    continue
                if ins.kind in ("ld", "ldrd", "ldm", "fpld", "fpmulti", "vmem", "pcload") and ins.op not in (
                        "vstrb", "vstrh", "vstrw", "vstrd") and ins.kind != "stm":
                    base = sorted(ins.addr)[0] if ins.addr else None
                    if ins.pc_relative or (base is not None and tag.get(base, False)):
                        words = ins.nregs if ins.kind in ("ldm", "ldrd", "fpmulti") else (
                            4 if ins.kind == "vmem" else 1)
                        n += max(words, 1)
                    for d in ins.dst:
                        if ins.pc_relative and d != base:
                            lit = elf_words(ins.target) if elf_words and ins.target is not None else None
                            tag[d] = lit is not None and _region(lit, flash)
                        elif d not in ins.addr or not ins.writeback:
                            tag[d] = False
                elif ins.kind in DATAPROC:
                    srcs = [r for r in _regs(ins.text.split(" ", 1)[1] if " " in ins.text else "")
                            if r not in ins.dst]
                    flag = any(tag.get(r, False) for r in srcs) and ins.op in ("mov", "add", "sub", "adr", "addw",
                                                                              "subw", "cpy")
                    for d in ins.dst:
                        tag[d] = flag
            votes.append(n)
        out[b] = sorted(votes)[len(votes) // 2] if votes else 0
    return out


# ---------------------------------------------------------------- estimate

@dataclass
class Segment:
    instructions: int = 0
    cycles: int = 0


@dataclass
class Estimate:
    model: str
    wait_states: int
    segments: list[Segment]         # between consecutive marker executions (marker blocks excluded)
    instructions: int               # over the segments
    cycles: int


def estimate(tr: Trace, model, wait_states: int = 0, marker: str | None = None,
             flash: tuple[int, int] | None = None, elf_words=None) -> Estimate:
    """Cycles of every segment between executions of the function `marker`
    (the whole run when None)."""
    insns = tr.insns
    static = [model.block(pcs, insns) for pcs in tr.blocks]
    fl = flash_loads(tr, flash, elf_words) if wait_states and flash else {}
    mark_pc = None
    if marker is not None:
        if marker not in tr.syms:
            raise ToolError(f"marker function '{marker}' not in the firmware's symbols")
        mark_pc = tr.syms[marker][0]
    is_mark = [bool(pcs) and pcs[0] == mark_pc for pcs in tr.blocks]
    segs: list[Segment] = [] if marker is not None else [Segment()]
    cur: Segment | None = segs[0] if marker is None else None
    state: dict = {}
    execs, blocks, partial = tr.execs, tr.blocks, tr.partial
    n = len(execs)
    for i in range(n):
        b = execs[i]
        if is_mark[b]:
            cur = Segment()
            segs.append(cur)
            continue
        if cur is None:
            continue
        pcs = blocks[b]
        if i in partial:
            k = partial[i]
            cur.instructions += k
            cur.cycles += model.block(pcs[:k], insns)
            continue
        cur.instructions += len(pcs)
        c = static[b]
        last = insns.get(pcs[-1]) if pcs else None
        if last is not None:
            nxt = blocks[execs[i + 1]][0] if i + 1 < n and blocks[execs[i + 1]] else None
            c += model.branch(last, nxt, insns, state)
        if fl:
            c += wait_states * fl.get(b, 0)
        cur.cycles += c
    if marker is not None and segs:
        segs.pop()                   # after the last marker: the harness, not the model
    return Estimate(model.name, wait_states, segs, sum(s.instructions for s in segs), sum(s.cycles for s in segs))


def read_words(elf: Path):
    """A function addr -> word (or None) over the ELF's PROGBITS sections,
    parsed with the standard library only."""
    import struct
    data = Path(elf).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 1:
        return lambda a: None
    shoff, = struct.unpack_from("<I", data, 0x20)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x2E)
    spans = []
    for i in range(shnum):
        off = shoff + i * shentsize
        _, stype, flags, addr, offset, size = struct.unpack_from("<IIIIII", data, off)
        if stype == 1 and flags & 2 and size:
            spans.append((addr, offset, size))
    spans.sort()
    starts = [s[0] for s in spans]

    def word(a: int):
        j = bisect.bisect_right(starts, a) - 1
        if j < 0:
            return None
        addr, offset, size = spans[j]
        if a + 4 > addr + size:
            return None
        return struct.unpack_from("<I", data, offset + a - addr)[0]
    return word


def cache_dir() -> Path:
    base = os.environ.get("CUVIL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuvil-mcu")
    return Path(base) / "profiles"
