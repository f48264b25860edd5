"""Per shared int8 model and QEMU board: MACs, instructions per inference,
instructions per MAC, arena, firmware text+rodata, next to TensorFlow Lite
Micro's figures (../shared/models/README.md, CMSIS-NN build, mps2-an386).

    python benchmarks/run.py                       # an386 and an547, all models
    python benchmarks/run.py --boards qemu-mps2-an386,qemu-mps2-an385 --models kws_dscnn,ic_resnet8
    python benchmarks/run.py --markdown            # also the table for docs/benchmarks.md

Method: the bare-metal firmware `cuvil-mcu sim` builds (arm-none-eabi-gcc -O2,
the board's cflags), QEMU -icount shift=0, SysTick read around <prefix>_run:
instructions = ticks x the board's insn_per_tick, within one tick; the
median over the 8 samples of samples_int8.npz. Outputs are checked against
the host reference on every run (a mismatch is marked in the table). text =
code + rodata of the whole firmware (weights included, samples excluded), as
TFLM's text column counts its whole firmware.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import shared_models as sm  # noqa: E402
from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.errors import CuvilError  # noqa: E402
from cuvil_mcu.sim import qemu  # noqa: E402

DEFAULT_BOARDS = ["qemu-mps2-an386", "qemu-mps3-an547"]
PORTABLE_BOARD = "qemu-mps2-an385"   # Cortex-M3: no DSP extension, the portable C kernels
# issue #4: instructions/MAC upper bounds per (model, board)
TARGETS = {("kws_dscnn", "qemu-mps2-an386"): 1.4, ("ic_resnet8", "qemu-mps2-an386"): 1.3,
           ("vww_mobilenet_v1_025", "qemu-mps2-an386"): 1.6, ("ad_fc_autoencoder", "qemu-mps2-an386"): 1.2,
           ("kws_dscnn", "qemu-mps3-an547"): 0.35, ("ic_resnet8", "qemu-mps3-an547"): 0.35}
OVERHEAD_MAX = 12 * 1024   # text+rodata - weights


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def tflm_table() -> dict[str, dict]:
    """model -> {instructions, per_mac, arena, text} from the TFLM table of
    ../shared/models/README.md."""
    out: dict[str, dict] = {}
    text = (sm.SHARED / "README.md").read_text()
    start = text.find("## What TensorFlow Lite Micro needs")
    for line in text[start:].splitlines():
        m = re.match(r"\|\s*(\w+)\s*\|\s*([\d,]+)\s*\|\s*([\d.]+)\s*\|\s*([\d,]+)\s*\|\s*([\d,]+)\s*\|", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = {"instructions": int(_num(m.group(2))), "per_mac": _num(m.group(3)),
                               "arena": int(_num(m.group(4))), "text": int(_num(m.group(5)))}
    return out


def model_param_bytes(name: str) -> int:
    """Bytes of the ONNX file's initializers (weights, biases, scales, zero
    points) as the model stores them: the strict "weights" of the flash budget."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(str(sm.model_path(name)))
    return sum(numpy_helper.to_array(t).nbytes for t in m.graph.initializer)


