"""cuvil-mcu command line: gen | run | sim | report | validate | boards | ops.

User mistakes (CuvilError, argparse's own) print one line on stderr and exit
non-zero; no traceback. Files are written only once everything succeeded,
all or none, never over an input of the run nor (gen) over a file gen did
not write; SIGINT/SIGTERM leave nothing half-written (outputs.py).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import __version__
from .errors import CuvilError, InputError, ToolError, one_line


def _write(files: dict[Path, str | bytes], args, **kw) -> list[Path]:
    """All or nothing, never over one of this run's inputs (outputs.py)."""
    from . import outputs
    return outputs.write(files, inputs=_inputs(args), **kw)


def _inputs(args) -> list[tuple[str, str]]:
    """The files this run reads, for outputs.check_clashes."""
    named = (("model", "the input model"), ("calibration", "the --calibration file"),
             ("input", "the --input file"), ("data", "the --data file"), ("labels", "the --labels file"),
             ("reference", "the --reference model"))
    return [(what, getattr(args, k)) for k, what in named if getattr(args, k, None)]


def _compile(args):
    from .compiler import compile_model
    from .frontend import parse_input_shapes
    return compile_model(args.model, board=args.board, name=args.name,
                         input_shapes=parse_input_shapes(args.input_shape), algorithm=args.planner,
                         requant=args.requant, rounding=getattr(args, "rounding", "auto"),
                         quantize=args.quantize, calibration=args.calibration,
                         calibrate=args.calibrate, percentile=args.percentile, io=args.io,
                         weights=getattr(args, "weights", "inline"), opt_level=_opt_level(args),
                         precision=args.precision, stream=args.stream,
                         preserve_inputs=args.preserve_input, patch=args.patch, ram_vs_speed=args.ram_vs_speed,
                         prune=getattr(args, "prune", True))


def _opt_level(args) -> int:
    """-O<n>, or the seed's spelling --optimize level=<n>; the later one wins."""
    level = args.opt_level
    if args.optimize is not None:
        key, _, value = args.optimize.partition("=")
        if key.strip() != "level" or value.strip() not in ("0", "1", "2", "3"):
            raise CuvilError(f"--optimize '{args.optimize}': write level=0, level=1, level=2 or level=3")
        level = int(value)
    return level


def cmd_gen(args) -> int:
    from . import cache
    _check_early(args)
    key = None if args.no_cache else cache.gen_key(args, None)
    hit = cache.lookup(key) if key else None
    if hit is not None:  # before any heavy import: a hit costs a hash and the writes
        return _replay_gen(args, *hit)
    from . import integrations
    from . import boards
    spec = args.emit if args.emit is not None else ",".join(boards.get(args.board).emit)
    emitters = integrations.parse(spec)
    if emitters:  # name rules first: fail before compiling
        for mod in emitters:
            if hasattr(mod, "check_name"):
                mod.check_name(args.name)
    c = _compile(args)
    out = Path(args.output)
    files: dict[Path, str | bytes] = {out / f"{c.prefix}.h": c.header}
    labels = {out / f"{c.prefix}.h": "the header"}

    def add(more: dict, what: str) -> None:
        for path in more:  # two emitters naming one file would silently keep only the last
            if path in files:
                raise RuntimeError(f"{what} and {labels[path]} both write {path}")   # a bug in an emitter
            labels[path] = what
        files.update(more)

    if c.weights_blob is not None:
        add({out / f"{c.prefix}.weights.bin": c.weights_blob}, "the weights blob")
    for mod in emitters:
        add(integrations.emit_all([mod], c, out, args.name), f"--emit {mod.NAME}")
    from .sim import firmware
    add(firmware.project(c, out), "the firmware project")  # Cortex-M boards: main.c, startup.c, linker.ld, ...
    plan = Path(args.plan_out) if args.plan_out else None
    if plan is not None:
        text = c.plan.to_json()
        if c.calibration is not None:
            import json
            doc = json.loads(text)
            doc["calibration"] = c.calibration
            text = json.dumps(doc, indent=1) + "\n"
        if plan in files:
            from .outputs import OutputError
            raise OutputError(f"--plan-out {plan} is also where gen writes {labels[plan]}: choose another file")
        files[plan], labels[plan] = text, "--plan-out"
    written = _write(files, args, labels=labels, root=out, force=args.force)
    summary = c.summary()
    from .sim import profile  # issue 16: latency at the board's clock, RAM as arena + stack
    for line in profile.latency_lines(c, run_sim=args.latency):
        summary += "\n" + line
    if c.calibration is not None:
        from .ptq import summary_line
        summary += "\n" + summary_line(c.calibration)
    _print_gen(args, c.prefix, c.board.id, summary, written)
    if key:
        entries = [("plan", "", v) if p == plan else ("out", p.relative_to(out).as_posix(), v)
                   for p, v in files.items()
                   if p == plan or p.is_relative_to(out)]
        if len(entries) == len(files):
            from .outputs import held_signals
            with held_signals():  # an interrupted store leaves no temporary folder in the cache
                cache.store(key, [(r, rel, v.encode() if isinstance(v, str) else v) for r, rel, v in entries],
                            f"{c.prefix}\n{c.board.id}\n{summary}")
    return 0


