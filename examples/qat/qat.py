"""Quantization-aware training, end to end: train a small CNN in float, fine-
tune it with fake quantization whose ranges and rounding are cuvil-mcu's
integer arithmetic, export it as QDQ ONNX, compile it, and check the
compiled C against this file's own integer model bit for bit.

    python examples/qat/qat.py -o build/qat        # needs torch (pip install 'cuvil-mcu[torch]')
    cuvil-mcu gen build/qat/qat_int8.onnx --requant float -o build/qat/out

The task: 8x8 images holding a horizontal bar, a vertical bar or a
diagonal, with noise (seeded, made here). The network: Conv 3x3 (1->8) +
ReLU, Conv 3x3 stride 2 (8->8) + ReLU, Flatten, Linear (128->3).

What the fake quantization does, layer by layer (what the int8 kernels do):
- activations: asymmetric int8 over a range that includes 0 (min/max seen,
  an exponential moving average while fine-tuning, frozen for export):
  scale = (hi - lo) / 255, zero point = round(-128 - lo / scale); a ReLU
  output's range starts at 0, so its zero point is -128 and the ReLU is
  the int8 clamp;
- weights: symmetric per output channel, scale = max|w| / 127, q in
  [-127, 127];
- biases: int32 at scale in_scale * w_scale[c];
- rounding: half to even everywhere (torch.fake_quantize_*, np.rint).
`IntModel` then runs the frozen network in integers: int32 accumulation,
requantization with the float32 multiplier (in_scale * w_scale) / out_scale
rounded half to even (cuvil-mcu's --requant float, onnxruntime's QLinearConv),
saturation to int8.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

SEED = 15


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.6, (n, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 3, n)
    for i in range(n):
        k = int(rng.integers(1, 7))
        if y[i] == 0:
            x[i, 0, k, :] += 1.5
        elif y[i] == 1:
            x[i, 0, :, k] += 1.5
        else:
            x[i, 0, np.arange(8), (np.arange(8) + k) % 8] += 1.5
    return x, y.astype(np.int64)


# --- quantization parameters: the same formulas as cuvil_mcu/ptq.py ----------

def act_qparams(lo: float, hi: float) -> tuple[float, int]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    scale = float(np.float32(scale))
    zp = int(np.clip(np.rint(-128.0 - lo / scale), -128, 127))
    return scale, zp


def weight_scales(w: np.ndarray) -> np.ndarray:
    amax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1)
    return np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)


def build(torch):
    nn = torch.nn

    class Observer(nn.Module):
        """Min/max of a tensor: EMA while training with fake quantization."""

        def __init__(self, momentum: float = 0.05):
            super().__init__()
            self.register_buffer("lo", torch.tensor(0.0))
            self.register_buffer("hi", torch.tensor(0.0))
            self.seen, self.momentum, self.fake = False, momentum, False

        def forward(self, x):
            if self.training:
                lo, hi = float(x.detach().min()), float(x.detach().max())
                if not self.seen:
                    self.lo.fill_(lo), self.hi.fill_(hi)
                    self.seen = True
                else:
                    self.lo.mul_(1 - self.momentum).add_(self.momentum * lo)
                    self.hi.mul_(1 - self.momentum).add_(self.momentum * hi)
            if not self.fake:
                return x
            scale, zp = self.qparams()
            return torch.fake_quantize_per_tensor_affine(x, scale, zp, -128, 127)

        def qparams(self):
            return act_qparams(float(self.lo), float(self.hi))

    class QConv(nn.Module):
        """Conv (or Linear) whose weights and bias are fake-quantized as the
        int8 kernels store them, given the input observer's scale."""

        def __init__(self, layer, act_in: Observer):
            super().__init__()
            self.layer, self.act_in, self.fake = layer, act_in, False

        def qweights(self):
            w = self.layer.weight
            s = torch.from_numpy(weight_scales(w.detach().numpy()))
            s_in, _ = self.act_in.qparams()
            wq = torch.fake_quantize_per_channel_affine(w, s, torch.zeros(len(s), dtype=torch.int32), 0, -127, 127)
            bs = (s.double() * s_in).float()
            bq = torch.round(self.layer.bias / bs) * bs  # int32 bias, rounded half to even
            bq = self.layer.bias + (bq - self.layer.bias).detach()  # straight-through
            return wq, bq

        def forward(self, x):
            if not self.fake:
                return self.layer(x)
            wq, bq = self.qweights()
            if isinstance(self.layer, nn.Conv2d):
                return nn.functional.conv2d(x, wq, bq, self.layer.stride, self.layer.padding)
            return nn.functional.linear(x, wq, bq)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_in, self.q1, self.q2, self.q_out = Observer(), Observer(), Observer(), Observer()
            self.c1 = QConv(nn.Conv2d(1, 8, 3, padding=1), self.q_in)
            self.c2 = QConv(nn.Conv2d(8, 8, 3, stride=2, padding=1), self.q1)
            self.fc = QConv(nn.Linear(128, 3), self.q2)

        def forward(self, x):
            x = self.q_in(x)
            x = self.q1(torch.relu(self.c1(x)))
            x = self.q2(torch.relu(self.c2(x)))
            return self.q_out(self.fc(torch.flatten(x, 1)))

        def set_fake(self, on: bool):
            for m in self.modules():
                if hasattr(m, "fake"):
                    m.fake = on

    return Net


