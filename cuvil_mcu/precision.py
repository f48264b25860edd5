"""--precision: which float layers keep their weights as IEEE half.

  fp32 (default)             every float weight in float32
  fp16                       every float Conv/Gemm/MatMul weight as fp16
  int8,fp16:<names|types>    the model quantized to int8 (--calibration) except
                             the listed nodes (ONNX node names or op types,
                             comma-separated), which stay float with fp16 weights

The half weights are read by the float kernels (templates/kernels/fp16.c.j2:
float32 arithmetic on any core, fp16 arithmetic where the core has it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import CuvilError

WEIGHT_OPS = ("Conv", "Gemm", "MatMul")   # float ops whose constant weights can be half
# sim/run with fp16 layers: outputs vs the reference (which uses the
# half-rounded weights) where the core adds and multiplies in fp16: products
# and runs of 16 of them rounded to 11 significant bits.
FP16_ATOL = 2e-3
FP16_RTOL = 1e-2


@dataclass
class Precision:
    spec: str = "fp32"
    int8: bool = False
    fp16_all: bool = False
    fp16_select: list[str] = field(default_factory=list)   # node names or op types

    @property
    def any_fp16(self) -> bool:
        return self.fp16_all or bool(self.fp16_select)


def parse(spec: str | None) -> Precision:
    s = (spec or "fp32").strip()
    if s in ("fp32", "float32"):
        return Precision("fp32")
    if s in ("fp16", "float16"):
        return Precision("fp16", fp16_all=True)
    head, sep, tail = s.partition("fp16:")
    if sep and head.replace(" ", "") in ("int8,", "int8+"):
        items = [t.strip() for t in tail.replace("+", ",").split(",") if t.strip()]
        if items:
            return Precision(s, int8=True, fp16_select=items)
    if s == "int8":
        return Precision(s, int8=True)
    raise CuvilError(f"--precision '{spec}': choose fp32, fp16, int8 or int8,fp16:<node names or op types> "
                     f"(e.g. int8,fp16:Gemm or int8,fp16:conv1,fc)")


def _candidates(g) -> list:
    return [n for n in g.nodes if n.op_type in WEIGHT_OPS and len(n.inputs) > 1
            and any(i and g.tensors[i].is_const and g.tensors[i].dtype == "float32" for i in n.inputs[:2])]


def select(g, prec: Precision, names_only: bool = False) -> set[str]:
    """Names of the nodes of g that get half weights; an item that names no
    float weight layer is an error listing the ones there are."""
    cands = _candidates(g)
    if prec.fp16_all:
        return {n.name for n in cands}
    chosen = set()
    all_names = {n.name for n in g.nodes}
    for item in prec.fp16_select:
        hit = {n.name for n in cands if n.name == item or (not names_only and n.op_type == item)}
        if not hit and item not in all_names and not any(n.op_type == item for n in g.nodes):
            raise CuvilError(f"--precision: '{item}' is neither a node name nor an op type of this model; "
                             f"float layers with weights: {', '.join(n.name for n in cands[:20]) or 'none'}")
        chosen |= hit
    return chosen


def round_weights(g, names: set[str]) -> None:
    """The fp16 layers' weights rounded to half in the graph itself, so the
    reference (and every tool reading the graph) computes with the values
    the header stores."""
    import numpy as np
    for n in g.nodes:
        if n.name in names and len(n.inputs) > 1 and n.inputs[1]:
            t = g.tensors[n.inputs[1]]
            if t.is_const and t.dtype == "float32":
                w = np.asarray(t.data, np.float32)
                big = float(np.abs(w[np.isfinite(w)]).max(initial=0.0))
                if big > 65504.0:
                    raise CuvilError(f"--precision fp16: weight '{t.name}' of node '{n.name}' reaches {big:g}, "
                                     f"beyond fp16's 65504; keep this node in float32")
                t.data = w.astype(np.float16).astype(np.float32)


def keep_float(g, prec: Precision) -> set[str]:
    """Before quantization: the nodes the user keeps out of int8 (by name or type)."""
    out = set()
    for item in prec.fp16_select:
        out |= {n.name for n in g.nodes if n.name == item or n.op_type == item}
    return out
