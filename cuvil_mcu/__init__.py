"""cuvil-mcu: ahead-of-time compiler from ONNX to one header-only C file."""
__version__ = "0.1.0"
