import shutil

import numpy as np
import pytest

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.errors import ShapeError, UnsupportedOpError
from helpers import assert_close, check_op, check_strict_builds, make_model, node, run_ort

RNG = np.random.RandomState(4321)

PERMS = [
    ((7,), None),
    ((3, 5), None),
    ((3, 5), [1, 0]),
    ((2, 3, 5), [2, 0, 1]),
    ((2, 3, 5), [0, 2, 1]),
    ((1, 3, 4, 5), [0, 2, 3, 1]),   # NCHW -> NHWC
    ((1, 4, 5, 3), [0, 3, 1, 2]),   # NHWC -> NCHW
    ((2, 3, 4, 5), None),
    ((2, 1, 3, 1, 5), [4, 1, 0, 3, 2]),
    ((2, 3, 2, 3, 2), [1, 3, 0, 4, 2]),
    ((2, 3, 1, 2, 3, 2), [5, 3, 1, 0, 2, 4]),
    ((3, 4, 5), [0, 1, 2]),         # identity: removed by cancel_transposes
]


@pytest.mark.parametrize("shape,perm", PERMS, ids=[f"{s}-{p}" for s, p in PERMS])
def test_transpose_float(shape, perm):
    x = RNG.randn(*shape).astype(np.float32)
    attrs = {} if perm is None else {"perm": perm}
    m = make_model([node("Transpose", ["x"], ["y"], **attrs)], {"x": (shape, "float32")}, ["y"])
    check_op(m, {"x": x}, rel_c=0, rel_ort=0)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_transpose_other_element_sizes(dtype):
    x = RNG.randint(-100 if dtype != "uint8" else 0, 100, size=(2, 3, 5)).astype(dtype)
    m = make_model([node("Transpose", ["x"], ["y"], perm=[1, 2, 0])], {"x": (x.shape, dtype)}, ["y"])
    ref, c = check_op(m, {"x": x}, rel_c=0, rel_ort=0)
    assert c[0].dtype == np.dtype(dtype)


def test_transpose_then_add_with_constant():
    x = RNG.randn(1, 3, 4, 6).astype(np.float32)
    b = RNG.randn(6, 1, 1).astype(np.float32)
    m = make_model([node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]), node("Add", ["t", "b"], ["y"])],
                   {"x": (x.shape, "float32")}, ["y"], {"b": b})
    check_op(m, {"x": x})


def test_transpose_of_constant_is_folded():
    w = RNG.randn(3, 4).astype(np.float32)
    x = RNG.randn(4, 3).astype(np.float32)
    m = make_model([node("Transpose", ["w"], ["wt"]), node("Add", ["x", "wt"], ["y"])],
                   {"x": (x.shape, "float32")}, ["y"], {"w": w})
    check_op(m, {"x": x})
    assert [n.op_type for n in compile_model(m).graph.nodes] == ["Add"]


def test_bad_perm_is_a_shape_error():
    from onnx import TensorProto, helper
    g = helper.make_graph([node("Transpose", ["x"], ["y"], perm=[0, 0, 1])], "bad",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ShapeError, match="perm"):
        compile_model(m)


def test_rank_7_runtime_transpose_unsupported():
    shape = (1, 2, 1, 2, 1, 2, 3)
    m = make_model([node("Transpose", ["x"], ["y"])], {"x": (shape, "float32")}, ["y"])
    with pytest.raises(UnsupportedOpError, match="rank 7"):
        compile_model(m)


# --- every data-movement kernel through the strict compile matrix ----------

