"""NEON int8 kernels (cuvil_mcu/isa/neon.py) on the Cortex-A boards
cortex-a7-neon (armv7-a) and cortex-a53-aarch64, cross-compiled and run
under qemu-user with the CPU pinned (sim/qemu_user.py).

Every check compares the generated C, run on the emulated core, with the
numpy integer reference bit for bit (the reference is independent of the
kernels), and the shared models also with TFLM's recorded outputs."""
from __future__ import annotations

import shutil
import subprocess
from unittest import mock

import numpy as np
import pytest
from onnx import helper, numpy_helper

import shared_models as sm
from cuvil_mcu import boards, cli, reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ToolError
from cuvil_mcu.sim import host, qemu_user
from helpers import STRICT_WARNINGS
from test_qconv import _layer, int_model, qmodel
from test_qgemm import gemm_model

BOARDS = ["cortex-a7-neon", "cortex-a53-aarch64"]
CPU = {"cortex-a7-neon": "cortex-a7", "cortex-a53-aarch64": "cortex-a53"}


def _ready(board_id: str) -> bool:
    b = boards.get(board_id)
    return shutil.which(b.sim["cc"]) is not None and shutil.which(b.sim["qemu"]) is not None


def board_param(board_id: str):
    return pytest.param(board_id, marks=pytest.mark.skipif(
        not _ready(board_id), reason=f"{board_id}: cross compiler or qemu-user not installed"))


BOARD_PARAMS = [board_param(b) for b in BOARDS]


def strict_flags(board, std: str = "-std=c99") -> list[str]:
    """The board's flags plus -Wall -Wextra -Werror -pedantic: every sweep
    build also checks that the NEON kernels compile warning-free."""
    return [*boards.get(board).cflags, *STRICT_WARNINGS, std]


def board_exe(c, std: str = "-std=c99"):
    g = c.graph
    return host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                      [g.tensors[n].nbytes for n in g.outputs], cc=c.board.sim["cc"],
                      cflags=strict_flags(c.board.id, std))


def run_board(c, feeds: dict, std: str = "-std=c99") -> list[np.ndarray]:
    """The compiled model on its board through qemu-user, one sample."""
    g = c.graph
    ins = [np.asarray(feeds[n], dtype=g.tensors[n].dtype)[None] for n in g.inputs]
    return [o[0] for o in qemu_user.run(board_exe(c, std), ins, c.out_specs, 1, c.board)]


def check_exact(c, feeds: dict, ids=None, std: str = "-std=c99") -> list[np.ndarray]:
    outs = run_board(c, feeds, std)
    ref = reference.run(c.graph, feeds)
    for i, (name, o) in enumerate(zip(c.graph.outputs, outs)):
        r = ref[name]
        what = ids[i] if ids else name
        assert o.shape == r.shape and o.dtype == r.dtype, f"{what}: {o.dtype}{o.shape} vs {r.dtype}{r.shape}"
        if not np.array_equal(o, r):
            bad = np.flatnonzero(o.reshape(-1) != r.reshape(-1))
            pytest.fail(f"{c.board.id} {what}: {bad.size} elements differ from the reference, first at "
                        f"{bad[0]}: {o.reshape(-1)[bad[0]]} vs {r.reshape(-1)[bad[0]]}")
    return outs


# --------------------------------------------------------------------------- shared models

_REF: dict = {}


