"""--precision fp16 against float32: flash (the `flash` line of gen), accuracy
on the demo model and the shared float models (8 samples each, the host
build: fp16 weights, float32 arithmetic), and cost on cores with fp16
arithmetic: instructions per inference on QEMU mps3-an547 (Cortex-M55;
native fp16 and, with <P>_FP16_PORTABLE, float32 arithmetic on the same
half weights) and the error of native fp16 on a Cortex-A76 (qemu-user).

    python benchmarks/fp16.py [--no-sim]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.sim import host, qemu, qemu_user  # noqa: E402

SHARED = ROOT.parent / "shared" / "models"


def models():
    x = np.load(ROOT / "examples" / "kws_input.npy")
    yield "examples/kws_float", ROOT / "examples" / "kws_float.onnx", x
    for m in ("kws_dscnn", "ic_resnet8", "vww_mobilenet_v1_025", "ad_fc_autoencoder"):
        p = SHARED / m / "model_f32.onnx"
        if p.exists():
            s = np.load(SHARED / m / "samples_f32.npz")["inputs"].astype(np.float32)
            yield m, p, s


def host_run(c, x):
    g = c.graph
    x = x.reshape((x.shape[0],) + g.tensors[g.inputs[0]].shape)
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    return host.run(exe, [x], c.out_specs, x.shape[0])[0], x


def main(sim: bool = True):
    print(f"{'model':22s} {'flash f32':>10s} {'flash f16':>10s} {'ratio':>6s} {'max|d| vs f32':>14s} "
          f"{'rel':>8s} {'top-1 same':>10s}")
    for name, path, x in models():
        c32 = compile_model(str(path), input_shapes=None)
        c16 = compile_model(str(path), precision="fp16")
        y32, xs = host_run(c32, x)
        y16, _ = host_run(c16, x)
        d = float(np.abs(y16 - y32).max())
        rel = d / max(float(np.abs(y32).max()), 1e-30)
        top = "-" if y32.reshape(len(x), -1).shape[1] < 2 else \
            f"{int((y32.reshape(len(x), -1).argmax(1) == y16.reshape(len(x), -1).argmax(1)).sum())}/{len(x)}"
        print(f"{name:22s} {c32.weights_bytes:10,d} {c16.weights_bytes:10,d} {c16.weights_bytes / c32.weights_bytes:6.3f} "
              f"{d:14.3g} {rel:8.2g} {top:>10s}")
    if not sim:
        return
    path, x = ROOT / "examples" / "kws_float.onnx", np.load(ROOT / "examples" / "kws_input.npy")
    print("\nCortex-M55 (QEMU mps3-an547), examples/kws_float.onnx, instructions per inference:")
    for label, prec, extra in (("float32", None, ()), ("fp16 weights, native fp16 arithmetic", "fp16", ()),
                               ("fp16 weights, float32 arithmetic", "fp16", ("-DMODEL_FP16_PORTABLE",))):
        c = compile_model(str(path), board="qemu-mps3-an547", precision=prec)
        r = qemu.simulate(c, [x], c.board, extra_cflags=extra)
        ref = qemu.reference_outputs(c, [x])[0]
        print(f"  {label:40s} {r.instructions:12,d}  ({r.per_mac:.2f}/MAC)  max|d| vs reference "
              f"{float(np.abs(r.outputs[0] - ref).max()):.3g}")
    print("\nCortex-A76 (qemu-user, native fp16) vs Cortex-A53 (no fp16 arithmetic: float32), same header:")
    for board in ("cortex-a53-aarch64", "cortex-a76-aarch64"):
        c = compile_model(str(path), board=board, precision="fp16")
        ref = qemu.reference_outputs(c, [x])[0]
        t = time.monotonic()
        y = qemu_user.compile_and_run(c, [x])[0]
        print(f"  {board:22s} max|d| vs reference {float(np.abs(y - ref).max()):.3g}   "
              f"(wall {time.monotonic() - t:.2f} s incl. build; qemu-user time is not core speed)")


if __name__ == "__main__":
    main(sim="--no-sim" not in sys.argv)
