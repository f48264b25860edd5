"""Shared by the deployment-form tests (.so, .wasm, weights blob): the CLI
as a subprocess, and the int8 KWS model with TFLM's outputs as the
independent reference."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shared_models

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, env=None, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "cuvil_mcu.cli", *map(str, args)], capture_output=True,
                          text=True, env=e, cwd=cwd)


def gen(*args, env=None):
    r = cli("gen", *args, env=env)
    assert r.returncode == 0, f"gen {' '.join(map(str, args))} failed:\n{r.stdout}\n{r.stderr}"
    return r


def fails_cleanly(r, out: Path | None = None) -> str:
    """One line on stderr, non-zero exit, no traceback, nothing written."""
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuvil-mcu: error:"), r.stderr
    if out is not None:
        assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())
    return lines[0]


def kws_int8():
    """(model path, inputs (8, 1, 49, 10, 1) int8, TFLM's outputs (8, 12))."""
    if not shared_models.available():
        pytest.skip("../shared/models not present")
    s = shared_models.samples("kws_dscnn")
    x = s["inputs"]
    return shared_models.model_path("kws_dscnn"), x.reshape(x.shape[0], 1, 49, 10, 1), s["expected_tflm"]


def host_outputs(c, x: np.ndarray) -> np.ndarray:
    """The compiled one-input model's first output on the host, for the
    samples x (samples, *input shape)."""
    from cuvil_mcu.sim import host
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    return host.run(exe, [x], c.out_specs, x.shape[0])[0]
