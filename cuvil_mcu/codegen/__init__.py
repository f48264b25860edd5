"""IR + plan -> one header-only C file.

Python decides everything (offsets, loop bounds, constants); templates only
loop and print. Each node's op emits calls through an `Emitter`: `k.call(
"conv2d_f32", [args])` renders `templates/kernels/conv2d_f32.c.j2` once as a
static function `<prefix>__conv2d_f32` and adds the call to the run function.
"""
from __future__ import annotations

import hashlib
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import numpy as np

from .. import limits, ops
from ..ir import C_TYPES, Graph, Tensor
from ..isa import ORDER as ISA_ORDER
from ..planner import ALIGN, Plan
from .carray import WORDS_FROM, c_array, c_comment, c_float, c_string, c_words, word_count

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Producers may store a tensor in its consumer's layout (Emitter.planes_of) while this is True and
# the room does not hold NO_PLANES (the compiler turns them off while the tile pass compares graphs,
# and for a plan they would make too big)
PLANES = True
NO_PLANES = ("planes", "off")


def template_dir() -> Path:
    here = Path(__file__).resolve().parent.parent
    for cand in (here.parent / "templates", here / "_templates"):
        if (cand / "model.h.j2").exists():
            return cand
    raise FileNotFoundError("cuvil-mcu templates not found (broken install?)")


