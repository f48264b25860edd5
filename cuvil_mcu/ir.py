"""The intermediate representation: a graph of nodes over named tensors.

Every tensor has a static shape and a dtype. Constant tensors carry their data
(numpy array); the others are planned into the arena. Nodes are kept in
execution (topological) order. `verify` checks the invariants every pass must
keep; tests run it after each pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import GraphError

# dtypes the IR knows, by numpy name, with their C type.
C_TYPES = {
    "float32": "float",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "bool": "uint8_t",
    "float64": "double",
}


@dataclass
class QuantParams:
    """Affine quantization: real = scale * (q - zero_point). axis is None for
    per-tensor parameters, else the channel axis of per-channel ones."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = None
    quant: QuantParams | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def ctype(self) -> str:
        return C_TYPES[self.dtype]


@dataclass
class Node:
    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    # Clamp fused into the producing kernel by passes.fuse_activation:
    # (lo, hi) in the output's real domain; None when nothing is fused.
    act: tuple[float, float] | None = None
    # Names of the nodes folded into this one (for reports).
    fused: list[str] = field(default_factory=list)
    # Version of the default ONNX domain the node was loaded under (ops whose
    # semantics changed between opsets, e.g. Softmax at 13); None: unknown,
    # ops then assume the newest.
    opset: int | None = None

    def attr(self, key, default=None):
        return self.attrs.get(key, default)

    def input(self, i: int) -> str:
        """Name of input i, '' when absent (ONNX optional inputs)."""
        return self.inputs[i] if i < len(self.inputs) else ""


@dataclass
class Graph:
    name: str
    tensors: dict[str, Tensor]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    opset: int = 13
    # Things the user should know (assumptions made while loading, ops left
    # unfused); printed in gen's summary.
    notes: list[str] = field(default_factory=list)
    # Requantization of integer ops: "fixed" (integer multiplier + shift, TFLM
    # arithmetic) or "float" (float32 scale, onnxruntime's arithmetic).
    requant: str = "fixed"
    # Streaming state (passes/stream.py, --stream): (input, output, reset
    # value) triples; the output is planned on the input's bytes, so a
    # recurrent layer's state stays in the arena from one call to the next.
    state: list = field(default_factory=list)
    # Where TFLM's integer rounding and ONNX's differ beyond the shared
    # requantization (average pools: ties, the truncating mean), which one
    # "fixed" mode follows: "tflm" for models tf2onnx wrote (converted from
    # TensorFlow / TFLite, whose reference is TFLM) and for --quantize (our
    # own quantizer's), "onnx" for the rest.
    rounding: str = "tflm"
    # Channels passes/prune_channels.py dropped: tensor -> (the channels it had,
    # the original indexes of those it keeps), for validate's per-layer match.
    channels_kept: dict = field(default_factory=dict)

    def pruned_channels(self) -> int:
        """Channels dropped from convolutions' outputs (passes/prune_channels.py;
        the pools and views after them that lost the same channels not counted again)."""
        prod = self.producers()
        for n in self.nodes:   # (and the layers inside a tiled region)
            if n.attrs.get("_region") is not None:
                prod.update((o, m) for m in n.attrs["_region"].nodes for o in m.outputs if o)
        return sum(c - len(kept) for t, (c, kept) in self.channels_kept.items()
                   if t in prod and "Conv" in prod[t].op_type)

    def t(self, name: str) -> Tensor:
        return self.tensors[name]

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    users.setdefault(i, []).append(n)
        return users

    def add_const(self, base: str, data: np.ndarray) -> str:
        """Add a constant tensor under a fresh name derived from base."""
        name = self.fresh_name(base)
        data = np.asarray(data, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
        self.tensors[name] = Tensor(name, tuple(data.shape), data.dtype.name, data)
        return name

    def fresh_name(self, base: str) -> str:
        name, k = base, 0
        while name in self.tensors:
            k += 1
            name = f"{base}_{k}"
        return name

    def fresh_node_name(self, base: str) -> str:
        """A node name derived from base that no node has yet."""
        names = {n.name for n in self.nodes}
        name, k = base, 0
        while name in names:
            k += 1
            name = f"{base}_{k}"
        return name

    def rename_uses(self, old: str, new: str) -> None:
        """Make every consumer (and the graph outputs) read `new` instead of `old`."""
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def prune_tensors(self) -> None:
        """Drop tensors nothing refers to any more."""
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(i for i in n.inputs if i)
            used.update(o for o in n.outputs if o)
        self.tensors = {k: v for k, v in self.tensors.items() if k in used}


def verify(g: Graph) -> None:
    """Check the invariants of a well-formed graph; raise GraphError naming the
    first broken one."""
    seen = set(g.inputs)
    for name in g.inputs:
        if name not in g.tensors:
            raise GraphError(f"graph input '{name}' has no tensor")
    for name, t in g.tensors.items():
        if t.name != name:
            raise GraphError(f"tensor key '{name}' holds tensor named '{t.name}'")
        if t.dtype not in C_TYPES:
            raise GraphError(f"tensor '{name}' has unsupported dtype {t.dtype}")
        if any((not isinstance(d, (int, np.integer))) or d < 0 for d in t.shape):
            raise GraphError(f"tensor '{name}' has a non-static shape {t.shape}")
        if t.is_const:
            seen.add(name)
            if tuple(t.data.shape) != tuple(t.shape) or t.data.dtype.name != t.dtype:
                raise GraphError(f"constant '{name}' data {t.data.dtype}{list(t.data.shape)} "
                                 f"does not match {t.dtype}{list(t.shape)}")
        if t.quant is not None:
            q = t.quant
            if q.scale.size == 0 or not np.all(np.isfinite(q.scale)) or np.any(q.scale <= 0):
                raise GraphError(f"tensor '{name}' has an invalid quantization scale")
    produced = set()
    for n in g.nodes:
        for i in n.inputs:
            if i and i not in seen:
                raise GraphError(f"node '{n.name}' ({n.op_type}) reads '{i}' before it is produced")
        for o in n.outputs:
            if not o:
                continue
            if o in produced or o in g.inputs:
                raise GraphError(f"tensor '{o}' has more than one producer")
            if o not in g.tensors:
                raise GraphError(f"node '{n.name}' output '{o}' has no tensor")
            produced.add(o)
            seen.add(o)
    for o in g.outputs:
        if o not in seen:
            raise GraphError(f"graph output '{o}' is never produced")
