"""`cuvil-mcu validate`: the generated C on a whole dataset, against a reference.

    r = validate.run(compiled, "test.npz", labels="y.npy", reference="float.onnx")
    for line in r.lines(): print(line)

The generated C runs as one compiled program over all samples (the host
harness reads every sample from one binary file and writes every output to
another: no process per sample), or as bare-metal firmware on a QEMU board
in chunks that fit its RAM. The reference is `--reference` (typically the
float model) or the model file itself, run by onnxruntime. Per output, as
X-CUBE-AI's validate: accuracy against labels (and the reference's), top-1
agreement with the reference, RMSE, MAE, max error, L2-relative error
(||c - r|| / ||r||) and cosine similarity, all on dequantized values.

Per layer (`per_layer`): every quantized tensor the numpy reference computes
(bit-exact with the generated C) is dequantized and compared with the
reference model's tensor of the same name (or the output of the node that
was fused into it), after an NCHW/NHWC transpose when the shapes say so: the
layer where the L2-relative error jumps is the one that loses accuracy.

Bad datasets raise InputError naming the input, the expected and the actual
shape/dtype; nothing is written before everything succeeded.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import samples
from ..errors import InputError, ModelLoadError

PER_LAYER_SAMPLES = 32
# the host build validates on the machine it runs on: let the compiler use its vector units
HOST_CFLAGS = ["-O3", "-march=native", "-std=c99"]
FIRMWARE_CHUNK_BYTES = 512 * 1024


def load_dataset(path: str, compiled, originals: list | None = None) -> tuple[list[np.ndarray], list[str]]:
    """Per model input (samples, *shape) in the input's dtype; float data
    for a quantized input is quantized with the input's scale/zero point
    (the float arrays are appended to `originals`: the reference model gets
    the data as given, not its quantized image)."""
    g = compiled.graph
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except Exception as e:
        raise InputError(f"{path}: not an .npz file ({e})") from None
    if isinstance(data, np.ndarray):
        if len(g.inputs) != 1:
            raise InputError(f"{path}: one array, the model has {len(g.inputs)} inputs {g.inputs}: use an .npz "
                             f"keyed by input name")
        arrays = {g.inputs[0]: data}
    else:
        arrays = {k: data[k] for k in data.files}
        missing = [n for n in g.inputs if n not in arrays]
        if missing:
            raise InputError(f"{path}: no array for input '{missing[0]}' (expected {g.tensors[missing[0]].dtype}"
                             f"[samples, {', '.join(map(str, g.tensors[missing[0]].shape))}]); the file holds "
                             f"{sorted(arrays)}")
    out, notes, counts = [], [], set()
    for name in g.inputs:
        t = g.tensors[name]
        x = arrays[name]
        want = f"{t.dtype}[samples, {', '.join(map(str, t.shape))}]"
        layout = samples.layout_of(x.shape, t.shape)
        if layout in (samples.STACKED, samples.BATCH) or (layout == samples.ONE and t.shape and t.shape[0] == 1):
            x = samples.to_samples(x, t.shape, layout)   # (ONE of a batch-1 input: one sample on the batch axis)
        else:
            raise InputError(f"{path}: input '{name}': expected {want}, got {x.dtype}{list(x.shape)}")
        if x.shape[0] == 0:
            raise InputError(f"{path}: input '{name}': the dataset is empty (0 samples)")
        if x.dtype.name != t.dtype:
            q = t.quant
            if x.dtype.kind == "f" and t.dtype in ("int8", "uint8") and q is not None:
                info = np.iinfo(t.dtype)
                scale = float(np.asarray(q.scale).reshape(-1)[0])
                zp = int(np.asarray(q.zero_point).reshape(-1)[0])
                if originals is not None:
                    originals.append((name, x.astype(np.float32)))
                x = np.clip(np.rint(x / scale) + zp, info.min, info.max).astype(t.dtype)
                notes.append(f"input '{name}': float data quantized with scale {scale:g}, zero point {zp}")
            elif x.dtype == np.float64 and t.dtype == "float32":
                x = x.astype(np.float32)
            else:
                raise InputError(f"{path}: input '{name}': expected {want}, got {x.dtype}{list(x.shape)}")
        counts.add(x.shape[0])
        out.append(np.ascontiguousarray(x))
    if len(counts) > 1:
        raise InputError(f"{path}: the inputs hold different sample counts {sorted(counts)}")
    return out, notes


def load_labels(path: str, n: int) -> np.ndarray:
    try:
        y = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except Exception as e:
        raise InputError(f"{path}: not a .npy file ({e})") from None
    if isinstance(y, np.lib.npyio.NpzFile):
        if len(y.files) != 1:
            raise InputError(f"{path}: labels: expected one array, the file holds {y.files}")
        y = y[y.files[0]]
    if y.ndim == 2 and y.shape[1] > 1:
        y = y.argmax(axis=1)                         # one-hot
    y = y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y
    if y.ndim != 1 or y.dtype.kind not in "iub":
        raise InputError(f"{path}: labels: expected integer class indices [samples] (or one-hot), got "
                         f"{y.dtype}{list(y.shape)}")
    if y.shape[0] != n:
        raise InputError(f"{path}: labels: {y.shape[0]} labels for {n} samples")
    return y.astype(np.int64)


# QOperator ops: input positions of their output's (scale, zero point)
OUT_QPARAMS = {"QLinearConv": (6, 7), "QLinearMatMul": (6, 7), "com.microsoft.QLinearConv": (6, 7),
               "com.microsoft.QGemm": (7, 8), "com.microsoft.QLinearAdd": (6, 7), "com.microsoft.QLinearMul": (6, 7),
               "com.microsoft.QLinearAveragePool": (3, 4), "com.microsoft.QLinearGlobalAveragePool": (3, 4),
               "com.microsoft.QLinearSoftmax": (3, 4), "com.microsoft.QLinearSigmoid": (3, 4),
               "com.microsoft.QLinearLeakyRelu": (3, 4), "com.microsoft.QLinearConcat": (0, 1),
               "QuantizeLinear": (1, 2)}


def qparams_of(g, name: str):
    """(scale, zero point) arrays of a quantized tensor: its own QuantParams,
    the producing QOperator's output parameters, or a consumer's input
    parameters (the (x, x_scale, x_zero_point) triple of QLinear ops)."""
    t = g.tensors[name]
    if t.quant is not None:
        return np.asarray(t.quant.scale, np.float64).reshape(-1), np.asarray(t.quant.zero_point, np.float64).reshape(-1)

    def const(k):
        return g.tensors[k].data if k and g.tensors[k].is_const else None
    for n in g.nodes:
        if name in n.outputs and n.op_type in OUT_QPARAMS:
            i, j = OUT_QPARAMS[n.op_type]
            s, z = const(n.input(i)), const(n.input(j))
            if s is not None:
                return np.asarray(s, np.float64).reshape(-1), (np.asarray(z, np.float64).reshape(-1) if z is not None
                                                               else np.zeros(1))
    for n in g.nodes:
        if n.op_type.startswith(("QLinear", "com.microsoft.Q")):
            for i, x in enumerate(n.inputs):
                if x == name and i + 2 < len(n.inputs):
                    s, z = const(n.input(i + 1)), const(n.input(i + 2))
                    if s is not None and np.asarray(s).dtype.kind == "f" and z is not None:
                        return np.asarray(s, np.float64).reshape(-1), np.asarray(z, np.float64).reshape(-1)
    return None


def dequantize(x: np.ndarray, t, q=None) -> np.ndarray:
    if x.dtype.kind == "f" or (t.quant is None and q is None):
        return x.astype(np.float64)
    if q is None:
        q = (np.asarray(t.quant.scale, np.float64).reshape(-1), np.asarray(t.quant.zero_point, np.float64).reshape(-1))
    scale, zp = q
    if scale.size == 1:
        return (x.astype(np.float64) - zp[0]) * scale[0]
    return (x.astype(np.float64) - zp) * scale     # per-channel on the last axis (NHWC tensors)


def metrics(c: np.ndarray, r: np.ndarray) -> dict[str, float]:
    """c, r: float arrays of the same shape, samples first."""
    d = (c - r).reshape(-1)
    rn = float(np.linalg.norm(r.reshape(-1)))
    cn = float(np.linalg.norm(c.reshape(-1)))
    return {"rmse": float(np.sqrt(np.mean(d * d))) if d.size else 0.0,
            "mae": float(np.mean(np.abs(d))) if d.size else 0.0,
            "max": float(np.max(np.abs(d))) if d.size else 0.0,
            "l2r": float(np.linalg.norm(d) / rn) if rn else float(np.linalg.norm(d)),
            "cos": float(np.dot(c.reshape(-1), r.reshape(-1)) / (cn * rn)) if cn and rn else float(cn == rn)}


@dataclass
class OutputResult:
    name: str
    shape: tuple
    metrics: dict
    accuracy: float | None = None
    reference_accuracy: float | None = None
    agreement: float | None = None


@dataclass
class LayerResult:
    index: int
    op: str
    tensor: str
    matched: str
    metrics: dict


@dataclass
class Result:
    target: str
    samples: int
    seconds: float
    reference: str
    outputs: list[OutputResult]
    layers: list[LayerResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.samples / self.seconds if self.seconds else float("inf")

    def lines(self) -> list[str]:
        out = [f"ran      {self.samples:,} samples of the generated C on {self.target} in {self.seconds:.2f} s "
               f"({self.per_second:,.0f} samples/s)",
               f"vs       {self.reference}"]
        out += [f"note     {n}" for n in self.notes]
        for o in self.outputs:
            m = o.metrics
            parts = []
            if o.accuracy is not None:
                parts.append(f"accuracy {100 * o.accuracy:.2f}%"
                             + (f" (reference {100 * o.reference_accuracy:.2f}%)"
                                if o.reference_accuracy is not None else ""))
            if o.agreement is not None:
                parts.append(f"top-1 agreement {100 * o.agreement:.2f}%")
            parts.append(f"RMSE {m['rmse']:.6g}, MAE {m['mae']:.6g}, max error {m['max']:.6g}, "
                         f"L2-relative {m['l2r']:.6g}, cosine {m['cos']:.6f}")
            out.append(f"output   '{o.name}' {list(o.shape)}: " + ", ".join(parts))
        if self.layers:
            worst = max(range(len(self.layers)), key=lambda i: self.layers[i].metrics["l2r"] - (
                self.layers[i - 1].metrics["l2r"] if i else 0.0))
            out.append(f"layers   {len(self.layers)} quantized tensors matched in the reference "
                       f"(first {min(self.samples, PER_LAYER_SAMPLES)} samples):")
            out.append(f"         {'#':>3} {'op':26s} {'RMSE':>10} {'L2-rel':>9} {'cosine':>9}  tensor")
            for i, lay in enumerate(self.layers):
                m = lay.metrics
                flag = "  <- largest jump" if i == worst else ""
                out.append(f"         {lay.index:3d} {lay.op[:26]:26s} {m['rmse']:10.4g} {m['l2r']:9.4f} "
                           f"{m['cos']:9.5f}  {lay.tensor[-60:]}{flag}")
        return out


def _ort_session(model, extra_outputs: bool = False):
    import onnx
    import onnxruntime as ort
    from ..frontend.onnx_file import read_model   # external data only from inside the model's folder
    m = read_model(str(model)) if not isinstance(model, onnx.ModelProto) else model
    names = []
    if extra_outputs:
        try:
            m = onnx.shape_inference.infer_shapes(m)
        except Exception:
            pass
        have = {o.name for o in m.graph.output}
        typed = {v.name: v for v in m.graph.value_info}
        for n in m.graph.node:
            for o in n.output:
                if o and o not in have:
                    # no inferred type: float, the reference (float) model's intermediate type
                    m.graph.output.append(typed.get(o) or onnx.helper.make_tensor_value_info(o, 1, None))
                    have.add(o)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return sess, m, names


def _reference_feeds(sess, compiled, xs: list[np.ndarray], n: int, floats: dict | None = None):
    """One feed per sample for the reference model: its inputs by name
    (positionally when names differ), dequantized when it takes float, with
    a batch axis of 1 when its input has one more dimension than a sample."""
    g = compiled.graph
    ins = sess.get_inputs()
    if len(ins) != len(g.inputs):
        raise InputError(f"reference model has {len(ins)} inputs, the model {len(g.inputs)}")
    cols = []
    for k, inp in enumerate(ins):
        j = g.inputs.index(inp.name) if inp.name in g.inputs else k
        t = g.tensors[g.inputs[j]]
        x = xs[j][:n]
        if "float" in inp.type and floats and g.inputs[j] in floats:
            x = floats[g.inputs[j]][:n]
        elif "float" in inp.type and x.dtype.kind != "f":
            x = dequantize(x, t).astype(np.float32)
        elif "int8" in inp.type and x.dtype.kind == "f":
            raise InputError(f"reference model input '{inp.name}' is {inp.type}, the data is float")
        per = x.reshape((n, -1))
        rank = len(inp.shape)
        dims = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
        if int(np.prod(dims)) != per.shape[1]:
            raise InputError(f"reference model input '{inp.name}' has shape {inp.shape}, a sample has "
                             f"{per.shape[1]} values")
        cols.append((inp.name, per.reshape((n, *dims)) if rank else per))
    for s in range(n):
        yield {name: a[s] for name, a in cols}


def _run_reference(model, compiled, xs: list[np.ndarray], extra: bool = False, limit: int | None = None,
                   floats: dict | None = None):
    """Reference values per output name, stacked over samples: (n, *one run's shape)."""
    sess, proto, names = _ort_session(model, extra)
    n = xs[0].shape[0] if limit is None else min(limit, xs[0].shape[0])
    results: dict[str, list[np.ndarray]] = {k: [] for k in names}
    for feed in _reference_feeds(sess, compiled, xs, n, floats):
        for k, v in zip(names, sess.run(names, feed)):
            results[k].append(np.asarray(v))
    return {k: np.stack(v) for k, v in results.items()}, proto, names


def _per_sample(arr: np.ndarray, n: int, shape: tuple) -> np.ndarray | None:
    """Reference values as (n, *shape), or None when the sizes differ."""
    if arr.size != n * int(np.prod(shape)):
        return None
    return arr.reshape((n, *shape))


def _run_c(compiled, xs: list[np.ndarray]) -> list[np.ndarray]:
    g = compiled.graph
    b = compiled.board
    if b.id != "host" and b.sim.get("qemu_machine"):
        from ..sim import qemu
        per = sum(x[0].nbytes for x in xs)
        chunk = max(1, FIRMWARE_CHUNK_BYTES // max(per, 1))
        parts = []
        for s0 in range(0, xs[0].shape[0], chunk):
            r = qemu.simulate(compiled, [x[s0:s0 + chunk] for x in xs], b)
            parts.append(r.outputs)
        return [np.concatenate([p[i] for p in parts]) for i in range(len(g.outputs))]
    from ..sim import host
    build_kw, runner = {}, None
    if b.sim.get("runner") == "qemu-user":
        from ..sim import qemu_user
        build_kw = {"cc": qemu_user.compiler(b), "cflags": list(b.cflags)}
        runner = qemu_user.command(b)
    else:
        build_kw = {"cflags": HOST_CFLAGS}
    exe = host.build(compiled.header, compiled.prefix, [g.tensors[t].nbytes for t in g.inputs],
                     [g.tensors[t].nbytes for t in g.outputs], **build_kw)
    n = xs[0].shape[0]
    jobs = max(1, min(os.cpu_count() or 1, n // 64))
    if jobs == 1:
        return host.run(exe, xs, compiled.out_specs, n, runner=runner)
    # one compiled program, one process per core, each over a contiguous slice of the dataset
    from concurrent.futures import ThreadPoolExecutor
    cuts = [n * k // jobs for k in range(jobs + 1)]
    with ThreadPoolExecutor(jobs) as pool:
        parts = list(pool.map(lambda k: host.run(exe, [x[cuts[k]:cuts[k + 1]] for x in xs], compiled.out_specs,
                                                 cuts[k + 1] - cuts[k], runner=runner), range(jobs)))
    return [np.concatenate([p[i] for p in parts]) for i in range(len(g.outputs))]


def run(compiled, data: str, labels: str | None = None, reference=None, per_layer: bool = False,
        model_path: str | None = None) -> Result:
    g = compiled.graph
    originals: list = []
    xs, notes = load_dataset(data, compiled, originals)
    floats = dict(originals)
    n = xs[0].shape[0]
    y = load_labels(labels, n) if labels else None
    ref = reference or model_path
    if ref is None:
        raise InputError("validate needs a reference model (--reference) or the model file")
    if isinstance(ref, (str, Path)) and not Path(ref).exists():
        raise ModelLoadError(f"{ref}: no such file")
    t0 = time.monotonic()
    outs = _run_c(compiled, xs)
    secs = time.monotonic() - t0
    try:
        ref_out, proto, names = _run_reference(ref, compiled, xs, floats=floats)
    except InputError:
        raise
    except Exception as e:
        raise ModelLoadError(f"{ref}: onnxruntime cannot run the reference model: {str(e).splitlines()[0]}") from None
    results = []
    ref_names = [o.name for o in proto.graph.output]
    for k, name in enumerate(g.outputs):
        t = g.tensors[name]
        rname = name if name in ref_out else (ref_names[k] if k < len(ref_names) else None)
        r = _per_sample(ref_out[rname], n, t.shape) if rname in ref_out else None
        if r is None:
            raise InputError(f"reference model output '{rname}' does not match output '{name}' "
                             f"{list(t.shape)} (got {list(ref_out[rname].shape) if rname in ref_out else '-'})")
        cv = dequantize(outs[k], t)
        rv = dequantize(r, t) if r.dtype.kind != "f" else r.astype(np.float64)
        o = OutputResult(name, t.shape, metrics(cv, rv))
        classes = t.shape[-1] if t.shape else 1
        if classes > 1:
            ca = cv.reshape(n, -1, classes).argmax(-1)
            ra = rv.reshape(n, -1, classes).argmax(-1)
            o.agreement = float(np.mean(ca == ra))
            if y is not None and ca.shape[1] == 1:
                o.accuracy = float(np.mean(ca[:, 0] == y))
                o.reference_accuracy = float(np.mean(ra[:, 0] == y))
        results.append(o)
    res = Result(compiled.board.id if compiled.board.id != "host" else f"host ({' '.join(HOST_CFLAGS)})", n, secs,
                 f"{Path(str(ref)).name} (onnxruntime)", results, notes=notes)
    if per_layer:
        res.layers = _per_layer(compiled, xs, ref, floats)
    return res


def _per_layer(compiled, xs, ref, floats) -> list[LayerResult]:
    from .. import ops, reference
    g = compiled.graph
    k = min(xs[0].shape[0], PER_LAYER_SAMPLES)
    ref_vals, proto, names = _run_reference(ref, compiled, xs, extra=True, limit=k, floats=floats)
    node_out = {n.name: n.output[0] for n in proto.graph.node if n.output}
    vals = [reference.run(g, {nm: x[s] for nm, x in zip(g.inputs, xs)}, all_tensors=True) for s in range(k)]
    out = []
    for i, n in enumerate(g.nodes):
        if ops.get(n.op_type).view or not n.outputs or not n.outputs[0]:
            continue
        t = g.tensors[n.outputs[0]]
        q = qparams_of(g, t.name) if t.dtype in ("int8", "uint8") else None
        if q is None:
            continue
        fused = [re.search(r"'(.*)'", f).group(1) if "'" in f else f for f in n.fused]
        cands = [node_out[f] for f in reversed(fused) if f in node_out] + [
            t.name, _strip(t.name), _strip(n.name)]
        match = next((c for c in cands if c in ref_vals), None)
        if match is None:
            match = next((r for r in ref_vals if _strip(r) == _strip(t.name)), None)
        if match is None:
            continue
        rv = ref_vals[match].astype(np.float64)
        cv = np.stack([dequantize(v[t.name], t, q) for v in vals])
        c0, kept = g.channels_kept.get(t.name, (None, None))
        if kept is None:
            rv = _layout(rv, cv.shape)
        else:   # channels the compiler dropped (passes/prune_channels.py): compare the ones kept
            rv = _layout(rv, cv.shape[:-1] + (c0,))
            rv = rv[..., kept] if rv is not None else None
        if rv is None:
            continue
        out.append(LayerResult(i, n.op_type, t.name, match, metrics(cv, rv)))
    return out


def _strip(name: str) -> str:
    for suf in (":0", "_nhwc", "_nchw", "_prequant", "_quantized", "_QuantizeLinear_Output",
                "_DequantizeLinear_Output", "_dequant"):
        if name.endswith(suf):
            name = name[: -len(suf)]
    return name


def _layout(r: np.ndarray, shape: tuple) -> np.ndarray | None:
    """The reference tensor (n, *its shape) as `shape` (n, *compiled shape):
    as is, or NCHW -> NHWC (spatial integer ops run channels-last)."""
    def core(s):
        s = tuple(s)
        while len(s) > 1 and s[0] == 1:
            s = s[1:]
        return s
    n = shape[0]
    if r.size != int(np.prod(shape)):
        return None
    rs, cs = core(r.shape[1:]), core(shape[1:])
    if rs == cs:
        return r.reshape(shape)
    if len(rs) == 3 and len(cs) == 3 and rs == (cs[2], cs[0], cs[1]):
        return r.reshape((n, *rs)).transpose(0, 2, 3, 1).reshape(shape)
    if len(rs) == 2 and len(cs) == 2 and rs == (cs[1], cs[0]):
        return r.reshape((n, *rs)).transpose(0, 2, 1).reshape(shape)
    return None
