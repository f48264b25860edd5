"""Resize / Upsample: the float op against onnxruntime (nearest and linear
bit for bit, cubic within 1e-5; the generated C equals the numpy reference
bit for bit on the host), every opset form (Upsample-7/9, Resize-10/11/13/
18/19), the int8 form from QDQ models (generated C == reference bit for bit
in both modes; float mode == onnxruntime bit for bit; fixed mode ==
TensorFlow Lite Micro's integer recipe, checked against a plain
transcription here and within 2 LSB of the float mode), the C builds
(-Werror, C99/C11/C++, sanitizers) of float, int8 ConvTranspose and Resize
layers together, the float kernels on an emulated Cortex-M4F, and bad
input through the CLI. (The int8 layers run on every emulated core in
test_layers_on_boards.py, built by `upsample_layers` below.)"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from onnx import helper

from cuvil_mcu.compiler import compile_model
from helpers import make_model, node, run_c, run_ort, run_ref
from qhelpers import assert_exact, check_modes, lsb_diff, qmodel

COORDS = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "half_pixel_symmetric"]
SCALES = [(1, 1, 2, 2), (1, 1, 1.5, 0.6), (1, 1, 0.5, 3)]


def _float_cases():
    cases = []
    for mode in ("nearest", "linear", "cubic"):
        for coord in COORDS + (["tf_half_pixel_for_nn"] if mode == "nearest" else []):
            for sc in SCALES:
                # onnxruntime's nearest picks for half_pixel_symmetric round its
                # float coordinates differently at exact ties (we follow the
                # ONNX reference there): integer scales only
                if mode == "nearest" and coord == "half_pixel_symmetric" and sc != (1, 1, 2, 2):
                    continue
                cases.append((mode, coord, sc, {}))
    for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        for sc in SCALES + [(1, 1, 2.5, 1.25)]:
            cases.append(("nearest", "asymmetric", sc, {"nearest_mode": nm}))
            cases.append(("nearest", "half_pixel", sc, {"nearest_mode": nm}))
    cases.append(("cubic", "half_pixel", (1, 1, 2, 2), {"exclude_outside": 1, "cubic_coeff_a": -0.5}))
    cases.append(("linear", "half_pixel", (1, 1, 1, 2.5), {}))      # one axis resized
    return cases


def test_float_resize_matches_onnxruntime():
    cases = _float_cases()
    rng = np.random.RandomState(0)
    nodes, inits, outs = [], {"roi": np.zeros(0, np.float32)}, []
    for i, (mode, coord, sc, extra) in enumerate(cases):
        inits[f"s{i}"] = np.array(sc, np.float32)
        nodes.append(node("Resize", ["x", "roi", f"s{i}"], [f"y{i}"], mode=mode,
                          coordinate_transformation_mode=coord, **extra))
        outs.append(f"y{i}")
    model = make_model(nodes, {"x": ((1, 3, 5, 7), "float32")}, outs, inits, opset=19)
    feeds = {"x": (rng.randn(1, 3, 5, 7) * 3).astype(np.float32)}
    ref, ort, c = run_ref(model, feeds), run_ort(model, feeds), run_c(model, feeds)
    for (mode, coord, sc, extra), r, o, y in zip(cases, ref, ort, c):
        what = f"{mode} {coord} {sc} {extra}"
        assert r.shape == o.shape, f"{what}: {r.shape} vs onnxruntime {o.shape}"
        assert_exact(y, r, f"{what}: generated C vs reference")
        if mode == "cubic":
            assert np.abs(r - o).max() <= 1e-5 * np.abs(o).max(), f"{what}: {np.abs(r - o).max()}"
        else:
            assert_exact(r, o, f"{what}: reference vs onnxruntime")


OPSET_FORMS = [
    # (opset, op, inputs, attributes) with x [1, 2, 3, 4]
    (7, "Upsample", [], dict(mode="nearest", scales=[1.0, 1.0, 2.0, 3.0])),
    (7, "Upsample", [], dict(mode="linear", scales=[1.0, 1.0, 2.0, 1.5])),
    (9, "Upsample", ["s"], dict(mode="nearest")),
    (9, "Upsample", ["s"], dict(mode="linear")),
    (10, "Resize", ["s"], dict(mode="nearest")),
    (10, "Resize", ["sd"], dict(mode="nearest")),                     # downscale: "simple" ceil
    (10, "Resize", ["s"], dict(mode="linear")),
    (11, "Resize", ["roi", "s"], dict(mode="linear", coordinate_transformation_mode="align_corners")),
    (11, "Resize", ["roi", "empty", "sz"], dict(mode="nearest")),
    (13, "Resize", ["", "s"], dict(mode="cubic")),
    (13, "Resize", ["", "", "sz"], dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel")),
    (18, "Resize", ["", "", "sz2"], dict(mode="nearest", axes=[3, 2], keep_aspect_ratio_policy="not_larger")),
    (18, "Resize", ["", "", "sz2"], dict(mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_smaller")),
    (19, "Resize", ["", "s2"], dict(mode="linear", axes=[-1], antialias=1)),      # upscaling: no effect
]


@pytest.mark.parametrize("opset,op,extra,attrs", OPSET_FORMS,
                         ids=[f"{o}-{op}-{a['mode']}-{i}" for i, (o, op, _, a) in enumerate(OPSET_FORMS)])
def test_opset_forms(opset, op, extra, attrs):
    consts = {"s": np.array([1, 1, 2, 1.5], np.float32), "sd": np.array([1, 1, 0.6, 0.5], np.float32),
              "roi": np.zeros(0, np.float32), "empty": np.zeros(0, np.float32),
              "sz": np.array([1, 2, 5, 9], np.int64), "sz2": np.array([5, 7], np.int64),
              "s2": np.array([2.5], np.float32)}
    inits = {k: consts[k] for k in extra if k}
    model = make_model([node(op, ["x"] + extra, ["y"], **attrs)], {"x": ((1, 2, 3, 4), "float32")}, ["y"], inits,
                       opset=opset)
    feeds = {"x": np.random.RandomState(opset).randn(1, 2, 3, 4).astype(np.float32)}
    r, o, c = run_ref(model, feeds)[0], run_ort(model, feeds)[0], run_c(model, feeds)[0]
    assert r.shape == o.shape, f"{r.shape} vs onnxruntime {o.shape}"
    assert np.abs(r - o).max() <= 1e-5 * max(1.0, np.abs(o).max()), np.abs(r - o).max()
    assert_exact(c, r, "generated C vs reference")


def test_nearest_on_integer_tensors():
    """nearest is a copy: int8 / int32 tensors outside QDQ run it too."""
    model = make_model([node("Resize", ["x", "", "s"], ["y"], mode="nearest")], {"x": ((1, 2, 3, 4), "int8")}, ["y"],
                       {"s": np.array([1, 1, 2, 3], np.float32)}, out_dtype="int8")
    x = np.random.RandomState(0).randint(-128, 128, (1, 2, 3, 4)).astype(np.int8)
    assert_exact(run_c(model, {"x": x})[0], run_ort(model, {"x": x})[0], "generated C vs onnxruntime")


# --------------------------------------------------------------------------- int8

def qresize_model(cases, dt="int8", seed=0, shape=(1, 5, 6, 7)):
    rng = np.random.RandomState(seed)
    zp = 3 if dt == "int8" else 130
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(zp, dt), "roi": np.zeros(0, np.float32)}
    nodes, outs = [], {}
    for i, (mode, coord, sc) in enumerate(cases):
        inits[f"s{i}"] = np.array(sc, np.float32)
        nodes += [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], [f"xf{i}"]),
                  helper.make_node("Resize", [f"xf{i}", "roi", f"s{i}"], [f"yf{i}"], mode=mode,
                                   coordinate_transformation_mode=coord),
                  helper.make_node("QuantizeLinear", [f"yf{i}", "xs", "xz"], [f"y{i}"])]
        outs[f"y{i}"] = dt
    info = np.iinfo(dt)
    return qmodel(nodes, {"x": (shape, dt)}, outs, inits), {"x": rng.randint(info.min, info.max + 1, shape).astype(dt)}


Q_CASES = [(m, c, s) for m in ("linear", "nearest") for c in COORDS[:4] for s in ((1, 1, 2, 2), (1, 1, 1.5, 0.6), (1, 1, 3, 2.5))]


def _tflm_resize_bilinear(x: np.ndarray, out_hw, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """A line-by-line transcription of TFLM's reference_ops::
    ResizeBilinearInteger (NHWC, int8 codes, no TFLITE_SINGLE_ROUNDING), for
    sizes-given resizes: the check of ops/resize.py's "fixed" tables."""
    n, ih, iw, c = x.shape
    oh, ow = out_hw

    def cdiv(a, b):
        return int(a / b) if a * b >= 0 else -(abs(a) // abs(b))

    def scale10(i, o):
        s = ((1 << 10) * i + o // 2) // o
        if align_corners and o > 1:
            s = ((1 << 10) * (i - 1) + (o - 1) // 2) // (o - 1)
        return s

    def interp(v, s, size):
        sv = v * s + s // 2 - (1 << 9) if half_pixel else v * s
        return sv, max(cdiv(sv, 1 << 10), 0), min(cdiv(sv + (1 << 10) - 1, 1 << 10), size - 1)

    hs, ws = scale10(ih, oh), scale10(iw, ow)
    y = np.zeros((n, oh, ow, c), np.int64)
    xi = x.astype(np.int64)
    for b in range(n):
        for yy in range(oh):
            iy, y0, y1 = interp(yy, hs, ih)
            for xx in range(ow):
                ix, x0, x1 = interp(xx, ws, iw)
                o = (xi[b, y0, x0] * ((1 << 10) - (iy - (1 << 10) * y0)) * ((1 << 10) - (ix - (1 << 10) * x0))
                     + xi[b, y1, x0] * (iy - (1 << 10) * y0) * ((1 << 10) - (ix - (1 << 10) * x0))
                     + xi[b, y0, x1] * ((1 << 10) - (iy - (1 << 10) * y0)) * (ix - (1 << 10) * x0)
                     + xi[b, y1, x1] * (iy - (1 << 10) * y0) * (ix - (1 << 10) * x0))
                for ch in range(c):
                    v = int(o[ch])
                    y[b, yy, xx, ch] = cdiv(v + ((1 << 19) if v > 0 else -(1 << 19)), 1 << 20)
    return y


@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_qdq_int8_both_modes(dt):
    model, feeds = qresize_model(Q_CASES, dt)
    c = compile_model(model)
    assert [n.op_type for n in c.graph.nodes].count("cuvil.QResize") == len(Q_CASES)
    out = check_modes(model, feeds, ort_lsb=0)      # float mode: bit for bit with onnxruntime
    x_nhwc = np.moveaxis(feeds["x"], 1, -1)
    for (mode, coord, sc), f, x in zip(Q_CASES, out["fixed"], out["float"]):
        if mode == "nearest":
            assert_exact(f, x, f"nearest {coord} {sc}: fixed vs float mode")
            continue
        # TFLM's recipe (sizes-given, so the integer scales apply) for its two coordinate modes
        if coord in ("half_pixel", "align_corners", "asymmetric") and sc == (1, 1, 2, 2):
            t = _tflm_resize_bilinear(x_nhwc, f.shape[2:], coord == "align_corners", coord == "half_pixel")
            assert_exact(f, np.moveaxis(t, -1, 1).astype(dt), f"{coord}: fixed mode vs TFLM transcription")
        assert lsb_diff(f, x) <= 2, f"linear {coord} {sc}: fixed vs float mode {lsb_diff(f, x)} LSB"


def test_int8_resize_that_stays_float():
    """cubic, or different parameters in and out: the float Resize runs
    between its DequantizeLinear and QuantizeLinear (mixed precision)."""
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(3, np.int8), "ys": np.array(0.07, np.float32),
             "roi": np.zeros(0, np.float32), "s": np.array([1, 1, 2, 2], np.float32)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("Resize", ["xf", "roi", "s"], ["a"], mode="cubic"),
             helper.make_node("QuantizeLinear", ["a", "xs", "xz"], ["y0"]),
             helper.make_node("Resize", ["xf", "roi", "s"], ["b"], mode="linear"),
             helper.make_node("QuantizeLinear", ["b", "ys", "xz"], ["y1"])]
    model = qmodel(nodes, {"x": ((1, 2, 3, 4), "int8")}, {"y0": "int8", "y1": "int8"}, inits)
    c = compile_model(model)
    assert "cuvil.QResize" not in [n.op_type for n in c.graph.nodes]
    assert any("mixed precision" in n for n in c.graph.notes), c.graph.notes
    x = np.random.RandomState(1).randint(-128, 128, (1, 2, 3, 4)).astype(np.int8)
    for y, o in zip(run_c(model, {"x": x}), run_ort(model, {"x": x})):
        assert lsb_diff(y, o) <= 1


def test_strict_builds_of_the_family():
    """Float and int8 ConvTranspose and Resize layers in one model, built
    -Werror as C99 / C11 / C++ with gcc and clang and under ASan/UBSan, each
    run equal to the reference (float within 1e-5)."""
    from test_convtranspose import INT8_CASES, qdq_model
    model, feeds = qdq_model(seed=3, cases=INT8_CASES[:3])
    g = model.graph
    g.initializer.extend([helper.make_tensor("roi", 1, [0], []),
                          helper.make_tensor("s_up", 1, [4], [1, 1, 2, 2])])
    for i, mode in enumerate(("linear", "nearest")):
        g.node.extend([helper.make_node("DequantizeLinear", ["x0", "xs", "xz"], [f"rf{i}"]),
                       helper.make_node("Resize", [f"rf{i}", "roi", "s_up"], [f"ro{i}"], mode=mode),
                       helper.make_node("QuantizeLinear", [f"ro{i}", "xs", "xz"], [f"r{i}"])])
        g.output.append(helper.make_tensor_value_info(f"r{i}", 3, None))
    from helpers import STRICT_BUILDS, run_strict_builds
    run_strict_builds(compile_model(model, requant="fixed"), feeds, exact=True)
    # the float mode's no-contraction macros: gcc C99, clang C99 and clang++
    run_strict_builds(compile_model(model, requant="float"), feeds, exact=True,
                      builds=[STRICT_BUILDS[i] for i in (0, 2, 4)])
    fm = make_model([node("ConvTranspose", ["x", "w"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1]),
                     node("Resize", ["t", "", "s"], ["y"], mode="linear"),
                     node("Resize", ["t", "", "s"], ["z"], mode="cubic")],
                    {"x": ((1, 3, 4, 5), "float32")}, ["y", "z"],
                    {"w": np.random.RandomState(2).randn(3, 2, 3, 3).astype(np.float32),
                     "s": np.array([1, 1, 2, 1.5], np.float32)}, opset=13)
    run_strict_builds(compile_model(fm), {"x": np.random.RandomState(3).randn(1, 3, 4, 5).astype(np.float32)},
                      rel=1e-5, builds=[STRICT_BUILDS[i] for i in (0, 3, 5)])


# --------------------------------------------------------------------------- bad input

def _bad_models(tmp):
    """(file, words the one-line error must hold)"""
    import onnx
    x = {"x": ((1, 2, 4, 4), "float32")}
    s = {"s": np.array([1, 1, 2, 2], np.float32), "roi": np.zeros(0, np.float32)}
    out = []

    def save(name, nodes, inputs, inits, words, opset=13):
        m = make_model(nodes, inputs, ["y"], inits, opset=opset)
        onnx.save(m, tmp / f"{name}.onnx")
        out.append((tmp / f"{name}.onnx", words))

    save("runtime_scales", [node("Resize", ["x", "", "sc"], ["y"], name="up", mode="nearest")],
         {**x, "sc": ((4,), "float32")}, {}, ["'up'", "scales", "run time"])
    save("runtime_sizes", [node("Resize", ["x", "", "", "sz"], ["y"], name="up", mode="nearest")],
         {**x, "sz": ((4,), "int64")}, {}, ["'up'", "sizes", "run time"])
    save("crop", [node("Resize", ["x", "roi", "s"], ["y"], name="crop", mode="linear",
                       coordinate_transformation_mode="tf_crop_and_resize")], x, s,
         ["'crop'", "coordinate_transformation_mode", "tf_crop_and_resize"])
    save("antialias", [node("Resize", ["x", "roi", "sd"], ["y"], name="aa", mode="linear", antialias=1)], x,
         {"sd": np.array([1, 1, 0.5, 0.5], np.float32), "roi": np.zeros(0, np.float32)}, ["'aa'", "antialias"],
         opset=18)
    save("mode", [node("Resize", ["x", "roi", "s"], ["y"], name="m", mode="bicubic")], x, s, ["'m'", "mode"])
    save("runtime_w", [node("ConvTranspose", ["x", "w"], ["y"], name="deconv", strides=[2, 2])],
         {**x, "w": ((2, 2, 3, 3), "float32")}, {}, ["'deconv'", "weight", "run time"])
    return out


def test_bad_input_one_line(tmp_path, capsys):
    """gen exits non-zero with one stderr line naming the node and the
    attribute or input, and writes nothing (the CLI in process: test_cli.py
    runs it as a subprocess for the general error paths)."""
    from cuvil_mcu import cli
    from test_cli import files_in
    for f, words in _bad_models(tmp_path):
        out = tmp_path / f"out_{f.stem}"
        code = cli.main(["gen", str(f), "-o", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("cuvil-mcu: error: "), (f.name, code, err)
        assert all(w in err[0] for w in words), f"{f.name}: {err[0]!r} lacks {words}"
        assert files_in(out) == [], f"{f.name}: {files_in(out)} written"


def upsample_layers(seed: int = 0):
    """The int8 ConvTranspose and Resize layers every board runs
    (tests/test_layers_on_boards.py): test_convtranspose's cases plus
    shapes for the DSP / Helium kernels' paths (C % 4 != 0, odd M, merged
    phases, M % 4 != 0), and bilinear / nearest Resizes on another input."""
    from test_convtranspose import INT8_CASES, qdq_model
    extra = [((1, 5, 4, 4), (5, 7, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), True, True),
             ((1, 16, 3, 5), (16, 8, 2, 2), dict(strides=[2, 2]), True, False),
             ((1, 12, 4, 4), (12, 9, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True, False)]
    model, feeds = qdq_model(seed=seed, cases=INT8_CASES + extra)
    g = model.graph
    g.initializer.extend([helper.make_tensor("roi", 1, [0], [])])
    g.input.append(helper.make_tensor_value_info("r", 3, [1, 5, 6, 7]))
    for i, (mode, coord, sc) in enumerate([("linear", "half_pixel", (1, 1, 2, 2)),
                                           ("linear", "align_corners", (1, 1, 1.5, 0.6)),
                                           ("nearest", "asymmetric", (1, 1, 2, 3))]):
        g.initializer.append(helper.make_tensor(f"rs{i}", 1, [4], list(sc)))
        g.node.extend([helper.make_node("DequantizeLinear", ["r", "xs", "xz"], [f"rf{i}"]),
                       helper.make_node("Resize", [f"rf{i}", "roi", f"rs{i}"], [f"ro{i}"], mode=mode,
                                        coordinate_transformation_mode=coord),
                       helper.make_node("QuantizeLinear", [f"ro{i}", "xs", "xz"], [f"r{i}"])])
        g.output.append(helper.make_tensor_value_info(f"r{i}", 3, None))
    feeds["r"] = np.random.RandomState(seed + 1).randint(-128, 128, (1, 5, 6, 7)).astype(np.int8)
    return model, feeds


@pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                    reason="needs apt packages gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm")
def test_float_layers_on_cortex_m4():
    """The float kernels (ConvTranspose phases, bilinear / nearest / cubic
    Resize) on the emulated Cortex-M4F: nearest and bilinear equal the host
    reference bit for bit (IEEE single, no contraction), ConvTranspose and
    cubic within 1e-6 of the output range."""
    from cuvil_mcu import reference
    from cuvil_mcu.sim import qemu
    rng = np.random.RandomState(4)
    nodes = [node("ConvTranspose", ["x", "w"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
             node("ConvTranspose", ["x", "w1"], ["u"], strides=[2, 2], group=3)]
    outs = ["t", "u"]
    for i, mode in enumerate(("linear", "nearest", "cubic")):
        nodes.append(node("Resize", ["x", "", "s"], [f"r{i}"], mode=mode))
        outs.append(f"r{i}")
    model = make_model(nodes, {"x": ((1, 3, 4, 5), "float32")}, outs,
                       {"w": rng.randn(3, 2, 3, 3).astype(np.float32), "w1": rng.randn(3, 2, 2, 2).astype(np.float32),
                        "s": np.array([1, 1, 2, 1.5], np.float32)}, opset=13)
    c = compile_model(model, board="qemu-mps2-an386")
    x = rng.randn(1, 3, 4, 5).astype(np.float32)
    r = qemu.simulate(c, [x[None]])
    assert "warning:" not in r.warnings, r.warnings
    ref = reference.run(c.graph, {"x": x})
    for name, y in zip(c.graph.outputs, r.outputs):
        e = ref[name]
        if name in ("r0", "r1"):
            assert_exact(y[0], e, f"{name} on the M4 vs reference")
        else:
            assert np.abs(y[0] - e).max() <= 1e-6 * np.abs(e).max(), f"{name}: {np.abs(y[0] - e).max()}"
