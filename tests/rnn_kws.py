"""A synthetic keyword-spotting task over 49x10 MFCC-like frames, for the
recurrent keyword models in tests/rnn_models/ (trained by
tests/rnn_models/make.py) and their tests.

Class k (of CLASSES) is a smooth 10-coefficient trajectory, its own seeded
template of WORD frames, placed at a random frame offset with a random
gain, in Gaussian noise; class 0 is noise only ("silence"). A model has to
integrate over time to tell the classes apart, which is what a recurrent
layer is for. numpy's legacy RandomState streams are stable across numpy
versions, so the samples the tests draw are the ones the models were
trained on the same distribution of.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

FRAMES, COEFFS, CLASSES, WORD = 49, 10, 12, 24
NOISE = 1.0
HERE = Path(__file__).resolve().parent / "rnn_models"
INPUT = "mfcc"


def templates() -> np.ndarray:
    rng = np.random.RandomState(1234)
    raw = rng.randn(CLASSES, WORD + 8, COEFFS)
    kernel = np.hanning(9) / np.hanning(9).sum()
    smooth = np.stack([[np.convolve(raw[k, :, c], kernel, mode="valid") for c in range(COEFFS)]
                       for k in range(CLASSES)]).transpose(0, 2, 1)          # [K, WORD, C]
    smooth /= smooth.std(axis=(1, 2), keepdims=True)
    smooth[0] = 0.0
    return smooth.astype(np.float32)


def samples(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(x [n, 1, FRAMES, COEFFS] float32, labels [n] int64)."""
    rng = np.random.RandomState(seed)
    tpl = templates()
    labels = rng.randint(0, CLASSES, size=n)
    x = NOISE * rng.randn(n, FRAMES, COEFFS)
    for i, k in enumerate(labels):
        start = rng.randint(0, FRAMES - WORD + 1)
        x[i, start:start + WORD] += rng.uniform(0.4, 1.0) * tpl[k]
    return x[:, None].astype(np.float32), labels.astype(np.int64)


def model_path(kind: str) -> Path:
    return HERE / f"kws_{kind}.onnx"
