"""The generated header against its contract: it compiles warning-free as C99,
C11 and C++ on gcc and clang, links (a misspelled IMPLEMENTATION macro cannot
pass), runs clean under the sanitizers, declares exactly the documented API,
two models live in one program, output is deterministic, the API behaves on
bad arguments, and a golden snapshot pins the text."""
from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import HOST_FMA, assert_close, make_model, node, run_ort
from update_golden import GOLDEN, GOLDEN_DIR, render, small_model, two_input_model

from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import host

WARN = ["-Wall", "-Wextra", "-Werror", "-pedantic"]
REPO = Path(__file__).resolve().parent.parent

# (compiler, language standard, extra flags); C++ compilers get -x c++. The
# GNU modes are what firmware projects compile with (gcc's default
# -ffp-contract=fast fuses a * b + c; HOST_FMA lets it on x86-64).
MATRIX = [
    ("gcc", "c99", []), ("gcc", "c11", []), ("clang", "c99", []), ("clang", "c11", []),
    ("g++", "c++11", []), ("g++", "c++17", []), ("clang++", "c++11", []), ("clang++", "c++17", []),
    ("gcc", "gnu99", HOST_FMA), ("gcc", "gnu11", HOST_FMA), ("clang", "gnu11", ["-ffp-contract=fast", *HOST_FMA]),
    ("g++", "gnu++17", HOST_FMA),
]


def need(cc: str) -> None:
    if shutil.which(cc) is None:
        pkg = {"gcc": "gcc", "g++": "g++", "clang": "clang", "clang++": "clang"}.get(cc, cc)
        pytest.skip(f"{cc} not installed (apt-get install -y --no-install-recommends {pkg})")


def is_cxx(cc: str) -> bool:
    return cc.endswith("++")


