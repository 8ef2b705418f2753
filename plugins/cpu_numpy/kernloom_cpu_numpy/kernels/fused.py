"""numpy kernels for the optimizer's fused ops (``_FusedMatMul``, ``_FusedConv2D``,
``_FusedElementwise``).

``_FusedMatMul`` writes the product into its output and adds the bias and applies the
activation there, in place: one buffer instead of three. ``_FusedElementwise`` evaluates
its expression over blocks of ``BLOCK_ELEMENTS`` output elements (rows of the leading
axis), so each intermediate stays in cache between steps; a step writes into the buffer
of an operand that dies there, so a chain needs one or two block-sized temporaries, and
the output reuses an input of its shape when the executor says nothing else holds it.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from kernloom.plugin import (
    CONV_FORMS,
    NUMPY_ELEMENTWISE,
    OUT_BY_POSITION,
    FusedDirect,
    FusedInputs,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    broadcast_shape,
    check_bias,
    compile_fused_steps,
    matmul_shape,
    parse_fused_ops,
    plan_fused_expression,
)
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array
from kernloom_cpu_numpy.kernels.conv import conv2d

__all__ = ["BLOCK_ELEMENTS", "register"]

BLOCK_ELEMENTS: Final = 16384
"""Elements per block: 64 KiB of float32, within a core's L2 with a few temporaries."""


class FusedElementwise(OpKernel):
    """The kernel has a direct entry for outputs of one block (``FusedDirect``):
    a small fused node then costs about what one unfused node's direct entry does, not a
    context's preparation and checks (``benchmarks/EXECUTOR.md``, "Fan-out")."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        count = int(ctx.attr("N"))
        steps, self._temps = plan_fused_expression(str(ctx.attr("expression")), count)
        self._run = compile_fused_steps(
            [(NUMPY_ELEMENTWISE[op], refs, slot) for op, refs, slot in steps],
            count,
            self._temps,
            out_by_position=OUT_BY_POSITION,
        )
        self._inputs: FusedInputs[None] = FusedInputs()
        self.direct = FusedDirect(
            self._run,
            self._temps,
            ctx.device.allocate,
            self.signature.output_dtypes[0],
            BLOCK_ELEMENTS + 1,
        )

    def compute(self, ctx: OpKernelContext) -> None:
        inputs = ctx.input_list("inputs")

        def plan(shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], None]:
            if all(s == shapes[0] for s in shapes):
                return shapes[0], None
            return tuple(broadcast_shape(ctx, *shapes)), None

        shape, _, candidates = self._inputs.plan(inputs, plan)
        # An input of the output's shape that nothing else holds may become the output:
        # its block is read only by the steps of that same block, before the last writes.
        out = FusedInputs.output(ctx, inputs, shape, candidates)
        if out.size == 0:
            return
        if out.ndim == 0 or out.size <= BLOCK_ELEMENTS or shape[0] == 1:
            self._evaluate(inputs, out)
            return
        rows = shape[0]
        step = max(1, BLOCK_ELEMENTS // (out.size // rows))
        sliced = [x.ndim == out.ndim and x.shape[0] == rows for x in inputs]
        temps = [np.empty_like(out[:step]) for _ in range(self._temps)]  # out's layout
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            block = [x[start:stop] if s else x for x, s in zip(inputs, sliced, strict=True)]
            self._evaluate(block, out[start:stop], [tmp[: stop - start] for tmp in temps])

    def _evaluate(self, inputs: list[Array], out: Array, temps: list[Array] | None = None) -> None:
        if temps is None:
            temps = [np.empty_like(out) for _ in range(self._temps)]  # in out's memory order
        self._run(inputs, out, temps)


def bias_and_activation(
    out: Array,
    bias: Array,
    channel_axis: int,
    activation: str,
    alpha: float,
    residual: Array | None = None,
) -> None:
    """out += bias along ``channel_axis`` (and += ``residual``), then the activation, all
    in ``out``'s buffer."""
    out += bias.reshape([-1 if i == channel_axis % out.ndim else 1 for i in range(out.ndim)])
    if residual is not None:
        out += residual
    if activation == "Relu":
        NUMPY_ELEMENTWISE["Relu"](out, out)  # NaN stays NaN
    elif activation == "Relu6":
        np.clip(out, 0, 6, out=out)
    elif activation == "Elu":
        negative = out < 0
        out[negative] = np.expm1(out[negative])
    elif activation == "LeakyRelu":
        np.copyto(out, out * alpha, where=out < 0)


class FusedConv2D(OpKernel):
    """The numpy Conv2D kernel, then the bias, the residual and the activation in its
    output buffer."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        self._form = parse_fused_ops(ctx.attr("fused_ops"))
        self._alpha = float(ctx.attr("leakyrelu_alpha"))
        self._channel_axis = 1 if ctx.attr("data_format") == "NCHW" else -1

    def compute(self, ctx: OpKernelContext) -> None:
        bias = ctx.input(2)
        f = ctx.input(1)
        if f.ndim == 4:
            check_bias(ctx, bias.shape, f.shape[3])
        conv2d(ctx)
        out = ctx.outputs()[0]
        residual = residual_input(ctx, out.shape) if self._form.residual else None
        activation = self._form.activation
        bias_and_activation(out, bias, self._channel_axis, activation, self._alpha, residual)


def residual_input(ctx: OpKernelContext, shape: tuple[int, ...]) -> Any:
    """The residual (``args[1]``), which must have the output's shape: the op adds it as
    ``Add`` would only when no broadcasting is involved."""
    residual = ctx.input(3)
    if tuple(residual.shape) != tuple(shape):
        raise ctx.fail(
            f"the residual has shape {tuple(residual.shape)}; it needs the output's {tuple(shape)}"
        )
    return residual


class FusedMatMul(OpKernel):
    def __init__(self, ctx: OpKernelConstruction) -> None:
        self._transpose_a = bool(ctx.attr("transpose_a"))
        self._transpose_b = bool(ctx.attr("transpose_b"))
        self._activation = parse_fused_ops(ctx.attr("fused_ops"), residual_allowed=False).activation
        self._alpha = float(ctx.attr("leakyrelu_alpha"))

    def compute(self, ctx: OpKernelContext) -> None:
        a, b, bias = ctx.input(0), ctx.input(1), ctx.input(2)
        shape = matmul_shape(ctx, a.shape, b.shape, self._transpose_a, self._transpose_b)
        check_bias(ctx, bias.shape, shape[1])
        out = ctx.allocate_output(0, shape)
        np.matmul(a.T if self._transpose_a else a, b.T if self._transpose_b else b, out=out)
        bias_and_activation(out, bias, -1, self._activation, self._alpha)


def register(lib: KernelLibrary) -> None:
    lib.kernel(
        "_FusedElementwise", device="CPU", backend="numpy", type_constraints={"T": t.OP_TYPES}
    )(FusedElementwise)
    lib.kernel("_FusedMatMul", device="CPU", backend="numpy", type_constraints={"T": t.OP_TYPES})(
        FusedMatMul
    )
    lib.kernel(
        "_FusedConv2D",
        device="CPU",
        backend="numpy",
        type_constraints={"T": t.OP_TYPES},
        attr_constraints={"fused_ops": CONV_FORMS},
    )(FusedConv2D)
