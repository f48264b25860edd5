"""The reference models in ../shared/models (MLPerf Tiny + TFLM examples,
converted from TFLite by tf2onnx) with TFLM's outputs on 8 seeded inputs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "models"
NAMES = ["hello_world", "ad_fc_autoencoder", "micro_speech", "kws_dscnn", "ic_resnet8",
         "vww_mobilenet_v1_025", "person_detect"]
CLASSIFIERS = {"micro_speech", "kws_dscnn", "ic_resnet8", "vww_mobilenet_v1_025", "person_detect"}


def available() -> bool:
    return (SHARED / "meta.json").exists()


def model_path(name: str) -> Path:
    return SHARED / name / "model_int8.onnx"


def samples(name: str) -> dict[str, np.ndarray]:
    d = np.load(SHARED / name / "samples_int8.npz")
    return {k: d[k] for k in d.files}


def meta() -> dict:
    return json.loads((SHARED / "meta.json").read_text())


def run_generated_c(name: str, **compile_kw):
    """Compile a shared model and run its generated C on the host over all
    8 samples: (Compiled, inputs shaped for the model, outputs shaped like
    expected_tflm, the samples dict)."""
    from cuvil_mcu.compiler import compile_model
    from cuvil_mcu.sim import host
    c = compile_model(str(model_path(name)), **compile_kw)
    g = c.graph
    s = samples(name)
    x = s["inputs"]
    inp = x.reshape((x.shape[0],) + g.tensors[g.inputs[0]].shape)
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    out = host.run(exe, [inp], c.out_specs, x.shape[0])[0].reshape(s["expected_tflm"].shape)
    return c, inp, out, s
