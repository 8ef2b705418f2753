"""Activation and unary math kernels with torch (Relu6, Elu, Selu, LeakyRelu, Softplus,
Softsign, Erf, Erfc, Rsqrt, Reciprocal, Abs, Sign, Floor, Ceil, Round, Sin, Cos, Tan, Asin,
Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Expm1, Log1p, IsNan, IsInf, IsFinite).

Where torch's function differs from TensorFlow's semantics the formula is spelled out:
torch's sign of NaN is 0 (TF and numpy: NaN); Softplus uses TF's thresholds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from kernloom.plugin import KernelLibrary, OpKernelContext
from kernloom.plugin import types as t
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import output, tensor_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "torch"
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
Fn = Callable[[torch.Tensor], torch.Tensor]


def _relu6(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x, 0, 6)  # NaN stays NaN


def _elu(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x < 0, torch.expm1(x), x)


def _selu(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x < 0, torch.expm1(x) * SELU_ALPHA, x) * SELU_SCALE


def _softplus(x: torch.Tensor) -> torch.Tensor:
    threshold = math.log(torch.finfo(x.dtype).eps) + 2  # TF's thresholds
    exp = torch.exp(x)
    return torch.where(x > -threshold, x, torch.where(x < threshold, exp, torch.log1p(exp)))


def _softsign(x: torch.Tensor) -> torch.Tensor:
    return x / (torch.abs(x) + 1)


def _sign(x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():
        return torch.sgn(x)  # x / |x|, 0 at 0
    if x.is_floating_point():
        return torch.where(torch.isnan(x), x, torch.sign(x))
    return torch.sign(x)


def _unary(fn: Fn) -> Callable[[OpKernelContext], None]:
    def compute(ctx: OpKernelContext) -> None:
        x = tensor_input(ctx, 0)
        output(ctx, 0, x.shape).copy_(fn(x))

    compute.__qualname__ = f"torch_{fn.__name__.lstrip('_')}"  # names it in traces
    return compute


def leaky_relu(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    alpha = float(np.float32(ctx.attr("alpha")))  # TF's float attr: 32 bits
    output(ctx, 0, x.shape).copy_(torch.where(x > 0, x, x * alpha))


UNARY: tuple[tuple[str, Fn, tuple[Any, ...] | None], ...] = (
    ("Relu6", _relu6, d.REALS),
    ("Elu", _elu, t.OP_TYPES),
    ("Selu", _selu, t.OP_TYPES),
    ("Softplus", _softplus, t.OP_TYPES),
    ("Softsign", _softsign, t.OP_TYPES),
    ("Erf", torch.erf, t.OP_TYPES),
    ("Rsqrt", torch.rsqrt, t.OP_TYPES),
    ("Reciprocal", torch.reciprocal, d.INEXACT),
    ("Abs", torch.abs, t.OP_TYPES),
    ("Sign", _sign, t.OP_TYPES),
    ("Floor", torch.floor, t.OP_TYPES),
    ("Ceil", torch.ceil, t.OP_TYPES),
    # Halves to even; no int8/int16 (TensorFlow's CPU has no such Round).
    (
        "Round",
        torch.round,
        tuple(t for t in d.SIGNED if t.name not in ("int8", "int16", "complex64", "complex128")),
    ),
    ("Sin", torch.sin, t.OP_TYPES),
    ("Cos", torch.cos, t.OP_TYPES),
    ("Atan", torch.atan, t.OP_TYPES),  # floating and complex, as TF 2.21's CPU
    # Floating and complex, as TensorFlow's CPU kernels (Erfc: floating, its op def's list).
    ("Tan", torch.tan, t.OP_TYPES),
    ("Asin", torch.asin, t.OP_TYPES),
    ("Acos", torch.acos, t.OP_TYPES),
    ("Sinh", torch.sinh, t.OP_TYPES),
    ("Cosh", torch.cosh, t.OP_TYPES),
    ("Asinh", torch.asinh, t.OP_TYPES),
    ("Acosh", torch.acosh, t.OP_TYPES),
    ("Atanh", torch.atanh, t.OP_TYPES),
    ("Erfc", torch.erfc, t.OP_TYPES),
    ("Expm1", torch.expm1, t.OP_TYPES),
    ("Log1p", torch.log1p, t.OP_TYPES),
    ("IsNan", torch.isnan, t.OP_TYPES),
    ("IsInf", torch.isinf, t.OP_TYPES),
    ("IsFinite", torch.isfinite, t.OP_TYPES),
)


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""
    for op, fn, types in UNARY:
        lib.kernel(op, device=GPU, backend=BACKEND, type_constraints={"T": types})(_unary(fn))
    lib.kernel("LeakyRelu", device=GPU, backend=BACKEND, type_constraints={"T": t.OP_TYPES})(
        leaky_relu
    )
