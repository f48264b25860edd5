# One inference with a cuvil-mcu model compiled into MicroPython as the user
# C module `cuvilmodel` (cuvil-mcu gen model.onnx --emit micropython; see
# README.md). Runs unchanged on the unix port and on a board (rp2 ...).
import array
import time

import cuvilmodel

print("input shape", cuvilmodel.input_shape, "output shape", cuvilmodel.output_shape)
print("arena", cuvilmodel.arena_size, "bytes")

n = 1
for d in cuvilmodel.input_shape:
    n *= d

# A fixed pattern in real units: -1.0 .. 1.0. The module quantizes floats
# itself when the model's input is int8/uint8.
x = array.array("f", [((k % 17) - 8) / 8 for k in range(n)])

t0 = time.ticks_us()
y = cuvilmodel.run(x)
dt = time.ticks_diff(time.ticks_us(), t0)

if hasattr(cuvilmodel, "output_scale"):
    # quantized output: real = scale * (q - zero_point)
    s, z = cuvilmodel.output_scale, cuvilmodel.output_zero_point
    y = [s * (q - z) for q in y]
else:
    y = list(y)

best = max(range(len(y)), key=lambda k: y[k])
print("output", ["%.4f" % v for v in y[:16]])
print("argmax", best)
print("run: %d us" % dt)

# Already-quantized input (int8 models): bytes/bytearray/array('b') pass through.
if hasattr(cuvilmodel, "input_scale"):
    q = bytes(n)  # n zero bytes
    print("from bytes:", list(cuvilmodel.run(q))[:8])