def _check_early(args) -> None:
    """What can be refused before compiling: --plan-out onto an input or onto
    the header."""
    from .outputs import check_clashes   # (nothing heavy: this runs before a cache hit)
    header = Path(args.output) / f"{args.name.lower()}.h"
    outs = [("the header", header)] + ([("--plan-out", Path(args.plan_out))] if args.plan_out else [])
    check_clashes(outs, _inputs(args))


def _print_gen(args, prefix: str, board: str, summary: str, written: list[Path]) -> None:
    from .outputs import listing
    print(one_line(f"{args.model} -> {Path(args.output) / (prefix + '.h')}  (board {board})"))
    print(summary)
    print(f"wrote    {one_line(listing(written, Path(args.output)))}")


def _replay_gen(args, files, stored: str) -> int:
    """A cache hit (cache.py): the same files into this -o, the same summary."""
    out = Path(args.output)
    plan = Path(args.plan_out) if args.plan_out else None
    data = {(plan if role == "plan" else out / rel): v for role, rel, v in files}
    labels = {p: "--plan-out" if p == plan else "output" for p in data}
    written = _write(data, args, labels=labels, root=out, force=args.force)
    prefix, board, summary = stored.split("\n", 2)
    _print_gen(args, prefix, board, summary, written)
    return 0


def load_inputs(path: str, c) -> tuple[list, str]:
    """Arrays of shape (samples, *input_shape) per model input, and the layout
    the file gave them in (samples.py; outputs are written the same way)."""
    import numpy as np  # not at module level: a cached gen never needs numpy
    from . import samples
    g = c.graph
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except Exception as e:
        raise InputError(f"{path}: not a .npy/.npz file ({e})") from None
    if isinstance(data, np.ndarray):
        if len(g.inputs) != 1:
            raise InputError(f"{path}: one array given, the model has {len(g.inputs)} inputs "
                             f"{g.inputs}; use an .npz keyed by input name")
        arrays = {g.inputs[0]: data}
    else:
        arrays = {k: data[k] for k in data.files}
        missing = [n for n in g.inputs if n not in arrays]
        if missing:
            raise InputError(f"{path}: missing input(s) {missing}; it holds {sorted(arrays)}")
    out, layouts, counts = [], [], set()
    for name in g.inputs:
        t = g.tensors[name]
        x = arrays[name]
        layout = samples.layout_of(x.shape, t.shape)
        if layout is None:
            raise InputError(f"{path}: input '{name}' has shape {list(x.shape)}, the model expects "
                             f"{samples.expected(t.shape)}")
        x = samples.to_samples(x, t.shape, layout)
        if x.dtype.name != t.dtype:
            if t.dtype == "float32" and x.dtype == np.float64:
                x = x.astype(np.float32)
            else:
                raise InputError(f"{path}: input '{name}' is {x.dtype}, the model expects {t.dtype}")
        layouts.append(layout)
        counts.add(x.shape[0])
        out.append(np.ascontiguousarray(x))
    if len(counts) > 1:
        raise InputError(f"{path}: inputs hold different sample counts {sorted(counts)}")
    return out, samples.common(layouts)


