"""The compile cache of `cuvil-mcu gen`.

A gen is keyed on everything its output depends on: the model file's bytes
(and a calibration file's), the options (all but where files go), the board
file, the compiler's own sources (package, templates, boards, firmware
example: so an edited checkout never serves stale output), and for the
emitters that run a C compiler (so, wasm) that compiler's identity. An entry
is a folder <root>/gen/<key>/ holding the output files, their SHA-256 in
manifest.json and the summary gen printed. A hit is replayed only when the
manifest names this key and every file's hash checks; anything else (a
corrupt, truncated or foreign entry) is ignored, removed and recomputed.

Root: $CUVIL_CACHE_DIR, else $XDG_CACHE_HOME/cuvil-mcu, else ~/.cache/cuvil-mcu
(the host binaries of `run` live in its host/ folder, sim/host.py; Jinja's
compiled templates in templates-jinja<version>/, codegen.env).
This module imports nothing heavy: a hit must not pay for numpy or onnx.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

FORMAT = 1
# argparse fields that say where output goes or how gen runs, not what it makes
NOT_KEYED = {"output", "plan_out", "no_cache", "force", "fn", "cmd"}
# emit targets whose output is a binary built by an external compiler
COMPILER_EMITS = {"so": ("CC", "cc"), "wasm": ("CUVIL_WASM_CC", "clang")}


def templates_dir() -> Path:
    """Where codegen keeps Jinja's compiled templates (codegen.env). Not
    outputs, so --no-cache leaves them in use: Jinja checks each one against
    its template's source."""
    import jinja2
    return root() / f"templates-jinja{jinja2.__version__}"


def root() -> Path:
    base = os.environ.get("CUVIL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cuvil-mcu")
    return Path(base)


_FINGERPRINT: str | None = None


def fingerprint() -> str:
    """SHA-256 over the compiler's own files (sources, templates, boards,
    bare-metal example), in a fixed order."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        here = Path(__file__).resolve().parent
        h = hashlib.sha256(f"python {sys.version_info[:2]}\0".encode())
        dirs = [here] + [d for d in (here.parent / "templates", here.parent / "boards",
                                     here.parent / "firmware_examples" / "baremetal",
                                     here / "_templates", here / "_boards", here / "_firmware") if d.is_dir()]
        for d in dirs:
            for p in sorted(d.rglob("*")):
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                    h.update(str(p.relative_to(d)).encode() + b"\0")
                    h.update(p.read_bytes())
        _FINGERPRINT = h.hexdigest()
    return _FINGERPRINT


def _file_digest(path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _tool_identity(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        return f"{name}: missing"
    st = os.stat(os.path.realpath(exe))
    return f"{name}: {os.path.realpath(exe)} {st.st_size} {st.st_mtime_ns}"


def gen_key(args, board_file: Path | None) -> str | None:
    """The key of a gen run, or None when it cannot be cached (an input file
    cannot be read: gen itself will say why)."""
    model = _file_digest(args.model)
    if model is None:
        return None
    opts = {k: v for k, v in sorted(vars(args).items()) if k not in NOT_KEYED}
    parts = ["cuvil-mcu gen cache", str(FORMAT), fingerprint(), model, json.dumps(opts, default=str)]
    if getattr(args, "calibration", None):
        cal = _file_digest(args.calibration)
        if cal is None:
            return None
        parts.append(cal)
    if board_file is not None:
        d = _file_digest(board_file)
        parts.append(d or "no board file")
    emits = {e.strip() for e in (args.emit or "").split(",")}
    for e in sorted(emits & set(COMPILER_EMITS)):
        var, default = COMPILER_EMITS[e]
        parts.append(_tool_identity(os.environ.get(var, default)))
    parts.append(f"plan out: {bool(getattr(args, 'plan_out', None))}")
    if str(args.model).endswith(".pt2"):  # the ONNX torch.onnx.export writes depends on its version
        from importlib import metadata
        for dist in ("torch", "onnxscript"):
            try:
                parts.append(f"{dist} {metadata.version(dist)}")
            except metadata.PackageNotFoundError:
                parts.append(f"{dist} missing")
    if emits & set(COMPILER_EMITS) or getattr(args, "board", "host") != "host":
        parts.append(f"CC={os.environ.get('CC', '')}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def lookup(key: str) -> tuple[list[tuple[str, str, bytes]], str] | None:
    """([(role, relative path, bytes)], summary) of a valid entry, else None
    (and an invalid entry is removed)."""
    d = root() / "gen" / key
    try:
        manifest = json.loads((d / "manifest.json").read_text())
        if manifest.get("format") != FORMAT or manifest.get("key") != key:
            raise ValueError("foreign entry")
        files = []
        for i, f in enumerate(manifest["files"]):
            data = (d / f"f{i}").read_bytes()
            if len(data) != f["size"] or hashlib.sha256(data).hexdigest() != f["sha256"]:
                raise ValueError(f"file {i} does not match its hash")
            if f["role"] not in ("out", "plan") or Path(f["path"]).is_absolute() or ".." in Path(f["path"]).parts:
                raise ValueError("bad path")
            files.append((f["role"], f["path"], data))
        summary = manifest["summary"]
        if not isinstance(summary, str):
            raise ValueError("bad summary")
        return files, summary
    except FileNotFoundError:
        if d.exists():
            shutil.rmtree(d, ignore_errors=True)
        return None
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError):
        shutil.rmtree(d, ignore_errors=True)
        return None


def store(key: str, files: list[tuple[str, str, bytes]], summary: str) -> None:
    """Best effort: a cache that cannot be written never fails a gen."""
    base = root() / "gen"
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}.", dir=base))
    except OSError:
        return
    try:
        entries = []
        for i, (role, rel, data) in enumerate(files):
            (tmp / f"f{i}").write_bytes(data)
            entries.append({"role": role, "path": rel, "size": len(data),
                            "sha256": hashlib.sha256(data).hexdigest()})
        (tmp / "manifest.json").write_text(json.dumps({"format": FORMAT, "key": key, "files": entries,
                                                       "summary": summary}, indent=1))
        dest = base / key
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)
    except OSError:
        pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
