"""The small-K pointwise kernel (cuvil_mcu/isa/dsp_pwsk.py,
kernels/qconv2_pwsk_dsp.c.j2): random 1x1 layers with K = 4, 8 and 16, channel
counts that are and are not multiples of 4 (1 .. 64), odd and even pixel
counts, per-channel and per-tensor scales, both loop orders, run on
qemu-mps2-an386 (the assembly) and on the host with strict warnings (the
plain-C fallback), equal to the numpy reference bit for bit; the kernel's
requantization formula against quant.py's on the edges."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from onnx import numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa import dsp_pwsk
from test_isa_dsp import build, float_pointwise, run_host

# x (NCHW), w: K in {4, 8, 16}; M 1 .. 64 (MAX_M; K = 16: 32), not only multiples of 4; pixel counts odd and even
LAYERS = [((1, 8, 5, 7), (16, 8, 1, 1)), ((1, 8, 4, 6), (13, 8, 1, 1)), ((1, 4, 3, 3), (20, 4, 1, 1)),
          ((1, 4, 2, 5), (7, 4, 1, 1)), ((1, 8, 1, 1), (64, 8, 1, 1)), ((1, 8, 3, 1), (1, 8, 1, 1)),
          ((1, 8, 6, 6), (48, 8, 1, 1)), ((1, 16, 5, 5), (32, 16, 1, 1)), ((1, 16, 2, 3), (13, 16, 1, 1))]
# not taken: K = 12 (too many registers), M past MAX_M (K = 16: MAX_M16), and a zero point above the clamp's low end
OTHERS = [((1, 12, 3, 3), (8, 12, 1, 1)), ((1, 8, 2, 3), (68, 8, 1, 1)), ((1, 16, 2, 3), (40, 16, 1, 1)),
          ((1, 8, 3, 3), (16, 8, 1, 1))]


def _model():
    layers = LAYERS + OTHERS
    model, feeds = build([("conv", (xs, ws, {}), {"per_channel": i != 1}) for i, (xs, ws) in enumerate(layers)],
                         seed=45)
    for t in model.graph.initializer:
        # the clamp's low end at the zero point (ReLU-like), except the last layer
        if t.name.startswith("yz") and int(t.name[2:]) != len(layers) - 1:
            t.CopyFrom(numpy_helper.from_array(np.array(-128, np.int8), t.name))
    return model, feeds


@pytest.mark.parametrize("rev,doubled", [(False, False), (True, False), (False, True)])
def test_small_k_pointwise_on_qemu(rev, doubled, monkeypatch):
    """rev: every node takes its "rev" loop order (pixel pairs from the last
    down, the odd pixel first; only those orders may alias); doubled: every
    layer on dsp_pwsk.doubled's rows (what layers rows() does not fit run)."""
    if not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    from cuvil_mcu import codegen
    from cuvil_mcu.sim import qemu
    if rev:
        order = codegen.Emitter.order
        monkeypatch.setattr(codegen.Emitter, "order",
                            lambda self, i, o, variant=None: order(self, i, o, variant) if variant == "rev" else None)
        monkeypatch.setattr(codegen.Emitter, "variant", lambda self: "rev")
    if doubled:
        monkeypatch.setattr(dsp_pwsk, "rows", lambda wr, folded, table: None)
    model, feeds = _model()
    c = compile_model(model, board="qemu-mps2-an386")
    # the kernels' requantization: SMMLA of 256 acc (rows), SMMLAR of 2 acc (doubled)
    ops = set(re.findall(r'"(smmlar?) r11, r11, r12, lr', c.header))
    assert ops == ({"smmlar"} if doubled else {"smmla"}), ops
    calls = re.findall(r"^\s*\w+__qconv2_pwsk_dsp_(k\d+_m\d+)_[0-9a-f]{10}(?:_rev)?\(", c.header, re.M)
    want = [f"k{ws[1]}_m{ws[0]}" for _, ws in LAYERS]
    assert sorted(calls) == sorted(want), (calls, want)
    if rev:
        assert len(re.findall(r"^\s*\w+__qconv2_pwsk_dsp_\w+_rev\(", c.header, re.M)) == len(LAYERS)
    else:   # the M7 takes every layer too (K = 16 in two chunks: dsp_pwsk.NO_CHUNKS no longer names it)
        c7 = compile_model(model, board="qemu-mps2-an500")
        calls7 = re.findall(r"^\s*\w+__qconv2_pwsk_dsp_(k\d+_m\d+)_[0-9a-f]{10}(?:_rev)?\(", c7.header, re.M)
        assert sorted(calls7) == sorted(want), (calls7, want)
    g = c.graph
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, "qemu-mps2-an386")
    ref = reference.run(g, feeds)
    outs = dict(zip(g.outputs, r.outputs))
    if not rev:   # the plain-C fallback (host, -Wall -Wextra -Werror -pedantic), and the M7
        outs_host = dict(zip(g.outputs, run_host(c, feeds)))
        r7 = qemu.simulate(c7, {n: feeds[n] for n in c7.graph.inputs}, "qemu-mps2-an500")
        outs_m7 = dict(zip(c7.graph.outputs, r7.outputs))
    for name in g.outputs:
        assert np.unique(ref[name]).size > 4 or ref[name].size < 16, name
        np.testing.assert_array_equal(outs[name].reshape(ref[name].shape), ref[name], err_msg=name)
        # within 1 LSB of an independent float convolution (the model's outputs are NCHW)
        i = int(name[1:])
        if i < len(LAYERS):
            want = float_pointwise(model, feeds, i)
            got = outs[name].reshape(want.shape).astype(np.float64)
            d = np.abs(got - want)
            assert d.max() <= 1, (name, int(d.max()), np.unravel_index(d.argmax(), d.shape))
        if not rev:
            np.testing.assert_array_equal(outs_host[name].reshape(ref[name].shape), ref[name],
                                          err_msg=f"host {name}")
            np.testing.assert_array_equal(outs_m7[name].reshape(ref[name].shape), ref[name], err_msg=f"M7 {name}")


