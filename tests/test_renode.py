"""The Renode files and runner (integrations/renode.py). CI has no Renode:
these check the generated .resc/.robot against what the same harness prints
on QEMU, and our runner's process handling with a stand-in `renode-test`
(a script with renode-test's command line: one .robot path) -- they test our
code, not Renode. The runs in a real Renode 1.15.1 are in docs/renode.md.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import shared_models as sm
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.integrations import renode
from cuvil_mcu.sim import firmware, qemu

HAVE_GCC = shutil.which("arm-none-eabi-gcc") is not None
HAVE_QEMU = shutil.which("qemu-system-arm") is not None
needs_qemu = pytest.mark.skipif(not (HAVE_GCC and HAVE_QEMU), reason="needs apt packages gcc-arm-none-eabi "
                                                                     "libnewlib-arm-none-eabi qemu-system-arm")
needs_gcc = pytest.mark.skipif(not HAVE_GCC, reason="arm-none-eabi-gcc missing")
needs_models = pytest.mark.skipif(not sm.available(), reason=f"reference models not found at {sm.SHARED}")
ENV = dict(os.environ, PYTHONHASHSEED="0")
ENV.pop("CUVIL_DEBUG", None)
BOARD = "stm32f4-discovery"


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", *map(str, args)], env=env or ENV,
                          capture_output=True, text=True, timeout=600)


def waits(robot: str) -> list[str]:
    cells = re.findall(r"^ {4}Wait For Line On Uart {2,}(\S(?:.*?\S)?) {2,}treatAsRegex=true$", robot, re.M)
    assert cells and all(c.startswith("^") and c.endswith("$") for c in cells), robot
    return [c[1:-1] for c in cells]


def softmax_fc(k: int = 6, n: int = 5) -> onnx.ModelProto:
    """y = softmax(x @ w + b): float outputs that are not round numbers even for x = 0."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["z"]),
                           helper.make_node("Softmax", ["z"], ["y"], axis=-1)], "sfc",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor("w", TensorProto.FLOAT, [k, n], w.reshape(-1).tolist()),
                           helper.make_tensor("b", TensorProto.FLOAT, [n], b.tolist())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


# ---- the generated files ----

@needs_models
def test_gen_emit_renode_integer_model(tmp_path):
    out = tmp_path / "out"
    r = run_cli("gen", sm.model_path("ad_fc_autoencoder"), "--board", BOARD, "--emit", "renode", "-o", out)
    assert r.returncode == 0, r.stderr
    resc = (out / "model.resc").read_text()
    robot = (out / "model.robot").read_text()
    lines = [ln.strip() for ln in resc.splitlines() if ln.strip() and not ln.startswith("#")]
    assert "machine LoadPlatformDescription @platforms/boards/stm32f4_discovery-kit.repl" in lines
    # $ORIGIN is already a path: no '@' before it (that stops its expansion)
    assert "$bin?=$ORIGIN/firmware.elf" in lines and "sysbus LoadELF $bin" in lines
    assert "showAnalyzer sysbus.usart2" in lines and lines[-1] == "start"
    for text in (resc, robot):  # no SVD fetch, no network, no register pokes
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")).lower()
        assert "svd" not in code and "http" not in code and "write" not in code
    assert re.search(r"^\$\{ELF\} {2,}@\$\{CURDIR\}/firmware\.elf$", robot, re.M)
    assert re.search(r"^\s{4}Create Terminal Tester {2,}\$\{UART\} {2,}timeout=\d+$", robot, re.M)
    w = waits(robot)
    assert w[-1] == "CUVIL DONE"
    assert "model.resc" in (out / "Makefile").read_text()
    # 640 int8 values: 10 records of 64, each "O <sample> <output> <index> <128 hex digits>"
    assert len(w) == 11 and all(re.fullmatch(r"O 00000000 00 [0-9a-f]{8} [0-9a-f]{128}", x) for x in w[:-1])
    # the records are what the harness prints: the same model on QEMU's M4, from the host reference's view
    c = compile_model(str(sm.model_path("ad_fc_autoencoder")), board=BOARD)
    ref = qemu.reference_outputs(c, firmware.default_inputs(c))
    assert w[:-1] == firmware.output_lines(ref)
    assert [int(x[23 + 2 * i:25 + 2 * i], 16) for x in w[:1] for i in range(4)] == \
        [int(v) & 0xFF for v in ref[0].reshape(-1)[:4]]
    if HAVE_GCC and HAVE_QEMU:
        res = qemu.simulate(c, firmware.default_inputs(c), BOARD)
        assert [ln for ln in res.log.splitlines() if ln.startswith("O ")] == w[:-1]
    if HAVE_GCC:  # the project's own firmware.elf is what the .resc/.robot load: it builds warning-free
        mk = subprocess.run(["make"], cwd=out, capture_output=True, text=True, timeout=300)
        assert mk.returncode == 0 and "warning" not in mk.stderr.lower(), mk.stderr


