"""The command line as a user meets it: run as a subprocess; every user
mistake gives a non-zero exit, one clear stderr line (no traceback) and
leaves no files behind; the success paths write what they say and their
numbers match an independent reference (onnxruntime)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from helpers import assert_close, make_model, node, run_ort
from update_golden import small_model, two_input_model

ENV = dict(os.environ, PYTHONHASHSEED="0")
ENV.pop("CUVIL_DEBUG", None)


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", *map(str, args)], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=120)


def files_in(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*")) if d.exists() else []


def fails(r, *, code: int = 2, out: Path | None = None) -> str:
    """Assert a clean user-error exit and return the message."""
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert r.returncode == code, f"exit {r.returncode}, expected {code}; stderr: {r.stderr}"
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{r.stderr}"
    assert lines[0].startswith("cuvil-mcu: error: "), lines[0]
    if out is not None:
        assert files_in(out) == [], f"{out} holds {files_in(out)} after a failed run"
    return lines[0]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    onnx.save(small_model(), d / "small.onnx")
    onnx.save(two_input_model(), d / "two.onnx")
    return d


# ---------------------------------------------------------------------------
# user mistakes: each case builds its files and returns (argv, expected exit
# code, words the message must contain, words it must not contain). All
# cases run as concurrent subprocesses once per module (the CLI start-up
# dominates this file's time); each is then checked by its own test.

def dynamic_model(path: Path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def two_unsupported_model(path: Path):
    g = helper.make_graph(
        [helper.make_node("Det", ["x"], ["d"], name="det_node"),
         helper.make_node("Relu", ["x"], ["r"], name="relu_node"),
         helper.make_node("NonZero", ["r"], ["nz"], name="nonzero_node")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("nz", TensorProto.INT64, [2, "k"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _missing(d, models):
    return ["gen", d / "nope.onnx"], 2, ["nope.onnx", "no such file"], []


def _not_onnx(kind):
    def case(d, models):
        f = d / "model.onnx"
        if kind == "random":
            f.write_bytes(np.random.RandomState(3).bytes(4096))
        elif kind == "text":
            f.write_text("this is a README, not a model\n" * 20)
        elif kind == "empty":
            f.write_bytes(b"")
        else:
            f.mkdir()
        return ["gen", f], 2, ["model.onnx", {"random": "ONNX", "text": "ONNX", "empty": "empty",
                                               "directory": "directory"}[kind]], []
    return case


def _truncated(frac):
    def case(d, models):
        data = (models / "small.onnx").read_bytes()
        cut = max(1, int(len(data) * frac))
        f = d / f"cut{cut}.onnx"
        f.write_bytes(data[:cut])
        return ["gen", f], 2, [f"cut{cut}.onnx", "ONNX"], []
    return case


def _unsupported(d, models):
    return (["gen", two_unsupported_model(d / "m.onnx")], 2,
            ["2 unsupported ops", "det_node", "(Det)", "nonzero_node", "(NonZero)"], ["relu_node"])


def _dynamic(d, models):
    return (["gen", dynamic_model(d / "dyn.onnx")], 2,
            ["input 'x'", "dimension 2", "'H'", "--input-shape x="], [])


def _input_shape(spec, words):
    def case(d, models):
        return ["gen", dynamic_model(d / "dyn.onnx"), "--input-shape", spec], 2, words, []
    return case


def _board(d, models):
    return (["gen", models / "small.onnx", "--board", "esp32-nope"], 2,
            ["'esp32-nope'", "host", "rpi-pico", "nucleo-f746zg", "qemu-mps2-an385", "qemu-mps3-an547"], [])


def _ram(d, models):
    m = make_model([node("Relu", ["x"], ["y"])], {"x": ((1, 64, 64, 64), "float32")}, ["y"])
    onnx.save(m, d / "big.onnx")
    return ["gen", d / "big.onnx", "--board", "rpi-pico"], 3, ["rpi-pico", "RAM"], []


def _flash(d, models):
    w = np.random.RandomState(5).randn(150000).astype(np.float32)
    m = make_model([node("Add", ["x", "w"], ["y"])], {"x": ((150000,), "float32")}, ["y"], {"w": w})
    onnx.save(m, d / "heavy.onnx")
    return ["gen", d / "heavy.onnx", "--board", "qemu-mps3-an547"], 3, ["qemu-mps3-an547", "flash"], []


def _name(name):
    def case(d, models):
        return ["gen", models / "small.onnx", "--name", name], 2, [f"'{name}'", "identifier"], []
    return case


def _planner(d, models):
    return (["gen", models / "small.onnx", "--planner", "best"], 2,
            ["'best'", "greedy_by_size", "hill_climb"], [])


def _out_is_file(d, models):
    (d / "afile").write_text("x")
    return ["gen", models / "small.onnx", "-o", d / "afile" / "sub"], 2, ["afile", "not a folder"], []


def _plan_out_is_dir(d, models):
    (d / "plan_dir").mkdir()
    return (["gen", models / "small.onnx", "--plan-out", d / "plan_dir"], 2, ["plan_dir", "directory"], [])


def _run_input(kind):
    def case(d, models):
        model = models / ("two.onnx" if kind in ("missing_key", "one_array_two_inputs") else "small.onnx")
        f = d / "in.npy"
        if kind == "shape":
            np.save(f, np.zeros((3, 4, 5), np.float32))
            words = ["'x'", "[3, 4, 5]", "[1, 3, 4, 5]"]
        elif kind == "dtype":
            np.save(f, np.zeros((1, 3, 4, 5), np.int32))
            words = ["'x'", "int32", "float32"]
        elif kind == "missing_key":
            f = d / "in.npz"
            np.savez(f, a=np.zeros((2, 7), np.float32))
            words = ["missing", "'b'"]
        elif kind == "one_array_two_inputs":
            np.save(f, np.zeros((2, 7), np.float32))
            words = ["2 inputs", ".npz"]
        elif kind == "not_npy":
            f.write_text("1 2 3\n")
            words = ["in.npy", "not a .npy"]
        else:
            f = d / "absent.npy"
            words = ["absent.npy", "no such file"]
        return ["run", model, "-i", f, "-o", d / "out" / "y.npy"], 2, words, []
    return case


def _argv(*argv):
    """argparse's own errors and values with line breaks (issue 11.9): one line too."""
    def case(d, models):
        args = [a.replace("MODEL", str(models / "small.onnx")) for a in argv]
        return args, 2, [], []
    return case


