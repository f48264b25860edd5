"""`cuvil-mcu report`: the HTML page parses, its numbers agree with
independent measurements, and a real browser renders it.

The per-layer instruction counts in the page come from the traced
profiling build (sim/profile.py); the whole-model count they must add up
to (within 1%) comes from the normal firmware's SysTick (sim/qemu.py): two
different builds and two different counting mechanisms.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import shared_models as sm
from cuvil_mcu import cli
from cuvil_mcu.compiler import compile_model

ROOT = Path(__file__).resolve().parent.parent
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source", "track", "param"}
SVG_LEAF = {"rect", "line", "path", "circle", "stop"}


class StrictPage(HTMLParser):
    """Checks that every element is closed in order and collects the table rows' data- attributes."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.rows: list[dict] = []
        self.svgs = 0
        self.rects = 0
        self.texts: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-node" in a:
            self.rows.append(a)
        if tag == "svg":
            self.svgs += 1
        if tag == "rect":
            self.rects += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        if tag == "rect":
            self.rects += 1

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data):
        if data.strip():
            self.texts.append(data.strip())


def parse(path: Path) -> StrictPage:
    p = StrictPage()
    p.feed(path.read_text())
    p.close()
    assert not p.errors, p.errors[:5]
    assert p.stack == [], f"unclosed elements: {p.stack}"
    return p


def png_size_and_colours(path: Path) -> tuple[int, int, int]:
    """Width, height and the number of distinct colours of the first rows of
    an 8-bit RGB(A) PNG (the standard library's zlib; Chromium writes those)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h, depth, ctype = struct.unpack(">IIBB", data[16:26])
    idat, pos = b"", 8
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = zlib.decompress(idat)
    bpp = {2: 3, 6: 4}[ctype]
    stride = w * bpp + 1
    colours = set()
    prev = bytearray(w * bpp)
    for y in range(min(h, 400)):   # undo the PNG row filters for the top of the page
        f, row = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
        for i in range(len(row)):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        colours.update(bytes(row[i:i + 3]) for i in range(0, len(row), bpp * 7))
        prev = row
    return w, h, len(colours)


need_shared = pytest.mark.skipif(not sm.available(), reason="../shared/models not present")


def need(tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed (make setup installs it)")


@pytest.fixture(scope="module")
def kws_report(tmp_path_factory):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    if not sm.available():
        pytest.skip("../shared/models not present")
    tmp = tmp_path_factory.mktemp("report")
    x = sm.samples("kws_dscnn")["inputs"][:1]
    np.save(tmp / "x.npy", x)
    out = tmp / "kws.html"
    rc = cli.main(["report", str(sm.model_path("kws_dscnn")), "--board", "qemu-mps2-an386", "-o", str(out),
                   "--input", str(tmp / "x.npy")])
    assert rc == 0
    return out, x


@need_shared
def test_report_parses_and_layers_add_up(kws_report):
    from cuvil_mcu.sim import qemu
    out, x = kws_report
    page = parse(out)
    c = compile_model(str(sm.model_path("kws_dscnn")), board="qemu-mps2-an386")
    assert [int(r["data-node"]) for r in page.rows] == list(range(len(c.graph.nodes)))
    assert sum(int(r["data-macs"]) for r in page.rows) == c.macs_run == c.macs   # (KWS: no channel dropped)
    # constants: every const array of the header is attributed to the node whose code uses it first
    assert sum(int(r["data-const"]) for r in page.rows) == c.weights_bytes
    per_layer = sum(int(r["data-instructions"]) for r in page.rows)
    whole = qemu.simulate(c, x.reshape((1,) + c.graph.tensors[c.graph.inputs[0]].shape)).instructions
    assert abs(per_layer - whole) <= 0.01 * whole, (per_layer, whole)
    cyc = [int(r["data-cycles"]) for r in page.rows]
    assert all(cy >= ins for cy, ins in zip(cyc, (int(r["data-instructions"]) for r in page.rows)))
    text = " ".join(page.texts)
    assert "Where the cycles go" in text and "Memory plan" in text and "Budget" in text
    assert f"peak {c.plan.arena_size:,} B" in text          # KWS: the arena is the peak of live bytes
    # the arena the page states is the one the header declares
    declared = int(re.search(r"#define MODEL_ARENA_SIZE\s+(\d+)u", c.header).group(1))
    assert f"arena {declared:,} B" in text
    assert page.svgs >= 4 and page.rects > 2 * len(c.graph.nodes)
    assert "http://" not in out.read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")   # self-contained
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@need_shared
def test_report_renders_in_chromium(kws_report):
    need("chromium")
    out, _ = kws_report
    dest = ROOT / "build" / "report_kws_dscnn_m4.png"
    dest.parent.mkdir(exist_ok=True)
    if dest.exists():
        dest.unlink()
    r = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={dest}", "--window-size=1400,2400", out.resolve().as_uri()],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(out.parent)})
    assert dest.exists(), r.stderr[-2000:]
    w, h, colours = png_size_and_colours(dest)
    assert (w, h) == (1400, 2400)
    assert colours > 20, "the screenshot is (nearly) blank"


def test_report_host_board_has_no_cycle_columns(tmp_path, capsys):
    out = tmp_path / "r.html"
    rc = cli.main(["report", str(ROOT / "examples" / "kws_float.onnx"), "-o", str(out)])
    assert rc == 0
    page = parse(out)
    assert page.rows and all("data-instructions" not in r for r in page.rows)
    assert "est. cycles" not in " ".join(page.texts)


def test_report_bad_board_writes_nothing(tmp_path, capsys):
    out = tmp_path / "r.html"
    rc = cli.main(["report", str(ROOT / "examples" / "kws_float.onnx"), "--board", "no-such-board", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc != 0 and "unknown board 'no-such-board'" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not out.with_suffix(".png").exists()
