"""Post-training int8 quantization of a float model (`gen --quantize int8`).

The float graph (after the float passes: BatchNorm folded, activations fused)
runs through the numpy reference on the calibration samples; every run-time
float tensor an int8 kernel will read or write gets a range:

- minmax: the smallest and largest value seen;
- percentile: |x| clipped at the given percentile of all |x| values seen
  (one threshold t for both signs: the range is [max(min, -t), min(max, t)]);
- entropy: the same clipping, with t the threshold whose clipped-and-
  quantized histogram of |x| is closest to the original in KL divergence
  (the search TensorRT's calibrator describes; implemented on a 2048-bin
  histogram below). Exact zeros are left out of that histogram: zero is
  exact at any scale, and a Relu output's spike of zeros in the first bin
  otherwise drives the search to needlessly small thresholds; and no cut
  may clip more than 1% of the values (see entropy_threshold).
Ranges always include 0, so zero is exact. The output of a kernel with a
fused Relu/Clip is recorded after the activation.

Then the graph gets QuantizeLinear/DequantizeLinear pairs in the form
onnxruntime's quantize_static writes, and the QDQ pass (passes/qdq.py) turns
them into integer ops:
- activations: asymmetric int8, scale = (max - min) / 255,
  zero point = round(-128 - min / scale);
- Conv weights: symmetric per output channel (axis 0), Gemm / MatMul constant
  B: symmetric per output column; range [-127, 127];
- biases: int32 at scale in_scale * w_scale[c], zero point 0;
- Softmax output: scale 1/256, zero point -128 (TFLM's convention);
- ops that only move data (Reshape, Flatten, MaxPool, Transpose, ...) and
  Resize / Upsample keep their input's parameters;
- ConvTranspose weights [C, M/group, k...]: symmetric per output channel
  (axis 1, as quantize_static does), bias int32 like Conv's.
MatMul + Add(constant bias) is made a Gemm first (one QGemm, int32 bias).
A node without an int8 form (or whose integer op is not available, or
refuses it) stays float32 between a DequantizeLinear and a QuantizeLinear:
mixed precision, listed in the graph notes. Model inputs and outputs stay
float32: a QuantizeLinear kernel at the input, DequantizeLinear at the output.
"""
from __future__ import annotations

import copy
import math
import os
import re

import numpy as np

from . import ops, passes, ptq_rnn, quant
from .errors import CuvilError, InputError, ShapeError, UnsupportedOpError
from .ir import Graph, Node, Tensor

METHODS = ("minmax", "percentile", "entropy")
BINS = 2048                      # histogram of |x| for percentile / entropy
MAX_CLIPPED = 0.01               # entropy: never clip more than 1% of the values
SOFTMAX_SCALE, SOFTMAX_ZP = 1.0 / 256.0, -128
QMIN, QMAX = -128, 127
WMAX = 127                       # symmetric weights use [-127, 127]

# float op -> the integer op the QDQ pass rewrites it into; a node is
# quantized only when that op is registered (mixed precision otherwise).
LUT_OPS = {"Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "Erf", "Exp", "Relu", "LeakyRelu", "Clip", "Gelu"}
PASS_THROUGH = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "MaxPool",
                "Slice", "Gather", "Pad"}
INT_OP = {"Conv": "QLinearConv", "Gemm": "com.microsoft.QGemm", "MatMul": "com.microsoft.QGemm",
          "Add": "com.microsoft.QLinearAdd", "Mul": "com.microsoft.QLinearMul",
          "AveragePool": "com.microsoft.QLinearAveragePool",
          "GlobalAveragePool": "com.microsoft.QLinearGlobalAveragePool",
          "Softmax": "com.microsoft.QLinearSoftmax", "Concat": "com.microsoft.QLinearConcat",
          "MaxPool": "cuvil.QMaxPool", "Sum": "cuvil.QSum", "LRN": "cuvil.QLRN",
          "BatchNormalization": "cuvil.QAffine",    # a per-channel affine map
          "ConvTranspose": "cuvil.QConvTranspose", "Resize": "cuvil.QResize", "Upsample": "cuvil.QResize",
          **{t: "cuvil.QLut" for t in LUT_OPS},
          **{t: t for t in PASS_THROUGH if t != "MaxPool"}}
# Ops whose fused Relu/Clip the QDQ pass folds into the integer kernel.
ABSORBS_ACT = {"Conv", "Gemm", "MatMul", "Add", "Mul", "AveragePool", "GlobalAveragePool", "Concat", "Sum",
               "BatchNormalization", "ConvTranspose"}
# Ops whose output keeps its input's parameters (they only move or
# interpolate values: a Resize's output lies within its input's range).
SHARES_PARAMS = PASS_THROUGH | {"Resize", "Upsample"}
INTEGER_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
               "MatMulInteger"}


