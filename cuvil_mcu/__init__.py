"""cuvil-mcu: ahead-of-time compiler from ONNX to one header-only C file."""
__version__ = "0.1.0"


def compile(module, example_inputs, board="host", **options):  # noqa: A001 (the API the docs promise)
    """A PyTorch nn.Module (with example inputs) compiled for `board`: the
    Compiled result of compiler.compile_model (header, summary, graph).
    options: those of compile_model (name, requant, precision, weights, ...).
    Needs torch: pip install 'cuvil-mcu[torch]'."""
    from .compiler import compile_model
    from .frontend import torch_in
    return compile_model(torch_in.from_module(module, example_inputs), board=board, **options)


def load(path, name=None, weights=None):
    """cuvil_mcu.load("out/libkws.so").run(x): a shared library from `gen --emit so` (runtime.py)."""
    from .runtime import load as _load
    return _load(path, name, weights)
