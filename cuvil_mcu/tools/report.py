"""`cuvil-mcu report`: one self-contained HTML page about a compiled model.

    html, png = report.build(compiled, profile)      # profile: sim/profile.Profile or None

The page (no scripts, no network, inline SVG and CSS): the summary; a table
with one row per node (op, kernel variant and why, shapes, MACs, constant
bytes, scratch, arena offset, and from a profiling run on QEMU the
instructions, estimated cycles and cycles per MAC); where the cycles go
(bars); the memory plan as a timeline (tensors' lifetimes on x, arena
offsets on y, the peak marked, views and in-place outputs hatched, scratch
grey); RAM and flash against the board's budget; mixed-precision and fusion
notes. `png()` draws the timeline and the cycle bars with matplotlib when it
is installed (None otherwise).

Everything shown is computed from the Compiled object (graph, plan, header)
and the profile; the page only prints it. Per-row numbers also sit in
data- attributes so tests (and scripts) can read them back.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

from .. import ops

ESC = html.escape


@dataclass
class Row:
    index: int
    op: str
    name: str
    kernels: list[str]
    why: str
    in_shapes: list[str]
    out_shapes: list[str]
    macs: int
    const_bytes: int
    scratch: int
    offset: str
    fused: list[str]
    instructions: int | None = None
    cycles: int | None = None


def _const_sizes(compiled) -> dict[str, int]:
    """Bytes of each const array (symbol -> bytes), from the compiler's own
    list: the header prints big ones as words in a union (codegen/carray.py)."""
    return {k.symbol: int(k.data.nbytes) for k in compiled.consts}


def _node_code(header: str, prefix: str) -> list[str]:
    """The C lines of <prefix>_run under each node comment, in node order."""
    start = header.find(f"int {prefix}_run(void *arena)\n{{")
    body = header[start:]
    end = body.find(f"\n    return {prefix.upper()}_OK;")
    body = body[:end if end >= 0 else len(body)]
    parts = re.split(r"\n\s*/\* \d+: .* \*/", body)
    return parts[1:]


VARIANTS = [   # (name fragment, what it is) -- first match wins, most specific first
    ("_mve", "Helium MVE"), ("_neon", "NEON"), ("dsp", "Armv7E-M DSP (SMLAD)"),
]
SHAPES = [("dw", "depthwise"), ("pw", "pointwise 1x1"), ("fc", "fully connected"), ("gemm", "matrix multiply"),
          ("dot", "dot product"), ("3x3", "3x3 window"), ("pad", "padded input ring"), ("lut", "256-entry table"),
          ("fixed", "fixed-point requantization"), ("float", "float requantization")]


def _why(kernels: list[str], board, op_type: str) -> str:
    if not kernels:
        return "view: no code (aliases its input in the arena)" if ops.get(op_type).view else "no kernel"
    k = " ".join(kernels)
    feats = [f for f in ("mve", "neon", "dsp") if board.has(f)]
    for frag, what in VARIANTS:
        if frag in k:
            shape = ", ".join(sorted({w for f, w in SHAPES if f in k}))
            return f"{what}{' ' + shape if shape else ''}: the board's ISA has {frag.strip('_')}"
    if feats:
        return f"portable C99: no {'/'.join(feats)} variant for this op or shape"
    return f"portable C99: board {board.id} has no DSP/Helium/NEON extension"


def rows(compiled, profile=None) -> list[Row]:
    g, plan, p = compiled.graph, compiled.plan, compiled.prefix
    sizes = _const_sizes(compiled)
    code = _node_code(compiled.header, p)
    seen: set[str] = set()
    out = []
    for i, n in enumerate(g.nodes):
        text = code[i] if i < len(code) else ""
        kernels = sorted(set(re.findall(rf"\b{p}__(\w+)\s*\(", text)) - {"prof_mark"})
        used = [s for s in re.findall(rf"\b({p}__w\d+\w*|{p}__c\d+\w*)\b", text) if s in sizes]
        cb = 0
        for s in dict.fromkeys(used):
            if s not in seen:
                seen.add(s)
                cb += sizes[s]
        shapes_in = [f"{g.tensors[t].dtype}{list(g.tensors[t].shape)}" for t in n.inputs
                     if t and not g.tensors[t].is_const]
        shapes_out = [f"{g.tensors[t].dtype}{list(g.tensors[t].shape)}" for t in n.outputs if t]
        offs = [str(plan.tensor_offset[t]) for t in n.outputs if t in plan.tensor_offset]
        ins = [g.tensors[t] if t else None for t in n.inputs]
        outs = [g.tensors[t] for t in n.outputs if t]
        fused = list(n.fused) + ([f"clamp [{n.act[0]:g}, {n.act[1]:g}]"] if n.act else [])
        r = Row(i, n.op_type, n.name, kernels, _why(kernels, compiled.board, n.op_type), shapes_in, shapes_out,
                ops.get(n.op_type).macs(n, ins, outs), cb, plan.scratch_size.get(n.name, 0), ", ".join(offs),
                fused)
        if profile is not None and i < len(profile.layers):
            r.instructions, r.cycles = profile.layers[i].instructions, profile.layers[i].cycles
        out.append(r)
    return out


# ---------------------------------------------------------------- pictures

def timeline(compiled) -> tuple[str, dict]:
    """The memory plan as an SVG: x = node steps, y = arena offset."""
    g, plan = compiled.graph, compiled.plan
    arena = max(plan.arena_size, 1)
    steps = len(g.nodes) + 2     # -1 (inputs) .. n (outputs)
    W, H, L, T = 900, 390, 70, 30
    sx = (W - L - 20) / steps
    sy = (H - T - 40) / arena
    prods = g.producers()
    items = []
    live_at = [0] * steps
    for b in plan.buffers:
        off = plan.offsets[b.name]
        for k in range(b.first + 1, b.last + 2):
            live_at[k] += b.size
        if b.name.startswith("scratch:"):
            items.append((b.first, b.last, off, b.size, "scratch", b.name))
            continue
        for t in b.members:
            if t not in plan.tensor_life:
                continue
            f, last = plan.tensor_life[t]
            p = prods.get(t)
            alias = len(b.members) > 1 and t != b.name
            kind = ("view" if p is not None and ops.get(p.op_type).view else "inplace") if alias else "tensor"
            items.append((f, last, off, plan.tensor_bytes.get(t, b.size), kind, t))
    peak_step = max(range(steps), key=lambda k: live_at[k]) if steps else 0
    peak = live_at[peak_step]
    fill = {"tensor": "#4c78a8", "view": "url(#hv)", "inplace": "url(#hi)", "scratch": "#bbbbbb"}
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'role="img" aria-label="memory plan timeline">',
           '<defs><pattern id="hv" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
           '<rect width="6" height="6" fill="#a0c4e8"/><line x1="0" y1="0" x2="0" y2="6" stroke="#2a5d8f" '
           'stroke-width="2"/></pattern>'
           '<pattern id="hi" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)">'
           '<rect width="6" height="6" fill="#f2c48d"/><line x1="0" y1="0" x2="0" y2="6" stroke="#b5651d" '
           'stroke-width="2"/></pattern></defs>',
           f'<rect x="{L}" y="{T}" width="{W - L - 20}" height="{H - T - 40}" fill="#fafafa" stroke="#999"/>']
    for f, last, off, size, kind, name in sorted(items, key=lambda x: (x[4] != "tensor", x[2])):
        x = L + (f + 1) * sx
        w = max((last - f + 1) * sx, 2)
        y = T + (arena - off - size) * sy
        h = max(size * sy, 1)
        svg.append(f'<rect class="{kind}" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                   f'fill="{fill[kind]}" stroke="#333" stroke-width="0.5"><title>{ESC(name)}: {size:,} B at '
                   f'offset {off:,}, steps {f}..{last} ({kind})</title></rect>')
    px = L + (peak_step + 0.5) * sx
    svg.append(f'<line x1="{px:.1f}" y1="{T}" x2="{px:.1f}" y2="{H - 40}" stroke="#d62728" stroke-width="2" '
               f'stroke-dasharray="5,3"/>')
    svg.append(f'<text x="{min(max(px - 60, L), W - 220):.1f}" y="{T - 8}" fill="#d62728" font-size="12">peak '
               f'{peak:,} B live at step {peak_step - 1}</text>')
    for frac in (0, 0.5, 1):
        y = T + (1 - frac) * (H - T - 40)
        svg.append(f'<text x="{L - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{int(arena * frac):,}</text>')
    for k in range(0, steps, max(1, steps // 12)):
        svg.append(f'<text x="{L + (k + 0.5) * sx:.1f}" y="{H - 24}" font-size="11" text-anchor="middle">'
                   f'{k - 1}</text>')
    svg.append(f'<text x="{L + (W - L - 20) / 2}" y="{H - 6}" font-size="12" text-anchor="middle">node step '
               f'(-1: inputs written before the run)</text>')
    svg.append(f'<text x="14" y="{T + (H - T - 40) / 2}" font-size="12" transform="rotate(-90 14 '
               f'{T + (H - T - 40) / 2})" text-anchor="middle">arena offset (B)</text>')
    svg.append("</svg>")
    return "\n".join(svg), {"peak": peak, "peak_step": peak_step - 1}


def bars(label_values: list[tuple[str, float, str]], width: int = 900, unit: str = "") -> str:
    """Horizontal bars: (label, value, title)."""
    if not label_values:
        return ""
    top = max(v for _, v, _ in label_values) or 1
    h = 18
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h * len(label_values) + 10}" '
           f'role="img" aria-label="bars">']
    for i, (lab, v, title) in enumerate(label_values):
        w = (width - 330) * v / top
        y = 4 + i * h
        svg.append(f'<text x="0" y="{y + 12}" font-size="11">{ESC(lab[:40])}</text>'
                   f'<rect x="260" y="{y}" width="{w:.1f}" height="{h - 4}" fill="#e45756"><title>{ESC(title)}'
                   f'</title></rect><text x="{264 + w:.1f}" y="{y + 12}" font-size="11">{v:,.0f}{unit}</text>')
    svg.append("</svg>")
    return "\n".join(svg)


def budget_bar(label: str, parts: list[tuple[str, int, str]], cap: int | None) -> str:
    total = sum(v for _, v, _ in parts)
    scale_to = max(cap or 0, total, 1)
    W = 900
    x, segs = 160.0, []
    for name, v, color in parts:
        w = (W - 260) * v / scale_to
        segs.append(f'<rect x="{x:.1f}" y="4" width="{w:.1f}" height="20" fill="{color}"><title>{ESC(name)}: '
                    f'{v:,} B</title></rect>')
        x += w
    capline = ""
    if cap:
        cx = 160 + (W - 260) * cap / scale_to
        capline = (f'<line x1="{cx:.1f}" y1="0" x2="{cx:.1f}" y2="28" stroke="#000" stroke-width="2"/>'
                   f'<text x="{min(cx + 4, W - 90):.1f}" y="40" font-size="11">board {cap:,} B</text>')
    pct = f" ({100 * total / cap:.1f}% of {cap:,})" if cap else " (no limit)"
    legend = ", ".join(f"{n} {v:,}" for n, v, _ in parts)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="44" role="img" aria-label="{ESC(label)}">'
            f'<text x="0" y="18" font-size="12">{ESC(label)}</text>'
            f'<rect x="160" y="4" width="{W - 260}" height="20" fill="#eee" stroke="#999"/>{"".join(segs)}{capline}'
            f'</svg><p class="small">{ESC(label)}: {total:,} B = {ESC(legend)}{pct}</p>')


# ---------------------------------------------------------------- the page

CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th{background:#f0f0f0;position:sticky;top:0}td.n{text-align:right;font-variant-numeric:tabular-nums}
.small{font-size:12px;color:#555}.name{max-width:260px;overflow-wrap:anywhere}
.legend span{display:inline-block;width:14px;height:10px;margin:0 4px 0 12px;border:1px solid #333}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px;font-size:13px}dt{font-weight:600}"""


