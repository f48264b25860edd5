"""How long `cuvil-mcu gen` takes and how big the header it writes is.

    python benchmarks/compile_speed.py                 # shared models, light models, MobileNetV2 float
    python benchmarks/compile_speed.py --only kws_dscnn,mobilenet_v2 --repeat 5
    python benchmarks/compile_speed.py --big --only alexnet --cc alexnet --repeat 1
                                                       # + torchvision AlexNet, float; gcc -O2 its header

Each gen is a fresh `python -m cuvil_mcu.cli gen ... --no-cache` process
(imports included, compile cache off; Jinja's compiled templates are warm,
as on a user's second run), timed by wall clock and by its CPU time
(user + sys from wait4), best of --repeat. Byte-code files are written
(PYTHONDONTWRITEBYTECODE is dropped) so imports cost what they cost after an
install. Also printed: `cuvil-mcu --version`, and `python -X importtime`'s
top imports of the compiler.

Columns: constants = bytes of const arrays (gen's "flash" line); header =
bytes of <name>.h; per byte = header / constants, and for the constants
section alone (from "---- constants" to "---- kernels").

Models: ../shared/models/*/model_*.onnx; the `light_*` models the onnx
package ships (onnx/backend/test/data/light: real graphs whose weights are
all 0.02 from ConstantOfShape, folded at compile time into full tensors);
the light models that use ops cuvil does not compile yet (LRN, Sum,
Dropout's mask output) are also timed after a rewrite by meaning
(without_blockers); MobileNetV2 float as torchvision builds it (width 1.0, 224x224, 1000
classes: 3.5 M parameters) and at width 0.35 (the issue's 6.7 MB of
weights), made here with onnx.helper from seeded random weights, BatchNorm
folded into the convolutions as an eval-mode export leaves them.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "models"

# goals from issues 13.5 and 14.4 (seconds of gen, header bytes per constant byte)
GOALS = {"kws_dscnn": 1.5, "shared": 2.0, "mobilenet_v2": 5.0}
PER_BYTE_GOAL = 2.5


def light_dir() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _divisible(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def mobilenet_v2(path: Path, width: float = 1.0, size: int = 224, classes: int = 1000, seed: int = 0) -> Path:
    """torchvision's mobilenet_v2 (inverted residuals t, c, n, s; ReLU6 as
    Clip; BatchNorm folded), float, seeded He-scaled random weights."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.RandomState(seed)
    nodes, inits = [], []
    count = [0]

    def conv(x, cin, cout, k, s, groups=1, act=True):
        i = count[0]
        count[0] += 1
        w = (rng.randn(cout, cin // groups, k, k) * np.sqrt(2.0 / (cin // groups * k * k))).astype(np.float32)
        b = (rng.randn(cout) * 0.01).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"conv{i}.weight"), numpy_helper.from_array(b, f"conv{i}.bias")])
        y = f"conv{i}"
        nodes.append(helper.make_node("Conv", [x, f"conv{i}.weight", f"conv{i}.bias"], [y], name=f"/conv{i}/Conv",
                                      kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=groups))
        if act:
            nodes.append(helper.make_node("Clip", [y, "relu6_min", "relu6_max"], [y + "_relu6"],
                                          name=f"/conv{i}/Clip"))
            y += "_relu6"
        return y

    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "relu6_min"),
              numpy_helper.from_array(np.array(6.0, np.float32), "relu6_max")]
    cin = _divisible(32 * width)
    x = conv("input", 3, cin, 3, 2)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        cout = _divisible(c * width)
        for r in range(n):
            stride = s if r == 0 else 1
            hid = cin * t
            y = conv(x, cin, hid, 1, 1) if t != 1 else x
            y = conv(y, hid, hid, 3, stride, groups=hid)
            y = conv(y, hid, cout, 1, 1, act=False)
            if stride == 1 and cin == cout:
                nodes.append(helper.make_node("Add", [x, y], [y + "_add"], name=f"/add{count[0]}/Add"))
                y += "_add"
            x, cin = y, cout
    last = _divisible(1280 * max(1.0, width))
    x = conv(x, cin, last, 1, 1)
    fw = (rng.randn(classes, last) * np.sqrt(1.0 / last)).astype(np.float32)
    inits += [numpy_helper.from_array(fw, "classifier.weight"),
              numpy_helper.from_array(np.zeros(classes, np.float32), "classifier.bias")]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pool"], name="/pool/GlobalAveragePool"),
              helper.make_node("Flatten", ["pool"], ["flat"], name="/Flatten"),
              helper.make_node("Gemm", ["flat", "classifier.weight", "classifier.bias"], ["logits"],
                               name="/classifier/Gemm", transB=1)]
    graph = helper.make_graph(nodes, "mobilenet_v2", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="compile_speed")
    path.write_bytes(model.SerializeToString())
    return path


