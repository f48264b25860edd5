"""`--quantize int8` for recurrent layers (the parts of ptq.py specific to
LSTM / GRU / RNN; ptq.py calls these).

A layer is quantized to its integer form (ops/qrnn.py) when it has the
default activations, no peepholes, constant W / R / B, initial states
absent or constant, a float X and no reader of Y_c. Calibration runs the
float reference of the layer itself over every sample, recording the
hidden state's range and the largest |cell state| over all time steps
(ops/rnn.py `observe`), not only over the outputs: Y_h alone shows one step.
Then:
- Y and Y_h get the hidden state's asymmetric int8 parameters (one set:
  h_t is both an output and the next step's input);
- W and R: symmetric int8 per gate row (axis 1; one scale per row shared
  by both directions of a bidirectional layer, as a per-axis
  DequantizeLinear can hold), B stays float (the integer op folds it);
- the node is marked `_integer` with `_cell_pow`, the LSTM cell state's
  power-of-two scale, for passes/qdq_rnn.py.
"""
from __future__ import annotations

import os

import numpy as np

from . import ops
from .errors import CuvilError
from .ir import Graph, Node
from .ops import rnn
from .ops.qrnn import cell_pow

OPS = ("LSTM", "GRU", "RNN")
INT_OP = {"LSTM": "cuvil.QLSTM", "GRU": "cuvil.QGRU", "RNN": "cuvil.QRNN"}


def quantizable(n: Node, g: Graph, reg) -> bool:
    if INT_OP[n.op_type] not in reg or n.act is not None:
        return False
    ins = [g.tensors[i] if i else None for i in n.inputs]
    x = ins[rnn.IX]
    if x is None or x.is_const or x.dtype != "float32":
        return False
    for i in (rnn.IW, rnn.IR, rnn.IB, rnn.ISEQ, rnn.IH0, rnn.IC0):
        t = ins[i] if len(ins) > i else None
        if t is not None and (not t.is_const or t.dtype not in ("float32", "int32", "int64")):
            return False
    if len(ins) > rnn.IP and ins[rnn.IP] is not None:
        return False
    try:
        s = rnn.spec(n, ins)
    except Exception:   # the float op reports its own errors
        return False
    if not s.default_acts():
        return False
    users = g.consumers()
    yc = n.outputs[2] if len(n.outputs) > 2 else ""
    return not (yc and (users.get(yc) or yc in g.outputs))


def observe(g: Graph, qnames: set[str], data: dict, count: int, run_all, target: Graph | None = None) -> None:
    """Calibrate the quantized recurrent nodes of g: their `_h_range` and
    `_cell_pow` attributes (over every time step of every sample), set on
    the nodes of the same name in `target` too."""
    nodes = [n for n in g.nodes if n.name in qnames and n.op_type in OPS]
    if not nodes:
        return
    want = {i for n in nodes for i in n.inputs if i and not g.tensors[i].is_const}
    stats = {n.name: {} for n in nodes}
    for smp in range(count):
        vals = run_all(g, {k: v[smp] for k, v in data.items()}, want)
        for n in nodes:
            ins = [g.tensors[i] if i else None for i in n.inputs]
            arrays = [None if not i else (g.tensors[i].data if g.tensors[i].is_const else vals[i]) for i in n.inputs]
            rec = ops.get(n.op_type).observe(n, ins, *arrays)
            st = stats[n.name]
            st["h_min"] = min(st.get("h_min", 0.0), rec.get("h_min", 0.0))
            st["h_max"] = max(st.get("h_max", 0.0), rec.get("h_max", 0.0))
            st["c_absmax"] = max(st.get("c_absmax", 0.0), rec.get("c_absmax", 0.0))
    by_name = {n.name: n for n in (target or g).nodes}
    for n in nodes:
        st = stats[n.name]
        twin = by_name.get(n.name, n)
        for m in [n] + ([twin] if twin is not n else []):
            m.attrs["_h_range"] = (st["h_min"], st["h_max"])
            if n.op_type == "LSTM":
                m.attrs["_cell_pow"] = cell_pow(st["c_absmax"])


def names_in(src: Graph, names: list[str]) -> list[str]:
    """names, all of which the calibration graph must hold."""
    missing = [t for t in names if t not in src.tensors]
    if missing:
        raise CuvilError(f"--stream calibration: tensor '{missing[0]}' of the model does not exist when it runs "
                         f"at the calibration samples' shapes; calibrate with samples of the input shape")
    return names


