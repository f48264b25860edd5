"""Per shared model: MACs, arena (RAM) next to the planner's lower bound and
TFLM's arena, constants (flash), and agreement with TFLM's outputs.

    python benchmarks/shared_models.py [--requant fixed|float]

Instruction counts on emulated Cortex-M cores come with the simulator
(issue #4); this prints what the compiler alone decides.
"""
import argparse
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import shared_models as sm  # noqa: E402
from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.sim import host  # noqa: E402


def tflm_arenas() -> dict[str, int]:
    """The arena column of ../shared/models/README.md's TFLM table."""
    out = {}
    for line in (sm.SHARED / "README.md").read_text().splitlines():
        m = re.match(r"\|\s*(\w+)\s*\|\s*[\d,]+\s*\|\s*[\d.]+\s*\|\s*([\d,]+)\s*\|", line)
        if m:
            out.setdefault(m.group(1), int(m.group(2).replace(",", "")))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requant", default="fixed", choices=("fixed", "float"))
    args = ap.parse_args()
    tflm = tflm_arenas()
    print(f"| model | MACs | arena (B) | lower bound (B) | TFLM arena (B) | constants (B) | "
          f"exact vs TFLM | max diff (LSB) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in sm.NAMES:
        c = compile_model(str(sm.model_path(name)), requant=args.requant)
        g = c.graph
        s = sm.samples(name)
        x = s["inputs"]
        inp = x.reshape((x.shape[0],) + g.tensors[g.inputs[0]].shape)
        exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                         [g.tensors[n].nbytes for n in g.outputs])
        out = host.run(exe, [inp], c.out_specs, x.shape[0])[0].reshape(s["expected_tflm"].shape)
        d = np.abs(out.astype(np.int32) - s["expected_tflm"].astype(np.int32))
        print(f"| {name} | {c.macs:,} | {c.plan.arena_size:,} | {c.plan.lower_bound:,} | "
              f"{tflm.get(name, 0):,} | {c.weights_bytes:,} | {int((d == 0).sum())}/{d.size} | {d.max()} |")


if __name__ == "__main__":
    main()