def test_requant_matches_quant():
    """dsp_pwsk.requant (the kernel's SMMLAR of 2 acc, no sign fix, SSAT)
    equals TFLM's double rounding (quant.requantize_fixed) + zero point,
    saturated to int8, when the zero point is -128 (the clamp's low end):
    random and boundary accumulators below 2^30, multipliers at both ends
    of [2^30, 2^31), shifts 1..31."""
    from cuvil_mcu import quant
    rng = np.random.RandomState(47)
    acc = np.concatenate([rng.randint(-2 ** 30 + 1, 2 ** 30, 100_000), rng.randint(-2 ** 16, 2 ** 16, 100_000),
                          np.arange(-4096, 4097), [2 ** 30 - 1, -2 ** 30 + 1]]).astype(np.int64)
    for mult in (2 ** 30, 2 ** 30 + 1, 1518500250, 2 ** 31 - 1, int(rng.randint(2 ** 30, 2 ** 31))):
        for e in (1, 2, 7, 8, 13, 17, 24, 31):
            nudge = (1 << (e - 1)) - 128 * (1 << e)
            want = np.clip(quant.requantize_fixed(acc, mult, -e) - 128, -128, 127)
            got = dsp_pwsk.requant(acc, mult, e, nudge)
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, (mult, e, acc[bad[:5]], got[bad[:5]], want[bad[:5]])


def test_rows_equal_tflm_over_the_whole_range():
    """dsp_pwsk.rows' constants (the bias folded into n where _fit finds
    them, else 256 bias in the accumulator) give, through the kernel's
    arithmetic (dsp_pwsk.kernel_out: 256 acc, SMMLA, SSAT asr E), TFLM's
    output (quant.requantize_fixed + zero point -128, saturated) for every
    accumulator value of the channel's range over int8 inputs, value by
    value: random K = 4 and 8 channels, biases up to 2^22, multipliers at
    both ends of [2^30, 2^31), shifts 1..15 (past that n leaves +-2^30 with
    the zero point -128: the doubled rows), and a constant channel (mult
    0). Both kinds of rows occur."""
    from cuvil_mcu import quant
    rng = np.random.RandomState(53)
    kinds = {True: 0, False: 0}
    cases = []
    for i in range(48):
        kk = 4 if i % 3 == 0 else 8
        mult = [2 ** 30, 2 ** 31 - 1][i % 2] if i < 4 else int(rng.randint(2 ** 30, 2 ** 31))
        cases.append((rng.randint(-128, 128, (1, kk)), int(rng.randint(-2 ** 22, 2 ** 22)), mult,
                      int(rng.randint(1, 16)) if i >= 2 else 1 + 14 * i))
    # channels like VWW's that keep their bias word (about 2 in 100 of these): the first few
    for i in range(400):
        if len(cases) == 51:
            break
        wr, fold, mult, e = rng.randint(-128, 128, (1, 8)), int(rng.randint(-2 ** 16, 2 ** 16)), \
            int(rng.randint(2 ** 30, 2 ** 31)), int(rng.randint(6, 10))
        rws = dsp_pwsk.rows(wr.astype(np.int64), np.array([fold]), np.array([[mult, e, (1 << (e - 1)) - (128 << e)]]))
        if rws is not None and not rws[0][0]:
            cases.append((wr, fold, mult, e))
    for i, (wr, fold, mult, e) in enumerate(cases):
        wr = wr.astype(np.int64)
        nudge = (1 << (e - 1)) - 128 * (1 << e)
        rws = dsp_pwsk.rows(wr, np.array([fold], np.int64), np.array([[mult, e, nudge]]))
        assert rws is not None, (i, mult, e)
        (folded, (m2, big_e, n)), = rws
        kinds[folded] += 1
        bot, top = int(np.minimum(127 * wr, -128 * wr).sum()), int(np.maximum(127 * wr, -128 * wr).sum())
        acc = np.arange(bot, top + 1, dtype=np.int64)
        want = np.clip(quant.requantize_fixed(acc + fold, mult, -e) - 128, -128, 127)
        got = dsp_pwsk.kernel_out(acc, 0 if folded else 256 * fold, m2, big_e, n)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (i, folded, acc[bad[:5]], got[bad[:5]], want[bad[:5]])
    assert kinds[True] > 0 and kinds[False] > 0, kinds
    # a constant channel (constant_channels' row: mult 0, e 1, nudge 2 c)
    (folded, (m2, big_e, n)), = dsp_pwsk.rows(np.array([[3, -7, 0, 1]]), np.array([5]), np.array([[0, 1, 2 * -77]]))
    acc = np.arange(-128 * 11, 127 * 11 + 1)
    assert folded and np.all(dsp_pwsk.kernel_out(acc, 0, m2, big_e, n) == -77)
