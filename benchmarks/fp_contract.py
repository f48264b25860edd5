"""--requant float bit-exactness under the compiler flags firmware projects
use (GNU modes, whose gcc default is -ffp-contract=fast; -O3; clang with
-ffp-contract=fast; LTO), on cores with a fused multiply-add: the x86-64
host with FMA3, AArch64 (qemu-aarch64 -cpu cortex-a53), armv7 with
neon-vfpv4 (qemu-arm -cpu cortex-a7) and the Cortex-M4F / M55 QEMU boards.

Models, each compiled with --requant float for the board (its kernels:
portable C, NEON, DSP, Helium): every int8 layer family of
tests/test_layers_on_boards.py in one graph; the seven shared models of
../shared/models (8 samples) in one graph; examples/unet_int8.onnx; the
integer recurrent layers under --quantize int8. Every output element is
compared with the numpy reference. Per target a probe says whether the
flags fuse a * b + c there (a case that does not fuse tests little). Last,
the header's model_input_0_quantize / model_output_0_dequantize helpers
(shared kws_dscnn) over ties, ranges, NaN and every code.

    python benchmarks/fp_contract.py [--only SUBSTRING]

Prints one line per (target, flags, model); exit status 1 if any differs.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from cuvil_mcu import boards, reference  # noqa: E402
from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.sim import host, qemu, qemu_user  # noqa: E402
from helpers import host_has_fma  # noqa: E402
from test_fp_contract import build_run, cross_ready, fuses, layer_parts, m_fuses, merge  # noqa: E402

A53, A7, M4, M55 = "cortex-a53-aarch64", "cortex-a7-neon", "qemu-mps2-an386", "qemu-mps3-an547"
GNU99 = ["-std=gnu99", "-O2"]
FAST = ["-std=gnu11", "-O3", "-ffp-contract=fast"]
HSW = ["-march=haswell"]
# (label, board, compiler or None (the board's), flags)
TARGETS = [
    ("x86-64 gcc", "host", "gcc", [*GNU99, *HSW]),
    ("x86-64 gcc", "host", "gcc", [*FAST, *HSW]),
    ("x86-64 gcc", "host", "gcc", [*GNU99, *HSW, "-flto"]),
    ("x86-64 clang", "host", "clang", ["-std=gnu11", "-O0", *HSW]),
    ("x86-64 clang", "host", "clang", ["-std=gnu11", "-O2", *HSW]),
    ("x86-64 clang", "host", "clang", [*FAST, *HSW]),
    ("aarch64 gcc", A53, None, GNU99),
    ("aarch64 gcc", A53, None, FAST),
    ("aarch64 gcc", A53, None, [*GNU99, "-flto"]),
    ("aarch64 gcc", A53, None, ["-std=gnu99", "-Os"]),
    ("aarch64 clang", A53, "clang", ["--target=aarch64-linux-gnu", "-std=gnu11", "-O2"]),
    ("aarch64 clang", A53, "clang", ["--target=aarch64-linux-gnu", *FAST]),
    ("armv7 gcc", A7, None, GNU99),
    ("armv7 gcc", A7, None, FAST),
    ("armv7 clang", A7, "clang", ["--target=arm-linux-gnueabihf", *FAST]),
    ("M4F gcc", M4, "arm-none-eabi-gcc", GNU99),
    ("M4F gcc", M4, "arm-none-eabi-gcc", FAST),
    ("M4F gcc", M4, "arm-none-eabi-gcc", ["-std=gnu99", "-Os"]),
    ("M55 gcc", M55, "arm-none-eabi-gcc", GNU99),
    ("M55 gcc", M55, "arm-none-eabi-gcc", FAST),
]


def shared_groups(limit: int = 400_000):
    """The shared models as (prefix, model, feeds) parts, packed into groups
    of at most `limit` bytes of ONNX file (about the weights: a group fits
    the M55's 512 KB code memory)."""
    import shared_models as sm
    if not sm.available():
        return []
    groups, size = [], []
    for part, n in sorted(((part, sm.model_path(part[0][:-1]).stat().st_size) for part in shared_parts()),
                          key=lambda t: -t[1]):
        i = next((i for i, s in enumerate(size) if s + n <= limit), len(groups))
        if i == len(groups):
            groups.append([])
            size.append(0)
        groups[i].append(part)
        size[i] += n
    return groups


def shared_parts():
    import shared_models as sm
    out = []
    for name in sm.NAMES:
        m = __import__("onnx").load(str(sm.model_path(name)))
        x = sm.samples(name)["inputs"]
        inp = m.graph.input[0]
        shape = tuple(d.dim_value or 1 for d in inp.type.tensor_type.shape.dim)
        out.append((f"{name}_", m, {inp.name: x.reshape((x.shape[0],) + shape)}))
    return out


def models():
    """name -> (onnx model or path, feeds with a samples axis, compile kwargs)."""
    lm, lf = merge(layer_parts(tuple(sorted(__import__("test_layers_on_boards").FAMILIES))))
    yield "int8 layers", lm, {k: np.asarray(v)[None] for k, v in lf.items()}, {}
    for i, group in enumerate(shared_groups()):
        sm_, sf = merge(group)
        yield f"shared {i + 1}", sm_, sf, {}
    import onnx
    um = onnx.load(str(ROOT / "examples" / "unet_int8.onnx"))
    inp = um.graph.input[0]
    shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
    yield "unet_int8", um, {inp.name: np.random.RandomState(0).rand(2, *shape).astype(np.float32)}, {}
    from test_rnn import merge as rnn_merge, rnn_model
    parts = [rnn_model(op, T=9, I=6, H=8, outputs=("Y", "Y_h"), wscale=0.4, rscale=0.3, **kw)
             for op, kw in (("LSTM", {"direction": "bidirectional", "clip": 0.8, "seq": [9, 4]}),
                            ("GRU", {"linear_before_reset": 1}), ("RNN", {"layout": 1}))]
    rm, rf = rnn_merge(parts)
    calib = {k: np.random.RandomState(1).randn(16, *v.shape).astype(np.float32) for k, v in rf.items()}
    yield "int8 recurrent", rm, {k: np.asarray(v)[None] for k, v in rf.items()}, \
        {"quantize": "int8", "calibration": calib}


def run_target(c, xs, board_id, cc, flags):
    b = boards.get(board_id)
    if b.sim.get("qemu_machine"):
        opt = next(f for f in flags if f.startswith("-O"))
        r = qemu.simulate(c, xs, opt=opt, extra_cflags=[f for f in flags if f != opt])
        return r.outputs
    return build_run(c, xs, cc, flags)


def ready(board_id, cc) -> str:
    b = boards.get(board_id)
    if board_id == "host":
        return "" if host_has_fma() and shutil.which(cc) else "no FMA3 on this CPU or no compiler"
    if b.sim.get("qemu_machine"):
        return "" if shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm") else "no arm-none-eabi-gcc / qemu"
    return cross_ready(board_id, cc)


def target_fuses(board_id, cc, flags, tmp: Path) -> bool:
    if boards.get(board_id).sim.get("qemu_machine"):
        return m_fuses(board_id, flags, tmp)
    return fuses(board_id, cc, flags, tmp)


HELPERS_C = """\
#include <stdio.h>
#include "model.h"
int main(int argc, char **argv)
{
    float v;
    int q;
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (f == NULL) return 1;
    while (fread(&v, 4, 1, f) == 1) printf("%d\\n", (int)model_input_0_quantize(v));
    for (q = -128; q < 128; ++q) printf("%a\\n", (double)model_output_0_dequantize((int8_t)q));
    return 0;
}
"""


def check_helpers(board_id, cc, flags, tmp: Path) -> str:
    """The public quantize / dequantize helpers vs numpy (QuantizeLinear:
    float32 division, half to even, saturate; DequantizeLinear)."""
    import shared_models as sm
    import subprocess
    if not sm.available():
        return "skipped (no shared models)"
    c = compile_model(str(sm.model_path("kws_dscnn")))
    g = c.graph
    ti, to = g.tensors[g.inputs[0]], g.tensors[g.outputs[0]]
    if ti.quant is None or to.quant is None or ti.dtype != "int8" or to.dtype != "int8":
        return "skipped (kws_dscnn's I/O is not int8)"
    si, zi = np.float32(ti.quant.scale[0]), int(ti.quant.zero_point[0])
    so, zo = np.float32(to.quant.scale[0]), int(to.quant.zero_point[0])
    reals = np.concatenate([np.arange(-300, 301, dtype=np.float32) * np.float32(0.5) * si,
                            np.float32([1e30, -1e30, np.inf, -np.inf, np.nan, 0.0, -0.0]),
                            np.random.default_rng(1).standard_normal(4000).astype(np.float32) * si * 100]
                           ).astype(np.float32)
    (tmp / "model.h").write_text(c.header)
    (tmp / "h.c").write_text(HELPERS_C)
    (tmp / "in.bin").write_bytes(reals.tobytes())
    b = boards.get(board_id)
    runner = qemu_user.command(b) if qemu_user.is_qemu_user(b) else []
    subprocess.run([cc or b.sim["cc"], *(b.cflags if runner else []), *flags, "-Wall", "-Wextra", "-Werror",
                    "-pedantic", "h.c", "-o", "h"], cwd=tmp, check=True, capture_output=True)
    out = subprocess.run([*runner, "./h", "in.bin"], cwd=tmp, check=True, capture_output=True, text=True).stdout.split()
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.where(np.isnan(reals), np.float32(0), np.clip(reals / si, -65536, 65536))
    want_q = np.clip(np.rint(v) + zi, -128, 127).astype(np.int64)
    got_q = np.array(out[:reals.size], np.int64)
    codes = np.arange(-128, 128)
    want_d = ((codes - zo).astype(np.float32) * so).astype(np.float32)
    got_d = np.array([float.fromhex(s) for s in out[reals.size:]], np.float32)
    bad = int((got_q != want_q).sum()) + int((got_d != want_d).sum())
    return "exact" if bad == 0 else f"{bad} differ"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="run only targets whose label contains this")
    a = ap.parse_args(argv)
    mods = list(models())
    failed = 0
    print(f"{'target':14s} {'flags':52s} {'fuses':5s} {'model':15s} result")
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for label, board_id, cc, flags in TARGETS:
            if a.only not in label:
                continue
            why = ready(board_id, cc)
            if why:
                print(f"{label:14s} {' '.join(flags):52s} {'-':5s} {'-':15s} skipped: {why}")
                continue
            fz = "yes" if target_fuses(board_id, cc, flags, tmp) else "no"
            for name, m, feeds, kw in mods:
                t0 = time.time()
                c = compile_model(m, board=board_id, requant="float", **kw)
                g = c.graph
                xs = [np.asarray(feeds[n], g.tensors[n].dtype) for n in g.inputs]
                outs = run_target(c, xs, board_id, cc, flags)
                bad = total = 0
                for s in range(xs[0].shape[0]):
                    ref = reference.run(g, {n: x[s] for n, x in zip(g.inputs, xs)})
                    for name_o, o in zip(g.outputs, outs):
                        bad += int((o[s] != ref[name_o]).sum())
                        total += o[s].size
                res = "exact" if bad == 0 else f"{bad} of {total} elements differ"
                failed += bad != 0
                print(f"{label:14s} {' '.join(flags):52s} {fz:5s} {name:15s} {res} ({total} elements, "
                      f"{time.time() - t0:.0f} s)", flush=True)
            if not boards.get(board_id).sim.get("qemu_machine"):
                res = check_helpers(board_id, cc, flags, tmp)
                failed += res.endswith("differ")
                print(f"{label:14s} {' '.join(flags):52s} {fz:5s} {'I/O helpers':15s} {res}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
