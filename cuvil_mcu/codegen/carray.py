"""C literals for arrays and scalars (Jinja filters)."""
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
