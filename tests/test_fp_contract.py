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
"""
from __future__ import annotations

import functools
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import compose, helper

from cuvil_mcu import boards, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import host, qemu_user
from qhelpers import assert_exact

# the int8 layer families of test_layers_on_boards with a float-requant path
# (conv: requant_float; add: fmaf; mul: product then zero point; avg_pool and
# softmax: float sums; upsample: ConvTranspose and the bilinear Resize)
FAMILIES = ("conv", "gemm", "add", "mul", "avg_pool", "softmax", "upsample")

# a * b + c with a = 1 + 2^-12, c = -(1 + 2^-11): rounded product + c is 0,
# the fused multiply-add gives 2^-24
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


def host_has_fma() -> bool:
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return " fma " in f" {Path('/proc/cpuinfo').read_text().replace(chr(10), ' ')} "
    except OSError:
        return False


def _cross(board_id: str, cc: str | None = None):
    b = boards.get(board_id)
    cc = cc or b.sim["cc"]
    ok = shutil.which(cc) and shutil.which(b.sim["qemu"]) and Path(b.sim["sysroot"]).is_dir()
    return pytest.mark.skipif(not ok, reason=f"{board_id}: {cc}, {b.sim['qemu']} or its sysroot not installed "
                                             f"(apt-get install {b.sim['cc_package']} {b.sim['qemu_package']})")


A53 = "cortex-a53-aarch64"
GNU_FAST = ["-std=gnu99", "-O3", "-ffp-contract=fast"]
# (id, board, compiler, flags after the board's): each is a compiler and flag set that fuses
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


def merged_model():
    """One model holding every layer of FAMILIES (names prefixed by the
    family) and their feeds: one build per toolchain instead of seven."""
    import test_layers_on_boards as lob
    models, feeds, opsets = [], {}, {}
    for fam in FAMILIES:
        built = lob.FAMILIES[fam]()
        m, f = built if isinstance(built, tuple) else (built, None)
        f = f if f is not None else lob._feeds(m, seed=len(fam))
        models.append(compose.add_prefix(m, f"{fam}_"))
        feeds.update({f"{fam}_{k}": v for k, v in f.items()})
        for o in m.opset_import:
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
    g = helper.make_graph([n for m in models for n in m.graph.node], "fp_contract",
                          [i for m in models for i in m.graph.input], [o for m in models for o in m.graph.output],
                          [t for m in models for t in m.graph.initializer])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())])
    m.ir_version = models[0].ir_version
    return m, feeds


@functools.lru_cache(maxsize=None)
def compiled(board_id: str):
    m, feeds = merged_model()
    return compile_model(m, board=board_id, requant="float"), feeds


def _build_run(c, feeds, cc, flags):
    g = c.graph
    ins = [np.asarray(feeds[n], dtype=g.tensors[n].dtype)[None] for n in g.inputs]
    b = c.board
    runner = qemu_user.command(b) if qemu_user.is_qemu_user(b) else None
    exe = host.build(c.header, c.prefix, [t.nbytes for t in map(g.tensors.get, g.inputs)],
                     [t.nbytes for t in map(g.tensors.get, g.outputs)],
                     cc=cc or b.sim["cc"], cflags=[*(b.cflags if runner else []), *flags])
    return [o[0] for o in host.run(exe, ins, c.out_specs, 1, runner=runner)]


def _fuses(board_id, cc, flags, tmp_path) -> bool:
    b = boards.get(board_id)
    runner = qemu_user.command(b) if qemu_user.is_qemu_user(b) else []
    (tmp_path / "probe.c").write_text(PROBE)
    subprocess.run([cc or b.sim["cc"], *(b.cflags if runner else []), *flags, "probe.c", "-o", "probe"],
                   cwd=tmp_path, check=True, capture_output=True)
    out = subprocess.run([*runner, "./probe"], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert out.strip() in ("0x0p+0", "0x1p-24"), out
    return out.strip() == "0x1p-24"


@pytest.mark.parametrize("board_id,cc,flags", TARGETS)
def test_float_requant_exact_under_contraction(board_id, cc, flags, tmp_path):
    assert _fuses(board_id, cc, flags, tmp_path), \
        f"{cc or board_id} {' '.join(flags)} does not fuse a * b + c: this case would test nothing"
    c, feeds = compiled(board_id)
    ref = reference.run(c.graph, feeds)
    for name, o in zip(c.graph.outputs, _build_run(c, feeds, cc, flags)):
        assert_exact(o, ref[name], f"{cc or board_id} {' '.join(flags)}: output {name} vs reference")


M4 = "qemu-mps2-an386"


@pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                    reason="needs apt packages gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm")
def test_float_requant_exact_on_cortex_m4_gnu99(tmp_path):
    """The Cortex-M4F (FPv4: VFMA.F32) firmware built with -std=gnu99 (gcc's
    -ffp-contract=fast) instead of the harness's -std=c99, under QEMU."""
    from cuvil_mcu.sim import qemu
    (tmp_path / "probe.c").write_text(PROBE)
    asm = subprocess.run(["arm-none-eabi-gcc", *boards.get(M4).cflags, "-std=gnu99", "-O2", "-S", "-o", "-",
                          "probe.c"], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert "vfma.f32" in asm, f"-std=gnu99 does not fuse a * b + c on the M4F: this case would test nothing\n{asm}"
    c, feeds = compiled(M4)
    r = qemu.simulate(c, {n: np.asarray(feeds[n])[None] for n in c.graph.inputs}, extra_cflags=["-std=gnu99"])
    ref = reference.run(c.graph, feeds)
    for name, o in zip(c.graph.outputs, r.outputs):
        assert_exact(o[0], ref[name], f"{M4} -std=gnu99: output {name} vs reference")
