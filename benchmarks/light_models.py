"""The real network graphs the `onnx` package ships (light_*.onnx, with
seeded random weights: tests/light_models.py) through the compiler, per
model: compiled or why not, the kernels, the generated C's max error on the
host against onnxruntime (graph optimizations off) on one seeded image,
and with --int8 the same for onnxruntime's quantize_static QDQ model in
both requantization modes, in output steps (|C - onnxruntime| / the output's
scale) and the share of outputs within one step, next to the noise floor
(onnxruntime against itself on a 1e-5-perturbed image), and node by node:
each integer node fed onnxruntime's values of its inputs, the share of its
outputs a step off onnxruntime's (tests/light_models.py node_by_node).

    python benchmarks/light_models.py [--int8] [--hw 224] [--skip vgg19,...] [--bn drawn]
                                      [--images N] [models...]

--bn drawn keeps the BatchNormalization statistics as drawn instead of
calibrated (tests/light_models.py seeded); --images N: the int8 output
comparison over N seeded images (the worst and the share within one step
over all of them; node by node on the first).

Float error is relative to the output's largest magnitude; for the models
that end in Softmax the logits are compared too (the first output).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import light_models as lm  # noqa: E402
from cuvil_mcu import ops  # noqa: E402
from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.sim import host  # noqa: E402


def ort_run(m, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def c_build(c):
    g = c.graph
    return host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                      [g.tensors[n].nbytes for n in g.outputs])


def c_exec(c, exe, feeds):
    return [o[0] for o in host.run(exe, [feeds[n][None] for n in c.graph.inputs], c.out_specs, 1)]


def c_run(c, feeds):
    return c_exec(c, c_build(c), feeds)


def kernels(c) -> Counter:
    return Counter(n.op_type for n in c.graph.nodes if not ops.get(n.op_type).view)


def out_scales(m) -> list[float | None]:
    """Scale of the DequantizeLinear writing each graph output, if any."""
    from onnx import numpy_helper
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    out = []
    for o in m.graph.output:
        n = prod.get(o.name)
        while n is not None and n.op_type in ("Reshape", "Flatten", "Squeeze", "Identity"):
            n = prod.get(n.input[0])
        out.append(float(inits[n.input[1]].reshape(-1)[0]) if n is not None and n.op_type == "DequantizeLinear"
                   and n.input[1] in inits else None)
    return out


def compile_timed(m, **kw):
    t = time.time()
    try:
        c = compile_model(m, **kw)
    except Exception as e:  # noqa: BLE001 - reported per model
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:150]}", time.time() - t
    return c, "", time.time() - t


def seeded(name, hw, **kw):
    """lm.seeded, cached across runs (calibrating BatchNorm statistics takes
    a minute on the deep models)."""
    import os
    import tempfile

    import onnx
    d = Path(os.environ.get("CUVIL_LIGHT_CACHE", Path(tempfile.gettempdir()) / "cuvil-light-models"))
    f = d / f"{name}_{hw}_{'_'.join(f'{k}{v}' for k, v in sorted(kw.items()))}_onnx{onnx.__version__}.onnx"
    if f.exists():
        return onnx.load(str(f))
    m = lm.seeded(name, hw=hw, **kw)
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(f))
    return m


def float_row(name, hw, bn="calibrated"):
    m = seeded(name, hw, logits=True, **({"calibrate": False} if bn == "drawn" else {}))
    feeds = lm.image(m)
    c, why, secs = compile_timed(m)
    if c is None:
        print(f"{name:14s} float  no   ({why}) {secs:.0f} s")
        return
    ref = ort_run(m, feeds)
    got = c_run(c, {k: v for k, v in feeds.items()})
    errs = [float(np.abs(a.astype(np.float64) - b).max() / max(1e-30, np.abs(b).max())) for a, b in zip(got, ref)]
    k = kernels(c)
    print(f"{name:14s} float  yes  max rel error {max(errs):.2g} ({', '.join(f'{e:.2g}' for e in errs)}); "
          f"{sum(k.values())} kernels ({', '.join(f'{t} x{n}' for t, n in sorted(k.items()))}); {secs:.0f} s")


def _steps(a, b, s):
    steps = np.rint(np.abs(a.astype(np.float64) - b) / s)
    return f"max {int(steps.max())} steps, {100.0 * np.mean(steps <= 1):.1f}% within 1"


def int8_row(name, hw, bn="calibrated", images=1):
    logging.disable(logging.WARNING)
    m = lm.quantized(seeded(name, hw, **({"calibrate": False} if bn == "drawn" else {})))
    all_feeds = [lm.image(m, seed=1 + i) for i in range(images)]
    feeds = all_feeds[0]
    refs = [ort_run(m, f)[0] for f in all_feeds]
    ref = [refs[0]]
    scale = out_scales(m)[0]
    # the noise floor: onnxruntime against itself on the image plus 1e-5 noise (a few
    # input codes flip); a deep int8 network can amplify that into many output steps
    x = next(iter(feeds))
    noise = np.float32(1e-5) * np.random.default_rng(9).standard_normal(feeds[x].shape, dtype=np.float32)
    what = f"{images} images" if images > 1 else "the image"
    if scale is not None:
        noisy = [ort_run(m, {x: f[x] + noise})[0] for f in all_feeds]
        print(f"{name:14s} int8 noise floor: onnxruntime vs itself on {what} + 1e-5 noise: "
              f"{_steps(np.stack(noisy), np.stack(refs), scale)}")
    for mode in ("fixed", "float"):
        c, why, secs = compile_timed(m, requant=mode)
        if c is None:
            print(f"{name:14s} int8 {mode:5s} no   ({why}) {secs:.0f} s")
            continue
        exe = c_build(c)
        got = [c_exec(c, exe, f) for f in all_feeds]
        e2e = _steps(np.stack([o[0] for o in got]), np.stack(refs), scale) if scale is not None else \
            f"max |error| {np.abs(got[0][0].astype(np.float64) - ref[0]).max():.3g}"
        stats = lm.node_by_node(m, c.graph, feeds)
        stats.pop(None)
        nodes = "; ".join(f"{t.split('.')[-1]} x{n}: {100.0 * d / max(tot, 1):.3f}% off (max {mx})"
                          for t, (n, tot, d, mx) in sorted(stats.items()))
        k = kernels(c)
        floats = [t for t in sorted(k) if not t.startswith(lm.INTEGER_PREFIXES) and t not in ("Transpose",)]
        print(f"{name:14s} int8 {mode:5s} yes  output {e2e}; {sum(k.values())} kernels, not integer: "
              f"{', '.join(f'{t} x{k[t]}' for t in floats) or 'none'}, Transpose x{k.get('Transpose', 0)}; "
              f"{secs:.0f} s")
        print(f"{'':14s} node by node (onnxruntime's inputs): {nodes}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--int8", action="store_true", help="also onnxruntime's QDQ model, both requant modes")
    ap.add_argument("--hw", type=int, default=None, help="input height/width (default: the model's, 224)")
    ap.add_argument("--skip", default="", help="comma-separated models to leave out")
    ap.add_argument("--bn", choices=("calibrated", "drawn"), default="calibrated",
                    help="BatchNormalization statistics calibrated on an image (default) or kept as drawn")
    ap.add_argument("--images", type=int, default=1, help="int8 output comparison over this many images")
    args = ap.parse_args()
    names = args.models or [n for n in lm.available() if n not in args.skip.split(",")]
    for name in names:
        float_row(name, args.hw, args.bn)
        if args.int8:
            int8_row(name, args.hw, args.bn, args.images)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