def sh(cmd: list[str], cwd: Path, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def c_list(a: np.ndarray) -> str:
    """Decimal float literals that read back to exactly these float32 values
    (valid in C89..C11 and every C++)."""
    return ", ".join(f"{float(v)!r}f" for v in np.asarray(a, np.float32).reshape(-1))


def parse_hex_floats(text: str, tag: str) -> np.ndarray:
    vals = [float.fromhex(line.split()[1]) for line in text.splitlines() if line.startswith(tag + " ")]
    return np.array(vals, np.float32)


SMALL_X = np.random.RandomState(7).randn(1, 3, 4, 5).astype(np.float32)
TWO_A = np.random.RandomState(8).randn(2, 7).astype(np.float32)
TWO_B = np.random.RandomState(9).randn(7).astype(np.float32)


@pytest.fixture(scope="module")
def small():
    m = small_model()
    c = compile_model(m)
    expect = run_ort(m, {"x": SMALL_X})[0]
    return m, c, expect


@pytest.fixture(scope="module")
def two():
    m = two_input_model()
    expect = run_ort(m, {"a": TWO_A, "b": TWO_B})
    return m, expect


# ---------------------------------------------------------------------------
# compile matrix + link test

USE_SRC = """\
#include "model.h"
int use_model(void *arena);
int use_model(void *arena)
{
    float *in = (float *)model_input(arena, 0);
    in[0] = 1.0f;
    return model_run(arena) == MODEL_OK ? 0 : 1;
}
"""

# stb pattern: the header was already included without the implementation.
IMPL_SRC = """\
#include "model.h"
#define MODEL_IMPLEMENTATION
#include "model.h"
#include "model.h"
"""

MAIN_SRC = """\
#include <stdio.h>
#include <string.h>
#include "model.h"
static unsigned char arena[MODEL_ARENA_SIZE] MODEL_ARENA_ATTR;
static const float x[MODEL_INPUT_0_SIZE] = { %(x)s };
int main(void)
{
    float y[MODEL_OUTPUT_0_SIZE];
    const void *ins[1];
    void *outs[1];
    unsigned i;
    ins[0] = x;
    outs[0] = y;
    if (model_run_copy(arena, ins, outs) != MODEL_OK) return 1;
    for (i = 0; i < MODEL_OUTPUT_0_SIZE; ++i) printf("y %%a\\n", (double)y[i]);
    return 0;
}
"""

STATIC_SRC = """\
#define MODEL_STATIC
#define MODEL_IMPLEMENTATION
#include "model.h"
int main(void)
{
    static unsigned char arena[MODEL_ARENA_SIZE] MODEL_ARENA_ATTR;
    return model_run(arena);
}
"""


@pytest.mark.parametrize("cc,std,extra", MATRIX, ids=[f"{c}-{s}{'-fast' * ('-ffp-contract=fast' in e)}"
                                                        for c, s, e in MATRIX])
def test_compile_matrix_and_link(cc, std, extra, small, tmp_path):
    need(cc)
    m, c, expect = small
    (tmp_path / "model.h").write_text(c.header)
    ext = ".cpp" if is_cxx(cc) else ".c"
    flags = [f"-std={std}", *extra, *WARN, "-O1", "-I", "."]
    for name, src in (("use", USE_SRC), ("impl", IMPL_SRC), ("main", MAIN_SRC % {"x": c_list(SMALL_X)}),
                      ("static", STATIC_SRC)):
        (tmp_path / (name + ext)).write_text(src)
    # without and with MODEL_IMPLEMENTATION
    sh([cc, *flags, "-c", "use" + ext, "-o", "use.o"], tmp_path)
    sh([cc, *flags, "-c", "impl" + ext, "-o", "impl.o"], tmp_path)
    sh([cc, *flags, "-c", "main" + ext, "-o", "main.o"], tmp_path)
    # link: main (declarations only) + impl (definitions), and run it
    sh([cc, "main.o", "impl.o", "use.o", "-o", "prog", "-lm"], tmp_path)
    y = parse_hex_floats(sh(["./prog"], tmp_path).stdout, "y")
    assert_close(y.reshape(expect.shape), expect, 1e-5, f"{cc} -std={std}: linked program vs onnxruntime")
    # MODEL_STATIC: private API, unused functions must not warn
    sh([cc, *flags, "static" + ext, "-o", "static_prog", "-lm"], tmp_path)


def test_misspelled_implementation_macro_fails_to_link(small, tmp_path):
    """The control for the link test: without the definitions, linking must fail."""
    need("gcc")
    m, c, expect = small
    (tmp_path / "model.h").write_text(c.header)
    (tmp_path / "main.c").write_text(MAIN_SRC % {"x": c_list(SMALL_X)})
    (tmp_path / "impl.c").write_text("#define MODEL_IMPLEMENTAION\n#include \"model.h\"\ntypedef int not_empty;\n")
    sh(["gcc", "-std=c99", *WARN, "-c", "main.c", "impl.c"], tmp_path)
    r = sh(["gcc", "main.o", "impl.o", "-o", "prog", "-lm"], tmp_path, ok=False)
    assert r.returncode != 0 and "model_run_copy" in r.stderr, r.stderr


def test_c_implementation_links_into_cxx_program(small, tmp_path):
    """extern "C": definitions compiled as C, caller compiled as C++."""
    need("gcc")
    need("g++")
    m, c, expect = small
    (tmp_path / "model.h").write_text(c.header)
    (tmp_path / "impl.c").write_text("#define MODEL_IMPLEMENTATION\n#include \"model.h\"\n")
    (tmp_path / "main.cpp").write_text(MAIN_SRC % {"x": c_list(SMALL_X)})
    sh(["gcc", "-std=c99", *WARN, "-c", "impl.c"], tmp_path)
    sh(["g++", "-std=c++11", *WARN, "-c", "main.cpp"], tmp_path)
    sh(["g++", "main.o", "impl.o", "-o", "prog", "-lm"], tmp_path)
    y = parse_hex_floats(sh(["./prog"], tmp_path).stdout, "y")
    assert_close(y.reshape(expect.shape), expect, 1e-5, "C implementation called from C++")


# ---------------------------------------------------------------------------
# sanitizers through the host harness

SAN = ["-O1", "-g", "-fno-omit-frame-pointer", *WARN,
       "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]


def _sanitizer_works(cc: str, tmp: Path) -> bool:
    (tmp / "probe.c").write_text("int main(void) { return 0; }\n")
    r = subprocess.run([cc, "-fsanitize=address,undefined", "probe.c", "-o", "probe"], cwd=tmp,
                       capture_output=True, text=True)
    return r.returncode == 0


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_sanitizers_through_host_harness(cc, small, two, tmp_path):
    need(cc)
    if not _sanitizer_works(cc, tmp_path):
        pytest.skip(f"{cc} has no sanitizer runtime here (clang 14: apt-get install libclang-rt-14-dev)")
    m, c, expect = small
    rng = np.random.RandomState(11)
    xs = np.concatenate([SMALL_X[None], rng.randn(3, 1, 3, 4, 5).astype(np.float32)])
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs], cc=cc, cflags=["-std=c99", *SAN])
    out = host.run(exe, [xs], c.out_specs, len(xs))[0]
    for s in range(len(xs)):
        assert_close(out[s], run_ort(m, {"x": xs[s]})[0], 1e-5, f"{cc} sanitized sample {s}")

    m2, expect2 = two
    c2 = compile_model(m2, name="vww")
    g2 = c2.graph
    exe2 = host.build(c2.header, c2.prefix, [g2.tensors[n].nbytes for n in g2.inputs],
                      [g2.tensors[n].nbytes for n in g2.outputs], cc=cc, cflags=["-std=c99", *SAN])
    outs = host.run(exe2, [TWO_A[None], TWO_B[None]], c2.out_specs, 1)
    for i, (o, e) in enumerate(zip(outs, expect2)):
        assert_close(o[0], e, 1e-5, f"{cc} sanitized two-input model, output {i}")


