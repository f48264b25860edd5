"""Model text (tensor names, the model's name) in the generated packages:
each escaping function of cuvil_mcu/integrations/escape.py is checked
against the real parser of its context (the C compiler, kconfiglib, PyYAML,
tomllib, json, configparser, GNU make, markdown-it-py, rustc), the
integration templates print model text only through them, and every package
generated for a model with hostile names (those of the header tests plus C,
Markdown, Make, Kconfig and YAML injections) is still valid and still says
the names. MicroPython's module is also built and run with them."""
from __future__ import annotations

import configparser
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.integrations import escape, micropython, platformio, so, wasm, zephyr

from helpers import make_model, node
from test_integrations import (FAKE_ZEPHYR, MPY_FLAGS, WARN, cc, kconfig_load, mpy_attrs, mpy_build, mpy_run,
                               validate_library_json, write)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# The header tests' odd names (test_header.py), the injection of issue 11,
# and what breaks the other contexts: newline, Markdown code and table cells,
# make/CMake/Kconfig macros, printf conversions, YAML/TOML/INI quotes and
# comment characters, a bidi override and a line separator.
HOSTILE = [
    'in/*put*/"\\??/x\u00e9',
    'out*/"y\\',
    "x */ int evil_injected(void) { return 42; } /* ",
    "line\nbreak `code` ``x | cell $(shell touch INJECTED) ${X} %s %n\\",
    "\u202e\u2028 '\"#;[[ ]]: - !!python/object %%",
]
SOURCE = 'g */ int evil_source(void); /*\n$(shell touch INJECTED) `x` | "q" # \\'
# The packages name the model as the header's first line does, where the
# name is made safe for a C comment already.
SHOWN_SOURCE = escape.c_comment(SOURCE)


def hostile_model():
    """Two inputs, three outputs, every name hostile; the graph name too
    (the packages print it as the model's source)."""
    m = make_model([node("Add", [HOSTILE[0], HOSTILE[2]], [HOSTILE[1]], name="n*/1??/"),
                    node("Relu", [HOSTILE[0]], [HOSTILE[3]]), node("Neg", [HOSTILE[2]], [HOSTILE[4]])],
                   {HOSTILE[0]: ((2, 3), "float32"), HOSTILE[2]: ((2, 3), "float32")},
                   [HOSTILE[1], HOSTILE[3], HOSTILE[4]], {}, name="hostile")
    m.graph.name = SOURCE
    return m


@pytest.fixture(scope="module")
def hostile():
    return compile_model(hostile_model())


# ---------------------------------------------------------------------------
# the templates

UNTRUSTED = re.compile(r"\b(source|summary|line)\b|\bt\.name\b")
FILTERS = "|".join(escape.FILTERS)


def test_templates_print_model_text_only_through_an_escaping_filter():
    bad = []
    for p in sorted((ROOT / "templates" / "integrations").rglob("*.j2")):
        for m in re.finditer(r"\{\{(.*?)\}\}", p.read_text(), re.S):
            expr = m.group(1).strip()
            if UNTRUSTED.search(expr) and not re.search(rf"\|\s*({FILTERS})\s*$", expr):
                bad.append(f"{p.relative_to(ROOT)}: {{{{ {expr} }}}}")
    assert not bad, "model text printed without an escaping filter:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------
# each function against its context's parser

def test_visible_is_one_printable_line():
    for s in HOSTILE + [SOURCE]:
        v = escape.visible(s)
        assert v.isprintable() and "\n" not in v
    assert escape.visible("a\nb\x00\u202e\U0001f600") == "a\\nb\\x00\\u202e\U0001f600"


def test_c_comment_and_string_with_gcc(tmp_path):
    body = "".join(f'/* {escape.c_comment(s)} */ puts("{escape.c_string(s)}");\n' for s in HOSTILE + [SOURCE])
    (tmp_path / "t.c").write_text(f"#include <stdio.h>\nint main(void)\n{{\n{body}    return 0;\n}}\n")
    cc([*WARN, "-pedantic", "-Wtrigraphs", "-Wcomment", "t.c", "-o", "t"], cwd=tmp_path)
    out = subprocess.run(["./t"], cwd=tmp_path, capture_output=True, check=True).stdout.decode()
    assert out == "".join(s + "\n" for s in HOSTILE + [SOURCE])
    assert "evil" not in subprocess.run(["nm", "t"], cwd=tmp_path, capture_output=True, text=True).stdout


