"""A small U-Net, 1x3x32x32 in, 2-class 32x32 logits out: the end-to-end
model for ConvTranspose and Resize (issue #13 item 2).

    python examples/make_unet.py      # -> examples/unet_float.onnx, examples/unet_int8.onnx

conv -> downsample (MaxPool) twice, a bottleneck, then up twice: a
ConvTranspose (kernel 2, stride 2) and a bilinear Upsample
(F.interpolate, align_corners=False: Resize linear with pytorch_half_pixel
coordinates), each followed by a concat with the encoder's skip tensor and
convs; a 1x1 head. Seeded random weights (torch.manual_seed), BatchNorm
statistics from a few seeded batches of random images (train mode, so each
layer's output is normalised like a trained network's), exported to ONNX
(opset 13) and quantized with onnxruntime's quantize_static (QDQ,
per-channel int8 weights, int8 activations, MinMax on 16 seeded random
images). The numbers are meaningless as a segmentation; the shapes and
quantization are those of the real thing.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FLOAT = HERE / "unet_float.onnx"
INT8 = HERE / "unet_int8.onnx"
SIZE, CLASSES = 32, 2


def build():
    import torch
    from torch import nn
    from torch.nn import functional as F

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc1, self.enc2 = block(3, 8), block(8, 16)
            self.mid = block(16, 32)
            self.up2 = nn.ConvTranspose2d(32, 16, 2, 2)
            self.dec2 = block(32, 16)
            self.red1 = nn.Conv2d(16, 8, 1)
            self.dec1 = block(16, 8)
            self.head = nn.Conv2d(8, CLASSES, 1)

        def forward(self, x):
            s1 = self.enc1(x)                                   # 32x32x8
            s2 = self.enc2(F.max_pool2d(s1, 2))                 # 16x16x16
            m = self.mid(F.max_pool2d(s2, 2))                   # 8x8x32
            d2 = self.dec2(torch.cat([self.up2(m), s2], 1))     # ConvTranspose up, 16x16x16
            u1 = F.interpolate(self.red1(d2), scale_factor=2, mode="bilinear", align_corners=False)
            d1 = self.dec1(torch.cat([u1, s1], 1))              # Resize up, 32x32x8
            return self.head(d1)

    return UNet()


def main() -> None:
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
    torch.onnx.export(net, x, str(FLOAT), input_names=["image"], output_names=["logits"], opset_version=13,
                      dynamo=False)
    rng = np.random.RandomState(1)
    calib = [{"image": rng.uniform(-1, 1, (1, 3, SIZE, SIZE)).astype(np.float32)} for _ in range(16)]
    quantize_qdq(FLOAT, INT8, calib)
    for p in (FLOAT, INT8):
        onnx.checker.check_model(onnx.load(str(p)))
        print(f"wrote {p} ({p.stat().st_size:,} B)", file=sys.stderr)


if __name__ == "__main__":
    main()
