"""Shared library (`--emit so`): lib<name>.so for a Linux/C++ application.

Built with the board's own compiler: the host's `cc` for `host`, the [sim]
cross compiler for the qemu-user Cortex-A boards (cortex-a7-neon,
cortex-a53-aarch64, ...). The library is the header compiled once with
<P>_IMPLEMENTATION plus a thin ABI file (templates/integrations/so/lib.c.j2):

  the header's API      <p>_input/_output/_run/_run_copy/_status_str
                        (and <p>_bind_weights with --weights separate)
  <p>_abi_version()     CUVIL_SO_ABI (bumped on an incompatible change)
  <p>_arena_size()/_arena_align()
  <p>_create()/_destroy()  an aligned arena from malloc, for callers that do
                        not want to own one (the arena stays the only state)
  <p>_describe()        JSON: inputs/outputs (name, dtype, shape, scale,
                        zero point), arena bytes: what cuvil_mcu.load reads

Written next to the header: lib<p>.so, lib<p>.c (the ABI source, so the
library can be rebuilt by hand) and lib<p>.h (its declarations). The build
runs in a temporary folder with relative file names, so the same model and
compiler give the same bytes. No kernel is re-implemented here.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..errors import ToolError
from . import _build, _pkg

NAME = "so"
ABI_VERSION = 1


def compiler(board) -> tuple[str, list[str]]:
    """(cc, flags) that build a shared library for the board; ToolError
    naming the package when the compiler is missing."""
    if board.id == "host":
        cc = os.environ.get("CC", "cc")
        if shutil.which(cc) is None:
            raise ToolError(f"--emit so: C compiler '{cc}' not found (apt-get install gcc, or set CC)")
        return cc, list(board.cflags)
    if board.sim and board.sim.get("runner") == "qemu-user":
        cc = str(board.sim.get("cc"))
        if shutil.which(cc) is None:
            raise ToolError(f"--emit so: cross compiler '{cc}' for board '{board.id}' not found "
                            f"(apt-get install {board.sim.get('cc_package', 'the cross compiler')})")
        return cc, list(board.cflags)
    raise ToolError(f"--emit so: board '{board.id}' runs no shared libraries (it is a bare-metal target); "
                    f"use --board host, cortex-a7-neon or cortex-a53-aarch64")


def describe(c) -> str:
    """The JSON that <p>_describe() returns (sorted keys: deterministic)."""
    def io(t):
        d = {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.bytes}
        if t.quantized:
            d.update(scale=t.scale, zero_point=t.zero_point)
        return d
    return json.dumps({"abi": ABI_VERSION, "name": c.prefix, "arena": max(c.plan.arena_size, 1),
                       "weights": "separate" if getattr(c, "weights_blob", None) is not None else "inline",
                       "inputs": [io(t) for t in _pkg.ios(c, "input")],
                       "outputs": [io(t) for t in _pkg.ios(c, "output")]},
                      sort_keys=True, separators=(",", ":"))


def sources(c) -> dict[str, str]:
    ctx = _pkg.context(c, abi=ABI_VERSION, describe=describe(c))
    return {f"lib{c.prefix}.c": _pkg.render("so/lib.c.j2", ctx),
            f"lib{c.prefix}.h": _pkg.render("so/lib.h.j2", ctx)}


def build(c, cc: str, cflags: list[str]) -> bytes:
    """lib<p>.so's bytes."""
    lib = f"lib{c.prefix}.so"
    return _build.build(c, NAME, sources(c), lambda tmp: [
        cc, *cflags, "-std=c99", "-fPIC", "-shared", "-Wall", "-Wextra", f"-ffile-prefix-map={tmp}=.",
        f"-Wl,-soname,{lib}", f"lib{c.prefix}.c", "-lm"], lib)


def emit(c, out: Path) -> dict:
    cc, cflags = compiler(c.board)
    out = Path(out)
    files: dict = {out / name: text for name, text in sources(c).items()}
    files[out / f"lib{c.prefix}.so"] = build(c, cc, cflags)
    return files