def calibration_graph(model, input_shapes, calibration, g: Graph, verify_each: bool = False) -> Graph | None:
    """--stream with --quantize: when the calibration samples are longer
    than one call (whole utterances [samples, 1, 49, 10] for a model run at
    [1, 1, 10] per call), the float graph at the samples' shapes, so the
    recurrent state's ranges cover what a stream accumulates. None when
    the samples have the input shapes."""
    from . import frontend, passes
    from .ptq import _read_file
    if calibration is None:
        return None
    data = _read_file(os.fspath(calibration)) if isinstance(calibration, (str, os.PathLike)) else calibration
    if isinstance(data, np.ndarray):
        data = {g.inputs[0]: data} if len(g.inputs) == 1 else {}
    shapes = dict(input_shapes or {})
    for name in g.inputs:
        x = np.asarray(data.get(name)) if name in data else None
        if x is not None and x.ndim == len(g.tensors[name].shape) + 1 and \
                tuple(x.shape[1:]) != tuple(g.tensors[name].shape):
            shapes[name] = tuple(int(d) for d in x.shape[1:])
    if shapes == dict(input_shapes or {}):
        return None
    import onnx
    src = frontend.onnx_loader.from_model(model, shapes) if isinstance(model, onnx.ModelProto) \
        else frontend.load(model, shapes)
    return passes.optimize(src, verify_each=verify_each)


def _outputs(g: Graph, qnames: set[str]):
    for n in g.nodes:
        if n.name in qnames and n.op_type in OPS and "_h_range" in n.attrs:
            for o in n.outputs[:2]:
                if o:
                    yield n, o


def set_ranges(g: Graph, qnames: set[str], ranges: dict) -> None:
    """Y and Y_h take the hidden state's range over every step (before the
    parameters of the tensors that share theirs are derived)."""
    for n, o in _outputs(g, qnames):
        if o in ranges:
            lo, hi = n.attrs["_h_range"]
            ranges[o] = (lo, hi, lo, hi)


def set_params(g: Graph, qnames: set[str], params: dict, report: dict, act_params) -> None:
    """Parameters for a Y_h no quantized node reads (it still gets a Q/DQ
    pair: the integer layer writes it as int8)."""
    for n, o in _outputs(g, qnames):
        if o not in params:
            lo, hi = n.attrs["_h_range"]
            params[o] = act_params(lo, hi)
            samples = next((e["samples"] for e in report.values() if "samples" in e), 0)
            report[o] = {"min": min(lo, 0.0), "max": max(hi, 0.0), "scale": float(params[o][0]),
                         "zero_point": int(params[o][1]), "method": "recurrent state", "samples": samples}


def consts(n: Node, g: Graph, b) -> list[Node]:
    """DequantizeLinear nodes for W and R (symmetric int8 per gate row); n
    reads their outputs, and is marked for the integer form."""
    from .ptq import WMAX
    added = []
    for i in (rnn.IW, rnn.IR):
        w = np.asarray(g.tensors[n.inputs[i]].data, np.float64)
        amax = np.abs(w).max(axis=(0, 2)) if w.size else np.zeros(w.shape[1])
        scale = np.where(amax > 0, amax / WMAX, 1.0).astype(np.float32)
        q = np.clip(np.rint(w / scale.astype(np.float64)[None, :, None]), -WMAX, WMAX).astype(np.int8)
        node, out = b.dq_const(n.inputs[i], q, scale, np.zeros(scale.size, np.int8), 1)
        added.append(node)
        n.inputs[i] = out
    n.attrs["_integer"] = True
    return added


def state_qdq(n: Node, g: Graph, b, params: dict) -> list[Node]:
    """Q/DQ pairs after Y_h (Y gets its pair from ptq._insert, as output 0)."""
    if n.op_type not in OPS or not n.attrs.get("_integer") or len(n.outputs) < 2:
        return []
    out = n.outputs[1]
    if not out or out not in params:
        return []
    pre = b.tensor(f"{out}_float", g.tensors[out].shape, "float32")
    n.outputs[1] = pre
    return b.qdq(pre, out, *params[out], base=out)
