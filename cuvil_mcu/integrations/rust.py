"""`--emit rust`: a zero-dependency `#![no_std]` Rust crate around the header.

The crate (in `<out>/rust/`) holds a copy of the header and a two-line C shim
that `build.rs` compiles with the target's C compiler into a static library.
`src/lib.rs` has the raw `extern "C"` bindings, which are *derived from the
generated header*: it is preprocessed (`cc -E`, IMPLEMENTATION off, a tiny
fake libc so the result does not depend on the system headers) and parsed
with pycparser; every function and typedef the header declares becomes a Rust
declaration through `rust_type`, and a C type with no exact Rust mapping is
an error, never a guess. Sizes, shapes and quantization constants come from
the header's macros (`cc -dM -E`), cross-checked against the compiled graph.
On top sits a safe API (`Arena`, `Model::new`, `run`, `Error`), and
`tests/reference.rs` compares `run` against outputs of cuvil_mcu.reference on
a seeded input, stored as raw little-endian files in `tests/data/`.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from .. import reference
from ..errors import CuvilError
from . import _pkg
from .escape import rust_str, visible

NAME = "rust"
FOLDER = "rust"

# Strict and reserved keywords of Rust 2015-2024, plus the names cargo refuses
# for a package (they shadow the standard crates or are special files on Windows).
KEYWORDS = frozenset("""
as break const continue crate else enum extern false fn for if impl in let loop match mod move mut pub
ref return self Self static struct super trait true type unsafe use where while async await dyn abstract
become box do final macro override priv typeof unsized virtual yield try gen
""".split())
RESERVED = frozenset("std core alloc test proc_macro proc-macro "
                     "con prn aux nul com1 com2 com3 com4 com5 com6 com7 com8 com9 "
                     "lpt1 lpt2 lpt3 lpt4 lpt5 lpt6 lpt7 lpt8 lpt9".split())

RULE = ("a Rust crate name: ASCII letters, digits, '_' and '-', starting with a letter, at most 64 "
        "characters, not a Rust keyword and not a name cargo reserves (std, core, alloc, test, ...)")

# Element types of the I/O (numpy dtype -> Rust) and scalar C types (-> Rust).
RUST_ELEM = {"float32": "f32", "float64": "f64", "int8": "i8", "uint8": "u8", "int16": "i16",
             "int32": "i32", "int64": "i64", "bool": "u8"}
C_SCALARS = {
    ("void",): "core::ffi::c_void",
    ("char",): "core::ffi::c_char",
    ("signed", "char"): "core::ffi::c_schar",
    ("unsigned", "char"): "core::ffi::c_uchar",
    ("short",): "core::ffi::c_short",
    ("unsigned", "short"): "core::ffi::c_ushort",
    ("int",): "core::ffi::c_int",
    ("unsigned", "int"): "core::ffi::c_uint",
    ("unsigned",): "core::ffi::c_uint",
    ("long",): "core::ffi::c_long",
    ("unsigned", "long"): "core::ffi::c_ulong",
    ("long", "long"): "core::ffi::c_longlong",
    ("unsigned", "long", "long"): "core::ffi::c_ulonglong",
    ("float",): "f32",
    ("double",): "f64",
    ("size_t",): "usize",
    ("uintptr_t",): "usize",
    ("int8_t",): "i8", ("uint8_t",): "u8", ("int16_t",): "i16", ("uint16_t",): "u16",
    ("int32_t",): "i32", ("uint32_t",): "u32", ("int64_t",): "i64", ("uint64_t",): "u64",
}

# Just enough of the C library for the header's declarations (as tests/test_header.py).
FAKE_LIBC = {
    "stddef.h": "typedef unsigned long size_t;\n#define NULL ((void *)0)\n",
    "stdint.h": "typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t;\n"
                "typedef unsigned short uint16_t; typedef int int32_t; typedef unsigned int uint32_t;\n"
                "typedef long long int64_t; typedef unsigned long long uint64_t; typedef unsigned long uintptr_t;\n",
    "math.h": "",
    "float.h": "",
    "string.h": "",
}

# Default C flags per Rust thumb architecture (documented in the crate README).
CORTEX_M_ARCH = {
    "cortex-m0": "thumbv6m", "cortex-m0plus": "thumbv6m", "cortex-m1": "thumbv6m",
    "cortex-m3": "thumbv7m", "cortex-m4": "thumbv7em", "cortex-m7": "thumbv7em",
    "cortex-m23": "thumbv8m.base", "cortex-m33": "thumbv8m.main", "cortex-m35p": "thumbv8m.main",
    "cortex-m55": "thumbv8m.main", "cortex-m85": "thumbv8m.main",
}


def check_name(name: str) -> None:
    low = name.lower()
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,63}", name):
        raise CuvilError(f"--name '{visible(name)}' is not {RULE}")
    if name in KEYWORDS or low in KEYWORDS:
        raise CuvilError(f"--name '{visible(name)}' is a Rust keyword; the rust crate needs {RULE}")
    if low in RESERVED:
        raise CuvilError(f"--name '{visible(name)}' is reserved by cargo; the rust crate needs {RULE}")


# ---------------------------------------------------------------------------
# reading the header

def _cpp() -> str:
    for cc in ("cc", "gcc", "clang"):
        if shutil.which(cc):
            return cc
    raise CuvilError("--emit rust reads the generated header with a C preprocessor: install cc "
                     "(apt-get install gcc) or drop rust from --emit")


def _preprocess(header: str, prefix: str, tmp: Path, macros: bool) -> str:
    fake = tmp / "fake_libc"
    fake.mkdir(exist_ok=True)
    for name, text in FAKE_LIBC.items():
        (fake / name).write_text(text)
    (tmp / f"{prefix}.h").write_text(header)
    # -undef: no __GNUC__, so the attribute branches drop out; no IMPLEMENTATION: declarations only.
    cmd = [_cpp(), "-E", "-P" if not macros else "-dM", "-nostdinc", "-undef", "-I", str(fake), f"{prefix}.h"]
    r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    if r.returncode != 0:
        raise CuvilError(f"--emit rust: preprocessing {prefix}.h failed: {r.stderr.strip().splitlines()[:1]}")
    return r.stdout


def _quals_const(t) -> bool:
    return "const" in getattr(t, "quals", [])


def rust_type(t, typedefs: dict[str, str]) -> str:
    """C declarator type (pycparser) -> Rust type. A pointer is *const when
    what it points to is const-qualified, else *mut."""
    from pycparser import c_ast

    if isinstance(t, c_ast.PtrDecl):
        return ("*const " if _quals_const(t.type) else "*mut ") + rust_type(t.type, typedefs)
    if isinstance(t, c_ast.TypeDecl):
        inner = t.type
        if isinstance(inner, c_ast.IdentifierType):
            names = tuple(inner.names)
            if names != ("signed", "char"):
                names = tuple(n for n in names if n != "signed") or ("int",)
            if len(names) > 1 and names[-1] == "int" and names[-2] in ("short", "long", "unsigned"):
                names = names[:-1]
            if names in C_SCALARS:
                return C_SCALARS[names]
            if len(names) == 1 and names[0] in typedefs:
                return names[0]
        if isinstance(inner, c_ast.Enum):
            return "core::ffi::c_int"
    raise CuvilError(f"--emit rust: no Rust mapping for the C type at {getattr(t, 'coord', '?')}; "
                     f"the header declares something the binding generator does not know")


def parse_api(header: str, prefix: str) -> dict:
    """The header's declarations: functions, typedefs and status enumerators."""
    try:
        import pycparser
        from pycparser import c_ast
    except ImportError:
        raise CuvilError("--emit rust derives its bindings from the header with pycparser: "
                         "pip install pycparser") from None
    with tempfile.TemporaryDirectory(prefix="cuvil_rust_") as d:
        tmp = Path(d)
        text = _preprocess(header, prefix, tmp, macros=False)
        defines = _preprocess(header, prefix, tmp, macros=True)
    libc_types = {"size_t", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t",
                  "int64_t", "uint64_t", "uintptr_t"}
    ast = pycparser.CParser().parse(text, f"{prefix}.h")
    typedefs: dict[str, str] = {}
    funcs: list[dict] = []
    status: list[tuple[str, int]] = []
    for e in ast.ext:
        if isinstance(e, c_ast.Typedef):
            if e.name in libc_types:
                continue
            typedefs[e.name] = rust_type(e.type, typedefs)
            if isinstance(e.type, c_ast.TypeDecl) and isinstance(e.type.type, c_ast.Enum):
                value = -1
                for en in e.type.type.values.enumerators:
                    value = int(en.value.value, 0) if en.value is not None else value + 1
                    status.append((en.name, value))
        elif isinstance(e, c_ast.FuncDef) and "static" in e.decl.storage:
            continue  # static inline helpers (quantize/dequantize): no symbol to link; lib.rs has its own
        elif isinstance(e, c_ast.Decl) and isinstance(e.type, c_ast.FuncDecl):
            params = []
            for i, p in enumerate(e.type.args.params if e.type.args else []):
                if isinstance(p, c_ast.Typename) and rust_type(p.type, typedefs) == "core::ffi::c_void" \
                        and not isinstance(p.type, c_ast.PtrDecl):
                    continue  # f(void)
                params.append((p.name or f"arg{i}", rust_type(p.type, typedefs)))
            ret = rust_type(e.type.type, typedefs)
            funcs.append({"name": e.name, "params": params, "ret": None if ret == "core::ffi::c_void" else ret})
        else:
            what = e.decl.name if isinstance(e, c_ast.FuncDef) else getattr(e, "name", None)
            what = what or f"a {type(getattr(e, 'type', e)).__name__.lower()} without a name"
            raise CuvilError(f"--emit rust: unexpected file-scope declaration '{what}' in the header")
    macros = {}
    for line in defines.splitlines():
        m = re.match(r"#define (\w+) (.*)$", line)
        if m:
            macros[m.group(1)] = m.group(2).strip()
    return {"funcs": funcs, "typedefs": typedefs, "status": status, "macros": macros}


