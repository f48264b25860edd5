"""Fold a constant-mode Pad into the Conv / pooling node that reads it.

The Pad must pad only the spatial axes (2 and up, NCHW), by non-negative
amounts, feed input 0 of exactly one node and not be a graph output. The fill
value must be what the consumer's own padding means:
- Conv: 0;
- AveragePool: 0, and only with count_include_pad=1 (the padded zeros are
  counted in the average);
- MaxPool: -inf (padding never wins the max), and only without the Indices
  output (indices count positions of the unpadded input);
- pools only with ceil_mode=0.
The Pad's amounts are added to the consumer's `pads` attribute
([x1_begin, x2_begin, ..., x1_end, x2_end]); an `auto_pad` of VALID or
SAME_UPPER/SAME_LOWER is first turned into explicit pads, so the consumer
ends with auto_pad NOTSET.
"""
from __future__ import annotations

import numpy as np

from ..errors import CuvilError
from ..ir import Graph, Node
from ..ops.pad import pad_amounts, pad_mode, pad_value


def _explicit_pads(n: Node, g: Graph) -> list[int] | None:
    """The consumer's pads as explicit numbers ([begins..., ends...], auto_pad
    resolved against its current input, by the op's own geometry rules), or
    None when the op rejects its attributes (then nothing is fused and the op
    reports the problem itself)."""
    from ..ops.conv import conv_geometry
    from ..ops.pool import geometry
    x = g.tensors[n.inputs[0]].shape
    try:
        if n.op_type == "Conv":
            return list(conv_geometry(n, x, g.tensors[n.inputs[1]].shape).onnx_pads())
        dims = geometry(n, x)
    except CuvilError:
        return None
    return [d[1] for d in dims] + [d[2] for d in dims]


def _fusable(pad: Node, user: Node, g: Graph) -> bool:
    ins = [g.tensors[i] if i else None for i in pad.inputs]
    x = ins[0]
    if x.dtype != "float32" or len(x.shape) < 3 or pad_mode(pad) != "constant":
        return False
    if any(t is not None and not t.is_const for t in ins[1:]):
        return False
    try:
        begin, end = pad_amounts(pad, ins)
        value = float(pad_value(pad, ins, "float32"))
    except CuvilError:
        return False
    if any(p < 0 for p in begin + end) or any(begin[:2]) or any(end[:2]):
        return False
    if user.op_type == "Conv":
        return value == 0.0
    # ceil_mode keeps a last window that starts inside the Pad's end region
    # but drops one that starts inside the pool's own end padding: not
    # equivalent, so pools fuse only without it.
    if user.op_type == "AveragePool":
        return value == 0.0 and int(user.attr("count_include_pad", 0)) == 1 \
            and int(user.attr("ceil_mode", 0)) == 0
    if user.op_type == "MaxPool":
        return value == -np.inf and len([o for o in user.outputs if o]) == 1 \
            and int(user.attr("ceil_mode", 0)) == 0
    return False


def run(g: Graph) -> Graph:
    consumers = g.consumers()
    removed = set()
    for pad in g.nodes:
        if pad.op_type != "Pad" or not pad.outputs or pad.outputs[0] in g.outputs:
            continue
        y = pad.outputs[0]
        users = consumers.get(y, [])
        if len(users) != 1:
            continue
        user = users[0]
        if user.inputs[0] != y or user.inputs.count(y) != 1 or not _fusable(pad, user, g):
            continue
        own = _explicit_pads(user, g)
        if own is None:
            continue
        begin, end = pad_amounts(pad, [g.tensors[i] if i else None for i in pad.inputs])
        r = len(begin) - 2
        user.attrs["pads"] = [own[i] + begin[2 + i] for i in range(r)] + \
                             [own[r + i] + end[2 + i] for i in range(r)]
        user.attrs["auto_pad"] = "NOTSET"
        user.inputs[0] = pad.inputs[0]
        user.fused.append(f"Pad '{pad.name}'")
        removed.add(pad.name)
    g.nodes = [n for n in g.nodes if n.name not in removed]
    g.prune_tensors()
    return g
