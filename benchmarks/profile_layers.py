"""Instructions per layer of one shared int8 model on one QEMU board.

    python benchmarks/profile_layers.py kws_dscnn qemu-mps2-an386

Same firmware and method as benchmarks/run.py (QEMU -icount shift=0,
SysTick), with a SysTick read after every node of <prefix>_run: the time
spent printing a row is excluded. Prints one row per node: instructions,
MACs, instructions/MAC, and the node's comment line from model.h (op, name,
fused ops, output shape). A developer tool for finding where the
instructions go; the header it builds is not the one `gen` writes.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import shared_models as sm  # noqa: E402
from cuvil_mcu import ops  # noqa: E402
from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.sim import qemu  # noqa: E402

HOOK = r"""
uint64_t cuvil_ticks(void);
void cuvil_print(const char *s);
static uint64_t cuvil__prof_last;
static void cuvil__prof(unsigned layer)
{
    static const char hex[] = "0123456789abcdef";
    char line[24];
    uint64_t now = cuvil_ticks();
    uint32_t d = (uint32_t)(now - cuvil__prof_last);
    int i;
    line[0] = 'P'; line[1] = ' ';
    for (i = 0; i < 4; ++i) line[2 + i] = hex[(layer >> (4 * (3 - i))) & 15u];
    line[6] = ' ';
    for (i = 0; i < 8; ++i) line[7 + i] = hex[(d >> (4 * (7 - i))) & 15u];
    line[15] = '\n'; line[16] = 0;
    if (layer != 0xffffu) cuvil_print(line);
    cuvil__prof_last = cuvil_ticks();
}
"""


def instrument(header: str, prefix: str) -> tuple[str, list[str]]:
    """Insert a profiling call before each node comment of <prefix>_run and
    one at its end; return the header and the node comments."""
    lines = header.split("\n")
    start = next(i for i, ln in enumerate(lines) if re.match(rf"\w+ int {prefix}_run\(void \*arena\)", ln.strip())
                 or ln.strip().endswith(f"int {prefix}_run(void *arena)"))
    out, comments, n = lines[:start], [], 0
    for ln in lines[start:]:
        m = re.match(r"\s*/\* (\d+): (.*) \*/$", ln)
        if m:
            out.append(f"    cuvil__prof({'0xffffu' if n == 0 else f'{n - 1}u'});")
            comments.append(m.group(2))
            n += 1
        if ln.strip() == f"return {prefix.upper()}_OK;" and n:
            out.append(f"    cuvil__prof({n - 1}u);")
            n = -10**9
        out.append(ln)
    text = "\n".join(out)
    text = text.replace("/* ---- kernels ---- */", HOOK + "\n/* ---- kernels ---- */", 1)
    return text, comments


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name, board = (argv + ["kws_dscnn", "qemu-mps2-an386"][len(argv):])[:2]
    c = compile_model(str(sm.model_path(name)), board=board)
    c.header, comments = instrument(c.header, c.prefix)
    g = c.graph
    x = sm.samples(name)["inputs"][:1]
    x = x.reshape((1,) + g.tensors[g.inputs[0]].shape)
    r = qemu.simulate(c, x, board)
    ipt = float(r.insn_per_tick)
    rows = [(int(m.group(1), 16), int(m.group(2), 16)) for m in re.finditer(r"^P ([0-9a-f]{4}) ([0-9a-f]{8})$",
                                                                            r.log, re.M)]
    total = 0
    print(f"{'#':>3} {'instr':>10} {'MACs':>10} {'i/MAC':>6}  node")
    for i, ticks in rows:
        n = g.nodes[i]
        ins = [g.tensors[t] if t else None for t in n.inputs]
        outs = [g.tensors[t] for t in n.outputs if t]
        macs = ops.get(n.op_type).macs(n, ins, outs)
        instr = ticks * ipt
        total += instr
        per = f"{instr / macs:6.2f}" if macs else "     -"
        print(f"{i:3d} {instr:10,.0f} {macs:10,} {per}  {comments[i][:90]}")
    print(f"    {total:10,.0f} {c.macs:10,} {total / c.macs:6.3f}  total (hooks excluded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