_ENV: jinja2.Environment | None = None


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between runs (a fresh process otherwise spends
    ~0.3 s compiling model.h.j2 and the kernels). Jinja keys each entry on the
    template's source checksum, so an edited template is compiled again.
    Best effort, like the compile cache: a folder that cannot be written
    never fails a gen."""

    def dump_bytecode(self, bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _template_cache() -> jinja2.BytecodeCache | None:
    from .. import cache
    where = cache.templates_dir()
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _TemplateCache(str(where))


def env() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(template_dir())),
            bytecode_cache=_template_cache(),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            autoescape=False,
        )
        _ENV.filters["c_array"] = c_array
        _ENV.filters["c_float"] = c_float
        _ENV.filters["c_string"] = c_string
        _ENV.filters["c_comment"] = c_comment
        _ENV.filters["c_words"] = c_words
    return _ENV


@dataclass
class Const:
    symbol: str
    ctype: str
    data: np.ndarray
    comment: str

    @property
    def words(self) -> int:
        """64-bit words the header stores this array in (0: one literal per
        element, for small arrays): carray.c_words."""
        return word_count(self.data) if self.data.nbytes >= WORDS_FROM else 0


@dataclass
class Emitter:
    """What an op's `emit` talks to."""

    prefix: str
    graph: Graph
    plan: Plan
    kernels: dict[str, str] = field(default_factory=dict)   # function name -> C
    consts: dict[str, Const] = field(default_factory=dict)  # symbol -> const
    body: list[str] = field(default_factory=list)
    _const_by_key: dict = field(default_factory=dict)
    _variant_seen: dict = field(default_factory=dict)   # function name -> variants rendered the same
    node = None
    target: object = None   # the Board: ISA features for kernel variants (cuvil_mcu.isa)
    opt_level: int = 3      # gen -O: below 3, no shape-specialized kernel variants
    fp16_nodes: frozenset = frozenset()   # --precision: nodes whose float weights are IEEE half
    half_symbols: set = field(default_factory=set)   # const symbols holding half patterns
    # Lowering facts the planner needs (see `lower`): per node, bytes of arena
    # scratch its kernels take, and per input the kernel's read/write order
    # (planner/windows.py) that lets the output overlap that input.
    scratch_bytes: dict = field(default_factory=dict)    # node name -> bytes
    orders: dict = field(default_factory=dict)           # node name -> [(input index, variant, Order | callable)]
    room: dict | None = None     # node name -> arena bytes its kernels may take as scratch (None: none spare)
    _last_read: dict | None = None
    # node name -> the ISA feature its kernels use on this target ("mve", "dsp", "neon"; absent: portable C),
    # from the template names (kernels/*_dsp|_mve|_neon.c.j2) whose feature the board has; gen's summary says it
    isa_used: dict = field(default_factory=dict)
    # run-time tensors a producer stores in its consumer's own layout: name -> layout (isa/dsp_dw.py's
    # channel planes, "bytes" their arena size: the planner's g.store_bytes); planes_probe: the
    # tensor a probe emission of its consumer asks about (planes_of), planes_found what it answered
    planes: dict = field(default_factory=dict)
    planes_probe: str | None = None
    planes_found: dict | None = None

    # --- pointers -----------------------------------------------------------
    def ptr(self, t: Tensor | str, ctype: str | None = None) -> str:
        """C expression for tensor t's data: a const array for constants, else
        its planned place in the arena."""
        t = self.graph.tensors[t] if isinstance(t, str) else t
        ctype = ctype or t.ctype
        if t.is_const:
            return self.const(t.data, name=t.name)
        off = self.plan.tensor_offset[t.name]
        # a band of a tiled region inside a loop: an expression (ops/tiled.py)
        return f"({ctype} *)(a + {off})" if isinstance(off, str) else f"({ctype} *)(a + {off}u)"

    def scratch(self, ctype: str = "unsigned char") -> str:
        off = self.plan.scratch_offset[self.node.name]
        return f"({ctype} *)(a + {off}u)"

    def scratch_buf(self, nbytes: int, ctype: str = "int8_t") -> str:
        """A planned arena buffer of nbytes for this node's kernel (border
        copies, split activations, row rings): live during the node only,
        overlapping dead tensors. Several per node follow each other."""
        name = self.node.name
        at = self.scratch_bytes.get(name, 0)
        self.scratch_bytes[name] = at + -(-int(nbytes) // ALIGN) * ALIGN
        if not getattr(self.plan, "probe", False) and (name not in self.plan.scratch_offset
                                                  or self.plan.scratch_size[name] < self.scratch_bytes[name]):
            raise RuntimeError(f"node '{name}': its kernel takes {self.scratch_bytes[name]} B of scratch the plan "
                               "does not have (plan with the lowering's scratch: compiler.plan_and_render)")
        return f"({ctype} *)(a + {self.plan.scratch_offset[name] + at}u)"

    def scratch_room(self) -> int:
        """Arena bytes this node's kernels may take as scratch without making
        the arena bigger (0 until the planner has said): a kernel with a
        buffer-free variant uses it when its buffer does not fit."""
        return int(self.room.get(self.node.name, 0)) if self.room else 0

    def scratch_free(self) -> int:
        """The largest contiguous run of arena bytes free at this node's step
        in the leanest plan (within the room, without the slack the compiler
        may add): scratch that size fits there without growing that plan."""
        return self.free_at(self.node.name)

    def free_at(self, name: str) -> int:
        """scratch_free at the step of node `name`."""
        if not self.room or None not in self.room:
            return 0
        slack, gap = self.room[None]
        return max(0, min(int(self.room.get(name, 0)) - int(slack), int(gap.get(name, 0))))

    def order(self, index: int, order, variant: str | None = None) -> None:
        """Declare the kernel's read/write order for input `index` -> output 0
        (a planner.windows.Order or a callable building one): the planner may
        then write the output over that input (an offset window). A kernel
        with several loop orders declares each under a variant name; the plan
        says which one it took (`variant`)."""
        self.orders.setdefault(self.node.name, []).append((index, variant, order))

    def variant(self) -> str | None:
        """The loop-order variant the plan chose for this node's aliasing
        (None: no alias, or while lowering)."""
        return getattr(self.plan, "variants", {}).get(self.node.name)

    def input_dies(self, t: Tensor | str) -> bool:
        """Whether run-time tensor t is read for the last time by this node
        (its bytes are free for the output, if the kernel's order allows)."""
        name = t if isinstance(t, str) else t.name
        if self._last_read is None:
            self._last_read = {}
            for i, n in enumerate(self.graph.nodes):
                for u in n.inputs:
                    if u:
                        self._last_read[u] = i
        step = next((i for i, n in enumerate(self.graph.nodes) if n is self.node), None)
        if step is None:       # a band of a tiled region: its input is a buffer of the region
            return False
        if getattr(self.graph, "preserve_inputs", False) and name in self.graph.inputs:
            return False
        return self._last_read.get(name) == step and name not in self.graph.outputs

    def planes_of(self, t: Tensor | str) -> dict | None:
        """The int16 channel-plane layout (isa/dsp_dw.py) in which the one
        consumer of t, a run-time tensor the current graph node writes, would
        read t if t were stored so (None: it reads t as NHWC). The consumer
        is emitted on a probe (a throwaway emitter with the same target and
        room: its real kernel choice) told that t arrives as planes; its
        kernel answers with the layout when it takes that input."""
        name = t if isinstance(t, str) else t.name
        g = self.graph
        if self.planes_probe is not None:
            return None       # (a probe: its own outputs stay NHWC, no probe of a probe)
        if not PLANES or not self.room or self.room.get(NO_PLANES):
            return None
        if self.node is None or not any(n is self.node for n in g.nodes) or name not in g.tensors:
            return None
        if name in g.outputs or name in g.inputs:
            return None
        users = [n for n in g.nodes if name in n.inputs]
        if len(users) != 1 or users[0].inputs.count(name) != 1:
            return None
        n = users[0]
        op = ops.get(n.op_type)
        if op.view:
            return None
        sub = _emitter(g, _Probe(), self.prefix, self.target, self.room, self.opt_level, self.fp16_nodes)
        sub.node = n
        sub.planes_probe = name
        op.emit(n, [g.tensors[u] if u else None for u in n.inputs], [g.tensors[u] for u in n.outputs if u], sub)
        return None if sub.planes_found is None else dict(sub.planes_found, consumer=n.name)

    def planes_in(self, t: Tensor | str) -> bool:
        """Whether run-time tensor t reaches the current node as channel
        planes (its producer stores them: planes), or a probe asks so."""
        name = t if isinstance(t, str) else t.name
        return name in self.planes or self.planes_probe == name

    def const(self, data: np.ndarray, name: str = "c", ctype: str | None = None) -> str:
        """A const array in flash holding `data`; identical arrays are stored once."""
        data = np.ascontiguousarray(data)
        if data.dtype == np.bool_:
            data = data.astype(np.uint8)
        ctype = ctype or C_TYPES[data.dtype.name]
        key = (ctype, data.dtype.str, data.shape, hashlib.sha256(data.reshape(-1).view(np.uint8)).hexdigest())
        if key in self._const_by_key:
            return self._const_by_key[key]
        base = re.sub(r"[^A-Za-z0-9_]", "_", name)[:40].strip("_") or "c"
        symbol = f"{self.prefix}__w{len(self.consts)}_{base}"
        self.consts[symbol] = Const(symbol, ctype, data, f"{name} {data.dtype.name}{list(data.shape)}")
        self._const_by_key[key] = symbol
        return symbol

    def weight(self, data: np.ndarray, name: str = "w") -> str:
        """A float kernel's weight array: float32, or IEEE half patterns
        (uint16, in half_symbols) when the current node runs in fp16
        (--precision fp16). Kernels ask `symbol in k.half_symbols`."""
        if self.node is None or self.node.name not in self.fp16_nodes:
            return self.const(data, name)
        data = np.asarray(data, np.float32)
        big = np.abs(data[np.isfinite(data)]).max(initial=0.0)
        if big > 65504.0:
            from ..errors import CuvilError
            raise CuvilError(f"--precision fp16: weight '{name}' of node '{self.node.name}' reaches {big:g}, "
                             f"beyond fp16's 65504; keep this node in float32")
        sym = self.const(data.astype(np.float16).view(np.uint16), name + "_f16", ctype="uint16_t")
        self.half_symbols.add(sym)
        return sym

    def drop_unused_const(self, symbol: str) -> None:
        """Forget a const array nothing emitted so far refers to (e.g. the
        portable layout of weights an ISA kernel stores in its own layout):
        no unused array in flash. A later k.const of the same data makes it
        again."""
        if symbol in self.consts and not any(symbol in line for line in self.body):
            del self.consts[symbol]
            self._const_by_key = {key: s for key, s in self._const_by_key.items() if s != symbol}

    @contextmanager
    def band(self, node, tensors: dict, scratch_at: int = 0, scratch_size: int | None = None):
        """Emit `node`, one band of a tiled region's layer (ops/tiled.py; not
        a graph node), inside this block: its tensors (by name) at the given
        arena offsets (ints, or C expressions inside a loop), its kernel
        scratch at scratch_at (scratch_size None: measuring, no check). The
        orders its kernels declare are dropped (the region declares its own);
        the block's value is a dict whose "scratch" is, after the block, the
        bytes of scratch its kernels took."""
        outer_plan, outer_node = self.plan, self.node
        self.plan = _BandPlan(outer_plan, tensors, node.name, scratch_at, scratch_size)
        self.node = node
        self.scratch_bytes.pop(node.name, None)
        info = {}
        try:
            yield info
        finally:
            info["scratch"] = self.scratch_bytes.pop(node.name, 0)
            self.orders.pop(node.name, None)
            self.plan, self.node = outer_plan, outer_node

    # --- literals ----------------------------------------------------------
    @staticmethod
    def f32(x: float) -> str:
        return c_float(x)

    # --- kernels -----------------------------------------------------------
    def kernel(self, template: str, variant: dict | None = None) -> str:
        """Render kernels/<template>.c.j2 once (per variant); return the
        function name. A variant dict is passed to the template and its
        'name' key suffixes the function name."""
        fname = f"{self.prefix}__{template}"
        feature = template.rsplit("_", 1)[-1]
        if self.node is not None and feature in ISA_ORDER and self.target is not None and self.target.has(feature):
            was = self.isa_used.get(self.node.name)
            if was is None or ISA_ORDER.index(feature) < ISA_ORDER.index(was):
                self.isa_used[self.node.name] = feature
        if variant and variant.get("name"):
            fname += "_" + variant["name"]
        key = repr(sorted((variant or {}).items()))
        if fname not in self.kernels:
            if variant and any(variant.get(f) for f in ("fp16", "ha", "hb")):
                self.kernel("fp16")   # the half-precision helpers come first
            self.kernels[fname] = self._render(template, fname, variant)
            self._variant_seen[fname] = {key}
        elif key not in self._variant_seen[fname]:
            # Another variant under a name already taken: it must render the same C, or the
            # name would silently stand for the first rendering (a wrong kernel, not an error).
            if self._render(template, fname, variant) != self.kernels[fname]:
                raise RuntimeError(f"internal error: kernel {fname} rendered differently for variant {key}; "
                                   f"its name must carry what tells the renderings apart")
            self._variant_seen[fname].add(key)
        return fname

    def _render(self, template: str, fname: str, variant: dict | None) -> str:
        tpl = env().get_template(f"kernels/{template}.c.j2")
        return tpl.render(p=self.prefix, fn=fname, v=variant or {}).rstrip() + "\n"

    def call(self, template: str, args: list, variant: dict | None = None) -> None:
        fname = self.kernel(template, variant)
        self.line(f"{fname}({', '.join(str(a) for a in args)});")

    def line(self, code: str) -> None:
        self.body.append(code)


def act_bounds(node) -> tuple[str, str]:
    """C literals for the fused clamp of node (float domain). Open ends are
    +-INFINITY, not +-FLT_MAX: an infinite result passes through unclamped,
    as in onnxruntime (and NaN fails both comparisons, so it passes too)."""
    lo, hi = node.act if node.act is not None else (-np.inf, np.inf)
    return c_float(lo), c_float(hi)


def io_info(g: Graph, plan: Plan, names: list[str]) -> list[dict]:
    out = []
    for i, name in enumerate(names):
        t = g.tensors[name]
        out.append({
            "index": i, "name": name, "macro_name": limits.name_in_macro(name),
            "shape": list(t.shape), "rank": len(t.shape),
            "size": t.size, "bytes": t.nbytes, "dtype": t.dtype, "ctype": t.ctype,
            "offset": plan.tensor_offset[name],
            "quant": t.quant,
        })
        if t.quant is not None:
            qd = t.dtype if t.dtype in ("int8", "uint8") else t.quant.zero_point.dtype.name
            qd = qd if qd in ("int8", "uint8") else "uint8"
            out[-1].update(qctype=C_TYPES[qd], qmin=-128 if qd == "int8" else 0, qmax=127 if qd == "int8" else 255)
    return out


@dataclass
class Rendered:
    text: str
    weights_bytes: int           # bytes of const arrays in the header
    kernels: list[str]           # function names of the kernels emitted
    blob: bytes | None = None    # weights="separate": <name>.weights.bin (codegen/blob.py)
    stack_bound: int = 0         # bytes of stack <prefix>_run and its kernels take at most
    isa_used: dict = field(default_factory=dict)   # node name -> ISA feature of its kernels (Emitter.isa_used)
    consts: list = field(default_factory=list)   # the Const arrays (symbol, C type, data), in or beside the header


# Bytes of stack <prefix>_run and the kernels it calls may take, by the
# board's most capable kernel family: their buffers are arena scratch, so
# what is left is register spills and a few small arrays. Measured with
# arm-none-eabi-gcc -O2 -fstack-usage (run frame + deepest kernel frame) on
# every shared model and checked by `sim` with the painted stack
# (tests/test_planner.py, benchmarks/run.py).
STACK_BOUND = {"mve": 512, "dsp": 512, "neon": 512, "portable": 512}
# The general portable integer kernels (any conv / depthwise geometry, the
# recurrent layers) keep ~20 loop values live and spill them: frames of
# 288-336 B (qconv_s8 reversed, qdwconv_s8, qrnn_s8 with its matvec) that
# with a 160-208 B run frame make 532-560 B on the M4 / M55 (sim's painted
# stack on tests/test_isa_mve.py's and tests/test_rnn_int8.py's models).
# A header that emits one states this bound instead.
DEEP_KERNELS = ("__qconv_s8_", "__qdwconv_s8_", "__qrnn_s8_")
DEEP_STACK_BOUND = 768


def stack_bound(target, kernels=()) -> int:
    base = STACK_BOUND["portable"]
    for feature in ("mve", "dsp", "neon"):
        if target is not None and target.has(feature):
            base = STACK_BOUND[feature]
            break
    if any(d in name for name in kernels for d in DEEP_KERNELS):
        return max(base, DEEP_STACK_BOUND)
    return base


def _emitter(g: Graph, plan, prefix: str, target, room, opt_level: int, fp16_nodes) -> "Emitter":
    """The Emitter render and lower both use: the same settings make the same
    kernel choices (lowering's scratch and orders must be render's)."""
    k = Emitter(prefix, g, plan)
    k.target = target
    k.room = room
    k.opt_level = opt_level
    k.fp16_nodes = frozenset(fp16_nodes)
    return k


def _emit_nodes(g: Graph, k: Emitter) -> None:
    for i, n in enumerate(g.nodes):
        op = ops.get(n.op_type)
        ins = [g.tensors[t] if t else None for t in n.inputs]
        outs = [g.tensors[t] for t in n.outputs if t]
        shapes = ", ".join(f"{list(t.shape)}" for t in outs)
        fused = f" + {', '.join(n.fused)}" if n.fused else ""
        k.line(f"/* {i}: {n.op_type} '{_comment_safe(n.name)}'{_comment_safe(fused)} -> {shapes} */")
        k.node = n
        if op.view:
            k.line("/* view: no code */")
            continue
        op.emit(n, ins, outs, k)
    # the tensors stored in a kernel's own layout take its bytes in the plan (planner.nbytes)
    g.store_bytes = {t: int(lay["bytes"]) for t, lay in k.planes.items()}


class _Probe:
    """The plan stand-in while lowering: every offset 0."""

    probe = True

    def __init__(self):
        from collections import defaultdict
        self.tensor_offset = defaultdict(int)
        self.scratch_offset = defaultdict(int)


class _BandPlan:
    """The plan as one band of a tiled region sees it (Emitter.band)."""

    def __init__(self, outer, tensors: dict, name: str, scratch_at: int, scratch_size: int | None):
        from collections import ChainMap
        self.probe = getattr(outer, "probe", False) or scratch_size is None
        self.tensor_offset = ChainMap(tensors, outer.tensor_offset)
        self.scratch_offset = {name: scratch_at}
        self.scratch_size = {name: scratch_size or 0}
        self.variants = {}


@dataclass
class Lowering:
    scratch: dict      # node name -> arena scratch bytes of its kernels
    orders: dict       # node name -> [(input index, variant, Order | callable)]
    store_bytes: dict = field(default_factory=dict)   # tensor -> arena bytes of the layout a kernel stores it in


def lower(g: Graph, prefix: str = "model", target=None, room: dict | None = None, opt_level: int = 3,
          fp16_nodes=frozenset()) -> Lowering:
    """Run every op's kernel choice once without a plan and collect what the
    planner needs: scratch bytes and read/write orders per node. `room`,
    `opt_level` and `fp16_nodes` are what render will be given (the same
    choices are made)."""
    k = _emitter(g, _Probe(), prefix, target, room, opt_level, fp16_nodes)
    _emit_nodes(g, k)
    return Lowering(dict(k.scratch_bytes), dict(k.orders), dict(g.store_bytes))


def render(g: Graph, plan: Plan, prefix: str = "model", source: str = "", board: str = "",
           summary: dict | None = None, target=None, room: dict | None = None, weights: str = "inline",
           opt_level: int = 3, fp16_nodes=frozenset()) -> Rendered:
    """The header. Deterministic: no time, path or command line in it.
    target: the Board object, whose ISA picks kernel variants.
    weights="separate": the constants go to a blob (codegen/blob.py) that
    <p>_bind_weights binds at run time; the header keeps only the code."""
    k = _emitter(g, plan, prefix, target, room, opt_level, fp16_nodes)
    _emit_nodes(g, k)
    # Outputs that are constants are copied into the arena on each run.
    for name in g.outputs:
        t = g.tensors[name]
        if t.is_const:
            k.line(f"memcpy(a + {plan.tensor_offset[name]}u, {k.const(t.data, name)}, {t.nbytes}u);")
    states = [{"input": g.inputs.index(inp), "output": g.outputs.index(out), "offset": plan.tensor_offset[inp],
               "bytes": g.tensors[inp].nbytes,
               "init": k.const(reset, f"{inp}_reset") if np.asarray(reset).any() else None}
              for inp, out, reset in g.state]
    P = prefix.upper()
    ctx = {
        "p": prefix, "P": P,
        "inputs": io_info(g, plan, g.inputs),
        "outputs": io_info(g, plan, g.outputs),
        "arena_size": max(plan.arena_size, 1),
        "arena_align": ALIGN,
        "consts": list(k.consts.values()),
        "kernels": list(k.kernels.values()),
        "body": k.body,
        "source": _comment_safe(source),
        "board": board,
        "summary": summary or {},
        "plan": plan,
        "states": states,
        "weights_bytes": sum(c.data.nbytes for c in k.consts.values()),
        "wblob": None,
        "words_from": WORDS_FROM,
        "stack_bound": stack_bound(target, k.kernels),
    }
    if weights == "separate":
        return _render_separate(ctx, k)
    # The template marks where each array's words go; they are printed after
    # the blank lines are squeezed (no pass over megabytes of hex).
    words: list[np.ndarray] = []

    def mark(data: np.ndarray) -> str:
        words.append(data)
        return f"\0{len(words) - 1}\0"

    ctx["words"] = mark
    text = _squeeze_blank_lines(env().get_template("model.h.j2").render(**ctx))
    parts = text.split("\0")
    assert len(parts) == 2 * len(words) + 1, "a NUL character in the rendered header"
    parts[1::2] = [c_words(words[int(i)]) for i in parts[1::2]]
    return Rendered("".join(parts), ctx["weights_bytes"], list(k.kernels),
                    stack_bound=ctx["stack_bound"], isa_used=dict(k.isa_used),
                    consts=ctx["consts"])


def _render_separate(ctx: dict, k: Emitter) -> Rendered:
    """The header without constant data, and the blob. The graph hash is
    taken over the header's text with a placeholder where the hash goes."""
    from .. import __version__
    from . import blob
    consts = list(k.consts.values())
    offsets, total = blob.layout(consts)
    ctx["wblob"] = {"offsets": offsets, "total": total, "payload": total - blob.HEADER,
                    "format": blob.FORMAT, "header": blob.HEADER, "align": blob.ALIGN,
                    "crc_at": blob.CRC_AT, "crc_table": blob.crc_nibble_table(),
                    "hash": blob.HASH_PLACEHOLDER}
    tpl = env().get_template("model.h.j2")
    text = _squeeze_blank_lines(tpl.render(**ctx))
    # The model file's name is a comment: the same code from a renamed file takes the same blobs.
    ghash = blob.graph_hash(tpl.render(**dict(ctx, source="")), __version__)
    text = text.replace(blob.HASH_PLACEHOLDER, ", ".join(f"0x{b:02x}" for b in ghash))
    return Rendered(text, 0, list(k.kernels), blob.pack(consts, offsets, total, ghash),
                    stack_bound=ctx["stack_bound"], isa_used=dict(k.isa_used), consts=consts)


def _squeeze_blank_lines(text: str) -> str:
    """Runs of blank lines the template's conditionals leave become one
    (str.replace: a regex over a 50 MB header took a second and a half)."""
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text


def _comment_safe(s: str) -> str:
    return c_comment(s)