def _int_macro(macros: dict, key: str) -> int:
    if key not in macros:
        raise CuvilError(f"--emit rust: the header lacks the macro {key}")
    return int(macros[key].rstrip("uUlL"), 0)


def _float_macro(macros: dict, key: str) -> np.float32:
    if key not in macros:
        raise CuvilError(f"--emit rust: the header lacks the macro {key}")
    return np.float32(float(macros[key].rstrip("fF")))


def rust_f32(v) -> str:
    s = str(np.float32(v))
    if s in ("inf", "-inf", "nan"):
        return {"inf": "f32::INFINITY", "-inf": "f32::NEG_INFINITY", "nan": "f32::NAN"}[s]
    if not any(ch in s for ch in ".e"):
        s += ".0"
    return f"{s}_f32"


def camel(s: str) -> str:
    return "".join(w[:1].upper() + w[1:].lower() for w in s.split("_") if w)


# ---------------------------------------------------------------------------
# the crate

def _io(c, api: dict, kind: str) -> list[dict]:
    g, P, p = c.graph, c.prefix.upper(), c.prefix
    names = g.inputs if kind == "input" else g.outputs
    macros = api["macros"]
    items = []
    for i, name in enumerate(names):
        t = g.tensors[name]
        K = f"{P}_{kind.upper()}_{i}"
        size = _int_macro(macros, f"{K}_SIZE")
        nbytes = _int_macro(macros, f"{K}_BYTES")
        rank = _int_macro(macros, f"{K}_RANK")
        shape = [int(x, 0) for x in re.findall(r"\d+", macros.get(f"{K}_SHAPE", ""))][:rank]
        tdef = f"{p}_{kind}_{i}_t"
        if tdef not in api["typedefs"]:
            raise CuvilError(f"--emit rust: the header lacks the typedef {tdef}")
        elem = api["typedefs"][tdef]
        if (size, nbytes, tuple(shape)) != (t.size, t.nbytes, tuple(t.shape)) or elem != RUST_ELEM.get(t.dtype):
            raise CuvilError(f"--emit rust: header and graph disagree on {kind} {i} '{visible(name)}'")
        item = {"index": i, "name": name, "size": size, "bytes": nbytes, "shape": shape, "dtype": t.dtype, "elem": elem, "tdef": tdef,
                "Ty": f"{kind.capitalize()}{i}", "K": f"{kind.upper()}_{i}", "quant": None}
        if t.quant is not None:
            scale = _float_macro(macros, f"{K}_SCALE")
            zp = _int_macro(macros, f"{K}_ZERO_POINT")
            qd = t.dtype if t.dtype in ("int8", "uint8") else t.quant.zero_point.dtype.name
            qd = qd if qd in ("int8", "uint8") else "uint8"
            item["quant"] = {"scale": float(scale), "scale_lit": rust_f32(scale), "scale_str": str(scale),
                             "zero_point": zp,
                             "qtype": RUST_ELEM[qd], "qmin": -128 if qd == "int8" else 0,
                             "qmax": 127 if qd == "int8" else 255}
        items.append(item)
    return items


