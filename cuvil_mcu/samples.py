"""How an array from a sample file maps onto one model input (run, sim,
report, validate):

- ONE:     the input's own shape, one sample ([1, 3, 32, 32]);
- STACKED: samples on a new leading axis ([samples, 1, 3, 32, 32]);
- BATCH:   a batch-1 input's samples on its batch axis ([samples, 3, 32, 32]),
           what a training pipeline usually saves.

The ranks tell STACKED and BATCH apart and ONE and BATCH mean the same with
one sample, so a shape never has two readings. Outputs go back the same way.
"""
from __future__ import annotations

ONE, STACKED, BATCH = "one", "stacked", "batch"


def layout_of(given, shape) -> str | None:
    given, shape = tuple(given), tuple(shape)
    if given == shape:
        return ONE
    if len(given) == len(shape) + 1 and given[1:] == shape:
        return STACKED
    if shape and shape[0] == 1 and len(given) == len(shape) and given[1:] == shape[1:]:
        return BATCH
    return None


def expected(shape) -> str:
    """What layout_of accepts, for error messages."""
    dims = ", ".join(map(str, shape))
    text = f"[{dims}] (or [samples, {dims}]"
    if shape and shape[0] == 1:
        text += f", or [samples{', ' if len(shape) > 1 else ''}{', '.join(map(str, shape[1:]))}]"
    return text + ")"


def to_samples(x, shape, layout: str):
    """(samples, *shape)."""
    if layout == ONE:
        return x[None]
    if layout == BATCH:
        return x.reshape((x.shape[0], *shape))
    return x


def from_samples(y, shape, layout: str):
    """An output (samples, *shape) in the layout the inputs came in."""
    if layout == ONE:
        return y[0]
    if layout == BATCH and shape and shape[0] == 1:
        return y.reshape((y.shape[0], *shape[1:]))
    return y


def common(layouts: list[str]) -> str:
    """The outputs' layout for inputs given in these layouts."""
    return next((lay for lay in layouts if lay != ONE), ONE)
