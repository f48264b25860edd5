"""examples/qat: a model fine-tuned with fake quantization, exported to QDQ
ONNX and compiled. The reference is the example's own integer model
(numpy, written from the QAT arithmetic, not from cuvil-mcu): the C equals
it bit for bit with --requant float, within one int8 step with --requant
fixed; PyTorch's fake-quantized forward pass agrees with it to one step."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from cuvil_mcu.compiler import compile_model
from deploy_helpers import ROOT, host_outputs

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'cuvil-mcu[torch]')")


@pytest.fixture(scope="module")
def qat(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("qat_example", ROOT / "examples" / "qat" / "qat.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.set_num_threads(1)
    net, (x, y) = mod.train(steps_float=120, steps_qat=60)
    path = tmp_path_factory.mktemp("qat") / "qat_int8.onnx"
    mod.export_qdq(net, path)
    return mod, net, path, x[:64], y[:64]


def test_qat_model_compiles_bit_exact(qat):
    mod, net, path, x, y = qat
    im = mod.IntModel(net)
    want_q = np.stack([im.run_q(x[i:i + 1]) for i in range(len(x))])
    want = np.stack([im.run(x[i:i + 1]) for i in range(len(x))])
    c = compile_model(str(path), requant="float")
    assert {"QLinearConv", "com.microsoft.QGemm"} <= set(c.op_counts)   # integer kernels, not float QDQ
    np.testing.assert_array_equal(host_outputs(c, x[:, None]).reshape(want.shape), want)
    ci = compile_model(str(path), requant="float", io="int8")
    xq = ((x / im.q[0][0]).round() + im.q[0][1]).clip(-128, 127).astype(np.int8)[:, None]
    got_q = host_outputs(ci, xq)
    np.testing.assert_array_equal(got_q.reshape(want_q.shape), want_q)
    cf = compile_model(str(path), requant="fixed", io="int8")
    got_f = host_outputs(cf, xq)
    assert np.abs(got_f.reshape(want_q.shape).astype(int) - want_q).max() <= 1
    # the fake-quantized PyTorch model computes the same int8 logits, up to float summation order
    with torch.no_grad():
        fq = net(torch.from_numpy(x)).numpy()
    s, z = im.q[3]
    fq_q = np.rint(fq / s).astype(int) + z
    assert np.abs(fq_q - want_q.reshape(fq_q.shape).astype(int)).max() <= 1
    assert np.mean(want.reshape(len(x), 3).argmax(1) == y) > 0.8
