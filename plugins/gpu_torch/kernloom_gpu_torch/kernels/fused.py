"""torch kernels for the optimizer's fused ops: ``_FusedMatMul``, ``_FusedElementwise`` and
``_FusedConv2D`` on the torch GPU, and ``_FusedConv2D`` on the CPU too, as torch's Conv2D
(the CPU default above numpy's). torch gives no cheaper way than one op after another
from Python, but a fused node still saves the executor's per-node work and the
intermediate buffers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import torch

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
    parse_fused_expression,
    parse_fused_ops,
    plan_fused_expression,
)
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import (
    ConstantInput,
    cpu_kernel,
    kept_per_shapes,
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


def _relu(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x <= 0 ? +0.0 : x``: NaN stays NaN and -0.0 gives +0.0, the numpy kernel's (and
    TensorFlow's) Relu; ``torch.clamp(min=0)`` and ``torch.relu`` keep -0.0, so
    ``1 / relu(-0.0)`` came out -inf."""
    return torch.threshold(x, 0.0, 0.0, out=out)


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
    "Relu": _relu,
}
"""Each fusable op as a torch function; every one takes ``out=`` (None: a new tensor)."""

ON_NUMPY: Final = frozenset({"Exp", "Log", "Tanh", "Sigmoid", "Sqrt", "Maximum", "Minimum"})
"""Ops the CPU kernel runs with the numpy kernels' own functions (``NUMPY_ELEMENTWISE``)
on the tensors' memory, on the calling thread, over large tensors too: so that each gives
the unfused kernel's value bit for bit. torch's differ. Its Exp, Log and Tanh by an ulp
here and there, its Sigmoid from numpy's ``1 / (1 + exp(-x))`` by up to 4 ulps (Exp, Log
and Tanh were slower too: float32[1 Mi], ms, numpy / torch on one thread: Tanh 0.16 /
2.12, Log 0.25 / 0.79, Exp 0.33 / 0.63; Sigmoid is faster in torch, 0.23 against 0.63).
Its Sqrt reads a subnormal as itself where the step flushes them (``sqrt(-1e-39)`` NaN,
not -0.0). Its Maximum and Minimum of +0.0 and -0.0 give the second operand on its vector
path and the first on the scalar one it takes for each thread's last few elements (numpy
gives the second throughout). The ops torch keeps -- Add, Sub, Mul, RealDiv, Neg, Square
and Relu -- round as numpy's do, one IEEE operation each, and follow the flush flag of the
thread that runs them (``_team_fp``)."""