# ---------------------------------------------------------------------------
# two models in one program

TWO_MODELS_BODY = """\
static const float kx[KWS_INPUT_0_SIZE] = { %(kx)s };
static const float va[VWW_INPUT_0_SIZE] = { %(va)s };
static const float vb[VWW_INPUT_1_SIZE] = { %(vb)s };
static unsigned char karena[KWS_ARENA_SIZE] KWS_ARENA_ATTR;
static unsigned char varena[VWW_ARENA_SIZE] VWW_ARENA_ATTR;
int main(void)
{
    const float *ky, *vy0, *vy1;
    unsigned i;
    memcpy(kws_input(karena, 0), kx, sizeof kx);
    memcpy(vww_input(varena, 0), va, sizeof va);
    memcpy(vww_input(varena, 1), vb, sizeof vb);
    if (kws_run(karena) != KWS_OK || vww_run(varena) != VWW_OK) return 1;
    ky = (const float *)kws_output(karena, 0);
    vy0 = (const float *)vww_output(varena, 0);
    vy1 = (const float *)vww_output(varena, 1);
    for (i = 0; i < KWS_OUTPUT_0_SIZE; ++i) printf("k %%a\\n", (double)ky[i]);
    for (i = 0; i < VWW_OUTPUT_0_SIZE; ++i) printf("v0 %%a\\n", (double)vy0[i]);
    for (i = 0; i < VWW_OUTPUT_1_SIZE; ++i) printf("v1 %%a\\n", (double)vy1[i]);
    return 0;
}
"""


