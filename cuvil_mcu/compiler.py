"""The whole compile, top to bottom: load -> passes -> plan -> render -> budget.

`compile_model` is what `cuvil-mcu gen`/`run`, the ONNX backend and the tests
call; it writes nothing to disk.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import onnx

from . import boards, codegen, frontend, limits, ops, passes, planner
from .errors import CuvilError, UnsupportedOpError, one_line
from .opt import OPT_LEVELS
from .ir import Graph


@dataclass
class Compiled:
    graph: Graph
    plan: planner.Plan
    header: str
    prefix: str
    board: boards.Board
    macs: int
    weights_bytes: int
    op_counts: Counter
    budget_lines: list[str] = field(default_factory=list)
    # --quantize int8: tensor -> {min, max, scale, zero_point, method, ...} (ptq.py)
    calibration: dict | None = None
    # --weights separate: <prefix>.weights.bin (codegen/blob.py); the header holds no constant data
    weights_blob: bytes | None = None
    fp16_nodes: list[str] = field(default_factory=list)   # --precision: layers with IEEE half weights
    stack_bound: int = 0     # bytes of stack the run function and its kernels take at most
    isa_used: dict = field(default_factory=dict)   # node name -> ISA feature of its kernels (codegen)
    consts: list = field(default_factory=list)   # codegen.Const arrays the header (or blob) holds
    # MACs the kernels run: `macs` (the model's, what cycles/MAC figures divide by) less the
    # channels passes/prune_channels.py dropped; None: the same
    macs_run: int | None = None

    def pruned_text(self, tail: str = "") -> str:
        """' (N run: ...)' after the model's MACs when channels were dropped, else ''."""
        if self.macs_run is None or self.macs_run == self.macs:
            return ""
        return (f" ({self.macs_run:,} run: {self.graph.pruned_channels():,} layer output channels that cannot "
                f"change the result dropped{tail})")

    @property
    def in_specs(self):
        return [(self.graph.tensors[n].shape, self.graph.tensors[n].dtype) for n in self.graph.inputs]

    @property
    def out_specs(self):
        return [(self.graph.tensors[n].shape, self.graph.tensors[n].dtype) for n in self.graph.outputs]

    def summary(self) -> str:
        g, p = self.graph, self.plan
        layers = list(_kernels(g))
        views = [n for n in layers if ops.get(n.op_type).view]
        kernels = [n for n in layers if not ops.get(n.op_type).view]
        fused = sum(len(n.fused) for n in layers)
        region_of = {m.name: n.name for n in g.nodes if n.op_type == "cuvil.TiledRegion"
                     for m in n.attrs["_region"].nodes}
        view_txt = f", {_count(len(views), 'view')} ({_types(views)}: no code)" if views else ""
        lines = [f"ops      {_count(len(kernels), 'kernel')}" + (f", {_count(fused, 'op')} fused into them" if fused else "")
                 + view_txt]
        by_variant: dict[str, list] = {}
        for n in kernels:
            by_variant.setdefault(VARIANT_NAMES.get(self.isa_used.get(n.name, self.isa_used.get(region_of.get(n.name))),
                                                      "portable C"), []).append(n)
        if by_variant:
            lines.append("kernels  " + "; ".join(f"{v}: {_types(by_variant[v])}" for v in
                                                [*VARIANT_NAMES.values(), "portable C"] if v in by_variant))
        lines += [
            f"MACs     {self.macs:,}" + self.pruned_text("; --keep-channels keeps them"),
            f"flash    {self.weights_bytes:,} B of constants" if self.weights_blob is None else
            f"flash    {len(self.weights_blob):,} B weights blob {self.prefix}.weights.bin (bound at run time), "
            f"0 B of constants in the header",
            f"RAM      {p.arena_size + self.stack_bound:,} B = arena {p.arena_size:,} B (planner {p.algorithm}; "
            f"lower bound {p.lower_bound:,} B" + (f", {p.no_alias_bound:,} B without in-place" if p.no_alias_bound else "")
            + f") + stack <= {self.stack_bound:,} B for {self.prefix}_run and its kernels "
            f"({self.prefix.upper()}_RAM_SIZE)",
        ]
        if p.aliases:
            lines.append(f"in place {len(p.aliases)} of {len(g.nodes)} nodes write their output over their input "
                         f"(--plan-out lists the offsets)")
        lines += _patch_lines(g)
        for kind, names in (("input", g.inputs), ("output", g.outputs)):
            for t in names:
                lines.append(f"{kind:<8} {one_line(t)}: {g.tensors[t].dtype}{list(g.tensors[t].shape)}"
                             + _quant_text(g.tensors[t]))
        if self.fp16_nodes:
            names = ", ".join(self.fp16_nodes[:12]) + (f" and {len(self.fp16_nodes) - 12} more"
                                                        if len(self.fp16_nodes) > 12 else "")
            lines.append(f"fp16     {len(self.fp16_nodes)} layer(s) with IEEE half weights: {names}")
        lines += [f"budget   {b}" for b in self.budget_lines] or [f"budget   {self.board.id}: no RAM/flash limit"]
        if self.budget_lines:
            lines.append(f"fits     {self.board.id}")
        dtypes = {name: t.dtype for name, t in g.tensors.items()}
        for n in g.nodes:
            if n.op_type == "cuvil.TiledRegion":
                dtypes.update((name, t.dtype) for name, t in n.attrs["_region"].tensors.items())
        soft = [n for n in kernels if n.op_type not in EDGE_OPS
                and any(dtypes.get(o) == "float32" for o in n.outputs if o)]
        if soft and self.board.isa.get("fpu") is False:
            lines.append(f"warning  {self.board.id} ({self.board.core}) has no FPU: {_count(len(soft), 'float kernel')} "
                         f"({_types(soft)}) run in software floating point, many times slower than int8 kernels; "
                         f"--quantize int8 --calibration <samples.npz> makes the model integer-only")
        lines += [f"note     {one_line(n)}" for n in g.notes]
        return "\n".join(lines)


