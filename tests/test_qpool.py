"""int8/uint8 pooling: com.microsoft.QLinearAveragePool,
com.microsoft.QLinearGlobalAveragePool and cuvil.QMaxPool.

Generated C vs the numpy reference: exact, both requantization modes, both
layouts (NHWC is what passes/layout.py produces; the NCHW kernels run with
the layout pass switched off). Float mode vs onnxruntime (optimizations on):
exact for every case here (onnxruntime dequantizes, sums in float32 in
window order and requantizes with nearbyint, or uses its integer global
average pool when the kernel covers the input; both reproduced). Fixed mode
vs the plain average in double: within 1 LSB; TFLM's rounding is checked on
hand-computed cases and against TFLM's outputs on the MLPerf Tiny models that
pool (average pool and softmax of VWW and person detection, bit-exact).
cuvil.QMaxPool vs onnxruntime's MaxPool on the same int8/uint8 tensor: exact.
"""
import shutil

import numpy as np
import pytest
from onnx import helper

from cuvil_mcu import passes
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import CuvilError
from cuvil_mcu.ir import Node
from cuvil_mcu.ops.qpool import window_tables
from cuvil_mcu.passes import layout
from helpers import run_c, run_ort, run_ref
from qhelpers import MS, assert_exact, check_modes, literal_qdq_pool, lsb_diff, qmodel, qparams, rand_q
from test_qelementwise import MODELS, _run_model_samples

