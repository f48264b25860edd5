"""ONNX -> IR. `load(path, input_shapes)` returns a Graph with static shapes,
constants evaluated (shapes often depend on them) and names made unique."""
from .onnx_loader import load, parse_input_shapes  # noqa: F401
