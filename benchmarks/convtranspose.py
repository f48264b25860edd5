"""Instructions per MAC of the int8 ConvTranspose (and the int8 bilinear
Resize) on the emulated cores: the portable per-phase conv kernel (M3), the
DSP kernel (M4), the Helium kernel (M55); and the U-Net of
examples/make_unet.py on the M4 and the M55. Prints, asserts nothing
(speed lives here, not in the tests).

    python benchmarks/convtranspose.py [--boards qemu-mps2-an385,qemu-mps2-an386,qemu-mps3-an547]

Method: each layer alone in a QDQ model (onnx QuantizeLinear/DequantizeLinear
around the float op, compiled to cuvil.QConvTranspose / cuvil.QResize in
NHWC with --requant fixed), the firmware `cuvil-mcu sim` builds
(arm-none-eabi-gcc -O2), QEMU -icount shift=0, SysTick around <prefix>_run:
instructions within one tick. The outputs are checked bit for bit against
the host reference on every run. The layer models take NHWC-transposed
inputs out of the count: the model's I/O is NHWC already (a Transpose
pair around the op is folded away by the layout pass). MACs: the
(input pixel, tap) pairs that land in the output x C x M; the Resize rows
count 4 per output element.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import onnx  # noqa: E402
from onnx import helper  # noqa: E402

from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.sim import qemu  # noqa: E402
from qhelpers import assert_graph_outputs_exact, qmodel  # noqa: E402

BOARDS = ["qemu-mps2-an385", "qemu-mps2-an386", "qemu-mps3-an547"]
# (name, H, W, C, M, kernel, stride, pads, output_padding)
LAYERS = [
    ("k2s2 8x8x32->16", 8, 8, 32, 16, 2, 2, 0, 0),
    ("k2s2 16x16x16->8", 16, 16, 16, 8, 2, 2, 0, 0),
    ("k4s2p1 8x8x16->16", 8, 8, 16, 16, 4, 2, 1, 0),
    ("k3s2p1op1 8x8x24->12", 8, 8, 24, 12, 3, 2, 1, 1),
]


def convt_layer(h, w, c, m, k, s, p, op, seed=0):
    """A QDQ ConvTranspose whose input and output are NHWC (Transposes
    around it, folded into the layout by the compiler)."""
    rng = np.random.RandomState(seed)
    inits = {"w": rng.randint(-127, 128, (c, m, k, k)).astype(np.int8),
             "ws": (rng.rand(m) * 0.01 + 0.002).astype(np.float32), "wz": np.zeros(m, np.int8),
             "b": rng.randint(-500, 500, m).astype(np.int32), "bz": np.zeros(m, np.int32),
             "xs": np.array(0.05, np.float32), "xz": np.array(3, np.int8),
             "ys": np.array(0.5, np.float32), "yz": np.array(-5, np.int8)}
    inits["bs"] = (np.float32(0.05) * inits["ws"]).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
             helper.make_node("DequantizeLinear", ["xt", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=1),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0),
             helper.make_node("ConvTranspose", ["xf", "wf", "bf"], ["yf"], strides=[s, s], pads=[p] * 4,
                              output_padding=[op, op]),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["yq"]),
             helper.make_node("Transpose", ["yq"], ["y"], perm=[0, 2, 3, 1])]
    model = qmodel(nodes, {"x": ((1, h, w, c), "int8")}, {"y": "int8"}, inits)
    return model, {"x": rng.randint(-128, 128, (1, h, w, c)).astype(np.int8)}


def resize_layer(h, w, c, seed=0):
    rng = np.random.RandomState(seed)
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(3, np.int8), "roi": np.zeros(0, np.float32),
             "sc": np.array([1, 1, 2, 2], np.float32)}
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
             helper.make_node("DequantizeLinear", ["xt", "xs", "xz"], ["xf"]),
             helper.make_node("Resize", ["xf", "roi", "sc"], ["yf"], mode="linear"),
             helper.make_node("QuantizeLinear", ["yf", "xs", "xz"], ["yq"]),
             helper.make_node("Transpose", ["yq"], ["y"], perm=[0, 2, 3, 1])]
    return (qmodel(nodes, {"x": ((1, h, w, c), "int8")}, {"y": "int8"}, inits),
            {"x": rng.randint(-128, 128, (1, h, w, c)).astype(np.int8)})


def measure(model, feeds, board: str, requant: str = "fixed"):
    c = compile_model(model, board=board, requant=requant)
    g = c.graph
    r = qemu.simulate(c, [np.asarray(feeds[n])[None] for n in g.inputs])
    assert_graph_outputs_exact(g, [o[0] for o in r.outputs], feeds)
    kernels = sorted({ln.split("(")[0].split("__")[-1] for ln in c.header.splitlines()
                      if "static void" in ln and ("qconv" in ln or "qresize" in ln)})
    return r.instructions_each[0], c.macs, kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", default=",".join(BOARDS))
    args = ap.parse_args()
    boards = args.boards.split(",")
    print(f"{'layer':26s} {'board':16s} {'MACs':>9s} {'instructions':>13s} {'instr/MAC':>9s}  kernel")
    for name, h, w, c, m, k, s, p, op in LAYERS:
        model, feeds = convt_layer(h, w, c, m, k, s, p, op)
        for b in boards:
            n, macs, kern = measure(model, feeds, b)
            print(f"{name:26s} {b:16s} {macs:9,d} {n:13,d} {n / macs:9.2f}  {', '.join(kern)}")
    model, feeds = resize_layer(16, 16, 16)
    for b in boards:
        n, _, kern = measure(model, feeds, b)
        macs = 4 * 32 * 32 * 16
        print(f"{'bilinear x2 16x16x16':26s} {b:16s} {macs:9,d} {n:13,d} {n / macs:9.2f}  {', '.join(kern)}")
    unet = onnx.load(str(ROOT / "examples" / "unet_int8.onnx"))
    x = np.random.RandomState(7).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    for b in ("qemu-mps2-an386", "qemu-mps3-an547"):
        if b not in boards and b not in BOARDS:
            continue
        n, macs, _ = measure(unet, {"image": x}, b)
        print(f"{'U-Net int8 (whole)':26s} {b:16s} {macs:9,d} {n:13,d} {n / macs:9.2f}")


if __name__ == "__main__":
    main()