@needs_qemu
def test_gen_emit_renode_float_model_waits_for_bit_patterns(tmp_path):
    """Float outputs: the .robot waits for each value's IEEE-754 bit pattern,
    the ones the same firmware computes on QEMU, which agree with numpy within
    sim's tolerance (and are not numpy's bits: newlib's expf differs)."""
    onnx.save(softmax_fc(), tmp_path / "m.onnx")
    out = tmp_path / "out"
    r = run_cli("gen", tmp_path / "m.onnx", "--board", BOARD, "--emit", "renode", "-o", out)
    assert r.returncode == 0, r.stderr
    w = waits((out / "model.robot").read_text())
    assert len(w) == 2 and re.fullmatch(r"O 00000000 00 00000000 [0-9a-f]{40}", w[0]), w
    got = np.array([int(w[0][23 + 8 * i:31 + 8 * i], 16) for i in range(5)], np.uint32).view(np.float32)
    x = np.zeros(6, np.float32)
    m = onnx.load(tmp_path / "m.onnx")
    wt, b = (onnx.numpy_helper.to_array(t) for t in m.graph.initializer)
    z = (x.astype(np.float64) @ wt + b)
    want = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert abs(float(got.sum()) - 1.0) < 1e-5


def test_robot_text_and_patterns():
    assert renode.robot_text("a  b\tc ${x} @{y}\\z\n") == "a b c $(x} @(y}/z"
    assert renode.expected_regexes(["O 00000000 00 00000000 ff"]) == ["^O 00000000 00 00000000 ff$", "^CUVIL DONE$"]
    with pytest.raises(ValueError, match="escape"):
        renode.expected_regexes(["O 1 (x)"])


def test_records_round_trip_every_dtype():
    """firmware.output_lines writes what main.c prints; qemu.parse_output reads
    it back bit for bit (NaN payloads and -0.0 included)."""
    rng = np.random.default_rng(1)
    outs = [rng.integers(-128, 128, (2, 70)).astype(np.int8),
            np.array([[1.0, -0.0, np.inf, np.nan, 1e-45, -3.5]] * 2, np.float32),
            rng.integers(-2 ** 31, 2 ** 31, (2, 3)).astype(np.int32)]
    lines = firmware.output_lines(outs)
    assert "O 00000000 01 00000000 3f80000080000000" + "7f8000007fc0000000000001c0600000" in lines
    assert "O 00000000 00 00000040 " + "".join(f"{int(v) & 0xFF:02x}" for v in outs[0][0, 64:]) in lines
    text = "\n".join(["S 00000000 0000000000000010", "S 00000001 0000000000000011", *lines])
    back, ticks = qemu.parse_output(text, [((70,), "int8"), ((6,), "float32"), ((3,), "int32")], 2)
    assert ticks == [16, 17]
    for a, b in zip(back, outs):
        assert a.tobytes() == b.tobytes()