# --------------------------------------------------------------------------- options and data

def check_options(quantize, calibration, calibrate: str, percentile: float) -> None:
    if quantize is None:
        if calibration is not None:
            raise CuvilError("--calibration is only used with --quantize int8")
        return
    if quantize != "int8":
        raise CuvilError(f"--quantize '{quantize}': only int8 is supported")
    if calibration is None:
        raise CuvilError("--quantize int8 needs --calibration FILE.npz: sample inputs keyed by input name "
                         "(np.savez('calib.npz', input=array of shape [samples, ...]))")
    if calibrate not in METHODS:
        raise CuvilError(f"--calibrate '{calibrate}': choose one of {', '.join(METHODS)}")
    try:
        p = float(percentile)
    except (TypeError, ValueError):
        raise CuvilError(f"--percentile '{percentile}' is not a number") from None
    if not (0.0 < p <= 100.0):
        raise CuvilError(f"--percentile {percentile}: must be in (0, 100], e.g. 99.99")


def _read_file(path: str) -> dict[str, np.ndarray] | np.ndarray:
    what = f"--calibration {path}"
    if not os.path.exists(path):
        raise InputError(f"{what}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{what}: is a folder, expected an .npz file")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as e:
        raise InputError(f"{what}: cannot read it ({e.strerror or e})") from None
    if not (magic.startswith(b"PK\x03\x04") or magic.startswith(b"PK\x05\x06") or magic == b"\x93NUMPY"):
        raise InputError(f"{what}: not an .npz file (write one with numpy.savez(path, <input name>=samples))")
    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):
            return data
        out = {}
        for k in data.files:
            out[k] = data[k]
        return out
    except Exception as e:  # truncated zip, object arrays (pickles), bad headers
        why = " ".join(str(e).split())  # one line, whatever the exception says
        raise InputError(f"{what}: cannot read it as .npz ({type(e).__name__}: {why})") from None


def load_calibration(src, g: Graph) -> tuple[dict[str, np.ndarray], int]:
    """Per model input an array (samples, *input_shape) in the input's dtype,
    and the number of samples. `src`: path to an .npz keyed by input name (an
    .npy also works for a one-input model) or such a dict."""
    if isinstance(src, (str, os.PathLike)):
        where = f"--calibration {os.fspath(src)}"
        data = _read_file(os.fspath(src))
    elif isinstance(src, dict):
        where, data = "calibration data", dict(src)
    else:
        raise CuvilError(f"calibration must be an .npz path or a dict of arrays by input name, "
                         f"not {type(src).__name__}")
    if isinstance(data, np.ndarray):
        if len(g.inputs) != 1:
            raise InputError(f"{where}: one array given, the model has {len(g.inputs)} inputs {g.inputs}; "
                             f"use an .npz keyed by input name")
        data = {g.inputs[0]: data}
    missing = [n for n in g.inputs if n not in data]
    if missing:
        raise InputError(f"{where}: missing input(s) {missing}; it holds {sorted(data) or 'no arrays'}")
    out, counts = {}, {}
    for name in g.inputs:
        t = g.tensors[name]
        x = np.asarray(data[name])
        if x.dtype.kind not in "biuf" or (t.dtype != "float32" and x.dtype.kind == "f"):
            raise InputError(f"{where}: input '{name}' holds {x.dtype} values, which cannot be used as "
                             f"{t.dtype}")
        shape = tuple(t.shape)
        if x.ndim == len(shape) + 1 and tuple(x.shape[1:]) == shape:
            pass  # samples stacked on a new leading axis
        elif shape and shape[0] == 1 and tuple(x.shape[1:]) == shape[1:] and x.ndim == len(shape):
            x = x.reshape((x.shape[0],) + shape)  # samples along the batch axis
        elif tuple(x.shape) == shape:
            x = x[None]
        else:
            alt = f" or [samples, {', '.join(map(str, shape[1:]))}]" if shape and shape[0] == 1 else ""
            raise InputError(f"{where}: input '{name}' has shape {list(x.shape)}; expected "
                             f"[samples, {', '.join(map(str, shape))}]{alt}")
        if x.shape[0] == 0:
            raise InputError(f"{where}: input '{name}' holds 0 samples")
        if x.dtype.kind == "f":
            bad = ~np.isfinite(x)
            if bad.any():
                first = int(np.argwhere(bad.reshape(x.shape[0], -1).any(axis=1))[0, 0])
                raise InputError(f"{where}: input '{name}' has {int(bad.sum())} NaN/inf value(s) "
                                 f"(first in sample {first})")
        if t.dtype != "float32":
            info = np.iinfo(t.dtype) if np.dtype(t.dtype).kind in "iu" else None
            if info is not None and (x.min() < info.min or x.max() > info.max):
                raise InputError(f"{where}: input '{name}' has values outside the {t.dtype} range")
        out[name] = np.ascontiguousarray(x.astype(t.dtype))
        counts[name] = x.shape[0]
    if len(set(counts.values())) > 1:
        raise InputError(f"{where}: inputs hold different sample counts {counts}")
    return out, next(iter(counts.values()))


