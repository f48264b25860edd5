"""Recurrent layers: LSTM, GRU and RNN (ONNX opset 7-22 semantics).

Everything ONNX defines for inference: direction forward / reverse /
bidirectional; `layout` 0 ([T, B, I]) and 1 ([B, T, I]); optional B,
initial_h, initial_c, P (LSTM peepholes); `sequence_lens` absent or a
constant (a run-time one is refused by name); every activation ONNX lists
(Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh,
HardSigmoid, Elu, Softsign, Softplus) with `activation_alpha/beta`
consumed in order by the functions that take them, with onnxruntime's
defaults (LeakyRelu 0.01, HardSigmoid 0.2/0.5, Elu 1.0, otherwise 0);
`clip` on every gate's pre-activation (after bias and peephole, as
onnxruntime applies it); LSTM `input_forget`; GRU `linear_before_reset`;
every output optional. Steps past a batch entry's sequence length write
zeros to Y; a length of 0 gives zero Y_h / Y_c (onnxruntime's behaviour).

W and R must be constants: they are packed at compile time. For each
direction the gate rows of [W | R] (the x part and the h part of each row
side by side) are interleaved in blocks of four rows, so the kernel's
matrix-vector product reads one contiguous stream and loads each x / h
element once per four multiply-adds, with no copy of x_t next to h_{t-1}
(see templates/kernels/rnn_f32.c.j2). GRU's candidate gate keeps its x and
h parts apart (r multiplies only the recurrent part). Biases Wb + Rb are
summed at compile time where the equations allow.

Weight-only int8 (a QDQ model's DequantizeLinear weights, see
passes/qdq.py): W and R may be int8 constants with a per-row float32 scale
as extra inputs 8 (W scale, [D, G*H]) and 9 (R scale); the kernel then
keeps the int8 weights in flash and scales each row's two partial sums.
The reference dequantizes exactly as DequantizeLinear would.

The integer-only forms (cuvil.QLSTM / cuvil.QGRU) live in ops/qrnn.py;
the shape rules, activation tables and spec parsing here are shared.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from .base import Op, register, shape_error, unsupported

# gates per layer and the default activation list of one direction
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
# input positions: X W R B sequence_lens initial_h initial_c P; then our W/R scales
IX, IW, IR, IB, ISEQ, IH0, IC0, IP, IWS, IRS = range(10)


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


# The kernels' tanh (and sigmoid(v) = 1/2 + tanh(v / 2) / 2): v P(v^2) / Q(v^2)
# on |v| <= 9, clamped beyond, instead of newlib's tanhf / expf (~100
# instructions each on a Cortex-M4; this is ~15). Coefficients: a Lawson-
# weighted least-squares fit of the relative error on [0, 9]; max relative
# error 9.4e-8 in exact arithmetic, 4.1e-7 evaluated in float32 (the C is
# checked on a 3e-5 grid over [-12, 12] in tests/test_rnn.py). The reference keeps
# numpy's exact functions: the kernels are within the float tolerance.
TANH_P = (0.9999999989860485, 0.13414860007089, 0.0035355598585268574, 2.125735360699801e-05,
          1.4233205285886707e-08)
TANH_Q = (1.0, 0.46748189088027087, 0.026029611248015026, 0.0003350606949891682, 8.140404485304716e-07)
TANH_CLAMP = 9.0


# lower-case name -> (takes alpha, takes beta, default alpha, default beta,
#                     numpy f(v, a, b) in float64, C expression over float v with literals A, B)
ACTIVATIONS = {
    "relu": (False, False, 0.0, 0.0, lambda v, a, b: np.maximum(v, 0.0), "(v > 0.0f ? v : 0.0f)"),
    "tanh": (False, False, 0.0, 0.0, lambda v, a, b: np.tanh(v), "TANH(v)"),
    "sigmoid": (False, False, 0.0, 0.0, lambda v, a, b: _sigmoid(v), "SIGMOID(v)"),
    "affine": (True, True, 0.0, 0.0, lambda v, a, b: a * v + b, "A * v + B"),
    "leakyrelu": (True, False, 0.01, 0.0, lambda v, a, b: np.where(v >= 0, v, a * v), "(v >= 0.0f ? v : A * v)"),
    "thresholdedrelu": (True, False, 0.0, 0.0, lambda v, a, b: np.where(v > a, v, 0.0), "(v > A ? v : 0.0f)"),
    "scaledtanh": (True, True, 0.0, 0.0, lambda v, a, b: a * np.tanh(b * v), "A * TANH(B * v)"),
    "hardsigmoid": (True, True, 0.2, 0.5, lambda v, a, b: np.minimum(1.0, np.maximum(0.0, a * v + b)),
                    "fminf(1.0f, fmaxf(0.0f, A * v + B))"),
    "elu": (True, False, 1.0, 0.0, lambda v, a, b: np.where(v >= 0, v, a * (np.exp(np.minimum(v, 0.0)) - 1.0)),
            "(v >= 0.0f ? v : A * (expf(v) - 1.0f))"),
    "softsign": (False, False, 0.0, 0.0, lambda v, a, b: v / (1.0 + np.abs(v)), "v / (1.0f + fabsf(v))"),
    "softplus": (False, False, 0.0, 0.0, lambda v, a, b: np.log1p(np.exp(v)), "logf(1.0f + expf(v))"),
}
ONNX_NAMES = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
              "HardSigmoid", "Elu", "Softsign", "Softplus")


@dataclass(frozen=True)
class Act:
    name: str        # lower-case key of ACTIVATIONS
    alpha: float
    beta: float

    def np(self, v):
        return ACTIVATIONS[self.name][4](v, np.float64(np.float32(self.alpha)), np.float64(np.float32(self.beta)))

    def c(self, prefix: str) -> str:
        """The C expression over float v (the kernels' tanh / sigmoid helpers)."""
        from ..codegen.carray import c_float
        e = ACTIVATIONS[self.name][5].replace("TANH", f"{prefix}__rnn_tanh").replace("SIGMOID", f"{prefix}__rnn_sigmoid")
        return e.replace("A", c_float(self.alpha)).replace("B", c_float(self.beta))


@dataclass
class Spec:
    """Everything the kernels and the reference need, read from one node."""

    kind: str                    # LSTM | GRU | RNN (also for the cuvil.Q* forms)
    G: int                       # gates
    D: int                       # directions
    T: int
    B: int
    I: int
    H: int
    layout: int
    direction: str
    acts: list[list[Act]]        # per direction, G-1 (LSTM 3, GRU 2, RNN 1) functions
    clip: float | None
    input_forget: bool
    lbr: bool                    # GRU linear_before_reset
    lens: np.ndarray | None      # [B] int64, None: all T

    def length(self, b: int) -> int:
        return self.T if self.lens is None else int(self.lens[b])

    def reverse(self, d: int) -> bool:
        return self.direction == "reverse" or (self.direction == "bidirectional" and d == 1)

    def default_acts(self) -> bool:
        want = [a.lower() for a in DEFAULT_ACTS[self.kind]]
        return all([a.name for a in acts] == want for acts in self.acts)


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def kind_of(node) -> str:
    t = node.op_type
    return t.rsplit(".", 1)[-1].replace("Q", "", 1) if t.startswith("cuvil.Q") else t


def parse_acts(node, kind: str, D: int) -> list[list[Act]]:
    n = len(DEFAULT_ACTS[kind])
    names = node.attr("activations")
    if names is None:
        names = list(DEFAULT_ACTS[kind]) * D
    names = [_s(a) for a in names]
    if len(names) != n * D:
        raise unsupported(node, f"attribute activations has {len(names)} entries {names}; {kind} with "
                                f"{D} direction(s) takes {n * D}")
    alphas = list(node.attr("activation_alpha") or [])
    betas = list(node.attr("activation_beta") or [])
    out: list[Act] = []
    for a in names:
        key = a.lower()
        if key not in ACTIVATIONS:
            raise unsupported(node, f"attribute activations: '{a}' is not an activation ONNX defines for "
                                    f"recurrent layers ({', '.join(ONNX_NAMES)})")
        ta, tb, da, db, _, _ = ACTIVATIONS[key]
        alpha = float(alphas.pop(0)) if ta and alphas else (da if ta else 0.0)
        beta = float(betas.pop(0)) if tb and betas else (db if tb else 0.0)
        out.append(Act(key, alpha, beta))
    return [out[d * n:(d + 1) * n] for d in range(D)]


def spec(node, ins) -> Spec:
    """Parse and check the node against its input shapes (shape errors and
    unsupported attribute values name the node and the attribute)."""
    kind = kind_of(node)
    G = GATES[kind]
    x, w, r = (ins[i] if len(ins) > i else None for i in (IX, IW, IR))
    if x is None or w is None or r is None:
        raise shape_error(node, "X, W and R are required")
    direction = _s(node.attr("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise unsupported(node, f"attribute direction '{direction}' (forward, reverse or bidirectional)")
    D = 2 if direction == "bidirectional" else 1
    layout = int(node.attr("layout", 0))
    if layout not in (0, 1):
        raise unsupported(node, f"attribute layout {layout} (0 or 1)")
    if len(x.shape) != 3:
        raise shape_error(node, f"X '{x.name}' must be 3-D, is {list(x.shape)}")
    T, B, I = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    if len(r.shape) != 3:
        raise shape_error(node, f"R '{r.name}' must be 3-D [num_directions, {G}*hidden_size, hidden_size], "
                                f"is {list(r.shape)}")
    H = int(node.attr("hidden_size", r.shape[2]))
    if tuple(w.shape) != (D, G * H, I):
        raise shape_error(node, f"W '{w.name}' is {list(w.shape)}, expected [{D}, {G * H}, {I}]")
    if tuple(r.shape) != (D, G * H, H):
        raise shape_error(node, f"R '{r.name}' is {list(r.shape)}, expected [{D}, {G * H}, {H}]")
    b = ins[IB] if len(ins) > IB else None
    if b is not None and tuple(b.shape) != (D, 2 * G * H):
        raise shape_error(node, f"B '{b.name}' is {list(b.shape)}, expected [{D}, {2 * G * H}]")
    state = (B, D, H) if layout else (D, B, H)
    for i, what in ((IH0, "initial_h"), (IC0, "initial_c")):
        t = ins[i] if len(ins) > i else None
        if t is not None and (i == IH0 or kind == "LSTM") and tuple(t.shape) != state:
            raise shape_error(node, f"{what} '{t.name}' is {list(t.shape)}, expected {list(state)}")
    p = ins[IP] if len(ins) > IP and kind == "LSTM" else None
    if p is not None and tuple(p.shape) != (D, 3 * H):
        raise shape_error(node, f"P '{p.name}' is {list(p.shape)}, expected [{D}, {3 * H}]")
    lens = None
    sl = ins[ISEQ] if len(ins) > ISEQ else None
    if sl is not None:
        if not sl.is_const:
            raise unsupported(node, f"input sequence_lens '{sl.name}' is a run-time tensor; only a constant "
                                    f"sequence_lens (or none) is supported")
        lens = np.asarray(sl.data).astype(np.int64).reshape(-1)
        if lens.size != B:
            raise shape_error(node, f"sequence_lens '{sl.name}' has {lens.size} values for batch {B}")
        if lens.size and (lens.min() < 0 or lens.max() > T):
            raise shape_error(node, f"sequence_lens '{sl.name}' values {lens.tolist()} must lie in [0, {T}]")
        if lens.size and bool(np.all(lens == T)):
            lens = None
    clip = node.attr("clip")
    if clip is not None:
        clip = float(clip)
        if not clip > 0 or not math.isfinite(clip):
            raise unsupported(node, f"attribute clip {clip} must be a finite threshold > 0")
    input_forget = bool(int(node.attr("input_forget", 0))) if kind == "LSTM" else False
    lbr = bool(int(node.attr("linear_before_reset", 0))) if kind == "GRU" else False
    return Spec(kind, G, D, int(T), int(B), int(I), H, layout, direction, parse_acts(node, kind, D), clip,
                input_forget, lbr, lens)


def out_shapes(s: Spec) -> list[tuple[int, ...]]:
    y = (s.B, s.T, s.D, s.H) if s.layout else (s.T, s.D, s.B, s.H)
    st = (s.B, s.D, s.H) if s.layout else (s.D, s.B, s.H)
    return [y, st, st]


def n_outputs(kind: str) -> int:
    return 3 if kind == "LSTM" else 2


def macs(s: Spec) -> int:
    steps = s.T * s.B if s.lens is None else int(s.lens.sum())
    return s.D * steps * s.G * s.H * (s.I + s.H)


# --------------------------------------------------------------------------- float reference

def weights(node, ins, arrays, s: Spec):
    """W, R (float64, dequantized when int8 with per-row scales), Wb, Rb, P per direction."""
    w = np.asarray(arrays[IW], np.float64)
    r = np.asarray(arrays[IR], np.float64)
    if len(arrays) > IWS and arrays[IWS] is not None:
        w = w * np.asarray(arrays[IWS], np.float32).astype(np.float64)[:, :, None]
        r = r * np.asarray(arrays[IRS], np.float32).astype(np.float64)[:, :, None]
    gh = s.G * s.H
    b = arrays[IB] if len(arrays) > IB and arrays[IB] is not None else np.zeros((s.D, 2 * gh), np.float32)
    b = np.asarray(b, np.float64)
    p = arrays[IP] if s.kind == "LSTM" and len(arrays) > IP and arrays[IP] is not None \
        else np.zeros((s.D, 3 * s.H), np.float32)
    return w, r, b[:, :gh], b[:, gh:], np.asarray(p, np.float64)


def time_major(x, layout: int):
    """[T, B, ...] view of a [B, T, ...] (layout 1) array."""
    return np.swapaxes(x, 0, 1) if layout else x


def state_in(arrays, i: int, s: Spec, dtype=np.float64) -> np.ndarray:
    """initial_h / initial_c as [D, B, H] (zeros when absent)."""
    v = arrays[i] if len(arrays) > i and arrays[i] is not None else None
    if v is None:
        return np.zeros((s.D, s.B, s.H), dtype)
    v = np.asarray(v)
    return (np.swapaxes(v, 0, 1) if s.layout else v).astype(dtype)


def pack_outputs(s: Spec, y, yh, yc, dtype):
    """[T, D, B, H] / [D, B, H] arrays -> the node's outputs in its layout."""
    if s.layout:
        y, yh, yc = np.transpose(y, (2, 0, 1, 3)), np.swapaxes(yh, 0, 1), np.swapaxes(yc, 0, 1)
    outs = [np.ascontiguousarray(y).astype(dtype), np.ascontiguousarray(yh).astype(dtype),
            np.ascontiguousarray(yc).astype(dtype)]
    return outs[:n_outputs(s.kind)]


def _clip(v, c):
    return v if c is None else np.clip(v, -c, c)


def run_float(s: Spec, x, w, r, wb, rb, p, h0, c0, record: dict | None = None):
    """The recurrence in float64 on time-major x [T, B, I]; returns
    y [T, D, B, H], y_h [D, B, H], y_c [D, B, H]. record: a dict that gets
    the running extremes of every hidden state ('h_min', 'h_max') and the
    largest |cell state| ('c_absmax') over all steps (calibration)."""
    H = s.H
    y = np.zeros((s.T, s.D, s.B, H))
    yh = np.zeros((s.D, s.B, H))
    yc = np.zeros((s.D, s.B, H))
    for d in range(s.D):
        f = s.acts[d]
        for bi in range(s.B):
            L = s.length(bi)
            h, c = h0[d, bi].copy(), c0[d, bi].copy()
            if record is not None:   # the initial state is a hidden state too
                record["h_min"] = min(record.get("h_min", 0.0), float(h.min()) if H else 0.0)
                record["h_max"] = max(record.get("h_max", 0.0), float(h.max()) if H else 0.0)
                record["c_absmax"] = max(record.get("c_absmax", 0.0), float(np.abs(c).max()) if H else 0.0)
            steps = range(L - 1, -1, -1) if s.reverse(d) else range(L)
            for t in steps:
                xt = x[t, bi].astype(np.float64)
                if s.kind == "LSTM":
                    g = w[d] @ xt + r[d] @ h + wb[d] + rb[d]
                    gi, go, gf, gc = g[:H], g[H:2 * H], g[2 * H:3 * H], g[3 * H:]
                    pi, po, pf = p[d, :H], p[d, H:2 * H], p[d, 2 * H:]
                    i = f[0].np(_clip(gi + pi * c, s.clip))
                    fg = 1.0 - i if s.input_forget else f[0].np(_clip(gf + pf * c, s.clip))
                    c = fg * c + i * f[1].np(_clip(gc, s.clip))
                    h = f[0].np(_clip(go + po * c, s.clip)) * f[2].np(c)
                elif s.kind == "GRU":
                    gx = w[d] @ xt + wb[d]
                    z = f[0].np(_clip(gx[:H] + r[d, :H] @ h + rb[d, :H], s.clip))
                    rr = f[0].np(_clip(gx[H:2 * H] + r[d, H:2 * H] @ h + rb[d, H:2 * H], s.clip))
                    if s.lbr:
                        n = gx[2 * H:] + rr * (r[d, 2 * H:] @ h + rb[d, 2 * H:])
                    else:
                        n = gx[2 * H:] + r[d, 2 * H:] @ (rr * h) + rb[d, 2 * H:]
                    h = (1.0 - z) * f[1].np(_clip(n, s.clip)) + z * h
                else:
                    h = f[0].np(_clip(w[d] @ xt + r[d] @ h + wb[d] + rb[d], s.clip))
                y[t, d, bi] = h
                if record is not None:
                    record["h_min"] = min(record.get("h_min", 0.0), float(h.min()))
                    record["h_max"] = max(record.get("h_max", 0.0), float(h.max()))
                    record["c_absmax"] = max(record.get("c_absmax", 0.0), float(np.abs(c).max()))
            if L:
                yh[d, bi], yc[d, bi] = h, c
    return y, yh, yc


# --------------------------------------------------------------------------- kernel arguments

def pack_rows(wx: np.ndarray, wh: np.ndarray | None, dtype) -> np.ndarray:
    """Rows of [wx | wh] in the kernel's order: blocks of four rows with
    their columns interleaved (x part, then h part), then the leftover rows
    one by one (x part, then h part). wh None: no h part."""
    rows = wx.shape[0]
    parts = []
    full = rows - rows % 4
    for r0 in range(0, full, 4):
        parts.append(wx[r0:r0 + 4].T.reshape(-1))
        if wh is not None:
            parts.append(wh[r0:r0 + 4].T.reshape(-1))
    for r0 in range(full, rows):
        parts.append(wx[r0])
        if wh is not None:
            parts.append(wh[r0])
    return np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros(0), dtype)


def geometry(s: Spec, d: int) -> dict:
    """Element strides and per-direction base offsets of x, y and the states."""
    T, B, I, H, D = s.T, s.B, s.I, s.H, s.D
    if s.layout:
        return dict(sxt=I, sxb=T * I, syt=D * H, syb=T * D * H, ssb=D * H, y0=d * H, s0=d * H)
    return dict(sxt=B * I, sxb=I, syt=D * B * H, syb=H, ssb=H, y0=d * B * H, s0=d * B * H)


def variant_name(kind: str, payload: str) -> str:
    return f"{kind.lower()}_{hashlib.sha256(payload.encode()).hexdigest()[:8]}"


@register("LSTM", "GRU", "RNN")
class Recurrent(Op):
    def check(self, node, ins):
        if all(t is None or t.is_const for t in ins):
            spec(node, ins)
            return
        x = ins[IX]
        if x.dtype != "float32":
            raise unsupported(node, f"X '{x.name}' is {x.dtype}; this op runs on float32 (int8 LSTM/GRU come "
                                    f"from --quantize int8)")
        for i, what in ((IW, "W"), (IR, "R"), (IB, "B"), (IP, "P")):
            t = ins[i] if len(ins) > i else None
            if t is not None and not t.is_const and not (i == IP and node.op_type != "LSTM"):
                raise unsupported(node, f"input {what} '{t.name}' must be a constant (weights are packed "
                                        f"into flash at compile time)")
        int8_w = len(ins) > IWS and ins[IWS] is not None
        for i, what in ((IW, "W"), (IR, "R")):
            if ins[i].dtype != ("int8" if int8_w else "float32"):
                raise unsupported(node, f"input {what} '{ins[i].name}' is {ins[i].dtype}")
        for i, what in ((IH0, "initial_h"), (IC0, "initial_c")):
            t = ins[i] if len(ins) > i else None
            if t is not None and t.dtype != "float32":
                raise unsupported(node, f"{what} '{t.name}' is {t.dtype}; float32 expected")
        spec(node, ins)

    def infer(self, node, ins):
        s = spec(node, ins)
        shapes = out_shapes(s)
        return [(shapes[j], "float32") for j in range(len(node.outputs))]

    def reference(self, node, ins, *arrays):
        s = spec(node, ins)
        w, r, wb, rb, p = weights(node, ins, arrays, s)
        x = time_major(np.asarray(arrays[IX], np.float64), s.layout)
        y, yh, yc = run_float(s, x, w, r, wb, rb, p, state_in(arrays, IH0, s), state_in(arrays, IC0, s))
        return pack_outputs(s, y, yh, yc, np.float32)[:len(node.outputs)]

    def observe(self, node, ins, *arrays) -> dict:
        """Calibration statistics over every time step (not only the
        outputs): 'h_min' / 'h_max' of the hidden state, 'c_absmax' of the
        LSTM cell state. Used by ptq.py for the integer form."""
        s = spec(node, ins)
        w, r, wb, rb, p = weights(node, ins, arrays, s)
        x = time_major(np.asarray(arrays[IX], np.float64), s.layout)
        rec: dict = {}
        run_float(s, x, w, r, wb, rb, p, state_in(arrays, IH0, s), state_in(arrays, IC0, s), rec)
        return rec

    def macs(self, node, ins, outs):
        return macs(spec(node, ins))

    def scratch(self, node, ins, outs):
        s = spec(node, ins)
        return 4 * (s.G * s.H + 3 * s.H)

    def emit(self, node, ins, outs, k):
        s = spec(node, ins)
        H, I, G = s.H, s.I, s.G
        int8_w = len(ins) > IWS and ins[IWS] is not None
        wdt = np.int8 if int8_w else np.float32
        w = np.asarray(ins[IW].data)
        r = np.asarray(ins[IR].data)
        ws = np.asarray(ins[IWS].data, np.float32) if int8_w else None
        rs = np.asarray(ins[IRS].data, np.float32) if int8_w else None
        bias = np.asarray(ins[IB].data, np.float64) if len(ins) > IB and ins[IB] is not None \
            else np.zeros((s.D, 2 * G * H))
        peep = ins[IP] if s.kind == "LSTM" and len(ins) > IP and ins[IP] is not None else None
        mv = k.kernel("rnn_matvec_f32", {"name": "s8" if int8_w else "", "int8": int8_w})
        k.kernel("rnn_act_f32", {"p": TANH_P, "q": TANH_Q, "clamp": TANH_CLAMP})
        outs_by_pos = [node.outputs[j] if len(node.outputs) > j else "" for j in range(3)]
        y, yh, yc = (k.ptr(o) if o else "(float *)0" for o in outs_by_pos)
        h0 = k.ptr(ins[IH0]) if len(ins) > IH0 and ins[IH0] is not None else "(const float *)0"
        c0 = k.ptr(ins[IC0]) if s.kind == "LSTM" and len(ins) > IC0 and ins[IC0] is not None \
            else "(const float *)0"
        lens = k.const(s.lens.astype(np.int32), f"{node.name}_lens") if s.lens is not None else "(const int32_t *)0"
        for d in range(s.D):
            acts = s.acts[d]
            nmat = 1 if s.kind != "GRU" else (3 if s.lbr else 2)
            v = {"kind": s.kind.lower(), "mv": mv, "int8": int8_w, "acts": [a.c(k.prefix) for a in acts], "nmat": nmat,
                 "clip": s.clip is not None, "input_forget": s.input_forget, "lbr": s.lbr,
                 "peep": peep is not None}
            v["name"] = variant_name(s.kind, repr(sorted(v.items())))
            fn = k.kernel("rnn_f32", v)
            wb, rb = bias[d, :G * H], bias[d, G * H:]
            # Matrices: [W | R] rows packed for one product per step, except
            # GRU's candidate gate (see the module doc): with
            # linear_before_reset its x part and h part are two products.
            if s.kind == "GRU":
                zr = slice(0, 2 * H)
                n = slice(2 * H, 3 * H)
                mats = [(w[d, zr], r[d, zr], wb[zr] + rb[zr], ws, rs, zr)]
                if s.lbr:
                    mats += [(w[d, n], None, wb[n], ws, None, n), (r[d, n], None, rb[n], rs, None, n)]
                else:
                    mats += [(w[d, n], r[d, n], wb[n] + rb[n], ws, rs, n)]
            else:
                mats = [(w[d], r[d], wb + rb, ws, rs, slice(0, G * H))]
            margs = []
            for m, (mx, mh, mb, sx, sh, rows) in enumerate(mats):
                margs.append(k.const(pack_rows(mx, mh, wdt), f"{node.name}_w{m}_d{d}"))
                margs.append(k.const(np.asarray(mb, np.float32), f"{node.name}_b{m}_d{d}"))
                if int8_w:
                    # no h part: the x scales stand in (never read; the kernel steps both pointers)
                    margs.append(k.const(np.ascontiguousarray(sx[d, rows], np.float32), f"{node.name}_sx{m}_d{d}"))
                    margs.append(k.const(np.ascontiguousarray((sh if sh is not None else sx)[d, rows], np.float32),
                                         f"{node.name}_sh{m}_d{d}"))
            p = k.const(np.asarray(peep.data[d], np.float32), f"{node.name}_p_d{d}") if peep is not None \
                else "(const float *)0"
            gm = geometry(s, d)
            geo = np.array([s.T, s.B, I, H, int(s.reverse(d)), gm["sxt"], gm["sxb"], gm["syt"], gm["syb"],
                            gm["ssb"]], np.int32)
            gsym = k.const(geo, f"{node.name}_geo")
            so, yo = gm["s0"], gm["y0"]

            def at(ptr, off, null):
                return ptr if ptr == null else f"{ptr} + {off}"

            lo, hi = (k.f32(-s.clip), k.f32(s.clip)) if s.clip is not None else ("-INFINITY", "INFINITY")
            k.line(f"{fn}({k.ptr(ins[IX])}, {', '.join(margs)}, {p}, {at(h0, so, '(const float *)0')}, "
                   f"{at(c0, so, '(const float *)0')}, {at(y, yo, '(float *)0')}, {at(yh, so, '(float *)0')}, "
                   f"{at(yc, so, '(float *)0')}, {lens}, {gsym}, {lo}, {hi}, {k.scratch('float')});")