def _on_numpy(fn: Callable[..., Any]) -> Callable[..., torch.Tensor]:
    """``fn`` (a numpy ufunc, or a function of the table with ``out``) called on the numpy
    views of CPU tensors, with torch's ``out=`` convention (None: a new tensor)."""

    def call(*args: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        operands = [a.numpy() for a in args]
        if out is not None:
            fn(*operands, out=out.numpy())
            return out
        if isinstance(fn, np.ufunc):
            return torch.from_numpy(np.asarray(fn(*operands)))
        target = np.empty_like(operands[0])  # a unary function (Sigmoid), in x's layout
        fn(*operands, out=target)
        return torch.from_numpy(target)

    return call


def fused_elementwise(ctx: OpKernelContext) -> None:
    inputs = tensor_inputs(ctx, "inputs")
    steps = parse_fused_expression(str(ctx.attr("expression")), len(inputs))
    shape = broadcast_shape(ctx, *[tuple(x.shape) for x in inputs])
    values: list[torch.Tensor] = []
    for op, operands in steps:
        args = [inputs[i] if kind == "i" else values[i] for kind, i in operands]
        values.append(FUNCTIONS[op](*args))
    output(ctx, 0, shape).copy_(values[-1].expand(shape))


SMALL_ELEMENTWISE: Final = 32768
"""Outputs with fewer elements than this are evaluated with numpy's ufuncs on the arrays
themselves: torch's per-call cost (three calls and two buffers took 11 µs more than
numpy's for a 3-step expression over [16] and [4096]) outweighs its threads below it;
from [65536] on torch was faster (0.10 against 0.125 ms)."""


class CpuFusedElementwise(OpKernel):
    """``_FusedElementwise`` on the numpy CPU device: each step one call over the whole
    tensor, torch's on the session's intra-op threads or numpy's (``ON_NUMPY``), into a
    buffer laid out as the first input of the output's shape (an NCHW tensor in
    channels-last memory, as the oneDNN convolutions give, stays so), temporaries reused
    as ``plan_fused_expression`` plans.
    numpy's kernel runs its ufuncs one block at a time on one thread, and numpy's
    ``maximum`` (ReLU) ran at a quarter of ``multiply``'s speed here: a DenseNet's batch-norm
    scale, shift and ReLU over [1, 128, 56, 56] took 0.24 ms in numpy, 0.04 in torch.
    Small outputs (``SMALL_ELEMENTWISE``) take numpy's functions (``NUMPY_ELEMENTWISE``)."""

    intra_op_parallel = True

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        steps, self._temps = plan_fused_expression(str(ctx.attr("expression")), int(ctx.attr("N")))
        # One call per op, each rounded as the unfused op rounds (no fused multiply-add:
        # ``addcmul`` turned x*x + -inf with x*x overflowing into -inf, not NaN).
        self._torch = [
            (_on_numpy(NUMPY_ELEMENTWISE[op]) if op in ON_NUMPY else FUNCTIONS[op], refs, slot)
            for op, refs, slot in steps
        ]
        self._numpy = compile_fused_steps(
            [(NUMPY_ELEMENTWISE[op], refs, slot) for op, refs, slot in steps],
            int(ctx.attr("N")),
            self._temps,
            out_by_position=OUT_BY_POSITION,
        )
        self._shapes: dict[tuple[Any, ...], tuple[tuple[int, ...], bool]] = {}
        """Per input shapes: the output's shape and ``_first_slot_full`` (the same few every
        run; the broadcast was checked when an entry was made)."""
        self._fused_inputs: FusedInputs[bool] = FusedInputs()
        """The output's shape, ``_first_slot_full`` and the inputs the output may reuse,
        kept while the same inputs come back (``FusedInputs``)."""
        self._inputs = [ConstantInput(contiguous=False) for _ in range(int(ctx.attr("N")))]
        """Each input's tensor, kept while it is the same constant (a batch norm's scale and
        shift): 9-22 µs of Python went around each of a DenseNet's 62 groups."""
        # Small outputs without a context: numpy's functions, as ``compute`` runs them.
        self.direct = FusedDirect(
            self._numpy,
            self._temps,
            ctx.device.allocate,
            self.signature.output_dtypes[0],
            SMALL_ELEMENTWISE,
        )

    def compute(self, ctx: OpKernelContext) -> None:
        raw = ctx.input_list("inputs")

        def plan(shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], bool]:
            return kept_per_shapes(self._shapes, shapes, lambda: self._plan(ctx, shapes))

        shape, full, candidates = self._fused_inputs.plan(raw, plan)
        out = FusedInputs.output(ctx, raw, shape, candidates)  # as numpy's kernel makes it
        if out.size == 0:
            return
        if out.size < SMALL_ELEMENTWISE:
            temps = [np.empty_like(out) for _ in range(self._temps)]
            self._numpy(raw, out, temps)  # only the last step writes ``out``
            return
        inputs = [kept.get(x) for kept, x in zip(self._inputs, raw, strict=True)]
        # Intermediates may live in the output buffer too (one tensor less at the peak)
        # where the first slot only ever holds full-shape values and the output is not an
        # input: an elementwise step reads and writes each element in place.
        in_out = full and not any(np.may_share_memory(out, x) for x in raw)
        use_session_threads(ctx)  # (torch's threads flush as this one does: _team_fp)
        self._run_torch(inputs, tensor(out), in_out)

    def _run_torch(self, inputs: list[torch.Tensor], target: torch.Tensor, in_out: bool) -> None:
        """The steps, one torch call (or numpy ufunc, ``ON_NUMPY``) each, over the whole
        tensors; the last writes ``target``, and so may the first slot where ``in_out``."""
        values: list[Any] = [None] * self._temps
        for fn, refs, slot in self._torch:
            args = [inputs[i] if is_input else values[i] for is_input, i in refs]
            if slot < 0:
                fn(*args, out=target)
            elif slot == 0 and in_out:
                values[0] = fn(*args, out=target)
            else:
                values[slot] = fn(*args, out=None)

    def _plan(
        self, ctx: OpKernelContext, shapes: tuple[tuple[int, ...], ...]
    ) -> tuple[tuple[int, ...], bool]:
        """The output's shape (the broadcast, checked) and ``_first_slot_full``."""
        shape = tuple(broadcast_shape(ctx, *shapes))
        return shape, self._first_slot_full(list(shapes), shape)

    def _first_slot_full(self, shapes: list[tuple[int, ...]], shape: tuple[int, ...]) -> bool:
        """Whether every value the plan puts in slot 0 has the output's shape."""
        slot_shapes: dict[int, tuple[int, ...]] = {}
        for _, refs, slot in self._torch:
            mine = np.broadcast_shapes(
                *[shapes[i] if is_input else slot_shapes[i] for is_input, i in refs]
            )
            if slot == 0 and mine != shape:
                return False
            if slot >= 0:
                slot_shapes[slot] = mine
        return True


def fused_matmul(ctx: OpKernelContext) -> None:
    a, b, bias = tensor_input(ctx, 0), tensor_input(ctx, 1), tensor_input(ctx, 2)
    ta, tb = bool(ctx.attr("transpose_a")), bool(ctx.attr("transpose_b"))
    shape = matmul_shape(ctx, a.shape, b.shape, ta, tb)
    check_bias(ctx, bias.shape, shape[1])
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
    """``activate`` with LeakyRelu's slope given. NaN stays NaN; Relu makes +0.0 of -0.0
    (``_relu``, as numpy's and TensorFlow's Relu), Relu6 keeps it (``np.clip`` does too)."""
    if activation == "Relu":
        _relu(out, out=out)
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
    if f.ndim == 4:
        check_bias(ctx, bias.shape, int(f.shape[3]))
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
        cpu_kernel(lib, "_FusedElementwise", CpuFusedElementwise, type_constraints=wide, **cpu)
