"""cuvil_mcu.isa.memo: remembered solver answers are the function's own,
per argument value, and every caller gets a copy it may change."""
import numpy as np
import pytest

from cuvil_mcu.isa import dsp_conv, dsp_dw, memo


def _counting():
    calls = []

    @memo.solver
    def f(a, e, b=None):
        calls.append(1)
        return (np.asarray(a, np.int64) * e, None if b is None else int(np.sum(b)))

    return f, calls


def test_same_values_answered_once_and_copied():
    f, calls = _counting()
    x = np.array([1, 2, 3], np.int64)
    first = f(x, 2)
    first[0][0] = 99                       # the caller changes its answer
    again = f(np.array([1, 2, 3], np.int64), 2)
    assert len(calls) == 1
    assert again[0].tolist() == [2, 4, 6] and again[1] is None


@pytest.mark.parametrize("other", [
    (np.array([1, 2, 3], np.int32), 2, None),      # dtype
    (np.array([[1, 2, 3]], np.int64), 2, None),    # shape
    (np.array([1, 2, 4], np.int64), 2, None),      # a value
    (np.array([1, 2, 3], np.int64), 3, None),      # a scalar
    (np.array([1, 2, 3], np.int64), 2, [5]),       # a keyword
])
def test_different_arguments_are_asked(other):
    f, calls = _counting()
    f(np.array([1, 2, 3], np.int64), 2)
    a, e, b = other
    got = f(a, e, b=b) if b is not None else f(a, e)
    assert len(calls) == 2
    assert got[0].tolist() == (np.asarray(a, np.int64) * e).tolist()
    assert got[1] == (None if b is None else 5)


def test_least_recently_used_go_first(monkeypatch):
    monkeypatch.setattr(memo, "MAX", 2)
    f, calls = _counting()
    f(np.array([1]), 1)
    f(np.array([2]), 1)
    f(np.array([1]), 1)                    # used again: [2] is now the oldest
    f(np.array([3]), 1)                    # evicts [2]
    assert len(calls) == 3
    f(np.array([1]), 1)
    assert len(calls) == 3
    f(np.array([2]), 1)
    assert len(calls) == 4


def test_unkeyable_argument_is_refused():
    f, _ = _counting()
    with pytest.raises(TypeError, match="unhashable argument type dict"):
        f({"a": 1}, 2)


def test_fit_remembered_equals_fit_solved():
    """dsp_dw._fit through the memo against the undecorated function, on a
    channel of requant_dw with a shift of 9 refitted at 12 (the one_shift
    question), and a second time from the memo."""
    bot, top, mult, e, yzp = -20000, 30000, 1_431_655_765, 9, -3
    acc = np.arange(bot, top + 1, dtype=np.int64)
    v = dsp_dw.requant_dw(acc, mult, e, yzp, corr=False)
    want = bot + np.searchsorted(v, np.arange(-127, 128, dtype=np.int64), side="left")
    m2 = (mult >> 4) + dsp_conv.nearest_first(dsp_dw.FIT_SPAN)
    direct = dsp_dw._fit.__wrapped__(want, bot, top, 12, m2)
    assert direct is not None
    assert dsp_dw._fit(want, bot, top, 12, m2) == direct
    assert dsp_dw._fit(want.copy(), bot, top, 12, m2.copy()) == direct


def _fit_whole(want, bot, top, e, m2):
    """dsp_dw._fit's definition over the whole multiplier range at once
    (the first m, in the order given, with a feasible n), in Python
    integers: n >= q 2^e - floor(T_q m / 2^24) where level q is reached
    inside [bot, top], n <= q 2^e - floor((T_q - 1) m / 2^24) - 1 where it
    is not reached at or below T_q - 1; n within +-2^30."""
    for m in (int(v) for v in m2):
        if not 0 < m < 2 ** 31:
            continue
        lo, hi = -(2 ** 30) + 1, 2 ** 62
        for q, t in zip(range(-127, 128), (int(v) for v in want)):
            if t <= top:
                lo = max(lo, (q << e) - ((t * m) >> 24))
            if t > bot:
                hi = min(hi, (q << e) - (((t - 1) * m) >> 24) - 1)
        if lo <= hi and lo < 2 ** 30:
            return m, lo
    return None


def test_fit_in_chunks_equals_whole_range():
    """dsp_dw._fit tries its multipliers in chunks, nearest first: the same
    answer as the whole range in Python integers, for channels fitted by
    their first multiplier, by a later one and by none (shifts coarser
    than the channel's own by d bits, acc ranges up to +-2^20)."""
    rng = np.random.RandomState(0)
    span = dsp_conv.nearest_first(dsp_dw.FIT_SPAN)
    kinds = {"first": 0, "later": 0, "none": 0}
    for _ in range(16):
        mult = int(rng.randint(2 ** 30, 2 ** 31 - 1))
        e, yzp = int(rng.randint(8, 20)), int(rng.randint(-128, 0))
        r = int(rng.choice([2 ** 12, 2 ** 16, 2 ** 20]))
        acc = np.arange(-r, r + 1, dtype=np.int64)
        v = dsp_dw.requant_dw(acc, mult, e, yzp, corr=False)
        want = -r + np.searchsorted(v, np.arange(-127, 128, dtype=np.int64), side="left")
        for d in (0, 4, 8, 12):
            m2 = (mult >> d) + span
            got = dsp_dw._fit.__wrapped__(want, -r, r, e + 7 - d, m2)
            assert got == _fit_whole(want, -r, r, e + 7 - d, m2)
            kinds["none" if got is None else "first" if got[0] == int(m2[0]) else "later"] += 1
    assert all(kinds.values()), kinds
