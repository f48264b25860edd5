"""WebAssembly (`--emit wasm`): <name>.wasm, the ES module <name>.mjs that
loads it, and the demo page <name>.html.

The module is the header compiled once for wasm32 by clang/lld (Debian's
clang and lld; memcpy/memset and the math functions the float kernels call
from Debian's wasi-libc, linked statically: the module imports nothing, so
no WASI shim is needed) with a thin export file
(templates/integrations/wasm/exports.c.j2): a static arena, run, input,
output, status_str, and with --weights separate a buffer to copy the blob
into and bind_weights. No kernel is re-implemented here.

<name>.mjs works unchanged in Node (path, file: URL or http URL) and in a
browser (URL): `const m = await loadModel(pathOrUrl); m.run(typedArray)`
returns the output as a typed array (a list for several outputs).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..errors import ToolError
from . import _build, _pkg

NAME = "wasm"
SYSROOTS = ("/usr", "/usr/share/wasi-sysroot")   # Debian's wasi-libc: /usr/{include,lib}/wasm32-wasi
JS_ARRAYS = {"float32": "Float32Array", "float64": "Float64Array", "int8": "Int8Array", "uint8": "Uint8Array",
             "int16": "Int16Array", "int32": "Int32Array", "int64": "BigInt64Array", "bool": "Uint8Array"}


def toolchain() -> tuple[str, str]:
    """(clang, wasi sysroot); ToolError naming the packages when missing."""
    cc = os.environ.get("CUVIL_WASM_CC", "clang")
    if shutil.which(cc) is None:
        raise ToolError(f"--emit wasm: '{cc}' not found (apt-get install clang lld wasi-libc)")
    if shutil.which("wasm-ld") is None and not any(shutil.which(f"wasm-ld-{v}") for v in range(11, 20)):
        raise ToolError("--emit wasm: wasm-ld not found (apt-get install lld)")
    for root in SYSROOTS:
        if (Path(root) / "lib" / "wasm32-wasi" / "libc.a").exists():
            return cc, root
    raise ToolError("--emit wasm: wasi-libc not found (apt-get install wasi-libc)")


def meta(c) -> dict:
    def io(t):
        d = {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "size": t.size, "bytes": t.bytes,
             "array": JS_ARRAYS[t.dtype]}
        if t.quantized:
            d.update(scale=t.scale, zero_point=t.zero_point)
        return d
    ins, outs = _pkg.ios(c, "input"), _pkg.ios(c, "output")
    bad = [t for t in ins + outs if t.dtype not in JS_ARRAYS]
    if bad:
        raise ToolError(f"--emit wasm: {bad[0].kind} '{bad[0].name}' is {bad[0].dtype}, which has no "
                        f"JavaScript typed array")
    return {"name": c.prefix, "arena": c.plan.arena_size, "macs": c.macs,
            "weights": "separate" if c.weights_blob is not None else "inline",
            "weights_bytes": len(c.weights_blob) if c.weights_blob is not None else c.weights_bytes,
            "inputs": [io(t) for t in ins], "outputs": [io(t) for t in outs]}


def build(c, cc: str, sysroot: str) -> bytes:
    ctx = _pkg.context(c, separate=c.weights_blob is not None)
    return _build.build(c, NAME, {"exports.c": _pkg.render("wasm/exports.c.j2", ctx)}, lambda tmp: [
        cc, "--target=wasm32-wasi", f"--sysroot={sysroot}", "-O2", "-std=c99", "-Wall", "-Wextra",
        f"-ffile-prefix-map={tmp}=.", "-nostartfiles", "-Wl,--no-entry", "-Wl,--strip-all",
        "-Wl,--export-dynamic", "exports.c", "-lm"], f"{c.prefix}.wasm")


def emit(c, out: Path) -> dict:
    cc, sysroot = toolchain()
    out = Path(out)
    m = meta(c)
    ctx = _pkg.context(c, meta=json.dumps(m, indent=1, sort_keys=True), m=m)
    files = {
        out / f"{c.prefix}.wasm": build(c, cc, sysroot),
        out / f"{c.prefix}.mjs": _pkg.render("wasm/loader.mjs.j2", ctx),
        out / f"{c.prefix}.html": _pkg.render("wasm/demo.html.j2", ctx),
    }
    return files