# the kernel variants gen's summary names, by the ISA feature their templates need (codegen Emitter.isa_used)
VARIANT_NAMES = {"mve": "Helium", "dsp": "DSP", "neon": "NEON"}


def _macs(g: Graph) -> int:
    total = 0
    for n in g.nodes:
        ins = [g.tensors[i] if i else None for i in n.inputs]
        total += ops.get(n.op_type).macs(n, ins, [g.tensors[o] for o in n.outputs if o])
    return total


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _types(nodes) -> str:
    """'Conv x9, Gemm' for a list of nodes, op types in first-seen order."""
    c = Counter(n.op_type for n in nodes)
    return ", ".join(f"{t} x{k}" if k > 1 else t for t, k in c.items())


def _quant_text(t) -> str:
    """', scale 0.0039 zero point -128' for a quantized I/O tensor."""
    q = t.quant
    if q is None or t.dtype not in INTEGER_DTYPES:
        return ""
    import numpy as np
    scale, zp = np.asarray(q.scale).reshape(-1), np.asarray(q.zero_point).reshape(-1)
    if scale.size == 1:
        return f", scale {float(scale[0]):.9g} zero point {int(zp[0])}"
    return f", per-axis scales ({scale.size}: {float(scale.min()):.6g}..{float(scale.max()):.6g})"


def _kernels(g: Graph):
    """The graph's nodes, a tiled region as the layers whose kernels it runs."""
    for n in g.nodes:
        yield from n.attrs["_region"].nodes if n.op_type == "cuvil.TiledRegion" else [n]


def _patch_lines(g: Graph) -> list[str]:
    """gen's summary of patch-based execution (passes/tile.py): the regions,
    their cost, or why nothing was tiled."""
    t = getattr(g, "patches", None)
    if not t:
        return []
    regs = t["regions"]
    if not regs:
        return [f"patches  none: {t['note']}"] if t["note"] else []
    extra = t["extra_macs"]
    lines = [f"patches  {len(regs)} region(s), arena {t['arena_before']:,} -> {t['arena_after']:,} B, "
             f"{extra:+,} MACs ({extra / max(t['macs'], 1):+.1%}) (--plan-out shows the bands; --no-patch: whole layers)"]
    index = {n.name: i for i, n in enumerate(g.nodes)}
    for r in regs:
        # the region as lowered (the planes variant changes the bands and the halo copies)
        node = g.nodes[index[r['node']]] if r['node'] in index else None
        reg = node.attrs.get("_region") if node is not None else None
        halo = reg.describe() if reg is not None else r['halo']
        moved = reg.moved if reg is not None and reg.moved is not None else r['moved']
        lines.append(f"patches  node {index.get(r['node'], '?')}: {halo}, {r['extra_macs']:+,} MACs, "
                     f"{moved:,} B of halo rows moved per run (from '{r['layers'][0]}')")
    if t["note"]:
        lines.append(f"patches  then stopped: {t['note']}")
    return lines


