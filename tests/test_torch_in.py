"""PyTorch in: `gen model.pt2` (torch.export.save) and
cuvil_mcu.compile(module, example_inputs); outputs of the generated C vs
PyTorch's own forward pass. torch absent: one clear line."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from cuvil_mcu.sim import host
from deploy_helpers import cli, host_outputs, fails_cleanly, gen
from helpers import assert_close

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'cuvil-mcu[torch]')")
pytest.importorskip("onnxscript", reason="onnxscript not installed (pip install 'cuvil-mcu[torch]')")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.dw = torch.nn.Conv2d(6, 6, 3, stride=2, padding=1, groups=6)
        self.fc = torch.nn.Linear(6 * 4 * 4, 4)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        x = torch.nn.functional.relu6(self.dw(x))
        return torch.softmax(self.fc(x.flatten(1)), dim=1)


def net():
    torch.manual_seed(15)
    m = Net().eval()
    with torch.no_grad():   # BatchNorm statistics that are not the identity
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


def test_gen_pt2_matches_torch(tmp_path):
    m = net()
    x = torch.randn(1, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    torch.export.save(torch.export.export(m, (x,)), tmp_path / "net.pt2")
    r = gen(tmp_path / "net.pt2", "-o", tmp_path / "a", "--no-cache")
    assert "net.pt2 ->" in r.stdout and r.stderr == ""
    from cuvil_mcu.compiler import compile_model   # the same bytes again, exported a second time
    assert compile_model(str(tmp_path / "net.pt2")).header == (tmp_path / "a" / "model.h").read_text()
    xs = torch.randn(5, 1, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    exe = host.build((tmp_path / "a" / "model.h").read_text(), "model", [4 * 64], [4 * 4])
    y = host.run(exe, [xs.numpy()], [((1, 4), "float32")], 5)[0]
    with torch.no_grad():
        want = np.stack([m(xi).numpy() for xi in xs])
    assert_close(y, want, 1e-5, "gen model.pt2 vs torch")


def test_compile_api():
    import cuvil_mcu
    m = net()
    x = torch.randn(1, 1, 8, 8)
    c = cuvil_mcu.compile(m, (x,), board="host", name="tnet")
    assert c.prefix == "tnet" and "tnet_run" in c.header and m.training is False
    xs = torch.randn(3, 1, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = np.stack([m(xi).numpy() for xi in xs])
    assert_close(host_outputs(c, xs.numpy()), want, 1e-5, "cuvil_mcu.compile vs torch")
    with pytest.raises(cuvil_mcu.errors.CuvilError, match="example_inputs"):
        cuvil_mcu.compile(m, "not a tensor")


def test_bad_inputs(tmp_path):
    (tmp_path / "junk.pt2").write_bytes(b"not a zip file at all")
    line = fails_cleanly(cli("gen", tmp_path / "junk.pt2", "-o", tmp_path / "o1"), tmp_path / "o1")
    assert "junk.pt2" in line and "torch.export" in line
    # torch missing: a module named torch that fails to import shadows the real one
    (tmp_path / "shadow").mkdir()
    (tmp_path / "shadow" / "torch.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    (tmp_path / "real.pt2").write_bytes(b"PK\x03\x04")
    env = {"PYTHONPATH": f"{tmp_path / 'shadow'}:{subprocess.os.environ.get('PYTHONPATH', '')}"}
    line = fails_cleanly(cli("gen", tmp_path / "real.pt2", "-o", tmp_path / "o2", env=env), tmp_path / "o2")
    assert "cuvil-mcu[torch]" in line and "torch" in line
    r = subprocess.run([sys.executable, "-c", "import cuvil_mcu; cuvil_mcu.compile(None, ())"],
                       capture_output=True, text=True, env={**subprocess.os.environ, **env})
    assert "cuvil-mcu[torch]" in r.stderr
