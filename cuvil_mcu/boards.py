"""Board definitions: one TOML file per board in boards/.

Fields (see boards/README.md): id, name, core, isa (dsp/fpu/mve/neon), cflags,
the memory the firmware links (flash_base/flash, ram_base/ram: exactly the
FLASH and RAM regions of the generated linker script), what else the firmware
puts there (stack_reserve, code_reserve, data_reserve) and the margins kept
free; clock_hz, [uart] (the harness's debug UART), [sim] (QEMU machine),
[renode], zephyr and platformio board names. `budget()` turns them into the
numbers `gen` checks, so gen's "fits" and the linker agree.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BoardError, BudgetError


def board_dir() -> Path:
    here = Path(__file__).resolve().parent
    for cand in (here.parent / "boards", here / "_boards"):
        if cand.is_dir() and any(cand.glob("*.toml")):
            return cand
    raise BoardError("board definitions not found (broken install?)")


@dataclass
class Board:
    id: str
    name: str
    core: str
    isa: dict = field(default_factory=dict)
    cflags: list[str] = field(default_factory=list)
    ram: int | None = None
    flash: int | None = None
    clock_hz: int | None = None
    stack_reserve: int = 0
    flash_base: int | None = None   # where the linker script's FLASH/RAM regions start
    ram_base: int | None = None
    code_reserve: int = 0           # flash for code besides the weights (start-up, harness, kernels, libc)
    data_reserve: int = 0           # RAM for the firmware's own .data/.bss besides the arena
    flash_margin: int = 0           # kept free for the user's application
    ram_margin: int = 0
    harness_clock_hz: int | None = None  # core clock as the harness runs it (no PLL set up)
    uart: dict = field(default_factory=dict)
    flashing: list[str] = field(default_factory=list)
    boot2: bool = False             # RP2040: the image starts with a 256-byte second-stage boot loader  # how to flash the project (README of gen's project)
    sim: dict = field(default_factory=dict)
    renode: dict = field(default_factory=dict)
    zephyr_board: str | None = None
    platformio_board: str | None = None
    vendor: str = ""
    requant: str = "fixed"   # default requantization of int8 ops on this board
    emit: list[str] = field(default_factory=list)  # gen's default --emit targets
    flash_wait_states: int = 0   # cycle model: extra cycles per data word loaded from flash (sim/cycles.py)

    def has(self, feature: str) -> bool:
        return bool(self.isa.get(feature, False))


_FIELDS = {"id", "name", "core", "isa", "cflags", "ram", "flash", "clock_hz", "stack_reserve",
           "flash_base", "ram_base", "code_reserve", "data_reserve", "flash_margin", "ram_margin",
           "harness_clock_hz", "uart", "flashing", "boot2", "sim",
           "renode", "zephyr_board", "platformio_board", "vendor", "requant", "emit", "flash_wait_states"}


def _load(path: Path) -> Board:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise BoardError(f"{path.name}: not valid TOML: {e}") from None
    unknown = set(data) - _FIELDS
    if unknown:
        raise BoardError(f"{path.name}: unknown field(s) {sorted(unknown)}")
    for req in ("id", "name", "core"):
        if req not in data:
            raise BoardError(f"{path.name}: missing field '{req}'")
    if data["id"] != path.stem:
        raise BoardError(f"{path.name}: id '{data['id']}' must match the file name")
    return Board(**data)


def all_boards() -> dict[str, Board]:
    return {p.stem: _load(p) for p in sorted(board_dir().glob("*.toml"))}


def get(board_id: str) -> Board:
    boards = all_boards()
    if board_id not in boards:
        raise BoardError(f"unknown board '{board_id}'; valid boards: {', '.join(boards)}")
    return boards[board_id]


@dataclass
class Budget:
    """What `gen` counts against each linker region (all bytes)."""
    flash: int | None      # FLASH region length (None: no limit)
    ram: int | None        # RAM region length
    stack: int
    code: int
    data: int
    flash_margin: int
    ram_margin: int


def budget(board: Board) -> Budget:
    return Budget(board.flash, board.ram, board.stack_reserve, board.code_reserve, board.data_reserve,
                  board.flash_margin, board.ram_margin)


def check_budget(board: Board, arena: int, constants: int, samples: int = 0) -> list[str]:
    """Raise BudgetError naming every overflow; return lines for the summary.

    RAM need = arena + stack_reserve + data_reserve + ram_margin, against the
    linker script's RAM region; flash need = constants + the harness's input
    samples (samples.c, in flash on a real board) + code_reserve +
    flash_margin, against its FLASH region. A model under both links."""
    bd = budget(board)
    problems, lines = [], []
    if bd.ram is not None:
        need = arena + bd.stack + bd.data + bd.ram_margin
        parts = ", ".join(f"{k} {v:,}" for k, v in (("arena", arena), ("stack reserve", bd.stack), ("harness data", bd.data),
                                                    ("margin", bd.ram_margin)) if v or k == "arena")
        lines.append(f"RAM   {need:>10,} / {bd.ram:,} B ({parts})")
        if need > bd.ram:
            problems.append(f"RAM: needs {need:,} B ({parts}), board has {bd.ram:,} B: over by {need - bd.ram:,} B")
    if bd.flash is not None:
        need = constants + samples + bd.code + bd.flash_margin
        parts = ", ".join(f"{k} {v:,}" for k, v in (("constants", constants), ("input samples", samples),
                                                    ("code", bd.code), ("margin", bd.flash_margin))
                          if v or k == "constants")
        lines.append(f"flash {need:>10,} / {bd.flash:,} B ({parts})")
        if need > bd.flash:
            problems.append(f"flash: needs {need:,} B ({parts}), board has {bd.flash:,} B: "
                            f"over by {need - bd.flash:,} B")
    if problems:
        raise BudgetError(f"model does not fit board '{board.id}': " + "; ".join(problems))
    return lines