@pytest.mark.parametrize("cc", ["gcc", "clang"])
@pytest.mark.parametrize("layout", ["one_tu", "two_tus"])
def test_two_models_in_one_program(cc, layout, small, two, tmp_path):
    need(cc)
    m, c, expect = small
    m2, expect2 = two
    kws = compile_model(m, name="kws")
    vww = compile_model(m2, name="vww")
    assert kws.prefix == "kws" and vww.prefix == "vww"
    (tmp_path / "kws.h").write_text(kws.header)
    (tmp_path / "vww.h").write_text(vww.header)
    body = TWO_MODELS_BODY % {"kx": c_list(SMALL_X), "va": c_list(TWO_A), "vb": c_list(TWO_B)}
    head = "#include <stdio.h>\n#include <string.h>\n"
    flags = ["-std=c99", *WARN, "-O1", "-I", "."]
    if layout == "one_tu":
        (tmp_path / "main.c").write_text(head + "#define KWS_IMPLEMENTATION\n#define VWW_IMPLEMENTATION\n"
                                         "#include \"kws.h\"\n#include \"vww.h\"\n" + body)
        sh([cc, *flags, "main.c", "-o", "prog", "-lm"], tmp_path)
    else:
        (tmp_path / "kws_impl.c").write_text("#define KWS_IMPLEMENTATION\n#include \"kws.h\"\n")
        (tmp_path / "vww_impl.c").write_text("#define VWW_IMPLEMENTATION\n#include \"vww.h\"\n")
        (tmp_path / "main.c").write_text(head + "#include \"kws.h\"\n#include \"vww.h\"\n" + body)
        sh([cc, *flags, "main.c", "kws_impl.c", "vww_impl.c", "-o", "prog", "-lm"], tmp_path)
    out = sh(["./prog"], tmp_path).stdout
    assert_close(parse_hex_floats(out, "k").reshape(expect.shape), expect, 1e-5, "kws output")
    assert_close(parse_hex_floats(out, "v0").reshape(expect2[0].shape), expect2[0], 1e-5, "vww output 0")
    assert_close(parse_hex_floats(out, "v1").reshape(expect2[1].shape), expect2[1], 1e-5, "vww output 1")


# ---------------------------------------------------------------------------
# the declared API, parsed with pycparser

FAKE_LIBC = {
    "stddef.h": "typedef unsigned long size_t;\n#define NULL ((void *)0)\n",
    "stdint.h": "typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t;\n"
                "typedef unsigned short uint16_t; typedef int int32_t; typedef unsigned int uint32_t;\n"
                "typedef long long int64_t; typedef unsigned long long uint64_t; typedef unsigned long uintptr_t;\n",
    "float.h": "#define FLT_MAX 3.40282347e+38F\n",
    "math.h": "float expf(float); float tanhf(float); float erff(float); float sqrtf(float);\n"
              "float fabsf(float); float powf(float, float); float fmaxf(float, float); float fminf(float, float);\n"
              "float floorf(float); float ceilf(float); float roundf(float); float logf(float);\n"
              "#define INFINITY (1e30f * 1e30f)\n#define NAN (0.0f / 0.0f)\n",
    "string.h": "#include <stddef.h>\nvoid *memcpy(void *, const void *, size_t);\n"
                "void *memset(void *, int, size_t);\n",
}

API = {
    "model_input": "void *(void *, int)",
    "model_output": "const void *(const void *, int)",
    "model_run": "int (void *)",
    "model_run_copy": "int (void *, const void *const *, void *const *)",
    "model_status_str": "const char *(int)",
}


def _type_str(t) -> str:
    from pycparser import c_ast

    if isinstance(t, c_ast.PtrDecl):
        return _type_str(t.type) + " *" + " ".join(t.quals)
    if isinstance(t, c_ast.TypeDecl):
        inner = t.type
        base = " ".join(inner.names) if isinstance(inner, c_ast.IdentifierType) else \
            f"{type(inner).__name__.lower()} {inner.name}"
        return " ".join([*t.quals, base])
    if isinstance(t, c_ast.FuncDecl):
        params = [_type_str(p.type) for p in (t.args.params if t.args else [])]
        return f"{_type_str(t.type)} ({', '.join(params)})".replace("* (", "*(")
    if isinstance(t, c_ast.ArrayDecl):
        return _type_str(t.type) + "[]"
    raise AssertionError(f"unexpected declarator {t}")


