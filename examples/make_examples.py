"""Regenerate the shipped example: examples/kws_float.onnx (the seeded float
DS-CNN keyword spotter the tests also build), examples/kws_input.npy
(4 seeded input samples stacked on a leading axis) and examples/kws_calib.npz
(16 other seeded samples under the model's input name: the calibration set
for `--quantize int8`).

    python examples/make_examples.py
"""
import sys
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from models import dscnn  # noqa: E402

onnx.save(dscnn(seed=0), HERE / "kws_float.onnx")
x = np.random.RandomState(7).randn(4, 1, 1, 49, 10).astype(np.float32)
np.save(HERE / "kws_input.npy", x)
calib = np.random.RandomState(11).randn(16, 1, 1, 49, 10).astype(np.float32)
np.savez(HERE / "kws_calib.npz", input=calib)
print("wrote", HERE / "kws_float.onnx", HERE / "kws_input.npy", HERE / "kws_calib.npz")
