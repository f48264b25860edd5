"""Read an ONNX file into the IR.

Shapes are inferred with our own op rules, not onnx.shape_inference: a Reshape
whose target comes out of a Shape->Gather->Concat chain only has a static shape
once that chain is evaluated, so inference and constant evaluation run in one
sweep: a node whose inputs are all constant (or that only reads shapes) is
evaluated with its numpy reference and its outputs become constants.
passes.fold_constants later drops those nodes.
"""
from __future__ import annotations

import os
import re

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import ops
from ..errors import ModelLoadError, ShapeError, UnsupportedOpError
from ..ir import Graph, Node, Tensor

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
    if not os.path.exists(path):
        raise ModelLoadError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ModelLoadError(f"{path}: is a directory, expected an .onnx file")
    if os.path.getsize(path) == 0:
        raise ModelLoadError(f"{path}: file is empty")
    try:
        model = onnx.load(path)
    except Exception as e:  # protobuf DecodeError, external-data errors
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(f"{path}: not a readable ONNX model (truncated or not ONNX: {msg})") from None
    if not model.HasField("graph") or (len(model.graph.node) == 0 and len(model.graph.output) == 0):
        raise ModelLoadError(f"{path}: not an ONNX model (no graph found; truncated or another file type)")
    ir = model.ir_version
    listed = {vi.name for vi in model.graph.input}
    if ir < 4 and any(t.name not in listed for t in model.graph.initializer):
        # IR 3 wants every initializer listed as a graph input; onnxruntime's
        # quantizer adds zero points and scales without listing them, and
        # onnxruntime loads the result: check it by IR 4's rule instead.
        model.ir_version = 4
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


def _attrs(n: onnx.NodeProto) -> dict:
    out = {}
    for a in n.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, list):
            v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
        out[a.name] = v
    return out


def _elem_dtype(elem_type: int, what: str) -> str:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        raise ModelLoadError(f"{what}: unsupported element type {elem_type}") from None


def load(path: str, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    model = _read(path)
    return from_model(model, input_shapes, source=path)


def from_model(model: onnx.ModelProto, input_shapes=None, source: str = "model") -> Graph:
    input_shapes = dict(input_shapes or {})
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 13)
    og = model.graph
    tensors: dict[str, Tensor] = {}
    notes: list[str] = []

    for init in og.initializer:
        data = np.asarray(numpy_helper.to_array(init), order="C")  # keeps 0-d scalars 0-d
        tensors[init.name] = Tensor(init.name, tuple(data.shape), data.dtype.name, data)
    for sinit in og.sparse_initializer:
        raise ModelLoadError(f"{source}: sparse initializer '{sinit.values.name}' is not supported")

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
        tensors[vi.name] = Tensor(vi.name, tuple(int(s) for s in shape), dtype)
        inputs.append(vi.name)
    if input_shapes:
        raise ShapeError(f"--input-shape names unknown input(s) {sorted(input_shapes)}; "
                         f"the model's inputs are {inputs}")

    # Nodes: unique names; Constant nodes become constant tensors.
    reg = ops.registry()
    nodes: list[Node] = []
    names: set[str] = set()
    missing = []
    for i, pn in enumerate(og.node):
        key = _op_key(pn)
        base = pn.name or f"{pn.op_type}_{i}"
        name, k = base, 0
        while name in names:
            k += 1
            name = f"{base}_{k}"
        names.add(name)
        if key not in reg:
            missing.append(f"node '{name}' ({key})")
        nodes.append(Node(name, key, list(pn.input), list(pn.output), _attrs(pn),
                          opset=opset if pn.domain in DEFAULT_DOMAINS else None))
    if missing:
        raise UnsupportedOpError(missing)

    g = Graph(og.name or "model", tensors, _topo_sort(nodes, set(tensors)),
              inputs, [o.name for o in og.output], opset, notes)
    _infer(g)
    return g


def _topo_sort(nodes: list[Node], available: set[str]) -> list[Node]:
    """Stable topological order (ONNX requires one; we do not rely on it)."""
    avail = set(available)
    done, order = set(), []
    pending = list(nodes)
    while pending:
        rest = []
        for n in pending:
            if all((not i) or i in avail for i in n.inputs):
                order.append(n)
                avail.update(o for o in n.outputs if o)
                done.add(n.name)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            missing = sorted({i for n in rest for i in n.inputs if i and i not in avail})
            raise ModelLoadError(f"nodes {[n.name for n in rest][:5]} read tensors nobody produces: {missing[:5]}")
        pending = rest
    return order


def _infer(g: Graph) -> None:
    """Shape inference with constant evaluation, in execution order."""
    for n in g.nodes:
        op = ops.get(n.op_type)
        ins = [g.tensors[i] if i else None for i in n.inputs]
        op.check(n, ins)
        outs = op.infer(n, ins)
        const = op.shape_only or all(t is None or t.is_const for t in ins)
        if const and n.outputs:
            arrays = [t.data if t is not None else None for t in ins]
            values = op.reference(n, ins, *arrays)
        else:
            values = None
        known = op.known_outputs(n, ins) if values is None else {}
        for j, o in enumerate(n.outputs):
            if not o:
                continue
            shape, dtype = outs[j]
            t = Tensor(o, tuple(int(d) for d in shape), dtype)
            if j in known:   # a constant whatever the inputs: no longer this node's output
                t.data = np.asarray(known[j], dtype=dtype, order="C")
                n.outputs[j] = ""
            elif values is not None:
                v = np.asarray(np.asarray(values[j]).astype(dtype, copy=False), order="C")
                if tuple(v.shape) != t.shape:
                    raise ShapeError(f"node '{n.name}' ({n.op_type}): output {j} evaluates to shape "
                                     f"{list(v.shape)}, inferred {list(t.shape)}")
                t.data = v
            g.tensors[o] = t