# --------------------------------------------------------------------------- which nodes

def _is_float_rt(g: Graph, name: str) -> bool:
    t = g.tensors.get(name) if name else None
    return t is not None and not t.is_const and t.dtype == "float32"


def _const(g: Graph, name: str) -> np.ndarray | None:
    t = g.tensors.get(name) if name else None
    return t.data if t is not None and t.is_const else None


def _data_inputs(n: Node) -> list[int]:
    if n.op_type in ("Concat", "Sum"):
        return list(range(len(n.inputs)))
    if n.op_type in ("Add", "Mul", "MatMul"):
        return [0, 1]
    return [0]


def _quantizable(n: Node, g: Graph, reg) -> bool:
    """Whether the QDQ pass will turn this node into an integer op, given the
    pairs this module inserts."""
    t = n.op_type
    if t in ptq_rnn.OPS:   # LSTM / GRU / RNN: several outputs, internal state
        return ptq_rnn.quantizable(n, g, reg)
    target = INT_OP.get(t)
    if target is None or target not in reg or len([o for o in n.outputs if o]) != 1 or not n.outputs[0]:
        return False
    if g.tensors[n.outputs[0]].dtype != "float32":
        return False
    if n.act is not None and t not in ABSORBS_ACT and not (t in PASS_THROUGH and "cuvil.QLut" in reg):
        return False
    for i in _data_inputs(n):
        name = n.input(i)
        if not name:
            return False
        if _is_float_rt(g, name):
            continue
        c = _const(g, name)
        # a constant operand of Add/Mul/Concat or a constant MatMul B is quantized here too
        if c is None or c.dtype != np.float32 or not (t in ("Add", "Mul", "Concat", "Sum") or (t == "MatMul" and i == 1)):
            return False
    if t in ("Add", "Mul", "Concat", "Sum") and not any(_is_float_rt(g, n.input(i)) for i in _data_inputs(n)):
        return False
    if t == "Conv":
        w = _const(g, n.input(1))
        b = _const(g, n.input(2))
        return w is not None and w.dtype == np.float32 and (not n.input(2) or (b is not None and b.size == w.shape[0]))
    if t == "ConvTranspose":
        w = _const(g, n.input(1))
        b = _const(g, n.input(2))
        return (w is not None and w.dtype == np.float32 and w.ndim >= 3
                and (not n.input(2) or (b is not None and b.size == w.shape[1] * int(n.attr("group", 1)))))
    if t in ("Resize", "Upsample"):
        from .ops import resize
        return resize.int8_attrs(n, [g.tensors[i] if i else None for i in n.inputs]) is not None
    if t == "Gemm":
        w = _const(g, n.input(1))
        if w is None or w.ndim != 2 or w.dtype != np.float32 or int(n.attr("transA", 0)):
            return False
        ncols = w.shape[0] if int(n.attr("transB", 0)) else w.shape[1]
        c = _const(g, n.input(2))
        return not n.input(2) or (c is not None and c.size in (1, ncols))
    if t == "MatMul":
        b = n.input(1)
        if _const(g, b) is None and not _is_float_rt(g, b):
            return False
        if _const(g, b) is None or not (len(g.tensors[b].shape) == 2 and len(g.tensors[n.inputs[0]].shape) == 2):
            return "QLinearMatMul" in reg
        return True
    if t == "Pad":
        if g.opset < 11 or n.attr("mode", "constant") not in ("constant", b"constant"):
            return False
        v = _const(g, n.input(2))
        if n.input(2) and (v is None or float(np.asarray(v).reshape(-1)[0]) != 0.0):
            return False
        return float(n.attr("value", 0.0)) == 0.0
    if t == "Clip":
        return all(not n.input(i) or _const(g, n.input(i)) is not None for i in (1, 2))
    if t == "BatchNormalization":
        return all(_const(g, n.input(i)) is not None for i in range(1, 5))
    return True


