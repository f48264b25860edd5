"""Where the command line's files go: all or nothing, never over an input,
never over a file the user wrote.

    written = outputs.write(files, inputs=[("the model", "m.onnx")], root=out, force=args.force)

- An output is never an input of the same run, nor another output of it
  (paths compared after resolving symlinks; existing files also by inode,
  so a hard link counts as the same file).
- With `root` (gen's -o folder) an existing file is replaced only when gen
  wrote it there and it is unchanged since: the folder's manifest
  `.cuvil-mcu-files` lists each file gen wrote with its SHA-256
  (`sha256sum -c .cuvil-mcu-files` in that folder checks them). Anything
  else -- the user's main.c or Makefile, an edited generated file -- stops
  the run naming the files, unless `force`.
- Every file is staged under a temporary name in its folder and renamed only
  once all are staged; SIGINT/SIGTERM (inside `signals_raise()`)
  during that are held back until the staged files are renamed or removed,
  so an interrupted run leaves no `.name.XXXXXXXX` behind.
- OS errors (name too long, file-size limit, disk full, permission) become
  one-line CuvilErrors naming the file.

Nothing heavy is imported here: a cached gen must not pay for numpy.
"""
from __future__ import annotations

import errno
import hashlib
import os
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import CuvilError

MANIFEST = ".cuvil-mcu-files"
# how many files a refusal names before "and N more" (the message stays one readable line)
NAMED = 6


class OutputError(CuvilError):
    """An output would replace an input, another output or a file gen did not write."""


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived (raised by the handler `signals_raise` sets)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# ---------------------------------------------------------------- signals

_held = 0            # > 0 while files are staged: signals wait
_pending: list[int] = []


def _on_signal(signum, frame):
    if _held:
        _pending.append(signum)
        return
    raise Interrupted(signum)


@contextmanager
def signals_raise():
    """While inside, SIGINT and SIGTERM raise Interrupted (so `finally` blocks
    and temporary folders clean up), except inside `held_signals()`, where
    they wait; the previous handlers come back on exit. (Only the main thread
    can set handlers: elsewhere this does nothing.)"""
    old = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            old[s] = signal.signal(s, _on_signal)
    except ValueError:
        pass
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def held_signals():
    """Signals that arrive inside wait until the block (and its cleanup) is
    done, then raise Interrupted."""
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
    if not _held and _pending:
        raise Interrupted(_pending.pop(0))


def _interrupted_meanwhile() -> None:
    if _pending:
        raise Interrupted(_pending.pop(0))


# ---------------------------------------------------------------- errors

# OSErrors that mean the machine refused, not that cuvil-mcu has a bug (the CLI prints one line)
ENVIRONMENT_ERRNOS = {errno.EFBIG, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG, errno.EROFS, errno.EACCES,
                      errno.EPERM, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EIO}
HINTS = {errno.EFBIG: "over the file-size limit (ulimit -f)"}


def os_error(path, e: OSError) -> CuvilError:
    """One line for an OSError while writing `path`."""
    hint = HINTS.get(e.errno)
    return CuvilError(f"cannot write {short(path)}: {e.strerror or type(e).__name__}" + (f": {hint}" if hint else ""))


def short(path, limit: int = 160) -> str:
    s = str(path)
    return s if len(s) <= limit else f"{s[:limit // 2]}...{s[-limit // 2:]} ({len(s)} characters)"


# ---------------------------------------------------------------- identity