def test_mp_error_text_is_a_plain_format():
    for s in HOSTILE + [SOURCE]:
        t = escape.mp_error_text(s)
        assert all(" " <= ch <= "~" for ch in t) and not set(t) & set('"\\?')
        assert re.fullmatch(r"([^%]|%%)*", t), t   # no conversion specification left


def test_kconfig_help_with_kconfiglib(tmp_path):
    kconfiglib = pytest.importorskip("kconfiglib")
    text = "".join(f'config S{i}\n\tbool "s{i}"\n\thelp\n\t  before {escape.kconfig_help(s)} after\n\n'
                   f"# {escape.hash_comment(s)}\n" for i, s in enumerate(HOSTILE + [SOURCE]))
    (tmp_path / "Kconfig").write_text(text)
    k = kconfiglib.Kconfig(str(tmp_path / "Kconfig"), warn_to_stderr=False)
    assert not k.warnings, k.warnings
    assert {n for n in k.syms if n != "MODULES"} == {f"S{i}" for i in range(len(HOSTILE) + 1)}
    for i, s in enumerate(HOSTILE + [SOURCE]):
        assert k.syms[f"S{i}"].nodes[0].help == f"before {escape.visible(s)} after"
    assert not (tmp_path / "INJECTED").exists()


def test_yaml_json_and_comments_round_trip(tmp_path):
    yaml = pytest.importorskip("yaml")
    for s in HOSTILE + [SOURCE]:
        doc = yaml.safe_load(f"# {escape.hash_comment(s)}\nname: {escape.yaml_str(s)}\nnext: 1\n")
        assert doc == {"name": s, "next": 1}
        assert tomllib.loads(f"# {escape.hash_comment(s)}\nnext = 1\n") == {"next": 1}
        assert json.loads(escape.json_str(s)) == s
        ini = configparser.ConfigParser()
        ini.read_string(f"; {escape.hash_comment(s)}\n[env:x]\n; {escape.hash_comment(s)}\nkey = 1\n")
        assert ini.sections() == ["env:x"] and dict(ini["env:x"]) == {"key": "1"}