def _short(name: str, n: int = 48) -> str:
    """tf2onnx joins every folded TensorFlow name with ';': show the last part, shortened."""
    part = name.split(";")[-1]
    return part if len(part) <= n else "..." + part[-(n - 3):]


def build(compiled, profile=None, sim=None, title: str | None = None) -> str:
    """The HTML page. profile: sim/profile.Profile (per-node instructions and
    cycles) or None; sim: sim/qemu.SimResult of the normal build (firmware
    text, measured stack) or None."""
    g, plan, b = compiled.graph, compiled.plan, compiled.board
    rs = rows(compiled, profile)
    svg, peak = timeline(compiled)
    title = title or f"{compiled.prefix}: {g.name or 'model'} on {b.id}"
    stack = (sim.stack if sim is not None and sim.stack is not None else
             profile.stack if profile is not None and profile.stack is not None else b.stack_reserve)
    stack_src = ("measured (painted stack high-water mark)" if (sim and sim.stack) or (profile and profile.stack)
                 else "board's stack reserve")
    summ = [("board", f"{b.name} ({b.id}, {b.core}, {b.clock_hz / 1e6:g} MHz)" if b.clock_hz else b.id),
            ("nodes", f"{len(g.nodes)} ({', '.join(f'{k} x{v}' for k, v in sorted(compiled.op_counts.items()))})"),
            ("MACs", f"{compiled.macs:,}" + compiled.pruned_text()),
            ("flash", f"{compiled.weights_bytes:,} B of constants"
             + (f"; firmware text+rodata {sim.text:,} B" if sim is not None else "")),
            ("RAM", f"arena {plan.arena_size:,} B (planner {plan.algorithm}, lower bound {plan.lower_bound:,} B) "
                    f"+ stack {stack:,} B ({stack_src})"),
            ("peak live", f"{peak['peak']:,} B at node step {peak['peak_step']}")]
    for t in g.inputs:
        summ.append(("input", f"{t}: {g.tensors[t].dtype}{list(g.tensors[t].shape)}"))
    for t in g.outputs:
        summ.append(("output", f"{t}: {g.tensors[t].dtype}{list(g.tensors[t].shape)}"))
    if profile is not None:
        summ.append(("instructions", f"{profile.instructions:,} per inference on {profile.board} (QEMU trace, "
                                     f"{profile.instructions / compiled.macs:.3f} per MAC)" if compiled.macs else
                     f"{profile.instructions:,}"))
        summ.append(("cycles", profile.line().split(None, 1)[1]))
    head = ["#", "op", "node", "kernel", "why", "inputs", "output", "MACs", "const B", "scratch B", "arena offset"]
    if profile is not None:
        head += ["instr", "est. cycles", "cycles/MAC", "% cycles"]
    tot_c = profile.cycles if profile is not None and profile.cycles else 0
    body = []
    for r in rs:
        data = f'data-node="{r.index}" data-macs="{r.macs}" data-const="{r.const_bytes}"'
        if r.instructions is not None:
            data += f' data-instructions="{r.instructions}" data-cycles="{r.cycles}"'
        cells = [f'<td class="n">{r.index}</td>', f"<td>{ESC(r.op)}</td>",
                 f'<td class="name" title="{ESC(r.name)}">{ESC(_short(r.name))}'
                 f'{"<br><i>+ " + ESC(", ".join(r.fused)) + "</i>" if r.fused else ""}</td>', f"<td>{'<br>'.join(ESC(k) for k in r.kernels) or '-'}</td>", f"<td>{ESC(r.why)}</td>",
                 f"<td>{'<br>'.join(ESC(s) for s in r.in_shapes)}</td>",
                 f"<td>{'<br>'.join(ESC(s) for s in r.out_shapes)}</td>", f'<td class="n">{r.macs:,}</td>',
                 f'<td class="n">{r.const_bytes:,}</td>', f'<td class="n">{r.scratch:,}</td>',
                 f'<td class="n">{ESC(r.offset)}</td>']
        if profile is not None:
            cpm = f"{r.cycles / r.macs:.3f}" if r.macs and r.cycles is not None else "-"
            share = 100 * (r.cycles or 0) / tot_c if tot_c else 0
            cells += [f'<td class="n">{r.instructions:,}</td>', f'<td class="n">{r.cycles:,}</td>',
                      f'<td class="n">{cpm}</td>', f'<td class="n">{share:.1f}</td>']
        body.append(f"<tr {data}>{''.join(cells)}</tr>")
    if profile is not None:
        body.append(f'<tr class="total"><td></td><td colspan="6"><b>total</b> ({profile.model}, '
                    f'{profile.wait_states} wait states)</td><td class="n">{compiled.macs:,}</td>'
                    f'<td class="n">{sum(r.const_bytes for r in rs):,}</td><td></td><td></td>'
                    f'<td class="n">{profile.instructions:,}</td><td class="n">{profile.cycles:,}</td>'
                    f'<td class="n">{profile.per_mac or 0:.3f}</td><td class="n">100</td></tr>')
    sections = [f"<h1>{ESC(title)}</h1>", "<h2>Summary</h2><dl>" +
                "".join(f"<dt>{ESC(k)}</dt><dd>{ESC(v)}</dd>" for k, v in summ) + "</dl>"]
    if profile is not None:
        top = sorted((r for r in rs if r.cycles), key=lambda r: -r.cycles)[:12]
        sections.append("<h2>Where the cycles go</h2>" + bars(
            [(f"#{r.index} {r.op} {', '.join(r.kernels)}", r.cycles,
              f"{r.name}: {r.cycles:,} cycles, {r.instructions:,} instructions") for r in top], unit=" cyc"))
    sections.append("<h2>Layers</h2><table><thead><tr>" + "".join(f"<th>{ESC(h)}</th>" for h in head) +
                    "</tr></thead><tbody>" + "".join(body) + "</tbody></table>")
    sections.append('<h2>Memory plan</h2><p class="legend small">'
                    '<span style="background:#4c78a8"></span>tensor'
                    '<span style="background:#a0c4e8"></span>view (aliases its input, hatched)'
                    '<span style="background:#f2c48d"></span>in place (written over a dying input, hatched)'
                    '<span style="background:#bbbbbb"></span>kernel scratch'
                    '<span style="background:#d62728"></span>peak</p>' + svg +
                    f'<p class="small">arena {plan.arena_size:,} B, alignment 16; planner {ESC(plan.algorithm)}'
                    f' (tried: {ESC(", ".join(f"{k} {v:,}" for k, v in sorted(plan.tried.items())))}).</p>')
    flash_parts = [("constants", compiled.weights_bytes, "#4c78a8")]
    if sim is not None:
        flash_parts.append(("code", max(sim.text - compiled.weights_bytes, 0) + sim.data, "#72b7b2"))
    sections.append("<h2>Budget</h2>" +
                    budget_bar("RAM", [("arena", plan.arena_size, "#4c78a8"), ("stack", stack, "#f58518")], b.ram) +
                    budget_bar("flash", flash_parts, b.flash))
    notes = list(g.notes)
    fused = [f"#{i} {n.op_type} '{_short(n.name)}' + {', '.join(n.fused)}" for i, n in enumerate(g.nodes) if n.fused]
    mixed = [f"#{i} {n.op_type} '{_short(n.name)}' runs in float" for i, n in enumerate(g.nodes)
             if not ops.get(n.op_type).view and n.op_type not in ("QuantizeLinear", "DequantizeLinear")
             and any(g.tensors[o].dtype == "float32" for o in n.outputs if o)
             and any(g.tensors[o].dtype in ("int8", "uint8") for m in g.nodes for o in m.outputs if o)]
    sections.append("<h2>Notes</h2>" +
                    f"<h3>Fused ops ({len(fused)})</h3><ul>" + "".join(f"<li>{ESC(x)}</li>" for x in fused) +
                    "</ul>" + f"<h3>Mixed precision ({len(mixed)} float op(s) in a quantized model)</h3><ul>" +
                    "".join(f"<li>{ESC(x)}</li>" for x in mixed) + "</ul><h3>Compiler notes</h3><ul>" +
                    "".join(f"<li>{ESC(x)}</li>" for x in notes) + "</ul>")
    if profile is not None:
        sections.append(f'<p class="small">Cycles: {ESC(profile.model)}, an estimate from the QEMU execution trace '
                        f'weighted with the core\'s documented instruction timing (docs/cycles.md: method and '
                        f'limits); instructions are exact.</p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + ESC(title) +
            f"</title><style>{CSS}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n")


