"""The README's supported-op table and the op registry must not drift apart."""
import re
from pathlib import Path

from cuvil_mcu import ops

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _table_ops() -> set[str]:
    section = README.split("## Supported ops", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and not set(cells[0]) <= {"-"} and cells[0] != "family":
            names.update(n.strip() for n in cells[1].split(",") if n.strip())
    return names


def test_every_registered_op_is_in_the_readme_table():
    public = {t for t in ops.registry() if not t.startswith("cuvil.")}
    table = _table_ops()
    missing = sorted(public - table)
    assert not missing, f"registered but not in README's op table: {missing}"
    extra = sorted(t for t in table - public if re.fullmatch(r"[A-Za-z.]+", t))
    assert not extra, f"in README's op table but not registered: {extra}"


# ---------------------------------------------------------------------------
# The README's header excerpt and firmware main are what gen writes and what
# compiles against it (issue 14.6: the quoted header had drifted).

ROOT = Path(__file__).resolve().parent.parent


def _c_blocks(section: str) -> list[str]:
    text = README.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```c\n(.*?)```", text, re.S)


def _demo_header() -> str:
    from cuvil_mcu.compiler import compile_model
    return compile_model(str(ROOT / "examples" / "kws_float.onnx")).header


def test_readme_header_excerpt_is_what_gen_writes():
    excerpt = _c_blocks("The generated header")[0]
    header = _demo_header().splitlines()
    chunks, cur = [], []
    for line in excerpt.splitlines():
        if line.strip() == "...":
            chunks.append(cur)
            cur = []
        else:
            cur.append(line)
    chunks = [c for c in chunks + [cur] if c]
    assert len(chunks) >= 3 and sum(map(len, chunks)) >= 30, "the excerpt lost most of its lines"
    at = 0
    for chunk in chunks:   # each run of lines appears verbatim, in the README's order
        found = next((i for i in range(at, len(header) - len(chunk) + 1)
                      if header[i:i + len(chunk)] == chunk), None)
        if found is None:
            near = next((i for i in range(len(header)) if header[i] == chunk[0]), None)
            got = header[near:near + len(chunk)] if near is not None else []
            raise AssertionError("README excerpt not in gen's header (after line "
                                 f"{at}):\nREADME:\n" + "\n".join(chunk) + "\nheader:\n" + "\n".join(got))
        at = found + len(chunk)


def test_readme_firmware_main_builds_and_runs(tmp_path):
    import shutil
    import subprocess
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        import pytest
        pytest.skip("no C compiler (make setup installs gcc)")
    main = _c_blocks("The generated header")[1]
    (tmp_path / "model.h").write_text(_demo_header())
    user = ("#include <stdio.h>\nstatic void read_sensor(float *x, unsigned n) { while (n--) x[n] = 0.5f; }\n"
            "static void report(const float *y, unsigned n) { float s = 0; while (n--) s += y[n]; "
            "printf(\"%.3f\\n\", s); }\n")
    src = main.replace('#include "model.h"\n', '#include "model.h"\n' + user, 1)
    assert src != main, "the README's main no longer includes model.h"
    (tmp_path / "main.c").write_text(src)
    exe = tmp_path / "main"
    r = subprocess.run([cc, "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-pedantic", "main.c", "-o", str(exe),
                        "-lm"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1.000", r.stdout   # softmax scores of the demo model sum to 1