def _parse(header: str, tmp: Path, defines: list[str]):
    pycparser = pytest.importorskip("pycparser")
    fake = tmp / "fake_libc"
    fake.mkdir(exist_ok=True)
    for name, text in FAKE_LIBC.items():
        (fake / name).write_text(text)
    (tmp / "model.h").write_text(header)
    # -undef: no __GNUC__, so the GNU attribute branches drop out.
    r = sh(["cc", "-E", "-nostdinc", "-undef", "-I", str(fake), *[f"-D{d}" for d in defines], "model.h"], tmp)
    return pycparser.CParser().parse(r.stdout, "model.h")


def _file_scope(ast):
    from pycparser import c_ast

    out = []
    for e in ast.ext:
        if "fake_libc" in str(e.coord.file):
            continue
        decl = e.decl if isinstance(e, c_ast.FuncDef) else e
        out.append((decl, isinstance(e, c_ast.FuncDef)))
    return out


def test_declared_api_is_the_contract(small, tmp_path):
    from pycparser import c_ast

    m, c, expect = small
    # declarations only
    decls = _file_scope(_parse(c.header, tmp_path, []))
    funcs = {d.name: _type_str(d.type) for d, _ in decls if isinstance(d.type, c_ast.FuncDecl)}
    assert funcs == API
    for d, is_def in decls:
        assert not is_def, f"definition of '{d.name}' outside MODEL_IMPLEMENTATION"
        if isinstance(d, c_ast.Typedef):
            assert d.name.startswith("model_"), f"typedef '{d.name}' lacks the model_ prefix"
        elif isinstance(d.type, c_ast.FuncDecl):
            assert d.storage == ["extern"], f"{d.name}: storage {d.storage}"
        else:
            raise AssertionError(f"unexpected file-scope declaration '{d.name}' without the implementation")
    enumerators = [e.name for d, _ in decls if isinstance(d, c_ast.Typedef) and isinstance(d.type.type, c_ast.Enum)
                   for e in d.type.type.values.enumerators]
    assert enumerators[:4] == ["MODEL_OK", "MODEL_ERR_NULL", "MODEL_ERR_ALIGN", "MODEL_ERR_INDEX"]
    assert enumerators[-1] == "MODEL_STATUS_COUNT" and all(e.startswith("MODEL_") for e in enumerators)

    # with the implementation: the same five public functions, defined, and
    # every other file-scope name static and private (model__)
    decls = _file_scope(_parse(c.header, tmp_path, ["MODEL_IMPLEMENTATION"]))
    public = {}
    for d, is_def in decls:
        if isinstance(d, c_ast.Typedef):
            continue
        if d.name in API:
            assert d.storage == ["extern"]
            public.setdefault(d.name, set()).add((_type_str(d.type), is_def))
        else:
            assert d.storage == ["static"], f"'{d.name}' is not static"
            assert d.name.startswith("model__"), f"private '{d.name}' lacks the model__ prefix"
    assert public == {k: {(v, False), (v, True)} for k, v in API.items()}

    # MODEL_STATIC makes the API static
    decls = _file_scope(_parse(c.header, tmp_path, ["MODEL_IMPLEMENTATION", "MODEL_STATIC"]))
    assert {d.name for d, _ in decls if d.name in API and d.storage == ["static"]} == set(API)


def _macros(header: str, tmp: Path, prefix: str = "model") -> dict[str, str]:
    (tmp / "model.h").write_text(header)
    r = sh(["cc", "-dM", "-E", f"-D{prefix.upper()}_IMPLEMENTATION", "model.h"], tmp)
    out = {}
    for line in r.stdout.splitlines():
        mm = re.match(r"#define (\w+) (.*)$", line)
        if mm:
            out[mm.group(1)] = mm.group(2).strip()
    return out