def _identity(path) -> tuple:
    """The file a path means: its inode when it exists (hard links, symlinks),
    else its resolved path."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", os.path.normcase(real))


def check_clashes(outputs: list[tuple[str, Path]], inputs: list[tuple[str, str | Path]] = ()) -> None:
    """Refuse an output that is an input, or two outputs that are one file.
    outputs/inputs: (what it is, for the message; path)."""
    ins: dict[tuple, tuple[str, str]] = {}
    for what, p in inputs:
        if p is None:
            continue
        try:
            ins.setdefault(_identity(p), (what, str(p)))
        except (OSError, ValueError):
            continue
    seen: dict[tuple, str] = {}
    for what, p in outputs:
        try:
            ident = _identity(p)
        except (OSError, ValueError) as e:
            raise os_error(p, e if isinstance(e, OSError) else OSError(str(e))) from None
        if ident in ins:
            iw, ip = ins[ident]
            same = "" if os.path.normcase(os.path.abspath(ip)) == os.path.normcase(os.path.abspath(p)) \
                else f" (the same file as {short(ip)})"
            raise OutputError(f"{what} {short(p)} would overwrite {iw}{same}: choose another file")
        if ident in seen:
            raise OutputError(f"{what} {short(p)} is also where {seen[ident]} goes: choose another file")
        seen[ident] = f"{what}"


# ---------------------------------------------------------------- manifest

def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rel(path: Path, root: Path) -> str:
    return os.path.relpath(os.path.abspath(path), os.path.abspath(root)).replace(os.sep, "/")


def read_manifest(root: Path) -> dict[str, str]:
    """relative path -> SHA-256 of the files gen wrote into root."""
    try:
        text = (root / MANIFEST).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    out = {}
    for line in text.splitlines():
        digest, sep, rel = line.partition("  ")
        if sep and len(digest) == 64 and not line.startswith("#"):
            out[rel] = digest
    return out


def _recordable(rel: str) -> bool:
    # sha256sum escapes such names; they are simply not recorded (gen then treats them as the user's)
    return not any(c in rel for c in "\n\r\\")


def foreign(files, root: Path) -> list[Path]:
    """Existing files among `files` that gen did not write into root, or that
    changed since."""
    known = read_manifest(root)
    out = []
    for p in files:
        if not os.path.lexists(p):
            continue
        want = known.get(_rel(p, root))
        try:
            ours = want is not None and not os.path.islink(p) and _digest(Path(p).read_bytes()) == want
        except OSError:
            ours = False
        if not ours:
            out.append(Path(p))
    return out


def _manifest_text(root: Path, written: dict[Path, bytes]) -> str:
    entries = {rel: d for rel, d in read_manifest(root).items() if os.path.lexists(root / rel)}
    for p, data in written.items():
        rel = _rel(p, root)
        if _recordable(rel):
            entries[rel] = _digest(data)
    return ("# files cuvil-mcu gen wrote here; gen replaces them only while unchanged "
            "(check: sha256sum -c .cuvil-mcu-files)\n"
            + "".join(f"{d}  {rel}\n" for rel, d in sorted(entries.items())))


# ---------------------------------------------------------------- writing

def write(files: dict[Path, str | bytes], *, inputs=(), labels: dict[Path, str] | None = None,
          root: Path | None = None, force: bool = False) -> list[Path]:
    """Write every file or none; return them in order. See the module text for
    the rules. labels: what each output is, for messages (default 'output')."""
    labels = labels or {}
    data = {Path(p): (v.encode() if isinstance(v, str) else v) for p, v in files.items()}
    check_clashes([(labels.get(p, "output"), p) for p in data], inputs)
    for p in data:
        try:
            if p.is_dir():
                raise CuvilError(f"cannot write {short(p)}: it is a directory")
        except OSError as e:
            raise os_error(p, e) from None
    if root is not None:
        groups = _by_manifest(data, Path(root))
        if not force:
            theirs = [p for folder, ps in groups.items() for p in foreign(ps, folder)]
            if theirs:
                names = ", ".join(short(p, 80) for p in theirs[:NAMED])
                more = f" and {len(theirs) - NAMED} more" if len(theirs) > NAMED else ""
                verb = "exists" if len(theirs) == 1 else "exist"
                raise OutputError(f"{names}{more} {verb} and gen did not write {'it' if len(theirs) == 1 else 'them'} "
                                  f"(or {'it' if len(theirs) == 1 else 'they'} changed since): --force overwrites, "
                                  f"or choose another -o folder")
        for folder, ps in groups.items():
            data[folder / MANIFEST] = _manifest_text(folder, {p: data[p] for p in ps}).encode()
    _write_all(data)
    return [p for p in data if p.name != MANIFEST]


def _by_manifest(data: dict[Path, bytes], root: Path) -> dict[Path, list[Path]]:
    """The manifest folder of each file: root for the files under it, a
    file's own folder for one outside it (a --plan-out beside the model), so
    a later gen with another -o still knows that file as gen's."""
    out: dict[Path, list[Path]] = {}
    top = os.path.abspath(root)
    for p in data:
        inside = os.path.commonpath([top, os.path.abspath(p)]) == top
        out.setdefault(root if inside else p.parent, []).append(p)
    return out
    _write_all(data)
    return [p for p in data if root is None or p != root / MANIFEST]


def _write_all(files: dict[Path, bytes]) -> None:
    """Stage each file next to its destination, then rename them all."""
    staged: list[tuple[str, Path]] = []
    made: list[Path] = []      # folders this call created: removed again when it fails
    umask = os.umask(0)
    os.umask(umask)
    done = False
    with held_signals():
        try:
            for path, content in files.items():
                blocker = next((d for d in path.parents if os.path.lexists(d) and not d.is_dir()), None)
                if blocker is not None:
                    raise CuvilError(f"cannot write {short(path)}: {short(blocker)} is a file, not a folder")
                try:
                    missing = [d for d in path.parents if not os.path.lexists(d)]
                    path.parent.mkdir(parents=True, exist_ok=True)
                    made += reversed(missing)
                    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", dir=path.parent)
                except OSError as e:
                    raise os_error(path, e) from None
                staged.append((tmp, path))
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(content)
                    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is not what a generated file should have
                except OSError as e:
                    raise os_error(path, e) from None
                _interrupted_meanwhile()
            for tmp, path in staged:
                try:
                    os.replace(tmp, path)
                except OSError as e:
                    raise os_error(path, e) from None
            done = True
        finally:
            for tmp, _ in staged:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            if not done:
                for d in reversed(made):
                    try:
                        d.rmdir()
                    except OSError:
                        pass


def listing(written: list[Path], root: Path | None = None) -> str:
    """'11 files in out/: model.h, main.c, ...; plans/kws.json' (paths outside
    root as given)."""
    inside, outside = [], []
    for p in written:
        rel = _rel(p, root) if root is not None else "../"
        (outside if rel.startswith("../") else inside).append(rel if not rel.startswith("../") else str(p))
    n = len(written)
    head = f"{n} file{'s' if n != 1 else ''}"
    if inside:
        folder = str(root).rstrip(os.sep) + os.sep
        return f"{head} in {folder}: {', '.join(inside)}" + "".join(f"; {p}" for p in outside)
    return f"{head}: {', '.join(outside)}" if outside else "no files"
