"""Reading an .onnx file without trusting it.

- The file's size and its top-level protobuf framing are checked before the
  whole file is read: a 2.5 GB video or a truncated download is refused
  after a few bytes, not after reading and parsing all of it.
- External data is loaded here, not by the onnx package (whose loader, before
  onnx 1.16, follows a symlink out of the model's folder): every location
  must resolve (symlinks included) inside the model's folder to a regular
  file, and offset/length must agree with the file and with the tensor's
  declared size before a byte is read.
"""
from __future__ import annotations

import os
import stat

import onnx
from onnx import TensorProto

from .. import limits
from ..errors import ModelLoadError

# onnx.load picks a text serializer by these extensions; everything else is
# protobuf (the only format whose framing _check_framing knows).
TEXT_EXTENSIONS = (".txtpb", ".textproto", ".prototxt", ".pbtxt", ".json", ".onnxjson", ".onnxtxt", ".onnxtext")

# ModelProto's fields: number -> wire type (0 varint, 2 length-delimited).
# Unknown numbers are allowed (a newer onnx may add fields).
MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
GRAPH_FIELD = 7
MAX_TOP_FIELDS = 1 << 16


def _varint(f) -> int | None:
    v, shift = 0, 0
    for _ in range(10):
        b = f.read(1)
        if not b:
            return None
        v |= (b[0] & 0x7F) << shift
        if b[0] < 0x80:
            return v
        shift += 7
    return None


def _check_framing(path: str, size: int) -> None:
    """Walk ModelProto's top-level fields (tags and lengths only, seeking over
    the contents): garbage or a truncated file fails here."""
    def bad(why):
        return ModelLoadError(f"{path}: not a readable ONNX model (truncated or not ONNX: {why})")

    has_graph = False
    with open(path, "rb") as f:
        pos, fields = 0, 0
        while pos < size:
            fields += 1
            if fields > MAX_TOP_FIELDS:
                raise bad(f"more than {MAX_TOP_FIELDS} top-level fields")
            tag = _varint(f)
            if tag is None:
                raise bad(f"cut inside a field tag at byte {pos}")
            number, wire = tag >> 3, tag & 7
            if number == 0 or wire not in (0, 1, 2, 5) or MODEL_FIELDS.get(number, wire) != wire:
                raise bad(f"byte {pos} does not start a ModelProto field")
            if wire == 0:
                if _varint(f) is None:
                    raise bad(f"cut inside field {number} at byte {pos}")
                pos = f.tell()
            else:
                if wire == 2:
                    n = _varint(f)
                    if n is None:
                        raise bad(f"cut inside field {number} at byte {pos}")
                else:
                    n = 8 if wire == 1 else 4
                end = f.tell() + n
                if end > size:
                    raise bad(f"field {number} at byte {pos} needs {end - size:,} more bytes than the "
                              f"file holds")
                has_graph |= number == GRAPH_FIELD
                pos = end
                f.seek(pos)
    if not has_graph:
        raise ModelLoadError(f"{path}: not an ONNX model (no graph found; truncated or another file type)")


