"""Kernel variants by instruction set, chosen from the board definition.

An op's `emit` first offers the node to `isa.emit(kind, ...)`; each ISA
module present here (mve.py for Helium, dsp.py for the ARMv7E-M/ARMv8-M DSP
extension, neon.py for Cortex-A) may emit a specialised kernel and return
True, else the op emits its portable C kernel. Order: the most capable
feature the board has first. A variant must be bit-exact with the portable
kernel (the numpy reference is the oracle for both).

Variant modules export functions named `emit_<kind>(op, node, ins, outs, k,
params) -> bool`; kinds so far: "qconv" (QLinearConv/ConvInteger, params =
the op's `_params` result), "qgemm" (the QGemm/QLinearMatMul kernel call,
params = the keyword arguments of ops.qgemm.emit_qgemm), "qadd" (QLinearAdd in
fixed mode, params = dict dt, a, b, y, za, zb, zc, params (add_fixed_params),
lo, hi), "qavgpool" (QLinearAveragePool, params: see ops/qpool.py), "qconvt"
(cuvil.QConvTranspose, params = ops/convtranspose.QConvT), "qresize" (cuvil.QResize
bilinear: params = the qresize_s8 variant dict, which an ISA module may
extend; it returns False and the op renders it).
"""
from __future__ import annotations

import importlib
import importlib.util

ORDER = ("mve", "dsp", "neon")


def _module(feature: str):
    name = f"{__name__}.{feature}"
    if importlib.util.find_spec(name) is None:
        return None
    return importlib.import_module(name)


def emit(kind: str, op, node, ins, outs, k, params) -> bool:
    board = getattr(k, "target", None)
    if board is None:
        return False
    for feature in ORDER:
        if not board.has(feature):
            continue
        mod = _module(feature)
        fn = getattr(mod, f"emit_{kind}", None) if mod is not None else None
        if fn is not None and fn(op, node, ins, outs, k, params):
            return True
    return False
