"""Helium pointwise kernels (cuvil_mcu/isa/mve.py): qpw_mve (_emit_pw) on random
1x1 layers with K = 1..16 input channels on QEMU mps3-an547,
bit-exact with the numpy reference, for each of its requantization forms
(int8's own clamp with the rounding fix-up, a Relu without it, a clamp of
the VPT/VDUP kind with and without it), at -O2 (inline asm) and -O0 (the
intrinsics path); the same header on the host (plain C path, sanitizers).

Needs arm-none-eabi-gcc and qemu-system-arm (skipped otherwise)."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import qemu
from helpers import STRICT_WARNINGS, run_strict_builds
from qhelpers import clamped_exact, rerender
from test_qconv import _layer, qmodel

BOARD = "qemu-mps3-an547"
HAVE_TOOLS = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None
needs_qemu = pytest.mark.skipif(not HAVE_TOOLS, reason="arm-none-eabi-gcc / qemu-system-arm not installed")

# x shape (NCHW), output channels: K from 1 to 16, one pixel, the post-increment
# store (M <= 127) and the ADDW one (M = 132); the last two are not the kernel's
# (M % 4 != 0; stride 2) and go to qdot_mve
LAYERS = [((1, 8, 5, 7), 48), ((1, 16, 4, 3), 8), ((1, 3, 6, 5), 12), ((1, 13, 3, 3), 20),
          ((1, 1, 2, 9), 4), ((1, 11, 1, 1), 16), ((1, 5, 3, 4), 132), ((1, 7, 4, 4), 6),
          ((1, 9, 5, 5), 8, dict(strides=[2, 2]))]
MINE = 7


def pw_model(seed: int):
    rng = np.random.RandomState(seed)
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (xs, m, *attrs) in enumerate(LAYERS):
        n, ini, x = _layer(rng, i, xs, (m, xs[1], 1, 1), attrs[0] if attrs else {}, i % 3 != 1, i % 4 != 3, "int8")
        nodes.append(n)
        inits.update(ini)
        inputs[f"x{i}"], outputs[f"y{i}"], feeds[f"x{i}"] = (xs, "int8"), "int8", x
    return qmodel(nodes, inputs, outputs, inits), feeds


def _run(c, feeds, opt=None):
    g = c.graph
    xs = [np.asarray(feeds[n], g.tensors[n].dtype)[None] for n in g.inputs]
    r = qemu.simulate(c, xs, **({"opt": opt} if opt else {}))
    return clamped_exact(g, [o[0] for o in r.outputs], feeds)


@needs_qemu
@pytest.mark.parametrize("act", [None, (0.0, float("inf")), (-0.3, 0.4)], ids=["int8", "relu", "clip"])
def test_pointwise_small_k_exact(act):
    model, feeds = pw_model(11)
    c = compile_model(model, board=BOARD)
    if act is not None:
        c = rerender(c, lambda n: act)
    calls = re.findall(r"__qpw_mve_s8_[0-9a-f]{8}\(\(int8_t \*\)", c.header)
    assert len(calls) == MINE, calls
    assert c.header.count("__qdot_mve_s8_") >= 2     # the layers it declines
    assert _run(c, feeds) > 20                       # the clamps bite
    if act == (-0.3, 0.4):
        assert _run(c, feeds, opt="-O0") > 20        # -O0: the intrinsics path


def test_pointwise_host_fallback():
    """The an547 headers on the host: the plain C paths of qpw_mve and
    copy_scatter_mve, with sanitizers."""
    model, feeds = pw_model(12)
    c = rerender(compile_model(model, board=BOARD), lambda n: (-0.2, 0.5))
    assert "__qpw_mve_s8_" in c.header
    builds = [("gcc", ["-std=c99", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"])]
    assert not run_strict_builds(c, feeds, exact=True, builds=builds)
    model, feeds = pairs_model(22)
    c = rerender(compile_model(model, board=BOARD), lambda n: (-0.2, 0.5))
    assert "__qdotp_mve_s8_" in c.header
    assert not run_strict_builds(c, feeds, exact=True, builds=builds)
    model, feeds = transpose_model()
    c = compile_model(model, board=BOARD)
    assert "__copy_scatter_mve_" in c.header
    assert not run_strict_builds(c, feeds, exact=True, builds=builds)


@pytest.mark.skipif(shutil.which("clang") is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="clang / arm-none-eabi-gcc not installed")
def test_pointwise_builds_for_m55(tmp_path):
    """Every variant of qpw_mve and qdotp_mve compiles for the M55 with gcc and clang, -pedantic
    -Werror, optimized and not (clang's assembler: VSTRB.32 takes a low base
    register only)."""
    for model, act in [(m(13)[0], a) for m in (pw_model, pairs_model)
                       for a in (None, (0.0, float("inf")), (-0.3, 0.4))]:
        c = compile_model(model, board=BOARD)
        c = rerender(c, lambda n: act) if act else c
        (tmp_path / "model.h").write_text(c.header)
        (tmp_path / "t.c").write_text("#define MODEL_IMPLEMENTATION\n#include \"model.h\"\n"
                                      "int use(void *a) { return model_run(a); }\n")
        # (gcc -O2 builds in the QEMU runs above; -O0 leaves the asm out)
        for cc, level in (("clang", "-O2"), ("clang", "-O0"), ("arm-none-eabi-gcc", "-O0")):
            extra = ["--target=arm-none-eabi", "-isystem", "/usr/lib/arm-none-eabi/include"] if cc == "clang" else []
            if level == "-O0" and act != (-0.3, 0.4):
                continue
            if True:
                r = subprocess.run([cc, *extra, "-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", *STRICT_WARNINGS,
                                    level, "-std=c99", "-c", "t.c", "-o", "t.o"],
                                   cwd=tmp_path, capture_output=True, text=True)
                assert r.returncode == 0, f"{cc} {level} act {act}: {r.stderr[-3000:]}"


# qdotp_mve: (x shape, output channels); K from 17 to 143 with and without a
# tail chunk, odd and even pixel counts, M above 127; then a chain whose second
# layer reads an intermediate tensor with K = 144 and 200 (word-aligned pixels:
# VLDRW at offsets up to 508)
PAIRS = [((1, 32, 3, 5), 8), ((1, 24, 4, 4), 132), ((1, 17, 3, 3), 12), ((1, 40, 5, 1), 4),
         ((1, 143, 2, 2), 16), ((1, 56, 1, 2), 20)]
CHAIN = [(144, 8), (200, 12)]     # (channels of the middle tensor, output channels)


def pairs_model(seed: int):
    rng = np.random.RandomState(seed)
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (xs, m) in enumerate(PAIRS):
        n, ini, x = _layer(rng, i, xs, (m, xs[1], 1, 1), {}, i % 3 != 1, i % 4 != 3, "int8")
        nodes.append(n)
        inits.update(ini)
        inputs[f"x{i}"], outputs[f"y{i}"], feeds[f"x{i}"] = (xs, "int8"), "int8", x
    for j, (mid, m) in enumerate(CHAIN):
        i = len(nodes)
        xs = (1, 5, 3, 3)
        a, ini, x = _layer(rng, i, xs, (mid, 5, 1, 1), {}, True, True, "int8")
        nodes.append(a)
        inits.update(ini)
        inputs[f"x{i}"], feeds[f"x{i}"] = (xs, "int8"), x
        b, ini, _ = _layer(rng, i + 1, (1, mid, 3, 3), (m, mid, 1, 1), {}, True, True, "int8")
        b.input[0] = f"y{i}"
        nodes.append(b)
        inits.update(ini)
        outputs[f"y{i + 1}"] = "int8"
    return qmodel(nodes, inputs, outputs, inits), feeds


@needs_qemu
@pytest.mark.parametrize("act", [None, (0.0, float("inf")), (-0.3, 0.4)], ids=["int8", "relu", "clip"])
def test_pixel_pairs_exact(act, monkeypatch):
    """qdotp_mve on QEMU: every PAIRS layer and both chain ends; the clip
    case also with the passes from the last pixel down (the "rev" order,
    forced) and at -O0 (its intrinsics helper)."""
    model, feeds = pairs_model(21)
    c = compile_model(model, board=BOARD)
    if act is not None:
        c = rerender(c, lambda n: act)
    calls = re.findall(r"__qdotp_mve_s8_[0-9a-f]{8}\(\(int8_t \*\)", c.header)
    assert len(calls) == len(PAIRS) + len(CHAIN), calls
    assert "vldrw.u32 %q[b], [%[ta], #184]" in c.header     # K = 200: the word-load reach
    assert _run(c, feeds) > 20
    if act == (-0.3, 0.4):
        assert _run(c, feeds, opt="-O0") > 20
        from cuvil_mcu import codegen
        plain = codegen.Emitter.variant

        def rev(self):   # the passes from the last pixel down where the plan placed the output apart
            aliased = {a["node"] for a in getattr(self.plan, "aliases", [])}
            return plain(self) if self.node is None or self.node.name in aliased else "rev"
        monkeypatch.setattr(codegen.Emitter, "variant", rev)
        c = rerender(c, lambda n: act)
        assert "from the last down" in c.header
        assert _run(c, feeds) > 20


def transpose_model():
    """int8 Transposes of a few channels: NCHW -> NHWC (scatter stores, one
    row of 63 bytes: a predicated tail) and NHWC -> NCHW (gather loads)."""
    from onnx import TensorProto, helper
    rng = np.random.RandomState(5)
    shapes = {"x0": ((1, 3, 7, 9), (0, 2, 3, 1)), "x1": ((1, 4, 8, 5), (0, 3, 1, 2)), "x2": ((16, 17), (1, 0))}
    nodes = [helper.make_node("Transpose", [n], [f"y{n[1:]}"], perm=list(p), name=f"t{n[1:]}")
             for n, (_, p) in shapes.items()]
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, TensorProto.INT8, list(s)) for n, (s, _) in shapes.items()],
        [helper.make_tensor_value_info(f"y{n[1:]}", TensorProto.INT8, [s[i] for i in p]) for n, (s, p) in shapes.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return model, {n: rng.randint(-128, 128, s).astype(np.int8) for n, (s, _) in shapes.items()}


@needs_qemu
def test_transpose_scatter_gather_exact():
    model, feeds = transpose_model()
    c = compile_model(model, board=BOARD)
    assert c.header.count("(uint8_t *dst, const uint8_t *src)") == 3, "copy_scatter_mve not used for all three"
    g = c.graph
    r = qemu.simulate(c, [feeds[n][None] for n in g.inputs])
    perms = {n.output[0]: list(n.attribute[0].ints) for n in model.graph.node}
    for name, o in zip(g.outputs, r.outputs):
        want = np.transpose(feeds["x" + name[1:]], perms[name])
        assert np.array_equal(o[0], want), f"{name}: {o[0].ravel()[:16]} vs {want.ravel()[:16]}"
