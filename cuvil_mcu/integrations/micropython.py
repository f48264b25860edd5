"""MicroPython user C module (`--emit micropython`): `import <module>`.

Written to <out>/micropython/<module>/ as MicroPython's "external C modules"
documentation describes: micropython.mk (make-based ports: USER_C_MODULES =
the folder holding the module folders), micropython.cmake (CMake-based ports:
USER_C_MODULES = this file), mod<module>.c (the binding, which includes the
header with <P>_IMPLEMENTATION) and a copy of <p>.h, so the folder is
self-contained.

Module name: the --name prefix; the CLI's default name "model" becomes
"cuvilmodel" (a module called `model` would be too generic to import).
"""
from __future__ import annotations

import keyword
from pathlib import Path

from ..errors import CuvilError
from . import _pkg, escape
from .escape import visible

NAME = "micropython"

# Modules built into MicroPython's unix/rp2 ports (with and without the u-prefix
# of older releases): a user module of the same name would clash at link time
# or shadow the built-in.
BUILTIN_MODULES = frozenset("""
array asyncio binascii bluetooth builtins cmath collections cryptolib deflate errno framebuf gc hashlib
heapq io json machine math micropython network os platform random re rp2 select socket ssl struct sys
termios time tls uctypes vfs zlib ffi btree webrepl onewire neopixel dht lwip espnow
""".split())
BUILTIN_MODULES = BUILTIN_MODULES | frozenset("u" + m for m in BUILTIN_MODULES)

# element type -> MicroPython array typecode (py/binary.c; 'i' is a C int,
# 32 bits on every MicroPython port)
TYPECODES = {"float32": "f", "float64": "d", "int8": "b", "uint8": "B", "int16": "h",
             "uint16": "H", "int32": "i", "uint32": "I", "int64": "q", "uint64": "Q", "bool": "B"}


def module_name(prefix: str) -> str:
    return "cuvilmodel" if prefix == "model" else prefix


def check_name(name: str) -> None:
    mod = module_name(name.lower())
    if not mod.isidentifier() or not mod.isascii() or keyword.iskeyword(mod) or mod in BUILTIN_MODULES:
        why = ("a Python keyword" if keyword.iskeyword(mod)
               else "the name of a MicroPython built-in module" if mod in BUILTIN_MODULES
               else "not an ASCII Python identifier")
        raise CuvilError(f"--name '{visible(name)}': the MicroPython module name '{visible(mod)}' (the lower-cased --name) "
                         f"must be an ASCII Python identifier that is neither a keyword nor a MicroPython "
                         f"built-in module name; it is {why}")


# Value range of the C element type for a list of ints (None: mp_int_t holds any value).
INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "bool": (0, 1),
              "int32": "int32_t", "int64": None}


def c_prefix(m: str) -> str:
    """Prefix of the module's own C identifiers: "mod<m>_". The header owns
    every "<p>_" name (--name kws8 gives the header's kws8_run), so the
    binding must not use the bare module name; "mod" + m cannot begin with
    "<p>_" for any p."""
    return f"mod{m}"


def _accepted(t, native: str, raw: list[str]) -> str:
    """The TypeError text: what run() takes for input t."""
    if t.dtype in ("float32", "float64"):
        return f"array('{native}') or a list/tuple of numbers"
    if t.quantized:
        arrays = " or ".join(f"array({c})" for c in raw if c.startswith("'"))
        return (f"bytes, bytearray, {arrays} holding quantized {t.dtype} values, or array('f') or a "
                f"list/tuple of real numbers, which run() quantizes (ints in a list are real numbers too)")
    return f"array('{native}')" + (", bytes, bytearray" if len(raw) > 1 else "") + " or a list/tuple of ints"