def train(steps_float: int = 300, steps_qat: int = 200, seed: int = SEED):
    """(the trained torch model in eval mode, fake quantization on; test set)."""
    import torch
    torch.manual_seed(seed)
    Net = build(torch)
    net = Net()
    x, y = make_data(2048, seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    rng = np.random.default_rng(seed)
    for step in range(steps_float + steps_qat):
        if step == steps_float:   # fine-tune with fake quantization, observers keep updating
            net.set_fake(True)
            opt = torch.optim.Adam(net.parameters(), lr=5e-4)
        idx = torch.from_numpy(rng.integers(0, len(x), 64))
        loss = torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    return net, make_data(256, seed + 1)


class IntModel:
    """The frozen network in integer arithmetic (numpy), independent of
    cuvil-mcu: what the compiled C must reproduce bit for bit."""

    def __init__(self, net):
        self.q = [o.qparams() for o in (net.q_in, net.q1, net.q2, net.q_out)]
        self.layers = []
        for i, mod in enumerate((net.c1, net.c2, net.fc)):
            w = mod.layer.weight.detach().numpy().astype(np.float32)
            s_w = weight_scales(w)
            s_in = self.q[i][0]
            wq = np.clip(np.rint(w / s_w.reshape(-1, *[1] * (w.ndim - 1))), -127, 127).astype(np.int64)
            bs = (s_w.astype(np.float64) * s_in).astype(np.float32)
            bq = np.rint(mod.layer.bias.detach().numpy().astype(np.float32) / bs).astype(np.int64)
            stride = mod.layer.stride[0] if hasattr(mod.layer, "stride") else 1
            self.layers.append(dict(w=w, s_w=s_w, wq=wq, bq=bq, stride=stride))

    @staticmethod
    def _conv(x, w, stride):
        """Integer 3x3 convolution, pad 1, exact in int64. x: (C, H, W)."""
        c, h, wd = x.shape
        xp = np.zeros((c, h + 2, wd + 2), np.int64)
        xp[:, 1:-1, 1:-1] = x
        oh, ow = (h - 1) // stride + 1, (wd - 1) // stride + 1
        out = np.zeros((w.shape[0], oh, ow), np.int64)
        for i in range(3):
            for j in range(3):
                patch = xp[:, i:i + stride * oh:stride, j:j + stride * ow:stride]
                out += np.einsum("chw,mc->mhw", patch, w[:, :, i, j])
        return out

    def _requant(self, acc, i, relu):
        s_in, _ = self.q[i]
        s_out, zp_out = self.q[i + 1]
        mult = ((np.float32(s_in) * self.layers[i]["s_w"]).astype(np.float32) / np.float32(s_out)).astype(np.float32)
        mult = mult.reshape(-1, *[1] * (acc.ndim - 1))
        q = np.rint((acc.astype(np.float32) * mult).astype(np.float32)).astype(np.int64) + zp_out
        return np.clip(q, zp_out if relu else -128, 127)

    def run_q(self, x: np.ndarray) -> np.ndarray:
        """One float sample (1, 1, 8, 8) -> the int8 logits."""
        s0, z0 = self.q[0]
        q = np.clip(np.rint((x[0].astype(np.float32) / np.float32(s0)).astype(np.float32)) + z0, -128, 127)
        q = q.astype(np.int64)
        for i in range(2):
            L = self.layers[i]
            acc = self._conv(q - self.q[i][1], L["wq"], L["stride"]) + L["bq"].reshape(-1, 1, 1)
            q = self._requant(acc, i, relu=True)
        L = self.layers[2]
        acc = L["wq"] @ (q.reshape(-1) - self.q[2][1]) + L["bq"]
        return self._requant(acc, 2, relu=False).astype(np.int8)

    def run(self, x: np.ndarray) -> np.ndarray:
        """Float logits (dequantized), shape (1, 3)."""
        s, z = self.q[3]
        return ((self.run_q(x).astype(np.int64) - z).astype(np.float32) * np.float32(s)).reshape(1, 3)


def export_qdq(net, path: Path) -> None:
    """The QDQ ONNX onnxruntime's quantize_static writes for this network:
    QuantizeLinear/DequantizeLinear around every tensor an int8 kernel reads
    or writes, int8 weights per output channel, int32 biases."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    im = IntModel(net)
    nodes, inits = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def qdq(x, i, tag):
        s, z = im.q[i]
        sn, zn = const(f"{tag}_scale", np.float32(s)), const(f"{tag}_zp", np.int8(z))
        nodes.append(helper.make_node("QuantizeLinear", [x, sn, zn], [f"{tag}_q"], name=f"{tag}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", sn, zn], [f"{tag}_dq"], name=f"{tag}_DQ"))
        return f"{tag}_dq"

    def weights(i, tag):
        L = im.layers[i]
        w = L["wq"].astype(np.int8)
        if w.ndim == 4:
            w_axis = 0
        else:
            w_axis = 0   # Gemm transB=1: B is (out, in), per output channel = axis 0
        nodes.append(helper.make_node("DequantizeLinear", [const(f"{tag}_w_q", w), const(f"{tag}_w_scale", L["s_w"]),
                                                           const(f"{tag}_w_zp", np.zeros(len(L["s_w"]), np.int8))],
                                      [f"{tag}_w"], name=f"{tag}_w_DQ", axis=w_axis))
        bs = (L["s_w"].astype(np.float64) * im.q[i][0]).astype(np.float32)
        nodes.append(helper.make_node("DequantizeLinear", [const(f"{tag}_b_q", L["bq"].astype(np.int32)),
                                                           const(f"{tag}_b_scale", bs),
                                                           const(f"{tag}_b_zp", np.zeros(len(bs), np.int32))],
                                      [f"{tag}_b"], name=f"{tag}_b_DQ", axis=0))
        return f"{tag}_w", f"{tag}_b"

    x = qdq("input", 0, "in")
    for i, tag in enumerate(("conv1", "conv2")):
        w, b = weights(i, tag)
        nodes.append(helper.make_node("Conv", [x, w, b], [f"{tag}_y"], name=tag, kernel_shape=[3, 3],
                                      pads=[1, 1, 1, 1], strides=[im.layers[i]["stride"]] * 2))
        nodes.append(helper.make_node("Relu", [f"{tag}_y"], [f"{tag}_r"], name=f"{tag}_relu"))
        x = qdq(f"{tag}_r", i + 1, f"{tag}_out")
    nodes.append(helper.make_node("Flatten", [x], ["flat"], name="flatten", axis=1))
    x = qdq("flat", 2, "flat")
    w, b = weights(2, "fc")
    nodes.append(helper.make_node("Gemm", [x, w, b], ["logits_f"], name="fc", transB=1))
    s, z = im.q[3]
    sn, zn = const("out_scale", np.float32(s)), const("out_zp", np.int8(z))
    nodes.append(helper.make_node("QuantizeLinear", ["logits_f", sn, zn], ["logits_q"], name="out_Q"))
    nodes.append(helper.make_node("DequantizeLinear", ["logits_q", sn, zn], ["logits"], name="out_DQ"))
    g = helper.make_graph(nodes, "qat_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 8, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="cuvil-mcu examples/qat")
    m.ir_version = 8
    onnx.checker.check_model(m)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(path))


def accuracy(fn, x, y) -> float:
    return float(np.mean([int(np.argmax(fn(x[i:i + 1]))) == y[i] for i in range(len(x))]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", default="build/qat")
    ap.add_argument("--steps", type=int, default=300, help="float training steps (QAT: 2/3 of that)")
    args = ap.parse_args()
    import torch
    net, (xt, yt) = train(args.steps, args.steps * 2 // 3)
    out = Path(args.out)
    export_qdq(net, out / "qat_int8.onnx")
    np.save(out / "samples.npy", xt[:16, None])   # (samples, 1, 1, 8, 8): what cuvil-mcu run reads
    im = IntModel(net)
    with torch.no_grad():
        fq = accuracy(lambda a: net(torch.from_numpy(a)).numpy(), xt, yt)
        net.set_fake(False)
        fl = accuracy(lambda a: net(torch.from_numpy(a)).numpy(), xt, yt)
        net.set_fake(True)
    print(f"accuracy on {len(xt)} test images: float {fl:.3f}, fake-quant {fq:.3f}, "
          f"integer model {accuracy(im.run, xt, yt):.3f}")
    print(f"wrote {out / 'qat_int8.onnx'} and {out / 'samples.npy'} (16 test images)")


if __name__ == "__main__":
    main()