def _as_given(c, outs: list, layout: str) -> list:
    from . import samples
    return [samples.from_samples(o, c.graph.tensors[n].shape, layout) for n, o in zip(c.graph.outputs, outs)]


def cmd_run(args) -> int:
    from .sim import host
    _check_output(args, args.output)
    c = _compile(args)
    inputs, layout = load_inputs(args.input, c)
    build_kw, runner = {}, None
    if c.board.sim.get("runner") == "qemu-user":
        # Cortex-A boards: the host harness cross-compiled, run under qemu-user (sim/qemu_user.py)
        from .sim import qemu_user
        build_kw = {"cc": qemu_user.compiler(c.board), "cflags": list(c.board.cflags)}
        runner = qemu_user.command(c.board)
    elif c.board.id != "host" and c.board.sim:
        return _run_firmware(args, c, inputs, layout)  # Cortex-M: the `sim` path (sim/qemu.py)
    elif c.board.id != "host":
        # a real board: say what this is (and what would run its core)
        print(f"note     run: a host build of the C generated for {c.board.id} (this machine's compiler and CPU, "
              f"not the board's {c.board.core}); `cuvil-mcu sim --board {c.board.id}` runs it on the QEMU "
              f"machine with its core")
    exe = host.build(c.header, c.prefix, [t.nbytes for t in map(c.graph.tensors.get, c.graph.inputs)],
                     [t.nbytes for t in map(c.graph.tensors.get, c.graph.outputs)], **build_kw)
    outs = _as_given(c, host.run(exe, inputs, c.out_specs, inputs[0].shape[0], runner=runner), layout)
    if args.output:
        _save_outputs(Path(args.output), c.graph.outputs, outs, args)
    for name, o in zip(c.graph.outputs, outs):
        flat = o.reshape(-1)
        preview = ", ".join(f"{v:.6g}" if o.dtype.kind == "f" else str(v) for v in flat[:8])
        print(f"{name}: {o.dtype}{list(o.shape)} [{preview}{', ...' if flat.size > 8 else ''}]")
    if args.output:
        print(f"wrote {args.output}")
    return 0


def _save_outputs(dest: Path, names: list[str], outs: list, args) -> None:
    import io
    import numpy as np
    buf = io.BytesIO()
    if dest.suffix == ".npz" or len(outs) > 1:
        np.savez(buf, **dict(zip(names, outs)))
    else:
        np.save(buf, outs[0])
    _write({dest: buf.getvalue()}, args, labels={dest: "-o"})


def _check_output(args, *paths) -> None:
    """-o onto one of the run's inputs is refused before any work."""
    from .outputs import check_clashes
    check_clashes([("-o", Path(p)) for p in paths if p], _inputs(args))


def _run_firmware(args, c, inputs, layout) -> int:
    """Bare-metal firmware on QEMU: outputs vs the host reference, instructions,
    ELF sizes vs the board budget. Exit 1 on a mismatch."""
    from .sim import qemu
    r = qemu.simulate(c, inputs, c.board, timeout=args.timeout)
    tol = {}
    if c.fp16_nodes:  # fp16 arithmetic on cores that have it (precision.py)
        from .precision import FP16_ATOL, FP16_RTOL
        tol = dict(atol=FP16_ATOL, rtol=FP16_RTOL)
    cmp = qemu.compare(r.outputs, qemu.reference_outputs(c, inputs), c.graph.outputs, **tol)
    outs = _as_given(c, r.outputs, layout)
    if args.output:
        _save_outputs(Path(args.output), c.graph.outputs, outs, args)
    for line in qemu.report(c, r, cmp):
        print(line)
    from .sim import cycles  # issue 16: the cycle estimate of the core's timing model
    if cmp.ok and cycles.has_model(c.board) and getattr(args, "cycles", True):
        from .sim import profile
        print(profile.run(c, inputs, c.board, wait_states=getattr(args, "wait_states", None),
                          timeout=args.timeout * 5).line())
    if args.output:
        print(f"wrote    {args.output}")
    return 0 if cmp.ok else 1


