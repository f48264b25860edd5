"""Shared by the targets that compile the header into a binary (so, wasm):
one build in a temporary folder, relative file names and the folder mapped
to '.', so the same inputs give the same bytes. Not a target (no NAME)."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from ..errors import ToolError


def build(c, target: str, sources: dict[str, str], command, product: str) -> bytes:
    """sources: file name -> text written next to <prefix>.h; command(tmp):
    the compiler command (run in tmp); product: the file it writes there."""
    with tempfile.TemporaryDirectory(prefix=f"cuvil-{target}-") as tmp:
        t = Path(tmp)
        (t / f"{c.prefix}.h").write_text(c.header)
        for name, text in sources.items():
            (t / name).write_text(text)
        cmd = [*command(tmp), "-o", product]
        r = subprocess.run(cmd, cwd=t, capture_output=True, text=True)
        if r.returncode != 0:
            raise ToolError(f"--emit {target}: building {product} failed ({' '.join(cmd)}): "
                            + " ".join(r.stderr.split())[-1500:])
        return (t / product).read_bytes()
