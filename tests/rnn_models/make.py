"""Train and export the recurrent keyword models the tests use:
tests/rnn_models/kws_lstm.onnx and kws_gru.onnx (our own artifacts,
committed, so the tests need no torch).

Each is input [1, frames, 10] named 'mfcc' (frames dynamic, 49 in
training) -> nn.LSTM / nn.GRU (hidden 64, batch_first) -> the last time
step -> nn.Linear(64, 12) -> 'logits' [1, 12], trained for a few seconds
on the synthetic task of tests/rnn_kws.py (seeded) and exported by
PyTorch's TorchScript ONNX exporter (opset 14), the path the issue's
'/rnn/LSTM' node names come from.

    python tests/rnn_models/make.py     # needs torch; prints test accuracy
"""
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rnn_kws import CLASSES, COEFFS, FRAMES, INPUT, model_path, samples  # noqa: E402

HIDDEN = 64


class Kws(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(COEFFS, HIDDEN, batch_first=True)
        self.fc = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


def train(kind: str) -> Kws:
    torch.manual_seed(0)
    m = Kws(kind)
    x, y = samples(4000, seed=1)
    x, y = torch.from_numpy(x[:, 0]), torch.from_numpy(y)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for epoch in range(12):
        perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(x), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(x[idx]), y[idx])
            loss.backward()
            opt.step()
    m.eval()
    xt, yt = samples(1000, seed=2)
    with torch.no_grad():
        acc = float((m(torch.from_numpy(xt[:, 0])).argmax(1).numpy() == yt).mean())
    print(f"{kind}: test accuracy {acc:.3f}")
    return m


def export(kind: str, m: Kws) -> None:
    dummy = torch.zeros(1, FRAMES, COEFFS)
    torch.onnx.export(m, (dummy,), str(model_path(kind)), input_names=[INPUT], output_names=["logits"],
                      dynamic_axes={INPUT: {1: "frames"}}, opset_version=14, dynamo=False)
    print("wrote", model_path(kind))


if __name__ == "__main__":
    torch.set_num_threads(1)
    for kind in ("lstm", "gru"):
        export(kind, train(kind))
