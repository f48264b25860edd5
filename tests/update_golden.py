"""Regenerate the golden header snapshots in tests/golden/.

test_header.py::test_golden_header compares the headers generated for the
models below with these files byte for byte: a pure refactor of the compiler
must leave them identical. When a change to the generated C is intended,
review `git diff tests/golden/` after running

    python tests/update_golden.py

and commit the new snapshots with the change that caused them.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

# this checkout's compiler, not whichever copy pip installed last (as tests/conftest.py does for pytest)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from helpers import make_model, node  # noqa: E402

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"


def small_model():
    """x[1,3,4,5] -> Add(bias per channel) + Relu (fused) -> Reshape [1,60]
    -> Mul(w) -> Sub(c) -> Sigmoid -> y[1,60]. Several kernels, a fused
    activation, a view and in-place element-wise ops."""
    rng = np.random.RandomState(20240601)
    b = rng.randn(3, 1, 1).astype(np.float32)
    w = rng.randn(60).astype(np.float32)
    c = rng.randn(1, 60).astype(np.float32)
    nodes = [
        node("Add", ["x", "b"], ["t0"], name="add_bias"),
        node("Relu", ["t0"], ["t1"], name="relu"),
        node("Reshape", ["t1", "shape"], ["t2"], name="flatten"),
        node("Mul", ["t2", "w"], ["t3"], name="scale"),
        node("Sub", ["t3", "c"], ["t4"], name="shift"),
        node("Sigmoid", ["t4"], ["y"], name="sigmoid"),
    ]
    return make_model(nodes, {"x": ((1, 3, 4, 5), "float32")}, ["y"],
                      {"b": b, "w": w, "c": c, "shape": np.array([1, 60], np.int64)}, name="golden_small")


def two_input_model():
    """a[2,7], b[7] -> Mul -> Sub(a) -> Tanh -> y0[2,7]; Max(a, 0.25) -> Flatten -> y1[2,7]."""
    nodes = [
        node("Mul", ["a", "b"], ["m"], name="mul"),
        node("Sub", ["m", "a"], ["s"], name="sub"),
        node("Tanh", ["s"], ["y0"], name="tanh"),
        node("Max", ["a", "q"], ["mx"], name="max"),
        node("Flatten", ["mx"], ["y1"], name="flat", axis=1),
    ]
    return make_model(nodes, {"a": ((2, 7), "float32"), "b": ((7,), "float32")}, ["y0", "y1"],
                      {"q": np.array([0.25], np.float32)}, name="golden_two_inputs")


# snapshot file -> (model builder, compile_model keyword arguments)
GOLDEN = {
    "small.h": (small_model, {"name": "model"}),
    "two_inputs_vww.h": (two_input_model, {"name": "vww", "board": "nucleo-f746zg"}),
}


def render(filename: str) -> str:
    from cuvil_mcu.compiler import compile_model

    build, kw = GOLDEN[filename]
    return compile_model(build(), **kw).header


def main() -> int:
    GOLDEN_DIR.mkdir(exist_ok=True)
    for filename in GOLDEN:
        path = GOLDEN_DIR / filename
        text = render(filename)
        old = path.read_bytes() if path.exists() else None
        if old != text.encode():
            path.write_bytes(text.encode())
            print(f"updated {path}")
        else:
            print(f"unchanged {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