def test_renode_board_and_tool_errors(tmp_path):
    onnx.save(softmax_fc(), tmp_path / "m.onnx")
    r = run_cli("gen", tmp_path / "m.onnx", "--board", "nucleo-f746zg", "--emit", "renode", "-o", tmp_path / "o")
    assert r.returncode != 0 and "no Renode platform" in r.stderr and BOARD in r.stderr
    assert "Traceback" not in r.stderr
    np.save(tmp_path / "x.npy", np.zeros((1, 6), np.float32))
    r = run_cli("sim", tmp_path / "m.onnx", "--board", BOARD, "--simulator", "renode", "--input",
                tmp_path / "x.npy", env=dict(ENV, PATH=str(Path(sys.executable).parent)))
    assert r.returncode != 0 and "Renode is not installed" in r.stderr and "Traceback" not in r.stderr


# ---- the runner, with a stand-in renode-test ----

def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie no one reaped has ended


def test_runner_timeout_ends_the_whole_process_group(tmp_path):
    """renode-test is a shell script whose children (Python, mono) outlive it
    when only it is killed: the runner ends its whole process group."""
    stand_in = tmp_path / "renode-test"
    stand_in.write_text("#!/bin/sh\nsleep 300 &\necho $! > child.pid\necho $$ > runner.pid\n"
                        "echo 'Started Renode instance'\nsleep 300\n")
    stand_in.chmod(0o755)
    t0 = time.monotonic()
    rc, log = renode.run_runner([str(stand_in), "x.robot"], tmp_path, timeout=1.5)
    assert rc is None and "Started Renode instance" in log
    assert time.monotonic() - t0 < 20
    for f in ("runner.pid", "child.pid"):
        pid = int((tmp_path / f).read_text())
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), f


def test_runner_ends_children_left_after_a_normal_exit(tmp_path):
    stand_in = tmp_path / "renode-test"
    stand_in.write_text("#!/bin/sh\nsleep 300 &\necho $! > child.pid\nexit 0\n")
    stand_in.chmod(0o755)
    rc, _ = renode.run_runner([str(stand_in)], tmp_path, timeout=30)
    assert rc == 0
    pid = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


STAND_IN = """#!/bin/sh
# stand-in for renode-test: called as `renode-test <file.robot>`; checks the
# .robot and the ELF beside it exist, then reports like Robot does
robot="$1"
[ -f "$robot" ] || { echo "no robot file $robot"; exit 252; }
[ -f "$(dirname "$robot")/firmware.elf" ] || { echo "no firmware.elf"; exit 252; }
grep -c 'Wait For Line On Uart' "$robot" > "{log}"
{body}
"""


@needs_gcc
@needs_models
@pytest.mark.parametrize("outcome", ["pass", "fail"])
def test_sim_renode_reports_robots_verdict(tmp_path, outcome):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    body = ("echo '+++++ Finished test model.Model Runs On stm32f4-discovery with status OK'\nexit 0"
            if outcome == "pass" else
            "echo 'Running model.robot'\necho 'Cause: Terminal tester failed!'\n"
            "echo 'Line containing regex >>^O 00000000 00 00000000 04$<< event: failure'\nexit 1")
    (bindir / "renode-test").write_text(STAND_IN.replace("{log}", str(tmp_path / "waits.txt")).replace("{body}", body))
    (bindir / "renode-test").chmod(0o755)
    x = sm.samples("hello_world")["inputs"][:2].reshape(2, 1, 1)
    np.save(tmp_path / "x.npy", x)
    env = dict(ENV, PATH=f"{bindir}{os.pathsep}{ENV['PATH']}")
    r = run_cli("sim", sm.model_path("hello_world"), "--board", BOARD, "--simulator", "renode", "--input",
                tmp_path / "x.npy", env=env)
    assert "Traceback" not in r.stderr, r.stderr
    assert int((tmp_path / "waits.txt").read_text()) == 2 + 1  # one record per sample, then CUVIL DONE
    if outcome == "pass":
        assert r.returncode == 0, r.stderr
        assert "all 2 output records and CUVIL DONE matched" in r.stdout
        assert "not an inference time" in r.stdout
    else:
        assert r.returncode == 1
        assert "renode-test failed (exit 1)" in r.stderr and "Terminal tester failed" in r.stderr
        assert "^O 00000000 00 00000000 04$" in r.stderr