def _matmul_add_to_gemm(g: Graph) -> None:
    """MatMul(2-D A, constant 2-D B) -> Add(constant bias over the columns)
    is a Gemm: rewritten in float (same values), so the layer quantizes as
    one QGemm with a per-column int32 bias instead of two kernels and an
    int8 bias."""
    cons = g.consumers()
    drop = set()
    for n in g.nodes:
        if n.op_type != "MatMul" or n.act is not None or n.outputs[0] in g.outputs:
            continue
        b = _const(g, n.input(1))
        if b is None or b.ndim != 2 or b.dtype != np.float32 or len(g.tensors[n.inputs[0]].shape) != 2:
            continue
        users = cons.get(n.outputs[0], [])
        if len(users) != 1 or users[0].op_type != "Add":
            continue
        add = users[0]
        other = add.inputs[1] if add.inputs[0] == n.outputs[0] else add.inputs[0]
        c = _const(g, other)
        if other == n.outputs[0] or c is None or c.dtype != np.float32 or c.ndim > 2 or \
                (c.ndim == 2 and c.shape[0] != 1) or c.size not in (1, b.shape[1]):
            continue
        cname = g.add_const(f"{other}_bias", np.broadcast_to(c.reshape(-1), (b.shape[1],)).astype(np.float32))
        n.op_type, n.inputs, n.attrs = "Gemm", [n.inputs[0], n.inputs[1], cname], {**n.attrs}
        n.outputs, n.act = list(add.outputs), add.act
        n.fused += [f"Add '{add.name}'"] + add.fused
        drop.add(add.name)
    if drop:
        g.nodes = [n for n in g.nodes if n.name not in drop]
        g.prune_tensors()


# --------------------------------------------------------------------------- calibration

def _run_all(g: Graph, feeds: dict[str, np.ndarray], want: set[str]) -> dict[str, np.ndarray]:
    """One float inference with the reference; the values of `want`."""
    values: dict[str, np.ndarray] = {k: t.data for k, t in g.tensors.items() if t.is_const}
    values.update(feeds)
    for n in g.nodes:
        op = ops.get(n.op_type)
        ins = [g.tensors[i] if i else None for i in n.inputs]
        with np.errstate(all="ignore"):
            outs = op.reference(n, ins, *[values[i] if i else None for i in n.inputs])
        for name, v in zip(n.outputs, outs):
            if name:
                t = g.tensors[name]
                values[name] = np.asarray(v).astype(t.dtype, copy=False).reshape(t.shape)
    return {k: values[k] for k in want}


def _observe(g: Graph, data: dict[str, np.ndarray], count: int, names: list[str], method: str):
    """Per tensor: (min, max, histogram of |x| over [0, absmax] or None)."""
    want = set(names)
    lo = {k: math.inf for k in names}
    hi = {k: -math.inf for k in names}
    feeds = lambda s: {k: v[s] for k, v in data.items()}  # noqa: E731
    bad = {}
    for s in range(count):
        vals = _run_all(g, feeds(s), want)
        for k in names:
            v = vals[k]
            if v.size == 0:
                continue
            if not np.all(np.isfinite(v)) and k not in bad:
                bad[k] = s
                continue
            lo[k] = min(lo[k], float(v.min()))
            hi[k] = max(hi[k], float(v.max()))
    if bad:
        k, s = next(iter(bad.items()))
        raise InputError(f"calibration: the float model computes NaN/inf in tensor '{k}' on sample {s}; "
                         f"check the calibration data's scale")
    hists = {}
    if method != "minmax":
        amax = {k: max(abs(lo[k]), abs(hi[k])) if lo[k] <= hi[k] else 0.0 for k in names}
        hists = {k: np.zeros(BINS, np.int64) for k in names}
        for s in range(count):
            vals = _run_all(g, feeds(s), want)
            for k in names:
                if amax[k] > 0:
                    v = np.abs(vals[k]).reshape(-1)
                    if method == "entropy":
                        # exact zeros (a Relu's dead half, padding) are exact at any
                        # scale; left in, their spike in bin 0 decides the search
                        v = v[v != 0]
                    hists[k] += np.histogram(v, bins=BINS, range=(0.0, amax[k]))[0]
    return lo, hi, hists


def percentile_threshold(hist: np.ndarray, absmax: float, percentile: float) -> float:
    """Smallest bin edge t with at least `percentile` % of the counted |x| <= t."""
    total = hist.sum()
    if total == 0 or absmax == 0:
        return absmax
    cdf = np.cumsum(hist) / total
    idx = int(np.searchsorted(cdf, percentile / 100.0 - 1e-12))
    return absmax * min(idx + 1, len(hist)) / len(hist)


def _smooth(counts: np.ndarray, eps: float = 1e-4) -> np.ndarray | None:
    """Move eps of mass (in counts, not probabilities: a bin holding one value
    stays positive) onto the empty bins so KL(p || q) stays finite; None when
    that is impossible."""
    zeros = counts == 0
    nz = counts.size - int(zeros.sum())
    if nz == 0:
        return None
    eps1 = eps * float(zeros.sum()) / nz
    out = counts + eps * zeros - eps1 * ~zeros
    return out if np.all(out > 0) else None


