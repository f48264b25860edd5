"""Wall time of `cuvil-mcu gen` with a cold and a warm compile cache
(cuvil_mcu/cache.py), process start included, on the shipped example and
the shared MLPerf Tiny models. Issue #15's goal: warm < 0.5 s.

    python benchmarks/cache_timing.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = [ROOT / "examples" / "kws_float.onnx"] + [
    ROOT.parent / "shared" / "models" / m / "model_int8.onnx" for m in ("kws_dscnn", "vww_mobilenet_v1_025")]


def gen(model, out, env):
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", "gen", str(model), "--board",
                        "qemu-mps2-an386", "-o", str(out)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return time.monotonic() - t


def main():
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CUVIL_CACHE_DIR=str(Path(tmp) / "cache"), PYTHONPATH=str(ROOT))
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", "pass"])
        bare = time.monotonic() - t
        print(f"python -c pass: {bare:.3f} s (process start on this machine now)")
        print(f"{'model':28s} {'cold':>7s} {'warm':>7s} {'warm2':>7s}  identical")
        for m in MODELS:
            if not m.exists():
                continue
            cold = gen(m, Path(tmp) / "a", env)
            warm = gen(m, Path(tmp) / "b", env)
            warm2 = gen(m, Path(tmp) / "c", env)
            same = all((Path(tmp) / "a" / p.name).read_bytes() == p.read_bytes()
                       for p in (Path(tmp) / "b").iterdir() if p.is_file())
            print(f"{m.parent.name + '/' + m.name:28s} {cold:6.2f}s {warm:6.2f}s {warm2:6.2f}s  {same}")


if __name__ == "__main__":
    main()
