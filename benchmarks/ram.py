"""RAM per shared int8 model (and the MobileNetV2-0.35 96x96 QDQ example) on
QEMU boards: arena + the stack the model itself uses, as `sim` measures it,
next to the header's bound, the planner's lower bounds, TFLM's arena, the
issue #12 goals, the instructions/MAC before and after, and what
patch-based execution did (tiled regions, the arena without them, the MACs
it added).

    python benchmarks/ram.py                                  # an386 and an547
    python benchmarks/ram.py --boards qemu-mps2-an386 --models kws_dscnn --markdown
    python benchmarks/ram.py --no-patch                       # whole layers (gen --no-patch)

Method: the firmware `cuvil-mcu sim` builds (arm-none-eabi-gcc -O2), QEMU
-icount shift=0; stack = the painted stack's high-water mark minus the same
harness's with a model without kernels (a float Relu on 4 values: the
harness's own frames), measured here per board. Outputs are checked against
the reference on every run. "before" = the figures of docs/benchmarks.md
before issue #12 (arena at the no-reuse lower bound, DSP kernels' buffers on
the stack).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks"), str(ROOT)]
import shared_models as sm  # noqa: E402
from run import tflm_table  # noqa: E402
from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.sim import qemu  # noqa: E402

MOBILENET = "mobilenet_v2_035_96"
MOBILENET_PATH = ROOT / "examples" / "mobilenet_v2_035_96_int8.onnx"
DEFAULT_BOARDS = ["qemu-mps2-an386", "qemu-mps3-an547"]
NAMES = [n for n in sm.NAMES if n != "hello_world"] + [MOBILENET]
# issue #12: RAM goals (arena + kernel stack, bytes)
GOALS = {"kws_dscnn": 9000, "ic_resnet8": 36000, "vww_mobilenet_v1_025": 40000, "person_detect": 30000,
         "ad_fc_autoencoder": 1000, "micro_speech": 4500, MOBILENET: 64000}
# before issue #12 (docs/benchmarks.md): (arena, stack high-water incl. the harness, instructions/MAC)
BEFORE = {
    ("ad_fc_autoencoder", "qemu-mps2-an386"): (768, 4544, 1.044),
    ("ad_fc_autoencoder", "qemu-mps3-an547"): (768, 468, 0.215),
    ("micro_speech", "qemu-mps2-an386"): (5968, 4620, 1.621),
    ("micro_speech", "qemu-mps3-an547"): (5968, 604, 0.501),
    ("kws_dscnn", "qemu-mps2-an386"): (16000, 4604, 1.236),
    ("kws_dscnn", "qemu-mps3-an547"): (16000, 2072, 0.284),
    ("ic_resnet8", "qemu-mps2-an386"): (49152, 4644, 1.085),
    ("ic_resnet8", "qemu-mps3-an547"): (49152, 1688, 0.226),
    ("vww_mobilenet_v1_025", "qemu-mps2-an386"): (55296, 4704, 1.387),
    ("vww_mobilenet_v1_025", "qemu-mps3-an547"): (55296, 4804, 0.340),
    ("person_detect", "qemu-mps2-an386"): (55296, 4704, 1.410),
    ("person_detect", "qemu-mps3-an547"): (55296, 4812, 0.350),
}


def harness_stack(board: str) -> int:
    return qemu.harness_stack(board)


def inputs(name: str, c):
    t = c.graph.tensors[c.graph.inputs[0]]
    if name == MOBILENET:
        return np.random.RandomState(0).randint(-128, 128, (4,) + t.shape).astype(np.int8)
    x = sm.samples(name)["inputs"]
    return x.reshape((x.shape[0],) + t.shape)


def measure(name: str, board: str, base: int, patch: bool = True) -> dict:
    if name == MOBILENET:
        c = compile_model(str(MOBILENET_PATH), board=board, io="int8", patch=patch)
    else:
        c = compile_model(str(sm.model_path(name)), board=board, patch=patch)
    x = inputs(name, c)
    r = qemu.simulate(c, x, board)
    cmp = qemu.compare(r.outputs, qemu.reference_outputs(c, x), c.graph.outputs)
    p = c.plan
    return {"arena": p.arena_size, "bound": p.lower_bound, "no_alias": p.no_alias_bound or p.lower_bound,
            "stack": r.stack - base, "stack_bound": c.stack_bound, "per_mac": r.instructions / c.macs,
            "exact": cmp.ok, "aliases": len(p.aliases), "scratch": max(p.scratch_size.values(), default=0),
            "patches": getattr(c.graph, "patches", None)}


def patch_text(m: dict) -> str:
    """What patch-based execution did: regions, the arena without them, extra MACs."""
    t = m["patches"]
    if not t or not t["regions"]:
        return "-"
    return (f"{len(t['regions'])} region(s), untiled {t['arena_before']:,}, {t['extra_macs']:+,} MACs "
            f"({t['extra_macs'] / max(t['macs'], 1):+.1%})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--boards", default=",".join(DEFAULT_BOARDS))
    ap.add_argument("--models", default=",".join(NAMES))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--no-patch", dest="patch", action="store_false", help="whole layers (gen --no-patch)")
    args = ap.parse_args(argv)
    tflm = tflm_table()
    rows, bad = [], 0
    for board in [b for b in args.boards.split(",") if b]:
        base = harness_stack(board)
        print(f"{board}: the harness alone uses {base} B of stack", flush=True)
        for name in [n for n in args.models.split(",") if n]:
            m = measure(name, board, base, args.patch)
            bad += not m["exact"]
            b = BEFORE.get((name, board))
            before = f"{b[0] + b[1] - base:,} ({b[0]:,} + {b[1] - base:,}), {b[2]:.3f} i/MAC" if b else "-"
            ram = m["arena"] + m["stack"]
            goal = GOALS.get(name)
            print(f"  {name:22s} RAM {ram:>7,} = arena {m['arena']:>7,} + stack {m['stack']:>4} (bound "
                  f"{m['stack_bound']}); lower bound {m['bound']:,} ({m['no_alias']:,} without in-place); "
                  f"{m['per_mac']:.3f} i/MAC; goal {goal:,} {'ok' if goal and ram <= goal else 'MISSED'}; "
                  f"before {before}; patches: {patch_text(m)}{'' if m['exact'] else '  MISMATCH'}", flush=True)
            rows.append((name, board, m, b, base))
    if args.markdown:
        print()
        print("| model | board | RAM now (B) = arena + stack | lower bound (without in-place) | stack bound | "
              "RAM before (arena + stack) | TFLM arena | goal | instr/MAC now | before | patches |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for name, board, m, b, base in rows:
            t = tflm.get(name, {}).get("arena")
            goal = GOALS.get(name)
            ram = m["arena"] + m["stack"]
            before = f"{b[0] + b[1] - base:,} ({b[0]:,} + {b[1] - base:,})" if b else "-"
            print(f"| {name} | {board} | {ram:,} = {m['arena']:,} + {m['stack']} | {m['bound']:,} ({m['no_alias']:,}) "
                  f"| {m['stack_bound']} | {before} | {f'{t:,}' if t else '-'} | {goal:,}"
                  f"{'' if ram <= goal else ' (missed)'} | {m['per_mac']:.3f} | {f'{b[2]:.3f}' if b else '-'} "
                  f"| {patch_text(m)} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