def alexnet(path: Path, seed: int = 0) -> Path:
    """torchvision's alexnet as an eval-mode export leaves it (no LRN, no
    Dropout; 224x224, 1000 classes: 61.1 M parameters, 244 MB of float
    weights), seeded random weights."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def param(name, *shape):
        w = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(np.prod(shape[1:])))
        inits.append(numpy_helper.from_array(w, name))
        return name

    x = "input"
    for i, (cout, cin, k, s, p, pool) in enumerate([(64, 3, 11, 4, 2, True), (192, 64, 5, 1, 2, True),
                                                    (384, 192, 3, 1, 1, False), (256, 384, 3, 1, 1, False),
                                                    (256, 256, 3, 1, 1, True)]):
        b = np.zeros(cout, np.float32)
        inits.append(numpy_helper.from_array(b, f"features.{i}.bias"))
        nodes += [helper.make_node("Conv", [x, param(f"features.{i}.weight", cout, cin, k, k), f"features.{i}.bias"],
                                   [f"c{i}"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, name=f"/conv{i}"),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"/relu{i}")]
        x = f"r{i}"
        if pool:
            nodes.append(helper.make_node("MaxPool", [x], [f"p{i}"], kernel_shape=[3, 3], strides=[2, 2],
                                          name=f"/pool{i}"))
            x = f"p{i}"
    nodes.append(helper.make_node("Flatten", [x], ["flat"], name="/flatten"))
    x = "flat"
    for i, (cout, cin) in enumerate([(4096, 9216), (4096, 4096), (1000, 4096)]):
        inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), f"classifier.{i}.bias"))
        nodes.append(helper.make_node("Gemm", [x, param(f"classifier.{i}.weight", cout, cin), f"classifier.{i}.bias"],
                                      [f"g{i}"], transB=1, name=f"/fc{i}"))
        x = f"g{i}"
        if i < 2:
            nodes.append(helper.make_node("Relu", [x], [f"gr{i}"], name=f"/fcrelu{i}"))
            x = f"gr{i}"
    graph = helper.make_graph(nodes, "alexnet", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [1, 3, 224, 224])], [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 1000])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="compile_speed")
    path.write_bytes(model.SerializeToString())
    return path


def without_blockers(src: Path, dst: Path) -> tuple[Path, list[str]]:
    """The model with ops cuvil does not compile yet rewritten by meaning
    (for timing only, until issue 18's ops land): Dropout's unread mask
    output dropped, Sum as a chain of Add, LRN as x / (bias + alpha *
    mean of x^2 over `size` channels)^beta (AveragePool over a [N,1,C,HW]
    view, padded as ONNX's window, counting the padding)."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.shape_inference.infer_shapes(onnx.load(str(src)))
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    read = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
    nodes, done = [], []
    for n in m.graph.node:
        k = f"{n.name or n.output[0]}_rw"
        if n.op_type == "Dropout" and len(n.output) > 1 and not set(n.output[1:]) & read:
            del n.output[1:]
            done.append("Dropout mask")
        elif n.op_type == "Sum" and len(n.input) > 1:
            acc = n.input[0]
            for j, x in enumerate(n.input[1:]):
                out = n.output[0] if j == len(n.input) - 2 else f"{k}{j}"
                nodes.append(helper.make_node("Add", [acc, x], [out], name=f"{k}{j}"))
                acc = out
            done.append("Sum")
            continue
        elif n.op_type == "LRN":
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            size, alpha, beta, bias = a["size"], a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0)
            x, y = n.input[0], n.output[0]
            N, C, H, W = shapes[x]
            nodes += [helper.make_node("Constant", [], [f"{k}_{c}"], name=f"{k}_{c}",
                                       value=numpy_helper.from_array(v, f"{k}_{c}"))   # IR 3: no bare initializers
                      for c, v in (("s4", np.array([N, 1, C, H * W], np.int64)),
                                   ("s", np.array([N, C, H, W], np.int64)), ("alpha", np.array(alpha, np.float32)),
                                   ("bias", np.array(bias, np.float32)), ("beta", np.array(beta, np.float32)))]
            lo, hi = (size - 1) // 2, size // 2
            nodes += [helper.make_node("Mul", [x, x], [f"{k}_sq"], name=f"{k}_sq"),
                      helper.make_node("Reshape", [f"{k}_sq", f"{k}_s4"], [f"{k}_v"], name=f"{k}_v"),
                      helper.make_node("AveragePool", [f"{k}_v"], [f"{k}_avg"], name=f"{k}_avg",
                                       kernel_shape=[size, 1], pads=[lo, 0, hi, 0], count_include_pad=1),
                      helper.make_node("Reshape", [f"{k}_avg", f"{k}_s"], [f"{k}_m"], name=f"{k}_m"),
                      helper.make_node("Mul", [f"{k}_m", f"{k}_alpha"], [f"{k}_am"], name=f"{k}_am"),
                      helper.make_node("Add", [f"{k}_am", f"{k}_bias"], [f"{k}_d"], name=f"{k}_d"),
                      helper.make_node("Pow", [f"{k}_d", f"{k}_beta"], [f"{k}_p"], name=f"{k}_p"),
                      helper.make_node("Div", [x, f"{k}_p"], [y], name=f"{k}_div")]
            done.append("LRN")
            continue
        nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    dst.write_bytes(m.SerializeToString())
    return dst, sorted(set(done))


def models(tmp: Path, big: bool = False) -> list[tuple[str, str, Path]]:
    """(group, name, path)"""
    out = []
    for d in sorted(SHARED.iterdir()) if SHARED.is_dir() else []:
        for f in sorted(d.glob("model_*.onnx")):
            out.append(("shared", f"{d.name}/{f.stem[6:]}", f))
    out.append(("mobilenet_v2", "mobilenet_v2 1.0 224 float", tmp / "mobilenet_v2_100_224.onnx"))
    out.append(("mobilenet_v2", "mobilenet_v2 0.35 224 float", tmp / "mobilenet_v2_035_224.onnx"))
    for f in sorted(light_dir().glob("light_*.onnx")):
        out.append(("light", f.stem, f))
        g, done = without_blockers(f, tmp / f.name)
        if done:
            out.append(("light", f"{f.stem} ({', '.join(done)} rewritten)", g))
    if big:
        out.append(("big", "alexnet torchvision float", alexnet(tmp / "alexnet.onnx")))
    return out


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def timed(cmd: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s = user + sys of the child and its children, result)."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r


def gen(model: Path, out: Path, env: dict, board: str, repeat: int) -> dict:
    cmd = [sys.executable, "-m", "cuvil_mcu.cli", "gen", str(model), "--board", board, "--no-cache", "-o", str(out)]
    best = None
    for _ in range(repeat):
        wall, cpu, r = timed(cmd, env)
        if r.returncode != 0:
            return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:160]}
        if best is None or cpu < best["cpu"]:
            best = {"wall": wall, "cpu": cpu}
    header = out / "model.h"
    text = header.read_bytes()
    m = re.search(r"flash\s+([\d,]+) B of constants", r.stdout)
    consts = int(m.group(1).replace(",", "")) if m else 0
    a, b = text.find(b"/* ---- constants"), text.find(b"/* ---- kernels")
    best.update(header=len(text), consts=consts, section=b - a if 0 <= a < b else 0, path=header)
    return best