def cmd_sim(args) -> int:
    from .sim import qemu
    if args.simulator == "renode":
        from .integrations import renode
        return renode.cli_sim(args, _compile, load_inputs)
    qemu.sim_board(args.board)  # unknown board / no simulator: fail before compiling
    _check_output(args, args.output)
    c = _compile(args)
    inputs, layout = load_inputs(args.input, c)
    return _run_firmware(args, c, inputs, layout)


def cmd_report(args) -> int:
    """issue 16: one self-contained HTML page (+ a PNG with matplotlib) about the compiled model."""
    from .sim import cycles, profile, qemu
    from .tools import report
    _check_output(args, args.output, Path(args.output).with_suffix(".png"))
    c = _compile(args)
    sim = prof = None
    if c.board.sim.get("qemu_machine") and args.simulate:
        inputs = load_inputs(args.input, c)[0] if args.input else None
        xs = [x[:1] for x in inputs] if inputs is not None else profile.zero_input(c)
        sim = qemu.simulate(c, xs, c.board, timeout=args.timeout)
        if cycles.has_model(c.board):
            prof = profile.run(c, xs, c.board, wait_states=args.wait_states, timeout=args.timeout * 5)
    elif cycles.has_model(c.board):
        prof = profile.cached(c, wait_states=args.wait_states)
    out = Path(args.output)
    files: dict[Path, str | bytes] = {out: report.build(c, prof, sim, title=f"{Path(args.model).name} on {c.board.id}")}
    picture = report.png(c, prof)
    if picture is not None:
        files[out.with_suffix(".png")] = picture
    _write(files, args, labels={p: "-o" for p in files})
    print(f"report   {out}" + (f" (+ {out.with_suffix('.png')})" if picture is not None else ""))
    if prof is not None:
        print(prof.line())
    return 0


def cmd_validate(args) -> int:
    """issue 16: the generated C over a dataset, metrics against a reference model."""
    from .tools import validate
    _check_output(args, args.output)
    c = _compile(args)
    r = validate.run(c, args.data, labels=args.labels, reference=args.reference, per_layer=args.per_layer,
                     model_path=args.model)
    lines = r.lines()
    if args.output:
        import json
        _write({Path(args.output): json.dumps({
            "target": r.target, "samples": r.samples, "seconds": r.seconds, "reference": r.reference,
            "outputs": [{"name": o.name, "accuracy": o.accuracy, "reference_accuracy": o.reference_accuracy,
                         "top1_agreement": o.agreement, **o.metrics} for o in r.outputs],
            "layers": [{"node": x.index, "op": x.op, "tensor": x.tensor, "reference_tensor": x.matched, **x.metrics}
                       for x in r.layers]}, indent=1) + "\n"}, args, labels={Path(args.output): "-o"})
    for line in lines:
        print(line)
    if args.output:
        print(f"wrote    {args.output}")
    return 0


def cmd_boards(args) -> int:
    from . import boards
    rows = []
    for b in boards.all_boards().values():
        isa = ",".join(k for k, v in sorted(b.isa.items()) if v) or "-"
        ram = f"{b.ram // 1024} KB" if b.ram else "-"
        flash = f"{b.flash // 1024} KB" if b.flash else "-"
        sim = (b.sim.get("qemu_machine") or b.sim.get("qemu", "")) if b.sim else ""
        rows.append((b.id, b.core, isa, ram, flash, sim, b.name))
    head = ("board", "core", "isa", "RAM", "flash", "qemu", "name")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def cmd_ops(args) -> int:
    from . import ops
    families: dict[str, list[str]] = {}
    for t, op in sorted(ops.registry().items()):
        families.setdefault(type(op).__module__.rsplit(".", 1)[-1], []).append(t)
    for fam, types in sorted(families.items()):
        print(f"{fam:14s} {', '.join(types)}")
    return 0


