"""Demo check: run the generated C on a sample input (`cuvil-mcu run`) and
compare it with onnxruntime on the same ONNX file."""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

model, sample = sys.argv[1], sys.argv[2]
with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / "y.npy"
    subprocess.run(["cuvil-mcu", "run", model, "--input", sample, "-o", str(out)], check=True)
    ours = np.load(out)
x = np.load(sample)
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
name = sess.get_inputs()[0].name
theirs = np.stack([sess.run(None, {name: xi})[0] for xi in x])
err = float(np.abs(ours - theirs).max())
agree = int((ours.reshape(len(x), -1).argmax(1) == theirs.reshape(len(x), -1).argmax(1)).sum())
print(f"generated C vs onnxruntime on {len(x)} samples: max abs error {err:.3g}, argmax agree {agree}/{len(x)}")
sys.exit(0 if err <= 1e-4 * max(1.0, float(np.abs(theirs).max())) else 1)
