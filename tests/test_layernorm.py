import numpy as np
import pytest

from helpers import check_op, check_strict_builds, make_model, node
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ShapeError, UnsupportedOpError

RNG = np.random.RandomState(2024)
SHAPE = (2, 3, 4, 5)


def _x(shape=SHAPE):
    return (RNG.randn(*shape) * 2 + 0.5).astype(np.float32)


def _ln_model(axis, bias, shape=SHAPE, outputs=("y",), param_shape=None, **attrs):
    norm = shape[axis:] if param_shape is None else param_shape
    inits = {"scale": RNG.randn(*norm).astype(np.float32)}
    ins = ["x", "scale"]
    if bias:
        inits["bias"] = RNG.randn(*norm).astype(np.float32)
        ins.append("bias")
    if axis is not None:
        attrs["axis"] = axis
    return make_model([node("LayerNormalization", ins, list(outputs), **attrs)], {"x": (shape, "float32")},
                      list(outputs), inits, opset=17)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
def test_layernorm(axis, bias):
    check_op(_ln_model(axis, bias), {"x": _x()})


def test_default_axis_and_epsilon():
    m = _ln_model(None, True, param_shape=(5,), epsilon=0.5)
    check_op(m, {"x": _x()})


def test_mean_and_inv_std_outputs():
    m = _ln_model(-2, True, outputs=("y", "mean", "inv_std"))
    ref, _ = check_op(m, {"x": _x()})
    assert ref[1].shape == (2, 3, 1, 1) and ref[2].shape == (2, 3, 1, 1)


def test_broadcast_scale():
    # Scale (1, 5) and B (5,) broadcast to the normalized shape (4, 5).
    x = _x()
    m = make_model([node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-2)], {"x": (SHAPE, "float32")}, ["y"],
                   {"s": RNG.randn(1, 5).astype(np.float32), "b": RNG.randn(5).astype(np.float32)}, opset=17)
    check_op(m, {"x": x})


def test_runtime_scale():
    x = _x((3, 8))
    m = make_model([node("LayerNormalization", ["x", "s", "b"], ["y"])],
                   {"x": (x.shape, "float32"), "s": ((8,), "float32")}, ["y"], {"b": RNG.randn(8).astype(np.float32)},
                   opset=17)
    check_op(m, {"x": x, "s": RNG.randn(8).astype(np.float32)})


def test_constant_row_is_finite():
    # Zero variance: 1/sqrt(epsilon) keeps the output finite (y = B).
    x = np.ones((2, 6), np.float32)
    ref, c = check_op(_ln_model(-1, True, shape=(2, 6)), {"x": x})
    assert np.isfinite(c[0]).all()


def test_in_place():
    x = _x((4, 6))
    b = RNG.randn(6).astype(np.float32)
    m = make_model([node("Add", ["x", "b"], ["t"]), node("LayerNormalization", ["t", "b"], ["y"])],
                   {"x": (x.shape, "float32")}, ["y"], {"b": b}, opset=17)
    c = compile_model(m)
    assert c.plan.tensor_offset["t"] == c.plan.tensor_offset["y"]
    check_op(m, {"x": x})


@pytest.mark.parametrize("opset,form", [(13, "attr"), (18, "input")])
def test_spelled_out_layernorm(opset, form):
    """ReduceMean / Sub / Pow / ReduceMean / Add / Sqrt / Div / Mul / Add, as
    older PyTorch exports LayerNorm, runs through the Reduce and element-wise
    kernels."""
    shape = (2, 7, 16)
    x = _x(shape)
    g, b = RNG.randn(16).astype(np.float32), RNG.randn(16).astype(np.float32)
    inits = {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32), "g": g, "b": b}
    if form == "attr":
        mean = lambda i, o: node("ReduceMean", [i], [o], axes=[-1], keepdims=1)  # noqa: E731
    else:
        inits["axes"] = np.array([-1], np.int64)
        mean = lambda i, o: node("ReduceMean", [i, "axes"], [o], keepdims=1)  # noqa: E731
    nodes = [mean("x", "mu"), node("Sub", ["x", "mu"], ["d"]), node("Pow", ["d", "two"], ["d2"]),
             mean("d2", "var"), node("Add", ["var", "eps"], ["ve"]), node("Sqrt", ["ve"], ["sd"]),
             node("Div", ["d", "sd"], ["n"]), node("Mul", ["n", "g"], ["ng"]), node("Add", ["ng", "b"], ["y"])]
    m = make_model(nodes, {"x": (shape, "float32")}, ["y"], inits, opset=opset)
    ref, _ = check_op(m, {"x": x})
    # The same numbers as the fused op (an independent spelling).
    fused = make_model([node("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-5)],
                       {"x": (shape, "float32")}, ["y"], {"g": g, "b": b}, opset=17)
    ref2, _ = check_op(fused, {"x": x})
    np.testing.assert_allclose(ref[0], ref2[0], rtol=1e-5, atol=1e-5)


def test_unsupported_and_errors():
    with pytest.raises(UnsupportedOpError, match="stash_type"):
        compile_model(_ln_model(-1, True, stash_type=0))
    with pytest.raises(ShapeError, match="does not broadcast"):
        compile_model(_ln_model(-1, True, param_shape=(4,)))
    m = make_model([node("LayerNormalization", ["x", "s"], ["y"])],
                   {"x": ((3, 8), "float32"), "s": ((1, 8), "float32")}, ["y"], opset=17)
    m.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 1
    with pytest.raises(UnsupportedOpError, match="run-time Scale"):
        compile_model(m)


def test_macs():
    assert compile_model(_ln_model(-1, True)).macs == 3 * 120


def test_strict_builds():
    nodes = [node("LayerNormalization", ["x", "s", "b"], ["y", "mu", "isd"], axis=-2),
             node("LayerNormalization", ["x", "s"], ["z"], axis=-2)]
    m = make_model(nodes, {"x": (SHAPE, "float32")}, ["y", "mu", "isd", "z"],
                   {"s": RNG.randn(4, 5).astype(np.float32), "b": RNG.randn(4, 5).astype(np.float32)}, opset=17)
    check_strict_builds(m, {"x": _x()})