def entropy_threshold(hist: np.ndarray, absmax: float, levels: int, max_clipped: float = MAX_CLIPPED) -> float:
    """Threshold t on |x| minimizing KL(P || Q): P is the histogram cut at
    bin i with everything above folded into bin i-1; Q is the first i bins
    merged into `levels` quantization levels and spread back evenly over
    the bins that hold values.

    Cuts that clip more than `max_clipped` of the values are not candidates:
    P only sees clipped values as mass moved into its last bin, not how far
    they moved, so a distribution with no mass near zero (a Sigmoid's
    outputs in [0.5, 1)) would otherwise be cut at its low end with KL 0."""
    n = len(hist)
    h = hist.astype(np.float64)
    if h.sum() == 0 or absmax == 0:
        return absmax
    tail = np.concatenate([np.cumsum(h[::-1])[::-1], [0.0]])  # tail[i] = sum(h[i:])
    best_kl, best_i = math.inf, n
    for i in range(levels, n + 1):
        if tail[i] > max_clipped * tail[0]:
            continue
        p = h[:i].copy()
        p[i - 1] += tail[i]
        nonzero = p > 0
        bounds = (np.arange(levels + 1) * i) // levels
        sums = np.add.reduceat(h[:i], bounds[:-1])
        cnts = np.add.reduceat(nonzero.astype(np.float64), bounds[:-1])
        per = np.divide(sums, cnts, out=np.zeros_like(sums), where=cnts > 0)
        q = np.repeat(per, np.diff(bounds)) * nonzero
        if q.sum() == 0:
            continue
        ps, qs = _smooth(p), _smooth(q)
        if ps is None or qs is None:
            continue
        ps, qs = ps / ps.sum(), qs / qs.sum()
        m = ps > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = float(np.sum(ps[m] * np.log(ps[m] / qs[m])))
        if not math.isfinite(kl):
            continue
        if kl < best_kl:
            best_kl, best_i = kl, i
    return absmax * best_i / n