def measure(name: str, board: str) -> dict:
    c = compile_model(str(sm.model_path(name)), board=board)
    g = c.graph
    x = sm.samples(name)["inputs"]
    x = x.reshape((x.shape[0],) + g.tensors[g.inputs[0]].shape)
    r = qemu.simulate(c, x, board)
    cmp = qemu.compare(r.outputs, qemu.reference_outputs(c, x), g.outputs)
    return {"macs": c.macs, "instructions": r.instructions, "per_mac": r.instructions / c.macs,
            "arena": c.plan.arena_size, "text": r.text, "weights": c.weights_bytes, "exact": cmp.ok,
            "params": model_param_bytes(name), "stack": r.stack,
            "warnings": r.warnings.count("warning:")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--boards", default=",".join(DEFAULT_BOARDS))
    ap.add_argument("--models", default=",".join(sm.NAMES))
    ap.add_argument("--markdown", action="store_true", help="also print the markdown table for docs/benchmarks.md")
    ap.add_argument("--no-portable", action="store_true",
                    help=f"skip the portable-C runs on {PORTABLE_BOARD} (the DSP speed-up column)")
    args = ap.parse_args(argv)
    boards = [b for b in args.boards.split(",") if b]
    names = [n for n in args.models.split(",") if n]
    tflm = tflm_table()
    rows = []
    head = f"{'model':22s} {'board':16s} {'MACs':>11s} {'instr/inf':>12s} {'instr/MAC':>9s} {'arena':>8s} " \
           f"{'text+ro':>8s} {'weights':>8s} | {'TFLM i/MAC':>10s} {'TFLM arena':>10s} {'TFLM text':>9s}"
    print(head)
    print("-" * len(head))
    for name in names:
        t = tflm.get(name, {})
        for board in boards:
            try:
                m = measure(name, board)
            except CuvilError as e:
                first = str(e).splitlines()[0]
                print(f"{name:22s} {board:16s} error: {first[:120]}", flush=True)
                rows.append((name, board, None, t))
                continue
            mark = "" if m["exact"] else "  MISMATCH"
            print(f"{name:22s} {board:16s} {m['macs']:>11,} {m['instructions']:>12,} {m['per_mac']:>9.3f} "
                  f"{m['arena']:>8,} {m['text']:>8,} {m['weights']:>8,} | {t.get('per_mac', float('nan')):>10.2f} "
                  f"{t.get('arena', 0):>10,} {t.get('text', 0):>9,}{mark}", flush=True)
            rows.append((name, board, m, t))
    portable = {}
    if not args.no_portable:
        print()
        print(f"Portable C ({PORTABLE_BOARD}, Cortex-M3) vs the DSP kernels (qemu-mps2-an386):")
        for name in names:
            dsp = next((m for n, b, m, _ in rows if n == name and b == "qemu-mps2-an386" and m), None)
            try:
                pm = measure(name, PORTABLE_BOARD)
            except CuvilError as e:
                print(f"  {name:22s} error: {str(e).splitlines()[0][:120]}")
                continue
            portable[name] = pm
            ratio = f"{pm['instructions'] / dsp['instructions']:.2f}x fewer with DSP" if dsp else ""
            print(f"  {name:22s} portable {pm['per_mac']:.3f} instr/MAC  {ratio}"
                  f"{'' if pm['exact'] else '  MISMATCH'}", flush=True)
    if args.markdown:
        cmd = "python benchmarks/run.py --markdown" + (
            f" --boards {shlex.quote(args.boards)}" if boards != DEFAULT_BOARDS else "") + (
            f" --models {shlex.quote(args.models)}" if names != sm.NAMES else "")
        print()
        print(f"Command: `{cmd}` (QEMU -icount shift=0, SysTick; arm-none-eabi-gcc -O2; median of 8 samples). "
              f"TFLM: CMSIS-NN build on mps2-an386, from ../shared/models/README.md.")
        print()
        print("| model | board | MACs | instructions / inference | instructions / MAC | arena (B) | stack (B) | "
              "text+rodata (B) | constants (B) | ONNX initializers (B) | TFLM instr / MAC | TFLM arena (B) | "
              "TFLM text (B) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, board, m, t in rows:
            tf = (f"{t['per_mac']:.2f} | {t['arena']:,} | {t['text']:,}" if t else "- | - | -")
            if m is None:
                print(f"| {name} | {board} | error | | | | | | | | {tf} |")
                continue
            flag = "" if m["exact"] else " (outputs differ!)"
            print(f"| {name} | {board} | {m['macs']:,} | {m['instructions']:,}{flag} | {m['per_mac']:.3f} | "
                  f"{m['arena']:,} | {m['stack']:,} | {m['text']:,} | {m['weights']:,} | {m['params']:,} | {tf} |")
        if portable:
            print()
            print(f"Portable C kernels ({PORTABLE_BOARD}, Cortex-M3, same models) against the DSP kernels "
                  f"(qemu-mps2-an386):")
            print()
            print("| model | portable instr / MAC | DSP instr / MAC | DSP: times fewer instructions |")
            print("|---|---|---|---|")
            for name, pm in portable.items():
                dsp = next((m for n, b, m, _ in rows if n == name and b == "qemu-mps2-an386" and m), None)
                if dsp:
                    print(f"| {name} | {pm['per_mac']:.3f} | {dsp['per_mac']:.3f} | "
                          f"{pm['instructions'] / dsp['instructions']:.2f} |")
    print()
    print("Issue #4 targets:")
    for name, board, m, _ in rows:
        if m is None:
            continue
        goal = TARGETS.get((name, board))
        over = m["text"] - m["weights"]
        verdict = []
        if goal is not None:
            verdict.append(f"instr/MAC {m['per_mac']:.3f} {'<=' if m['per_mac'] <= goal else '>'} {goal} "
                           f"{'ok' if m['per_mac'] <= goal else 'MISSED'}")
        verdict.append(f"text+rodata - weights {over:,} B {'ok' if over <= OVERHEAD_MAX else 'MISSED (> 12 KB)'}")
        verdict.append(f"(- the ONNX initializers instead: {m['text'] - m['params']:,} B)")
        verdict.append(f"stack {m['stack']:,} B")
        print(f"  {name:22s} {board:16s} " + "; ".join(verdict))
    bad = [r for r in rows if r[2] is None or not r[2]["exact"]] + [p for p in portable.values() if not p["exact"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
