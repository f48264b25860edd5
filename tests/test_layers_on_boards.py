"""Every int8 layer test model on every emulated Cortex-M core and both
NEON (Cortex-A) boards.

The layer models of the int8 op tests (test_qconv, test_qgemm, test_qpool,
test_qelementwise, test_qsoftmax; test_isa_mve's extra conv shapes;
test_resize's ConvTranspose and Resize layers; the integer Sum, LRN and
per-channel affine kernels), each
many independent layers in one graph, compiled for each QEMU board (so each
board's kernels: portable C on the M3, DSP on the M4 / M7 / M33, Helium on
the M55, NEON on the Cortex-A7 / A53), run as one bare-metal firmware per
model and board (a Linux executable under qemu-user for NEON), and compared
bit for bit with the numpy reference interpreter on the host. The op tests
themselves check the reference against onnxruntime and TFLM's recipes.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from onnx import helper

from cuvil_mcu.compiler import compile_model
from qhelpers import MS, assert_graph_outputs_exact, qmodel, qparams, rand_q, sim_exact
from test_isa_neon import BOARD_PARAMS as NEON_BOARDS, run_board

_MCU = pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")),
                          reason="needs apt packages gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm")
BOARDS = [pytest.param(b, marks=_MCU) for b in
          ("qemu-mps2-an385", "qemu-mps2-an386", "qemu-mps2-an500", "qemu-mps2-an505", "qemu-mps3-an547")] \
    + NEON_BOARDS


def _run_exact(c, feeds):
    if c.board.id.startswith("qemu-"):
        r, _ = sim_exact(c, feeds, min_unique=2)
        assert "warning:" not in r.warnings, r.warnings
    else:   # NEON: built with -Wall -Wextra -Werror -pedantic, run under qemu-user
        assert_graph_outputs_exact(c.graph, run_board(c, feeds), feeds, min_unique=2)


def _conv():
    from test_qconv import conv_model
    return conv_model("int8", seed=7)


def _conv_u8():
    from test_qconv import conv_model
    return conv_model("uint8", seed=8)


def _conv_extra():
    from test_isa_mve import extra_model
    return extra_model(seed=5)


def _gemm():
    from test_qgemm import gemm_model
    return gemm_model("int8")


def _matmul():
    from test_qgemm import matmul_model
    return matmul_model("int8")


def _avg_pool():
    from test_qpool import _avg_model
    return _avg_model("int8", equal=False, channels_last=1), None


def _max_pool():
    from test_qpool import MAX_CASES, SHAPES
    nodes = [helper.make_node("QMaxPool", [src], [f"y{i}"], domain="cuvil", **a) for i, (src, a) in enumerate(MAX_CASES)]
    return qmodel(nodes, {k: (s, "int8") for k, s in SHAPES.items()}, {f"y{i}": "int8" for i in range(len(MAX_CASES))}), None


def _add():
    from test_qelementwise import _binary_model
    return _binary_model("QLinearAdd", "int8", (0.05, 0.031, 0.07)), None


def _mul():
    from test_qelementwise import _binary_model
    return _binary_model("QLinearMul", "int8", (0.05, 0.031, 0.07)), None


def _lut():
    from test_qelementwise import _lut_model
    return _lut_model("int8", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.13})]), None


def _softmax():
    from test_qsoftmax import _softmax_model
    return _softmax_model("int8", 0.09, [(1 / 256, -128), (0.01, 5)]), None


def _concat():
    inits = {**qparams("y", 0.05, 3, "int8"), **qparams("a", 0.05, 3, "int8"), **qparams("b", 0.031, -7, "int8")}
    cases = [(1, [(2, 3, 4), (2, 5, 4)]), (-1, [(3, 2), (3, 7)]), (0, [(2, 3), (1, 3)])]
    nodes, inputs = [], {}
    for i, (axis, shapes) in enumerate(cases):
        ins = ["y_s", "y_z"]
        for p, s in zip("ab", shapes):
            inputs[f"{p}{i}"] = (s, "int8")
            ins += [f"{p}{i}", f"{p}_s", f"{p}_z"]
        nodes.append(helper.make_node("QLinearConcat", ins, [f"y{i}"], domain=MS, axis=axis))
    return qmodel(nodes, inputs, {f"y{i}": "int8" for i in range(len(cases))}, inits), None


def _upsample():
    from test_resize import upsample_layers
    return upsample_layers(seed=9)


def _classic():
    """cuvil.QSum (three inputs, broadcast), cuvil.QLRN (channels-last after
    the layout pass) and cuvil.QAffine, int8."""
    c = 6
    inits = {**qparams("y", 0.09, -4, "int8"), **qparams("a", 0.05, 3, "int8"), **qparams("b", 0.2, -7, "int8"),
             **qparams("l", 0.03, 1, "int8"),
             "S": np.linspace(-1.5, 2.0, c).astype(np.float32), "T": np.linspace(-0.7, 0.9, c).astype(np.float32)}
    nodes = [helper.make_node("QSum", ["y_s", "y_z", "a", "a_s", "a_z", "b", "b_s", "b_z", "a", "a_s", "a_z"], ["s"],
                              domain="cuvil"),
             helper.make_node("QLRN", ["a", "a_s", "a_z", "l_s", "l_z"], ["l"], domain="cuvil", size=3, alpha=0.2),
             helper.make_node("QAffine", ["a", "a_s", "a_z", "y_s", "y_z", "S", "T"], ["f"], domain="cuvil")]
    return qmodel(nodes, {"a": ((1, c, 5, 4), "int8"), "b": ((1, c, 1, 1), "int8")},
                  {"s": "int8", "l": "int8", "f": "int8"}, inits), None


FAMILIES = {"conv": _conv, "conv_uint8": _conv_u8, "conv_extra": _conv_extra, "gemm": _gemm, "matmul": _matmul,
            "avg_pool": _avg_pool, "max_pool": _max_pool, "add": _add, "mul": _mul, "lut": _lut,
            "softmax": _softmax, "concat": _concat, "upsample": _upsample, "classic": _classic}


def _feeds(model, seed):
    from onnx import helper as h
    rng = np.random.RandomState(seed)
    out = {}
    for vi in model.graph.input:
        dt = np.dtype(h.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)).name
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        out[vi.name] = rand_q(rng, shape, dt)
    return out


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_layers_exact_on_board(family, board):
    built = FAMILIES[family]()
    model, feeds = built if isinstance(built, tuple) else (built, None)
    feeds = feeds if feeds is not None else _feeds(model, seed=len(family))
    _run_exact(compile_model(model, board=board, requant="fixed"), feeds)


@pytest.mark.parametrize("board", [pytest.param(b, marks=_MCU) for b in ("qemu-mps2-an386", "qemu-mps3-an547")]
                         + NEON_BOARDS)
@pytest.mark.parametrize("family", ["conv", "gemm", "add", "avg_pool", "softmax", "upsample", "classic"])
def test_layers_float_requant_on_board(family, board):
    """--requant float (onnxruntime's float scales) on the cores with an FPU / NEON."""
    model, feeds = FAMILIES[family]() if family in ("conv", "gemm", "upsample") else (FAMILIES[family]()[0], None)
    feeds = feeds if feeds is not None else _feeds(model, seed=len(family))
    _run_exact(compile_model(model, board=board, requant="float"), feeds)
