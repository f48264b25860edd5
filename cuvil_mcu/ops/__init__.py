"""One module per op family; each registers its ops with `@register`."""
from __future__ import annotations

import importlib
import pkgutil

from .base import _REGISTRY, Op, evaluate  # noqa: F401

_loaded = False


def registry() -> dict[str, Op]:
    """All ops, by ONNX op_type. Imports every module of this package once."""
    global _loaded
    if not _loaded:
        for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if m.name != "base":
                importlib.import_module(f"{__name__}.{m.name}")
        _loaded = True
    return _REGISTRY


def get(op_type: str) -> Op | None:
    return registry().get(op_type)
