"""MobileNetV2, width 0.35, 96x96x3 input, 2 classes, quantized to int8 QDQ:
the network the memory benchmarks use for inverted residuals (issue #12).

    python examples/make_mobilenet_v2.py      # -> examples/mobilenet_v2_035_96_int8.onnx

Seeded random weights (torch.manual_seed), BatchNorm statistics from a few
seeded batches of random images (train mode, so each layer's output is
normalised like a trained network's), exported to ONNX (opset 13) and
quantized with onnxruntime's quantize_static (QDQ, per-channel int8 weights,
int8 activations, MinMax on 16 seeded random images). The numbers are
meaningless as a classifier; the shapes, quantization and memory behaviour
are those of the real network (MobileNetV2 as in Sandler et al. 2018,
channel counts rounded to multiples of 8 as in the reference
implementation: 16, 8, 8, 16, 24, 32, 56, 112, then 1280).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "mobilenet_v2_035_96_int8.onnx"
SIZE, WIDTH, CLASSES = 96, 0.35, 2
# expansion t, output channels c, repeats n, first stride s
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
            (6, 320, 1, 1)]


def divisible(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def build():
    import torch
    from torch import nn

    def cbr(cin, cout, k, s, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return layers + [nn.ReLU6()] if act else layers

    class Block(nn.Module):
        def __init__(self, cin, cout, s, t):
            super().__init__()
            hid = cin * t
            layers = (cbr(cin, hid, 1, 1) if t != 1 else []) + cbr(hid, hid, 3, s, groups=hid) \
                + cbr(hid, cout, 1, 1, act=False)
            self.body = nn.Sequential(*layers)
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    cin = divisible(32 * WIDTH)
    feats = cbr(3, cin, 3, 2)
    for t, c, n, s in SETTINGS:
        cout = divisible(c * WIDTH)
        for i in range(n):
            feats.append(Block(cin, cout, s if i == 0 else 1, t))
            cin = cout
    feats += cbr(cin, 1280, 1, 1)
    return nn.Sequential(*feats, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, CLASSES))


def main() -> None:
    import tempfile

    import onnx
    import torch
    from ort_qdq import quantize_qdq   # examples/ort_qdq.py (this folder)

    torch.manual_seed(0)
    net = build()
    net.train()
    with torch.no_grad():   # BatchNorm statistics of random images
        for _ in range(4):
            net(torch.rand(8, 3, SIZE, SIZE) * 2 - 1)
    net.eval()
    x = torch.rand(1, 3, SIZE, SIZE) * 2 - 1
    F32 = Path(tempfile.mkdtemp()) / "mobilenet_v2_f32.onnx"
    torch.onnx.export(net, x, str(F32), input_names=["input"], output_names=["logits"], opset_version=13,
                      dynamo=False)
    rng = np.random.RandomState(1)
    calib = [{"input": rng.uniform(-1, 1, (1, 3, SIZE, SIZE)).astype(np.float32)} for _ in range(16)]
    quantize_qdq(F32, OUT, calib)
    m = onnx.load(str(OUT))
    onnx.checker.check_model(m)
    print(f"wrote {OUT} ({OUT.stat().st_size:,} B)", file=sys.stderr)


if __name__ == "__main__":
    main()