@pytest.mark.skipif(not sm.available(), reason=f"reference models not found at {sm.SHARED}")
@pytest.mark.parametrize("board", BOARD_PARAMS)
@pytest.mark.parametrize("name", sm.NAMES)
def test_shared_model(board, name):
    c = compile_model(str(sm.model_path(name)), board=board, requant="fixed")
    g = c.graph
    s = sm.samples(name)
    x = s["inputs"]
    inp = x.reshape((x.shape[0],) + g.tensors[g.inputs[0]].shape)
    assert inp.shape[0] == 8
    out = qemu_user.compile_and_run(c, [inp])[0]
    # the NEON kernels were selected for every conv / FC layer kind present
    kinds = {n.op_type.split(".")[-1] for n in g.nodes}
    if "QLinearConv" in kinds:
        assert f"{c.prefix}__qconv_neon_" in c.header
    if "QGemm" in kinds:
        assert f"{c.prefix}__qgemm_neon_" in c.header
    for portable in ("__qconv_s8_", "__qdwconv_s8_", "__qgemm_s8_"):
        assert portable not in c.header, f"a portable kernel ({portable}) remained"
    if any(n.op_type.endswith("QLinearConv") and n.attrs.get("group", 1) > 1 for n in g.nodes):
        assert f"{c.prefix}__qdwconv_neon_" in c.header
    if name not in _REF:
        _REF[name] = np.stack([reference.run(g, {g.inputs[0]: xi})[g.outputs[0]] for xi in inp])
    assert np.array_equal(out, _REF[name]), f"{board} {name}: C vs reference"
    tflm = s["expected_tflm"]
    assert np.array_equal(out.reshape(tflm.shape), tflm), f"{board} {name}: not bit-exact with TFLM"


# --------------------------------------------------------------------------- kernel sweeps

CONV_CASES = [
    # id, x shape (NCHW), w shape, attributes, bias, per-channel weight scales
    ("pw_c37", (1, 37, 5, 6), (19, 37, 1, 1), {}, True, True),              # 16 + 16 + 5 channels
    ("pw_c24_s2", (1, 24, 7, 6), (9, 24, 1, 1), dict(strides=[2, 2]), False, True),   # 16 + 8
    ("k3_pad_c5", (1, 5, 9, 8), (6, 5, 3, 3), dict(pads=[1, 1, 1, 1]), True, False),
    ("k3_s2_c19", (1, 19, 11, 9), (7, 19, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 1]), True, True),
    ("k5x3_dil_h", (1, 6, 12, 11), (4, 6, 5, 3), dict(dilations=[2, 1], pads=[4, 1, 3, 1]), True, True),
    ("k3_dil_w", (1, 9, 8, 12), (5, 9, 3, 3), dict(dilations=[1, 2], pads=[1, 2, 1, 2]), True, False),
    ("group2_c12", (1, 24, 7, 7), (10, 12, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True, True),
    ("k_larger_than_input", (1, 3, 3, 3), (4, 3, 5, 5), dict(pads=[2, 2, 2, 2]), True, True),
    ("taps_all_outside", (1, 2, 2, 2), (3, 2, 2, 2), dict(pads=[3, 3, 3, 3], strides=[2, 2]), True, False),
    ("batch2_k2x4", (2, 17, 6, 9), (3, 17, 2, 4), dict(auto_pad="SAME_UPPER"), True, True),
    ("1d_c20_s2", (1, 20, 17), (5, 20, 5), dict(pads=[2, 1], strides=[2]), True, True),
    ("dw_c21", (1, 21, 9, 8), (21, 1, 3, 3), dict(group=21, pads=[1, 1, 1, 1]), True, True),  # 8 + 8 + 5
    ("dw_c16_s2", (2, 16, 10, 9), (16, 1, 3, 3), dict(group=16, strides=[2, 2], pads=[1, 0, 1, 1]), True, False),
    ("dw_c8_dil2", (1, 8, 11, 10), (8, 1, 3, 3), dict(group=8, dilations=[2, 2], pads=[2, 1, 2, 1]), False, True),
    ("dw_c3", (1, 3, 6, 5), (3, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1]), True, True),      # scalar only
    ("dw_m2", (1, 3, 9, 8), (6, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1]), True, True),      # portable
    ("1d_dw_c10", (1, 10, 15), (10, 1, 3), dict(group=10, pads=[1, 1]), True, True),
]
MIN_WEIGHT = {"k3_s2_c19", "dw_c21", "pw_c24_s2"}   # layers given a -128 weight: no int16 pairing


