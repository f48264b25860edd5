"""`--stream`: recurrent layers keep their state in the arena between calls,
so firmware can run the model one frame (or a few) at a time.

For each LSTM / GRU / RNN (float or integer form) the initial hidden state
(and the LSTM cell state) becomes a model input and the final state
(Y_h, Y_c) a model output planned on the same bytes (Graph.state; the
planner gives an aliased output its input's buffer). Each call then starts
from the state the previous call left: write the frame, call run, read
the output, repeat; `<name>_reset(arena)` puts the initial state back (the
model's own constant initial state, else zeros; for the integer form
h's zero point and a zero cell). The state input and output have the same
shape, dtype and quantization, so copying callers (`run_copy`, MicroPython,
Rust) may also carry the state themselves.

Only forward layers without sequence lengths can be streamed; a state a
model computes itself (not a constant, not an input), or one that other
nodes also read, is refused by name. The time length of one call is the
model input's (export with a dynamic time axis and set it with
--input-shape, e.g. mfcc=1,1,10 for one frame per call).
"""
from __future__ import annotations

import numpy as np

from ..errors import CuvilError
from ..ir import Graph, QuantParams, Tensor
from ..ops import rnn

FLOAT_OPS = ("LSTM", "GRU", "RNN")
INT_OPS = ("cuvil.QLSTM", "cuvil.QGRU", "cuvil.QRNN")


def _err(n, why: str) -> CuvilError:
    return CuvilError(f"--stream: node '{n.name}' ({n.op_type}) {why}")


def run(g: Graph) -> Graph:
    nodes = [n for n in g.nodes if n.op_type in FLOAT_OPS + INT_OPS]
    if not nodes:
        raise CuvilError("--stream: the model has no recurrent layer (LSTM, GRU, RNN) whose state could be kept")
    users = g.consumers()
    for n in nodes:
        ins = [g.tensors[i] if i else None for i in n.inputs]
        s = rnn.spec(n, ins)
        if s.direction != "forward":
            raise _err(n, f"runs direction={s.direction}; only forward layers carry their state from one call "
                          f"to the next")
        seq = ins[rnn.ISEQ] if len(ins) > rnn.ISEQ else None
        if seq is not None and s.lens is not None:
            raise _err(n, f"has sequence_lens '{seq.name}' shorter than the input; a streamed layer runs every "
                          f"frame it is given")
        integer = n.op_type in INT_OPS
        q = None
        if integer:
            from ..ops.qrnn import qparams
            q = qparams(n, ins, s)
        shape = tuple(rnn.out_shapes(s)[1])
        slots = [(rnn.IH0, 1, "h")] + ([(rnn.IC0, 2, "c")] if s.kind == "LSTM" else [])
        for i_in, j_out, what in slots:
            dtype = ("int8" if what == "h" else "int16") if integer else "float32"
            n.inputs += [""] * (i_in + 1 - len(n.inputs))
            src = g.tensors[n.inputs[i_in]] if n.inputs[i_in] else None
            if integer:
                zero = np.full(shape, q.h_zp if what == "h" else 0, np.int64)
                const = q.h0 if what == "h" else q.c0
                reset = zero if const is None else (np.swapaxes(const, 0, 1) if s.layout else const)
            else:
                reset = np.zeros(shape) if src is None or not src.is_const else src.data
            if src is not None and not src.is_const and src.name not in g.inputs:
                raise _err(n, f"computes its initial state '{src.name}' inside the model; a streamed state must "
                              f"be a constant, absent or a model input")
            if src is not None and not src.is_const:
                if len(users.get(src.name, [])) > 1:
                    raise _err(n, f"shares its initial state '{src.name}' with other nodes; a streamed state is "
                                  f"overwritten by the layer")
                name = src.name
            else:
                name = g.fresh_name(f"{n.name}.{what}")
                g.tensors[name] = Tensor(name, shape, dtype)
                g.inputs.append(name)
                n.inputs[i_in] = name
            n.outputs += [""] * (j_out + 1 - len(n.outputs))
            out = n.outputs[j_out]
            if not out:
                out = g.fresh_name(f"{n.name}.{what}_next")
                g.tensors[out] = Tensor(out, shape, dtype)
                n.outputs[j_out] = out
            if out not in g.outputs:
                g.outputs.append(out)
            if integer and what == "h":
                qp = QuantParams(np.asarray([n.attrs["h_scale"]], np.float32), np.asarray([q.h_zp], np.int8))
                g.tensors[name].quant = g.tensors[out].quant = qp
            g.state.append((name, out, np.ascontiguousarray(reset).astype(dtype)))
        pairs = [(g.inputs.index(i), g.outputs.index(o)) for i, o, _ in g.state[-len(slots):]]
        g.notes.append(f"--stream: the state of {n.op_type} '{n.name}' is input/output "
                       + ", ".join(f"{i}/{o}" for i, o in pairs) + " (the same bytes); the header's reset() call starts over")
    g.prune_tensors()
    return g