def _plan_out_onto(kind):
    """issue 11.8: --plan-out onto the input model (also through a symlink or a hard link) or the header."""
    def case(d, models):
        m = d / "m.onnx"
        m.write_bytes((models / "small.onnx").read_bytes())
        if kind == "input":
            target, words = m, ["--plan-out", "m.onnx", "input model"]
        elif kind == "symlink":
            target = d / "link.json"
            target.symlink_to(m)
            words = ["link.json", "input model", "m.onnx"]
        elif kind == "hardlink":
            target = d / "hard.json"
            os.link(m, target)
            words = ["hard.json", "input model", "m.onnx"]
        else:
            target, words = d / "out" / "model.h", ["--plan-out", "model.h", "header"]
        return ["gen", m, "--plan-out", target, "-o", d / "out"], 2, words, []
    return case


def _run_output_onto_input(d, models):
    np.save(d / "x.npy", np.zeros((1, 3, 4, 5), np.float32))
    return ["run", models / "small.onnx", "-i", d / "x.npy", "-o", d / "x.npy"], 2, ["-o", "x.npy", "--input"], []


ERROR_CASES = {
    "missing_file": _missing,
    **{f"not_onnx_{k}": _not_onnx(k) for k in ("random", "text", "empty", "directory")},
    **{f"truncated_{f}": _truncated(f) for f in (0.02, 0.33, 0.77, 0.999)},
    "two_unsupported_ops": _unsupported,
    "dynamic_dimension": _dynamic,
    "input_shape_not_numbers": _input_shape("x=1,3,a,5", ["'x=1,3,a,5'", "name=1,3,32,32"]),
    "input_shape_no_dims": _input_shape("x", ["'x'", "name=1,3,32,32"]),
    "input_shape_no_name": _input_shape("=1,2", ["'=1,2'"]),
    "input_shape_rank": _input_shape("x=1,3,4", ["rank 3", "rank 4"]),
    "input_shape_fixed_dim": _input_shape("x=1,4,4,5", ["dimension 1", "fixed to 3", "4 given"]),
    "input_shape_zero": _input_shape("x=1,3,0,5", ["at least 1"]),
    "input_shape_unknown_input": _input_shape("y=1,3,4,5", ["unknown input", "'y'", "'x'"]),
    "unknown_board": _board,
    "too_big_for_ram": _ram,
    "too_big_for_flash": _flash,
    **{f"name_{n}": _name(n) for n in ("9lives", "my-model", "_x", "x__y", "\u00fcn\u00ef")},
    "unknown_planner": _planner,
    "output_under_a_file": _out_is_file,
    "plan_out_is_a_directory": _plan_out_is_dir,
    **{f"run_input_{k}": _run_input(k) for k in ("shape", "dtype", "missing_key", "one_array_two_inputs",
                                                 "not_npy", "no_file")},
    "argparse_unknown_option": _argv("gen", "MODEL", "--bogus"),
    "argparse_missing_model": _argv("gen"),
    "argparse_missing_command": _argv(),
    "argparse_missing_value": _argv("gen", "MODEL", "--board"),
    "argparse_bad_choice_with_newline": _argv("gen", "MODEL", "--io", "int8\nmodel"),
    "argparse_bad_int": _argv("gen", "MODEL", "-O", "7"),
    "argparse_unknown_command": _argv("compile", "MODEL"),
    "name_with_newline": _argv("gen", "MODEL", "--name", "kws\nrm -rf"),
    "name_with_line_separator": _argv("gen", "MODEL", "--name", "kws\u2028x"),
    "name_5000_characters": _argv("gen", "MODEL", "--name", "a" * 5000),
    **{f"plan_out_onto_{k}": _plan_out_onto(k) for k in ("input", "symlink", "hardlink", "header")},
    "run_output_onto_its_input": _run_output_onto_input,
}