def _common(p):
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--board", default="host", help="board id (see `cuvil-mcu boards`); default host")
    p.add_argument("--name", default="model", help="prefix of every symbol and the header's file name")
    p.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                   help="fix an input's shape (dynamic dimensions); repeatable")
    p.add_argument("--planner", default="auto",
                   help="memory planner: auto (best of all), greedy_by_size, greedy_by_conflicts, "
                        "linear_scan, hill_climb")
    p.add_argument("--io", default="model", choices=("model", "int8"),
                   help="model: inputs/outputs keep the ONNX model's types (default); int8: a quantized "
                        "model's float inputs/outputs are exposed as their int8 tensors")
    p.add_argument("--preserve-input", action="store_true",
                   help="keep the inputs intact through <name>_run (by default a layer may write its output "
                        "over the input it consumes: less RAM)")
    p.add_argument("--no-patch", dest="patch", action="store_false",
                   help="run every layer whole (by default runs of convolutions around the arena's peak run in "
                        "bands of rows when that lowers the arena: patch-based execution)")
    p.add_argument("--keep-channels", dest="prune", action="store_false",
                   help="keep every channel (by default channels that cannot change the output, e.g. a ReLU "
                        "layer's output channels whose weights are all zero, are dropped, exactly; never with "
                        "--weights separate, whose weights may change)")
    p.add_argument("--ram-vs-speed", type=float, metavar="F",
                   help="extra work patch-based execution may add, as a fraction of the model's MACs "
                        "(recomputed halo rows, band overheads; default 0.10): larger saves more RAM, 0 patches nothing")
    p.add_argument("--requant", choices=("fixed", "float"),
                   help="int8 requantization: fixed (integer multiplier + shift, TFLM arithmetic, no FPU "
                        "needed) or float (float32 scale, onnxruntime's arithmetic); default: the board's")
    p.add_argument("--rounding", choices=("auto", "tflm", "onnx"), default="auto",
                   help="where TFLM's and ONNX's integer rounding part (average pools, global averages, "
                        "requantizing Concat inputs), which fixed mode follows: tflm (bit-exact with TFLM) or "
                        "onnx (a literal QDQ graph's); auto (default): tflm for models tf2onnx wrote and for "
                        "--quantize, onnx for the rest")
    p.add_argument("--quantize", choices=("int8",),
                   help="post-training quantization of a float model (needs --calibration)")
    p.add_argument("--calibration", metavar="FILE.npz",
                   help="sample inputs for --quantize: .npz keyed by input name, arrays [samples, ...]")
    p.add_argument("--calibrate", choices=("minmax", "percentile", "entropy"), default="minmax",
                   help="how activation ranges come from the samples: minmax (default), percentile "
                        "(clip |x| at --percentile), entropy (KL-divergence threshold)")
    p.add_argument("--stream", action="store_true",
                   help="keep recurrent layers' state (LSTM/GRU/RNN) in the arena between calls: run the model "
                        "frame by frame; <name>_reset() starts over (see README, Streaming)")
    p.add_argument("--percentile", type=float, default=99.99,
                   help="percentile of |x| kept by --calibrate percentile (default 99.99)")
    from .opt import OPT_LEVELS
    p.add_argument("-O", dest="opt_level", type=int, choices=sorted(OPT_LEVELS), default=3, metavar="N",
                   help="optimization level: " + "; ".join(f"{n}: {t}" for n, t in OPT_LEVELS.items()))
    p.add_argument("--optimize", metavar="level=N", help="the same as -ON")
    p.add_argument("--precision", metavar="P",
                   help="fp32 (default); fp16: float Conv/Gemm/MatMul weights as IEEE half (half the flash; "
                        "fp16 arithmetic where the core has it, else float32); int8,fp16:<node names or op "
                        "types>: quantize to int8 (needs --calibration) except those layers, kept float with "
                        "fp16 weights")


