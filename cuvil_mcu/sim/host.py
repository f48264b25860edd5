"""Compile the generated header with the host C compiler and run it.

Binaries are cached by the hash of everything that goes into them, so running
the same model again (tests, repeated `cuvil-mcu run`) does not recompile.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..codegen import env
from ..errors import ToolError

DEFAULT_CFLAGS = ["-O2", "-std=c99"]


def cache_dir() -> Path:
    base = os.environ.get("CUVIL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuvil-mcu")
    return Path(base) / "host"


def harness_source(prefix: str, in_bytes: list[int], out_bytes: list[int]) -> str:
    return env().get_template("harness/host_main.c.j2").render(
        p=prefix, P=prefix.upper(), n_in=len(in_bytes), n_out=len(out_bytes),
        in_bytes=in_bytes, out_bytes=out_bytes)


def build(header: str, prefix: str, in_bytes: list[int], out_bytes: list[int],
          cc: str | None = None, cflags: list[str] | None = None) -> Path:
    """Path of an executable running the model (built or from the cache)."""
    cc = cc or os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise ToolError(f"C compiler '{cc}' not found (apt-get install gcc, or set CC)")
    cflags = list(cflags or DEFAULT_CFLAGS)
    main = harness_source(prefix, in_bytes, out_bytes)
    key = hashlib.sha256("\0".join([header, main, cc, *cflags]).encode()).hexdigest()[:24]
    exe = cache_dir() / key / "model_host"
    if exe.exists():
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=exe.parent) as tmp:
        t = Path(tmp)
        (t / f"{prefix}.h").write_text(header)
        (t / "main.c").write_text(main)
        cmd = [cc, *cflags, "-I", str(t), str(t / "main.c"), "-o", str(t / "model_host"), "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise ToolError(f"host compile failed ({' '.join(cmd)}):\n{r.stderr[-4000:]}")
        os.replace(t / "model_host", exe)
    return exe


def run(exe: Path, inputs: list[np.ndarray], out_specs: list[tuple[tuple[int, ...], str]],
        samples: int, runner: list[str] | None = None) -> list[np.ndarray]:
    """inputs: per model input, an array of shape (samples, *input_shape) in
    the input's dtype. Returns per output (samples, *output_shape). runner:
    a command prefix the executable runs under (e.g. qemu-user, sim/qemu_user.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        fin, fout = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        with open(fin, "wb") as f:
            for s in range(samples):
                for x in inputs:
                    f.write(np.ascontiguousarray(x[s]).tobytes())
        r = subprocess.run([*(runner or []), str(exe), str(fin), str(fout), str(samples)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ToolError(f"generated code failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
        raw = fout.read_bytes()
    outs = [np.empty((samples, *shape), dtype=dtype) for shape, dtype in out_specs]
    pos = 0
    for s in range(samples):
        for o in outs:
            n = o[s].nbytes
            o[s] = np.frombuffer(raw[pos:pos + n], dtype=o.dtype).reshape(o.shape[1:])
            pos += n
    if pos != len(raw):
        raise ToolError(f"generated code wrote {len(raw)} bytes, expected {pos}")
    return outs
