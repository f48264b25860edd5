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
