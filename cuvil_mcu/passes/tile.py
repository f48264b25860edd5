"""Patch-based execution: rewrite runs of convolutions into TiledRegion
nodes (ops/tiled.py) executed band by band, where that lowers the arena.

The pass runs after every other pass and kernel choice matters to it (kernel
scratch), so it is not in PIPELINE: the compiler calls `run(g, budget,
evaluate)` with `evaluate(graph) -> planner.Plan` (its own lean plan).

Per round: the step at which the plan's live bytes peak must lie inside the
region; candidate regions are the runs of 2..MAX_LAYERS tileable layers
(each reads the previous one's output, which nothing else reads) around it;
per region, per band height and per choice of halo mode for each buffer
(kept or recomputed, planner/tiling.py) the pass estimates the new peak
(the rest of the plan's profile; inside the region: what crosses it, the
region's input and output with the output written over the input where the
bands' order allows, and the region's own buffers) and the cost. The
lowest estimate within the budget wins (among estimates within TOLERANCE of
the lowest, the cheapest); the graph is rewritten, planned exactly, and
kept only if the arena shrank. The estimate misses room the plan has, so
the winner's region is also planned in taller bands (cheaper) while they
plan within TOLERANCE of the lowest. Rounds repeat while they help.

Cost is an estimate of instructions: a layer's work is its MACs plus OUT per
output element (requantization, stores: int8 kernels run ~1 instruction per
MAC plus ~14 per output on the Cortex-M4's DSP path, measured on the shared
models); tiling costs RECOMPUTE times the work of recomputed rows, CALL per kernel call,
per input byte a band reads again the kernel's own cost (Rows.reread:
depthwise kernels convert rows into planes or rings), MOVE per halo byte
moved. The budget, a fraction of the model's work (gen --ram-vs-speed,
default 0.10), caps the sum over all regions.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .. import ops
from ..ir import Graph, Node
from ..planner import ALIGN, tiling
from ..planner.algorithms import live_extent

DEFAULT_BUDGET = 0.10
MAX_LAYERS = 8
MAX_ROUNDS = 6
BANDS = (1, 2, 3, 4, 6, 8, 12, 16)
OUT = 14
RECOMPUTE = 2     # recomputed rows: kernels run 1-4 instructions per MAC (first layers, few channels): the high side
CALL = 300
MOVE = 0.3
TOLERANCE = 0.05      # arenas (estimated or planned) this close to the lowest count as equal: the cheaper wins


@dataclass
class Choice:
    start: int            # node index of the region's first layer
    end: int              # ... and last
    band: int
    cache: tuple
    estimate: int         # bytes: the plan's peak with this region
    local: int            # bytes: the region's step alone
    cost: float           # MAC-equivalents
    extra_macs: int       # recomputed MACs (rows no band needs are not computed: may be < 0)
    moved: int            # halo bytes moved


def _align(n: int) -> int:
    return -(-int(n) // ALIGN) * ALIGN


def _rows(g: Graph, n: Node):
    op = ops.get(n.op_type)
    ins = [g.tensors[t] if t else None for t in n.inputs]
    outs = [g.tensors[t] for t in n.outputs if t]
    return op.band_rows(n, ins, outs)


def chains(g: Graph) -> tuple[list[list[int]], dict[int, str]]:
    """Maximal runs of node indices whose layers can run band by band, each
    reading the previous one's output (read by nothing else); and, per node
    that cannot be tiled, why."""
    users = g.consumers()
    rows = {}
    why = {}
    for i, n in enumerate(g.nodes):
        r = _rows(g, n)
        if isinstance(r, tiling.Rows):
            rows[i] = r
        else:
            why[i] = r
    out, cur = [], []
    for i, n in enumerate(g.nodes):
        if i not in rows:
            cur = []
            continue
        if cur:
            p = g.nodes[cur[-1]]
            t = p.outputs[0]
            linked = (n.inputs[0] == t and [u.name for u in users.get(t, [])] == [n.name]
                      and t not in g.outputs and rows[cur[-1]].h_out == rows[i].h_in)
            if not linked:
                cur = []
        if not cur:
            cur = [i]
            out.append(cur)
        else:
            cur.append(i)
    return [c for c in out if len(c) >= 2], why


def io_span(s: tiling.Schedule, x_bytes: int, y_bytes: int, aliased: bool) -> int:
    """Bytes the region's input and output take together: apart, or with the
    output written over the input as far as the bands' order allows (an
    estimate at row granularity of what planner/windows.py finds)."""
    if not aliased:
        return _align(x_bytes) + _align(y_bytes)
    ri, ro = s.layers[0].row_in, s.layers[-1].row_out
    last = np.maximum.accumulate(s.input_last_read())      # conservative: nondecreasing
    w = s.output_band()
    o = np.arange(w.size)

    def safe(d):
        a0 = o * ro + d
        a1 = (o + 1) * ro - 1 + d
        hit = (a1 >= 0) & (a0 < x_bytes)
        r = np.minimum(a1, x_bytes - 1) // ri
        return bool(np.all(w[hit] >= last[r[hit]]))
    lo, hi = -_align(y_bytes), _align(x_bytes)
    if not safe(lo + ALIGN):
        return _align(x_bytes) + _align(y_bytes)
    lo += ALIGN
    while hi - lo > ALIGN:       # the largest safe delta
        mid = (lo + hi) // 2 // ALIGN * ALIGN
        if mid <= lo:
            break
        lo, hi = (mid, hi) if safe(mid) else (lo, mid)
    d = min(lo, max(0, x_bytes - y_bytes) // ALIGN * ALIGN)
    return _align(max(x_bytes, d + y_bytes) - min(0, d))


def _layer_costs(s: tiling.Schedule) -> list[dict]:
    """Per layer of schedule s: what its own halo mode costs (the quantities
    are per layer, so schedules with mixed modes add up)."""
    n = s.n_layers
    out = [dict(macs=0, calls=0, reread=0, moved=0) for _ in range(n)]
    seen = [0] * n
    for b in s.bands:
        for m in b.moves:
            out[m.buf]["moved"] += m.n * s.layers[m.buf].row_out
        for st in b.steps:
            out[st.layer]["macs"] += (st.c1 - st.c0) * s.layers[st.layer].macs_row
            out[st.layer]["calls"] += 1
            seen[st.layer] += st.r1 - st.r0
    for j, ly in enumerate(s.layers):
        out[j]["macs"] -= ly.h_out * ly.macs_row
        out[j]["work"] = RECOMPUTE * (out[j]["macs"] + OUT * out[j]["macs"] // max(ly.macs_row, 1) * ly.outs_row)
        out[j]["reread"] = max(0, seen[j] - ly.h_in) * ly.row_in * ly.reread
    return out


def _cost(c: dict) -> float:
    return c["work"] + CALL * c["calls"] + c["reread"] + MOVE * c["moved"]


def work(g: Graph) -> int:
    """The model's work in the cost's units: MACs + OUT per output element."""
    total = 0
    for n in g.nodes:
        total += _macs(g, n) + (0 if ops.get(n.op_type).view else OUT * sum(g.tensors[o].size for o in n.outputs if o))
    return total


def candidates(g: Graph, p, scratch: dict[str, int], budget: float, chain: list[int], peak_step: int,
               prof: dict[int, int]) -> list[Choice]:
    """Every (region around peak_step, band height, halo modes) within budget, estimated."""
    out = []
    rows = {i: _rows(g, g.nodes[i]) for i in chain}
    life = p.tensor_life
    recs = [(b, b.record()) for b in p.buffers]
    k = chain.index(peak_step)
    for a in range(max(0, k - MAX_LAYERS + 1), k + 1):
        for b in range(max(k, a + 1), min(len(chain), a + MAX_LAYERS)):
            idx = chain[a:b + 1]
            s0, s1 = idx[0], idx[-1]
            layers = [rows[i] for i in idx]
            x = g.nodes[s0].inputs[0]
            y = g.nodes[s1].outputs[0]
            inner = {g.nodes[i].outputs[0] for i in idx[:-1]}
            mine = inner | {x, y}
            crossing = 0
            for buf, rec in recs:
                if set(buf.members) & mine or buf.name.startswith("scratch:"):
                    continue
                crossing += min(live_extent(rec, st) for st in range(s0, s1 + 1))
            outside = max((v for st, v in prof.items() if not s0 <= st <= s1), default=0)
            dies = (life.get(x, (0, 0))[1] <= s1 and x not in g.outputs
                    and not (getattr(g, "preserve_inputs", False) and x in g.inputs))
            xb, yb = g.tensors[x].nbytes, g.tensors[y].nbytes
            scr = [_align(scratch.get(g.nodes[i].name, 0)) for i in idx]
            h = layers[-1].h_out
            for band in BANDS:
                if band >= h:
                    break
                sc = tiling.schedule(layers, band, (True,) * (len(idx) - 1))
                sr = tiling.schedule(layers, band, (False,) * (len(idx) - 1))
                cc, cr = _layer_costs(sc), _layer_costs(sr)
                buf = [_align(v) for v in sc.buffer_bytes()]
                spans = {c0: io_span(sched, xb, yb, dies) for c0, sched in ((True, sc), (False, sr))}
                last = len(idx) - 1
                for cache in itertools.product((True, False), repeat=last):
                    cost = _cost(cc[last]) + sum(_cost(cc[j] if cache[j] else cr[j]) for j in range(last))
                    if cost > budget:
                        continue
                    kept = sum(bb for bb, c in zip(buf, cache) if c)
                    peak = max(kept + sum(buf[i] for i in (j - 1, j) if 0 <= i < last and not cache[i]) + scr[j]
                               for j in range(len(idx)))
                    local = crossing + spans[cache[0]] + peak
                    est = max(outside, local)
                    extra = sum((cc[j] if j == last or cache[j] else cr[j])["macs"] for j in range(len(idx)))
                    moved = sum(cc[j]["moved"] for j in range(last) if cache[j])
                    out.append(Choice(s0, s1, band, cache, est, local, cost, extra, moved))
    return out


def rewrite(g: Graph, c: Choice) -> Graph:
    """g with nodes c.start .. c.end replaced by one TiledRegion node."""
    from ..ops.tiled import OP_TYPE, Region
    inner = g.nodes[c.start:c.end + 1]
    names = [n.outputs[0] for n in inner[:-1]]
    rows = [_rows(g, n) for n in inner]
    y = g.tensors[inner[-1].outputs[0]]
    consts = []
    for n in inner:
        for t in n.inputs:
            if t and g.tensors[t].is_const and t not in consts:
                consts.append(t)
    reg = Region(list(inner), {t: g.tensors[t] for t in names}, rows, c.band, tuple(c.cache), (y.shape, y.dtype))
    node = Node(g.fresh_node_name(f"tiled_{inner[0].name}"), OP_TYPE, [inner[0].inputs[0]] + consts, [y.name],
                {"_region": reg})
    out = Graph(g.name, dict(g.tensors), g.nodes[:c.start] + [node] + g.nodes[c.end + 1:], list(g.inputs),
                list(g.outputs), g.opset, list(g.notes), g.requant, list(g.state), g.rounding)
    out.channels_kept = dict(g.channels_kept)
    for attr in ("preserve_inputs",):
        if hasattr(g, attr):
            setattr(out, attr, getattr(g, attr))
    out.prune_tensors()
    return out


def apply(g: Graph, start: int, end: int, band: int, cache=None) -> Graph:
    """g with nodes start .. end (a run of tileable layers) tiled in bands of
    `band` rows, halo rows kept per buffer where cache says (default: all):
    a given tiling, for tests and experiments (compiler.plan_and_render
    renders the result)."""
    found, why = chains(g)
    if not any(start in c and end in c for c in found) and start != end:
        raise ValueError(f"nodes {start}..{end} are not one run of tileable layers "
                         f"({why.get(start) or why.get(end) or 'not linked'})")
    cache = tuple(cache) if cache is not None else (True,) * (end - start)
    return rewrite(g, Choice(start, end, band, cache, 0, 0, 0, 0, 0))


def run(g: Graph, budget: float = DEFAULT_BUDGET, evaluate=None) -> Graph:
    """Tile where it lowers the arena. evaluate(graph) -> (Plan, profile):
    the compiler's plan of a graph and a callable giving the bytes each step
    needs at least (planner.profile). Records what it did (or why not) in
    g.patches."""
    total = sum(_macs(g, n) for n in g.nodes)
    found, untileable = chains(g)
    specific = {i: r for i, r in untileable.items() if r != ops.base.NOT_TILED.format(g.nodes[i].op_type)}
    if not found and not specific:      # no spatial layers at all: nothing to say
        g.patches = None
        return g
    left = budget * work(g)
    p, profile = evaluate(g)
    before = p.arena_size
    done, why = [], None
    for _ in range(MAX_ROUNDS):
        prof = profile()
        peak_step = max(prof, key=lambda s_: (prof[s_], -s_))
        chain = next((c for c in found if peak_step in c), None)
        at = f"{prof[peak_step]:,} B at '{g.nodes[peak_step].name}'" if 0 <= peak_step < len(g.nodes) else ""
        if chain is None:
            n = g.nodes[peak_step] if 0 <= peak_step < len(g.nodes) else None
            if n is None:
                why = f"the peak ({prof[peak_step]:,} B) is at the model's {'inputs' if peak_step < 0 else 'outputs'}"
            elif n.op_type != "cuvil.TiledRegion":
                reason = untileable.get(peak_step, "not in a run of two or more tileable layers")
                why = f"the peak ({prof[peak_step]:,} B) is at {n.op_type} '{n.name}', which cannot be tiled: {reason}"
            break
        cands = candidates(g, p, p.scratch_size, left, chain, peak_step, prof)
        if not cands:
            why = f"every tiling of the layers around the peak ({at}) costs more than the --ram-vs-speed budget " \
                  f"({budget:.0%} of the MACs" + (f", {left / max(work(g), 1):.1%} left)" if done else ")")
            break
        low = min(c.estimate for c in cands)
        if low >= prof[peak_step]:
            why = f"no tiling lowers the peak ({at}): another step needs as much"
            break
        # the cheapest of those estimated lowest; the plan may place the region's
        # input and output less tightly than estimated, so also the cheapest of
        # those lowest at the region's own step: the one planned smaller wins
        picks = [min((c for c in cands if c.estimate <= low * (1 + TOLERANCE)), key=lambda c: (c.cost, c.estimate))]
        low_local = min(c.local for c in cands)
        picks.append(min((c for c in cands if c.local <= low_local * (1 + TOLERANCE)), key=lambda c: (c.cost, c.local)))
        tried = []
        for c in picks[:1] + [c for c in picks[1:] if c != picks[0]]:
            g2 = rewrite(g, c)
            tried.append((c, g2) + tuple(evaluate(g2)))
        a_low = min(t[2].arena_size for t in tried)
        best = min((t for t in tried if t[2].arena_size <= a_low * (1 + TOLERANCE)), key=lambda t: t[0].cost)
        # the leanest estimate often comes with bands of 1 row, but the plan may
        # have room the estimate does not see: taller bands of the winner's region
        # (cheaper: fewer kernel calls, per band and channel setups, halo rows
        # converted again) tried from the shortest up while they plan within
        # TOLERANCE of the lowest (MobileNetV2's block 4: 1 -> 3 rows, 2.70 -> 2.50
        # M instructions, arena +2 % on the M4, -1 % on the M55)
        c0 = best[0]
        for c in sorted((c for c in cands if (c.start, c.end, c.cache) == (c0.start, c0.end, c0.cache)
                         and c.band > c0.band and c.cost < c0.cost), key=lambda c: c.band):
            if c.estimate > a_low * (1 + TOLERANCE):
                break
            g2 = rewrite(g, c)
            t2 = (c, g2) + tuple(evaluate(g2))
            if t2[2].arena_size > a_low * (1 + TOLERANCE):
                break
            a_low = min(a_low, t2[2].arena_size)
            if best[2].arena_size <= a_low * (1 + TOLERANCE) and best[0].cost <= c.cost:
                continue
            best = t2
        best, g2, p2, profile2 = best
        if p2.arena_size >= p.arena_size:
            why = (f"tiling nodes {best.start}-{best.end} would plan {p2.arena_size:,} B (estimated "
                   f"{best.estimate:,}), not below {p.arena_size:,} B")
            break
        node = g2.nodes[best.start]
        done.append(dict(node=node.name, layers=[n.name for n in node.attrs["_region"].nodes],
                         first=best.start, band=best.band, bands=len(node.attrs["_region"].schedule().bands),
                         halo=node.attrs["_region"].describe(), extra_macs=best.extra_macs, moved=best.moved,
                         cost=round(best.cost), arena=p2.arena_size))
        left -= best.cost
        g, p, profile = g2, p2, profile2
        found, untileable = chains(g)
    g.patches = dict(regions=done, arena_before=before, arena_after=p.arena_size, note=why, budget=budget,
                     macs=total, extra_macs=sum(d["extra_macs"] for d in done))
    return g


def _macs(g: Graph, n: Node) -> int:
    op = ops.get(n.op_type)
    return op.macs(n, [g.tensors[t] if t else None for t in n.inputs], [g.tensors[t] for t in n.outputs if t])