def _check_nodes(g: Graph) -> None:
    """Nodes created by passes get the same validation as loaded ones (every
    refusal reported at once)."""
    problems = []
    for n in g.nodes:
        try:
            ops.get(n.op_type).check(n, [g.tensors[i] if i else None for i in n.inputs])
        except UnsupportedOpError as e:
            problems += e.problems
    if problems:
        raise UnsupportedOpError(problems)


INTEGER_DTYPES = ("int8", "uint8")
EDGE_OPS = ("QuantizeLinear", "DequantizeLinear")


def _note_mixed_precision(g: Graph) -> None:
    """In a quantized model, list the compute ops that still run in float
    (between a DequantizeLinear and a QuantizeLinear)."""
    quantized = any(g.tensors[o].dtype in INTEGER_DTYPES for n in g.nodes for o in n.outputs if o)
    if not quantized:
        return
    float_ops = [n for n in g.nodes if n.op_type not in EDGE_OPS and not ops.get(n.op_type).view
                 and any(g.tensors[o].dtype == "float32" for o in n.outputs if o)]
    if float_ops:
        names = ", ".join(f"{n.op_type} '{n.name}'" for n in float_ops[:12])
        more = f" and {len(float_ops) - 12} more" if len(float_ops) > 12 else ""
        g.notes.append(f"mixed precision: {len(float_ops)} op(s) run in float between dequantize/quantize: "
                       f"{names}{more}")


# Faster kernels that need arena scratch (split activations, row rings) may
# make the arena this much bigger than the leanest kernels' plan (a fraction).
SCRATCH_SLACK = 0.08


def _plan(g: Graph, prefix: str, b, algorithm: str, preserve_inputs: bool, slack: float = SCRATCH_SLACK,
          opt_level: int = 3, fp16_nodes=frozenset(), used: list | None = None):
    """Kernel choice and memory plan, RAM first: lower with no spare room (each
    kernel's leanest variant), plan; then let kernels with a faster buffered
    variant take scratch where the arena has room at their step (plus
    `slack` of the arena), and keep that if the arena stays within the slack
    (else try again with half the slack). Returns (plan, room for render);
    `used` receives the lowering of the plan returned."""
    lkw = dict(opt_level=opt_level, fp16_nodes=fp16_nodes)   # the choices render will make
    low = codegen.lower(g, prefix, b, **lkw)
    lean = planner.plan(g, algorithm, low.scratch, low.orders, preserve_inputs)
    free = planner.room(g, lean)
    gap = planner.gaps(g, lean)
    extra = int(lean.arena_size * slack) // planner.ALIGN * planner.ALIGN
    for _ in range(3):
        room = {n: v + extra for n, v in free.items()}
        if not any(room.values()):
            break
        room[None] = (extra, gap)   # the slack in every entry, and the contiguous gaps (Emitter.scratch_free)
        low2 = codegen.lower(g, prefix, b, room, **lkw)
        if low2.scratch == low.scratch and low2.store_bytes == low.store_bytes:
            break
        fast = planner.plan(g, algorithm, low2.scratch, low2.orders, preserve_inputs)
        if fast.arena_size <= lean.arena_size + extra:
            if used is not None:
                used[:] = [low2]
            return fast, room
        if low2.store_bytes:
            # tensors stored as their consumers' planes (codegen.Emitter.planes_of) made it too
            # big: the same room without them first
            room = dict(room)
            room[codegen.NO_PLANES] = True
            low2 = codegen.lower(g, prefix, b, room, **lkw)
            fast = planner.plan(g, algorithm, low2.scratch, low2.orders, preserve_inputs)
            if fast.arena_size <= lean.arena_size + extra:
                if used is not None:
                    used[:] = [low2]
                return fast, room
        extra = extra // 2 // planner.ALIGN * planner.ALIGN
    g.store_bytes = dict(low.store_bytes)     # (the planner's tensor sizes: the lowering planned)
    if used is not None:
        used[:] = [low]
    return lean, None