def _all_kernels_model():
    """One model that renders every kernel and copy form of the data-movement
    ops: strided and row copies in float and 1/8-byte types, gather table,
    pad fill, single memcpy, broadcast copy, floor."""
    nodes = [
        node("Transpose", ["x"], ["xt"], perm=[0, 2, 3, 1]),                   # strided f32
        node("Concat", ["x", "c"], ["xc"], axis=2),                            # rows + const from flash
        node("Split", ["xc", "sp"], ["s0", "s1"], axis=3),                     # rows
        node("Slice", ["x", "st", "en", "ax", "stp"], ["sl"]),                 # negative step
        node("Gather", ["x", "gi"], ["g"], axis=3),                            # offset table
        node("Pad", ["x", "pads", "pv"], ["pd"]),                              # fill + rows
        node("Expand", ["v", "eshape"], ["ex"]),                               # broadcast stride 0
        node("Floor", ["x"], ["fl"]),
        node("Transpose", ["q"], ["qt"], perm=[1, 0]),                         # u8
        node("Pad", ["l", "lpads"], ["lp"]),                                   # u64 fill
        node("Concat", ["x", "x"], ["x2"], axis=0),                            # single memcpy
    ]
    inits = {
        "c": RNG.randn(1, 3, 2, 5).astype(np.float32),
        "sp": np.array([2, 3], np.int64),
        "st": np.array([-1, 0], np.int64), "en": np.array([-1000, 4], np.int64),
        "ax": np.array([3, 2], np.int64), "stp": np.array([-2, 3], np.int64),
        "gi": np.array([[4, 0], [2, 2]], np.int64),
        "pads": np.array([0, 0, 1, -1, 0, 2, 0, 1], np.int64), "pv": np.array(-2.5, np.float32),
        "eshape": np.array([2, 1, 4, 1], np.int64),
        "lpads": np.array([1, 0, 0, 2], np.int64),
    }
    inputs = {"x": ((1, 3, 4, 5), "float32"), "v": ((3, 1, 5), "float32"),
              "q": ((3, 4), "uint8"), "l": ((2, 3), "int64")}
    outs = ["xt", "s0", "s1", "sl", "g", "pd", "ex", "fl", "qt", "lp", "x2"]
    m = make_model(nodes, inputs, outs, inits)
    feeds = {"x": RNG.randn(1, 3, 4, 5).astype(np.float32), "v": RNG.randn(3, 1, 5).astype(np.float32),
             "q": RNG.randint(0, 255, (3, 4)).astype(np.uint8), "l": RNG.randint(-9, 9, (2, 3)).astype(np.int64)}
    return m, feeds


def test_all_data_movement_kernels_compile_strict_and_match():
    m, feeds = _all_kernels_model()
    c = compile_model(m)
    kernels = {k.split("(")[0] for k in c.header.split("static void ")[1:]}
    for want in ("model__copy_strided_f32", "model__copy_strided_rows_f32", "model__gather_f32",
                 "model__pad_fill_f32", "model__copy_strided_u8", "model__pad_fill_u64"):
        assert want in kernels, f"{want} not rendered; kernels: {sorted(kernels)}"
    ref = reference.run(c.graph, feeds)
    for name, r in zip(c.graph.outputs, run_ort(m, feeds)):
        assert_close(ref[name], r, 0, f"{name}: reference vs onnxruntime")
    skipped = check_strict_builds(m, feeds, rel=0)
    assert not [cc for cc, _ in skipped if cc == "gcc"], "gcc is required for this test"


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
                    reason="arm-none-eabi-gcc / qemu-system-arm not installed")
def test_rgb_nchw_to_nhwc_bytes_on_the_m4():
    """copy_c3_dsp (3 planes of bytes interleaved, 4 pixels per step, the
    rest one by one) on QEMU's Cortex-M4 equals numpy's transpose: 35 pixels
    (8 steps, two a loop turn, + 3), 16 pixels (no tail) and 12 (3 steps,
    one a turn)."""
    from qhelpers import sim_exact
    shapes = {"a": (1, 3, 5, 7), "b": (1, 3, 4, 4), "c": (1, 3, 3, 4)}
    m = make_model([node("Transpose", [n], [n + "t"], perm=[0, 2, 3, 1]) for n in shapes],
                   {n: (s, "int8") for n, s in shapes.items()}, [n + "t" for n in shapes])
    c = compile_model(m, board="qemu-mps2-an386")
    assert c.header.count("__copy_c3_dsp_") == 6, "every transpose takes copy_c3_dsp"
    feeds = {n: RNG.randint(-128, 128, size=s).astype(np.int8) for n, s in shapes.items()}
    _, ref = sim_exact(c, feeds)
    for n in shapes:
        assert np.array_equal(ref[n + "t"], np.transpose(feeds[n], (0, 2, 3, 1)))
