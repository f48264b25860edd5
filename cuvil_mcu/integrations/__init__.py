"""Packages for firmware ecosystems, emitted next to the header by
`cuvil-mcu gen --emit a,b,...`.

Each module here is one target, collected automatically. It defines
  NAME = "micropython"            (the --emit value)
  def check_name(name: str) -> None        raise CuvilError naming the rule
                                           when --name is not a valid module
                                           name for that ecosystem
  def emit(c, out: Path) -> dict[Path, str | bytes]
                                           the files to write (c: Compiled);
                                           nothing is written by the module itself
Output must be deterministic (same model, same bytes).
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from ..errors import CuvilError


def targets() -> dict:
    mods = {}
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"{__name__}.{m.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "emit"):
            mods[mod.NAME] = mod
    return mods


def parse(spec: str | None) -> list:
    """'--emit a,b' -> modules, in the order given; unknown names are an error."""
    if not spec:
        return []
    known = targets()
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in known]
    if bad:
        raise CuvilError(f"--emit: unknown target(s) {', '.join(bad)}; choose from {', '.join(known) or 'none'}")
    return [known[n] for n in dict.fromkeys(names)]


def emit_all(mods: list, c, out: Path, name: str) -> dict[Path, str | bytes]:
    files: dict[Path, str | bytes] = {}
    for mod in mods:
        if hasattr(mod, "check_name"):
            mod.check_name(name)
    for mod in mods:
        files.update(mod.emit(c, out))
    return files