def test_macros_have_the_right_values(small, two, tmp_path):
    m, c, expect = small
    mac = _macros(c.header, tmp_path)
    assert mac["MODEL_ARENA_SIZE"] == f"{c.plan.arena_size}u"
    assert mac["MODEL_ARENA_ALIGN"] == "16u"
    assert mac["MODEL_NUM_INPUTS"] == "1" and mac["MODEL_NUM_OUTPUTS"] == "1"
    assert mac["MODEL_INPUT_0_SIZE"] == "60u" and mac["MODEL_INPUT_0_BYTES"] == "240u"
    assert mac["MODEL_OUTPUT_0_SIZE"] == "60u" and mac["MODEL_OUTPUT_0_BYTES"] == "240u"
    assert mac["MODEL_INPUT_0_SHAPE"] == "{ 1, 3, 4, 5 }" and mac["MODEL_INPUT_0_RANK"] == "4"
    assert mac["MODEL_OUTPUT_0_SHAPE"] == "{ 1, 60 }"
    assert "MODEL_INPUT_1_SIZE" not in mac and "MODEL_OUTPUT_1_SIZE" not in mac
    # The arena holds at least the input and the output, which are both live
    # while the first kernel writes (the input is a graph input: never in place).
    assert c.plan.arena_size >= 240 + 240 and c.plan.arena_size % 16 == 0

    m2, _ = two
    c2 = compile_model(m2, name="vww")
    mac = _macros(c2.header, tmp_path, "vww")
    assert mac["VWW_NUM_INPUTS"] == "2" and mac["VWW_NUM_OUTPUTS"] == "2"
    assert mac["VWW_INPUT_0_SIZE"] == "14u" and mac["VWW_INPUT_1_SIZE"] == "7u"
    assert mac["VWW_OUTPUT_0_SIZE"] == "14u" and mac["VWW_OUTPUT_1_SIZE"] == "14u"
    assert mac["VWW_INPUT_0_NAME"] == '"a"' and mac["VWW_OUTPUT_1_NAME"] == '"y1"'
    assert mac["VWW_ARENA_SIZE"] == f"{c2.plan.arena_size}u"
    assert not any(k.startswith("MODEL_") for k in mac), "a vww header defines MODEL_* macros"


def test_odd_tensor_names_stay_inside_comments_and_strings(tmp_path):
    """Names are ONNX strings: comment delimiters, quotes, backslashes,
    trigraphs and non-ASCII must not break the C."""
    need("gcc")
    iname = 'in/*put*/"\\??/x\u00e9'
    oname = 'out*/"y\\'
    m = make_model([node("Add", [iname, "b/*c*/"], [oname], name="n*/1??/")],
                   {iname: ((2, 3), "float32")}, [oname], {"b/*c*/": np.ones(3, np.float32)})
    c = compile_model(m)
    (tmp_path / "model.h").write_text(c.header)
    (tmp_path / "main.c").write_text(
        "#include <stdio.h>\n#define MODEL_IMPLEMENTATION\n#include \"model.h\"\n"
        "int main(void) { puts(MODEL_INPUT_0_NAME); puts(MODEL_OUTPUT_0_NAME); return 0; }\n")
    sh(["gcc", "-std=c99", *WARN, "-Wtrigraphs", "main.c", "-o", "prog", "-lm"], tmp_path)
    if shutil.which("g++"):
        sh(["g++", "-x", "c++", "-std=c++11", *WARN, "-c", "main.c", "-o", "main_cxx.o"], tmp_path)
    r = subprocess.run(["./prog"], cwd=tmp_path, capture_output=True)
    assert r.stdout.decode("utf-8").splitlines() == [iname, oname]


# ---------------------------------------------------------------------------
# determinism

