"""Graph -> graph passes, in the order they run.

Each pass is a module with `run(graph) -> graph`. `optimize` runs them top to
bottom; with verify=True (the tests) the IR verifier runs after each one.
"""
from __future__ import annotations

from ..ir import Graph, verify
from . import (cancel_transposes, dead_nodes, fold_affine, fold_constants, fold_shuffle, fuse_activation,
               fuse_pad, io_quant, layout, qdq, rnn_io, stamp_requant)

PIPELINE = [
    qdq,                 # DequantizeLinear -> op -> QuantizeLinear into integer ops
    fold_constants,      # evaluate nodes whose inputs are all constant
    dead_nodes,          # drop what no output depends on
    rnn_io,              # batch_first transposes and last-step reads around recurrent layers
    fold_affine,         # BatchNormalization, per-channel Mul/Add into the Conv/Gemm/MatMul next to them
    fold_constants,      # the folded weights are constant again
    fuse_pad,            # constant Pad into the Conv/Pool that reads it
    cancel_transposes,   # Transpose pairs that undo each other
    fuse_activation,     # Relu/Clip into the producing kernel
    fold_shuffle,        # channel shuffles (Reshape -> Transpose -> Reshape) into the convolutions around
    layout,              # integer spatial ops to NHWC, transposes cancelled
    fold_shuffle,        # (NHWC ones, and those the layout pass brought next to a convolution)
    dead_nodes,
    stamp_requant,       # integer ops record the graph's requantization mode
    io_quant,            # scale / zero point of the inputs and outputs, for the header
]


# After these (and quantization, --io, --stream), compiler.compile_model runs
# tile.run(graph, budget, evaluate): patch-based execution needs the kernels'
# scratch and the memory plan of each candidate, so it takes the compiler's
# planning as `evaluate` (gen --no-patch leaves it out).

# -O0: only what the rest of the compiler needs to be correct: fold-only ops
# (Shape, Range, ...) evaluated, integer spatial ops in NHWC (their kernels'
# layout), requantization mode and I/O quantization recorded. A QDQ model
# then runs literally: DequantizeLinear, the float op, QuantizeLinear.
REQUIRED = [fold_constants, dead_nodes, layout, dead_nodes, stamp_requant, io_quant]


def optimize(g: Graph, verify_each: bool = False, level: int = 3) -> Graph:
    """level (gen -O): 0 runs REQUIRED, 1 and up the whole PIPELINE (levels
    2 and 3 differ in kernel choice, compiler.OPT_LEVELS)."""
    if verify_each:
        verify(g)
    for p in (PIPELINE if level >= 1 else REQUIRED):
        g = p.run(g)
        if verify_each:
            verify(g)
    return g