def _glue(c, m: str) -> dict:
    q = c_prefix(m)
    ins, outs = _pkg.ios(c, "input"), _pkg.ios(c, "output")
    for t in ins + outs:
        if t.dtype not in TYPECODES:
            raise CuvilError(f"--emit micropython: {t.kind} '{escape.visible(t.name)}' is {t.dtype}, which "
                             f"MicroPython's array module has no typecode for")
    loaders = []
    for t in ins:
        native = TYPECODES[t.dtype]
        raw = [repr(native)]
        if t.ctype.endswith("int8_t") or t.dtype == "bool":
            raw += ["'B'", "BYTEARRAY_TYPECODE"]
        raw = list(dict.fromkeys(raw))
        floats = t.dtype in ("float32", "float64") or t.quantized
        if t.dtype in ("float32", "float64"):
            conv = f"({t.ctype})v"
        elif t.quantized:
            conv = f"{c.prefix}_input_{t.index}_quantize((float)v)"
        else:
            conv = None
        rng = INT_RANGES.get(t.dtype)
        if floats or rng is None:
            int_bad = None
        elif isinstance(rng, str):
            int_bad = f"(mp_int_t)({rng})v != v"
        else:
            int_bad = f"v < {rng[0]} || v > {rng[1]}"
        loaders.append(dict(t=t, raw=raw, conv=conv, floats=floats, float_buf=t.quantized, int_bad=int_bad,
                            accepted=escape.mp_error_text(_accepted(t, native, raw)),
                            label=f"input {t.index} (" + escape.mp_error_text(t.name) + ")"))
    # attributes: module-level constants in ROM
    tuples, floats_rom, attrs = [], [], []

    def shape_tuple(sym, dims):
        tuples.append((sym, len(dims), ", ".join(f"MP_ROM_INT({d})" for d in dims)))
        return f"MP_ROM_PTR(&{sym})"

    def attr_of(values, sym, make):
        if len(values) == 1:
            return make(values[0], sym)
        items = [make(v, f"{sym}_{i}") for i, v in enumerate(values)]
        tuples.append((sym, len(items), ", ".join(items)))
        return f"MP_ROM_PTR(&{sym})"

    def make_float(v, sym):
        if v is None:
            return "MP_ROM_NONE"
        floats_rom.append((sym, _pkg.c_float(v)))
        return f"MP_ROM_PTR(&{sym})"

    def make_int(v, sym):
        return "MP_ROM_NONE" if v is None else f"MP_ROM_INT({v})"

    for kind, items in (("input", ins), ("output", outs)):
        if not items:
            continue
        attrs.append((f"{kind}_shape", attr_of([t.shape for t in items], f"{q}_{kind}_shape",
                                               lambda d, s: shape_tuple(s, d or (1,)))))
        if any(t.quantized for t in items):
            attrs.append((f"{kind}_scale", attr_of([t.scale for t in items], f"{q}_{kind}_scale", make_float)))
            attrs.append((f"{kind}_zero_point", attr_of([t.zero_point for t in items],
                                                        f"{q}_{kind}_zero_point", make_int)))
    attrs.append(("arena_size", f"MP_ROM_INT({c.plan.arena_size})"))
    return dict(q=q, loaders=loaders, outarrays=[dict(t=t, tc=TYPECODES[t.dtype]) for t in outs],
                tuples=tuples, floats_rom=floats_rom, attrs=attrs)


def emit(c, out: Path) -> dict:
    m = module_name(c.prefix)
    check_name(m)
    base = Path(out) / "micropython" / m
    ctx = _pkg.context(c, m=m, **_glue(c, m))
    ctx["example"] = _example_call(ctx)
    ctx["run_args"] = "data" if len(ctx["inputs"]) == 1 else ", ".join(f"x{t.index}" for t in ctx["inputs"])
    ctx["typecodes"] = TYPECODES
    return {
        base / f"mod{m}.c": _pkg.render("micropython/module.c.j2", ctx),
        base / f"{c.prefix}.h": c.header,
        base / "micropython.mk": _pkg.render("micropython/micropython.mk.j2", ctx),
        base / "micropython.cmake": _pkg.render("micropython/micropython.cmake.j2", ctx),
        base / "README.md": _pkg.render("micropython/README.md.j2", ctx),
    }


def _example_call(ctx) -> str:
    ins = ctx["inputs"]
    if len(ins) != 1:
        return f"outs = {ctx['m']}.run(" + ", ".join(f"x{i}" for i in range(len(ins))) + ")"
    return f"out = {ctx['m']}.run(x)"