def compile_c(header: Path, env: dict) -> tuple[float, float, int, str]:
    """gcc -O2 -c of a translation unit holding the header's implementation."""
    src = header.parent / "impl.c"
    src.write_text('#define MODEL_IMPLEMENTATION\n#include "model.h"\n')
    wall, cpu, r = timed(["/usr/bin/time", "-f", "%M", "gcc", "-std=c99", "-O2", "-c", str(src), "-o",
                             str(header.parent / "impl.o")], env)
    rss = int(r.stderr.strip().splitlines()[-1]) if r.returncode == 0 else 0
    return wall, cpu, rss, "" if r.returncode == 0 else r.stderr[-300:]


def startup(env: dict, repeat: int) -> None:
    best = min((timed([sys.executable, "-m", "cuvil_mcu.cli", "--version"], env)[:2] for _ in range(repeat)),
               key=lambda x: x[1])
    print(f"cuvil-mcu --version: {best[0]:.3f} s wall, {best[1]:.3f} s CPU (best of {repeat})")
    bare = min((timed([sys.executable, "-c", "pass"], env)[:2] for _ in range(repeat)), key=lambda x: x[1])
    print(f"python -c pass:      {bare[0]:.3f} s wall, {bare[1]:.3f} s CPU")
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", "import cuvil_mcu.compiler"], env=env,
                       capture_output=True, text=True)
    rows = []
    for line in r.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(3)) <= 3:
            rows.append((int(m.group(2)), m.group(4)))
    total = next((us for us, name in rows if name == "cuvil_mcu.compiler"), 0)
    print(f"python -X importtime -c 'import cuvil_mcu.compiler': {total / 1e6:.3f} s cumulative; largest:")
    for us, name in sorted(rows, reverse=True)[:8]:
        print(f"    {us / 1e6:7.3f} s  {name}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated substrings of model names")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--board", default="host")
    ap.add_argument("--cc", default="", help="comma-separated substrings: also compile these headers with gcc")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--big", action="store_true", help="also torchvision's AlexNet, float (61 M parameters)")
    args = ap.parse_args()
    env = _env()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mobilenet_v2(tmp / "mobilenet_v2_100_224.onnx")
        mobilenet_v2(tmp / "mobilenet_v2_035_224.onnx", width=0.35)
        # warm: byte-code files and Jinja's compiled templates, as after a first run
        subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", "gen", str(ROOT / "examples" / "kws_float.onnx"),
                        "--no-cache", "-o", str(tmp / "warm")], env=env, capture_output=True)
        startup(env, args.repeat)
        only = [s for s in args.only.split(",") if s]
        ccs = [s for s in args.cc.split(",") if s]
        print()
        if args.markdown:
            print("| model | gen wall (s) | gen CPU (s) | goal | constants (B) | header (B) | per byte | "
                  "constants section per byte |")
            print("|---|---|---|---|---|---|---|---|")
        for group, name, path in models(tmp, args.big):
            if only and not any(s in name for s in only):
                continue
            r = gen(path, tmp / "out", env, args.board, args.repeat)
            goal = GOALS.get(name.split("/")[0], GOALS.get(group, ""))
            if "error" in r:
                print(f"| {name} | - | - | {goal} | - | - | - | {r['error']} |" if args.markdown
                      else f"{name:34s} error: {r['error']}")
                continue
            per = r["header"] / r["consts"] if r["consts"] else float("nan")
            sec = r["section"] / r["consts"] if r["consts"] else float("nan")
            if args.markdown:
                print(f"| {name} | {r['wall']:.2f} | {r['cpu']:.2f} | {goal} | {r['consts']:,} | {r['header']:,} "
                      f"| {per:.2f} | {sec:.2f} |")
            else:
                print(f"{name:34s} gen {r['wall']:6.2f} s wall {r['cpu']:6.2f} s CPU (goal {goal or '-'})  "
                      f"constants {r['consts']:>12,} B  header {r['header']:>13,} B  {per:5.2f} B/B "
                      f"(section {sec:.2f})")
            if any(s in name for s in ccs):
                wall, cpu, rss, err = compile_c(r["path"], env)
                print(f"    gcc -O2 -c: {wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss / 1024:,.0f} MiB {err}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