@pytest.fixture(scope="module")
def error_runs(models, tmp_path_factory):
    from concurrent.futures import ThreadPoolExecutor

    jobs = {}
    for name, make in ERROR_CASES.items():
        d = tmp_path_factory.mktemp(name)
        argv, code, words, absent = make(d, models)
        out = d / "out"
        if argv and argv[0] == "gen" and "-o" not in argv:
            argv = [*argv, "-o", out]
        jobs[name] = (argv, code, words, absent, out)
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        futures = {name: ex.submit(cli, *job[0]) for name, job in jobs.items()}
        return {name: (futures[name].result(), *jobs[name][1:]) for name in jobs}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_user_mistake(case, error_runs):
    r, code, words, absent, out = error_runs[case]
    msg = fails(r, code=code, out=out)
    for w in words:
        assert w in msg, f"{w!r} not in: {msg}"
    for w in absent:
        assert w not in msg, f"{w!r} in: {msg}"


def test_long_name_message_stays_short(error_runs):
    msg = error_runs["name_5000_characters"][0].stderr.strip()
    assert "5,000 characters" in msg and "at most" in msg and len(msg) < 300, msg


def test_plan_out_never_replaces_the_input(error_runs, models):
    for kind in ("input", "symlink", "hardlink"):
        argv = error_runs[f"plan_out_onto_{kind}"][0].args
        model = Path(argv[argv.index("gen") + 1])
        assert model.read_bytes() == (models / "small.onnx").read_bytes(), f"{kind}: the input model changed"


def _budget_numbers(msg: str, what: str):
    m = re.search(rf"{what}: (?:constants )?needs? ([\d,]+) B.*?has ([\d,]+) B: over by ([\d,]+) B", msg)
    assert m, msg
    need, have, over = (int(v.replace(",", "")) for v in m.groups())
    assert need - have == over > 0, msg
    return need, have


def test_budget_messages_give_need_budget_and_overflow(error_runs):
    need, have = _budget_numbers(error_runs["too_big_for_ram"][0].stderr, "RAM")
    assert have == 264 * 1024
    assert need >= 2 * 64 ** 3 * 4  # input and output both live: a graph input is never overwritten
    need, have = _budget_numbers(error_runs["too_big_for_flash"][0].stderr, "flash")
    assert have == 512 * 1024 and need >= 150000 * 4


