"""Instructions and estimated cycles per node of one shared int8 model on one QEMU board.

    python benchmarks/profile_layers.py kws_dscnn qemu-mps2-an386 [wait_states]
    python benchmarks/profile_layers.py examples/mobilenet_v2_035_96_int8.onnx qemu-mps2-an386

(an .onnx path: a QDQ model compiled with --io int8, profiled on a fixed
random int8 input, seed 0)

The profiling build of cuvil_mcu/sim/profile.py (a marker call between the
nodes of <prefix>_run) runs once under QEMU's execution trace; the trace
gives each node's exact instruction count and the core's timing model
(cuvil_mcu/sim/cycles.py, docs/cycles.md) its estimated cycles. Prints one
row per node: instructions, cycles, MACs, cycles/MAC, share of the cycles and
the node's comment line from model.h (op, name, fused ops, output shape). The
same table is in `cuvil-mcu report`.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
sys.path.insert(0, str(ROOT / "benchmarks"))
import hotspots  # noqa: E402
from cuvil_mcu.sim import profile  # noqa: E402


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name, board, ws = (argv + ["kws_dscnn", "qemu-mps2-an386", "0"][len(argv):])[:3]
    c, x = hotspots.compile_any(name, board)
    _, comments = profile.instrument(c.header, c.prefix)
    p = profile.run(c, x, board, wait_states=int(ws))
    print(f"{'#':>3} {'instr':>10} {'cycles':>10} {'MACs':>10} {'cyc/MAC':>7} {'%':>5}  node")
    for layer in p.layers:
        per = f"{layer.cycles / layer.macs:7.2f}" if layer.macs else "      -"
        share = 100 * layer.cycles / p.cycles if p.cycles else 0
        print(f"{layer.index:3d} {layer.instructions:10,} {layer.cycles:10,} {layer.macs:10,} {per} {share:5.1f}  "
              f"{comments[layer.index][:80]}")
    print(f"    {p.instructions:10,} {p.cycles:10,} {c.macs:10,} {p.per_mac or 0:7.3f}        total ({p.model}, "
          f"{p.wait_states} wait states; SysTick of the same run: {p.systick_instructions:,} instructions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
