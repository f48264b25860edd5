"""The cycle model (cuvil_mcu/sim/cycles.py) on hand-counted microbenchmarks.

Each benchmark is a straight piece of Thumb-2 assembly between two calls of
a marker function, run on QEMU's mps2-an386 (Cortex-M4) under the execution
trace. The expected cycle counts are derived by hand from the Cortex-M4 TRM
(Arm DDI 0439, table 3-1 and 3.3.2 "Load/store timing"; the FPU table of
chapter 7), instruction by instruction, in the comments: they are not
produced by the model. Every segment ends with the `bl` to the marker:
1 + P with P = 2 (a 16-bit target), 3 cycles.

The model must be within 5% of each hand count; being exact on these
isolated cases is what the TRM's rules promise, so the test asks for that
too where no rule is approximate.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cuvil_mcu import boards
from cuvil_mcu.codegen import env
from cuvil_mcu.sim import cycles, firmware


def need_tool(name: str) -> None:
    import shutil
    if shutil.which(name) is None:
        pytest.skip(f"{name} not installed (make setup installs it)")

BL = 3   # the closing `bl bench_mark`: 1 + P, target `bx lr` is 16-bit

# (name, assembly, hand-derived cycles including the closing bl)
M4_BENCHES = [
    ("empty", "", BL),
    # 8 x 16-bit ALU: 1 each
    ("alu x8", "adds r1, r1, #1\n" * 8, 8 + BL),
    # four loads, addresses independent of the loaded values: 2 + 1 + 1 + 1 (3.3.2: pipelined, N + 1)
    ("ldr x4 pipelined", "ldr r1, [r0]\nldr r2, [r0, #4]\nldr r3, [r0, #8]\nldr r4, [r0, #12]\n", 5 + BL),
    # pointer chase (buf[0] = &buf): each address is the previous load's result, no pipelining: 2 + 2 + 2
    ("ldr chase", "ldr r1, [r0]\nldr r2, [r1]\nldr r3, [r2]\n", 6 + BL),
    # address from the preceding data-processing result: 1 + (2 + 1 stall), twice
    ("alu->address", "adds r1, r0, #4\nldr r2, [r1]\nadds r3, r0, #8\nldr r4, [r3]\n", 8 + BL),
    # STR [Rn,#imm] 1; LDR after a store not pipelined 2; STR imm 1; STR [Rn,Rm] after a store 2
    ("str/ldr mix", "str r1, [r0, #16]\nldr r2, [r0, #20]\nstr r2, [r0, #24]\nstr r3, [r0, r5]\n", 6 + BL),
    # LDR 2; STR [Rn,Rm] pipelined after the LDR 1
    ("ldr;str reg", "ldr r1, [r0]\nstr r1, [r0, r5]\n", 3 + BL),
    # LDM / STM of 4 registers: 1 + N each
    ("ldm/stm x4", "ldm r0, {r1, r2, r3, r4}\nstm r0, {r1, r2, r3, r4}\n", 10 + BL),
    # LDRD 3 (1 + N), STRD 3, LDR after LDRD not pipelined 2
    ("ldrd/strd", "ldrd r1, r2, [r0]\nstrd r1, r2, [r0, #8]\nldr r3, [r0, #16]\n", 8 + BL),
    # SMLAD inner step, post-indexed loads: (2 + 1 pipelined + 1 SMLAD) x 2
    ("smlad x2", "ldr r1, [r0], #4\nldr r2, [r0], #4\nsmlad r3, r1, r2, r3\n"
                 "ldr r1, [r0], #4\nldr r2, [r0], #4\nsmlad r3, r1, r2, r3\nsub r0, r0, #16\n", 8 + 1 + BL),
    # counted loop: MOVS 1; 5 x SUBS 1; 4 x taken BNE 1 + P (target 16-bit, P = 2); last BNE not taken 1
    ("loop x5", "movs r1, #5\n1: subs r1, #1\nbne 1b\n", 1 + 5 + 4 * 3 + 1 + BL),
    # branch to a 32-bit instruction at a halfword address: 1 + P with P = 3; ADD.W 1
    ("b unaligned", "b 2f\n.p2align 2\nnop\n2: add.w r1, r1, #1\n", 4 + 1 + BL),
    # IT folded onto the preceding 16-bit CMP: 1 + 0 + 1 + 1
    ("it block", "cmp r1, #0\nite eq\nmoveq r2, #1\nmovne r2, #2\n", 3 + BL),
    # call a leaf: BL 1 + P (3); PUSH {r4, lr} 1 + N (3); POP {r4, pc} 1 + N + P(load to PC: 3) (6)
    ("call/push/pop", "bl bench_leaf\n", 3 + 3 + 6 + BL),
    # VLDR 2, VLDR 2, VMLA.F32 3, VADD.F32 1, VDIV.F32 14
    ("fpu", "vldr s0, [r0]\nvldr s1, [r0, #4]\nvmla.f32 s2, s0, s1\nvadd.f32 s3, s2, s2\nvdiv.f32 s4, s3, s1\n",
     22 + BL),
    # VLDM of 4 single registers: 1 + N
    ("vldm x4", "vldm r0, {s0-s3}\n", 5 + BL),
]


def bench_source(benches, entry: str = "bench_all") -> str:
    body = []
    for name, asm, _ in benches:
        body.append(f"    @ {name}\n" + "".join(f"    {ln}\n" if not ln.endswith(":") else f"{ln}\n"
                                                 for ln in asm.splitlines()) + "    bl bench_mark\n")
    return (".syntax unified\n.thumb\n.text\n"
            ".global bench_mark\n.type bench_mark, %function\n.p2align 2\nbench_mark:\n    bx lr\n"
            ".type bench_leaf, %function\n.p2align 2\nbench_leaf:\n    push {r4, lr}\n    pop {r4, pc}\n"
            f".global {entry}\n.type {entry}, %function\n.p2align 2\n{entry}:\n"
            "    push {r4, r5, r6, r7, lr}\n    ldr r0, =bench_buf\n    str r0, [r0]\n    movs r5, #28\n"
            "    movs r1, #0\n    bl bench_mark\n" + "".join(body) +
            "    pop {r4, r5, r6, r7, pc}\n.ltorg\n"
            ".bss\n.p2align 4\n.global bench_buf\nbench_buf:\n    .space 256\n")


MAIN = r"""
#include "cuvil_io.h"
void bench_all(void);
int main(void)
{
    bench_all();
    cuvil_print("CUVIL DONE\n");
    return 0;
}
"""


def build_bench(tmp: Path, board_id: str, asm: str) -> Path:
    b = boards.get(board_id)
    mm = firmware.memory_map(b)
    ex = firmware.example_dir()
    (tmp / "bench.S").write_text(asm)
    (tmp / "main.c").write_text(MAIN)
    for f in ("startup.c", "cuvil_io.h"):
        (tmp / f).write_text((ex / f).read_text())
    (tmp / "linker.ld").write_text(env().get_template("firmware/linker.ld.j2").render(
        board_name=b.name, board_id=b.id, flash_base=mm.flash_base, flash_len=mm.flash_len, ram_base=mm.ram_base,
        ram_len=mm.ram_len, stack_reserve=b.stack_reserve, samples_in_ram=True, boot2=None))
    cflags, ldflags = firmware.build_flags(b, "semihosting")
    cmd = ["arm-none-eabi-gcc", *b.cflags, *cflags, "main.c", "startup.c", "bench.S", *b.cflags, *ldflags,
           "-o", "bench.elf"]
    r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return tmp / "bench.elf"


def run_benches(tmp_path, board_id, benches, model):
    need_tool("arm-none-eabi-gcc")
    need_tool("qemu-system-arm")
    elf = build_bench(tmp_path, board_id, bench_source(benches))
    tr = cycles.trace(boards.get(board_id), elf)
    est = cycles.estimate(tr, model, marker="bench_mark")
    assert len(est.segments) == len(benches), (len(est.segments), len(benches))
    return est


def test_m4_microbenchmarks_match_hand_counts(tmp_path):
    est = run_benches(tmp_path, "qemu-mps2-an386", M4_BENCHES, cycles.M4Timing())
    rows, bad = [], []
    for (name, _, want), seg in zip(M4_BENCHES, est.segments):
        rows.append(f"{name:18s} hand {want:3d}  model {seg.cycles:3d}")
        if abs(seg.cycles - want) > 0.05 * want or seg.cycles != want:
            bad.append(rows[-1])
    assert not bad, "model vs hand-derived TRM cycles:\n" + "\n".join(rows)


def test_instruction_counts_of_segments(tmp_path):
    """The trace's instruction count per segment is the assembly's (a check
    of the trace parsing, independent of any timing rule)."""
    benches = [("alu x8", "adds r1, r1, #1\n" * 8, 0),
               ("loop x5", "movs r1, #5\n1: subs r1, #1\nbne 1b\n", 0)]
    est = run_benches(tmp_path, "qemu-mps2-an386", benches, cycles.M4Timing())
    # 8 adds + bl; movs + 5 x (subs, bne) + bl
    assert [s.instructions for s in est.segments] == [9, 12]


WAIT_BENCHES = [
    # LDR literal 2 (flash), LDR [r1] 2 (address = the loaded value: not pipelined; r1 points into flash),
    # LDR [r0] 1 (pipelined; RAM)
    ("flash loads", "ldr r1, =bench_const\nldr r2, [r1]\nldr r3, [r0]\n", 5 + BL),
]


def test_flash_wait_states_on_constant_loads(tmp_path):
    """With N wait states, each word loaded from flash costs N more: here two of the three loads."""
    need_tool("arm-none-eabi-gcc")
    need_tool("qemu-system-arm")
    b = boards.get("qemu-mps2-an386")
    src = bench_source(WAIT_BENCHES).replace(".bss\n", ".section .rodata\n.p2align 2\nbench_const:\n    .word 7\n.bss\n")
    elf = build_bench(tmp_path, b.id, src)
    tr = cycles.trace(b, elf, want_regs=True)
    mm = firmware.memory_map(b)
    kw = dict(marker="bench_mark", flash=(mm.flash_base, mm.flash_len), elf_words=cycles.read_words(elf))
    base = cycles.estimate(tr, cycles.M4Timing(), 0, **kw).segments[0].cycles
    slow = cycles.estimate(tr, cycles.M4Timing(), 3, **kw).segments[0].cycles
    assert (base, slow) == (5 + BL, 5 + BL + 2 * 3)


# Helium on the M55 model: the documented dual-beat rules, counted by hand
M55_BENCHES = [
    ("empty", "", BL),
    # VLDRB 2; VMLADAVA after a vector load overlaps: 1; VLDRB after the overlapped pair: 2; VMLADAVA 1
    ("vld/vmladava x2", "vldrb.s8 q0, [r0]\nvmladava.s8 r2, q0, q0\nvldrb.s8 q1, [r0, #16]\n"
                        "vmladava.s8 r2, q1, q1\n", 6 + BL),
    # two vector loads back to back: no overlap between instructions of the same kind: 2 + 2
    ("vld x2", "vldrb.s8 q0, [r0]\nvldrb.s8 q1, [r0, #16]\n", 4 + BL),
    # low-overhead loop of 3: MOVS 1; DLS 1; 3 x VADD.I8 2 (alone in its loop body);
    # LE: first taken 1 + P (P = 2, 32-bit VADD at a word address), second free (0), last not taken 1
    ("dls/le x3", "movs r1, #3\ndls lr, r1\n.p2align 2\n3: vadd.i8 q0, q0, q0\nle lr, 3b\n",
     1 + 1 + 3 * 2 + 3 + 0 + 1 + BL),
]


def test_m55_model_rules_on_helium_microbenchmarks(tmp_path):
    est = run_benches(tmp_path, "qemu-mps3-an547", M55_BENCHES, cycles.M55Timing())
    rows = [f"{name:18s} hand {want:3d}  model {seg.cycles:3d}" for (name, _, want), seg in
            zip(M55_BENCHES, est.segments)]
    assert [s.cycles for s in est.segments] == [w for _, _, w in M55_BENCHES], "\n".join(rows)


def test_decode_classifies_thumb2_forms():
    d = cycles.decode
    assert d(0, 4, "ldr.w", "r5, [r0], #4").kind == "ld"
    assert d(0, 4, "ldr.w", "r5, [r0], #4").loaded == frozenset({"r5"})
    assert d(0, 2, "ldr", "r2, [pc, #96]\t@ (19d0 <x>)").pc_relative
    assert d(0, 4, "ldmia.w", "sp!, {r4, r5, r6, r7, r8, pc}").kind == "ldmpc"
    assert d(0, 4, "ldmia.w", "sp!, {r4, r5, r6, r7, r8, pc}").nregs == 6
    assert d(0, 2, "bne.n", "1990 <Reset_Handler+0x40>").target == 0x1990
    assert d(0, 2, "bne.n", "1990 <Reset_Handler+0x40>").cond == "ne"
    assert d(0, 4, "addne.w", "fp, r8, lr").op == "add"
    assert d(0, 2, "ite", "ne").kind == "it"
    assert d(0, 4, "smlad", "r3, fp, r5, r3").kind == "mul"
    assert d(0, 4, "vpush", "{d8-d9}").nregs == 4
    assert d(0, 4, "vldrb.s8", "q0, [r0], #16").kind == "vmem"
    assert d(0, 4, "vmladava.s8", "r2, q0, q1").kind == "vmac"
    assert d(0, 2, "teq", "r1, r2").op == "teq"
    assert d(0, 2, "bls.n", "10 <x>").op == "b"
