"""Run a compiled shared library from Python: `cuvil_mcu.load(path).run(x)`.

Through ctypes only: no compiler at run time, no build step. The library
(`cuvil-mcu gen --emit so`, integrations/so.py) describes itself as JSON
(<p>_describe), so shapes, dtypes and names come from the library, not from
the ONNX file. The prefix comes from the file name lib<prefix>.so unless
given.
"""
from __future__ import annotations

import ctypes
import json
import re
from pathlib import Path

import numpy as np

from .errors import CuvilError, InputError, ToolError

ABI_VERSION = 1


class WeightsError(CuvilError):
    """A weights blob that the library refuses (bad magic, another model, ...)."""


class Model:
    """One loaded lib<prefix>.so with its own arena (from <p>_create)."""

    def __init__(self, path: str | Path, name: str | None = None, weights: str | Path | bytes | None = None):
        path = Path(path)
        if not path.is_file():
            raise ToolError(f"{path}: no such shared library")
        if name is None:
            m = re.fullmatch(r"lib([A-Za-z][A-Za-z0-9_]*)\.so", path.name)
            if m is None:
                raise ToolError(f"{path}: cannot tell the model prefix from the file name "
                                f"(expected lib<name>.so); pass name=")
            name = m.group(1)
        self.prefix = name
        try:
            self._lib = ctypes.CDLL(str(path.resolve()), mode=getattr(ctypes, "RTLD_LOCAL", 0))
        except OSError as e:
            raise ToolError(f"{path}: cannot load ({e})") from None
        fn = self._fn
        try:
            abi = fn("abi_version", ctypes.c_int)()
        except AttributeError:
            raise ToolError(f"{path}: no {name}_abi_version: not a cuvil-mcu library for model '{name}'") from None
        if abi != ABI_VERSION:
            raise ToolError(f"{path}: library ABI {abi}, this cuvil_mcu reads ABI {ABI_VERSION}")
        self.info = json.loads(fn("describe", ctypes.c_char_p)().decode())
        self._run = fn("run", ctypes.c_int, ctypes.c_void_p)
        self._input = fn("input", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
        self._output = fn("output", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
        self._status = fn("status_str", ctypes.c_char_p, ctypes.c_int)
        self._destroy = fn("destroy", None, ctypes.c_void_p)
        self._arena = fn("create", ctypes.c_void_p)()
        if not self._arena:
            raise ToolError(f"{path}: {name}_create: out of memory")
        self._blob = None
        if weights is not None:
            self.bind_weights(weights)
        elif self.info.get("weights") == "separate":
            pass  # run() reports the library's "no weights bound" status until bind_weights

    def _fn(self, suffix, restype, *argtypes):
        f = getattr(self._lib, f"{self.prefix}_{suffix}")
        f.restype, f.argtypes = restype, list(argtypes)
        return f

    @property
    def input_names(self) -> list[str]:
        return [t["name"] for t in self.info["inputs"]]

    @property
    def output_names(self) -> list[str]:
        return [t["name"] for t in self.info["outputs"]]

    def bind_weights(self, blob: str | Path | bytes) -> None:
        """Bind a <name>.weights.bin (path or bytes). The bytes are kept alive
        (and 16-byte aligned) as long as this Model; WeightsError with the
        library's status text when it refuses them."""
        data = Path(blob).read_bytes() if not isinstance(blob, (bytes, bytearray, memoryview)) else bytes(blob)
        buf = np.zeros(len(data) + 64, np.uint8)
        off = (-buf.ctypes.data) % 64
        view = buf[off:off + len(data)]
        view[:] = np.frombuffer(data, np.uint8)
        bind = self._fn("bind_weights", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
        st = bind(view.ctypes.data, len(data))
        if st != 0:
            raise WeightsError(f"{self.prefix}_bind_weights: {self._status(st).decode()} (status {st})")
        self._blob = buf

    def run(self, x=None, **named):
        """x: one array (one-input model), a list in input order, or a dict by
        input name; arrays of the input's shape, or with one extra leading
        samples axis. Returns one array, or a list for several outputs."""
        ins = self.info["inputs"]
        if isinstance(x, dict) or named:
            d = dict(x or {}, **named)
            missing = [t["name"] for t in ins if t["name"] not in d]
            extra = sorted(set(d) - {t["name"] for t in ins})
            if missing or extra:
                raise InputError(f"{self.prefix}.run: missing inputs {missing}, unknown {extra}; "
                                 f"the model takes {self.input_names}")
            arrays = [d[t["name"]] for t in ins]
        elif isinstance(x, (list, tuple)):
            arrays = list(x)
        else:
            arrays = [x]
        if len(arrays) != len(ins):
            raise InputError(f"{self.prefix}.run: {len(arrays)} input(s) given, the model takes {len(ins)} "
                             f"{self.input_names}")
        prepared, counts = [], set()
        for t, a in zip(ins, arrays):
            a = np.asarray(a)
            shape, dt = tuple(t["shape"]), np.dtype(t["dtype"])
            if a.shape == shape:
                a = a[None]
            elif a.shape[1:] != shape:
                raise InputError(f"{self.prefix}.run: input '{t['name']}' has shape {list(a.shape)}, the "
                                 f"model expects {list(shape)} (or [samples, ...])")
            if a.dtype != dt:
                if a.dtype.kind == "f" and dt.kind == "f":
                    a = a.astype(dt)
                else:
                    raise InputError(f"{self.prefix}.run: input '{t['name']}' is {a.dtype}, the model "
                                     f"expects {dt}")
            prepared.append(np.ascontiguousarray(a))
            counts.add(a.shape[0])
        if len(counts) != 1:
            raise InputError(f"{self.prefix}.run: inputs hold different sample counts {sorted(counts)}")
        samples = counts.pop()
        outs = [np.empty((samples, *t["shape"]), np.dtype(t["dtype"])) for t in self.info["outputs"]]
        for s in range(samples):
            for i, a in enumerate(prepared):
                ctypes.memmove(self._input(self._arena, i), a[s].ctypes.data, a[s].nbytes)
            st = self._run(self._arena)
            if st != 0:
                raise ToolError(f"{self.prefix}_run: {self._status(st).decode()} (status {st})")
            for i, o in enumerate(outs):
                ctypes.memmove(o[s].ctypes.data, self._output(self._arena, i), o[s].nbytes)
        single = all(np.asarray(a).shape == tuple(t["shape"]) for t, a in zip(ins, arrays))
        if single:
            outs = [o[0] for o in outs]
        return outs[0] if len(outs) == 1 else outs

    def close(self) -> None:
        if getattr(self, "_arena", None):
            self._destroy(self._arena)
            self._arena = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def load(path: str | Path, name: str | None = None, weights: str | Path | bytes | None = None) -> Model:
    """Load lib<name>.so built by `cuvil-mcu gen --emit so`."""
    return Model(path, name, weights)
