"""Renode: `gen --emit renode` writes <name>.resc (interactive script) and
<name>.robot (a Robot Framework test for `renode-test`) next to the firmware
project; `sim --simulator renode` builds the UART-printing firmware, writes
both and runs `renode-test` when it is on PATH.

Boards need a [renode] table: `platform` (.repl path inside Renode), `uart`
(the peripheral the harness prints on, e.g. sysbus.usart2) and `uart_base`
(its address, for the harness's polled UART writer). The .robot waits for the
exact output lines the host reference predicts (integer outputs) and for
"CUVIL DONE"; a line that does not arrive fails the test.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from .. import boards
from ..codegen import env
from ..errors import BoardError, CuvilError, ToolError

NAME = "renode"
TIMEOUT = 120
RENODE_MISSING = ("Renode is not installed (renode-test not on PATH; it is not packaged for this project's "
                  "registries: see https://renode.io for a release, or use --simulator qemu)")


def renode_boards() -> list[str]:
    return [b.id for b in boards.all_boards().values() if b.renode]


def check_board(board) -> None:
    if not board.renode or "platform" not in board.renode or "uart" not in board.renode:
        raise BoardError(f"board '{board.id}' has no Renode platform ([renode] table); boards with one: "
                         f"{', '.join(renode_boards()) or 'none'}")
    if board.renode.get("uart_base") is None:
        raise BoardError(f"board '{board.id}': [renode] needs uart_base (the UART's address) for the harness")


def scripts(c, name: str, elf: str, expected: list[str], timeout: int = TIMEOUT) -> dict[str, str]:
    """{<name>.resc: ..., <name>.robot: ...}"""
    b = c.board
    check_board(b)
    kw = dict(name=name, p=c.prefix, board_name=b.name, board_id=b.id, platform=b.renode["platform"],
              uart=b.renode["uart"], elf=elf, expected=expected, timeout=timeout)
    return {f"{name}.resc": env().get_template("renode/model.resc.j2").render(**kw),
            f"{name}.robot": env().get_template("renode/model.robot.j2").render(**kw)}


def _expected(c, inputs) -> list[str]:
    """Output lines to wait for: exact for integer outputs; float outputs
    (newlib vs numpy last-bit differences) are not matched line by line."""
    from ..sim import firmware, qemu
    if any(c.graph.tensors[o].dtype.startswith("float") for o in c.graph.outputs):
        return []
    return firmware.output_lines(qemu.reference_outputs(c, inputs))


def emit(c, out: Path) -> dict[Path, str]:
    from ..sim import firmware
    check_board(c.board)
    target = "firmware"
    fs = scripts(c, c.prefix, f"{target}_renode.elf", _expected(c, firmware.default_inputs(c)))
    return {out / k: v for k, v in fs.items()}


def cli_sim(args, compile_fn, load_inputs) -> int:
    """`cuvil-mcu sim --simulator renode`."""
    b = boards.get(args.board)
    check_board(b)
    runner = shutil.which("renode-test")
    if runner is None:
        raise ToolError(RENODE_MISSING)
    c = compile_fn(args)
    inputs, _ = load_inputs(args.input, c)
    from ..sim import firmware, qemu
    gcc = qemu.tool(qemu.GCC)
    with tempfile.TemporaryDirectory(prefix="cuvil-renode-") as tmp:
        t = Path(tmp)
        fs = firmware.files(c, b, inputs, io="uart", simulate=False)
        fs.update(scripts(c, c.prefix, "fw.elf", _expected(c, inputs), int(args.timeout)))
        for k, v in fs.items():
            (t / k).write_text(v)
        r = subprocess.run(firmware.gcc_command(b, gcc, "uart", "fw.elf"), cwd=t, capture_output=True, text=True)
        if r.returncode != 0:
            raise ToolError(f"cross-compile failed:\n{r.stderr[-4000:]}")
        try:
            r = subprocess.run([runner, str(t / f"{c.prefix}.robot")], cwd=t, capture_output=True, text=True,
                               timeout=args.timeout + 60)
        except subprocess.TimeoutExpired:
            raise ToolError(f"renode-test timed out after {args.timeout + 60:g} s") from None
        print(r.stdout[-3000:])
        if r.returncode != 0:
            raise CuvilError(f"renode-test failed (exit {r.returncode}): the firmware's UART output did not match "
                             f"the host reference on {b.id}")
    print(f"renode   {b.id}: outputs identical to the host reference")
    return 0