class _Parser(argparse.ArgumentParser):
    """argparse's own errors (unknown option, missing value, bad choice) as
    one line, like every other error; subcommand parsers are this class too."""

    def error(self, message):
        cmd = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        print(f"cuvil-mcu: error: {cmd + ': ' if cmd else ''}{one_line(message)} "
              f"(cuvil-mcu {cmd + ' ' if cmd else ''}--help lists the options)", file=sys.stderr)
        sys.exit(2)


INPUT_HELP = (".npy (a one-input model) or .npz keyed by input name: one sample, samples stacked on a new leading "
              "axis, or (batch-1 inputs) samples on the batch axis")


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="cuvil-mcu", description="ONNX -> one header-only C file for microcontrollers")
    ap.add_argument("--version", action="version", version=f"cuvil-mcu {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen", help="generate <name>.h")
    _common(g)
    g.add_argument("-o", "--output", default="out", help="output folder (default out/); gen replaces only files it "
                                                           "wrote there itself and that are unchanged since (listed "
                                                           "in its .cuvil-mcu-files)")
    g.add_argument("--force", action="store_true",
                   help="overwrite files in the output folder that gen did not write (your main.c, Makefile, "
                        "...) or that were edited since")
    g.add_argument("--plan-out", help="write the memory plan (offsets, lifetimes) as JSON")
    g.add_argument("--latency", action="store_true",
                   help="profile the model on the core's QEMU twin when no profile is cached (estimated cycles)")
    g.add_argument("--emit", metavar="TARGETS",
                   help="also write packages for these ecosystems, comma-separated "
                        "(see cuvil_mcu/integrations: e.g. micropython,zephyr,rust,platformio)")
    g.add_argument("--weights", choices=("inline", "separate"), default="inline",
                   help="inline: constants in the header (default); separate: <name>.weights.bin with "
                        "magic, version, graph hash, sizes and CRC-32, bound at run time by "
                        "<name>_bind_weights(blob, size) (update the weights without re-flashing the code)")
    g.add_argument("--no-cache", action="store_true",
                   help="compile afresh: neither read nor write the compile cache (~/.cache/cuvil-mcu, or "
                        "$CUVIL_CACHE_DIR; keyed on model bytes, options, board and compiler version)")
    g.set_defaults(fn=cmd_gen)
    r = sub.add_parser("run", help="compile the generated C and run it on inputs")
    _common(r)
    r.add_argument("--input", "-i", required=True, help=INPUT_HELP)
    r.add_argument("-o", "--output", help="where to save outputs (.npy, or .npz for several)")
    r.add_argument("--timeout", type=float, default=120.0, help="simulator time limit in seconds (default 120)")
    r.set_defaults(fn=cmd_run)
    s = sub.add_parser("sim", help="run the model as bare-metal firmware on an emulated Cortex-M (QEMU): "
                                   "outputs vs the host reference, instructions per inference, firmware size")
    _common(s)
    s.set_defaults(board="qemu-mps2-an386")
    for act in s._actions:  # the shared --board help names host; sim's default is the QEMU M4
        if act.dest == "board":
            act.default = "qemu-mps2-an386"
            act.help = ("board id (see `cuvil-mcu boards`); default qemu-mps2-an386. A real board runs on the "
                        "QEMU machine with its core (M0+/M3 -> mps2-an385, M4 -> mps2-an386, M7 -> mps2-an500, "
                        "M33 -> mps2-an505, M55 -> mps3-an547)")
    s.add_argument("--input", "-i", required=True, help=INPUT_HELP)
    s.add_argument("-o", "--output", help="where to save the simulator's outputs (.npy, or .npz for several)")
    s.add_argument("--simulator", choices=("qemu", "renode"), default="qemu",
                   help="qemu (default; boards with a [sim] table) or renode (boards with a [renode] table; "
                        "needs renode-test on PATH)")
    s.add_argument("--timeout", type=float, default=120.0, help="simulator time limit in seconds (default 120)")
    s.add_argument("--wait-states", type=int, metavar="N",
                   help="cycle model: flash wait states on constant loads (default: the board's, 0)")
    s.add_argument("--no-cycles", dest="cycles", action="store_false",
                   help="skip the cycle estimate (a second, traced QEMU run)")
    s.set_defaults(fn=cmd_sim)
    rp = sub.add_parser("report", help="one self-contained HTML page: per-layer kernels, shapes, MACs, memory "
                                       "plan, budget and (QEMU boards) instructions and estimated cycles per layer")
    _common(rp)
    rp.add_argument("-o", "--output", default="report.html", help="the HTML file (default report.html)")
    rp.add_argument("--input", "-i", help="sample for the profiling run (.npy/.npz; default: the inputs' zero points)")
    rp.add_argument("--wait-states", type=int, metavar="N",
                    help="cycle model: flash wait states on constant loads (default: the board's, 0)")
    rp.add_argument("--no-sim", dest="simulate", action="store_false", help="no QEMU runs (no instructions/cycles)")
    rp.add_argument("--timeout", type=float, default=120.0, help="simulator time limit in seconds (default 120)")
    rp.set_defaults(fn=cmd_report)
    v = sub.add_parser("validate", help="run the generated C over a dataset: accuracy, top-1 agreement, RMSE, "
                                        "MAE, max/L2-relative error, cosine vs a reference model")
    _common(v)
    v.add_argument("--data", required=True, help=".npz keyed by input name, first axis = samples")
    v.add_argument("--labels", help=".npy of class indices (or one-hot), one per sample")
    v.add_argument("--reference", help="reference .onnx (e.g. the float model); default: the model itself, "
                                       "run by onnxruntime")
    v.add_argument("--per-layer", action="store_true",
                   help="also compare every quantized tensor with the reference's (first 32 samples)")
    v.add_argument("-o", "--output", help="write the metrics as JSON")
    v.set_defaults(fn=cmd_validate)
    b = sub.add_parser("boards", help="list the boards")
    b.set_defaults(fn=cmd_boards)
    o = sub.add_parser("ops", help="list the supported ONNX ops by family")
    o.set_defaults(fn=cmd_ops)
    sub.metavar = "{" + ",".join(sub.choices) + "}"   # "required: {gen,run,...}", not "required: cmd"
    ap.commands = dict(sub.choices)
    return ap


