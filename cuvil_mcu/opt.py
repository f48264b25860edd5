"""Optimization levels of gen/run/sim (-O0..-O3, or --optimize level=N).

A module of its own so the CLI can print them without importing the
compiler (a cached gen must start fast).
"""

# gen -O<level>: what each level turns on (gen --help prints these lines).
OPT_LEVELS = {
    0: "graph passes only where correctness needs them (QDQ runs literally in float), portable C "
       "kernels with generic loops",
    1: "+ graph optimizations: constant folding, BatchNorm/Pad/activation fusion, QDQ -> integer "
       "kernels, transposes cancelled; portable C kernels",
    2: "+ the board's instruction-set kernels (Arm DSP, Helium MVE, NEON)",
    3: "+ kernels specialized to each layer's shape (fixed-trip-count small convolutions); the default",
}
