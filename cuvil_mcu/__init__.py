"""cuvil-mcu: ahead-of-time compiler from ONNX to one header-only C file."""
__version__ = "0.1.0"


def load(path, name=None, weights=None):
    """cuvil_mcu.load("out/libkws.so").run(x): a shared library from `gen --emit so` (runtime.py)."""
    from .runtime import load as _load
    return _load(path, name, weights)
