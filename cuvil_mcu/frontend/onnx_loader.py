"""Read an ONNX file into the IR.

Shapes are inferred with our own op rules, not onnx.shape_inference: a Reshape
whose target comes out of a Shape->Gather->Concat chain only has a static shape
once that chain is evaluated, so inference and constant evaluation run in one
sweep: a node whose inputs are all constant (or that only reads shapes) is
evaluated with its numpy reference and its outputs become constants.
passes.fold_constants later drops those nodes.
"""
from __future__ import annotations

import heapq
import re

import numpy as np
import onnx
from onnx import helper

from .. import limits, ops
from ..errors import CuvilError, ModelLoadError, ShapeError, UnsupportedOpError
from ..ir import C_TYPES, Graph, Node, Tensor
from .onnx_file import read_model
from .tensors import check as check_tensor, to_array, type_name

DEFAULT_DOMAINS = ("", "ai.onnx")


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """`name=1,3,32,32` (repeatable) -> {name: shape}."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        for part in spec.split(";"):
            part = part.strip()
            if not part:
                continue
            m = re.fullmatch(r"([^=]+)=(\d+(?:\s*[,x]\s*\d+)*)", part)
            if not m:
                raise ShapeError(f"--input-shape '{part}' is not of the form name=1,3,32,32")
            dims = tuple(int(d) for d in re.split(r"\s*[,x]\s*", m.group(2)))
            if 0 in dims:
                raise ShapeError(f"--input-shape '{part}': every dimension must be at least 1")
            out[m.group(1).strip()] = dims
    return out


def _read(path: str) -> onnx.ModelProto:
    model = read_model(path)
    if not model.HasField("graph") or (len(model.graph.node) == 0 and len(model.graph.output) == 0):
        raise ModelLoadError(f"{path}: not an ONNX model (no graph found; truncated or another file type)")
    ir = model.ir_version
    listed = {vi.name for vi in model.graph.input}
    if ir < 4 and any(t.name not in listed for t in model.graph.initializer):
        # IR 3 wants every initializer listed as a graph input; onnxruntime's
        # quantizer adds zero points and scales without listing them, and
        # onnxruntime loads the result: check it by IR 4's rule instead.
        model.ir_version = 4
    budget = [limits.MAX_CONST_BYTES]
    for init in model.graph.initializer:   # our messages name the tensor and both sizes; onnx's checker's less so
        check_tensor(init, f"initializer '{init.name}'", budget)
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        model.ir_version = ir
        msg = " ".join(str(e).split())
        raise ModelLoadError(f"{path}: invalid ONNX model: {msg[:400]}") from None
    model.ir_version = ir
    return model


def _op_key(n: onnx.NodeProto) -> str:
    return n.op_type if n.domain in DEFAULT_DOMAINS else f"{n.domain}.{n.op_type}"


def _attrs(n: onnx.NodeProto, name: str) -> dict:
    out = {}
    for a in n.attribute:
        try:
            v = helper.get_attribute_value(a)
        except Exception:
            raise ModelLoadError(f"node '{name}' ({n.op_type}): attribute '{a.name}' has no value "
                                 f"of its declared type") from None
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, onnx.TensorProto):
            v = to_array(v, f"node '{name}' ({n.op_type}): attribute '{a.name}'")
        elif isinstance(v, list):
            v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
        out[a.name] = v
    return out


def _elem_dtype(elem_type: int, what: str) -> str:
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        dtype = None
    if dtype not in C_TYPES:
        raise ModelLoadError(f"{what}: element type {type_name(elem_type)} is not supported "
                             f"({', '.join(C_TYPES)})")
    return dtype


def load(path: str, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    model = _read(path)
    return from_model(model, input_shapes, source=path)


def _opset(model: onnx.ModelProto, source: str) -> int:
    """The default domain's opset; one this onnx package does not know is
    refused (its ops' meaning is unknown)."""
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        return 13
    newest = onnx.defs.onnx_opset_version()
    if len(set(versions)) > 1:
        raise ModelLoadError(f"{source}: the default ONNX domain is imported at opsets {sorted(set(versions))}")
    if not 1 <= versions[0] <= newest:
        raise ModelLoadError(f"{source}: opset {versions[0]} of the default ONNX domain is not one this onnx "
                             f"package ({onnx.__version__}) knows (1 to {newest})")
    return versions[0]


def _check_structure(og: onnx.GraphProto, source: str) -> None:
    """What onnxruntime refuses and we would otherwise compile into nonsense:
    no outputs, duplicate node names, a tensor with two producers."""
    if len(og.node) > limits.MAX_NODES:
        raise ModelLoadError(f"{source}: {len(og.node):,} nodes; at most {limits.MAX_NODES:,} are supported")
    if not og.output:
        raise ModelLoadError(f"{source}: the graph declares no outputs (nothing to compute)")
    names: set[str] = set()
    for pn in og.node:
        if pn.name and pn.name in names:
            raise ModelLoadError(f"{source}: two nodes are named '{pn.name}' (node names must be unique)")
        names.add(pn.name)
    producer: dict[str, str] = {}
    for what, seq in (("initializer", [t.name for t in og.initializer]),
                      ("graph input", [vi.name for vi in og.input])):
        for name in seq:
            if not name:
                raise ModelLoadError(f"{source}: a {what} has an empty name")
            if producer.get(name) == what:
                raise ModelLoadError(f"{source}: two {what}s are named '{name}'")
            producer[name] = what
    for i, pn in enumerate(og.node):
        for o in pn.output:
            if not o:
                continue
            if o in producer:
                raise ModelLoadError(f"{source}: tensor '{o}' is written by node '{pn.name or pn.op_type}' and "
                                     f"is also {_article(producer[o])} (each tensor has one producer)")
            producer[o] = f"the output of node '{pn.name or pn.op_type + '_' + str(i)}'"
    for o in og.output:
        if not o.name:
            raise ModelLoadError(f"{source}: a graph output has an empty name")
        if o.name not in producer:
            raise ModelLoadError(f"{source}: graph output '{o.name}' is not produced by any node, input or "
                                 f"initializer")


def _article(what: str) -> str:
    return what if what.startswith("the ") else f"an {what}" if what[0] in "aeiou" else f"a {what}"


def from_model(model: onnx.ModelProto, input_shapes=None, source: str = "model") -> Graph:
    input_shapes = dict(input_shapes or {})
    opset = _opset(model, source)
    og = model.graph
    _check_structure(og, source)
    tensors: dict[str, Tensor] = {}
    notes: list[str] = []

    budget = [limits.MAX_CONST_BYTES]
    for init in og.initializer:
        data = to_array(init, f"initializer '{init.name}'", budget)  # keeps 0-d scalars 0-d
        tensors[init.name] = Tensor(init.name, tuple(data.shape), data.dtype.name, data)
    for sinit in og.sparse_initializer:
        raise ModelLoadError(f"{source}: sparse initializer '{sinit.values.name}' is not supported")
    bad = [(t.name, int(np.count_nonzero(~np.isfinite(t.data)))) for t in tensors.values()
           if t.data.dtype.kind == "f" and not np.all(np.isfinite(t.data))]
    if bad:
        notes.append(f"{len(bad)} initializer(s) hold NaN or infinite values ('{bad[0][0][:60]}': {bad[0][1]:,}); "
                     f"outputs that depend on them are not meaningful")

    # Graph inputs (those that are not initializers, as older IR versions list
    # both: there the initializer is the input's default value, a constant
    # unless --input-shape names it).
    defaults = [vi.name for vi in og.input if vi.name in tensors]
    for name in defaults:
        if name in input_shapes:
            del tensors[name]
    fed = [d for d in defaults if d not in tensors]
    if defaults:
        notes.append(f"{len(defaults) - len(fed)} initializer(s) also listed as graph inputs (IR version "
                     f"{model.ir_version} style) compiled as constants; name one in --input-shape to feed it "
                     f"at run time" + (f" (fed at run time: {', '.join(fed)})" if fed else ""))
    unknown = sorted(set(input_shapes) - {vi.name for vi in og.input if vi.name not in tensors})
    if unknown:
        raise ShapeError(f"--input-shape names unknown input(s) {unknown}; the model's inputs are "
                         f"{[vi.name for vi in og.input if vi.name not in tensors]}")
    inputs = []
    for vi in og.input:
        if vi.name in tensors:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ModelLoadError(f"{source}: input '{vi.name}' is not a tensor")
        dtype = _elem_dtype(tt.elem_type, f"input '{vi.name}'")
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
        zero = [i for i, d in enumerate(dims) if isinstance(d, int) and d == 0 and tt.shape.dim[i].HasField("dim_value")]
        if zero:
            raise ShapeError(f"input '{vi.name}': dimension {zero[0]} is 0 (an empty tensor); "
                             f"empty inputs are not supported")
        if vi.name in input_shapes:
            shape = input_shapes.pop(vi.name)
            if tt.HasField("shape") and len(shape) != len(dims):
                raise ShapeError(f"--input-shape {vi.name}: rank {len(shape)} given, the model's "
                                 f"input has rank {len(dims)} {dims}")
            for i, (given, d) in enumerate(zip(shape, dims)):
                if isinstance(d, int) and d > 0 and d != given:
                    raise ShapeError(f"--input-shape {vi.name}: dimension {i} is fixed to {d} in the model, "
                                     f"{given} given")
        else:
            shape = []
            for i, d in enumerate(dims):
                if isinstance(d, int) and d > 0:
                    shape.append(d)
                elif i == 0 and len(dims) > 1:
                    shape.append(1)
                    notes.append(f"input '{vi.name}': dimension 0 ('{d}') is dynamic; assumed batch 1 "
                                 f"(set it with --input-shape {vi.name}=...)")
                else:
                    raise ShapeError(f"input '{vi.name}': dimension {i} ('{d}') is dynamic; fix it with "
                                     f"--input-shape {vi.name}=" + ",".join(
                                         str(x) if isinstance(x, int) and x > 0 else "N" for x in dims))
            shape = tuple(shape)
        limits.check_shape(shape, np.dtype(dtype).itemsize, f"input '{vi.name}'")
        tensors[vi.name] = Tensor(vi.name, tuple(int(s) for s in shape), dtype)
        inputs.append(vi.name)
    if input_shapes:
        raise ShapeError(f"--input-shape names unknown input(s) {sorted(input_shapes)}; "
                         f"the model's inputs are {inputs}")

    # Nodes: unique names; Constant nodes become constant tensors.
    reg = ops.registry()
    nodes: list[Node] = []
    names: set[str] = {pn.name for pn in og.node if pn.name}
    for i, pn in enumerate(og.node):
        key = _op_key(pn)
        name = pn.name
        if not name:  # a generated name never takes one the model uses
            base = name = f"{pn.op_type}_{i}"
            k = 0
            while name in names:
                k += 1
                name = f"{base}_{k}"
            names.add(name)
        nodes.append(Node(name, key, list(pn.input), list(pn.output), _attrs(pn, name),
                          opset=opset if pn.domain in DEFAULT_DOMAINS else None))

    for kind, names in (("input", inputs), ("output", [o.name for o in og.output])):
        for name in names:
            if limits.name_in_macro(name) != name:
                notes.append(f"{kind} '{name[:40]}...': its name ({len(name.encode()):,} B) is shortened in the "
                             f"header's _NAME macro (C strings hold {limits.MAX_NAME_IN_MACRO:,} B portably)")
    g = Graph(og.name or "model", tensors, _topo_sort(nodes, set(tensors)),
              inputs, [o.name for o in og.output], opset, notes,
              rounding="tflm" if model.producer_name.startswith("tf2onnx") else "onnx")
    _infer(g, lambda: _onnx_types(model), reg)
    return g


def _topo_sort(nodes: list[Node], available: set[str]) -> list[Node]:
    """Topological order, the given order wherever it is one (ONNX requires
    a topological order; we do not rely on it). Linear in the graph's size."""
    avail = set(available)
    users: dict[str, list[int]] = {}
    waiting = []
    for i, n in enumerate(nodes):
        deps = {x for x in n.inputs if x and x not in avail}
        for x in deps:
            users.setdefault(x, []).append(i)
        waiting.append(len(deps))
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for o in nodes[i].outputs:
            if o and o not in avail:
                avail.add(o)
                for j in users.pop(o, ()):
                    waiting[j] -= 1
                    if waiting[j] == 0:
                        heapq.heappush(ready, j)
    if len(order) < len(nodes):
        rest = [n for i, n in enumerate(nodes) if waiting[i] > 0]
        missing = sorted({x for n in rest for x in n.inputs if x and x not in avail})
        raise ModelLoadError(f"nodes {[n.name for n in rest][:5]} read tensors nobody produces before them "
                             f"(missing, or a cycle): {missing[:5]}")
    return order


def _onnx_types(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], str]]:
    """Static shapes and dtypes onnx's own shape inference finds (used only
    to keep checking the nodes after one we refuse)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return {}
    out = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
            continue
        if not all(d.HasField("dim_value") and d.dim_value >= 0 for d in tt.shape.dim):
            continue
        try:
            dtype = _elem_dtype(tt.elem_type, vi.name)
        except ModelLoadError:
            continue
        out[vi.name] = (tuple(int(d.dim_value) for d in tt.shape.dim), dtype)
    return out


def _infer(g: Graph, onnx_types=lambda: {}, reg=None) -> None:
    """Shape inference with constant evaluation, in execution order.

    Every refusal is collected, not just the first: a node whose op we lack
    or whose attributes we refuse is reported, and the nodes after it are
    still checked, with its outputs' shapes from our rule when it has one,
    else from onnx's shape inference; only nodes that read a tensor neither
    knows are left unchecked (and counted). Other errors stop at once unless
    a refusal came first."""
    reg = reg if reg is not None else ops.registry()
    problems: list[str] = []
    unknown: set[str] = set()   # tensors whose shape nobody could tell
    unchecked = 0
    types = None

    def fallback(n):
        nonlocal types
        if types is None:
            types = onnx_types()
        for o in n.outputs:
            if o and o in types:
                g.tensors[o] = Tensor(o, *types[o])
            elif o:
                unknown.add(o)

    for n in g.nodes:
        if any(i in unknown for i in n.inputs if i):
            unknown.update(o for o in n.outputs if o)
            unchecked += 1
            continue
        op = reg.get(n.op_type)
        if op is None:
            problems.append(f"node '{n.name}' ({n.op_type})")
            fallback(n)
            continue
        ins = [g.tensors[i] if i else None for i in n.inputs]
        try:
            op.check(n, ins)
            outs = op.infer(n, ins)
            _set_outputs(g, n, op, ins, outs)
        except UnsupportedOpError as e:
            problems.extend(e.problems)
            try:
                outs = op.infer(n, ins)
                for j, o in enumerate(n.outputs):
                    if o:
                        g.tensors[o] = Tensor(o, tuple(int(d) for d in outs[j][0]), outs[j][1])
            except Exception:
                fallback(n)
        except CuvilError:
            if not problems:
                raise
            fallback(n)   # (possibly a consequence of a refused node's guessed shapes)
    if problems:
        raise UnsupportedOpError(problems, unchecked)


def _set_outputs(g: Graph, n: Node, op, ins, outs) -> None:
    """Output tensors of n within the limits, evaluated now when every input
    is constant and the result is small enough to fold (limits.py)."""
    out_t = []
    for j, o in enumerate(n.outputs):
        if not o:
            continue
        if j >= len(outs):
            raise ShapeError(f"node '{n.name}' ({n.op_type}): has {len(n.outputs)} outputs, the op defines "
                             f"{len(outs)}")
        shape, dtype = outs[j]
        shape = tuple(int(d) for d in shape)
        limits.check_shape(shape, np.dtype(dtype).itemsize, f"node '{n.name}' ({n.op_type}): output '{o}'")
        out_t.append(Tensor(o, shape, dtype))
    values = None
    if (op.shape_only or all(t is None or t.is_const for t in ins)) and out_t:
        reason = limits.fold_refusal(op, n, ins, out_t)
        if reason is None:
            values = ops.evaluate(op, n, ins, out_t)
        else:
            limits.leave_to_run_time(g, op, n, ins, reason)
    known = op.known_outputs(n, ins) if values is None else {}
    j = 0
    for k, o in enumerate(n.outputs):
        if not o:
            continue
        t = out_t[j]
        j += 1
        if k in known:   # a constant whatever the inputs: no longer this node's output
            t.data = np.asarray(known[k], dtype=t.dtype, order="C")
            n.outputs[k] = ""
        elif values is not None:
            v = np.asarray(np.asarray(values[k]).astype(t.dtype, copy=False), order="C")
            if tuple(v.shape) != t.shape:
                raise ShapeError(f"node '{n.name}' ({n.op_type}): output {k} evaluates to shape "
                                 f"{list(v.shape)}, inferred {list(t.shape)}")
            t.data = v
        g.tensors[o] = t