AVG_CASES = [
    ("x2", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("x2", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "count_include_pad": 1}),
    ("x2", {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [0, 1, 0, 1]}),
    ("x2", {"kernel_shape": [3, 2], "strides": [2, 1], "ceil_mode": 1, "pads": [1, 0, 1, 1], "count_include_pad": 1}),
    ("x2", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("x2", {"kernel_shape": [3, 2], "auto_pad": "VALID", "strides": [1, 2]}),
    ("x2", {"kernel_shape": [7, 6]}),                      # covers the input: onnxruntime's global path
    ("x1", {"kernel_shape": [3], "pads": [1, 2], "strides": [2]}),
    ("x1", {"kernel_shape": [4], "pads": [1, 1], "strides": [3], "ceil_mode": 1, "count_include_pad": 1}),
]
SHAPES = {"x2": (2, 3, 7, 6), "x1": (2, 3, 9)}


def _params(dt, equal):
    off = 0 if dt == "int8" else 128
    x = (0.05, 3 + off)
    y = x if equal else (0.031, -5 + off)
    return {**qparams("x", *x, dt), **qparams("y", *y, dt)}, x, y


def _avg_model(dt, equal, channels_last=0, cases=AVG_CASES):
    inits, _, _ = _params(dt, equal)
    nodes = [helper.make_node("QLinearAveragePool", [src, "x_s", "x_z", "y_s", "y_z"], [f"y{i}"], domain=MS,
                              channels_last=channels_last, **attrs) for i, (src, attrs) in enumerate(cases)]
    shapes = {k: (s if not channels_last else (s[0],) + s[2:] + (s[1],)) for k, s in SHAPES.items()}
    return qmodel(nodes, {k: (s, dt) for k, s in shapes.items()}, {f"y{i}": dt for i in range(len(cases))}, inits)


def _avg_real(cases, x_params, y_params, dt, channels_last=0):
    """The plain average in double (onnxruntime's divisor), quantized once:
    what the fixed mode must stay within 1 LSB of. The windows come from
    ops/qpool.window_tables; the float mode's exact agreement with
    onnxruntime in the same tests is what checks that geometry."""
    (xs, xz), (ys, yz) = x_params, y_params
    info = np.iinfo(dt)

    def run(feeds):
        out = []
        for src, attrs in cases:
            x = feeds[src].astype(np.float64)
            if channels_last:
                x = np.moveaxis(x, -1, 1)
            x = xs * (x - xz)
            x4 = x if x.ndim == 4 else x[:, :, None, :]
            n = Node("n", "p", [], [], dict(attrs))
            tabs = window_tables(n, x.shape, bool(attrs.get("count_include_pad", 0)))
            if len(tabs) == 1:
                tabs = [(np.array([[0, 1, 1]], np.int32), 1)] + tabs
            (th, _), (tw, _) = tabs
            y = np.zeros(x4.shape[:2] + (len(th), len(tw)))
            for i, (h0, hn, hc) in enumerate(th):
                for j, (w0, wn, wc) in enumerate(tw):
                    y[:, :, i, j] = x4[:, :, h0:h0 + hn, w0:w0 + wn].sum(axis=(2, 3)) / (hc * wc)
            y = y if x.ndim == 4 else y[:, :, 0]
            if channels_last:
                y = np.moveaxis(y, 1, -1)
            out.append(np.clip(np.rint(y / ys) + yz, info.min, info.max))
        return out
    return run


@pytest.mark.parametrize("equal", [True, False], ids=["same_params", "requant"])
@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_average_pool(dt, equal):
    rng = np.random.RandomState(21)
    m = _avg_model(dt, equal)
    feeds = {k: rand_q(rng, s, dt) for k, s in SHAPES.items()}
    _, xp, yp = _params(dt, equal)
    check_modes(m, feeds, ort_lsb=0, fixed_vs=_avg_real(AVG_CASES, xp, yp, dt), fixed_lsb=1)


def test_average_pool_channels_last_attribute():
    """com.microsoft's own channels_last = 1 (NHWC in and out), which
    onnxruntime implements too."""
    dt = "int8"
    rng = np.random.RandomState(22)
    cases = AVG_CASES[:4] + AVG_CASES[7:8]
    m = _avg_model(dt, False, channels_last=1, cases=cases)
    feeds = {k: rand_q(rng, (s[0],) + s[2:] + (s[1],), dt) for k, s in SHAPES.items()}
    _, xp, yp = _params(dt, False)
    check_modes(m, feeds, ort_lsb=0, fixed_vs=_avg_real(cases, xp, yp, dt, channels_last=1), fixed_lsb=1)


@pytest.fixture
def nchw_kernels(monkeypatch):
    """Compile without the layout pass: the NCHW (channels_last 0) kernels run."""
    monkeypatch.setattr(passes, "PIPELINE", [p for p in passes.PIPELINE if p is not layout])


def test_nchw_kernels(nchw_kernels):
    rng = np.random.RandomState(23)
    for dt in ("int8", "uint8"):
        inits, _, _ = _params(dt, False)
        nodes = [helper.make_node("QLinearAveragePool", [src, "x_s", "x_z", "y_s", "y_z"], [f"y{i}"], domain=MS,
                                  **attrs) for i, (src, attrs) in enumerate(AVG_CASES)]
        nodes.append(helper.make_node("QLinearAveragePool", ["x2", "x_s", "x_z", "x_s", "x_z"], ["eq"], domain=MS,
                                      **AVG_CASES[1][1]))
        nodes.append(helper.make_node("QLinearGlobalAveragePool", ["x2", "x_s", "x_z", "y_s", "y_z"], ["gap"],
                                      domain=MS))
        nodes.append(helper.make_node("QLinearGlobalAveragePool", ["x2", "x_s", "x_z", "x_s", "x_z"], ["gap_eq"],
                                      domain=MS))
        inputs = {k: (s, dt) for k, s in SHAPES.items()}
        m = qmodel(nodes, inputs, {n.output[0]: dt for n in nodes}, inits)
        g = compile_model(m).graph
        assert not any(n.attrs.get("_channels_last") for n in g.nodes)
        feeds = {k: rand_q(rng, s, dt) for k, s in SHAPES.items()}
        check_modes(m, feeds, ort_lsb=0)
        maxp = [helper.make_node("QMaxPool", [src], [f"m{i}"], domain="cuvil", **a) for i, (src, a) in enumerate(MAX_CASES)]
        twin = [helper.make_node("MaxPool", [src], [f"m{i}"], **a) for i, (src, a) in enumerate(MAX_CASES)]
        outs = {f"m{i}": dt for i in range(len(MAX_CASES))}
        res = check_modes(qmodel(maxp, inputs, outs), feeds, ort_lsb=None, modes=("fixed",))["fixed"]
        for r, o in zip(res, run_ort(qmodel(twin, inputs, outs), feeds)):
            assert_exact(r, o, f"{dt} NCHW QMaxPool vs onnxruntime MaxPool")


@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_global_average_pool(dt):
    rng = np.random.RandomState(24)
    off = 0 if dt == "int8" else 128
    inits = {**qparams("x", 0.05, 3 + off, dt), **qparams("y", 0.011, -5 + off, dt)}
    shapes = [(2, 3, 5, 7), (1, 4, 9), (1, 2, 13, 11)]
    nodes, inputs, cases = [], {}, []
    for i, s in enumerate(shapes):
        for cl in (0, 1):
            shape = s if not cl else (s[0],) + s[2:] + (s[1],)
            inputs[f"x{i}_{cl}"] = (shape, dt)
            for eq in (True, False):
                ys = "x" if eq else "y"
                nodes.append(helper.make_node("QLinearGlobalAveragePool", [f"x{i}_{cl}", "x_s", "x_z", f"{ys}_s",
                                                                           f"{ys}_z"], [f"y{len(cases)}"],
                                              domain=MS, channels_last=cl))
                cases.append((f"x{i}_{cl}", cl, (0.05, 3 + off) if eq else (0.011, -5 + off)))
    m = qmodel(nodes, inputs, {f"y{i}": dt for i in range(len(cases))}, inits)
    feeds = {k: rand_q(rng, s, dt) for k, (s, _) in inputs.items()}
    info = np.iinfo(dt)

    def real(f):
        out = []
        for src, cl, (ys, yz) in cases:
            x = 0.05 * (f[src].astype(np.float64) - 3 - off)
            axes = tuple(range(1, x.ndim - 1)) if cl else tuple(range(2, x.ndim))
            out.append(np.clip(np.rint(x.mean(axis=axes, keepdims=True) / ys) + yz, info.min, info.max))
        return out

    check_modes(m, feeds, ort_lsb=0, fixed_vs=real, fixed_lsb=1)


def _hand_pool_model():
    dt = "int8"
    nodes = [
        # same parameters in and out: TFLM's AVERAGE_POOL_2D recipe
        helper.make_node("QLinearAveragePool", ["a", "z_s", "z_z", "z_s", "z_z"], ["avg"], domain=MS,
                         kernel_shape=[1, 2], strides=[1, 2]),
        helper.make_node("QLinearAveragePool", ["a", "o_s", "o_z", "o_s", "o_z"], ["avg_zp"], domain=MS,
                         kernel_shape=[1, 2], strides=[1, 2]),
        helper.make_node("QLinearAveragePool", ["b", "t_s", "t_z", "t_s", "t_z"], ["avg_pad"], domain=MS,
                         kernel_shape=[1, 2], strides=[1, 2], pads=[0, 1, 0, 1], count_include_pad=1),
        # TFLM MEAN: same parameters (C division), and with requantization
        helper.make_node("QLinearGlobalAveragePool", ["c", "z_s", "z_z", "z_s", "z_z"], ["mean"], domain=MS),
        helper.make_node("QLinearGlobalAveragePool", ["d", "z_s", "z_z", "z_s", "o_z"], ["mean_rq"], domain=MS),
    ]
    inits = {"z_s": np.float32(0.5), "z_z": np.int8(0), "o_s": np.float32(0.5), "o_z": np.int8(1),
             "t_s": np.float32(0.25), "t_z": np.int8(2)}
    inputs = {"a": ((1, 1, 1, 4), "int8"), "b": ((1, 1, 1, 2), "int8"), "c": ((1, 1, 1, 2), "int8"),
              "d": ((1, 2, 2, 2), "int8")}
    return qmodel(nodes, inputs, {n.output[0]: "int8" for n in nodes}, inits)


def test_tflm_hand_computed_cases():
    """TFLM's formulas by hand (fixed mode follows them for models tf2onnx
    wrote: converted from TensorFlow / TFLite, whose reference is TFLM).
    AVERAGE_POOL: the sum of the raw codes, (acc + c/2)/c or (acc - c/2)/c:
      [2, 3 | -2, -3] -> 2.5 -> 3, -2.5 -> -3 (onnxruntime: 2, -2, half even);
      zero point 1, same codes: raw 5/2 -> 3 (real 1.5 -> code 2.5: half away
      from zero in the code domain), onnxruntime 2;
      count_include_pad, zp 2, [6, 7] with a padding tap each side:
      (2 + 6) / 2 = 4, (7 + 2) / 2 = 4.5 -> 5 (onnxruntime 4, half even).
    MEAN, same parameters: (-1 + -2) / 2 = -1 (C division truncates;
      onnxruntime rounds -1.5 to -2).
    MEAN with requantization (x 0.5 zp 0 -> y 0.5 zp 1, n = 4): (m, s) =
      QuantizeMultiplier(1) = (2^30, 1); b = min(log2 4, 32, 32) = 2,
      m' = (2^30 << 2) / 4 = 2^30, s' = -1: sums 5 and 7 give
      RDBPOT(SRDHM(5, 2^30), 1) = RDBPOT(3, 1) = 2 (+1 = 3; the exact 1.25
      would give 2: TFLM's double rounding) and RDBPOT(4, 1) = 2 (+1 = 3)."""
    m = _hand_pool_model()
    m.producer_name = "tf2onnx"
    expect = {"fixed": [[3, -3], [3, -3], [4, 5], [-1], [3, 3]],
              "float": [[2, -2], [2, -2], [4, 4], [-2], [2, 3]]}
    ort = run_ort(m, HAND_FEEDS, optimize=True)
    _check_hand(m, expect)
    for got, want in zip(ort, expect["float"]):
        assert_exact(got, np.array(want, np.int8).reshape(got.shape), "onnxruntime on the hand-computed cases")


def test_onnx_rounding_hand_computed_cases():
    """Fixed mode's ONNX rounding (every model tf2onnx did not write) by
    hand: the real average as a literal DequantizeLinear -> AveragePool ->
    QuantizeLinear gives it, rounded once, half to even, in the centered
    domain (QuantizeLinear rounds x / scale, then adds the zero point):
      [2, 3 | -2, -3], zp 0: 2.5 -> 2, -2.5 -> -2;
      zp 1, same codes: centered (1 + 2) / 2 = 1.5 -> 2 (+1 = 3),
        (-3 - 4) / 2 = -3.5 -> -4 (+1 = -3) (TFLM 3, -3 by another road;
        onnxruntime's fused QLinearAveragePool adds the zero point before
        rounding: 2, -2);
      count_include_pad, zp 2, [6, 7] with a padding tap (real 0) each side:
        (0 + 4) / 2 = 2 (+2 = 4), (5 + 0) / 2 = 2.5 -> 2 (+2 = 4) (TFLM 4, 5).
    MEAN, same parameters: (-1 - 2) / 2 = -1.5 -> -2 (TFLM truncates: -1).
    MEAN with requantization (x 0.5 zp 0 -> y 0.5 zp 1, n = 4): sums 5 and 7:
      1.25 -> 1 (+1 = 2; TFLM's double rounding: 3), 1.75 -> 2 (+1 = 3)."""
    m = _hand_pool_model()
    assert m.producer_name != "tf2onnx"
    _check_hand(m, {"fixed": [[2, -2], [3, -3], [4, 4], [-2], [2, 3]],
                    "float": [[2, -2], [2, -2], [4, 4], [-2], [2, 3]]})
    # the same numbers from onnxruntime running the literal QDQ form of the
    # average pools (graph optimizations off)
    got = _literal_qdq_pools(HAND_FEEDS)
    for name, want in (("avg", [2, -2]), ("avg_zp", [3, -3]), ("avg_pad", [4, 4]), ("mean", [-2]),
                       ("mean_rq", [2, 3])):
        assert_exact(got[name].reshape(-1), np.array(want, np.int8), f"onnxruntime literal QDQ {name}")


HAND_FEEDS = {"a": np.array([2, 3, -2, -3], np.int8).reshape(1, 1, 1, 4),
              "b": np.array([6, 7], np.int8).reshape(1, 1, 1, 2),
              "c": np.array([-1, -2], np.int8).reshape(1, 1, 1, 2),
              "d": np.array([1, 1, 1, 2, 1, 2, 2, 2], np.int8).reshape(1, 2, 2, 2)}


def _literal_qdq_pools(feeds) -> dict:
    """The hand model's pools as DequantizeLinear -> (Global)AveragePool ->
    QuantizeLinear, run by onnxruntime with graph optimizations off."""
    S = {"z": (0.5, 0), "o": (0.5, 1), "t": (0.25, 2)}
    cases = [("avg", "a", "z", "z", dict(kernel_shape=[1, 2], strides=[1, 2])),
             ("avg_zp", "a", "o", "o", dict(kernel_shape=[1, 2], strides=[1, 2])),
             ("avg_pad", "b", "t", "t", dict(kernel_shape=[1, 2], strides=[1, 2], pads=[0, 1, 0, 1],
                                           count_include_pad=1)),
             ("mean", "c", "z", "z", None), ("mean_rq", "d", "z", "o", None)]
    return {name: run_ort(literal_qdq_pool(feeds[x].shape, S[qi], S[qo], attrs), {"x": feeds[x]})[0]
            for name, x, qi, qo, attrs in cases}


def test_rounding_option_overrides_the_origin():
    """--rounding tflm / onnx picks the rules whatever wrote the model (the
    hand-computed values above), and gen says when fixed mode rounds as ONNX."""
    m = _hand_pool_model()
    _check_hand(m, {"fixed": [[3, -3], [3, -3], [4, 5], [-1], [3, 3]]}, rounding="tflm")
    m.producer_name = "tf2onnx"
    _check_hand(m, {"fixed": [[2, -2], [3, -3], [4, 4], [-2], [2, 3]]}, rounding="onnx")
    assert not [n for n in compile_model(m).graph.notes if "literal QDQ" in n]
    notes = [n for n in compile_model(m, rounding="onnx").graph.notes if "literal QDQ" in n]
    assert len(notes) == 1 and notes[0].startswith("5 average pool"), notes
    with pytest.raises(CuvilError, match="--rounding 'even'"):
        compile_model(m, rounding="even")


def _check_hand(m, expect, **kw):
    for mode in expect:
        for got, c_got, want, name in zip(run_ref(m, HAND_FEEDS, requant=mode, **kw),
                                          run_c(m, HAND_FEEDS, requant=mode, **kw),
                                          expect[mode], [o.name for o in m.graph.output]):
            want = np.array(want, np.int8).reshape(got.shape)
            assert_exact(got, want, f"{mode} {name}")
            assert_exact(c_got, want, f"{mode} {name} (C)")


MAX_CASES = [
    ("x2", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("x2", {"kernel_shape": [2, 2], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]}),
    ("x2", {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("x2", {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [1, 2]}),
    ("x2", {"kernel_shape": [3, 2], "pads": [2, 0, 1, 1], "strides": [3, 2], "ceil_mode": 1}),
    ("x1", {"kernel_shape": [3], "pads": [2, 1], "strides": [2]}),
    ("x1", {"kernel_shape": [2], "dilations": [3], "strides": [1]}),
]


@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_max_pool(dt):
    """Same model twice: cuvil.QMaxPool for us, ONNX MaxPool on the integer
    tensor for onnxruntime. Padding never wins (the inputs are all negative
    for int8, all small for uint8, so a zero from the padding would show)."""
    rng = np.random.RandomState(25)
    nodes = [helper.make_node("QMaxPool", [src], [f"y{i}"], domain="cuvil", **a) for i, (src, a) in enumerate(MAX_CASES)]
    twin = [helper.make_node("MaxPool", [src], [f"y{i}"], **a) for i, (src, a) in enumerate(MAX_CASES)]
    inputs = {k: (s, dt) for k, s in SHAPES.items()}
    outs = {f"y{i}": dt for i in range(len(MAX_CASES))}
    m, m_twin = qmodel(nodes, inputs, outs), qmodel(twin, inputs, outs)
    info = np.iinfo(dt)
    hi = -1 if dt == "int8" else 30
    feeds = {k: rng.randint(info.min, hi, size=s).astype(dt) for k, s in SHAPES.items()}
    res = check_modes(m, feeds, ort_lsb=None)
    for r, o in zip(res["fixed"], run_ort(m_twin, feeds)):
        assert_exact(r, o, "QMaxPool vs onnxruntime MaxPool")
    for a, b in zip(res["fixed"], res["float"]):
        assert_exact(a, b, "QMaxPool: both modes")


def test_max_pool_window_in_padding():
    """pads >= kernel (a folded Pad can do that; onnxruntime refuses it): a
    window with no tap inside the input gives the type's minimum."""
    m = qmodel([helper.make_node("QMaxPool", ["x"], ["y"], domain="cuvil", kernel_shape=[1, 1], pads=[1, 0, 0, 0])],
               {"x": ((1, 1, 2, 2), "int8")}, {"y": "int8"})
    x = np.array([[[[5, -7], [100, -128]]]], np.int8)
    want = np.array([[[[-128, -128], [5, -7], [100, -128]]]], np.int8)
    assert_exact(run_ref(m, {"x": x})[0], want, "reference")
    assert_exact(run_c(m, {"x": x})[0], want, "C")


def test_errors():
    dt = "int8"
    inits = {**qparams("x", 0.05, 3, dt), **qparams("y", 0.05, 3, dt), "bad_s": np.float32(-1.0)}
    cases = [
        (helper.make_node("QLinearAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, name="p",
                          kernel_shape=[1, 1], pads=[1, 0, 0, 0]),
         (1, 1, 2, 2), r"'p'.*a window lies entirely in the padding"),
        (helper.make_node("QLinearAveragePool", ["x", "x_s", "x_z", "bad_s", "y_z"], ["y"], domain=MS, name="p",
                          kernel_shape=[2, 2]),
         (1, 1, 2, 2), r"'p'.*y scale 'bad_s' must be finite and > 0"),
        (helper.make_node("QLinearAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, name="p",
                          kernel_shape=[2, 2, 2]),
         (1, 1, 2, 2, 2), r"'p'.*1-D and 2-D pooling"),
        (helper.make_node("QLinearGlobalAveragePool", ["x", "x_s", "bad_s", "y_s", "y_z"], ["y"], domain=MS,
                          name="g"),
         (1, 1, 2, 2), r"'g'.*zero point 'bad_s' is float32"),
    ]
    for node, shape, match in cases:
        with pytest.raises(CuvilError, match=match):
            compile_model(qmodel([node], {"x": (shape, dt)}, {"y": dt}, inits))
    m = qmodel([helper.make_node("QMaxPool", ["x"], ["y"], domain="cuvil", kernel_shape=[2, 2], name="mp")],
               {"x": ((1, 1, 2, 2), "float32")}, {"y": "float32"})
    with pytest.raises(CuvilError, match=r"'mp'.*X 'x' is float32; expected int8 or uint8"):
        compile_model(m)


@pytest.mark.parametrize("name", ["vww_mobilenet_v1_025", "person_detect"])
def test_models_match_tflm(name):
    """MobileNet-style models ending in AveragePool (3x3 / 6x6, same scale in
    and out: TFLM's AVERAGE_POOL_2D recipe) and Softmax: fixed mode is
    bit-exact with the TFLM interpreter on the 8 stored samples."""
    d = np.load(f"{MODELS}/{name}/samples_int8.npz")
    c, out = _run_model_samples(f"{MODELS}/{name}/model_int8.onnx", d["inputs"], "fixed")
    assert any(n.op_type == "com.microsoft.QLinearAveragePool" for n in c.graph.nodes)
    assert_exact(out, d["expected_tflm"].reshape(out.shape), f"{name}: C (fixed) vs TFLM")
    assert lsb_diff(out, d["expected_ort"].reshape(out.shape)) <= 1


def test_onnx_rounding_global_average_matches_literal_qdq():
    """DenseNet-121's last pool (onnxruntime's QDQ: 7 x 7 after ReLU, x 0.0397
    zp -128 -> y 0.00848 zp -128): fixed mode with ONNX's rounding (one
    rounding of the real mean) against onnxruntime running DequantizeLinear
    -> GlobalAveragePool -> QuantizeLinear as written, on 8 x 64 channels:
    every output equal (TFLM's MEAN, double rounding, put 11% a step off),
    in the reference and in the generated C; also with equal parameters
    (ties half to even in the centered domain)."""
    rng = np.random.RandomState(4)
    for ys, yz in ((0.008483218, -128), (0.039716974, -128)):
        m = literal_qdq_pool((8, 64, 7, 7), (0.039716974, -128), (ys, yz), out_shape=(8, 64, 1, 1))
        x = np.clip(rng.exponential(30.0, (8, 64, 7, 7)) - 128, -128, 127).astype(np.int8)
        want = run_ort(m, {"x": x})[0]
        ref = run_ref(m, {"x": x})[0]
        assert ref.dtype == np.int8
        assert_exact(ref, want, f"reference (y scale {ys}) vs onnxruntime literal QDQ")
        assert_exact(run_c(m, {"x": x})[0], want, f"C (y scale {ys}) vs onnxruntime literal QDQ")


def test_single_rounding_helpers_in_c(tmp_path):
    """The header's __requant_single and __div_even (ONNX's one rounding, half
    to even) against quant.requantize_single / quant.div_even on the edges
    (acc at INT32_MIN / INT32_MAX, multipliers 0 .. 2^31 - 1, every shift
    from -31 to 30, exact ties) and random values, built with UBSan."""
    import subprocess

    from cuvil_mcu import quant
    rng = np.random.RandomState(6)
    m = _hand_pool_model()
    c = compile_model(m, rounding="onnx")
    assert "__requant_single(" in c.header and "__div_even(" in c.header
    accs = [0, 1, -1, 2, -2, 3, -3, 2 ** 31 - 1, -2 ** 31, 2 ** 30, -2 ** 30] + list(rng.randint(-2 ** 31, 2 ** 31 - 1, 40))
    mults = [0, 1, 2 ** 30, 2 ** 31 - 1, 1518500250] + list(rng.randint(2 ** 30, 2 ** 31 - 1, 6))
    cases = np.array([(a, mu, sh) for a in accs for mu in mults for sh in range(-31, 31)], np.int64)
    divs = np.array([(a, d) for a in list(range(-40, 41)) + [2 ** 31 - 1, -2 ** 31] for d in (1, 2, 3, 4, 9, 49, 64)],
                    np.int64)
    (tmp_path / "model.h").write_text(c.header)
    (tmp_path / "t.c").write_text(
        '#define MODEL_IMPLEMENTATION\n#include "model.h"\n#include <stdio.h>\n'
        "int main(void)\n{\n    long a, m, s;\n    char k;\n"
        "    while (scanf(\" %c %ld %ld %ld\", &k, &a, &m, &s) == 4)\n"
        "        printf(\"%ld\\n\", k == 'r' ? (long)model__requant_single((int32_t)a, (int32_t)m, (int32_t)s)\n"
        "                                    : (long)model__div_even((int32_t)a, (int32_t)m));\n"
        "    return 0;\n}\n")
    exe = tmp_path / "t"
    subprocess.run(["gcc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=undefined",
                    "-fno-sanitize-recover=all", str(tmp_path / "t.c"), "-o", str(exe)], check=True)
    lines = [f"r {a} {mu} {sh}" for a, mu, sh in cases] + [f"d {a} {d} 0" for a, d in divs]
    out = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    got = np.array(out.stdout.split(), np.int64)
    want = np.concatenate([quant.requantize_single(cases[:, 0], cases[:, 1], cases[:, 2]),
                           quant.div_even(divs[:, 0], divs[:, 1])])
    bad = np.flatnonzero(got != want)
    assert got.shape == want.shape and bad.size == 0, \
        f"{bad.size} differ; first: {lines[bad[0]]}: C {got[bad[0]]}, numpy {want[bad[0]]}"
    ties = (cases[:, 1] == 2 ** 30) & (cases[:, 2] == -2) & (cases[:, 0] % 8 == 4)
    assert ties.any() and np.all(quant.requantize_single(cases[ties, 0], 2 ** 30, -2) % 2 == 0)


# --------------------------------------------------------------------------- global average, DSP (qgap_dsp)

@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
                    reason="arm-none-eabi-gcc / qemu-system-arm not installed")
@pytest.mark.parametrize("rounding", ["tflm", "onnx"])
def test_global_avgpool_dsp_exact(rounding):
    """qgap_dsp on QEMU's Cortex-M4 (the shapes of test_mve_add_pool's GAPS:
    a channel tail, batch 2, 255 pixels, MobileNetV2's 3x3 x 1280 head, a
    left shift; 256 pixels fall back) and the exact-tie cases (x scale 1 ->
    y scale 0.5 over 16 and 4 pixels), plus a fused clamp: every output
    equals the reference, whichever requantization each node got (SMMLA
    where gap_smmla's constants hold, else the 64-bit single rounding or
    __mbqm)."""
    from qhelpers import rerender, sim_exact
    from test_mve_add_pool import GAPS
    rng = np.random.RandomState(8)
    inits = {**qparams("x", 0.05, -3, "int8"), **qparams("y", 0.011, -5, "int8"), **qparams("z", 0.026, 17, "int8"),
             **qparams("u", 0.0254, -2, "int8"), **qparams("p", 1.0, 0, "int8"), **qparams("h", 0.5, 0, "int8")}
    nodes, inputs = [], {}
    for i, s in enumerate(GAPS + [(3, 4, 4, 40), (3, 2, 2, 40)]):
        inputs[f"x{i}"] = (s, "int8")
        xs, ys = ("x", "yzu"[i % 3]) if i < len(GAPS) else ("p", "h")
        nodes.append(helper.make_node("QLinearGlobalAveragePool", [f"x{i}", f"{xs}_s", f"{xs}_z", f"{ys}_s", f"{ys}_z"],
                                      [f"g{i}"], domain=MS, channels_last=1, name=f"gap{i}"))
    model = qmodel(nodes, inputs, {f"g{i}": "int8" for i in range(len(nodes))}, inits)
    feeds = {k: rand_q(rng, s, "int8") if int(k[1:]) < len(GAPS) else rng.randint(-8, 8, s).astype(np.int8)
             for k, (s, _) in inputs.items()}
    c = compile_model(model, board="qemu-mps2-an386", rounding=rounding)
    calls = [ln for ln in c.header.split("\n") if ln.strip().startswith("model__qgap_dsp_") and ln.endswith(");")]
    assert len(calls) == len(nodes) - 1, f"qgap_dsp calls: {calls}"
    assert "__asm__(\"smmla" in c.header and ("int64_t pr" in c.header or "__mbqm(a" in c.header), \
        "both requantizations of qgap_dsp are exercised"
    sim_exact(c, feeds)
    c2 = rerender(c, lambda n: (-0.3, 0.2) if n.name in ("gap0", "gap2") else None)
    _, ref = sim_exact(c2, feeds)
    assert (ref["g2"] == ref["g2"].max()).sum() > 10


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
                    reason="arm-none-eabi-gcc / qemu-system-arm not installed")
def test_whole_input_avgpool_dsp_exact():
    """QLinearAveragePool windows over the whole input (TFLM's recipe, as
    VWW's last pool) through qgap_dsp on QEMU's Cortex-M4: 9 taps x 256
    channels, a channel tail (13) in batch 2, 255 and 125 taps with sums at
    the int16 limit, and with a fused clamp: equal to the reference. A
    padded 3x3 pool keeps the pool kernel, and so does an even count (10):
    TFLM rounds its halves away from zero, which no SMMLA constant does for
    both signs."""
    from qhelpers import rerender, sim_exact
    from test_mve_add_pool import _pool_model
    pools = [((1, 3, 3, 256), dict(kernel_shape=[3, 3]), -128), ((2, 3, 3, 13), dict(kernel_shape=[3, 3]), 5),
             ((1, 15, 17, 4), dict(kernel_shape=[15, 17]), 0), ((1, 25, 5, 64), dict(kernel_shape=[25, 5]), 127),
             ((1, 5, 5, 8), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 3),
             ((1, 2, 5, 8), dict(kernel_shape=[2, 5]), 3)]
    rng = np.random.RandomState(5)
    feeds = {f"x{i}": rand_q(rng, s, "int8") for i, (s, _, _) in enumerate(pools)}
    feeds["x2"][..., :2] = -128
    feeds["x3"][..., :8] = 127
    c = compile_model(_pool_model(pools), board="qemu-mps2-an386")
    calls = [ln for ln in c.header.split("\n") if ln.strip().startswith("model__qgap_dsp_") and ln.endswith(");")]
    assert len(calls) == 4, f"qgap_dsp calls (the first four pools): {calls}"
    sim_exact(c, feeds)
    c2 = rerender(c, lambda n: (-0.6, 0.9) if n.name in ("pool0", "pool3") else None)
    _, ref = sim_exact(c2, feeds)
    assert (ref["o0"] == ref["o0"].max()).sum() > 10
