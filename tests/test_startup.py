"""The CLI starts without its heavy imports (issue 14.4): --version and the
help texts load no numpy, onnx or jinja2, and a gen the compile cache
answers replays its files without them (`python -X importtime` lists every
module a process imports). The times themselves are in
benchmarks/compile_speed.py, not asserted here."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from deploy_helpers import ROOT

HEAVY = ("numpy", "onnx", "jinja2", "onnxruntime", "scipy", "sklearn", "torch", "matplotlib")


def imports(*args, env=None) -> set[str]:
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "cuvil_mcu.cli", *map(str, args)],
                       capture_output=True, text=True, env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr[-2000:]
    return {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s*(\S+)$", r.stderr, re.M)}


def test_version_and_help_import_nothing_heavy():
    for args in (["--version"], ["--help"], ["gen", "--help"], ["sim", "--help"]):
        mods = imports(*args)
        assert "cuvil_mcu" in mods, f"{args}: -X importtime listed no cuvil_mcu module: {sorted(mods)}"
        heavy = sorted(set(HEAVY) & mods)
        assert not heavy, f"cuvil-mcu {' '.join(args)} imports {heavy}"


def test_cached_gen_replays_without_numpy_or_onnx(tmp_path):
    env = {"CUVIL_CACHE_DIR": str(tmp_path / "cache")}
    model = ROOT / "examples" / "kws_float.onnx"
    first = imports("gen", model, "-o", tmp_path / "a", env=env)
    assert {"numpy", "onnx", "jinja2"} <= first
    again = imports("gen", model, "-o", tmp_path / "b", env=env)
    heavy = sorted(set(HEAVY) & again)
    assert not heavy, f"a cache hit imports {heavy}"
    assert (tmp_path / "b" / "model.h").read_bytes() == (tmp_path / "a" / "model.h").read_bytes()