def test_dynamic_dimension_fixed_with_input_shape(tmp_path):
    dynamic_model(tmp_path / "dyn.onnx")
    out = tmp_path / "out"
    r = cli("gen", tmp_path / "dyn.onnx", "-o", out, "--input-shape", "x=2,3,4,5")
    assert r.returncode == 0, r.stderr
    text = (out / "model.h").read_text()
    assert "#define MODEL_INPUT_0_SHAPE { 2, 3, 4, 5 }" in text


# ---------------------------------------------------------------------------
# success paths

def test_gen_writes_header_and_plan(models, tmp_path):
    out = tmp_path / "out"
    plan = tmp_path / "plans" / "kws.json"
    r = cli("gen", models / "small.onnx", "--name", "kws", "-o", out, "--plan-out", plan)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert files_in(out) == [".cuvil-mcu-files", "kws.h"]
    header = (out / "kws.h").read_text()
    assert "int kws_run(void *arena);" in header and "#define KWS_ARENA_SIZE" in header
    doc = json.loads(plan.read_text())
    arena = int(re.search(r"#define KWS_ARENA_SIZE\s+(\d+)u", header).group(1))
    assert doc["arena_size"] == arena
    assert {t["name"] for t in doc["tensors"]} >= {"x", "y"}
    for line in ("ops ", "MACs ", "flash ", "arena ", "lower bound"):
        assert line in r.stdout, r.stdout
    assert re.search(rf"arena {arena:,} B", r.stdout), r.stdout
    assert re.search(rf"lower bound {doc['lower_bound']:,} B", r.stdout), r.stdout
    assert "kws.h" in r.stdout and str(plan) in r.stdout
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "kws.h").stat().st_mode & 0o777 == 0o666 & ~umask, "header mode ignores the umask"


def test_run_npy_single_and_stacked(models, tmp_path):
    m = small_model()
    rng = np.random.RandomState(21)
    x1 = rng.randn(1, 3, 4, 5).astype(np.float32)
    np.save(tmp_path / "one.npy", x1)
    r = cli("run", models / "small.onnx", "-i", tmp_path / "one.npy", "-o", tmp_path / "y1.npy")
    assert r.returncode == 0, r.stderr
    assert "y: float32[1, 60]" in r.stdout
    assert_close(np.load(tmp_path / "y1.npy"), run_ort(m, {"x": x1})[0], 1e-5, "run single sample")

    xs = rng.randn(4, 1, 3, 4, 5).astype(np.float32)
    np.save(tmp_path / "many.npy", xs)
    r = cli("run", models / "small.onnx", "-i", tmp_path / "many.npy", "-o", tmp_path / "ys.npy")
    assert r.returncode == 0, r.stderr
    ys = np.load(tmp_path / "ys.npy")
    assert ys.shape == (4, 1, 60)
    for s in range(4):
        assert_close(ys[s], run_ort(m, {"x": xs[s]})[0], 1e-5, f"run stacked sample {s}")


