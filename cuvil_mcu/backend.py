"""cuvil-mcu as an `onnx.backend.base.Backend`: compile the model to C, build
it with the host C compiler, run the binary.

This is how the ONNX node test suite (tests/test_onnx_backend.py) checks the
generated code against ONNX's own expected outputs. `run` always executes the
generated C (via `cuvil_mcu.sim.host`), never the numpy reference.

Parameter inputs. ONNX lets every input of a node be fed at run time, and the
node tests do so for weights, shapes and bounds (Conv's W, Reshape's shape,
Slice's starts, Clip's min ...). In a deployed model these are initializers,
and the compiler needs them at compile time (weights are pre-arranged in
flash, shapes are static). With `bind_params=True` (the default) a graph input
that feeds one of the positions in `PARAM_INPUTS` is bound as an initializer
when `run` sees its value, and the model is compiled for those values (one
compile per distinct value, cached). Every other input stays a run-time input
of the generated C. With `bind_params=False` such models fail to compile with
the compiler's own error.

Compiler errors (`CuvilError`) propagate unchanged: from `prepare` when the
model can be compiled there, from `run` when it needs the inputs first.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from .compiler import Compiled, compile_model
from .errors import InputError
from .sim import host

# Input positions that deployed models hold as initializers (weights,
# shapes, axes, bounds), by ONNX op type. Only consulted with bind_params.
PARAM_INPUTS: dict[str, tuple[int, ...]] = {
    "Conv": (1, 2),
    "Gemm": (1, 2),
    "BatchNormalization": (1, 2, 3, 4),
    "LayerNormalization": (1, 2),
    "Clip": (1, 2),
    "Reshape": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Slice": (1, 2, 3, 4),
    "Split": (1,),
    "Pad": (1, 2, 3),
    "Gather": (1,),
    "ReduceMean": (1,),
    "ReduceMax": (1,),
    "ReduceSum": (1,),
    "Dropout": (1, 2),
    # W, R, B, sequence_lens, P (initial_h / initial_c stay run-time inputs)
    "LSTM": (1, 2, 3, 4, 7),
    "GRU": (1, 2, 3, 4),
    "RNN": (1, 2, 3, 4),
    "QLinearConv": (1, 2, 3, 4, 5, 6, 7, 8),
    "ConvInteger": (1, 2, 3),
    "QLinearMatMul": (1, 2, 4, 5, 6, 7),
    "MatMulInteger": (2, 3),
    "QuantizeLinear": (1, 2),
    "DequantizeLinear": (1, 2),
    "ConvTranspose": (1, 2),
    "Resize": (1, 2, 3),   # roi, scales, sizes (Resize-10: scales)
    "Upsample": (1,),
}


def _bound_inputs(model: onnx.ModelProto) -> set[str]:
    """Graph inputs that feed a parameter position of some node."""
    graph_inputs = _runtime_input_names(model)
    bound = set()
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        for i in PARAM_INPUTS.get(n.op_type, ()):
            if i < len(n.input) and n.input[i] in graph_inputs:
                bound.add(n.input[i])
    return bound


def _runtime_input_names(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in inits]


def _has_dynamic_dims(model: onnx.ModelProto) -> bool:
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        if any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
            return True
    return False


class CuvilBackendRep(BackendRep):
    """A prepared model: the compiled C (when it could be compiled up front),
    or the recipe to compile it once `run` knows the bound inputs' values."""

    def __init__(self, model: onnx.ModelProto, board: str, name: str, bind: set[str],
                 dynamic: bool, verify_each: bool, cflags: list[str] | None):
        self.model = model
        self.board = board
        self.name = name
        self.bind = bind
        self.dynamic = dynamic
        self.verify_each = verify_each
        self.cflags = cflags
        self.input_names = _runtime_input_names(model)
        self.output_names = [o.name for o in model.graph.output]
        self._cache: dict[str, tuple[Compiled, Any]] = {}
        if not bind and not dynamic:
            self._cache[""] = self._compile(model, None)

    def _compile(self, model: onnx.ModelProto, input_shapes: dict | None):
        c = compile_model(model, board=self.board, name=self.name, input_shapes=input_shapes,
                          verify_each=self.verify_each)
        g = c.graph
        exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                         [g.tensors[n].nbytes for n in g.outputs], cflags=self.cflags)
        return c, exe

    def _feeds(self, inputs) -> dict[str, np.ndarray]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise InputError(f"{len(inputs)} inputs given, the model takes {len(self.input_names)} "
                                 f"({', '.join(self.input_names)})")
            feeds = dict(zip(self.input_names, inputs))
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise InputError(f"inputs {missing} not given")
        return {k: np.asarray(v) for k, v in feeds.items()}

    def _prepared(self, feeds: dict[str, np.ndarray]):
        if not self.bind and not self.dynamic:
            return self._cache[""]
        h = hashlib.sha256()
        for name in sorted(self.bind):
            v = np.ascontiguousarray(feeds[name])
            h.update(f"{name}:{v.dtype.str}:{v.shape}:".encode() + v.tobytes())
        shapes = None
        if self.dynamic:
            shapes = {n: tuple(feeds[n].shape) for n in self.input_names if n not in self.bind}
            h.update(repr(sorted(shapes.items())).encode())
        key = h.hexdigest()
        if key not in self._cache:
            model = self.model
            if self.bind:
                model = onnx.ModelProto()
                model.CopyFrom(self.model)
                kept = [vi for vi in model.graph.input if vi.name not in self.bind]
                del model.graph.input[:]
                model.graph.input.extend(kept)
                model.graph.initializer.extend(
                    numpy_helper.from_array(np.ascontiguousarray(feeds[n]), n) for n in sorted(self.bind))
            self._cache[key] = self._compile(model, shapes)
        return self._cache[key]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        feeds = self._feeds(inputs)
        c, exe = self._prepared(feeds)
        g = c.graph
        arrays = []
        for n in g.inputs:
            t = g.tensors[n]
            x = feeds[n]
            if x.dtype.name != t.dtype:
                raise InputError(f"input '{n}' is {x.dtype.name}, the model takes {t.dtype}")
            if tuple(x.shape) != tuple(t.shape):
                raise InputError(f"input '{n}' has shape {list(x.shape)}, the model was compiled "
                                 f"for {list(t.shape)}")
            arrays.append(np.ascontiguousarray(x)[None])
        outs = [o[0] for o in host.run(exe, arrays, c.out_specs, 1)]
        return namedtupledict("Outputs", self.output_names)(*outs)


class CuvilBackend(Backend):
    """`prepare(model, device='CPU', board='host', name='model',
    bind_params=True, verify_each=True, cflags=None)`."""

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        # Never opt out silently: an unsupported model must fail with our error.
        return True

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", board: str = "host",
                name: str = "model", bind_params: bool = True, verify_each: bool = True,
                cflags: list[str] | None = None, **kwargs) -> CuvilBackendRep:
        if not cls.supports_device(device):
            raise ValueError(f"cuvil-mcu runs on the CPU (host build), not on {device}")
        bind = _bound_inputs(model) if bind_params else set()
        return CuvilBackendRep(model, board, name, bind, _has_dynamic_dims(model), verify_each, cflags)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        raise NotImplementedError("cuvil-mcu compiles whole models; wrap the node in a model "
                                  "(onnx.helper.make_model) and use run_model")


prepare = CuvilBackend.prepare
run_model = CuvilBackend.run_model
supports_device = CuvilBackend.supports_device
