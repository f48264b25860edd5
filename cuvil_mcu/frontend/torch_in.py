"""PyTorch in: a torch.export program (`gen model.pt2`, saved with
torch.export.save) or an nn.Module (`cuvil_mcu.compile(module,
example_inputs)`) converted to ONNX by torch.onnx.export (its dynamo
exporter, which needs onnxscript), then compiled like any ONNX file.

torch is optional: `pip install 'cuvil-mcu[torch]'`. Without it, a clear
error, not an ImportError traceback. Imported only when a .pt2 or a module
is compiled.
"""
from __future__ import annotations

import contextlib
import io
import os
import warnings

from ..errors import CuvilError, ModelLoadError

EXTRA = "pip install 'cuvil-mcu[torch]'"


def _torch():
    try:
        import torch
    except ImportError:
        raise CuvilError(f"PyTorch input needs torch, which is not installed ({EXTRA})") from None
    import logging
    for name in ("torch", "torch.export", "torch.onnx"):  # their notes and retries are not our messages
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        import onnxscript  # noqa: F401  (torch.onnx.export's dynamo exporter needs it)
    except ImportError:
        raise CuvilError(f"PyTorch input needs onnxscript for torch.onnx.export ({EXTRA})") from None
    return torch


def _export(program_or_module, args: tuple):
    """ONNX ModelProto from torch.onnx.export (dynamo), quietly."""
    torch = _torch()
    out, err = io.StringIO(), io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.simplefilter("ignore")
            prog = torch.onnx.export(program_or_module, args, dynamo=True, verbose=False, optimize=True)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"torch.onnx.export could not convert the program: {first[:300]}") from None
    return prog.model_proto


def load_pt2(path: str):
    """A torch.export program saved with torch.export.save -> ONNX ModelProto,
    exported with the example inputs saved in the program."""
    if not os.path.isfile(path):
        raise ModelLoadError(f"{path}: no such file")
    torch = _torch()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.load(path)
    except Exception as e:
        raise ModelLoadError(f"{path}: not a torch.export program saved with torch.export.save "
                             f"({type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''})") from None
    example = getattr(ep, "example_inputs", None)
    args, kwargs = example if example else ((), {})
    if not args or kwargs:
        raise ModelLoadError(f"{path}: the program holds no positional example inputs to export with "
                             f"(export it with torch.export.export(module, (x,)))")
    return _export(ep, tuple(args))


def from_module(module, example_inputs):
    """nn.Module + example inputs (a tensor or a tuple of them) -> ONNX ModelProto."""
    torch = _torch()
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if not args or not all(isinstance(a, torch.Tensor) for a in args):
        raise CuvilError("cuvil_mcu.compile: example_inputs must be a tensor or a tuple of tensors")
    was_training = module.training
    module.eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(module, args)
    except Exception as e:
        raise ModelLoadError(f"torch.export.export failed: {str(e).strip().splitlines()[0][:300]}") from None
    finally:
        module.train(was_training)
    return _export(ep, args)
