"""ShuffleNet (v1, 4 groups: examples/shufflenet_g4_int8.onnx, made by
examples/make_shufflenet.py) on the QEMU boards: MACs, instructions per
inference and per MAC, arena, text+rodata, outputs against the host
reference; --layers adds the per-node profile of one board (issue #13 item
3: grouped convolutions and the channel-shuffle fold; goal <= 2.0
instructions/MAC on the Cortex-M4).

    python benchmarks/shufflenet.py                                   # an386 (M4) and an547 (M55)
    python benchmarks/shufflenet.py --boards qemu-mps2-an385,qemu-mps2-an386 --layers qemu-mps2-an386

Method: as benchmarks/run.py (the bare-metal firmware of `cuvil-mcu sim`,
arm-none-eabi-gcc -O2, QEMU -icount shift=0, SysTick around <prefix>_run),
one seeded random image (uniform in [-1, 1]); the node counts say what runs
(Transposes left, grouped-conv kernels chosen). The model's 1 MB of
constants do not fit the AN547's 512 KB ITCM (the FLASH region of
boards/qemu-mps3-an547.toml): for the M55 this script puts them in RAM
(MODEL_WEIGHTS_ATTR: the section QEMU loads the test inputs into) and lets
the budget count 2 MB of flash; QEMU counts instructions the same wherever
the constants sit.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]
from cuvil_mcu import boards  # noqa: E402
from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.sim import profile, qemu  # noqa: E402

MODEL = ROOT / "examples" / "shufflenet_g4_int8.onnx"
GOALS = {"qemu-mps2-an386": 2.0}
BIG_FLASH = {"qemu-mps3-an547": dict(flash=2 * 1024 * 1024)}
WEIGHTS_IN_RAM = ['-DMODEL_WEIGHTS_ATTR=__attribute__((section(".cuvil_samples"),aligned(16)))']


def _boards_with_room(real=boards.all_boards):
    """The boards, with BIG_FLASH's FLASH regions for this benchmark."""
    import dataclasses
    return {k: dataclasses.replace(b, **BIG_FLASH.get(k, {})) for k, b in real().items()}


def image(c) -> np.ndarray:
    t = c.graph.tensors[c.graph.inputs[0]]
    return np.random.RandomState(0).uniform(-1, 1, (1,) + t.shape).astype(np.float32)


def kernel_calls(header: str, prefix: str) -> Counter:
    """Kernel calls of the run function by template (the line after each
    node's comment: <prefix>__<template>[_variant](...))."""
    calls = re.findall(r"^\s*/\* \d+: .*\*/\n\s*" + prefix + r"__([a-z0-9]+(?:_[a-z0-9]+)*?)(?:_(?:s8|fast|fixed|mid|"
                       r"fastu|u8|i8)\w*)?\(", header, re.M)
    return Counter(calls)


def kind(g, n) -> str:
    """A node's family for the profile summary (convolutions by groups)."""
    if n.op_type != "QLinearConv":
        return n.op_type
    groups, c = int(n.attrs.get("group", 1)), g.tensors[n.inputs[0]].shape[-1]
    k = "x".join(str(d) for d in g.tensors[n.inputs[3]].shape[2:])
    if groups == 1:
        return f"QLinearConv {k}"
    return f"QLinearConv {k} depthwise" if groups == c else f"QLinearConv {k}, {groups} groups" + (
        ", shuffle folded" if n.attrs.get("_ochan") is not None else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--boards", default="qemu-mps2-an386,qemu-mps3-an547")
    ap.add_argument("--layers", default="", help="a board to profile node by node")
    ap.add_argument("--model", default=str(MODEL))
    args = ap.parse_args(argv)
    boards.all_boards = _boards_with_room
    build = qemu.build

    def build_with_room(compiled, inputs, board, opt=qemu.firmware.OPT, extra_cflags=()):
        extra = list(extra_cflags) + (WEIGHTS_IN_RAM if board.id in BIG_FLASH else [])
        return build(compiled, inputs, board, opt, extra)
    qemu.build = build_with_room   # (the profiling build of sim/profile.py too)
    bad = 0
    print(f"{'board':18s} {'MACs':>12s} {'instructions':>13s} {'instr/MAC':>9s} {'arena':>9s} {'text+ro':>9s} "
          f"{'Transposes':>10s}  outputs")
    for board in [b for b in args.boards.split(",") if b]:
        c = compile_model(args.model, board=board)
        x = image(c)
        r = qemu.simulate(c, x, board, timeout=1200)
        cmp = qemu.compare(r.outputs, qemu.reference_outputs(c, x), c.graph.outputs)
        per = r.instructions / c.macs
        ops = Counter(n.op_type for n in c.graph.nodes)
        goal = GOALS.get(board)
        verdict = "" if goal is None else f"  goal <= {goal}: {'ok' if per <= goal else 'MISSED'}"
        print(f"{board:18s} {c.macs:>12,} {r.instructions:>13,} {per:>9.3f} {c.plan.arena_size:>9,} {r.text:>9,} "
              f"{ops['Transpose']:>10}  {'exact' if cmp.ok else 'MISMATCH'}{verdict}", flush=True)
        calls = kernel_calls(c.header, c.prefix)
        print(f"{'':18s} kernels: " + ", ".join(f"{k} x{v}" for k, v in sorted(calls.items())), flush=True)
        bad += not cmp.ok
    if args.layers:
        c = compile_model(args.model, board=args.layers)
        _, comments = profile.instrument(c.header, c.prefix)
        p = profile.run(c, image(c), args.layers, timeout=1200)
        print(f"\n{'#':>3} {'instr':>11} {'MACs':>11} {'i/MAC':>6} {'%':>5}  node ({args.layers})")
        for layer in p.layers:
            per = f"{layer.instructions / layer.macs:6.2f}" if layer.macs else "     -"
            share = 100 * layer.instructions / p.instructions if p.instructions else 0
            print(f"{layer.index:3d} {layer.instructions:11,} {layer.macs:11,} {per} {share:5.1f}  "
                  f"{comments[layer.index][:90]}")
        print(f"    {p.instructions:11,} {c.macs:11,} {p.instructions / c.macs:6.3f}        total")
        kinds: dict = {}
        for layer in p.layers:
            k = kinds.setdefault(kind(c.graph, c.graph.nodes[layer.index]), [0, 0, 0])
            k[0] += 1
            k[1] += layer.instructions
            k[2] += layer.macs
        print(f"\n{'kind':34s} {'nodes':>5} {'instr':>12} {'%':>5} {'MACs':>12} {'i/MAC':>6}")
        for name, (n, ins, macs) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
            per = f"{ins / macs:6.2f}" if macs else "     -"
            print(f"{name:34s} {n:5d} {ins:12,} {100 * ins / p.instructions:5.1f} {macs:12,} {per}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
