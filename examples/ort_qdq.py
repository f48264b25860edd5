"""onnxruntime's static quantization as the example models (make_unet.py,
make_mobilenet_v2.py, make_shufflenet.py) and the tests use it: QDQ format,
per-channel int8 weights, int8 activations, MinMax ranges over the given
calibration feeds. Keyword arguments override or add quantize_static's
options (activation_type, reduce_range, op_types_to_quantize, ...)."""
from __future__ import annotations

# imported with this module, before the callers build their torch models, as
# the scripts always did: the exported example files stay byte-identical
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static


def quantize_qdq(src, dst, feeds, **options) -> None:
    """Quantize the float model file src into dst, calibrated on feeds (a
    list of {input name: array})."""
    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    kw = dict(quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QInt8,
              weight_type=QuantType.QInt8)
    kw.update(options)
    quantize_static(str(src), str(dst), Reader(), **kw)
