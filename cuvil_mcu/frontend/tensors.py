"""TensorProto -> numpy, checked first: the data type is one we handle, the
dims are sane and within the limits, and the stored data (raw bytes or the
typed field the data type calls for) holds exactly the declared number of
values. onnx's own numpy_helper would otherwise fail with a reshape error or
a KeyError, or quietly read float16 bit patterns as float32."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper

from .. import limits
from ..errors import ModelLoadError

T = TensorProto
# data type -> (numpy dtype, the typed field that stores it when raw_data is not used)
SUPPORTED = {
    T.FLOAT: ("float32", "float_data"), T.DOUBLE: ("float64", "double_data"),
    T.FLOAT16: ("float16", "int32_data"), T.INT8: ("int8", "int32_data"), T.UINT8: ("uint8", "int32_data"),
    T.INT16: ("int16", "int32_data"), T.UINT16: ("uint16", "int32_data"), T.INT32: ("int32", "int32_data"),
    T.INT64: ("int64", "int64_data"), T.UINT32: ("uint32", "uint64_data"), T.UINT64: ("uint64", "uint64_data"),
    T.BOOL: ("bool", "int32_data"),
}
TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def type_name(data_type: int) -> str:
    try:
        return T.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


def check(t: TensorProto, what: str, budget: list[int] | None = None) -> None:
    """Refuse a tensor whose data would not read back as declared; `what`
    names it in errors (e.g. "initializer 'w'"). budget: a one-element list
    of constant bytes still allowed (decremented)."""
    if t.data_type not in SUPPORTED:
        names = ", ".join(sorted(type_name(k) for k in SUPPORTED))
        raise ModelLoadError(f"{what}: element type {type_name(t.data_type)} is not supported ({names})")
    if t.data_location == T.EXTERNAL:
        raise ModelLoadError(f"{what}: its data is in an external file; load the model from its path "
                             f"(cuvil-mcu gen model.onnx) so the file next to it is read")
    if t.HasField("segment"):
        raise ModelLoadError(f"{what}: segmented tensors are not supported")
    dtype, field = SUPPORTED[t.data_type]
    dims = list(t.dims)
    if any(d < 0 for d in dims):
        raise ModelLoadError(f"{what}: negative dimension in {dims}")
    itemsize = np.dtype(dtype).itemsize
    limits.check_shape(dims, itemsize, what)
    n = limits.elements(dims)
    if budget is not None:
        budget[0] -= n * itemsize
        if budget[0] < 0:
            raise ModelLoadError(f"{what}: the model's constants exceed {limits.human(limits.MAX_CONST_BYTES)} "
                                 f"(the ceiling; see cuvil_mcu/limits.py)")
    used = [f for f in TYPED_FIELDS if len(getattr(t, f))]
    if t.HasField("raw_data"):
        if used:
            raise ModelLoadError(f"{what}: holds both raw_data and {used[0]}")
        if len(t.raw_data) != n * itemsize:
            raise ModelLoadError(f"{what}: raw_data holds {len(t.raw_data):,} B; dims {dims} of "
                                 f"{type_name(t.data_type)} need {n * itemsize:,} B")
    else:
        if any(f != field for f in used):
            other = next(f for f in used if f != field)
            raise ModelLoadError(f"{what}: a {type_name(t.data_type)} tensor stores its values in {field}, "
                                 f"this one has {other}")
        if len(getattr(t, field)) != n:
            raise ModelLoadError(f"{what}: {field} holds {len(getattr(t, field)):,} values; dims {dims} "
                                 f"need {n:,}")


def to_array(t: TensorProto, what: str, budget: list[int] | None = None) -> np.ndarray:
    """The tensor's values, after `check`."""
    check(t, what, budget)
    dtype = SUPPORTED[t.data_type][0]
    dims = list(t.dims)
    try:
        with np.errstate(all="ignore"):
            a = numpy_helper.to_array(t)
    except Exception as e:  # the checks above should leave nothing to fail here
        raise ModelLoadError(f"{what}: unreadable data ({type(e).__name__}: {e})") from None
    a = np.asarray(a, order="C")
    if a.dtype.name != dtype or tuple(a.shape) != tuple(dims):
        raise ModelLoadError(f"{what}: reads as {a.dtype}{list(a.shape)}, declared {dtype}{dims}")
    return a
