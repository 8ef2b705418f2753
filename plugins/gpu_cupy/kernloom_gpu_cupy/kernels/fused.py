"""Kernels for the optimizer's fused ops on the CuPy GPU, over the array module ``xp``
(CuPy; numpy on the stand-in device in tests). ``_FusedElementwise`` runs its steps one
after another, each into a buffer an earlier step no longer needs; ``_FusedMatMul``
adds the bias and applies the activation in the product's own buffer."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from kernloom.plugin import (
    CONV_FORMS,
    KernelLibrary,
    OpKernelContext,
    broadcast_shape,
    check_bias,
    matmul_shape,
    parse_fused_expression,
    parse_fused_ops,
)
from kernloom.plugin import types as t
from kernloom_gpu_cupy.kernels.conv import _Kernels as ConvKernels

__all__ = ["register"]

Kernel = Callable[[OpKernelContext], None]

GPU = "GPU"
BACKEND = "cupy"


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add the fused kernels to ``lib``, written against ``xp``. ``_FusedConv2D`` runs this
    library's Conv2D kernel, then the bias, the residual and the activation in its output."""
    conv2d: Kernel = ConvKernels(xp).conv2d

    def sigmoid(x: Any) -> Any:
        return 1 / (1 + xp.exp(-x))

    functions: dict[str, Callable[..., Any]] = {
        "Add": xp.add,
        "AddV2": xp.add,
        "Sub": xp.subtract,
        "Mul": xp.multiply,
        "RealDiv": xp.true_divide,
        "Maximum": xp.maximum,
        "Minimum": xp.minimum,
        "Neg": xp.negative,
        "Exp": xp.exp,
        "Log": xp.log,
        "Sqrt": xp.sqrt,
        "Square": xp.square,
        "Tanh": xp.tanh,
        "Sigmoid": sigmoid,
        "Relu": lambda x: xp.maximum(x, 0),  # NaN stays NaN
    }

    def fused_elementwise(ctx: OpKernelContext) -> None:
        inputs = ctx.input_list("inputs")
        steps = parse_fused_expression(str(ctx.attr("expression")), len(inputs))
        out = ctx.allocate_output(0, broadcast_shape(ctx, *[x.shape for x in inputs]))
        values: list[Any] = []
        with np.errstate(all="ignore"):  # numpy in tests; CuPy never warns
            for op, operands in steps:
                args = [inputs[i] if kind == "i" else values[i] for kind, i in operands]
                values.append(functions[op](*args))
        xp.copyto(out, values[-1].astype(out.dtype, copy=False))

    def fused_matmul(ctx: OpKernelContext) -> None:
        a, b, bias = ctx.input(0), ctx.input(1), ctx.input(2)
        ta, tb = bool(ctx.attr("transpose_a")), bool(ctx.attr("transpose_b"))
        shape = matmul_shape(ctx, a.shape, b.shape, ta, tb)
        check_bias(ctx, bias.shape, shape[1])
        out = ctx.allocate_output(0, shape)
        xp.matmul(a.T if ta else a, b.T if tb else b, out=out)
        activation = parse_fused_ops(ctx.attr("fused_ops"), residual_allowed=False).activation
        finish(ctx, out, bias, out.ndim - 1, activation)

    def fused_conv2d(ctx: OpKernelContext) -> None:
        form = parse_fused_ops(ctx.attr("fused_ops"))
        bias, f = ctx.input(2), ctx.input(1)
        if f.ndim == 4:
            check_bias(ctx, bias.shape, f.shape[3])
        conv2d(ctx)
        out = ctx.outputs()[0]
        residual = ctx.input(3) if form.residual else None
        if residual is not None and residual.shape != out.shape:
            raise ctx.fail(
                f"the residual has shape {residual.shape}; it needs the output's {out.shape}"
            )
        channel = 1 if ctx.attr("data_format") == "NCHW" else out.ndim - 1
        finish(ctx, out, bias, channel, form.activation, residual)

    def finish(
        ctx: OpKernelContext,
        out: Any,
        bias: Any,
        channel: int,
        activation: str,
        residual: Any = None,
    ) -> None:
        """out += bias along ``channel`` (and += ``residual``), then the activation, in
        ``out``'s buffer."""
        with np.errstate(all="ignore"):
            out += bias.reshape([-1 if i == channel else 1 for i in range(out.ndim)])
            if residual is not None:
                out += residual
            if activation == "Relu":
                xp.maximum(out, 0, out=out)
            elif activation == "Relu6":
                xp.minimum(xp.maximum(out, 0), 6, out=out)
            elif activation == "Elu":
                xp.copyto(out, xp.where(out < 0, xp.expm1(out), out))
            elif activation == "LeakyRelu":
                xp.copyto(out, xp.where(out < 0, out * float(ctx.attr("leakyrelu_alpha")), out))

    floats = {"T": t.FLOATS}
    lib.kernel("_FusedElementwise", device=GPU, backend=BACKEND, type_constraints=floats)(
        fused_elementwise
    )
    lib.kernel("_FusedMatMul", device=GPU, backend=BACKEND, type_constraints=floats)(fused_matmul)
    lib.kernel(
        "_FusedConv2D",
        device=GPU,
        backend=BACKEND,
        type_constraints=floats,
        attr_constraints={"fused_ops": CONV_FORMS},
    )(fused_conv2d)