def act_params(lo: float, hi: float) -> tuple[float, int]:
    """Asymmetric int8 scale and zero point of the range [lo, hi] (0 inside)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = float(np.float32((hi - lo) / (QMAX - QMIN)))
    if not scale > 0 or not math.isfinite(scale):
        return 1.0, 0  # an all-zero tensor: any scale represents it
    zp = int(np.clip(np.rint(QMIN - lo / scale), QMIN, QMAX))
    return scale, zp


# --------------------------------------------------------------------------- QDQ insertion

class _Builder:
    def __init__(self, g: Graph):
        self.g = g
        self.names = {n.name for n in g.nodes}

    def node_name(self, base: str) -> str:
        name, k = base, 0
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def tensor(self, base: str, shape, dtype: str) -> str:
        name = self.g.fresh_name(base)
        self.g.tensors[name] = Tensor(name, tuple(shape), dtype)
        return name

    def qparams(self, base: str, scale, zp, zdtype: str) -> tuple[str, str]:
        s = self.g.add_const(f"{base}_scale", np.asarray(scale, np.float32))
        z = self.g.add_const(f"{base}_zero_point", np.asarray(zp).astype(zdtype))
        return s, z

    def dq_const(self, base: str, q: np.ndarray, scale, zp, axis: int | None) -> tuple[Node, str]:
        """DequantizeLinear of a constant; its output is constant as the
        loader would have made it."""
        g = self.g
        qn = g.add_const(f"{base}_quantized", q)
        s, z = self.qparams(base, scale, zp, q.dtype.name)
        out = g.fresh_name(f"{base}_dequantized")
        sc = np.asarray(scale, np.float32)
        zz = np.asarray(zp, np.int64)
        if axis is not None and sc.size > 1:
            shape = [1] * q.ndim
            shape[axis] = sc.size
            sc, zz = sc.reshape(shape), zz.reshape(shape)
        g.tensors[out] = Tensor(out, q.shape, "float32", quant.dequantize(q, sc, zz))
        attrs = {"axis": int(axis)} if axis is not None else {}
        return Node(self.node_name(f"{base}_DequantizeLinear"), "DequantizeLinear", [qn, s, z], [out], attrs,
                    opset=g.opset), out

    def qdq(self, src: str, dst: str, scale: float, zp: int, base: str) -> list[Node]:
        """QuantizeLinear src -> int8 -> DequantizeLinear dst."""
        g = self.g
        s, z = self.qparams(base, scale, zp, "int8")
        q = self.tensor(f"{base}_quantized", g.tensors[src].shape, "int8")
        return [Node(self.node_name(f"{base}_QuantizeLinear"), "QuantizeLinear", [src, s, z], [q], {}, opset=g.opset),
                Node(self.node_name(f"{base}_DequantizeLinear"), "DequantizeLinear", [q, s, z], [dst], {},
                     opset=g.opset)]


def _per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights along `axis`: (q, scale per channel)."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.max(np.abs(w.astype(np.float64)), axis=other) if w.size else np.zeros(w.shape[axis])
    scale = np.where(amax > 0, amax / WMAX, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = scale.size
    q = np.clip(np.rint(w.astype(np.float64) / scale.reshape(shape).astype(np.float64)), -WMAX, WMAX)
    return q.astype(np.int8), scale


def _per_tensor_sym(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    amax = float(np.max(np.abs(w))) if w.size else 0.0
    scale = np.float32(amax / WMAX if amax > 0 else 1.0)
    q = np.clip(np.rint(w.astype(np.float64) / np.float64(scale)), -WMAX, WMAX).astype(np.int8)
    return q, np.asarray(scale, np.float32)


def _bias_int32(b: np.ndarray, in_scale: float, w_scale: np.ndarray, channels: int):
    scale = (np.float32(in_scale) * np.asarray(w_scale, np.float32).reshape(-1)).astype(np.float32)
    scale = np.broadcast_to(scale, (channels,)).copy()
    real = np.broadcast_to(np.asarray(b, np.float64).reshape(-1), (channels,))
    q = np.clip(np.rint(real / scale.astype(np.float64)), quant.INT32_MIN, quant.INT32_MAX).astype(np.int32)
    return q, scale


def _act_node(n: Node, src: str, dst: str, b: _Builder) -> Node:
    """The fused clamp of n as its own Relu/Clip node (the QDQ pass folds it
    back into the integer kernel, or makes it a lookup table)."""
    lo, hi = n.act
    fused = n.fused[-1] if n.fused else ""
    m = re.fullmatch(r"(?:Relu|Clip) '(.*)'", fused)
    name = b.node_name(m.group(1) if m else f"{n.name}_act")
    if m:
        n.fused.pop()
    if lo == 0.0 and hi >= 3.4e38:
        return Node(name, "Relu", [src], [dst], {}, opset=b.g.opset)
    if b.g.opset >= 11:
        ins = [src, b.g.add_const(f"{name}_min", np.asarray(lo, np.float32)) if math.isfinite(lo) else "",
               b.g.add_const(f"{name}_max", np.asarray(hi, np.float32)) if math.isfinite(hi) else ""]
        while ins[-1] == "":
            ins.pop()
        return Node(name, "Clip", ins, [dst], {}, opset=b.g.opset)
    return Node(name, "Clip", [src], [dst], {"min": float(lo), "max": float(hi)}, opset=b.g.opset)


def _insert(g: Graph, quantized: set[str], params: dict[str, tuple[float, int]]) -> None:
    b = _Builder(g)
    new: list[Node] = []
    renamed: dict[str, str] = {}
    for name in g.inputs:
        if name in params:
            dq = g.fresh_name(f"{name}_dequantized")
            g.tensors[dq] = Tensor(dq, g.tensors[name].shape, "float32")
            new += b.qdq(name, dq, *params[name], base=name)
            renamed[name] = dq
    for n in g.nodes:
        src0 = n.inputs[0] if n.inputs else ""
        n.inputs = [renamed.get(i, i) for i in n.inputs]
        if n.name in quantized:
            new += ptq_rnn.consts(n, g, b) if n.op_type in ptq_rnn.OPS else \
                _quantize_consts(n, g, b, params[src0][0] if src0 in params else None)
        new.append(n)
        new += ptq_rnn.state_qdq(n, g, b, params)
        out = n.outputs[0] if n.outputs else ""
        if not out or out not in params:
            continue
        shape = g.tensors[out].shape
        pre = b.tensor(f"{out}_float", shape, "float32")
        n.outputs[0] = pre
        if n.name in quantized and n.act is not None:
            if n.op_type in ABSORBS_ACT:
                act_out = b.tensor(f"{out}_act", shape, "float32")
                new.append(_act_node(n, pre, act_out, b))
                pre = act_out
            else:  # a pass-through op (MaxPool): move data, then a lookup table for the clamp
                mid = b.tensor(f"{out}_moved", shape, "float32")
                new += b.qdq(pre, mid, *params[src0], base=f"{out}_moved")
                act_out = b.tensor(f"{out}_act", shape, "float32")
                new.append(_act_node(n, mid, act_out, b))
                pre = act_out
            n.act = None
        new += b.qdq(pre, out, *params[out], base=out)
    g.nodes = new


def _quantize_consts(n: Node, g: Graph, b: _Builder, in_scale: float | None) -> list[Node]:
    """DequantizeLinear nodes for n's constant float inputs (weights, bias,
    constant operands); n reads their outputs."""
    t = n.op_type
    added = []

    def use(i, node_out):
        node, out = node_out
        added.append(node)
        n.inputs[i] = out

    if t == "Conv":
        w = _const(g, n.input(1))
        q, ws = _per_channel(w, 0)
        use(1, b.dq_const(n.input(1), q, ws, np.zeros(ws.size, np.int8), 0))
        if n.input(2):
            bq, bs = _bias_int32(_const(g, n.input(2)), in_scale, ws, w.shape[0])
            use(2, b.dq_const(n.input(2), bq, bs, np.zeros(bs.size, np.int32), 0))
    elif t == "ConvTranspose":   # [C, M/group, k...]: per output channel along axis 1 (quantize_static's axis)
        w = _const(g, n.input(1))
        q, ws = _per_channel(w, 1)
        use(1, b.dq_const(n.input(1), q, ws, np.zeros(ws.size, np.int8), 1))
        if n.input(2):
            m = w.shape[1] * int(n.attr("group", 1))
            bq, bs = _bias_int32(_const(g, n.input(2)), in_scale, np.tile(ws, m // w.shape[1]), m)
            use(2, b.dq_const(n.input(2), bq, bs, np.zeros(bs.size, np.int32), 0))
    elif t == "Gemm":
        alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
        w = _const(g, n.input(1)).astype(np.float32) * np.float32(alpha)
        axis = 0 if int(n.attr("transB", 0)) else 1
        q, ws = _per_channel(w, axis)
        use(1, b.dq_const(n.input(1), q, ws, np.zeros(ws.size, np.int8), axis))
        n.attrs["alpha"] = 1.0
        if n.input(2):
            c = _const(g, n.input(2)).astype(np.float32) * np.float32(beta)
            bq, bs = _bias_int32(c, in_scale, ws, w.shape[axis])
            use(2, b.dq_const(n.input(2), bq, bs, np.zeros(bs.size, np.int32), 0))
        n.attrs["beta"] = 1.0
    elif t == "MatMul" and _const(g, n.input(1)) is not None:
        w = _const(g, n.input(1))
        if w.ndim == 2 and len(g.tensors[n.inputs[0]].shape) == 2:
            q, ws = _per_channel(w, 1)
            use(1, b.dq_const(n.input(1), q, ws, np.zeros(ws.size, np.int8), 1))
        else:
            q, ws = _per_tensor_sym(w)
            use(1, b.dq_const(n.input(1), q, ws, np.zeros((), np.int8), None))
    elif t in ("Add", "Mul", "Concat", "Sum"):
        for i in _data_inputs(n):
            c = _const(g, n.input(i))
            if c is None:
                continue
            s, z = act_params(float(c.min()) if c.size else 0.0, float(c.max()) if c.size else 0.0)
            q = quant.quantize(c, np.float32(s), z, "int8")
            use(i, b.dq_const(n.input(i), q, np.float32(s), np.int8(z), None))
    return added


# --------------------------------------------------------------------------- the pass

def _integer_or_q(n: Node) -> bool:
    t = n.op_type
    return t in INTEGER_OPS or t.startswith("com.microsoft.Q") or t.startswith("cuvil.Q")


def quantize_graph(g: Graph, quantize: str | None, calibration, calibrate: str = "minmax",
                   percentile: float = 99.99, verify_each: bool = False,
                   keep_float: set[str] | frozenset = frozenset(),
                   calib_graph: Graph | None = None) -> tuple[Graph, dict | None]:
    """Calibrate the float graph `g` (already through passes.optimize) and
    return (the int8 graph, through passes.optimize again; the calibration
    report: tensor -> {min, max, scale, zero_point, method, ...}).
    calib_graph: the same model at the calibration samples' shapes, run
    instead of g to observe the ranges (--stream, see ptq_rnn.py)."""
    check_options(quantize, calibration, calibrate, percentile)
    if quantize is None:
        return g, None
    pre = next((n for n in g.nodes if _integer_or_q(n)), None)
    if pre is not None:
        raise CuvilError(f"--quantize int8: the model is already quantized (node '{pre.name}' is "
                         f"{pre.op_type}); compile it without --quantize")
    src = g if calib_graph is None else calib_graph
    data, count = load_calibration(calibration, src)
    _matmul_add_to_gemm(g)
    if src is not g:
        _matmul_add_to_gemm(src)
    reg = ops.registry()
    # keep_float: nodes the user keeps in float (--precision int8,fp16:<nodes>)
    quantized = [n for n in g.nodes if _quantizable(n, g, reg) and n.name not in keep_float]
    if not any(n.op_type not in PASS_THROUGH for n in quantized):
        raise CuvilError("--quantize int8: no node of this model has an int8 form here "
                         "(Conv, Gemm, MatMul, Add, Mul, pooling, Softmax, lookup-table activations)")
    qnames = {n.name for n in quantized}
    lo, hi, hists = _observe(src, data, count, ptq_rnn.names_in(src, _tensors(g, qnames)), calibrate)
    ptq_rnn.observe(src, qnames, data, count, _run_all, g)
    ranges = {}
    for name in lo:
        obs_lo, obs_hi = (lo[name], hi[name]) if lo[name] <= hi[name] else (0.0, 0.0)
        r_lo, r_hi = min(obs_lo, 0.0), max(obs_hi, 0.0)
        if calibrate != "minmax":
            amax = max(-r_lo, r_hi)
            if calibrate == "percentile":
                th = percentile_threshold(hists[name], amax, float(percentile))
            else:
                th = entropy_threshold(hists[name], amax, 255 if r_lo == 0.0 or r_hi == 0.0 else 128)
            r_lo, r_hi = max(r_lo, -th), min(r_hi, th)
        ranges[name] = (obs_lo, obs_hi, r_lo, r_hi)
    ptq_rnn.set_ranges(g, qnames, ranges)

    # An integer op may refuse an attribute value its float op accepts: that
    # node then stays float, and the rest is quantized again without it.
    float_graph = g
    for _ in range(len(qnames) + 1):
        g = copy.deepcopy(float_graph)
        params, report = _params(g, qnames, ranges, calibrate, count)
        ptq_rnn.set_params(g, qnames, params, report, act_params)
        _insert(g, qnames, params)
        g = passes.optimize(g, verify_each=verify_each)
        refused = _refused(g, qnames)
        if refused is None:
            break
        qnames.discard(refused)
    return g, report  # compiler._note_mixed_precision lists the nodes left in float


def _tensors(g: Graph, qnames: set[str]) -> list[str]:
    """Run-time float tensors an int8 kernel reads or writes, in execution order."""
    order: list[str] = []
    for n in g.nodes:
        if n.name not in qnames:
            continue
        for nm in [n.input(i) for i in _data_inputs(n)] + [n.outputs[0]]:
            if _is_float_rt(g, nm) and nm not in order:
                order.append(nm)
    pos = {nm: i for i, nm in enumerate(g.inputs)}
    pos.update({o: len(g.inputs) + k for k, n in enumerate(g.nodes) for o in n.outputs if o})
    return sorted(order, key=lambda nm: pos[nm])


def _params(g: Graph, qnames: set[str], ranges: dict, calibrate: str, count: int):
    """(tensor -> (scale, zero point), the report) for the tensors of the
    quantized nodes `qnames`."""
    producers = g.producers()
    params: dict[str, tuple[float, int]] = {}
    report: dict[str, dict] = {}
    for name in _tensors(g, qnames):
        p = producers.get(name)
        obs_lo, obs_hi, r_lo, r_hi = ranges[name]
        entry = {"observed_min": obs_lo, "observed_max": obs_hi, "samples": count}
        if p is not None and p.name in qnames and p.op_type in SHARES_PARAMS and p.act is None:
            src = p.inputs[0]
            params[name] = params[src]
            entry.update(min=report[src]["min"], max=report[src]["max"], method="shared", source=src)
        elif p is not None and p.name in qnames and p.op_type == "Softmax":
            params[name] = (SOFTMAX_SCALE, SOFTMAX_ZP)
            entry.update(min=0.0, max=SOFTMAX_SCALE * (QMAX - SOFTMAX_ZP), method="fixed")
        else:
            params[name] = act_params(r_lo, r_hi)
            entry.update(min=r_lo, max=r_hi, method=calibrate)
        entry.update(scale=float(params[name][0]), zero_point=int(params[name][1]))
        report[name] = {k: entry[k] for k in ("min", "max", "scale", "zero_point", "method", "source",
                                               "observed_min", "observed_max", "samples") if k in entry}
    return params, report


def _refused(g: Graph, qnames: set[str]) -> str | None:
    """Name of a quantized node whose integer op rejects it (check / shape
    rule), else None. Errors on other nodes propagate."""
    for n in g.nodes:
        if n.name not in qnames or not _integer_or_q(n):
            continue
        op = ops.get(n.op_type)
        ins = [g.tensors[i] if i else None for i in n.inputs]
        try:
            op.check(n, ins)
            op.infer(n, ins)
        except (UnsupportedOpError, ShapeError):
            return n.name
    return None


def summary_line(report: dict) -> str:
    """One line for gen's output."""
    if not report:
        return "int8     no calibrated tensors"
    methods = sorted({e["method"] for e in report.values() if e["method"] not in ("shared", "fixed")})
    samples = next(iter(report.values()))["samples"]
    widest = max(report.items(), key=lambda kv: kv[1]["max"] - kv[1]["min"])
    return (f"int8     {'/'.join(methods) or 'fixed'} calibration on {samples} sample(s): {len(report)} tensors; "
            f"widest '{widest[0]}' [{widest[1]['min']:.4g}, {widest[1]['max']:.4g}]")