def plan_and_render(g: Graph, prefix: str, b, algorithm: str = "auto", preserve_inputs: bool | None = None,
                    **render_kw) -> tuple[planner.Plan, codegen.Rendered]:
    """Kernel choice, memory plan and header for an optimized graph (what
    compile_model does after the passes; tests that change a graph render
    it again through this)."""
    if preserve_inputs is None:      # as the graph was compiled
        preserve_inputs = getattr(g, "preserve_inputs", False)
    g.preserve_inputs = preserve_inputs
    plan, room = _plan(g, prefix, b, algorithm, preserve_inputs)
    return plan, codegen.render(g, plan, prefix, target=b, room=room, **render_kw)


# --name prefixes every C symbol and names the output files (lib<name>.so, <name>.weights.bin, and while
# they are staged .<name>.weights.bin.XXXXXXXX): a bound far inside a file system's 255-byte names
MAX_NAME = 48


def check_name(name: str) -> str:
    if len(name) > MAX_NAME:
        raise CuvilError(f"--name '{one_line(name[:24])}...' has {len(name):,} characters; at most {MAX_NAME} (it "
                         f"prefixes every C symbol and names the output files)")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) or "__" in name or name.endswith("_"):
        raise CuvilError(f"--name '{name}' must be a C identifier: a letter, then letters, digits or "
                         f"single underscores (it prefixes every symbol, e.g. {name}_run)")
    return name.lower()


