"""Renode: `gen --emit renode` writes <name>.resc (interactive script) and
<name>.robot (a Robot Framework test for `renode-test`) next to the firmware
project; `sim --simulator renode` builds the firmware, writes both and runs
`renode-test` when it is on PATH.

Boards need a [renode] table (`platform`: the .repl path inside Renode;
`uart`: the peripheral the harness prints on, e.g. sysbus.usart2) and a
[uart] table: the firmware initialises that UART itself (uart.c), so Renode
runs the same ELF a real board does, and the .robot pokes no register.

What the .robot checks: every O record the harness prints (each value's bit
pattern, fixed width), then CUVIL DONE, each as an anchored regex (^...$), so
a missing line, a different value or a line with extra characters fails.
Expected records: integer outputs from the host reference (numpy, exact);
float outputs from the same firmware source run on QEMU (the machine with the
board's core, same compiler and flags), whose floats are first checked
against the host reference within sim's float tolerance: float results agree
bit for bit between the two simulators, and within the tolerance with numpy.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import boards
from ..codegen import env
from ..errors import BoardError, CuvilError, ToolError

NAME = "renode"
# Virtual seconds a Wait For Line may take (Renode's terminal-tester timeouts
# run on the emulation's clock). Renode 1.15.1 runs KWS's 3.3 M instructions
# in 33 virtual ms; once the harness sleeps in WFI after CUVIL DONE, virtual
# time passes at about host time (Renode does not advance a halted core
# immediately), so a missing line costs this many host seconds. The old
# 120 s here, spent with the core in WFI, was the 144-250 s of a failing run.
ROBOT_WAIT = 10
# host seconds for Renode's start-up (mono, the platform, Robot's setup) on top of the waits
STARTUP_ALLOWANCE = 90
RENODE_MISSING = ("Renode is not installed (renode-test not on PATH; it is not packaged for this project's "
                  "registries: see https://renode.io for a release, or use --simulator qemu)")


def renode_boards() -> list[str]:
    return [b.id for b in boards.all_boards().values() if b.renode]


def check_board(board) -> None:
    if not board.renode or "platform" not in board.renode or "uart" not in board.renode:
        raise BoardError(f"board '{board.id}' has no Renode platform ([renode] table); boards with one: "
                         f"{', '.join(renode_boards()) or 'none'}")
    if not board.uart:
        raise BoardError(f"board '{board.id}': Renode needs a [uart] table (the UART the harness prints on)")


def robot_text(s: str) -> str:
    """s safe as plain text in a Robot Framework cell or comment and a Renode
    monitor comment: one line, no cell separator (two spaces, tab), no
    variable syntax (${ @{ &{ %{), no escape character."""
    s = "".join(c if c.isprintable() else " " for c in str(s))
    s = s.replace("\\", "/")
    s = re.sub(r"([$@&%])\{", r"\1(", s)
    return re.sub(r"\s{2,}", " ", s).strip()


def expected_regexes(lines: list[str]) -> list[str]:
    """Anchored patterns for the records (hex digits and spaces: nothing to escape)."""
    for ln in lines:
        if not re.fullmatch(r"[0-9A-Za-z ]+", ln):
            raise ValueError(f"record {ln!r} has characters the .robot would have to escape")
    return [f"^{ln}$" for ln in lines] + ["^CUVIL DONE$"]


def scripts(c, name: str, elf: str, expected: list[str], wait: int = ROBOT_WAIT) -> dict[str, str]:
    """{<name>.resc: ..., <name>.robot: ...}; expected: the O records to wait for."""
    b = c.board
    check_board(b)
    kw = dict(name=name, p=c.prefix, board_name=robot_text(b.name), board_id=robot_text(b.id),
              platform=b.renode["platform"], uart=b.renode["uart"], uart_name=robot_text(b.uart.get("name", "")),
              elf=elf, waits=expected_regexes(expected), timeout=wait)
    return {f"{name}.resc": env().get_template("renode/model.resc.j2").render(**kw),
            f"{name}.robot": env().get_template("renode/model.robot.j2").render(**kw)}


def expected_records(c, inputs) -> tuple[list[str], str]:
    """The O records the firmware must print for `inputs`, and where they
    come from. Float outputs need arm-none-eabi-gcc and QEMU (ToolError)."""
    from ..sim import firmware, qemu
    ref = qemu.reference_outputs(c, inputs)
    if not any(c.graph.tensors[o].dtype.startswith("float") for o in c.graph.outputs):
        return firmware.output_lines(ref), "the host reference (exact)"
    machine, _ = firmware.qemu_machine(c.board)
    try:
        r = qemu.simulate(c, inputs, c.board)
    except ToolError as e:
        raise ToolError(f"float outputs: the .robot expects the bit patterns the same firmware computes on QEMU "
                        f"({machine.sim['qemu_machine']}), which needs the cross compiler and QEMU: {e}") from None
    cmp = qemu.compare(r.outputs, ref, c.graph.outputs)
    if not cmp.ok:
        raise CuvilError(f"float outputs: the firmware on QEMU differs from the host reference beyond the "
                         f"tolerance ({cmp.first_mismatch}); no .robot written")
    return firmware.output_lines(r.outputs), (f"integer outputs vs the host reference, float bit patterns vs the "
                                               f"same firmware on QEMU {machine.sim['qemu_machine']}")


def emit(c, out: Path) -> dict[Path, str]:
    from ..sim import firmware
    check_board(c.board)
    lines, _ = expected_records(c, firmware.default_inputs(c))
    fs = scripts(c, c.prefix, "firmware.elf", lines)
    return {out / k: v for k, v in fs.items()}


def failure_lines(log: str, limit: int = 12) -> list[str]:
    """What Robot/Renode said went wrong, from renode-test's output."""
    keys = ("fail", "error", "cause", "terminal tester", "line containing", "timeout", "exception")
    hits = [ln.rstrip() for ln in log.splitlines() if ln.strip() and any(k in ln.lower() for k in keys)]
    return hits[-limit:]


def run_runner(cmd: list[str], cwd: Path, timeout: float) -> tuple[int | None, str]:
    """Run renode-test in its own process group (renode-test is a shell
    script that starts Python, which starts mono's Renode.exe): on timeout the
    whole group is killed, SIGTERM then SIGKILL. (returncode or None on
    timeout, combined output)."""
    log = cwd / "renode-test.log"
    with open(log, "wb") as f:
        p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                             start_new_session=True)
        rc: int | None = None
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            # on timeout, Ctrl-C, and after a normal exit too: children may outlive the runner
            _kill_group(p)
    return rc, log.read_text(errors="replace")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _kill_group(p: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the runner's process group, SIGKILL what is left after `grace` s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_alive(p.pid):
            break
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            p.poll()  # reap the leader: a zombie still counts as a member of its group
            if not _group_alive(p.pid):
                break
            time.sleep(0.05)
    p.poll()


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
    lines, source = expected_records(c, inputs)
    wait = max(1, min(ROBOT_WAIT, int(args.timeout // 4)))
    limit = args.timeout + STARTUP_ALLOWANCE  # longer than the Robot test can take, so Robot reports first
    with tempfile.TemporaryDirectory(prefix="cuvil-renode-") as tmp:
        t = Path(tmp)
        fs = firmware.files(c, b, inputs, io="uart")
        fs.update(scripts(c, c.prefix, "firmware.elf", lines, wait))
        for k, v in fs.items():
            (t / k).write_text(v)
        r = subprocess.run(firmware.gcc_command(b, gcc, "uart", "firmware.elf"), cwd=t, capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise ToolError(f"cross-compile failed:\n{r.stderr[-4000:]}")
        rc, log = run_runner([runner, str(t / f"{c.prefix}.robot")], t, limit)
        if rc is None:
            said = "\n".join(failure_lines(log)) or log[-2000:]
            raise ToolError(f"renode-test did not finish within {limit:g} s (--timeout {args.timeout:g} + "
                            f"{STARTUP_ALLOWANCE} s start-up); its processes were ended. It said:\n{said}")
        if rc != 0:
            said = "\n".join(failure_lines(log)) or log[-2000:]
            # a mismatch, like sim's on QEMU: exit 1 (errors in what the user gave exit otherwise)
            if "terminal tester failed" not in log.lower():  # Renode or Robot itself failed, not the comparison
                raise ToolError(f"renode-test failed (exit {rc}) before checking the UART output. It said:\n{said}")
            print(f"cuvil-mcu: error: renode-test failed (exit {rc}): the firmware's UART output on {b.id} did not "
                  f"match ({source}). Robot said:\n{said}", file=sys.stderr)
            return 1
    print(f"renode   {b.id}: all {len(lines)} output records and CUVIL DONE matched on {b.renode['uart']} "
          f"({source})")
    print("note     Renode's virtual time is not an inference time (its SysTick runs at the platform's clock, "
          "not the board's): use `sim` on QEMU for instruction counts")
    return 0
