"""The pointwise pixel loop in assembly (cuvil_mcu/isa/dsp_conv.py emit_pw,
kernels/qconv2_pwblk_dsp.c.j2): random 1x1 layers with K 8..128,
with and without the rounding's sign fix (output zero point at the clamp's
low end or not; without it 256 acc into SMMLA, "scaled"), one common shift
or per-channel shifts, odd pixel counts, both loop orders, run on
qemu-mps2-an386 and equal to the numpy reference bit for bit; the scaled
requantization's formula against quant.py's on the edges."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from onnx import numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa import dsp_conv, dsp_dw, dsp_pwsk
from test_isa_dsp import build, float_pointwise

# x (NCHW), w: K in {8, 12, 16, 24, 56}, M % 4 == 0 (the natural order), pixel counts odd and even
LAYERS = [((1, 8, 5, 7), (48, 8, 1, 1)), ((1, 12, 3, 5), (20, 12, 1, 1)), ((1, 16, 4, 4), (96, 16, 1, 1)),
          ((1, 24, 3, 3), (36, 24, 1, 1)), ((1, 56, 3, 1), (8, 56, 1, 1)), ((1, 16, 7, 3), (8, 16, 1, 1)),
          ((1, 8, 1, 1), (12, 8, 1, 1)),
          ((1, 36, 3, 1), (4, 36, 1, 1)), ((1, 44, 1, 3), (8, 44, 1, 1)), ((1, 48, 2, 2), (4, 48, 1, 1)),
          # K past 2 NKP_UNROLL_PW, up to 2 NKP_UNROLL_PW_X: unrolled, xe in the arena (the _x kernels)
          ((1, 68, 3, 1), (8, 68, 1, 1)), ((1, 100, 1, 3), (4, 100, 1, 1)), ((1, 128, 2, 2), (8, 128, 1, 1)),
          # past that: the K loop of PW_LOOP steps entered at (nkp - 1) % 32 = 1, 23, 31; the odd last
          # pixel's loop of 8 double steps at (nkp / 2 - 1) % 8 = 0, 3, 7
          ((1, 132, 3, 1), (8, 132, 1, 1)), ((1, 176, 1, 3), (4, 176, 1, 1)), ((1, 192, 1, 3), (8, 192, 1, 1)),
          # odd N: not the natural order (qconv2_dsp's C block loop), in the same model
          ((1, 8, 3, 5), (7, 8, 1, 1)), ((1, 24, 3, 3), (13, 24, 1, 1))]


def _model():
    # per-tensor weight scales on layers 0 and 3: one shift for every channel
    model, feeds = build([("conv", (xs, ws, {}), {"per_channel": i not in (0, 3)}) for i, (xs, ws) in enumerate(LAYERS)],
                         seed=41)
    for t in model.graph.initializer:
        if t.name.startswith("yz") and int(t.name[2:]) % 2:   # the clamp's low end at the zero point: no sign fix
            t.CopyFrom(numpy_helper.from_array(np.array(-128, np.int8), t.name))
    return model, feeds


@pytest.mark.parametrize("rev,scaled", [(False, True), (True, True), (False, False)])
def test_pointwise_asm_on_qemu(rev, scaled, monkeypatch):
    """rev: every node takes its "rev" loop order (pixel pairs from the last
    down, as the planner picks it for an output above its input); scaled
    False: the layers without the sign fix keep 2 acc and SMMLAR (as when
    |acc| may reach 2^23)."""
    if not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    from cuvil_mcu import codegen
    from cuvil_mcu.sim import qemu
    if rev:   # (only the "rev" orders may alias, and every kernel runs its "rev" order)
        order = codegen.Emitter.order
        monkeypatch.setattr(codegen.Emitter, "order",
                            lambda self, i, o, variant=None: order(self, i, o, variant) if variant == "rev" else None)
        monkeypatch.setattr(codegen.Emitter, "variant", lambda self: "rev")
    # K = 8 layers without the sign fix would take the small-K kernel (its own test: test_dsp_pwsk.py)
    monkeypatch.setattr(dsp_pwsk, "MAX_M", 0)
    if not scaled:
        monkeypatch.setattr(dsp_conv, "SCALED_MAX", 0)
    if rev:   # the scaled kernels' per-channel shifts (else made one by common_shift)
        monkeypatch.setattr(dsp_conv, "common_shift", lambda rows, bot, top: None)
        monkeypatch.setattr(dsp_dw, "one_shift", lambda rows, bot, top, e0=None: None)
    model, feeds = _model()
    c = compile_model(model, board="qemu-mps2-an386")
    calls = re.findall(r"^\s*\w+__qconv2_dsp_(\w+)\(", c.header, re.M)
    assert len(calls) == len(LAYERS) and sum(n.startswith("pw_") for n in calls) == len(LAYERS) - 2, calls
    names = set(re.findall(r"__qconv2_dsp_pw_(\w+)\(", c.header))
    # "sl": scaled with one shift and the rows of dsp_conv.lo_nudge (the hi channels on the lo ones' n)
    kinds = {n.split("_")[0] for n in names}
    assert kinds == ({"s", "sl", "nc"} if rev else {"sl", "nc"}) if scaled else kinds == {"n", "nc"}, names
    assert all("_e" in n for n in names if n.startswith("sl_")), names
    names = {"s" + n[2:] if n.startswith("sl_") else n for n in names}
    orders = re.findall(r"__qconv2_dsp_pw_\w+\(.*, ([01])\);", c.header)   # (the last argument: rev)
    assert len(orders) == len(LAYERS) - 2 and (set(orders) == {"1"} if rev else "0" in orders), orders
    for kind in ("nc", "s" if scaled else "n"):   # one shift for all (an immediate) and per channel
        want = {True} if kind == "s" and not rev else {True, False}
        assert {"_e" in n for n in names if n.split("_")[0] == kind} == want, names
    assert any("_k" in n for n in names) and any("_x" in n for n in names), names
    assert any("_k" not in n and "_x" not in n for n in names), names
    g = c.graph
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, "qemu-mps2-an386")
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        assert np.unique(ref[name]).size > 4, name
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=name)


def test_requant_scaled_matches_quant():
    """dsp_conv.requant_scaled (what the "scaled" kernels compute) equals
    TFLM's double rounding (quant.requantize_fixed) + zero point wherever
    that is at or above the zero point (the kernels use it only when the
    clamp's low end is there), for |acc| < 2^23: random and boundary
    accumulators, multipliers at both ends of [2^30, 2^31), shifts 1..24."""
    from cuvil_mcu import quant
    rng = np.random.RandomState(43)
    acc = np.concatenate([rng.randint(-2 ** 23 + 1, 2 ** 23, 200_000), np.arange(-4096, 4097),
                          [2 ** 23 - 1, -2 ** 23 + 1]]).astype(np.int64)
    for mult in (2 ** 30, 2 ** 30 + 1, 1518500250, 2 ** 31 - 1, int(rng.randint(2 ** 30, 2 ** 31))):
        for e in (1, 2, 6, 7, 8, 12, 17, 24):
            for zp in (-128, -3, 0, 57):
                want = quant.requantize_fixed(acc, mult, -e) + zp
                got = dsp_conv.requant_scaled(acc, mult, e, zp)
                keep = want >= zp
                bad = np.flatnonzero((got != want) & keep)
                assert bad.size == 0, (mult, e, zp, acc[bad[:5]], got[bad[:5]], want[bad[:5]])
                assert np.all(got[~keep] <= zp), (mult, e, zp)
    # the rows only where SMMLA's sum cannot leave int32: |64 + 128 nudge| < 2^30
    row = lambda e, zp: [2 ** 30, e, (1 << (e - 1)) + zp * (1 << e)]   # noqa: E731
    assert dsp_conv.scaled_rows(row(17, 63)) is not None and dsp_conv.scaled_rows(row(17, 64)) is None
    assert dsp_conv.scaled_rows(row(17, -64)) is not None and dsp_conv.scaled_rows(row(17, -65)) is None
    assert dsp_conv.scaled_rows(row(23, 0)) is not None and dsp_conv.scaled_rows(row(24, 0)) is None


def test_common_shift_same_outputs():
    """dsp_conv.common_shift: the rows rewritten to one shift give the same
    int8 as the per-channel rows for every accumulator in each channel's
    range (all of them tried), constant channels (mult 0) included; rows
    already sharing a shift come back unchanged."""
    rng = np.random.RandomState(44)
    sat = lambda t, acc: np.clip((((256 * acc * t[0]) >> 32) + t[2]) >> t[1], -128, 127)   # noqa: E731
    for trial in range(6):
        m = 16
        e = rng.randint(5, 10, m)
        zp = rng.randint(-128, 40, m)
        mult = rng.randint(2 ** 30, 2 ** 31, m).astype(np.int64)
        mult[:2] = [2 ** 30, 2 ** 31 - 1]
        table = np.stack([mult, e, (1 << (e - 1)) + zp * (1 << e)], axis=1)
        if trial % 2:   # a constant channel as constant_channels writes it: mult 0, e 1, nudge 2 c0
            table[3] = [0, 1, 2 * 17]
        rows = dsp_conv.scaled_rows(table)
        bot = -rng.randint(1, 2 ** 17, m)
        top = rng.randint(1, 2 ** 17, m)
        one = dsp_conv.common_shift(rows, bot, top)
        assert one is not None and len(set(one[:, 1].tolist())) == 1, (trial, one)
        for c in range(m):
            acc = np.arange(bot[c], top[c] + 1, dtype=np.int64)
            want, got = sat(rows[c], acc), sat(one[c], acc)
            bad = np.flatnonzero(want != got)
            assert bad.size == 0, (trial, c, rows[c], one[c], acc[bad[:3]], want[bad[:3]], got[bad[:3]])
    same = dsp_conv.scaled_rows(np.array([[2 ** 30, 7, 64], [2 ** 30 + 5, 7, 0]], np.int64))
    np.testing.assert_array_equal(dsp_conv.common_shift(same, [-10, -10], [10, 10]), same)


def test_dead_at_shift_same_outputs():
    """dsp_conv._dead_at_shift: constant channels (mult 0, output sat8(floor(n
    / 2^E))) moved to another shift keep their output (n halved down or
    doubled, exactly), live channels are untouched, and a move that would
    take |n| past 2^30 leaves the rows as they were."""
    rows = np.array([[2 ** 30 + 7, 14, -2088896], [0, 10, -65000], [0, 16, 8355776], [0, 12, 4095],
                     [1518500250, 15, 64]], np.int64)
    for e0 in (None, 12, 13, 16):
        got = dsp_conv._dead_at_shift(rows, e0)
        np.testing.assert_array_equal(got[[0, 4]], rows[[0, 4]])
        assert set(got[1:4, 1].tolist()) == {14 if e0 is None else e0}, (e0, got)
        for a, b in zip(rows[1:4], got[1:4]):
            assert np.clip(a[2] >> a[1], -128, 127) == np.clip(b[2] >> b[1], -128, 127), (e0, a, b)
    big = np.array([[2 ** 30, 20, 0], [0, 2, 2 ** 29]], np.int64)
    np.testing.assert_array_equal(dsp_conv._dead_at_shift(big), big)


# lo_nudge's kernels ("sl"): K unrolled on the stack (K <= 64), in the arena (K <= 128), in the loop
# (K > 128), odd pixel counts (the one_ kernel) and even ones, M 4..64
SL_LAYERS = [((1, 32, 5, 5), (32, 32, 1, 1)), ((1, 64, 3, 4), (64, 64, 1, 1)), ((1, 128, 3, 3), (16, 128, 1, 1)),
             ((1, 160, 1, 3), (8, 160, 1, 1)), ((1, 48, 4, 2), (4, 48, 1, 1))]


@pytest.mark.parametrize("u2", [False, True])
@pytest.mark.parametrize("where", ["host", "qemu-mps2-an386", "qemu-mps2-an500"])
def test_lo_nudge_kernels(where, u2, monkeypatch):
    """The "sl" kernels (scaled, one shift, two rows of (m, m, n) a block:
    the hi channels' T started for the lo channels' n, dsp_conv.lo_nudge)
    are taken for every layer and equal the numpy reference bit for bit on
    the host (the portable C loop; every strict build: gcc and clang, C99,
    C11, C++, -Werror -pedantic) and on the M4 (-Werror; the
    assembly: unrolled K on the stack and in the arena, the K loop, the odd
    pixel alone; on the M7 the blocks' biases by LDM, dsp_conv.LDM_CORES;
    u2: every layer with an even block count runs two blocks a turn, "_u"),
    and an independent int64 convolution with the float scale within 1
    LSB."""
    if where != "host" and not (shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc")):
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    monkeypatch.setattr(dsp_conv, "UNROLL2_PASSES", 1 if u2 else 10 ** 9)
    model, feeds = build([("conv", (xs, ws, {}), {"per_channel": True}) for xs, ws in SL_LAYERS], seed=47)
    for t in model.graph.initializer:          # the clamp's low end at the zero point: no sign fix, scaled
        if t.name.startswith("yz"):
            t.CopyFrom(numpy_helper.from_array(np.array(-128, np.int8), t.name))
    c = compile_model(model, board="qemu-mps2-an386" if where == "host" else where)
    names = re.findall(r"^\s*\w+__qconv2_dsp_pw_(\w+)\(", c.header, re.M)
    assert ("ldm r1!, {r6, r8, r10, r12}" in c.header) == (where == "qemu-mps2-an500"), where
    assert len(names) == len(SL_LAYERS) and all(n.startswith("sl_") for n in names), names
    even = [ws[0] % 8 == 0 for _, ws in SL_LAYERS]
    # (K unrolled only: not the K loop's kernel)
    assert [n.split("_o")[0].endswith("_u") for n in names] == [u2 and ev and ("_k" in n or "_x" in n)
                                                                for n, ev in zip(names, even)], names
    assert any("_k" in n for n in names) and any("_x" in n for n in names), names
    assert any("_k" not in n and "_x" not in n for n in names) and any(n.endswith("_o") for n in names), names
    exact_and_near_float(c, model, feeds, where)


def exact_and_near_float(c, model, feeds, where):
    """c's outputs on the host (every strict build: gcc / clang C99, C11,
    C++, -Werror -pedantic; then the run) or on the board where (-Werror):
    equal to the numpy reference bit for bit, varied, and within 1 LSB of
    an independent float convolution of each output (test_isa_dsp.
    float_pointwise)."""
    from test_isa_dsp import run_host
    g = c.graph
    if where == "host":
        from helpers import run_strict_builds
        run_strict_builds(c, feeds, exact=True)
        outs = run_host(c, feeds)
    else:
        from cuvil_mcu.sim import qemu
        outs = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, where, extra_cflags=["-Werror"]).outputs
    ref = reference.run(g, feeds)
    for i, (name, o) in enumerate(zip(g.outputs, outs)):
        o = np.asarray(o).reshape(ref[name].shape)
        np.testing.assert_array_equal(o, ref[name], err_msg=name)
        assert np.unique(o).size > 8, name
        ind = float_pointwise(model, feeds, i)
        ind = ind if ind.shape == o.shape else ind.transpose(0, 2, 3, 1)          # NHWC
        d = np.abs(o.astype(np.int64) - ind)
        assert d.max() <= 1, f"{name}: {int(d.max())} LSB from the independent convolution"


def test_lo_nudge_same_outputs():
    """dsp_conv.lo_nudge: with its multipliers, the hi channels' offsets g
    and each group's n (the lo channel's), the kernel's value
    sat8(floor(((256 acc + g) m / 2^32 + n) / 2^E)) equals the original
    row's for every accumulator in each channel's range (all of them
    tried), constant channels (mult 0) included; the lo channels keep their
    rows; per-channel shifts: None. Wide ranges (every level inside) with
    multipliers near 2^31 leave a hi channel little room: not every trial
    fits."""
    rng = np.random.RandomState(48)
    old = lambda t, acc: np.clip((((256 * acc * t[0]) >> 32) + t[2]) >> t[1], -128, 127)   # noqa: E731
    hits = 0
    for trial in range(8):
        m = 16
        e = np.full(m, 5)
        zp = np.full(m, rng.randint(-128, 20))
        mult = rng.randint(2 ** 27, 2 ** 31, m).astype(np.int64)
        table = np.stack([mult, e, (1 << (e - 1)) + zp * (1 << e)], axis=1)
        rows = dsp_conv.scaled_rows(table)
        rows[:, 2] += rng.randint(-3, 4, m) * 8            # nudges apart (as one_shift leaves them)
        if trial % 2:                                       # constant channels: mult 0
            rows[[3, 4], 0] = 0
        bot = -rng.randint(1, 2 ** 16, m)
        top = rng.randint(1, 2 ** 16, m)
        r = dsp_conv.lo_nudge(rows, bot, top)
        if r is None:
            continue
        hits += 1
        ms, gs, ns = r
        for c in range(m):
            if c % 2 == 0:
                assert (ms[c], gs[c], ns[c]) == (rows[c, 0], 0, rows[c, 2]), (trial, c)
            assert ns[c] == rows[c // 4 * 4 + [0, 2, 2, 0][c % 4], 2], (trial, c)
            acc = np.arange(bot[c], top[c] + 1, dtype=np.int64)
            got = np.clip(((((256 * acc + gs[c]) * ms[c]) >> 32) + ns[c]) >> rows[c, 1], -128, 127)
            want = old(rows[c], acc)
            bad = np.flatnonzero(want != got)
            assert bad.size == 0, (trial, c, rows[c], ms[c], gs[c], ns[c], acc[bad[:3]])
    assert hits >= 3, hits      # (the others: some hi channel's outputs not reproduced: per-channel rows stay)
    per = dsp_conv.scaled_rows(np.array([[2 ** 30, 5, 16], [2 ** 30, 6, 32], [2 ** 30, 5, 16], [2 ** 30, 5, 16]]))
    assert dsp_conv.lo_nudge(per, [-9] * 4, [9] * 4) is None
