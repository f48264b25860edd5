"""--requant float stays bit-exact under the compiler flags firmware projects
really use.

The test suite builds with -std=c99 (an ISO mode: gcc does not contract
there), but firmware projects compile in GNU modes (gcc's default gnu17,
MicroPython's unix port -std=gnu99, Arduino / PlatformIO gnu11 / gnu++17),
where gcc's default is -ffp-contract=fast: a * b + c becomes one fused
multiply-add wherever the FPU has one, across statements. clang contracts
within an expression by default and, under -ffp-contract=fast, ignores the
FP_CONTRACT pragma. The float-requant int8 kernels promise onnxruntime's
float32 roundings bit for bit, so each of them is built here under such
flags on cores with a fused multiply-add (AArch64 under qemu-user, the
Cortex-M4F under QEMU, the x86-64 host with FMA3) and compared with the
numpy reference element by element. A probe first checks that each
toolchain and flag set does fuse a * b + c, so a pass means the kernels
hold up under contraction, not that nothing was contracted.
benchmarks/fp_contract.py runs the whole matrix (every int8 layer family,
the shared models, armv7 and the Cortex-M55 too, -O3, LTO).
"""
from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import compose, helper

from cuvil_mcu import boards, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import host, qemu_user
from helpers import host_has_fma
from qhelpers import assert_exact

# the int8 layer families of test_layers_on_boards with a float-requant path
# (conv: requant_float; add: fmaf; mul: product then zero point; avg_pool and
# softmax: float sums; upsample: ConvTranspose and the bilinear Resize)
FAMILIES = ("conv", "gemm", "add", "mul", "avg_pool", "softmax", "upsample")

# a * b + c with a = b = 1 + 2^-12, c = -(1 + 2^-11): the rounded product
# plus c is 0, the fused multiply-add gives 2^-24
PROBE = """\
#include <stdio.h>
static float madd(float a, float b, float c) { return a * b + c; }
int main(void)
{
    volatile float a = 1.0f + 0x1p-12f, c = -(1.0f + 0x1p-11f);
    printf("%a\\n", (double)madd(a, a, c));
    return 0;
}
"""


def cross_ready(board_id: str, cc: str | None = None) -> str:
    """Why the board's qemu-user build cannot run here ('' when it can)."""
    b = boards.get(board_id)
    cc = cc or b.sim["cc"]
    if shutil.which(cc) and shutil.which(b.sim["qemu"]) and Path(b.sim["sysroot"]).is_dir():
        return ""
    return (f"{board_id}: {cc}, {b.sim['qemu']} or {b.sim['sysroot']} missing "
            f"(apt-get install {b.sim['cc_package']} {b.sim['qemu_package']})")


def _cross(board_id: str, cc: str | None = None):
    why = cross_ready(board_id, cc)
    return pytest.mark.skipif(bool(why), reason=why)


A53 = "cortex-a53-aarch64"
GNU_FAST = ["-std=gnu99", "-O3", "-ffp-contract=fast"]
# (board, compiler (None: the board's), flags after the board's): each fuses a * b + c
TARGETS = [
    pytest.param(A53, None, ["-std=gnu99"], id="aarch64-gcc-gnu99", marks=_cross(A53)),
    pytest.param(A53, "clang", ["--target=aarch64-linux-gnu", *GNU_FAST], id="aarch64-clang-fast",
                 marks=_cross(A53, "clang")),
    pytest.param("host", "gcc", [*GNU_FAST, "-march=haswell"], id="x86_64-gcc-fast",
                 marks=pytest.mark.skipif(not host_has_fma(), reason="the host CPU has no FMA3")),
    pytest.param("host", "clang", [*GNU_FAST, "-march=haswell"], id="x86_64-clang-fast",
                 marks=pytest.mark.skipif(not host_has_fma() or not shutil.which("clang"),
                                          reason="the host CPU has no FMA3, or clang is absent")),
]


def merge(parts) -> tuple:
    """parts: (prefix, onnx model, feeds) triples -> one model holding every
    part's graph with names prefixed, and the prefixed feeds (one build per
    toolchain instead of one per part)."""
    models, feeds, opsets = [], {}, {}
    for prefix, m, f in parts:
        models.append(compose.add_prefix(m, prefix))
        feeds.update({prefix + k: v for k, v in f.items()})
        for o in m.opset_import:
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
    g = helper.make_graph([n for m in models for n in m.graph.node], "merged",
                          [i for m in models for i in m.graph.input], [o for m in models for o in m.graph.output],
                          [t for m in models for t in m.graph.initializer])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())])
    m.ir_version = min(m.ir_version, 9)
    return m, feeds