def compile_model(model: str | onnx.ModelProto, board: str = "host", name: str = "model",
                  input_shapes: dict | None = None, algorithm: str = "auto",
                  verify_each: bool = False, requant: str | None = None, rounding: str = "auto",
                  quantize: str | None = None,
                  calibration: str | dict | None = None, calibrate: str = "minmax",
                  percentile: float = 99.99, io: str = "model", weights: str = "inline",
                  opt_level: int = 3, precision: str | None = None,
                  stream: bool = False, preserve_inputs: bool = False, patch: bool = True,
                  ram_vs_speed: float | None = None, prune: bool = True) -> Compiled:
    prefix = check_name(name)
    if weights not in ("inline", "separate"):
        raise CuvilError(f"--weights '{weights}': choose inline (constants in the header) or separate "
                         f"(<name>.weights.bin, bound at run time)")
    b = boards.get(board)
    if isinstance(model, onnx.ModelProto):
        g = frontend.onnx_loader.from_model(model, input_shapes)
        source = model.graph.name or "model"
    elif str(model).endswith(".pt2"):  # torch.export program (frontend/torch_in.py)
        from .frontend import torch_in
        source = str(model).replace("\\", "/").rsplit("/", 1)[-1]
        g = frontend.onnx_loader.from_model(torch_in.load_pt2(str(model)), input_shapes, source=source)
    else:
        g = frontend.load(model, input_shapes)
        source = str(model).replace("\\", "/").rsplit("/", 1)[-1]
    requant = requant or b.requant
    if requant not in ("fixed", "float"):
        raise CuvilError(f"--requant '{requant}': choose fixed (integer multiplier + shift) or float (float32 scale)")
    g.requant = requant
    if rounding not in ("auto", "tflm", "onnx"):
        raise CuvilError(f"--rounding '{rounding}': choose auto, tflm or onnx")
    if rounding != "auto":
        g.rounding = rounding
    if opt_level not in OPT_LEVELS:
        raise CuvilError(f"-O{opt_level}: choose 0, 1, 2 or 3")
    g = passes.optimize(g, verify_each=verify_each, level=opt_level)
    calib = None
    from . import precision as prec_mod
    prec = prec_mod.parse(precision)
    if prec.int8 and quantize is None and not any(g.tensors[o].dtype in INTEGER_DTYPES
                                                  for n in g.nodes for o in n.outputs if o):
        quantize = "int8"   # --precision int8,...: a float model is quantized (needs --calibration)
    if quantize is not None or calibration is not None:
        if rounding == "auto":
            # our own quantizer's model: no other runtime defines its arithmetic, so
            # fixed mode's own (TFLM's) rules, and their faster pool kernels
            g.rounding = "tflm"
            for n in g.nodes:
                n.attrs.pop("_rounding", None)
        from . import ptq, ptq_rnn
        # --stream: calibrate whole utterances, not one call's frames
        cg = ptq_rnn.calibration_graph(model, input_shapes, calibration, g, verify_each) if stream else None
        g, calib = ptq.quantize_graph(g, quantize, calibration, calibrate, percentile, verify_each,
                                      keep_float=prec_mod.keep_float(g, prec), calib_graph=cg)
    if io == "int8":
        from .passes import dead_nodes, io_int8
        g = dead_nodes.run(io_int8.run(g))
    elif io != "model":
        raise CuvilError(f"--io '{io}': choose model (the ONNX model's own I/O types) or int8")
    if stream:
        from .passes import stream as stream_pass
        g = stream_pass.run(g)
    macs_model = _macs(g)
    if opt_level >= 1 and prune and weights == "inline":   # a separate blob's weights may be replaced
        from .passes import prune_channels
        g = prune_channels.run(g)
    _check_nodes(g)
    _note_mixed_precision(g)
    g.preserve_inputs = preserve_inputs     # (the kernels choose in-place friendly variants by it)
    fp16 = prec_mod.select(g, prec) if prec.any_fp16 else set()
    prec_mod.round_weights(g, fp16)
    target = b if opt_level >= 2 else None     # -O0/-O1: portable kernels
    planned = []     # (graph, (plan, room)) of every graph planned

    def evaluate(gg):
        low = []
        planned.append((gg, _plan(gg, prefix, target, algorithm, preserve_inputs, opt_level=opt_level,
                                  fp16_nodes=fp16, used=low)))
        return planned[-1][1][0], lambda: planner.profile(gg, low[0].scratch, low[0].orders, preserve_inputs)
    if patch:
        from .passes import tile
        budget = tile.DEFAULT_BUDGET if ram_vs_speed is None else float(ram_vs_speed)
        if not budget >= 0:
            raise CuvilError(f"--ram-vs-speed {ram_vs_speed}: give the extra work tiling may add as a fraction of "
                             f"the model's MACs, >= 0 (default {tile.DEFAULT_BUDGET})")
        # (the graphs the pass compares planned without planes stores: they take free arena only,
        # and a profile with them would steer the pass elsewhere; the graph kept is planned again)
        was, codegen.PLANES = codegen.PLANES, False
        try:
            g = tile.run(g, budget, evaluate)
        finally:
            codegen.PLANES = was
        planned = [pr for pr in planned if pr[0] is not g] if was else planned
    # the tile pass plans several graphs and keeps one (not always the last planned)
    mine = [pr for gg, pr in planned if gg is g]
    if not mine:
        evaluate(g)
        mine = [planned[-1][1]]
    plan, room = mine[0]
    macs = _macs(g)
    counts: Counter = Counter()
    for n in _kernels(g):
        counts[n.op_type] += 1
    r = codegen.render(g, plan, prefix, source=source, board=b.id, summary={"macs": macs},
                       target=target, room=room, weights=weights, opt_level=opt_level, fp16_nodes=fp16)
    limits.check_totals(plan.arena_size, r.stack_bound, r.weights_bytes if r.blob is None else len(r.blob))
    # real boards' firmware projects: samples.c holds one sample of every input in flash
    # (QEMU boards' projects load it straight into RAM, as sim does)
    samples = (sum(g.tensors[n].nbytes for n in g.inputs)
               if b.flash_base is not None and not b.sim.get("qemu_machine") else 0)
    budget = boards.check_budget(b, plan.arena_size, r.weights_bytes if r.blob is None else len(r.blob), samples)
    return Compiled(g, plan, r.text, prefix, b, macs_model, r.weights_bytes, counts, budget, calibration=calib,
                    macs_run=macs,
                    weights_blob=r.blob, fp16_nodes=[n.name for n in g.nodes if n.name in fp16],
                    stack_bound=r.stack_bound, isa_used=r.isa_used, consts=r.consts)