def main(argv: list[str] | None = None) -> int:
    from . import outputs
    import warnings
    warnings.simplefilter("ignore")   # numpy's RuntimeWarnings on a hostile model's constants are not messages
    with outputs.signals_raise():
        return _main(argv)


def _main(argv) -> int:
    from . import outputs
    try:
        ap = parser()
        args, extra = ap.parse_known_args(argv)
        if extra:  # said by the subcommand's parser: its --help is the one that helps
            ap.commands[args.cmd].error(f"unrecognized arguments: {' '.join(extra)}")
        return args.fn(args)
    except CuvilError as e:
        head, _, log = str(e).partition("\n")
        if isinstance(e, ToolError) and log:   # a compiler's or simulator's own output, shown as it said it
            print(f"cuvil-mcu: error: {one_line(head)}\n{log}", file=sys.stderr)
        else:
            print(f"cuvil-mcu: error: {one_line(e)}", file=sys.stderr)
        return e.exit_code
    except (KeyboardInterrupt, outputs.Interrupted) as e:
        signum = getattr(e, "signum", 2)
        print(f"cuvil-mcu: interrupted ({outputs.signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    except OSError as e:  # the machine refused (disk full, file-size limit, permissions): not a bug here
        if e.errno not in outputs.ENVIRONMENT_ERRNOS or os.environ.get("CUVIL_DEBUG"):
            return _internal(e)
        where = f" ({outputs.short(e.filename)})" if e.filename else ""
        print(f"cuvil-mcu: error: {one_line(e.strerror or e)}{one_line(where)}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug in cuvil-mcu, not a user mistake
        return _internal(e)


def _internal(e: Exception) -> int:
    if os.environ.get("CUVIL_DEBUG"):
        raise e
    print(f"cuvil-mcu: internal error: {type(e).__name__}: {one_line(e)} "
          f"(please report it; CUVIL_DEBUG=1 shows the traceback)", file=sys.stderr)
    return 70


if __name__ == "__main__":
    sys.exit(main())