def test_run_npz_two_inputs(models, tmp_path):
    m = two_input_model()
    rng = np.random.RandomState(22)
    a, b = rng.randn(2, 7).astype(np.float32), rng.randn(7).astype(np.float32)
    np.savez(tmp_path / "in.npz", a=a, b=b)
    r = cli("run", models / "two.onnx", "-i", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out.npz")
    expect = run_ort(m, {"a": a, "b": b})
    assert sorted(got.files) == ["y0", "y1"]
    assert_close(got["y0"], expect[0], 1e-5, "y0")
    assert_close(got["y1"], expect[1], 1e-5, "y1")


def test_boards_lists_every_board():
    r = cli("boards")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()[1:]
    ids = [row.split()[0] for row in rows]
    assert len(ids) >= 14 and len(set(ids)) == len(ids)
    for b in ("host", "qemu-mps2-an385", "qemu-mps2-an386", "qemu-mps2-an500", "qemu-mps2-an505", "qemu-mps3-an547"):
        assert b in ids, ids
    pico = next(row for row in rows if row.startswith("rpi-pico "))
    assert "264 KB" in pico and "2048 KB" in pico


# ---------------------------------------------------------------------------
# gen never overwrites a user's file (issue 14.3), lists what it wrote, and
# an interrupted or refused write leaves nothing behind (issue 11.9)

PROJECT = ["model.h", "main.c", "startup.c", "linker.ld", "Makefile"]   # (qemu boards: + cuvil_board.h, ...)


def test_gen_refuses_a_users_files_until_force(models, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    mine = {"main.c": "int main(void) { return 42; }\n", "Makefile": "all:\n\techo mine\n"}
    for name, text in mine.items():
        (out / name).write_text(text)
    argv = ["gen", models / "small.onnx", "--board", "qemu-mps2-an386", "-o", out]
    msg = fails(cli(*argv))
    assert "main.c" in msg and "Makefile" in msg and "--force" in msg, msg
    assert sorted(p.name for p in out.iterdir()) == ["Makefile", "main.c"], "gen wrote beside the refused files"
    assert all((out / n).read_text() == t for n, t in mine.items())

    r = cli(*argv, "--force")
    assert r.returncode == 0, r.stderr
    assert (out / "main.c").read_text() != mine["main.c"]
    listed = re.search(r"^wrote    (\d+) files in (.*?): (.*)$", r.stdout, re.M)
    assert listed, r.stdout
    names = listed.group(3).split(", ")
    on_disk = sorted(p.name for p in out.iterdir() if p.name != ".cuvil-mcu-files")
    assert sorted(names) == on_disk and int(listed.group(1)) == len(names), (names, on_disk)
    assert set(PROJECT) <= set(names) and listed.group(2).rstrip("/") == str(out)

    # gen's own unchanged files are replaced without --force (a second run of the same command)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = cli(*argv)
    assert r.returncode == 0, r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before

    # a generated file the user edited is theirs now
    with open(out / "model.h", "a") as f:
        f.write("/* my tweak */\n")
    msg = fails(cli(*argv, "--name", "model"))
    assert "model.h" in msg and "main.c" not in msg and "changed since" in msg, msg
    assert (out / "model.h").read_text().endswith("/* my tweak */\n")


def test_manifest_is_sha256sum_checkable(models, tmp_path):
    import hashlib
    out = tmp_path / "out"
    plan = tmp_path / "plan.json"
    r = cli("gen", models / "small.onnx", "-o", out, "--plan-out", plan)
    assert r.returncode == 0, r.stderr
    # each file is recorded in the manifest of its folder: -o's, and the plan's own
    for folder, want in ((out, ["model.h"]), (tmp_path, ["plan.json"])):
        rows = [line.split("  ", 1) for line in (folder / ".cuvil-mcu-files").read_text().splitlines()
                if not line.startswith("#")]
        assert sorted(rel for _, rel in rows) == want
        for digest, rel in rows:
            assert hashlib.sha256((folder / rel).read_bytes()).hexdigest() == digest, rel
    assert f"wrote    2 files in {out}/: model.h; {plan}" in r.stdout, r.stdout
    # the same --plan-out again: gen's own file, replaced; a file it did not write: refused
    assert cli("gen", models / "small.onnx", "-o", out, "--plan-out", plan).returncode == 0
    # ... also by a gen into another -o folder (the plan's folder knows it)
    assert cli("gen", models / "small.onnx", "-o", tmp_path / "out2", "--plan-out", plan).returncode == 0
    (tmp_path / "notes.json").write_text("{}\n")
    msg = fails(cli("gen", models / "small.onnx", "-o", out, "--plan-out", tmp_path / "notes.json"))
    assert "notes.json" in msg and (tmp_path / "notes.json").read_text() == "{}\n"


SIGNAL_RUNNER = """
import os, signal, sys
from cuvil_mcu import cli
sig, when = getattr(signal, sys.argv[1]), sys.argv[2]
real_fdopen, real_replace = os.fdopen, os.replace
def fdopen(fd, *a, **k):   # the first file is staged under its temporary name: the signal arrives now
    if when == "staged":
        os.kill(os.getpid(), sig)
    return real_fdopen(fd, *a, **k)
def replace(a, b):         # the first staged file was just renamed into place
    real_replace(a, b)
    if when == "renaming":
        os.kill(os.getpid(), sig)
os.fdopen, os.replace = fdopen, replace
sys.exit(cli.main(sys.argv[3:]))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_while_files_are_staged_leaves_nothing(models, tmp_path, sig):
    out = tmp_path / "out"
    for when in ("staged", "renaming"):
        d = out / when
        r = subprocess.run([sys.executable, "-c", SIGNAL_RUNNER, sig, when, "gen", str(models / "small.onnx"),
                            "--board", "qemu-mps2-an386", "-o", str(d), "--no-cache"],
                           env=ENV, capture_output=True, text=True, timeout=120)
        assert r.returncode == {"SIGTERM": 143, "SIGINT": 130}[sig], (when, r.returncode, r.stderr)
        assert r.stderr.strip().splitlines() == [f"cuvil-mcu: interrupted ({sig})"], r.stderr
        left = files_in(d)
        if when == "staged":   # nothing renamed yet: no file, no folder
            assert left == [], left
        else:                  # renames already under way finish: every file, no temporary one
            assert "model.h" in left and ".cuvil-mcu-files" in left and "main.c" in left, left
            assert not [f for f in left if f.startswith(".") and f != ".cuvil-mcu-files"], left


def test_file_size_limit_is_one_line_and_writes_nothing(models, tmp_path):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    out = tmp_path / "deep" / "out"
    r = subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", "gen", str(models / "small.onnx"), "-o", str(out),
                        "--no-cache"], env=ENV, capture_output=True, text=True, timeout=120, preexec_fn=limit)
    msg = fails(r)
    assert "File too large" in msg and "ulimit -f" in msg and "model.h" in msg, msg
    assert not (tmp_path / "deep").exists(), files_in(tmp_path)


def test_sim_help_names_its_real_default_board():
    r = subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", "sim", "--help"], capture_output=True, text=True,
                       env=dict(ENV, COLUMNS="400"), timeout=60)   # wide: argparse wraps at hyphens
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "default qemu-mps2-an386" in text and "default host" not in text, text


def test_run_takes_samples_on_the_batch_axis(models, tmp_path):
    """A batch-1 model's samples as [samples, 3, 4, 5] (what a training set
    holds), without the extra axis; outputs come back as [samples, 60]."""
    m = small_model()
    xs = np.random.RandomState(23).randn(5, 3, 4, 5).astype(np.float32)
    np.save(tmp_path / "xs.npy", xs)
    r = cli("run", models / "small.onnx", "-i", tmp_path / "xs.npy", "-o", tmp_path / "ys.npy")
    assert r.returncode == 0, r.stderr
    ys = np.load(tmp_path / "ys.npy")
    assert ys.shape == (5, 60), ys.shape
    for s in range(5):
        assert_close(ys[s], run_ort(m, {"x": xs[s:s + 1]})[0][0], 1e-5, f"sample {s}")


# ---------------------------------------------------------------------------
# gen's summary (issue 14.6): kernel variant per op, views apart, int8 I/O
# quantization, the no-FPU warning, one RAM statement

def _summary(model, **kw) -> str:
    from cuvil_mcu.compiler import compile_model
    return compile_model(model, **kw).summary()


def _line(summary: str, head: str) -> str:
    found = [ln for ln in summary.splitlines() if ln.startswith(head)]
    assert len(found) == 1, f"{len(found)} '{head}' lines in:\n{summary}"
    return found[0]


def test_summary_counts_kernels_not_views():
    one = make_model([node("Relu", ["x"], ["r"]), node("Flatten", ["r"], ["y"])], {"x": ((1, 2, 3), "float32")},
                     ["y"])
    s = _summary(one)
    assert _line(s, "ops ") == "ops      1 kernel, 1 view (Flatten: no code)", s
    assert _line(s, "kernels ") == "kernels  portable C: Relu", s
    assert "1 kernels" not in s and "Flatten" not in _line(s, "kernels ")


def test_summary_ram_is_one_statement(models):
    from cuvil_mcu.compiler import compile_model
    c = compile_model(str(models / "small.onnx"), board="qemu-mps2-an386")
    s = c.summary()
    ram = _line(s, "RAM ")
    header_ram = int(re.search(r"#define MODEL_RAM_SIZE\s+(\d+)u", c.header).group(1))
    assert ram.startswith(f"RAM      {header_ram:,} B = arena {c.plan.arena_size:,} B") and "MODEL_RAM_SIZE" in ram, ram
    assert "RAM+stk" not in s and "kernel stack" not in s
    assert re.search(r"^budget   RAM .*stack reserve [\d,]+", s, re.M), s


@pytest.mark.parametrize("board,fpu", [("qemu-mps2-an385", False), ("rpi-pico", False), ("qemu-mps2-an386", True)])
def test_float_model_on_a_core_without_fpu_is_warned(models, board, fpu):
    s = _summary(str(models / "small.onnx"), board=board)
    warned = [ln for ln in s.splitlines() if ln.startswith("warning") and "no FPU" in ln]
    assert bool(warned) != fpu, s
    if warned:
        assert "software floating point" in warned[0] and "--quantize int8" in warned[0], warned


def test_summary_names_isa_variants_and_int8_io():
    """The shared int8 KWS model: its 1x1/3x3 convolutions and the dense layer
    take the board's ISA kernels, softmax stays portable C; the I/O lines
    carry the scale and zero point of the model's own QuantizeLinear."""
    import shared_models
    if not shared_models.available():
        pytest.skip("../shared/models not present")
    path = str(shared_models.model_path("kws_dscnn"))
    m = onnx.load(path)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    t = m.graph.input[0].name
    while True:   # through the Reshape tf2onnx puts first, to the DequantizeLinear that gives the input its scale
        q_in = next(n for n in m.graph.node if t in n.input)
        if q_in.op_type == "DequantizeLinear":
            break
        assert q_in.op_type in ("Reshape", "Transpose"), q_in.op_type
        t = q_in.output[0]
    scale, zp = float(inits[q_in.input[1]]), int(inits[q_in.input[2]])
    for board, variant in (("qemu-mps2-an386", "DSP"), ("qemu-mps3-an547", "Helium"), ("host", None)):
        s = _summary(path, board=board)
        kernels = _line(s, "kernels ")
        if variant:
            assert re.search(rf"{variant}: QLinearConv x9, .*QGemm", kernels), kernels
            assert re.search(r"portable C: .*QLinearSoftmax", kernels), kernels
        else:
            assert kernels.startswith("kernels  portable C: QLinearConv x9") and ";" not in kernels, kernels
        inp = _line(s, "input ")
        assert inp.endswith(f", scale {scale:.9g} zero point {zp}"), (inp, scale, zp)
        assert _line(s, "output ").startswith("output   ") and "zero point" in _line(s, "output ")


def test_sample_layouts_have_one_reading():
    from cuvil_mcu import samples
    shape = (1, 3, 4, 5)
    assert samples.layout_of((1, 3, 4, 5), shape) == samples.ONE
    assert samples.layout_of((7, 1, 3, 4, 5), shape) == samples.STACKED
    assert samples.layout_of((7, 3, 4, 5), shape) == samples.BATCH
    assert samples.layout_of((7, 3, 4, 6), shape) is None
    assert samples.layout_of((7, 3, 4), (2, 3, 4)) is None          # batch 2: no batch-axis reading
    assert samples.layout_of((2, 3, 4), (2, 3, 4)) == samples.ONE
    x = np.arange(7 * 60, dtype=np.float32).reshape(7, 3, 4, 5)
    st = samples.to_samples(x, shape, samples.BATCH)
    assert st.shape == (7, 1, 3, 4, 5) and np.array_equal(st[3, 0], x[3])
    y = np.arange(7 * 12).reshape(7, 1, 12)
    assert samples.from_samples(y, (1, 12), samples.BATCH).shape == (7, 12)
    assert samples.from_samples(y, (1, 12), samples.STACKED).shape == (7, 1, 12)
    assert samples.from_samples(y[:1], (1, 12), samples.ONE).shape == (1, 12)
