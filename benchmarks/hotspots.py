"""Where one node's estimated cycles go, instruction by instruction.

    python benchmarks/hotspots.py kws_dscnn qemu-mps2-an386 [node] [--top N]
    python benchmarks/hotspots.py examples/mobilenet_v2_035_96_int8.onnx qemu-mps2-an386 5

Runs the profiling build of benchmarks/profile_layers.py (the same trace
and timing model, cuvil_mcu/sim/cycles.py) and prints, for the node given
(default: the one with the most cycles), each executed instruction with its
executions and its share of the node's cycles (the taken-branch refills
charged to the branch), hottest blocks first, in address order inside a
block: the kernel's inner loop and what surrounds it, as the timing model
sees them. A development aid for kernel work; nothing here is asserted.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import shared_models as sm  # noqa: E402
from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.sim import cycles, profile, qemu  # noqa: E402


def compile_any(model: str, board: str):
    if model.endswith(".onnx"):
        c = compile_model(model, board=board, io="int8")
        t = c.graph.tensors[c.graph.inputs[0]]
        x = np.random.RandomState(0).randint(-128, 128, (1,) + t.shape).astype(np.int8)
        return c, x
    c = compile_model(str(sm.model_path(model)), board=board)
    g = c.graph
    x = sm.samples(model)["inputs"][:1]
    return c, x.reshape((1,) + g.tensors[g.inputs[0]].shape)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("board", nargs="?", default="qemu-mps2-an386")
    ap.add_argument("node", nargs="?", type=int, default=None)
    ap.add_argument("--top", type=int, default=6, help="blocks to print")
    args = ap.parse_args(argv)
    c, x = compile_any(args.model, args.board)
    b = qemu.sim_board(args.board)
    header, comments = profile.instrument(c.header, c.prefix)
    elf, _, _ = qemu.build(dataclasses.replace(c, header=header), qemu.as_inputs(c, x), b)
    tr = cycles.trace(b, elf)
    model = cycles.model_for(b)
    mark = tr.syms[profile.marker_name(c.prefix)][0]
    seg, nodes = -1, []
    for i, blk in enumerate(tr.execs):
        pcs = tr.blocks[blk]
        if pcs and pcs[0] == mark:
            seg += 1
            continue
        nodes.append((seg, i))
    per_node = Counter()
    blk_cost = {}
    for seg_i, i in nodes:
        blk = tr.execs[i]
        pcs = tr.blocks[blk]
        if blk not in blk_cost:
            blk_cost[blk] = model.block(pcs, tr.insns)
        nxt = tr.blocks[tr.execs[i + 1]][0] if i + 1 < len(tr.execs) and tr.blocks[tr.execs[i + 1]] else None
        last = tr.insns.get(pcs[-1]) if pcs else None
        br = model.branch(last, nxt, tr.insns, {}) if last is not None else 0
        per_node[seg_i] += blk_cost[blk] + br
    node = args.node if args.node is not None else max(per_node, key=per_node.get)
    execs, refill = Counter(), Counter()
    for seg_i, i in nodes:
        if seg_i != node:
            continue
        blk = tr.execs[i]
        execs[blk] += 1
        pcs = tr.blocks[blk]
        nxt = tr.blocks[tr.execs[i + 1]][0] if i + 1 < len(tr.execs) and tr.blocks[tr.execs[i + 1]] else None
        last = tr.insns.get(pcs[-1])
        if last is not None:
            refill[blk] += model.branch(last, nxt, tr.insns, {})
    total = sum(blk_cost[k] * n + refill[k] for k, n in execs.items())
    instr = sum(len(tr.blocks[k]) * n for k, n in execs.items())
    print(f"node {node}: {comments[node][:100]}")
    print(f"  {instr:,} instructions, {total:,} cycles ({model.name})")
    ranked = sorted(execs, key=lambda k: -(blk_cost[k] * execs[k] + refill[k]))
    for k in ranked[:args.top]:
        n = execs[k]
        cost = blk_cost[k] * n + refill[k]
        pcs = tr.blocks[k]
        print(f"\n-- block 0x{pcs[0]:x}: {n:,} executions, {blk_cost[k]} cycles + refills {refill[k]:,} "
              f"= {cost:,} ({100 * cost / total:.1f} %)")
        prev = None
        for pc in pcs:
            ins = tr.insns.get(pc)
            cyc = model.insn(ins, prev) if ins is not None else 1
            print(f"   {pc:8x}  {cyc:2d}  {ins.text if ins else '?'}")
            prev = ins
    return 0


if __name__ == "__main__":
    sys.exit(main())