def conv_sweep(seed=11, cases=CONV_CASES):
    rng = np.random.RandomState(seed)
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (cid, xs, ws, attrs, bias, pc) in enumerate(cases):
        n, ini, x = _layer(rng, i, xs, ws, attrs, bias, pc, "int8")
        if cid in MIN_WEIGHT:
            w = ini[f"w{i}"].copy()
            w.reshape(-1)[rng.choice(w.size, max(1, w.size // 7), replace=False)] = -128
            ini[f"w{i}"] = w
        nodes.append(n)
        inits.update(ini)
        inputs[f"x{i}"], outputs[f"y{i}"], feeds[f"x{i}"] = (xs, "int8"), "int8", x
    return qmodel(nodes, inputs, outputs, inits), feeds


@pytest.mark.parametrize("requant", ["fixed", "float"])
@pytest.mark.parametrize("board", BOARD_PARAMS)
def test_conv_sweep(board, requant):
    m, feeds = conv_sweep()
    c = compile_model(m, board=board, requant=requant)
    convs = [n for n in c.graph.nodes if n.op_type.endswith("QLinearConv")]
    assert len(convs) == len(CONV_CASES) and {n.attrs.get("_channels_last") for n in convs} == {1}
    for variant in ("_run_x16", "_run_x8", "_tap_x16"):
        assert variant in c.header, f"kernel variant {variant} not emitted"
    assert "__qdwconv_neon_" in c.header
    assert "__qdwconv_s8_" in c.header   # the multiplier-2 depthwise layer stays portable
    # C99 for one mode, C11 for the other, both -Werror
    outs = check_exact(c, feeds, [cc[0] for cc in CONV_CASES], "-std=c99" if requant == "fixed" else "-std=c11")
    for (cid, *_), o in zip(CONV_CASES, outs):
        if cid != "taps_all_outside":
            assert len(np.unique(o)) > 4, f"{cid}: outputs nearly constant, the test checks little"


GEMM_CASES = [
    # id, M, K, N, transA, transB, C shape, per-column B scale, alpha, B constant
    ("k1", 1, 1, 5, 0, 1, (5,), True, 1.0, True),
    ("k7_m3", 3, 7, 5, 0, 0, (5,), False, 1.0, True),
    ("k8", 1, 8, 9, 0, 1, None, True, 1.0, True),
    ("k15_transA", 4, 15, 6, 1, 1, (4, 6), True, 1.0, True),
    ("k16", 2, 16, 3, 0, 1, (3,), False, 1.0, True),
    ("k17_alpha", 2, 17, 11, 0, 1, (11,), True, 0.37, True),
    ("k33", 1, 33, 7, 0, 0, (7,), True, 1.0, True),
    ("k100_n13", 3, 100, 13, 0, 1, (13,), True, 1.0, True),
    ("run_time_b", 3, 24, 5, 0, 1, (5,), False, 1.0, False),   # portable (run-time B)
]


@pytest.mark.parametrize("requant", ["fixed", "float"])
@pytest.mark.parametrize("board", BOARD_PARAMS)
def test_fc_sweep(board, requant):
    m, feeds = gemm_model("int8", seed=17, cases=GEMM_CASES, forms=False)
    # one layer with -128 in B (no int16 pairing)
    i = [g[0] for g in GEMM_CASES].index("k33")
    init = next(t for t in m.graph.initializer if t.name == f"b{i}")
    b = numpy_helper.to_array(init).copy()
    b.reshape(-1)[::5] = -128
    init.CopyFrom(numpy_helper.from_array(b, init.name))
    c = compile_model(m, board=board, requant=requant)
    assert "__qgemm_neon_s8s8s8_" + requant + "_x16" in c.header
    assert "__qgemm_neon_s8s8s8_" + requant + "_x8" in c.header
    check_exact(c, feeds, [g[0] for g in GEMM_CASES], "-std=c99" if requant == "fixed" else "-std=c11")


@pytest.mark.parametrize("board", BOARD_PARAMS)
def test_conv_integer(board):
    """ConvInteger (int32 output, no requantization): the int8 x int8 NHWC
    layers take the NEON kernel, the others (uint8, offset weights) stay portable."""
    m, feeds = int_model()
    c = compile_model(m, board=board, verify_each=True)
    assert "_s8s8s32_none" in c.header
    check_exact(c, feeds)


@pytest.mark.parametrize("board", BOARD_PARAMS)
def test_int16_lane_extremes(board):
    """x = -128 everywhere: with weights -127 two products (2 x 16256) share an
    int16 lane; with weights -128 (16384 each) the kernel must not pair them."""
    nodes, inits, inputs, outputs, feeds = [], {}, {}, {}, {}
    for i, (wv, kind) in enumerate([(-127, "conv"), (-128, "conv"), (-127, "dw"), (-128, "dw"),
                                    (-127, "fc"), (-128, "fc")]):
        c_in, m_out = 48, (48 if kind == "dw" else 5)
        if kind == "fc":
            w = np.full((c_in, m_out), wv, np.int8)
            ins = [f"x{i}", f"xs{i}", f"xz{i}", f"w{i}", f"ws{i}", f"wz{i}", "", f"ys{i}", f"yz{i}"]
            nodes.append(helper.make_node("QGemm", ins, [f"y{i}"], name=f"fc{i}", domain="com.microsoft"))
            xs = (1, c_in)
        else:
            w = np.full((m_out, 1 if kind == "dw" else c_in, 3, 3), wv, np.int8)
            ins = [f"x{i}", f"xs{i}", f"xz{i}", f"w{i}", f"ws{i}", f"wz{i}", f"ys{i}", f"yz{i}"]
            attrs = dict(pads=[1, 1, 1, 1]) | (dict(group=c_in) if kind == "dw" else {})
            nodes.append(helper.make_node("QLinearConv", ins, [f"y{i}"], name=f"conv{i}", **attrs))
            xs = (1, c_in, 4, 5)
        taps = c_in * 9 if kind == "conv" else (9 if kind == "dw" else c_in)
        inits.update({f"xs{i}": np.float32(0.02), f"xz{i}": np.array(0, np.int8), f"w{i}": w,
                      f"ws{i}": np.float32(0.01), f"wz{i}": np.array(0, np.int8),
                      f"ys{i}": np.float32(0.02 * 0.01 * 128 * 128 * taps / 100.0), f"yz{i}": np.array(-100, np.int8)})
        inputs[f"x{i}"], outputs[f"y{i}"] = (xs, "int8"), "int8"
        feeds[f"x{i}"] = np.full(xs, -128, np.int8)
    c = compile_model(qmodel(nodes, inputs, outputs, inits), board=board, verify_each=True)
    outs = check_exact(c, feeds)
    assert all(len(np.unique(o)) >= 1 and o.max() > -100 for o in outs)


# --------------------------------------------------------------------------- the runner

@pytest.mark.parametrize("board", BOARD_PARAMS)
def test_qemu_cpu_pinned(board):
    b = boards.get(board)
    assert b.has("neon") and b.sim["runner"] == "qemu-user"
    m, feeds = gemm_model("int8", seed=1, cases=GEMM_CASES[:2], forms=False)
    c = compile_model(m, board=board)
    real = subprocess.run
    calls = []

    def spy(cmd, *a, **kw):
        calls.append(list(cmd))
        return real(cmd, *a, **kw)

    with mock.patch.object(host.subprocess, "run", spy):
        check_exact(c, feeds)
    runs = [cmd for cmd in calls if cmd[0] == b.sim["qemu"]]
    assert runs, f"qemu was not run: {calls}"
    assert runs[0][1:5] == ["-cpu", CPU[board], "-L", b.sim["sysroot"]]


# A program using SDOT, which neither pinned core has: under the pinned cpu it
# must trap, under QEMU's default `max` cpu it runs. Proves the pin matters.
SDOT_PROGRAM = r"""
#include <arm_neon.h>
#include <stdio.h>
int main(void)
{
    volatile int8_t a = 3;
    int32x4_t acc = vdotq_s32(vdupq_n_s32(0), vdupq_n_s8(a), vdupq_n_s8(a));
    printf("%d\n", (int)vgetq_lane_s32(acc, 0));
    return 0;
}
"""
SDOT_FLAGS = {"cortex-a7-neon": ["-march=armv8.2-a+dotprod", "-mfpu=neon-fp-armv8", "-mfloat-abi=hard"],
              "cortex-a53-aarch64": ["-march=armv8.2-a+dotprod"]}


@pytest.mark.parametrize("board", BOARD_PARAMS)
def test_pinned_cpu_traps_missing_instructions(board, tmp_path):
    b = boards.get(board)
    (tmp_path / "sdot.c").write_text(SDOT_PROGRAM)
    exe = tmp_path / "sdot"
    subprocess.run([b.sim["cc"], "-O1", *SDOT_FLAGS[board], str(tmp_path / "sdot.c"), "-o", str(exe)], check=True)
    ok = subprocess.run([b.sim["qemu"], "-cpu", "max", "-L", b.sim["sysroot"], str(exe)],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip() == "36"
    pinned = subprocess.run([*qemu_user.command(b), str(exe)], capture_output=True, text=True)
    assert pinned.returncode in (-4, 132), f"expected SIGILL, got exit {pinned.returncode}"


@pytest.mark.parametrize("board", BOARD_PARAMS)
def test_neon_instructions_in_binary(board):
    """The cross-built executable really contains the NEON multiply-accumulates."""
    b = boards.get(board)
    objdump = b.sim["cc"].replace("-gcc", "-objdump")
    if shutil.which(objdump) is None:
        pytest.skip(f"{objdump} not installed")
    m, feeds = conv_sweep()
    exe = board_exe(compile_model(m, board=board, requant="fixed"))   # test_conv_sweep's build
    dis = subprocess.run([objdump, "-d", str(exe)], capture_output=True, text=True, check=True).stdout
    want = (["vmull.s8", "vmlal.s8", "vpadal.s16"] if board == "cortex-a7-neon" else ["smull", "smlal", "sadalp"])
    for insn in want:
        assert insn in dis, f"{insn} not in the {board} binary"
    assert "sdot" not in dis


def test_strict_builds_host_fallback():
    """Without __ARM_NEON (the host) the same header compiles warning-free
    as C++ and as C99 under the sanitizers, and its scalar loops equal the
    reference (clang: test_neon_path_compiles_as_cpp)."""
    keep = {"pw_c37", "k3_s2_c19", "group2_c12", "k_larger_than_input", "dw_c21", "1d_dw_c10"}
    m, feeds = conv_sweep(cases=[cc for cc in CONV_CASES if cc[0] in keep])
    gm, gf = gemm_model("int8", seed=17, cases=[gc for gc in GEMM_CASES if gc[0] in ("k15_transA", "k33")],
                        forms=False)
    for model, fd in ((m, feeds), (gm, gf)):
        c = compile_model(model, board="cortex-a53-aarch64")
        assert "__qconv_neon_" in c.header or "__qgemm_neon_" in c.header
        g = c.graph
        nbytes = ([g.tensors[n].nbytes for n in g.inputs], [g.tensors[n].nbytes for n in g.outputs])
        ref = reference.run(g, fd)
        ins = [np.asarray(fd[n], dtype=g.tensors[n].dtype)[None] for n in g.inputs]
        builds = [("g++", ["-x", "c++"]),
                  ("gcc", ["-std=c99", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"])]
        for cc, flags in builds:
            if shutil.which(cc) is None:
                continue
            exe = host.build(c.header, c.prefix, *nbytes, cc=cc, cflags=STRICT_WARNINGS + flags)
            for name, o in zip(g.outputs, host.run(exe, ins, c.out_specs, 1)):
                assert np.array_equal(o[0], ref[name]), f"{cc} {flags}: {name}"


def test_cli_run(tmp_path, capsys):
    board = "cortex-a7-neon"
    if not _ready(board) or not sm.available():
        pytest.skip("toolchain or shared models missing")
    s = sm.samples("kws_dscnn")
    c = compile_model(str(sm.model_path("kws_dscnn")), board=board)
    x = s["inputs"][:3].reshape((3,) + c.in_specs[0][0])
    np.save(tmp_path / "x.npy", x)
    rc = cli.main(["run", str(sm.model_path("kws_dscnn")), "--board", board, "--input", str(tmp_path / "x.npy"),
                   "-o", str(tmp_path / "y.npy")])
    assert rc == 0, capsys.readouterr().err
    y = np.load(tmp_path / "y.npy")
    assert np.array_equal(y.reshape(3, -1), s["expected_tflm"][:3].reshape(3, -1))


def test_missing_tools_named(monkeypatch):
    b = boards.get("cortex-a53-aarch64")
    real = shutil.which
    monkeypatch.setattr(qemu_user.shutil, "which", lambda n: None if n in ("qemu-aarch64", "aarch64-linux-gnu-gcc")
                        else real(n))
    with pytest.raises(ToolError, match="apt-get install qemu-user"):
        qemu_user.command(b)
    with pytest.raises(ToolError, match="apt-get install gcc-aarch64-linux-gnu"):
        qemu_user.compiler(b)


# --------------------------------------------------------------------------- vector requantization

REQUANT_MAIN = r"""
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <limits.h>
{helpers}
int main(int argc, char **argv)
{
    static int32_t v[3 * 8192], out[8192];
    FILE *f = fopen(argv[1], "rb");
    long n = (long)(fread(v, sizeof(int32_t), 3 * 8192, f) / 3), i;
    (void)argc;
    fclose(f);
    for (i = 0; i + 4 <= n; i += 4) {
        int32_t a[4], m[4], s[4], j;
        for (j = 0; j < 4; ++j) {
            a[j] = v[3 * (i + j)];
            m[j] = v[3 * (i + j) + 1];
            s[j] = v[3 * (i + j) + 2];
        }
        vst1q_s32(out + i, t__requant_fixed_neon(vld1q_s32(a), vld1q_s32(m), vld1q_s32(s)));
    }
    f = fopen(argv[2], "wb");
    fwrite(out, sizeof(int32_t), (size_t)n, f);
    return fclose(f) != 0;
}
"""


@pytest.mark.parametrize("board", BOARD_PARAMS)
def test_vector_requant_fixed(board, tmp_path):
    """requant_fixed_neon against quant.requantize_fixed (numpy, int64) on
    edge accumulators (int32 limits, exact halves, 0, +-1), every shift from
    -31 to 30 and multipliers from quantize_multiplier, plus random ones."""
    from cuvil_mcu import quant
    from cuvil_mcu.codegen import env
    rng = np.random.RandomState(5)
    edge = [quant.INT32_MIN, quant.INT32_MIN + 1, -(1 << 30), -3, -2, -1, 0, 1, 2, 3, (1 << 30), quant.INT32_MAX]
    rows = []
    for shift in range(-31, 31):
        for mult in (1 << 30, (1 << 31) - 1, 1518500250, int(rng.randint(1 << 30, (1 << 31) - 1))):
            for a in edge + [int(v) for v in rng.randint(-(1 << 31), (1 << 31) - 1, 4, dtype=np.int64)]:
                rows.append((a, mult, shift))
        if -29 <= shift < 0:   # x 0.5, then +-1.5 * 2^-shift: exact halves for the final rounding
            rows += [(-(3 << -shift), 1 << 30, shift), (3 << -shift, 1 << 30, shift),
                     (-(1 << -shift), 1 << 30, shift), ((1 << -shift), 1 << 30, shift)]
    for real in rng.uniform(1e-6, 4.0, 200):
        mult, shift = quant.quantize_multiplier(float(real))
        rows.append((int(rng.randint(-(1 << 24), 1 << 24)), mult, shift))
    assert len(rows) <= 8192
    rows = rows[:len(rows) - len(rows) % 4]
    v = np.array(rows, np.int64)
    expect = quant.requantize_fixed(v[:, 0], v[:, 1], v[:, 2])
    helpers = env().get_template("kernels/requant_fixed_neon.c.j2").render(p="t", fn="t__requant_fixed_neon")
    (tmp_path / "rq.c").write_text(REQUANT_MAIN.replace("{helpers}", helpers))
    b = boards.get(board)
    exe = tmp_path / "rq"
    subprocess.run([b.sim["cc"], *strict_flags(board), str(tmp_path / "rq.c"), "-o", str(exe)], check=True)
    v.astype(np.int32).tofile(tmp_path / "in.bin")
    subprocess.run([*qemu_user.command(b), str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                   check=True)
    got = np.fromfile(tmp_path / "out.bin", np.int32)
    bad = np.flatnonzero(got != expect)
    assert bad.size == 0, f"{bad.size} of {len(v)} differ, first acc={v[bad[0], 0]} mult={v[bad[0], 1]} " \
                          f"shift={v[bad[0], 2]}: {got[bad[0]]} vs {expect[bad[0]]}"


CLANG_TARGETS = {"cortex-a7-neon": ["--target=armv7a-linux-gnueabihf", "-mcpu=cortex-a7", "-mfpu=neon-vfpv4",
                                    "-mfloat-abi=hard"],
                 "cortex-a53-aarch64": ["--target=aarch64-linux-gnu", "-mcpu=cortex-a53"]}


@pytest.mark.skipif(shutil.which("clang++") is None, reason="clang++ not installed")
@pytest.mark.parametrize("board", BOARDS)
def test_neon_path_compiles_as_cpp(board, tmp_path):
    """There is no cross g++ here: clang/clang++ check the NEON branch of the
    kernels (-fsyntax-only, -Werror -pedantic) as C++ and C11 for both targets."""
    b = boards.get(board)
    gm, _ = gemm_model("int8", seed=17, cases=GEMM_CASES[:3], forms=False)
    m, _ = conv_sweep(cases=[cc for cc in CONV_CASES if cc[0] in ("pw_c37", "k3_dil_w", "dw_c21")])
    for model in (m, gm):
        c = compile_model(model, board=board)
        g = c.graph
        (tmp_path / f"{c.prefix}.h").write_text(c.header)
        (tmp_path / "main.c").write_text(host.harness_source(
            c.prefix, [g.tensors[n].nbytes for n in g.inputs], [g.tensors[n].nbytes for n in g.outputs]))
        base = ["-fsyntax-only", *STRICT_WARNINGS, *CLANG_TARGETS[board], "-isystem", f"{b.sim['sysroot']}/include",
                "-I", str(tmp_path), str(tmp_path / "main.c")]
        for cc, lang in (("clang++", ["-x", "c++"]), ("clang", ["-std=c11"])):
            r = subprocess.run([cc, *lang, *base], capture_output=True, text=True)
            assert r.returncode == 0, f"{cc} {board}: {r.stderr[-2000:]}"
        neon = subprocess.run(["clang", *CLANG_TARGETS[board], "-dM", "-E", "-x", "c", "/dev/null"],
                              capture_output=True, text=True).stdout
        assert "#define __ARM_NEON " in neon
