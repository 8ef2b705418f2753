"""The ONNX op converters, one module per family; importing this registers them all."""

from kernloom.onnx.ops import (
    attention,
    control_flow,
    elementwise,
    indexing,
    loss,
    nn,
    normalization,
    qlinear,
    quantize,
    recurrent,
    reduce,
    resize,
    sampling,
    shape,
    transformer,
    unique,
)

__all__ = [
    "attention",
    "control_flow",
    "elementwise",
    "indexing",
    "loss",
    "nn",
    "normalization",
    "qlinear",
    "quantize",
    "recurrent",
    "reduce",
    "resize",
    "sampling",
    "shape",
    "transformer",
    "unique",
]