def reference_data(c) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A seeded input per model input and the reference interpreter's outputs."""
    g = c.graph
    rng = np.random.default_rng(20240601)
    feeds = {}
    for name in g.inputs:
        t = g.tensors[name]
        if t.dtype in ("float32", "float64"):
            x = rng.standard_normal(t.shape).astype(t.dtype)
        elif t.dtype == "int8":
            x = rng.integers(-128, 128, t.shape).astype(np.int8)
        elif t.dtype == "uint8" and t.quant is not None:
            x = rng.integers(0, 256, t.shape).astype(np.uint8)
        else:  # indices, masks: small values that are in range for any Gather/Where
            x = rng.integers(0, 2, t.shape).astype(t.dtype)
        feeds[name] = x
    outs = reference.run(g, feeds)
    return [feeds[n] for n in g.inputs], [np.asarray(outs[n], g.tensors[n].dtype) for n in g.outputs]


def _le(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def quant_cases(q: dict) -> list[tuple[str, int]]:
    """Real values around quantization steps (ties included) and beyond the
    range, with the int8 value ONNX QuantizeLinear gives (round half to even
    in float32, saturate), computed here with numpy."""
    scale = np.float32(q["scale"])
    reals = [0.0, -0.0, float(scale) * 0.5, -float(scale) * 0.5, float(scale) * 1.5, -float(scale) * 2.5,
             float(scale) * 3.49, float(scale) * 300.0, -float(scale) * 300.0, 1e30, -1e30, 0.1, -0.37]
    out = []
    with np.errstate(all="ignore"):
        for r in reals:
            v = np.float32(np.float32(r) / scale)
            v = np.clip(v, np.float32(-65536.0), np.float32(65536.0))
            qv = int(np.clip(int(np.rint(v)) + q["zero_point"], q["qmin"], q["qmax"]))
            out.append((rust_f32(r), qv))
    return out


def emit(c, out: Path) -> dict[Path, str | bytes]:
    p, P = c.prefix, c.prefix.upper()
    api = parse_api(c.header, p)
    macros = api["macros"]
    arena_size = _int_macro(macros, f"{P}_ARENA_SIZE")
    arena_align = _int_macro(macros, f"{P}_ARENA_ALIGN")
    if arena_size != max(c.plan.arena_size, 1):
        raise CuvilError("--emit rust: header and plan disagree on the arena size")
    inputs, outputs = _io(c, api, "input"), _io(c, api, "output")
    if not inputs or not outputs:
        raise CuvilError("--emit rust: the model needs at least one input and one output")
    status = [(n, v) for n, v in api["status"] if n != f"{P}_STATUS_COUNT"]
    errors = [{"c": n, "value": v, "variant": camel(n[len(P) + 1:].removeprefix("ERR_"))}
              for n, v in status if n != f"{P}_OK"]
    seen = {"InputLength", "Status"}
    for e in errors:  # a status whose name would clash with the Rust-side variants gets a prefix
        if e["variant"] in seen or not e["variant"]:
            e["variant"] = "Status" + (e["variant"] or str(e["value"]))
        seen.add(e["variant"])
    ok = dict(status).get(f"{P}_OK")
    if ok is None:
        raise CuvilError(f"--emit rust: the header's status list lacks {P}_OK")
    names = {f["name"] for f in api["funcs"]}
    need = {f"{p}_input", f"{p}_output", f"{p}_run", f"{p}_status_str"}
    if not need <= names:
        raise CuvilError(f"--emit rust: the header lacks {sorted(need - names)}")
    ins_data, outs_data = reference_data(c)
    board = c.board
    arch = None
    mcpu = next((f.split("=", 1)[1] for f in board.cflags if f.startswith("-mcpu=")), None)
    if mcpu in CORTEX_M_ARCH:
        hard = "-mfloat-abi=hard" in board.cflags
        arch = CORTEX_M_ARCH[mcpu] + ("-none-eabihf" if hard else "-none-eabi")
    ctx = {
        "p": p, "P": P, "crate": p, "crate_ident": p.replace("-", "_"),
        "funcs": api["funcs"], "typedefs": api["typedefs"], "errors": errors, "ok": ok,
        "inputs": inputs, "outputs": outputs, "arena_size": arena_size, "arena_align": arena_align,
        "weights_bytes": c.weights_bytes, "macs": c.macs, "board": board.id, "board_cflags": list(board.cflags),
        "board_cflags_lit": ", ".join(rust_str(f) for f in board.cflags),
        "board_target": arch if arch else "", "summary": c.summary(),
        "quant_cases": {f"{k['K']}": quant_cases(k["quant"]) for k in inputs + outputs if k["quant"]},
        "single": len(inputs) == 1 and len(outputs) == 1,
        "null_error": next((e for e in errors if e["c"] == f"{P}_ERR_NULL"), None),
        "model_md": _pkg.render("_model.md.j2", _pkg.context(c)),
    }
    e = _pkg.env()
    root = out / FOLDER
    files: dict[Path, str | bytes] = {}
    for tpl, dest in (("Cargo.toml", "Cargo.toml"), ("build.rs", "build.rs"), ("lib.rs", "src/lib.rs"),
                      ("reference.rs", "tests/reference.rs"), ("README.md", "README.md"),
                      ("shim.c", "c/shim.c")):
        text = e.get_template(f"integrations/rust/{tpl}.j2").render(**ctx)
        files[root / dest] = re.sub(r"\n{3,}", "\n\n", text)
    files[root / "c" / f"{p}.h"] = c.header
    files[root / ".gitignore"] = "/target\nCargo.lock\n"
    for i, a in enumerate(ins_data):
        files[root / "tests" / "data" / f"input_{i}.bin"] = _le(a)
    for i, a in enumerate(outs_data):
        files[root / "tests" / "data" / f"output_{i}.bin"] = _le(a)
    return files