def test_generation_is_deterministic(tmp_path):
    m = two_input_model()
    assert compile_model(m, name="vww").header == compile_model(m, name="vww").header

    d1, d2 = tmp_path / "one" / "deep" / "dir", tmp_path / "two"
    d1.mkdir(parents=True)
    d2.mkdir()
    import onnx
    onnx.save(m, d1 / "net.onnx")
    onnx.save(m, d2 / "net.onnx")
    headers = []
    for seed, cwd, model_arg in (("1", d1, str(d1 / "net.onnx")), ("4242", d2, "net.onnx")):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", "gen", model_arg, "-o", "out", "--name", "vww"],
                           cwd=cwd, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        headers.append((cwd / "out" / "vww.h").read_bytes())
    assert headers[0] == headers[1], "same model, different process/hash seed/path -> different header"
    text = headers[0].decode()
    for forbidden in (str(tmp_path), str(d1), os.getcwd(), os.path.expanduser("~"), "__DATE__", "__TIME__"):
        assert forbidden not in text, f"header contains {forbidden!r}"
    assert not re.search(r"(?<![\w.])(19|20)\d\d[-/.](0?[1-9]|1[0-2])[-/.]\d{1,2}\b", text), "date in header"
    assert not re.search(r"\b\d{1,2}:\d\d:\d\d\b", text), "time of day in header"


HASH_HEADERS = """\
import hashlib, sys
sys.path.insert(0, sys.argv[1])
from test_planner import random_model
from cuvil_mcu.compiler import compile_model
h = hashlib.sha256()
for seed in range(12):
    h.update(compile_model(random_model(seed, "chain" if seed % 4 == 3 else "mixed")[0]).header.encode())
print(h.hexdigest())
"""


