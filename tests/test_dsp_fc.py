"""Paired-channel DSP fully connected kernel (cuvil_mcu/isa/dsp_fc.py,
kernels/qfc2_dsp.c.j2): two output channels share one int16 per input
index, H = 256 w[hi] + w[lo]; SMLAD against H gives 256 acc[hi] + acc[lo]
(mod 2^32), SMLAD against SXTB16(H pair) gives acc[lo].

Checked: the packing and the arithmetic (an independent numpy emulation of
the words, SXTB16 and wrapping SMLAD against the plain integer product);
the generated C for a DSP board compiled on the host (plain-C intrinsics,
-fsanitize=address,undefined) equal to the numpy reference bit for bit over
K = 1..700 (odd, not multiples of 4 or 8), N = 1..16 (odd, even), batch
rows 1..3, bias absent / present, per-channel / per-tensor weights, every
in-kernel requantization, fused clamps, QLinearMatMul; acc[hi] at the edge
of the 2^23 bound and rows past it (the chunk variant); the choice of the
pair orientation and the fallback to qfc_dsp when a pair fits in neither
orientation (int16, or a bias alone past 2^23, or chunks disabled); the
real intrinsics on QEMU (M4, M7, M33)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper, numpy_helper

from cuvil_mcu import reference
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.isa import dsp_fc
from cuvil_mcu.sim import host
from helpers import NP2ONNX
from qhelpers import assert_graph_outputs_exact, rerender

BOARD = "qemu-mps2-an386"
STRICT = ["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsanitize=address,undefined",
          "-fno-sanitize-recover=all"]


# --------------------------------------------------------------------------- numpy emulation of the kernel

def _s16(v):
    v = np.asarray(v, np.int64) & 0xFFFF
    return v - ((v & 0x8000) << 1)


def _s8(v):
    v = np.asarray(v, np.int64) & 0xFF
    return v - ((v & 0x80) << 1)


def _smlad(x, w, acc):
    """SMLAD modulo 2^32 (as uint32 in int64)."""
    x, w = np.asarray(x, np.int64), np.asarray(w, np.int64)
    s = _s16(x) * _s16(w) + _s16(x >> 16) * _s16(w >> 16)
    return (np.asarray(acc, np.int64) + s) & 0xFFFFFFFF


def _sxtb16(v):
    v = np.asarray(v, np.int64)
    return (_s8(v) & 0xFFFF) | ((_s8(v >> 16) & 0xFFFF) << 16)


def _emulate(b, c, x, slots, groups):
    """What the kernel computes from dsp_fc.pack's arrays for one row x:
    the output channels' accumulators in channel order."""
    words, start = dsp_fc.pack(b, c, slots, groups, np_=1)       # np_ 1: pair after pair
    words = words.view(np.uint32).astype(np.int64).reshape(len(slots) // 2, groups, 2)
    start = start.view(np.uint32).astype(np.int64).reshape(-1, 2)
    xp = np.zeros(4 * groups, np.int64)
    xp[:x.size] = x
    xw = xp.reshape(groups, 4) & 0xFF                              # the bytes of a's words
    word = xw[:, 0] | (xw[:, 1] << 8) | (xw[:, 2] << 16) | (xw[:, 3] << 24)
    x0, x1 = _sxtb16(word), _sxtb16(word >> 8)                     # SXTB16, SXTB16 ror 8
    out = {}
    for p in range(len(slots) // 2):
        t, bl = start[p]
        for g in range(groups):
            for xv, wv in ((x0[g], words[p, g, 0]), (x1[g], words[p, g, 1])):
                t = _smlad(xv, wv, t)
                bl = _smlad(xv, _sxtb16(wv), bl)
        d = (t - bl) & 0xFFFFFFFF
        out[slots[2 * p]] = bl - ((bl & 0x80000000) << 1)
        out[slots[2 * p + 1]] = (d - ((d & 0x80000000) << 1)) >> 8
    return np.array([out[j] for j in range(b.shape[0])], np.int64)


@pytest.mark.parametrize("kk,n", [(1, 1), (2, 3), (3, 2), (5, 4), (7, 7), (8, 6), (13, 5), (64, 9), (129, 2),
                                  (700, 3)])
def test_pack_arithmetic(kk, n):
    """dsp_fc.pack + the SMLAD / SXTB16 recipe == the integer product, for
    every int8 extreme and random inputs, odd K padded with zeros."""
    rng = np.random.default_rng(kk * 31 + n)
    b = rng.integers(-127, 128, (n, kk))
    b[:, rng.integers(0, kk)] = 127
    c = rng.integers(-5000, 5001, n)
    slots = dsp_fc.plan_pairs(b, c)
    assert slots is not None
    for groups in (-(-kk // 4), 2 * -(-kk // 8)):
        for x in (rng.integers(-128, 128, kk), np.full(kk, -128), np.full(kk, 127),
                  np.where(b[0] > 0, 127, -128)):
            np.testing.assert_array_equal(_emulate(b, c, x, slots, groups), b @ x + c)


def test_pair_rules():
    """H = 256 w[hi] + w[lo] fits int16 unless w[hi] == -128 with w[lo] < 0;
    acc[hi] (bias included) must stay in [-2^23, 2^23) for every int8 input."""
    lo = np.array([-1, 5, 0])
    assert not dsp_fc.pair_ok(lo, np.array([-128, 0, 0]), 0)
    assert dsp_fc.pair_ok(np.array([0, 5, 0]), np.array([-128, 0, 0]), 0)
    assert dsp_fc.pair_ok(lo, np.array([127, -127, 0]), 0)
    # the bound: max acc = 127 * sum(w > 0) + 128 * sum|w < 0| + c; min likewise
    w = np.full(516, 127)                       # 127 * 127 * 516 = 8322564 < 2^23 = 8388608
    assert dsp_fc.pair_ok(np.zeros(516, np.int64), w, 2 ** 23 - 1 - 127 * 127 * 516)
    assert not dsp_fc.pair_ok(np.zeros(516, np.int64), w, 2 ** 23 - 127 * 127 * 516)
    assert dsp_fc.pair_ok(np.zeros(516, np.int64), w, -2 ** 23 + 128 * 127 * 516)
    assert not dsp_fc.pair_ok(np.zeros(516, np.int64), w, -2 ** 23 + 128 * 127 * 516 - 1)
    # orientation: the pair swaps when only the other way round fits; None when neither does
    b = np.array([[-3, 2], [-128, 1]])
    assert dsp_fc.plan_pairs(b, np.zeros(2, np.int64)) == [1, 0]
    assert dsp_fc.plan_pairs(np.array([[-5, -128], [-128, -7]]), np.zeros(2, np.int64)) is None
    assert dsp_fc.plan_pairs(np.array([[1, 2], [3, 4], [5, 6]]), np.zeros(3, np.int64)) == [0, 1, 2, 3]


# --------------------------------------------------------------------------- generated C on the host

def _model(layers, seed):
    """One QGemm branch per layer: dict(m, kk, n, bias, per_channel, w (optional int8 [kk, n]), c, big)."""
    rng = np.random.RandomState(seed)
    nodes, inits, vis, outs, feeds = [], {}, [], [], {}
    for i, ly in enumerate(layers):
        m, kk, n = ly["m"], ly["kk"], ly["n"]
        w = ly.get("w")
        if w is None:
            w = rng.randint(-1, 2, (kk, n)) if ly.get("big") else rng.randint(-127, 128, (kk, n))
        w = np.asarray(w, np.int8)
        x_s = np.float32(rng.uniform(0.01, 0.05))
        x_zp = int(rng.randint(-20, 21)) if ly.get("x_zp") is None else ly["x_zp"]
        w_s = rng.uniform(0.002, 0.02, n).astype(np.float32) if ly["per_channel"] else \
            np.float32(rng.uniform(0.002, 0.02))
        wstd = max(float(np.std(w.astype(np.float64))), 0.5)
        y_s = np.float32(np.sqrt(kk) * 60.0 * wstd * x_s * np.mean(w_s) / 45.0)
        if ly.get("big"):     # multipliers > 1: left shifts, the general requantization
            y_s = np.float32(x_s * np.max(w_s) / 1.5)
        if ly.get("y_s") is not None:
            y_s = np.float32(ly["y_s"](x_s, w_s))
        y_zp = int(rng.randint(-10, 11))
        c = ly.get("c")
        if c is None:
            c = rng.randint(-3000, 3001, n)
        inits.update({f"xs{i}": x_s, f"xz{i}": np.array(x_zp, np.int8), f"w{i}": w, f"ws{i}": w_s,
                      f"wz{i}": np.zeros(n, np.int8) if ly["per_channel"] else np.array(0, np.int8),
                      f"ys{i}": y_s, f"yz{i}": np.array(y_zp, np.int8)})
        if ly["bias"]:
            inits[f"b{i}"] = np.asarray(c, np.int32)
        ins = [f"x{i}", f"xs{i}", f"xz{i}", f"w{i}", f"ws{i}", f"wz{i}", f"b{i}" if ly["bias"] else "",
               f"ys{i}", f"yz{i}"]
        nodes.append(helper.make_node("QGemm", ins, [f"y{i}"], name=f"fc{i}", domain="com.microsoft"))
        vis.append(helper.make_tensor_value_info(f"x{i}", NP2ONNX["int8"], [m, kk]))
        outs.append(helper.make_tensor_value_info(f"y{i}", NP2ONNX["int8"], None))
        feeds[f"x{i}"] = rng.randint(-128, 128, (m, kk)).astype(np.int8) if ly.get("x") is None else \
            np.asarray(ly["x"], np.int8)
    g = helper.make_graph(nodes, "fc2", vis, outs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model, feeds


def _run_host(c, feeds):
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs], cflags=STRICT)
    ins = [np.asarray(feeds[n], dtype=g.tensors[n].dtype)[None] for n in g.inputs]
    return [o[0] for o in host.run(exe, ins, c.out_specs, 1)]


def _assert_exact(c, outs, feeds):
    assert_graph_outputs_exact(c.graph, outs, feeds, min_unique=3)


def _check(model, feeds, act=None):
    c = compile_model(model, board=BOARD, verify_each=True)
    if act is not None:      # a fused clamp, as the QDQ pass sets it: re-render with node.act
        def scaled(nd):
            y_s = float(np.asarray(c.graph.tensors[nd.inputs[7]].data))
            return act if act[1] == float("inf") else (act[0] * y_s, act[1] * y_s)
        c = rerender(c, scaled)
    _assert_exact(c, _run_host(c, feeds), feeds)
    return c


def kernels(header: str) -> dict[str, str]:
    """Node name -> the function its call line in <prefix>_run names."""
    out = {}
    for m in re.finditer(r"/\* \d+: \S+ '([^']+)'.*\*/\n\s*(\w+)\(", header):
        out[m.group(1)] = m.group(2)
    return out


KS = list(range(1, 21)) + [23, 24, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 258, 383, 511,
                           512, 513, 640, 641, 699, 700]
NS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16]


def _sweep(first: int):
    return [dict(m=(1, 1, 2, 1, 3)[i % 5], kk=kk, n=NS[(i * 5) % len(NS)], bias=i % 3 != 0,
                 per_channel=i % 4 < 2) for i, kk in enumerate(KS) if i % 2 == first]


@pytest.mark.parametrize("half", [0, 1])
def test_sweep(half):
    """K = 1..20 and 20 more up to 700 (tails of 1..7 bytes, the stack
    buffer's size steps), N odd / even / 1, rows 1..3, bias or not, per
    channel or per tensor: all on qfc2_dsp, exact."""
    layers = _sweep(half)
    c = _check(*_model(layers, seed=40 + half))
    ks = kernels(c.header)
    assert len(ks) == len(layers)
    assert all("__qfc2_dsp_" in f for f in ks.values()), ks
    assert "__qfc2_dsp_fasts_d" in c.header and "__qfc2_dsp_fasts_b" in c.header   # both variants
    assert any(f.endswith("_pt") for f in ks.values()) and not all(f.endswith("_pt") for f in ks.values())


@pytest.mark.parametrize("act", [(0.0, float("inf")), (-20, 30)])
def test_fused_clamp(act):
    """A fused Relu, or a Clip (bounds in units of y_scale): the clamp
    inside int8 (not the SSAT-only variant), exact."""
    layers = [dict(m=m, kk=kk, n=n, bias=True, per_channel=True) for m, kk, n in ((1, 64, 12), (2, 37, 5), (3, 130, 2))]
    c = _check(*_model(layers, seed=7), act=act)
    assert "__qfc2_dsp_fast_" in c.header and "__qfc2_dsp_fasts_" not in c.header


def test_qlinearmatmul():
    """QLinearMatMul with a constant b (batched a: rows stacked) takes the
    same kernel; per-column b scales; exact."""
    rng = np.random.RandomState(31)
    b = rng.randint(-127, 128, (37, 9)).astype(np.int8)
    inits = {"as": np.float32(0.03), "az": np.array(-5, np.int8), "b": b,
             "bs": rng.uniform(0.002, 0.02, 9).astype(np.float32), "bz": np.zeros(9, np.int8),
             "ys": np.float32(0.03 * 0.01 * 60 * np.sqrt(37)), "yz": np.array(3, np.int8)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"], name="mm")
    g = helper.make_graph([node], "mm", [helper.make_tensor_value_info("a", NP2ONNX["int8"], [2, 3, 37])],
                          [helper.make_tensor_value_info("y", NP2ONNX["int8"], None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 9
    c = _check(model, {"a": rng.randint(-128, 128, (2, 3, 37)).astype(np.int8)})
    assert "__qfc2_dsp_" in kernels(c.header)["mm"]


def test_requant_variants(monkeypatch):
    """The other in-kernel requantizations: "mid" (a bias near 2^30 on a lo
    channel; multipliers in [0.5, 1)), "fixed" (left shifts), "fastu" (the
    zero point kept out of the rounding nudge)."""
    huge = np.zeros(6, np.int64)
    huge[[0, 2]] = [2 ** 30 + 5, -2 ** 30]
    layers = [dict(m=1, kk=24, n=6, bias=True, per_channel=True, big=True, c=huge,
                   y_s=lambda x_s, w_s: x_s * np.max(w_s) * 1.2),
              dict(m=2, kk=4, n=5, bias=True, per_channel=False, big=True, c=np.array([-20, 3, 0, 17, -9]))]
    c = _check(*_model(layers, seed=8))
    assert "__qfc2_dsp_mid" in c.header and "__qfc2_dsp_fixed" in c.header
    from cuvil_mcu.isa import dsp
    monkeypatch.setattr(dsp, "NUDGE_MAX", 0)
    c = _check(*_model([dict(m=1, kk=kk, n=n, bias=True, per_channel=True) for kk, n in ((33, 7), (8, 2))],
                       seed=9))
    assert "__qfc2_dsp_fastus_" in c.header


def bias_breaker():
    """Channels 0 and 1 with biases past +-2^23 (no orientation or chunking
    fits them): qfc_dsp; outputs scaled to stay inside int8."""
    return dict(m=1, kk=50, n=3, bias=True, per_channel=False, c=np.array([2 ** 23 + 2 ** 20, -2 ** 23 - 2 ** 20, 7]),
                y_s=lambda x_s, w_s: x_s * w_s * 2.0 ** 23 / 100)


def test_orientation_and_fallback():
    """fc0: channel 1 needs int16 room (w[1] == -128 where w[0] < 0), so
    pair (0, 1) runs swapped; fc1: channel 3's bound is too large but
    channel 2's is not: (2, 3) swaps; fc2: neither orientation fits int16
    -> qfc_dsp; fc3: the biases of channels 0 and 1 alone exceed 2^23 (no
    chunking helps) -> qfc_dsp."""
    rng = np.random.RandomState(5)
    w0 = rng.randint(-127, 128, (40, 5))
    w0[3, 0], w0[3, 1] = -9, -128
    w1 = rng.randint(-20, 21, (700, 4))
    w1[:, 3] = rng.choice([-127, 127], 700)
    w2 = rng.randint(-127, 128, (30, 4))
    w2[4, 2], w2[4, 3], w2[9, 2], w2[9, 3] = -128, -1, -3, -128
    layers = [dict(m=1, kk=40, n=5, bias=True, per_channel=True, w=w0),
              dict(m=1, kk=700, n=4, bias=False, per_channel=True, w=w1),
              dict(m=2, kk=30, n=4, bias=True, per_channel=False, w=w2),
              bias_breaker()]
    c = _check(*_model(layers, seed=6))
    ks = kernels(c.header)
    assert "__qfc2_dsp_" in ks["fc0"] and "__qfc2_dsp_" in ks["fc1"]
    assert "__qfc_dsp_" in ks["fc2"] and "__qfc_dsp_" in ks["fc3"]
    assert "fc0_swaps" in c.header and "fc1_swaps" in c.header
    assert "_ck" not in ks["fc1"]      # a swap, not chunks


def _bound_breaker(kk, n, rng):
    """Weights with 128 * sum|w| > 2^23 on every channel."""
    w = rng.choice([-127, 127], (kk, n))
    assert 128 * 127 * kk > 2 ** 23
    return w


def _chunk_layer(kk, n, rng):
    """Weights breaking the 2^23 bound on every channel and rows reaching
    past it: x = sign of channel 1's weights (acc[1] = 127 sum|w| + c > 2^23),
    its negation, and random."""
    w = _bound_breaker(kk, n, rng)
    sgn = np.where(w[:, 1] > 0, 127, -128)
    x = np.stack([sgn, np.where(w[:, 1] > 0, -128, 127), rng.randint(-128, 128, kk)])
    return dict(m=3, kk=kk, n=n, bias=True, per_channel=False, w=w, x=x, x_zp=0,
                y_s=lambda x_s, w_s: x_s * w_s * 2.0 ** 24 / 100)


def test_chunks(monkeypatch):
    """Rows whose acc[hi] passes 2^23: the chunk variant (buffered, direct
    by one pass, direct by a row too long for the stack buffer; K = 2048
    fills that buffer) is exact where the plain recipe would not be;
    without chunks (MAX_CHUNKS 1) -> qfc_dsp."""
    rng = np.random.RandomState(21)
    layers = [_chunk_layer(700, 10, rng), _chunk_layer(1001, 2, rng), _chunk_layer(2101, 9, rng),
              _chunk_layer(2048, 10, rng), _chunk_layer(2049, 10, rng)]     # the stack buffer full; one more
    for ly in layers:
        b = np.asarray(ly["w"], np.int64).T
        assert int(np.abs(b[1] @ ly["x"][0])) >= 2 ** 23      # past the one-chunk bound
    model, feeds = _model(layers, seed=22)
    c = _check(model, feeds)
    ks = kernels(c.header)
    assert "__qfc2_dsp_fasts_b" in ks["fc0"] and "_ck" in ks["fc0"]
    assert "__qfc2_dsp_fasts_d" in ks["fc1"] and "_ck" in ks["fc1"]
    assert "__qfc2_dsp_fasts_d" in ks["fc2"] and "_ck" in ks["fc2"]
    assert "__qfc2_dsp_fasts_b" in ks["fc3"] and "__qfc2_dsp_fasts_d" in ks["fc4"]
    monkeypatch.setattr(dsp_fc, "MAX_CHUNKS", 1)
    c = _check(model, feeds)
    assert all("__qfc_dsp_" in f for f in kernels(c.header).values())


def edge_layer(rng):
    """acc[hi] at both ends of what the kernel allows: channel 1's weights
    all 127 over K = 516 and a bias putting its largest accumulator (x all
    127) at 2^23 - 1 and its smallest (x all -128) at 2^23 - 1 - 255 * 127
    * 516 >= -2^23; rows: all 127, all -128, random."""
    kk, x_zp = 516, 3
    w = rng.randint(-127, 128, (kk, 2))
    w[:, 1] = 127
    c = np.array([1000, 2 ** 23 - 1 - 127 * 127 * kk + x_zp * 127 * kk])    # + x_zp * sum(w): the folding
    x = np.stack([np.full(kk, 127), np.full(kk, -128), rng.randint(-128, 128, kk)])
    return dict(m=3, kk=kk, n=2, bias=True, per_channel=False, w=w, c=c, x_zp=x_zp, x=x,
                y_s=lambda x_s, w_s: x_s * w_s * 2.0 ** 23 / 100)


def test_edge_of_bound():
    """The bound is tight: at max acc[hi] = 2^23 - 1 the kernel's
    arithmetic (numpy emulation) is exact, at 2^23 it is not (so the
    compile-time check is needed); the C at the edge is exact."""
    kk = 516
    b = np.stack([np.zeros(kk, np.int64), np.full(kk, 127)])
    for c1, ok in ((2 ** 23 - 1 - 127 * 127 * kk, True), (2 ** 23 - 127 * 127 * kk, False)):
        c = np.array([0, c1])
        x = np.full(kk, 127)
        got = _emulate(b, c, x, [0, 1], -(-kk // 4))
        assert np.array_equal(got, b @ x + c) == ok
        assert dsp_fc.pair_ok(b[0], b[1], c1) == ok
    c = _check(*_model([edge_layer(np.random.RandomState(3))], seed=4))
    assert "__qfc2_dsp_" in kernels(c.header)["fc0"]


# --------------------------------------------------------------------------- QEMU

def _have_cross() -> bool:
    import shutil
    return shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None


@pytest.mark.skipif(not _have_cross(), reason="arm-none-eabi-gcc / qemu-system-arm not installed")
@pytest.mark.parametrize("board", ["qemu-mps2-an386", "qemu-mps2-an500", "qemu-mps2-an505"])
def test_on_qemu(board):
    """SMLAD (wrapping), SXTB16, LDRD with writeback, SMMULR on emulated M4
    / M7 / M33: buffered and direct variants, K tails, odd N, a swapped
    pair, rows > 1, per-tensor, a left-shift layer, acc[hi] at the edge of
    its bound, rows past it in chunks, and a layer left to qfc_dsp; exact."""
    from cuvil_mcu.sim import qemu
    rng = np.random.RandomState(12)
    w0 = rng.randint(-127, 128, (45, 7))
    w0[5, 2], w0[5, 3] = -4, -128
    layers = [dict(m=1, kk=640, n=13, bias=True, per_channel=False),
              dict(m=3, kk=45, n=7, bias=True, per_channel=True, w=w0),
              dict(m=1, kk=130, n=2, bias=False, per_channel=True),
              dict(m=2, kk=7, n=1, bias=True, per_channel=False),
              dict(m=1, kk=2100, n=8, bias=True, per_channel=True, w=rng.randint(-40, 41, (2100, 8))),
              dict(m=1, kk=20, n=9, bias=True, per_channel=True, big=True),
              edge_layer(rng),
              _chunk_layer(700, 6, rng), _chunk_layer(1300, 2, rng),
              bias_breaker()]
    model, feeds = _model(layers, seed=13)
    c = compile_model(model, board=board)
    ks = kernels(c.header)
    assert all("__qfc2_dsp_" in ks[f"fc{i}"] for i in range(len(layers) - 1)), ks
    assert "__qfc_dsp_" in ks[f"fc{len(layers) - 1}"]      # the fallback runs there too
    assert "__qfc2_dsp_fasts_d" in c.header and "fc1_swaps" in c.header
    assert "_ck" in ks["fc7"] and "_ck" in ks["fc8"]
    g = c.graph
    r = qemu.simulate(c, {n: feeds[n] for n in g.inputs}, board)
    ref = reference.run(g, feeds)
    for name, o in zip(g.outputs, r.outputs):
        np.testing.assert_array_equal(o.reshape(ref[name].shape), ref[name], err_msg=f"{board}: {name}")
