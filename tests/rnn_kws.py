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


# A firmware-shaped host program for --stream models: model_reset() every
# argv[1] frames (the utterance length), and per frame write input 0, run,
# print output 0 -- the caller never touches the state, so what carries it
# from one call to the next is the arena.
STREAM_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#define MODEL_IMPLEMENTATION
#include "model.h"
static unsigned char arena[MODEL_ARENA_SIZE] MODEL_ARENA_ATTR;
int main(int argc, char **argv)
{
    static unsigned char frame[MODEL_INPUT_0_BYTES];
    const long per = argc > 1 ? atol(argv[1]) : 0;
    long frames = 0;
    memset(arena, 0x5A, sizeof arena);   /* garbage: only model_reset may clear the state */
    while (fread(frame, 1, sizeof frame, stdin) == sizeof frame) {
        if (per > 0 && frames % per == 0) model_reset(arena);
        memcpy(model_input(arena, 0), frame, sizeof frame);
        if (model_run(arena) != MODEL_OK) return 1;
        fwrite(model_output(arena, 0), 1, MODEL_OUTPUT_0_BYTES, stdout);
        ++frames;
    }
    return frames ? 0 : 2;
}
"""


def stream_build(header: str, tmp: Path, cc: str = "gcc") -> Path:
    """Build STREAM_MAIN around header with -Werror (and the sanitizers)."""
    import subprocess
    (tmp / "model.h").write_text(header)
    (tmp / "main.c").write_text(STREAM_MAIN)
    exe = tmp / "stream"
    subprocess.run([cc, "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-pedantic",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{tmp}",
                    str(tmp / "main.c"), "-o", str(exe), "-lm"], check=True, capture_output=True, text=True)
    return exe


def stream_run(exe: Path, frames: np.ndarray, per: int, out_shape, out_dtype) -> np.ndarray:
    """Outputs after each frame (frames: [n, *input 0 shape]; a reset every per frames)."""
    import subprocess
    r = subprocess.run([str(exe), str(per)], input=np.ascontiguousarray(frames).tobytes(), capture_output=True,
                       timeout=120, check=True)
    return np.frombuffer(r.stdout, out_dtype).reshape((len(frames),) + tuple(out_shape))