def test_hash_comment_in_a_makefile(tmp_path):
    need_tool("make")
    lines = "".join(f"# {escape.hash_comment(s)}\n" for s in HOSTILE + [SOURCE])
    (tmp_path / "Makefile").write_text(f"{lines}all:\n\t@echo ok\n{lines}")
    r = subprocess.run(["make", "-s", "-f", "Makefile"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr
    assert not (tmp_path / "INJECTED").exists()


class _HTMLText(__import__("html.parser").parser.HTMLParser):
    """Start tags and text as Python's HTML parser sees them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)

    def handle_data(self, data):
        self.text.append(data)


def test_html_text_with_html_parser():
    for s in HOSTILE + [SOURCE, "</p><script>alert(1)</script>", "a\" onmouseover=\"x", "&amp; &lt;"]:
        p = _HTMLText()
        p.feed(f'<p title="{escape.html_text(s)}">{escape.html_text(s)}</p>')
        p.close()
        assert p.tags == ["p"] and p.attrs == [("title", escape.visible(s))], s
        assert "".join(p.text) == escape.visible(s)


def _md():
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable("table")


def _code_spans(tokens) -> list[str]:
    out = []
    for t in tokens:
        for c in t.children or []:
            if c.type == "code_inline":
                out.append(c.content)
    return out


def test_markdown_code_spans_and_table_cells_with_markdown_it():
    md = _md()
    for s in HOSTILE + [SOURCE]:
        toks = md.parse(f"name: {escape.md_code(s)} end\n")
        assert _code_spans(toks) == [escape.visible(s)]
        rows = md.parse(f"| a | name | b |\n|---|---|---|\n| 1 | {escape.md_cell(s)} | 2 |\n")
        cells = [t for t in rows if t.type == "inline"]
        assert [c.content for c in cells][::3] == ["a", "1"] and len(cells) == 6, s
        assert _code_spans([cells[4]]) == [escape.visible(s)]


def test_rust_str_and_doc_with_rustc(tmp_path):
    need_tool("rustc")
    names = HOSTILE + [SOURCE]
    consts = "".join(f"/// doc {escape.rust_doc(s)} end\npub const S{i}: &str = {escape.rust_str(s)};\n"
                     for i, s in enumerate(names))
    prints = "".join(f'    println!("{{}}", S{i}.escape_default());\n' for i in range(len(names)))
    (tmp_path / "t.rs").write_text(f"#![deny(warnings)]\n{consts}fn main() {{\n{prints}}}\n")
    r = subprocess.run(["rustc", "--edition", "2021", "-o", "t", "t.rs"], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    got = subprocess.run(["./t"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.splitlines()
    want = ["".join(ch if 0x20 <= ord(ch) < 0x7F and ch not in "\"'\\" else
                    {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "'": "\\'", "\\": "\\\\"}.get(
                        ch, f"\\u{{{ord(ch):x}}}") for ch in s) for s in names]
    assert got == want


def need_tool(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed")


# ---------------------------------------------------------------------------
# the packages, generated for the hostile model

def _readme_io_table(md, text: str) -> list[list[str]]:
    """The model table's data rows: the cells' code-span contents (names) or text."""
    toks = md.parse(text)
    rows, cur, in_body = [], None, False
    for t in toks:
        if t.type == "tbody_open":
            in_body = True
        elif t.type == "tbody_close":
            in_body = False
        elif in_body and t.type == "tr_open":
            cur = []
        elif in_body and t.type == "tr_close":
            rows.append(cur)
        elif in_body and t.type == "inline":
            spans = _code_spans([t])
            cur.append(spans[0] if spans else t.content)
    return rows


def check_readme_names(text: str, c) -> None:
    md = _md()
    rows = _readme_io_table(md, text)
    g = c.graph
    want = [[kind, str(i), escape.visible(n)] for kind, names in (("input", g.inputs), ("output", g.outputs))
            for i, n in enumerate(names)]
    assert [r[:3] for r in rows] == want
    assert all(len(r) == 9 for r in rows)
    assert escape.visible(SHOWN_SOURCE) in _code_spans(md.parse(text))
    assert not any(ln.startswith(("int evil", "$(", "break")) for ln in text.splitlines())


def test_micropython_package_with_hostile_names(hostile, tmp_path):
    c = hostile
    g = c.graph
    exe, mdir = mpy_build(c, tmp_path)
    src = (mdir / "modcuvilmodel.c").read_text()
    nm = subprocess.run(["nm", str(tmp_path / "modcuvilmodel.o")], capture_output=True, text=True, check=True)
    assert "evil" not in nm.stdout
    assert mpy_attrs(exe)["input_shape"] == ((2, 3), (2, 3))
    xa, xb = (np.random.default_rng(s).standard_normal((2, 3)).astype(np.float32) for s in (1, 2))
    line, out = mpy_run(exe, tmp_path, "array:f", [xa, xb])
    assert line == "OK tuple f f f"
    ref = reference.run(g, {g.inputs[0]: xa, g.inputs[1]: xb})
    assert np.array_equal(np.frombuffer(out, np.float32), np.concatenate([ref[n].reshape(-1) for n in g.outputs]))
    line, _ = mpy_run(exe, tmp_path, "bytes", [xa, xb])
    assert line == (f"EXC TypeError: cuvilmodel.run: input 0 ({escape.mp_error_text(HOSTILE[0]).replace('%%', '%')})"
                    " must be array('f') or a list/tuple of numbers")
    check_readme_names((mdir / "README.md").read_text(), c)
    assert src.count("MP_ERROR_TEXT(") >= 4


def test_zephyr_package_with_hostile_names(hostile, tmp_path):
    c = hostile
    files = zephyr.emit(c, tmp_path)
    write(files, tmp_path)
    root = tmp_path / "zephyr" / "model"
    k = kconfig_load([root], tmp_path / "build")
    help_text = k.syms["CUVIL_MODEL_MODEL"].nodes[0].help
    assert escape.visible(SHOWN_SOURCE) in help_text
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load((root / "zephyr" / "module.yml").read_text()) == {
        "name": "cuvil_model", "build": {"cmake": ".", "kconfig": "Kconfig"}}
    cmake = [ln for ln in (root / "CMakeLists.txt").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert cmake == ["if(CONFIG_CUVIL_MODEL_MODEL)", "  zephyr_library_named(cuvil_model)",
                     "  zephyr_library_sources(src/model.c)", "  zephyr_include_directories(include)", "endif()"]
    obj = tmp_path / "model.o"
    cc([*WARN, "-pedantic", "-DCONFIG_CUVIL_MODEL_MODEL_ARENA_BSS=1", "-I", root / "include", "-c",
        root / "src" / "model.c", "-o", obj])
    assert b"evil" not in obj.read_bytes()
    check_readme_names((root / "README.md").read_text(), c)
    assert not (tmp_path / "INJECTED").exists()


def test_platformio_package_with_hostile_names(hostile, tmp_path):
    c = hostile
    files = platformio.emit(c, tmp_path)
    write(files, tmp_path)
    root = tmp_path / "platformio" / "model"
    data = json.loads((root / "library.json").read_text())
    validate_library_json(data, root)
    assert SHOWN_SOURCE in data["description"]
    ini = configparser.ConfigParser()
    ini.read_string((root / "examples" / "platformio.ini").read_text())
    assert ini.sections() == ["env:native"] and dict(ini["env:native"]) == {"platform": "native",
                                                                             "lib_deps": "symlink://.."}
    for src in (root / "src" / "model.c",):
        cc([*WARN, "-pedantic", "-I", root / "include", "-c", src, "-o", tmp_path / "lib.o"])
    r = subprocess.run(["g++", "-Wall", "-Wextra", "-Werror", "-std=c++11", "-I", str(root / "include"), "-c",
                        str(root / "examples" / "src" / "main.cpp"), "-o", str(tmp_path / "main.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for o in ("lib.o", "main.o"):
        assert b"evil" not in (tmp_path / o).read_bytes()
    check_readme_names((root / "README.md").read_text(), c)


def test_shared_library_package_with_hostile_names(hostile, tmp_path):
    need_tool("cc")
    write(so.emit(hostile, tmp_path), tmp_path)
    p = hostile.prefix
    (tmp_path / f"{p}.h").write_text(hostile.header)
    (tmp_path / "use.c").write_text(f'#include "lib{p}.h"\nint main(void) {{ return {p}_abi_version() == 0; }}\n')
    cc([*WARN, "-pedantic", "-Wcomment", "-I", tmp_path, "-c", tmp_path / "use.c", "-o", tmp_path / "use.o"])
    assert b"evil" not in (tmp_path / "use.o").read_bytes()
    assert "evil_source(void); /*" not in (tmp_path / f"lib{p}.h").read_text()


def test_wasm_package_with_hostile_names(hostile, tmp_path):
    need_tool("clang")
    need_tool("node")
    write(wasm.emit(hostile, tmp_path), tmp_path)
    p = hostile.prefix
    page = _HTMLText()
    page.feed((tmp_path / f"{p}.html").read_text())
    page.close()
    assert page.tags.count("script") == 1 and page.tags.count("tr") == 1 + len(hostile.graph.inputs) + \
        len(hostile.graph.outputs)
    text = "".join(page.text)
    for n in hostile.graph.inputs + hostile.graph.outputs:
        assert escape.visible(n) in text
    # the loader is a module Node can import: its comment did not end early
    r = subprocess.run(["node", "--input-type=module", "-e",
                        f"import {{ META }} from {json.dumps((tmp_path / (p + '.mjs')).as_uri())};"
                        "console.log(JSON.stringify(META.inputs.map((t) => t.name)))"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == list(hostile.graph.inputs)