def read_model(path: str) -> onnx.ModelProto:
    """The ModelProto of `path`, external data loaded and checked."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: no such file") from None
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read it ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ModelLoadError(f"{path}: is a directory, expected an .onnx file")
    if not stat.S_ISREG(st.st_mode):
        raise ModelLoadError(f"{path}: not a regular file (a device or a pipe), expected an .onnx file")
    if st.st_size == 0:
        raise ModelLoadError(f"{path}: file is empty")
    if st.st_size > limits.MAX_MODEL_FILE:
        raise ModelLoadError(f"{path}: {limits.human(st.st_size)} is larger than an ONNX (protobuf) file can be "
                             f"(2 GiB); weights that large belong in external data files")
    if not str(path).lower().endswith(TEXT_EXTENSIONS):
        _check_framing(path, st.st_size)
    try:
        model = onnx.load(path, load_external_data=False)
    except ModelLoadError:
        raise
    except Exception as e:  # protobuf DecodeError, text parse errors
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(f"{path}: not a readable ONNX model (truncated or not ONNX: {msg})") from None
    load_external_data(model, os.path.dirname(os.path.abspath(path)), path)
    return model


def _all_tensors(model: onnx.ModelProto):
    """Every TensorProto of the model: initializers, sparse initializers and
    attribute tensors, in subgraphs and functions too."""
    def graph(g):
        yield from g.initializer
        for s in g.sparse_initializer:
            yield s.values
            yield s.indices
        for n in g.node:
            yield from nodes_attrs(n)

    def nodes_attrs(n):
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            if a.HasField("g"):
                yield from graph(a.g)
            for sg in a.graphs:
                yield from graph(sg)

    yield from graph(model.graph)
    for fn in model.functions:
        for n in fn.node:
            yield from nodes_attrs(n)


def _declared_bytes(t: TensorProto) -> int | None:
    """Bytes the tensor's dims and data type call for (None: not a fixed-size type)."""
    from onnx import helper
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except Exception:
        return None
    if t.data_type in (TensorProto.STRING,):
        return None
    return limits.elements(t.dims) * itemsize if all(d >= 0 for d in t.dims) else None


def load_external_data(model: onnx.ModelProto, base: str, path: str) -> None:
    """Read every external-data tensor's bytes into raw_data, refusing
    locations outside `base` (also through symlinks or '..'), non-regular
    files and offsets/lengths that do not fit the file or the tensor."""
    real_base = os.path.realpath(base)
    total = 0
    for t in _all_tensors(model):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        what = f"{path}: tensor '{t.name}' (external data)"
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if not loc:
            raise ModelLoadError(f"{what}: no location given")
        if os.path.isabs(loc) or loc.startswith(("/", "\\")) or (len(loc) > 1 and loc[1] == ":"):
            raise ModelLoadError(f"{what}: location '{loc}' is an absolute path; external data must lie in "
                                 f"the model's folder {base}")
        target = os.path.join(base, loc)
        real = os.path.realpath(target)
        if os.path.commonpath([real_base, real]) != real_base:
            raise ModelLoadError(f"{what}: location '{loc}' resolves to {real}, outside the model's folder "
                                 f"{real_base} (through '..' or a symbolic link); refused")
        try:
            st = os.stat(real)
        except OSError as e:
            raise ModelLoadError(f"{what}: cannot read '{loc}' ({e.strerror or e})") from None
        if not stat.S_ISREG(st.st_mode):
            raise ModelLoadError(f"{what}: '{loc}' is not a regular file")
        try:
            offset = int(info.get("offset", "0") or 0)
            length = int(info["length"]) if info.get("length") not in (None, "") else None
        except ValueError:
            raise ModelLoadError(f"{what}: offset '{info.get('offset')}' / length '{info.get('length')}' "
                                 f"are not integers") from None
        if offset < 0 or (length is not None and length < 0):
            raise ModelLoadError(f"{what}: negative offset {offset} or length {length}")
        if length is None:
            length = st.st_size - offset
        if offset + length > st.st_size:
            raise ModelLoadError(f"{what}: bytes [{offset:,}, {offset + length:,}) lie beyond the end of "
                                 f"'{loc}' ({st.st_size:,} B)")
        need = _declared_bytes(t)
        if need is None:
            raise ModelLoadError(f"{what}: data type {t.data_type} cannot be stored as external data here")
        if need != length:
            raise ModelLoadError(f"{what}: {length:,} B given, dims {list(t.dims)} of data type "
                                 f"{t.data_type} need {need:,} B")
        total += length
        if total > limits.MAX_CONST_BYTES:
            raise ModelLoadError(f"{path}: external data exceeds {limits.human(limits.MAX_CONST_BYTES)} of "
                                 f"constants (the ceiling; see cuvil_mcu/limits.py)")
        with open(real, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise ModelLoadError(f"{what}: '{loc}' changed while being read")
        t.raw_data = data
        t.data_location = TensorProto.DEFAULT
        del t.external_data[:]
