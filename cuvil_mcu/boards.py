"""Board definitions: one TOML file per board in boards/.

Fields (see boards/README.md): id, name, core, isa (dsp/fpu/mve/neon), cflags,
ram, flash (bytes the model may use; absent = unlimited, e.g. host), clock_hz,
and [sim] (QEMU machine and memory map), renode platform, zephyr and
platformio board names.
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
    flash_base: int | None = None   # where flash/RAM start (firmware linker script)
    ram_base: int | None = None
    linker_ram: int | None = None   # contiguous RAM at ram_base, when smaller than ram
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
           "flash_base", "ram_base", "linker_ram", "sim",
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


def check_budget(board: Board, arena: int, flash: int) -> list[str]:
    """Raise BudgetError naming every overflow; return lines for the summary."""
    problems, lines = [], []
    ram_need = arena + board.stack_reserve
    if board.ram is not None:
        lines.append(f"RAM   {ram_need:>10,} / {board.ram:,} B" +
                     (f" (arena {arena:,} + stack reserve {board.stack_reserve:,})" if board.stack_reserve else ""))
        if ram_need > board.ram:
            problems.append(f"RAM: needs {ram_need:,} B (arena {arena:,} + stack reserve {board.stack_reserve:,}), "
                            f"board has {board.ram:,} B: over by {ram_need - board.ram:,} B")
    if board.flash is not None:
        lines.append(f"flash {flash:>10,} / {board.flash:,} B (constants)")
        if flash > board.flash:
            problems.append(f"flash: constants need {flash:,} B, board has {board.flash:,} B: "
                            f"over by {flash - board.flash:,} B")
    if problems:
        raise BudgetError(f"model does not fit board '{board.id}': " + "; ".join(problems))
    return lines
