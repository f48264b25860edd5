"""Memoized requantization solvers.

The tile pass (passes/tile.py) lowers the same layers once per plan it
evaluates (VWW: 7 plans), and each lowering asks the same solvers the same
questions: dsp_dw._fit (per channel, the multiplier and nudge of one
shift) and dsp_conv._one_nudge_ok (lo_nudge's level-by-level check) took
~44 s of VWW's ~50 s compile for the M4, ~4.5 s when each question is
answered once (and much less since _fit tries its nearest multipliers
first: dsp_dw.FIT_CHUNKS). `solver` remembers the answers of such functions within the
process, keyed on the arguments' values (arrays by dtype, shape and a
128-bit BLAKE2b of their bytes), and hands every caller its own copy.
Only leaf functions of their arguments alone take it: nothing they read
from a module (a tunable a test may patch) may change their answer. At
most MAX answers are kept; the least recently used go first.
"""
from __future__ import annotations

import copy
import functools
import hashlib
from collections import OrderedDict

import numpy as np

MAX = 4096


def _key(v):
    if isinstance(v, np.ndarray):
        return ("a", v.dtype.str, v.shape, hashlib.blake2b(np.ascontiguousarray(v).tobytes(), digest_size=16).digest())
    if isinstance(v, (list, tuple)):
        return ("l" if isinstance(v, list) else "t",) + tuple(_key(x) for x in v)
    if isinstance(v, (np.integer, np.floating)):
        return ("s", v.dtype.str, v.item())
    if v is None or isinstance(v, (bool, int, float, str)):
        return (type(v).__name__, v)
    raise TypeError(f"memo.solver: unhashable argument type {type(v).__name__}")


def solver(fn):
    """fn's answers remembered per argument values (see the module's doc)."""
    seen: OrderedDict = OrderedDict()

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        key = (tuple(_key(a) for a in args), tuple(sorted((k, _key(v)) for k, v in kw.items())))
        if key in seen:
            seen.move_to_end(key)
            return copy.deepcopy(seen[key])
        out = fn(*args, **kw)
        seen[key] = out
        if len(seen) > MAX:
            seen.popitem(last=False)
        return copy.deepcopy(out)

    wrapper.cache_clear = seen.clear
    wrapper.cache_len = seen.__len__
    return wrapper
