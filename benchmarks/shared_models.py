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
    print("| model | MACs | arena (B) | lower bound (B) | TFLM arena (B) | constants (B) | "
          "exact vs TFLM | max diff (LSB) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in sm.NAMES:
        c, _, out, s = sm.run_generated_c(name, requant=args.requant)
        d = np.abs(out.astype(np.int32) - s["expected_tflm"].astype(np.int32))
        print(f"| {name} | {c.macs:,} | {c.plan.arena_size:,} | {c.plan.lower_bound:,} | "
              f"{tflm.get(name, 0):,} | {c.weights_bytes:,} | {int((d == 0).sum())}/{d.size} | {d.max()} |")


if __name__ == "__main__":
    main()
