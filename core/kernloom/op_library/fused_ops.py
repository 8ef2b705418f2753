"""Fused ops the graph optimizer builds (TensorFlow's remapper ops and an elementwise
fusion of kloom's own). Graph authors never build them; each fused node carries
``_fused_from``, the names of the user's nodes it replaces.

- ``_FusedMatMul``: MatMul, then ``fused_ops`` in order: ``BiasAdd`` (the first of
  ``args``), then at most one activation (``Relu``, ``Relu6``, ``Elu``, ``LeakyRelu``).
- ``_FusedConv2D``: Conv2D (its attrs), then ``fused_ops`` as for ``_FusedMatMul``, or
  ``BiasAdd``, ``Add`` [, activation]: the second of ``args`` (a residual of the output's
  shape) added after the bias, as TensorFlow's oneDNN remapper builds for a ResNet block.
- ``_FusedElementwise``: a connected group of elementwise ops over ``inputs`` (same dtype,
  numpy broadcasting), written as ``expression``: steps separated by ``;``, each
  ``Op(a, b)`` over inputs ``i0, i1, ...`` and earlier steps ``t0, t1, ...`` (step k is
  ``tk``); the last step is the output. ``Add(i0, i1); Relu(t0)`` is relu(i0 + i1).
  ``parse_expression`` reads it for kernels.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, NamedTuple

from kernloom.errors import InvalidArgumentError
from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import InferenceContext, broadcast_shapes
from kernloom.op_library.conv_ops import _conv2d_shape
from kernloom.op_library.types import FLOATS, spec
from kernloom.shapes import TensorShape

__all__ = [
    "BIAS_FORMS",
    "CONV_FORMS",
    "ELEMENTWISE_ARITY",
    "FUSED_ACTIVATIONS",
    "RESIDUAL_FORMS",
    "FusedOps",
    "PlannedStep",
    "define",
    "parse_expression",
    "parse_fused_ops",
    "plan_expression",
]

ELEMENTWISE_ARITY: Final = {
    "Add": 2,
    "AddV2": 2,
    "Sub": 2,
    "Mul": 2,
    "RealDiv": 2,
    "Maximum": 2,
    "Minimum": 2,
    "Neg": 1,
    "Exp": 1,
    "Log": 1,
    "Sqrt": 1,
    "Square": 1,
    "Tanh": 1,
    "Sigmoid": 1,
    "Relu": 1,
}
"""The ops a ``_FusedElementwise`` expression may use, and how many operands each takes."""

FUSED_ACTIVATIONS: Final = ("Relu", "Relu6", "Elu", "LeakyRelu")

_STEP: Final = re.compile(r"\s*([A-Za-z0-9]+)\(\s*([it]\d+)\s*(?:,\s*([it]\d+)\s*)?\)\s*")

Operand = tuple[str, int]
"""``("i", n)``: input n; ``("t", k)``: the value of step k."""


def parse_expression(text: str, num_inputs: int) -> list[tuple[str, list[Operand]]]:
    """The steps of a ``_FusedElementwise`` expression: (op, operands) each, checked
    (known ops, arity, operands in range, each step only after what it reads)."""
    steps: list[tuple[str, list[Operand]]] = []
    for index, part in enumerate(text.split(";")):
        match = _STEP.fullmatch(part)
        if match is None:
            raise InvalidArgumentError(
                f"fused expression {text!r}: step {index} {part.strip()!r} is not 'Op(a, b)'"
            )
        op = match.group(1)
        operands: list[Operand] = [(m[0], int(m[1:])) for m in match.group(2, 3) if m is not None]
        arity = ELEMENTWISE_ARITY.get(op)
        if arity is None:
            raise InvalidArgumentError(
                f"fused expression {text!r}: op {op!r} cannot be fused; fusable: "
                f"{', '.join(sorted(ELEMENTWISE_ARITY))}"
            )
        if len(operands) != arity:
            raise InvalidArgumentError(
                f"fused expression {text!r}: {op} takes {arity} operand(s), got {len(operands)}"
            )
        for kind, number in operands:
            limit = num_inputs if kind == "i" else index
            if number >= limit:
                raise InvalidArgumentError(
                    f"fused expression {text!r}: step {index} reads {kind}{number}, which "
                    f"does not exist (" + (f"{num_inputs} inputs)" if kind == "i" else "yet)")
                )
        steps.append((op, operands))
    return steps


def _fused_elementwise_shape(ctx: InferenceContext) -> None:
    try:
        parse_expression(str(ctx.attr("expression")), ctx.num_inputs)
    except InvalidArgumentError as exc:
        raise ctx.fail(str(exc)) from None
    ctx.set_output(0, broadcast_shapes([ctx.input_shape(i) for i in range(ctx.num_inputs)], ctx))


class PlannedStep(NamedTuple):
    """One step of a planned expression: its op, its operands as (is_input, index) -- an
    input's position, or the temporary slot holding an earlier step's value -- and the
    slot it writes (-1: the output)."""

    op: str
    operands: tuple[tuple[bool, int], ...]
    slot: int


def plan_expression(text: str, num_inputs: int) -> tuple[list[PlannedStep], int]:
    """The steps of a ``_FusedElementwise`` expression (``parse_expression``) with the
    temporaries they write, and how many temporaries there are: step k writes into the
    slot of an operand that dies at k, else a free one, else a new one; the last step
    writes the output. A kernel that evaluates into preallocated buffers needs no more."""
    steps = parse_expression(text, num_inputs)
    last_use: dict[int, int] = {}
    for k, (_, operands) in enumerate(steps):
        for kind, index in operands:
            if kind == "t":
                last_use[index] = k
    slot_of: dict[int, int] = {}
    free: list[int] = []
    planned: list[PlannedStep] = []
    temps = 0
    for k, (op, operands) in enumerate(steps):
        # Once per temporary: Add(t0, t0) frees t0's slot once, not twice (a slot on the
        # free list twice would be handed to two live values).
        dying = sorted({i for kind, i in operands if kind == "t" and last_use.get(i) == k})
        for i in dying:
            free.append(slot_of[i])
        if k == len(steps) - 1:
            slot = -1
        elif free:
            slot = free.pop()
        else:
            slot = temps
            temps += 1
        slot_of[k] = slot
        refs = tuple((True, i) if kind == "i" else (False, slot_of[i]) for kind, i in operands)
        planned.append(PlannedStep(op, refs, slot))
    return planned, temps


class FusedOps(NamedTuple):
    """What a ``fused_ops`` list asks for after the product, in order: the bias (always),
    a residual added (``Add``, ``_FusedConv2D`` only), an activation ("" for none)."""

    residual: bool
    activation: str

    @property
    def num_args(self) -> int:
        """The ``args`` this form takes: the bias, and the residual when it adds one."""
        return 2 if self.residual else 1


BIAS_FORMS: Final = (("BiasAdd",), *(("BiasAdd", a) for a in FUSED_ACTIVATIONS))
"""Every ``fused_ops`` of ``_FusedMatMul``, and of a ``_FusedConv2D`` without a residual."""

RESIDUAL_FORMS: Final = (("BiasAdd", "Add"), *(("BiasAdd", "Add", a) for a in FUSED_ACTIVATIONS))
"""The ``_FusedConv2D`` forms that add a residual after the bias (TensorFlow's oneDNN
remapper: a ResNet block's ``Conv2D + BiasAdd + Add [+ Relu]``)."""

CONV_FORMS: Final = BIAS_FORMS + RESIDUAL_FORMS
"""Every ``fused_ops`` of ``_FusedConv2D``. A kernel that implements the residual forms
declares them (``attr_constraints={"fused_ops": CONV_FORMS}``); the remapper builds a
residual form only for a device whose kernel does (one registered without the constraint
is taken to know only ``BIAS_FORMS``, as before these forms existed)."""


def parse_fused_ops(fused_ops: Sequence[object], residual_allowed: bool = True) -> FusedOps:
    """The form a ``fused_ops`` list names, checked: ``BiasAdd``, then ``Add`` (where a
    residual is allowed), then at most one activation of ``FUSED_ACTIVATIONS``."""
    ops = tuple(str(op) for op in fused_ops)
    forms = CONV_FORMS if residual_allowed else BIAS_FORMS
    if not residual_allowed and "Add" in ops:
        raise InvalidArgumentError(
            f"fused_ops {list(ops)}: a residual ('Add') is fused into _FusedConv2D only; "
            f"fused_ops must be ['BiasAdd'] or ['BiasAdd', activation] here"
        )
    if ops not in forms and (*ops[:-1], "Relu") in forms:
        raise InvalidArgumentError(
            f"fused activation {ops[-1]!r} is not one of {', '.join(FUSED_ACTIVATIONS)}"
        )
    if ops not in forms:
        shapes = (
            "['BiasAdd'], ['BiasAdd', activation], ['BiasAdd', 'Add'] or "
            "['BiasAdd', 'Add', activation]"
            if residual_allowed
            else "['BiasAdd'] or ['BiasAdd', activation]"
        )
        raise InvalidArgumentError(
            f"fused_ops must be {shapes} (activation one of {', '.join(FUSED_ACTIVATIONS)}), "
            f"got {list(ops)}"
        )
    residual = len(ops) > 1 and ops[1] == "Add"
    return FusedOps(residual, ops[-1] if len(ops) > 1 + residual else "")


def _check_fused_ops(ctx: InferenceContext, residual_allowed: bool) -> FusedOps:
    try:
        form = parse_fused_ops(ctx.attr("fused_ops"), residual_allowed)
    except InvalidArgumentError as exc:
        raise ctx.fail(str(exc)) from None
    if ctx.num_inputs - 2 != form.num_args:
        what = "the bias and the residual" if form.residual else "the bias"
        raise ctx.fail(
            f"fused_ops {list(ctx.attr('fused_ops'))} take {what} (num_args {form.num_args}), "
            f"got {ctx.num_inputs - 2} argument(s)"
        )
    return form


def _fused_conv2d_shape(ctx: InferenceContext) -> None:
    form = _check_fused_ops(ctx, residual_allowed=True)
    _conv2d_shape(ctx)
    if form.residual:
        out = ctx.outputs()[0]
        ctx.set_output(0, ctx.merge(out, ctx.input_shape(3), "the residual and the output"))
    bias = ctx.input_shape(2)
    if bias.rank not in (1, None):
        raise ctx.fail(f"bias must be a vector, got shape {bias}")
    depth = ctx.input_shape(1)
    known = bias.rank == 1 and depth.rank == 4 and None not in (bias[0], depth[3])
    if known and bias[0] != depth[3]:
        raise ctx.fail(f"bias has {bias[0]} values for {depth[3]} output channels")


def _fused_matmul_shape(ctx: InferenceContext) -> None:
    _check_fused_ops(ctx, residual_allowed=False)
    a, b, bias = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
    if a.rank not in (2, None) or b.rank not in (2, None):
        raise ctx.fail("_FusedMatMul takes matrices (rank 2)")
    if bias.rank not in (1, None):
        raise ctx.fail(f"bias must be a vector, got shape {bias}")
    rows = None if a.rank is None else a[1 if ctx.attr("transpose_a") else 0]
    cols = None if b.rank is None else b[0 if ctx.attr("transpose_b") else 1]
    inner_a = None if a.rank is None else a[0 if ctx.attr("transpose_a") else 1]
    inner_b = None if b.rank is None else b[1 if ctx.attr("transpose_b") else 0]
    if inner_a is not None and inner_b is not None and inner_a != inner_b:
        raise ctx.fail(f"inner dimensions differ: {inner_a} vs {inner_b}")
    channels = None if bias.rank is None else bias[0]
    if cols is not None and channels is not None and cols != channels:
        raise ctx.fail(f"bias has {channels} values for {cols} columns")
    ctx.set_output(0, TensorShape([rows, cols]))


def define(lib: OpLibrary) -> None:
    floats = spec(FLOATS)
    (
        lib.register_op("_FusedMatMul")
        .input("a: T")
        .input("b: T")
        .input("args: num_args * T")
        .output("product: T")
        .attr(f"T: {floats}")
        .attr("num_args: int >= 0")
        .attr("transpose_a: bool = false")
        .attr("transpose_b: bool = false")
        .attr("fused_ops: list(string) = []")
        .attr("epsilon: float = 0.0001")
        .attr("leakyrelu_alpha: float = 0.2")
        .shape_fn(_fused_matmul_shape)
        .doc(
            "MatMul + BiasAdd [+ activation] in one node (TensorFlow's remapper op); built "
            "by the graph optimizer, which records the replaced nodes in _fused_from."
        )
    )
    (
        lib.register_op("_FusedConv2D")
        .input("input: T")
        .input("filter: T")
        .input("args: num_args * T")
        .output("output: T")
        .attr(f"T: {floats}")
        .attr("num_args: int >= 0")
        .attr("strides: list(int)")
        .attr("padding: {'SAME', 'VALID', 'EXPLICIT'}")
        .attr("explicit_paddings: list(int) = []")
        .attr("data_format: {'NHWC', 'NCHW'} = 'NHWC'")
        .attr("dilations: list(int) = [1, 1, 1, 1]")
        .attr("use_cudnn_on_gpu: bool = true")
        .attr("fused_ops: list(string) = []")
        .attr("epsilon: float = 0.0001")
        .attr("leakyrelu_alpha: float = 0.2")
        .shape_fn(_fused_conv2d_shape)
        .doc(
            "Conv2D + BiasAdd [+ activation] in one node (TensorFlow's remapper op); the "
            "bias is added along the channel axis of data_format. Built by the optimizer."
        )
    )
    (
        lib.register_op("_FusedElementwise")
        .input("inputs: N * T")
        .output("output: T")
        .attr("N: int >= 1")
        .attr(f"T: {spec((*FLOATS,))}")
        .attr("expression: string")
        .shape_fn(_fused_elementwise_shape)
        .doc(
            "A connected group of elementwise ops evaluated in one pass (see the module "
            "doc for the expression); built by the graph optimizer's elementwise fusion."
        )
    )
