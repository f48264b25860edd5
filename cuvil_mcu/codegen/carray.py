"""C literals for arrays and scalars (Jinja filters).

Big constant arrays print as words (c_words): their bytes in little-endian
64-bit words, hex, five to a line, about 2.4 characters per byte, built by
numpy without a Python step per element, and exact by construction (no
float goes through decimal text). The header stores such an array in a
union of the words and the element array the kernels read (model.h.j2).
Small arrays (under WORDS_FROM bytes: quantization parameters, shapes,
kernel geometry) keep one readable literal per element (c_array)."""
from __future__ import annotations

import math

import numpy as np


def c_float(x, clamp_inf: bool = False) -> str:
    """Shortest float32 literal that reads back to the same float32. With
    clamp_inf, infinities print as +-FLT_MAX (for clamp bounds)."""
    f = np.float32(x)
    if math.isnan(f):
        return "NAN"
    if math.isinf(f):
        if clamp_inf:
            return "FLT_MAX" if f > 0 else "-FLT_MAX"
        return "INFINITY" if f > 0 else "-INFINITY"
    s = np.format_float_scientific(f, unique=True, trim="-") if (f != 0 and (abs(f) < 1e-4 or abs(f) >= 1e7)) \
        else np.format_float_positional(f, unique=True, trim="-")
    if "." not in s and "e" not in s:
        s += ".0"
    return s + "f"


def c_string(s: str) -> str:
    """Body of a C string literal holding s (UTF-8): quotes, backslashes and
    '?' (trigraphs under -std=c99) escaped; control and non-ASCII bytes as
    three-digit octal escapes, so no following character can extend them."""
    out = []
    for b in str(s).encode("utf-8"):
        ch = chr(b)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


def c_comment(s: str) -> str:
    """s made safe inside a /* */ comment: no comment delimiters, no line
    breaks or control characters, no trigraphs (gcc -Wcomment/-Wtrigraphs)."""
    s = "".join(c if c.isprintable() else " " for c in str(s))
    s = s.replace("*/", "* /").replace("/*", "/ *")
    while "??" in s:
        s = s.replace("??", "? ?")
    return s


def _int_lit(v: int, bits: int) -> str:
    if bits == 64:
        if v == -(2 ** 63):
            return "(-9223372036854775807LL - 1)"
        return f"{v}LL"
    if bits == 32 and v == -(2 ** 31):
        return "(-2147483647 - 1)"
    return str(v)


def c_array(data: np.ndarray, per_line: int = 0) -> str:
    """Body of a C initializer `{ ... }` for data (flattened, row-major), one
    literal per element. Integers go through str() in C (map), not a Python
    loop; floats through c_float (shortest round-trip text), so keep float
    arrays given to this filter small (big constants print as words: c_words)."""
    flat = np.ascontiguousarray(data).reshape(-1)
    if flat.dtype == np.float32:
        items = [c_float(v) for v in flat.tolist()]
        per_line = per_line or 8
    elif flat.dtype == np.float64:
        items = [repr(float(v)) if math.isfinite(v) else ("INFINITY" if v > 0 else "-INFINITY") for v in flat.tolist()]
        per_line = per_line or 6
    elif flat.dtype == np.bool_:
        items = list(map(str, flat.astype(np.uint8).tolist()))
    else:
        bits = flat.dtype.itemsize * 8
        items = list(map(str, flat.tolist()))
        if bits == 64:
            items = [s + "LL" for s in items]
        low = np.iinfo(flat.dtype).min
        if bits >= 32 and low < 0 and (flat == low).any():   # no literal of its own
            text = str(low) + ("LL" if bits == 64 else "")
            items = [_int_lit(low, bits) if s == text else s for s in items]
        per_line = per_line or (16 if bits <= 16 else 10)
    per_line = per_line or 16
    if not items:
        return "0"
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "\n    " + ",\n    ".join(lines) + "\n"


WORDS_FROM = 64           # arrays of at least this many bytes print as words
WORDS_PER_LINE = 5
_CHUNK_WORDS = WORDS_PER_LINE << 17   # numpy works on ~5 MB of constants at a time


def word_count(data: np.ndarray) -> int:
    """How many 64-bit words hold data's bytes (the last one zero-padded)."""
    return -(-np.asarray(data).nbytes // 8)


def c_words(data: np.ndarray) -> str:
    """Braced initializer of a `uint64_t [word_count(data)]` holding data's
    bytes, element after element in the little-endian byte order of the
    targets (x86, Arm): `{\n0x3f800000bf800000,0x0,...\n}`. Leading zero
    digits are left out; the last word is padded with zero bytes."""
    a = np.ascontiguousarray(data)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    raw = a.reshape(-1).view(np.uint8)
    n = word_count(raw)
    if n == 0:
        return "{ 0 }"
    parts = ["{\n"]
    for start in range(0, n, _CHUNK_WORDS):
        stop = min(n, start + _CHUNK_WORDS)
        m = stop - start
        seg = raw[start * 8:stop * 8]
        if seg.size % 8:
            seg = np.concatenate([seg, np.zeros(8 - seg.size % 8, np.uint8)])
        # most significant byte first, as a hex literal reads
        hexed = seg.reshape(m, 8)[:, ::-1].tobytes().hex().encode("ascii")
        digits = np.frombuffer(hexed, np.uint8).reshape(m, 16)
        cells = np.empty((m, 20), np.uint8)   # 0 x 16 digits , newline
        cells[:, 0] = ord("0")
        cells[:, 1] = ord("x")
        cells[:, 2:18] = digits
        cells[:, 18] = ord(",")
        cells[:, 19] = ord("\n")
        lead = np.argmax(digits != ord("0"), axis=1)   # leading zero digits
        lead[(lead == 0) & (digits[:, 0] == ord("0"))] = 15   # zero prints as 0x0
        keep = np.ones(cells.shape, bool)
        keep[:, 2:18] = np.arange(16) >= lead[:, None]
        index = np.arange(start, stop)
        keep[:, 19] = (index % WORDS_PER_LINE == WORDS_PER_LINE - 1) | (index == n - 1)
        parts.append(cells[keep].tobytes().decode("latin-1"))
    parts.append("}")
    return "".join(parts)
