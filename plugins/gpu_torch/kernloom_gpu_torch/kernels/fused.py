"""torch kernels for the optimizer's fused ops: ``_FusedMatMul``, ``_FusedElementwise`` and
``_FusedConv2D`` on the torch GPU, and ``_FusedConv2D`` on the CPU too, as torch's Conv2D
(the CPU default above numpy's). torch gives no cheaper way than one op after another
from Python, but a fused node still saves the executor's per-node work and the
intermediate buffers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import torch

from kernloom.plugin import (
    CONV_FORMS,
    KernelLibrary,
    OpKernelContext,
    broadcast_shape,
    matmul_shape,
    parse_fused_expression,
    parse_fused_ops,
)
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import (
    cpu_kernel,
    output,
    tensor,
    tensor_input,
    tensor_inputs,
    use_session_threads,
)
from kernloom_gpu_torch.kernels.conv import CPU_PRIORITY, conv2d

__all__ = [
    "activate",
    "apply_activation",
    "cpu_fused_matmul",
    "fused_conv2d",
    "register",
    "residual_input",
]

FUNCTIONS: Final[dict[str, Callable[..., torch.Tensor]]] = {
    "Add": torch.add,
    "AddV2": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "RealDiv": torch.true_divide,
    "Maximum": torch.maximum,
    "Minimum": torch.minimum,
    "Neg": torch.neg,
    "Exp": torch.exp,
    "Log": torch.log,
    "Sqrt": torch.sqrt,
    "Square": torch.square,
    "Tanh": torch.tanh,
    "Sigmoid": torch.sigmoid,
    "Relu": lambda x: torch.clamp(x, min=0),  # NaN stays NaN
}


def fused_elementwise(ctx: OpKernelContext) -> None:
    inputs = tensor_inputs(ctx, "inputs")
    steps = parse_fused_expression(str(ctx.attr("expression")), len(inputs))
    shape = broadcast_shape(ctx, *[tuple(x.shape) for x in inputs])
    values: list[torch.Tensor] = []
    for op, operands in steps:
        args = [inputs[i] if kind == "i" else values[i] for kind, i in operands]
        values.append(FUNCTIONS[op](*args))
    output(ctx, 0, shape).copy_(values[-1].expand(shape))


def fused_matmul(ctx: OpKernelContext) -> None:
    a, b, bias = tensor_input(ctx, 0), tensor_input(ctx, 1), tensor_input(ctx, 2)
    ta, tb = bool(ctx.attr("transpose_a")), bool(ctx.attr("transpose_b"))
    shape = matmul_shape(ctx, a.shape, b.shape, ta, tb)
    if tuple(bias.shape) != (shape[1],):
        raise ctx.fail(f"bias has shape {tuple(bias.shape)}; it needs ({shape[1]},)")
    out = output(ctx, 0, shape)
    torch.addmm(bias, a.T if ta else a, b.T if tb else b, out=out)
    _activate(ctx, out)


def cpu_fused_matmul(ctx: OpKernelContext) -> None:
    """``_FusedMatMul`` on the numpy CPU device: MKL's sgemm with the bias (``addmm``)
    straight into the output buffer, the activation in place, with the session's threads."""
    use_session_threads(ctx)
    fused_matmul(ctx)


def _activate(ctx: OpKernelContext, out: torch.Tensor) -> None:
    """The node's fused activation, in ``out``'s own memory."""
    activate(parse_fused_ops(ctx.attr("fused_ops")).activation, out, ctx)


def activate(activation: str, out: torch.Tensor, ctx: OpKernelContext) -> None:
    """``activation`` (a ``fused_ops`` entry; "" for none) in ``out``'s own memory, with
    the node's ``leakyrelu_alpha``."""
    if activation == "LeakyRelu":
        apply_activation(activation, out, float(ctx.attr("leakyrelu_alpha")))
    elif activation:
        apply_activation(activation, out)


def apply_activation(activation: str, out: torch.Tensor, alpha: float = 0.2) -> None:
    """``activate`` with LeakyRelu's slope given. NaN stays NaN (``relu_`` is a clamp that
    propagates it, as TensorFlow's Relu does)."""
    if activation == "Relu":
        torch.relu_(out)
    elif activation == "Relu6":
        torch.clamp(out, 0, 6, out=out)
    elif activation == "Elu":
        torch.nn.functional.elu(out, inplace=True)
    elif activation == "LeakyRelu":
        torch.nn.functional.leaky_relu(out, alpha, inplace=True)


def fused_conv2d(ctx: OpKernelContext) -> None:
    """torch's Conv2D kernel, then the bias (along the layout's channel axis), the
    residual and the activation in its output."""
    form = parse_fused_ops(ctx.attr("fused_ops"))
    bias, f = tensor_input(ctx, 2), tensor_input(ctx, 1)
    if f.ndim == 4 and tuple(bias.shape) != (int(f.shape[3]),):
        raise ctx.fail(f"bias has shape {tuple(bias.shape)}; it needs ({int(f.shape[3])},)")
    conv2d(ctx)
    out = tensor(ctx.outputs()[0])
    channel = 1 if ctx.attr("data_format") == "NCHW" else out.ndim - 1
    out.add_(bias.reshape([-1 if i == channel else 1 for i in range(out.ndim)]))
    if form.residual:
        out.add_(residual_input(ctx, tuple(out.shape)))
    activate(form.activation, out, ctx)


def residual_input(ctx: OpKernelContext, shape: tuple[int, ...]) -> torch.Tensor:
    """The residual (``args[1]``) as a tensor; it must have the output's shape (the op adds
    it as ``Add`` would only where nothing broadcasts)."""
    residual = tensor_input(ctx, 3)
    if tuple(residual.shape) != shape:
        raise ctx.fail(
            f"the residual has shape {tuple(residual.shape)}; it needs the output's {shape}"
        )
    return residual


def register(lib: KernelLibrary) -> None:
    floats: dict[str, Any] = {"T": d.FLOATS}
    wide: dict[str, Any] = {"T": tuple(dt for dt in d.FLOATS if dt.name != "float16")}
    lib.kernel("_FusedElementwise", device="GPU", backend="torch", type_constraints=floats)(
        fused_elementwise
    )
    lib.kernel("_FusedMatMul", device="GPU", backend="torch", type_constraints=floats)(fused_matmul)
    conv_forms: dict[str, Any] = {"fused_ops": CONV_FORMS}
    lib.kernel(
        "_FusedConv2D",
        device="GPU",
        backend="torch",
        type_constraints=floats,
        attr_constraints=conv_forms,
    )(fused_conv2d)
    # As torch's Conv2D: also on the CPU, labelled ``torch`` and as the default above numpy's
    # (float32 convolutions go to ``onednn``'s kernel, one priority higher); _FusedMatMul
    # too (benchmarks/OPTIMIZER.md, "MLP": MKL's GEMM against numpy's OpenBLAS).
    for cpu in ({"label": "torch"}, {"priority": CPU_PRIORITY}):
        cpu_kernel(
            lib,
            "_FusedConv2D",
            fused_conv2d,
            type_constraints=floats,
            attr_constraints=conv_forms,
            **cpu,
        )
        cpu_kernel(lib, "_FusedMatMul", cpu_fused_matmul, type_constraints=wide, **cpu)