def test_generation_is_deterministic_across_hash_seeds():
    """Random graphs with diamonds, skips, views and several outputs: the
    planner and the emitter must not depend on set/dict hash order."""
    digests = set()
    for seed in ("0", "777"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", HASH_HEADERS, str(Path(__file__).parent)], env=env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        digests.add(r.stdout.strip())
    assert len(digests) == 1


# ---------------------------------------------------------------------------
# API behaviour

API_PROG = """\
#include <stdio.h>
#include <string.h>
#define MODEL_IMPLEMENTATION
#include "model.h"

#define CHECK(c) do { if (!(c)) { printf("FAIL line %%d: %%s\\n", __LINE__, #c); return 1; } } while (0)

static unsigned char arena[MODEL_ARENA_SIZE + MODEL_ARENA_ALIGN] MODEL_ARENA_ATTR;
static unsigned char arena2[MODEL_ARENA_SIZE] MODEL_ARENA_ATTR;
static const float x[MODEL_INPUT_0_SIZE] = { %(x)s };

int main(void)
{
    static const int shape[] = MODEL_INPUT_0_SHAPE;
    const char *texts[MODEL_STATUS_COUNT];
    float y_zero_copy[MODEL_OUTPUT_0_SIZE], y_copy[MODEL_OUTPUT_0_SIZE];
    const void *ins[1];
    void *outs[1];
    int n = 0, i, j;

    CHECK(sizeof shape / sizeof shape[0] == MODEL_INPUT_0_RANK);
    CHECK(model_run(NULL) == MODEL_ERR_NULL);
    CHECK(model_run(arena + 1) == MODEL_ERR_ALIGN);
    CHECK(model_run(arena + 8) == MODEL_ERR_ALIGN);
    CHECK(model_input(arena, 1) == NULL);
    CHECK(model_input(arena, -1) == NULL);
    CHECK(model_input(NULL, 0) == NULL);
    CHECK(model_output(arena, 1) == NULL);
    CHECK(model_output(arena, -1) == NULL);
    CHECK(model_output(NULL, 0) == NULL);
    CHECK(model_input(arena, 0) != NULL && model_output(arena, 0) != NULL);
    CHECK((unsigned char *)model_input(arena, 0) + MODEL_INPUT_0_BYTES <= arena + MODEL_ARENA_SIZE);
    CHECK((const unsigned char *)model_output(arena, 0) + MODEL_OUTPUT_0_BYTES <= arena + MODEL_ARENA_SIZE);

#define X(name, text) CHECK(name == n); texts[n++] = model_status_str(name);
    MODEL_STATUS_LIST(X)
#undef X
    CHECK(n == MODEL_STATUS_COUNT && n >= 4);
    for (i = 0; i < n; ++i) {
        CHECK(texts[i] != NULL && texts[i][0] != 0 && strcmp(texts[i], "unknown status") != 0);
        for (j = 0; j < i; ++j) CHECK(strcmp(texts[i], texts[j]) != 0);
        printf("status %%d %%s\\n", i, texts[i]);
    }
    CHECK(strcmp(model_status_str(MODEL_STATUS_COUNT), "unknown status") == 0);
    CHECK(strcmp(model_status_str(-1), "unknown status") == 0);

    /* zero-copy */
    memcpy(model_input(arena, 0), x, MODEL_INPUT_0_BYTES);
    CHECK(model_run(arena) == MODEL_OK);
    memcpy(y_zero_copy, model_output(arena, 0), MODEL_OUTPUT_0_BYTES);
    /* copying, on another arena */
    ins[0] = x;
    outs[0] = y_copy;
    CHECK(model_run_copy(NULL, ins, outs) == MODEL_ERR_NULL);
    CHECK(model_run_copy(arena2, NULL, outs) == MODEL_ERR_NULL);
    CHECK(model_run_copy(arena2, ins, NULL) == MODEL_ERR_NULL);
    CHECK(model_run_copy(arena2 + 4, ins, outs) == MODEL_ERR_ALIGN);
    CHECK(model_run_copy(arena2, ins, outs) == MODEL_OK);
    CHECK(memcmp(y_zero_copy, y_copy, sizeof y_copy) == 0);
    for (i = 0; i < (int)MODEL_OUTPUT_0_SIZE; ++i) printf("y %%a\\n", (double)y_copy[i]);
    return 0;
}
"""


def test_api_behaviour(small, tmp_path):
    need("gcc")
    m, c, expect = small
    (tmp_path / "model.h").write_text(c.header)
    (tmp_path / "api.c").write_text(API_PROG % {"x": c_list(SMALL_X)})
    sh(["gcc", "-std=c99", *WARN, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
        "api.c", "-o", "api", "-lm"], tmp_path)
    r = sh(["./api"], tmp_path)
    statuses = [line.split(" ", 2)[2] for line in r.stdout.splitlines() if line.startswith("status ")]
    assert statuses[:4] == ["ok", "null pointer", "arena not aligned to MODEL_ARENA_ALIGN",
                            "input/output index out of range"]
    assert_close(parse_hex_floats(r.stdout, "y").reshape(expect.shape), expect, 1e-5, "API program vs onnxruntime")


# ---------------------------------------------------------------------------
# golden snapshots

@pytest.mark.parametrize("filename", sorted(GOLDEN))
def test_golden_header(filename):
    path = GOLDEN_DIR / filename
    assert path.exists(), f"{path} missing: run `python tests/update_golden.py`"
    expected = path.read_bytes().decode()
    actual = render(filename)
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            f"golden/{filename}", "generated", n=2))
        lines = diff.splitlines()
        shown = "\n".join(lines[:80]) + (f"\n... ({len(lines) - 80} more diff lines)" if len(lines) > 80 else "")
        pytest.fail(f"generated header differs from tests/golden/{filename}. If the change is intended, "
                    f"review the diff and run `python tests/update_golden.py`:\n{shown}", pytrace=False)


def test_kernel_name_must_tell_renderings_apart():
    """Emitter.kernel renders a function once per name: a second variant under
    the same name that would render other C is a compiler bug, caught at gen
    time instead of silently calling the first rendering; a variant that
    renders the same C shares the function."""
    from cuvil_mcu.codegen import Emitter
    from cuvil_mcu.ir import Graph
    k = Emitter("m", Graph("g", {}, [], [], []), None)
    same = {"name": "t", "mmr": 1, "mo": 3, "nh": 0, "nl": 0, "e": 0, "c": 0, "lo": -128, "hi": 127}
    fn = k.kernel("qadd_tab_dsp", same)
    assert k.kernel("qadd_tab_dsp", dict(same, unused=1)) == fn     # the same C: shared
    assert len(k.kernels) == 1
    with pytest.raises(RuntimeError, match="m__qadd_tab_dsp_t rendered differently"):
        k.kernel("qadd_tab_dsp", dict(same, mo=5))
