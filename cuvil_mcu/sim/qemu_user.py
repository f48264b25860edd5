"""Run generated code on a Cortex-A board through QEMU's user-mode emulator.

For boards whose [sim] table says `runner = "qemu-user"` (boards/README.md):
the host harness (templates/harness/host_main.c.j2) is cross-compiled with the
board's `cc` and `cflags` by sim.host.build, and run by sim.host.run under
`<qemu> -cpu <cpu> -L <sysroot>`. The CPU model is pinned so an instruction
the core lacks traps (SIGILL) instead of running on QEMU's default `max` CPU.
"""
from __future__ import annotations

import shutil
import signal
from pathlib import Path

import numpy as np

from ..errors import ToolError
from . import host

RUNNER = "qemu-user"


def is_qemu_user(board) -> bool:
    return bool(board.sim) and board.sim.get("runner") == RUNNER


def _sim(board, key: str) -> str:
    if not is_qemu_user(board):
        raise ToolError(f"board '{board.id}' does not run through qemu-user ([sim] runner is "
                        f"{board.sim.get('runner') if board.sim else None!r})")
    v = board.sim.get(key)
    if not v:
        raise ToolError(f"board '{board.id}': [sim] has no '{key}' (needed by the qemu-user runner)")
    return str(v)


def compiler(board) -> str:
    """The board's cross compiler, checked to be installed."""
    cc = _sim(board, "cc")
    if shutil.which(cc) is None:
        pkg = board.sim.get("cc_package", "the cross compiler")
        raise ToolError(f"cross compiler '{cc}' for board '{board.id}' not found "
                        f"(apt-get install {pkg})")
    return cc


def command(board) -> list[str]:
    """The command prefix that runs one of the board's executables:
    [qemu, -cpu, cpu, -L, sysroot]."""
    qemu, cpu, sysroot = _sim(board, "qemu"), _sim(board, "cpu"), _sim(board, "sysroot")
    if shutil.which(qemu) is None:
        raise ToolError(f"'{qemu}' for board '{board.id}' not found "
                        f"(apt-get install {board.sim.get('qemu_package', 'qemu-user')})")
    if not Path(sysroot).is_dir():
        raise ToolError(f"sysroot '{sysroot}' of board '{board.id}' not found "
                        f"(apt-get install {board.sim.get('cc_package', 'the cross libc')})")
    return [qemu, "-cpu", cpu, "-L", sysroot]


def build(header: str, prefix: str, in_bytes: list[int], out_bytes: list[int], board) -> Path:
    """The model's harness cross-compiled for the board (cached like sim.host)."""
    return host.build(header, prefix, in_bytes, out_bytes, cc=compiler(board), cflags=list(board.cflags))


def run(exe: Path, inputs: list[np.ndarray], out_specs, samples: int, board) -> list[np.ndarray]:
    """sim.host.run under qemu-user; a signal (SIGILL: an instruction the
    pinned cpu lacks) is named in the error."""
    prefix = command(board)
    try:
        return host.run(exe, inputs, out_specs, samples, runner=prefix)
    except ToolError as e:
        msg = str(e)
        for sig in (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT):
            if f"(exit {-int(sig)})" in msg or f"(exit {128 + int(sig)})" in msg:
                msg += (f"\n{sig.name} under {' '.join(prefix)}"
                        + (": an instruction the pinned cpu lacks" if sig == signal.SIGILL else ""))
                break
        raise ToolError(msg) from None


def compile_and_run(compiled, inputs: list[np.ndarray], samples: int | None = None) -> list[np.ndarray]:
    """Build the Compiled model for its board and run the samples
    (inputs: per model input, (samples, *shape))."""
    g = compiled.graph
    exe = build(compiled.header, compiled.prefix, [g.tensors[n].nbytes for n in g.inputs],
                [g.tensors[n].nbytes for n in g.outputs], compiled.board)
    return run(exe, inputs, compiled.out_specs, inputs[0].shape[0] if samples is None else samples,
               compiled.board)
