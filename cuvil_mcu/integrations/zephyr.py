"""Zephyr module (`--emit zephyr`), written to <out>/zephyr/<p>/:

  zephyr/module.yml   build: cmake: . / kconfig: Kconfig (module root = <out>/zephyr/<p>)
  CMakeLists.txt      zephyr_library + sources + include dir, all gated by CONFIG_CUVIL_MODEL_<P>
  Kconfig             CONFIG_CUVIL_MODEL_<P> and the arena placement (.bss / .noinit /
                      DTCM / a custom linker section name mapped to <P>_ARENA_ATTR)
  include/<p>.h       the model (copy of the header)
  include/cuvil_<p>.h declares the arena the module defines
  src/<p>.c           the one file with <P>_IMPLEMENTATION, and the arena
  README.md

Add it to a build with `west build -b <board> -- -DZEPHYR_EXTRA_MODULES=<out>/zephyr/<p>`.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import CuvilError
from . import _pkg
from .escape import visible

NAME = "zephyr"


def symbol(name: str) -> str:
    return f"CUVIL_MODEL_{name.upper()}"


def check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name.upper()):
        raise CuvilError(f"--name '{visible(name)}': the Zephyr Kconfig symbol CONFIG_CUVIL_MODEL_<NAME> needs NAME "
                         f"(the upper-cased --name) made of A-Z, 0-9 and _, not starting with a digit")


def board_name(c) -> str:
    if c.board.zephyr_board:
        return c.board.zephyr_board
    return "native_sim" if c.board.id == "host" else "<zephyr-board>"


def emit(c, out: Path) -> dict:
    check_name(c.prefix)
    p = c.prefix
    base = Path(out) / "zephyr" / p
    ctx = _pkg.context(c, N=symbol(p), zboard=board_name(c), module=f"cuvil_{p}")
    return {
        base / "zephyr" / "module.yml": _pkg.render("zephyr/module.yml.j2", ctx),
        base / "CMakeLists.txt": _pkg.render("zephyr/CMakeLists.txt.j2", ctx),
        base / "Kconfig": _pkg.render("zephyr/Kconfig.j2", ctx),
        base / "include" / f"{p}.h": c.header,
        base / "include" / f"cuvil_{p}.h": _pkg.render("zephyr/cuvil_model.h.j2", ctx),
        base / "src" / f"{p}.c": _pkg.render("zephyr/model.c.j2", ctx),
        base / "README.md": _pkg.render("zephyr/README.md.j2", ctx),
    }