def layer_parts(families=FAMILIES) -> list:
    """(prefix, model, feeds) of test_layers_on_boards' int8 layer families."""
    import test_layers_on_boards as lob
    out = []
    for fam in families:
        built = lob.FAMILIES[fam]()
        m, f = built if isinstance(built, tuple) else (built, None)
        out.append((f"{fam}_", m, f if f is not None else lob._feeds(m, seed=len(fam))))
    return out


@functools.lru_cache(maxsize=None)
def compiled(board_id: str):
    m, feeds = merge(layer_parts())
    return compile_model(m, board=board_id, requant="float"), feeds


def build_run(c, xs: list, cc: str | None, flags: list[str]) -> list[np.ndarray]:
    """Compiled model c built by cc (None: its board's cross compiler) with
    the board's cflags (qemu-user boards) then flags, run on xs (per input,
    (samples, *shape)) natively or under qemu-user."""
    g = c.graph
    b = c.board
    runner = qemu_user.command(b) if qemu_user.is_qemu_user(b) else None
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs],
                     cc=cc or b.sim["cc"], cflags=[*(b.cflags if runner else []), *flags])
    return host.run(exe, xs, c.out_specs, xs[0].shape[0], runner=runner)


def fuses(board_id: str, cc: str | None, flags: list[str], tmp: Path) -> bool:
    """Does cc with the board's cflags and flags fuse a * b + c (run on the target)?"""
    b = boards.get(board_id)
    runner = qemu_user.command(b) if qemu_user.is_qemu_user(b) else []
    (tmp / "probe.c").write_text(PROBE)
    subprocess.run([cc or b.sim["cc"], *(b.cflags if runner else []), *flags, "probe.c", "-o", "probe"],
                   cwd=tmp, check=True, capture_output=True)
    out = subprocess.run([*runner, "./probe"], cwd=tmp, check=True, capture_output=True, text=True).stdout.strip()
    assert out in ("0x0p+0", "0x1p-24"), out
    return out == "0x1p-24"


def m_fuses(board_id: str, flags: list[str], tmp: Path) -> bool:
    """Does arm-none-eabi-gcc with the Cortex-M board's cflags and flags emit
    a fused multiply-add (VFMA) for a * b + c?"""
    (tmp / "probe.c").write_text(PROBE)
    asm = subprocess.run(["arm-none-eabi-gcc", *boards.get(board_id).cflags, "-O2", *flags, "-S", "-o", "-",
                          "probe.c"], cwd=tmp, check=True, capture_output=True, text=True).stdout
    return "vfma.f32" in asm


@pytest.mark.parametrize("board_id,cc,flags", TARGETS)
def test_float_requant_exact_under_contraction(board_id, cc, flags, tmp_path):
    assert fuses(board_id, cc, flags, tmp_path), \
        f"{cc or board_id} {' '.join(flags)} does not fuse a * b + c: this case would test nothing"
    c, feeds = compiled(board_id)
    ref = reference.run(c.graph, feeds)
    outs = build_run(c, [np.asarray(feeds[n], c.graph.tensors[n].dtype)[None] for n in c.graph.inputs], cc, flags)
    for name, o in zip(c.graph.outputs, outs):
        assert_exact(o[0], ref[name], f"{cc or board_id} {' '.join(flags)}: output {name} vs reference")


M4 = "qemu-mps2-an386"


@pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                    reason="needs apt packages gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm")
def test_float_requant_exact_on_cortex_m4_gnu99(tmp_path):
    """The Cortex-M4F (FPv4: VFMA.F32) firmware built with -std=gnu99 (gcc's
    -ffp-contract=fast) instead of the harness's -std=c99, under QEMU."""
    from cuvil_mcu.sim import qemu
    assert m_fuses(M4, ["-std=gnu99"], tmp_path), "-std=gnu99 does not fuse a * b + c on the M4F: this tests nothing"
    c, feeds = compiled(M4)
    r = qemu.simulate(c, {n: np.asarray(feeds[n])[None] for n in c.graph.inputs}, extra_cflags=["-std=gnu99"])
    ref = reference.run(c.graph, feeds)
    for name, o in zip(c.graph.outputs, r.outputs):
        assert_exact(o[0], ref[name], f"{M4} -std=gnu99: output {name} vs reference")
