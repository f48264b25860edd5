"""`gen --emit rust`: the generated crate builds and passes `cargo test
--offline` (the model against reference outputs) for a float, an int8 and a
two-input/two-output model; a corrupted reference makes it fail; its
`extern "C"` block is exactly the header's API as pycparser reads it; bad
crate names are refused before anything is written; the output is
deterministic; build.rs cross-compiles for Cortex-M with the right flags; the
firmware example runs."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import models
from helpers import run_ort
from update_golden import two_input_model

from cuvil_mcu import cli
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import CuvilError
from cuvil_mcu.integrations import rust

REPO = Path(__file__).resolve().parent.parent
KWS_INT8 = Path("/work/shared/models/kws_dscnn/model_int8.onnx")

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo not installed (https://rustup.rs)")


@pytest.fixture(scope="module")
def cargo_env(tmp_path_factory):
    base = tmp_path_factory.mktemp("cargo")
    env = {k: v for k, v in os.environ.items()
           if not re.match(r"(TARGET_)?(CC|AR|CFLAGS)(_.*)?$|RUSTFLAGS$|CARGO_BUILD_.*", k)}
    env.update(CARGO_TARGET_DIR=str(base / "target"), CARGO_HOME=str(base / "home"), CARGO_NET_OFFLINE="true",
               RUSTFLAGS="-D warnings")  # the generated crate compiles warning-free
    (base / "home").mkdir()
    return env


def cargo(args: list[str], cwd: Path, env: dict, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["cargo", *args, "--offline"], cwd=cwd, env=env, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise AssertionError(f"cargo {' '.join(args)} in {cwd} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


def gen(model_path: Path, out: Path, name: str, *extra: str) -> Path:
    assert cli.main(["gen", str(model_path), "--name", name, "--emit", "rust", "-o", str(out), *extra]) == 0
    return out / "rust"


def read_bin(path: Path, dtype: str, shape) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), np.dtype(dtype).newbyteorder("<")).reshape(shape)


@pytest.fixture(scope="module")
def float_crate(tmp_path_factory):
    d = tmp_path_factory.mktemp("ae")
    import onnx
    onnx.save(models.autoencoder(), d / "ae.onnx")
    return gen(d / "ae.onnx", d / "out", "ae"), models.autoencoder()


@pytest.fixture(scope="module")
def int8_crate(tmp_path_factory):
    d = tmp_path_factory.mktemp("kws8")
    if KWS_INT8.exists():
        return gen(KWS_INT8, d / "out", "kws8"), KWS_INT8
    import onnx
    onnx.save(models.dscnn(), d / "dscnn.onnx")
    calib = np.random.default_rng(3).standard_normal((16, 1, 1, 49, 10)).astype(np.float32)
    np.savez(d / "calib.npz", input=calib)
    return gen(d / "dscnn.onnx", d / "out", "kws8", "--quantize", "int8", "--calibration", str(d / "calib.npz"),
               "--io", "int8"), \
        d / "dscnn.onnx"


# ---------------------------------------------------------------------------
# cargo test of generated crates

def test_float_crate_passes_cargo_test(float_crate, cargo_env):
    crate, model = float_crate
    # the stored reference is itself checked against onnxruntime
    x = read_bin(crate / "tests/data/input_0.bin", "float32", (1, 640))
    y = read_bin(crate / "tests/data/output_0.bin", "float32", (1, 640))
    np.testing.assert_allclose(y, run_ort(model, {"features": x})[0], rtol=1e-4, atol=1e-4)
    r = cargo(["test"], crate, cargo_env)
    assert "test matches_reference_outputs ... ok" in r.stdout
    assert "test wrong_input_length_is_an_error ... ok" in r.stdout
    assert "test status_codes_come_from_the_header ... ok" in r.stdout


def test_int8_crate_passes_cargo_test(int8_crate, cargo_env):
    crate, model = int8_crate
    lib = (crate / "src/lib.rs").read_text()
    assert "pub type Input0 = ffi::kws8_input_0_t;" in lib and "pub type kws8_input_0_t = i8;" in lib
    assert "pub const INPUT_0_SCALE: f32 =" in lib and "pub const OUTPUT_0_ZERO_POINT: i32 =" in lib
    header = (crate / "c/kws8.h").read_text()
    for key in ("INPUT_0_ZERO_POINT", "OUTPUT_0_ZERO_POINT"):
        zp = re.search(rf"#define KWS8_{key} (-?\d+)", header).group(1)
        assert f"pub const {key}: i32 = {zp};" in lib
    for key in ("INPUT_0_SCALE", "OUTPUT_0_SCALE"):
        scale = re.search(rf"#define KWS8_{key} (\S+)f", header).group(1)
        lit = re.search(rf"pub const {key}: f32 = (\S+)_f32;", lib).group(1)
        assert np.float32(float(lit)) == np.float32(float(scale))
    r = cargo(["test"], crate, cargo_env)
    assert "test matches_reference_outputs ... ok" in r.stdout
    assert "test quantize_input_0_matches_onnx_rounding ... ok" in r.stdout
    assert "test quantize_output_0_matches_onnx_rounding ... ok" in r.stdout


def test_two_input_two_output_crate(tmp_path, cargo_env):
    import onnx
    m = two_input_model()
    onnx.save(m, tmp_path / "two.onnx")
    crate = gen(tmp_path / "two.onnx", tmp_path / "out", "two")
    lib = (crate / "src/lib.rs").read_text()
    assert "pub fn run_multi(" in lib and "pub fn run(" not in lib
    assert "pub fn input_1(&mut self)" in lib and "pub fn output_1(&self)" in lib
    c = compile_model(m, name="two")
    feeds = {n: read_bin(crate / f"tests/data/input_{i}.bin", "float32", c.graph.tensors[n].shape)
             for i, n in enumerate(c.graph.inputs)}
    for i, want in enumerate(run_ort(m, feeds)):
        got = read_bin(crate / f"tests/data/output_{i}.bin", "float32", want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    r = cargo(["test"], crate, cargo_env)
    assert "test matches_reference_outputs ... ok" in r.stdout


def _break(path: Path, dtype: str, index: int, delta) -> None:
    a = np.frombuffer(path.read_bytes(), np.dtype(dtype).newbyteorder("<")).copy()
    a[index] = a[index] + np.asarray(delta, a.dtype)
    path.write_bytes(a.tobytes())


def test_broken_reference_fails_cargo_test(float_crate, int8_crate, cargo_env):
    """The comparison is real: one int8 output off by one LSB, or one float
    output off by 10x the tolerance, fails `cargo test` (the data is changed
    in place, so only the test binary rebuilds, and restored afterwards)."""
    for (crate, _), dtype, delta, name in ((int8_crate, "int8", 1, "int8"), (float_crate, "float32", 2e-3, "float")):
        data = crate / "tests/data/output_0.bin"
        good = data.read_bytes()
        try:
            _break(data, dtype, 3, delta)
            r = cargo(["test", "--test", "reference"], crate, cargo_env, ok=False)
        finally:
            data.write_bytes(good)
        assert r.returncode != 0, f"{name}: cargo test passed with corrupted reference data"
        assert "matches_reference_outputs ... FAILED" in r.stdout
        assert "output 0: 1 of" in r.stdout and "first at [3]" in r.stdout, r.stdout[-2000:]


# ---------------------------------------------------------------------------
# the bindings come from the header

# Independent of rust.py: pycparser's view of each C parameter type
# (test_header._type_str spelling) -> the Rust FFI type it must become.
C_TO_RUST = {
    "void *": "*mut core::ffi::c_void",
    "const void *": "*const core::ffi::c_void",
    "int": "core::ffi::c_int",
    "const char *": "*const core::ffi::c_char",
    "const void *const *": "*const *const core::ffi::c_void",
    "void *const *": "*const *mut core::ffi::c_void",
}


def test_extern_block_is_the_headers_api(float_crate, tmp_path):
    from pycparser import c_ast
    from test_header import _file_scope, _parse, _type_str

    crate, _ = float_crate
    header = (crate / "c/ae.h").read_text()
    decls = _file_scope(_parse(header, tmp_path, []))
    header_funcs = {}
    for d, is_def in decls:
        if isinstance(d.type, c_ast.FuncDecl) and "static" not in d.storage:
            params = [_type_str(p.type) for p in (d.type.args.params if d.type.args else [])]
            header_funcs[d.name] = ([C_TO_RUST[p] for p in params], C_TO_RUST[_type_str(d.type.type)])
    lib = (crate / "src/lib.rs").read_text()
    block = re.search(r'extern "C" \{\n(.*?)\n    \}', lib, re.S).group(1)
    rust_funcs = {}
    for m in re.finditer(r"pub fn (\w+)\((.*?)\)(?: -> (.*?))?;", block):
        params = [p.split(": ", 1)[1] for p in m.group(2).split(", ") if p]
        rust_funcs[m.group(1)] = (params, m.group(3))
    assert set(header_funcs) == {"ae_input", "ae_output", "ae_run", "ae_run_copy", "ae_status_str"}
    assert rust_funcs == header_funcs


def test_bindings_follow_the_header():
    """A declaration added to the header appears in the bindings; a C type
    without an exact Rust equivalent is an error, not a guess."""
    c = compile_model(two_input_model(), name="two")
    extra = "extern int two_extra(float x, const int8_t *p, unsigned long n);\n#endif /* TWO_H_INCLUDED */"
    header = c.header.replace("#endif /* TWO_H_INCLUDED */", extra, 1)
    api = rust.parse_api(header, "two")
    f = {f["name"]: f for f in api["funcs"]}["two_extra"]
    assert f["params"] == [("x", "f32"), ("p", "*const i8"), ("n", "core::ffi::c_ulong")]
    assert f["ret"] == "core::ffi::c_int"
    bad = c.header.replace("#endif /* TWO_H_INCLUDED */",
                           "extern int two_bad(struct two_s *s);\n#endif", 1)
    with pytest.raises(CuvilError, match="no Rust mapping"):
        rust.parse_api(bad, "two")


# ---------------------------------------------------------------------------
# names, determinism, README

@pytest.mark.parametrize("name", ["fn", "Self", "Type", "9lives", "std", "core", "a.b", "_x", "x" * 65, "kws model"])
def test_bad_crate_name_is_one_line_and_writes_nothing(name, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["gen", str(REPO / "examples/kws_float.onnx"), "--name", name, "--emit", "rust", "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert len(err.splitlines()) == 1 and "Rust" in err and f"'{name}'" in err, err
    assert not out.exists()


def test_output_is_deterministic_and_readme_lists_the_model(tmp_path):
    a = gen(REPO / "examples/kws_float.onnx", tmp_path / "a", "kws")
    b = gen(REPO / "examples/kws_float.onnx", tmp_path / "b", "kws")
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    assert {Path("Cargo.toml"), Path("build.rs"), Path("src/lib.rs"), Path("tests/reference.rs"), Path("README.md"),
            Path("c/kws.h"), Path("c/shim.c"), Path("tests/data/input_0.bin"), Path("tests/data/output_0.bin")} \
        <= set(files_a)
    for f in files_a:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f"{f} differs between two runs"
    assert (a / "c/kws.h").read_bytes() == (tmp_path / "a/kws.h").read_bytes()
    c = compile_model(str(REPO / "examples/kws_float.onnx"), name="kws")
    readme = (a / "README.md").read_text()
    for needle in ("| input | 0 | `input` | float32 | [1, 1, 49, 10] | 490 |", "| output | 0 | `probs` | float32 | [1, 12] |",
                   f"arena (RAM): {c.plan.arena_size} bytes", f"constants (flash): {c.weights_bytes} bytes",
                   "`Input0` = `f32`", "cargo test --offline"):
        assert needle in readme, needle
    assert re.search(r'^name = "kws"$', (a / "Cargo.toml").read_text(), re.M)
    assert "[dependencies]\n" in (a / "Cargo.toml").read_text() and \
        (a / "Cargo.toml").read_text().rstrip().endswith("[dependencies]")
    assert (a / "c/shim.c").read_text() == '#define KWS_IMPLEMENTATION\n#include "kws.h"\n'
    assert "#![no_std]" in (a / "src/lib.rs").read_text()


# ---------------------------------------------------------------------------
# build.rs for Cortex-M, run by hand as cargo would

def _readelf_attrs(lib: Path) -> str:
    return subprocess.run(["arm-none-eabi-readelf", "-A", str(lib)], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or shutil.which("arm-none-eabi-readelf") is None,
                    reason="arm-none-eabi-gcc not installed (apt-get install gcc-arm-none-eabi)")
def test_build_script_cross_compiles_for_cortex_m(tmp_path):
    import onnx
    onnx.save(two_input_model(), tmp_path / "two.onnx")
    crate = gen(tmp_path / "two.onnx", tmp_path / "out", "kws", "--board", "nucleo-f746zg")
    exe = tmp_path / "build_script"
    subprocess.run(["rustc", "--edition", "2021", str(crate / "build.rs"), "-o", str(exe)],
                   check=True, capture_output=True)
    env = {"PATH": os.environ["PATH"], "CARGO_MANIFEST_DIR": str(crate), "OPT_LEVEL": "s"}
    cases = [
        # the board's own target: its flags (Cortex-M7, FPv5 double precision)
        ("thumbv7em-none-eabihf", "board", ['Tag_CPU_name: "7E-M"', "Tag_FP_arch: FPv5/FP-D16 for ARMv8",
                                            "Tag_ABI_VFP_args: VFP registers"]),
        ("thumbv6m-none-eabi", "v6m", ['Tag_CPU_name: "6S-M"']),
        ("thumbv8m.main-none-eabihf", "v8m", ['Tag_CPU_name: "8-M.MAIN"', "Tag_ABI_VFP_args: VFP registers"]),
    ]
    for target, tag, expect in cases:
        out = tmp_path / tag
        out.mkdir()
        r = subprocess.run([str(exe)], env={**env, "TARGET": target, "OUT_DIR": str(out)},
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert f"cargo:rustc-link-search=native={out}" in lines
        assert "cargo:rustc-link-lib=static=cuvil_kws" in lines and "cargo:rustc-link-lib=m" in lines
        assert any(line.startswith("cargo:rustc-link-search=native=") and "arm-none-eabi" in line for line in lines)
        attrs = _readelf_attrs(out / "libcuvil_kws.a")
        for e in expect:
            assert e in attrs, f"{target}: {e} missing in\n{attrs}"
        if target == "thumbv6m-none-eabi":
            assert "VFP registers" not in attrs
    # the board's flags only apply to its own target: the soft-float v7E-M target gets the triple's
    out = tmp_path / "v7em_soft"
    out.mkdir()
    r = subprocess.run([str(exe)], env={**env, "TARGET": "thumbv7em-none-eabi", "OUT_DIR": str(out)},
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    attrs = _readelf_attrs(out / "libcuvil_kws.a")
    assert 'Tag_CPU_name: "7E-M"' in attrs and "VFP registers" not in attrs and "FPv5" not in attrs
    # an unknown thumb target names the variable to set
    r = subprocess.run([str(exe)], env={**env, "TARGET": "thumbv9x-none-eabi", "OUT_DIR": str(out)},
                       capture_output=True, text=True)
    assert r.returncode != 0 and "CFLAGS_thumbv9x_none_eabi" in r.stderr


# ---------------------------------------------------------------------------
# firmware_examples/rust, with the commands of its README

def test_firmware_example_runs(tmp_path, cargo_env):
    ex = tmp_path / "rust"
    shutil.copytree(REPO / "firmware_examples/rust", ex, ignore=shutil.ignore_patterns("out", "target", "Cargo.lock"))
    readme = (ex / "README.md").read_text()
    assert "cuvil-mcu gen examples/kws_float.onnx --name kws --emit rust -o firmware_examples/rust/out" in readme
    assert "cargo run --release --offline" in readme
    gen(REPO / "examples/kws_float.onnx", ex / "out", "kws")
    r = cargo(["run", "--release"], ex / "app", cargo_env)
    import onnx
    m = onnx.load(str(REPO / "examples/kws_float.onnx"))
    x = (((np.arange(490) % 17).astype(np.float32) - 8) / 8).reshape(1, 1, 49, 10)
    want = run_ort(m, {"input": x})[0].reshape(-1)
    got = np.array([float(line.split()[2]) for line in r.stdout.splitlines() if line.startswith("score ")])
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert f"class {int(np.argmax(want))} (" in r.stdout
    assert "short input refused: 10 of 490" in r.stdout


def test_one_input_two_outputs_with_odd_names(tmp_path, cargo_env):
    """Tensor names with quotes, backslashes, newlines and non-ASCII, and the
    injections of tests/test_escape.py (a tensor name that ends a doc
    comment line and starts Rust code, a model file name with a newline and
    a Markdown fence), reach Rust strings and docs escaped;
    one input and two outputs take run_multi with one-element tuples."""
    import onnx
    from helpers import make_model, node

    names = ['in"put\\1', "out`\n/\u03c0", "*/ y2\npub fn evil_injected() {} //"]
    m = make_model([node("Relu", [names[0]], [names[1]]), node("Neg", [names[0]], [names[2]])],
                   {names[0]: ([3, 5], "float32")}, [names[1], names[2]])
    model = tmp_path / "odd `x`\n```\n$(y) \"q\".onnx"
    onnx.save(m, model)
    crate = gen(model, tmp_path / "out", "odd")
    lib = (crate / "src/lib.rs").read_text()
    assert 'pub const INPUT_0_NAME: &str = "in\\u{22}put\\u{5c}1";' in lib
    assert "inputs: (&[Input0],)," in lib and "Result<(&[Output0], &[Output1]), Error>" in lib
    assert not [ln for ln in lib.splitlines() if "evil_injected" in ln and not ln.lstrip().startswith(("//", "pub const"))]
    from markdown_it import MarkdownIt
    toks = MarkdownIt("commonmark").parse((crate / "README.md").read_text())
    spans = [c.content for t in toks for c in (t.children or []) if c.type == "code_inline"]
    assert 'odd `x` ``` $(y) "q".onnx' in spans   # the file name, on one line, in one code span
    assert [t.info for t in toks if t.type == "fence"] == ["text", "toml", "rust", "sh", "sh"]
    r = cargo(["test"], crate, cargo_env)
    assert "test matches_reference_outputs ... ok" in r.stdout