def png(compiled, profile=None) -> bytes | None:
    """The memory timeline and the per-node cycles as one PNG (matplotlib), or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        return None
    import io
    g, plan = compiled.graph, compiled.plan
    fig, axes = plt.subplots(2 if profile is not None else 1, 1, figsize=(11, 8 if profile is not None else 4.5))
    ax = axes[0] if profile is not None else axes
    prods = g.producers()
    for bf in plan.buffers:
        off = plan.offsets[bf.name]
        if bf.name.startswith("scratch:"):
            ax.add_patch(Rectangle((bf.first, off), bf.last - bf.first + 1, bf.size, color="#bbbbbb"))
            continue
        for t in bf.members:
            if t not in plan.tensor_life:
                continue
            f, last = plan.tensor_life[t]
            alias = len(bf.members) > 1 and t != bf.name
            p = prods.get(t)
            hatch = ("//" if p is not None and ops.get(p.op_type).view else "\\\\") if alias else None
            ax.add_patch(Rectangle((f, off), last - f + 1, plan.tensor_bytes.get(t, bf.size), facecolor="#4c78a8"
                                   if not alias else "none", edgecolor="#333", hatch=hatch, linewidth=0.5))
    ax.set_xlim(-1, len(g.nodes) + 1)
    ax.set_ylim(0, max(plan.arena_size, 1))
    ax.set_xlabel("node step")
    ax.set_ylabel("arena offset (B)")
    ax.set_title(f"memory plan: arena {plan.arena_size:,} B")
    if profile is not None:
        ax2 = axes[1]
        ax2.bar([layer.index for layer in profile.layers], [layer.cycles for layer in profile.layers],
                color="#e45756")
        ax2.set_xlabel("node")
        ax2.set_ylabel("estimated cycles")
        ax2.set_title(f"{profile.model}: {profile.cycles:,} cycles ({profile.per_mac or 0:.3f}/MAC)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()
