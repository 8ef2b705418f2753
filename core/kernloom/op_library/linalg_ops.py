"""Batched linear algebra: BatchMatMulV2 and Einsum (TensorFlow's math_ops/linalg_ops).

dtypes: BatchMatMulV2 takes TensorFlow's list (float16/32/64, int16/32/64, uint8/16/32/64,
complex64/128; no bfloat16). Einsum takes every number type (TensorFlow declares
``T: type`` but has kernels only for numbers).

Besides the OpDefs and shape functions, this module holds the run-time rules every
backend's kernels apply (re-exported by ``kernloom.plugin``): the batch-matmul shape check
and the parsed einsum equation, which checks concrete shapes and tells a kernel how to
call its library's ``einsum`` (numpy, CuPy and torch all take the subscripts it gives).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import InferenceContext, broadcast_shapes
from kernloom.op_library.types import NUMBERS, spec
from kernloom.shapes import Dim, TensorShape

__all__ = ["EinsumEquation", "EinsumPlan", "batch_matmul_shape", "define"]

BATCH_MATMUL_TYPES = (
    "{float16, float32, float64, int16, int32, int64, uint8, uint16, uint32, uint64, "
    "complex64, complex128}"
)
ELLIPSIS = "..."


class Fails(Protocol):
    """A context that makes an error naming the node (shape inference or a kernel's)."""

    def fail(self, message: str) -> Exception: ...


# -- BatchMatMulV2 -------------------------------------------------------------------------------


def batch_matmul_shape(
    ctx: Fails, x: Sequence[int], y: Sequence[int], adj_x: bool, adj_y: bool
) -> tuple[int, ...]:
    """The output shape of BatchMatMulV2: the broadcast batch dimensions, then
    ``[rows of x, columns of y]`` after the adjoints; both must be matrices or batches."""
    if len(x) < 2 or len(y) < 2:
        raise ctx.fail(f"x and y must have rank >= 2, got shapes {list(x)} and {list(y)}")
    rows, inner_x = (x[-1], x[-2]) if adj_x else (x[-2], x[-1])
    inner_y, cols = (y[-1], y[-2]) if adj_y else (y[-2], y[-1])
    if inner_x != inner_y:
        raise ctx.fail(
            f"inner dimensions differ: {inner_x} vs {inner_y} (shapes {list(x)} and {list(y)}, "
            f"adj_x={adj_x}, adj_y={adj_y})"
        )
    batch_x, batch_y = tuple(x[:-2]), tuple(y[:-2])
    rank = max(len(batch_x), len(batch_y))
    padded_x = (1,) * (rank - len(batch_x)) + batch_x
    padded_y = (1,) * (rank - len(batch_y)) + batch_y
    batch = []
    for a, b in zip(padded_x, padded_y, strict=True):
        if a != b and 1 not in (a, b):
            raise ctx.fail(
                f"batch dimensions {list(batch_x)} and {list(batch_y)} cannot be broadcast "
                f"together (shapes {list(x)} and {list(y)})"
            )
        batch.append(b if a == 1 else a)
    return (*batch, rows, cols)


def _batch_matmul_shape_fn(ctx: InferenceContext) -> None:
    x, y = ctx.input_shape(0), ctx.input_shape(1)
    for name, shape in (("x", x), ("y", y)):
        if shape.rank is not None and shape.rank < 2:
            raise ctx.fail(f"{name} must have rank >= 2, got shape {shape}")
    adj_x, adj_y = bool(ctx.attr("adj_x")), bool(ctx.attr("adj_y"))
    if x.rank is None or y.rank is None:
        ctx.set_output(0, None)
        return
    rows, inner_x = (x[-1], x[-2]) if adj_x else (x[-2], x[-1])
    inner_y, cols = (y[-1], y[-2]) if adj_y else (y[-2], y[-1])
    ctx.merge(
        TensorShape([inner_x]),
        TensorShape([inner_y]),
        f"inner dimensions (adj_x={adj_x}, adj_y={adj_y})",
    )
    batch = broadcast_shapes([TensorShape(x.dims[:-2]), TensorShape(y.dims[:-2])], ctx)  # type: ignore[index]
    ctx.set_output(0, [*(batch.dims or ()), rows, cols])


# -- Einsum --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EinsumPlan:
    """How a kernel computes one Einsum on concrete shapes.

    ``subscripts`` is an explicit equation (``"ij,jk->ik"``) with no repeated output label,
    which numpy's, CuPy's and torch's ``einsum`` all compute; its result has shape
    ``unique_shape``. Where TensorFlow's output repeats a label (``"i->ii"``, a diagonal),
    ``inflate`` lists, for each axis of that result, the output axes it runs along: the
    output (``shape``) is zeros with the result written along those diagonals.
    """

    subscripts: str
    shape: tuple[int, ...]
    unique_shape: tuple[int, ...]
    inflate: tuple[tuple[int, ...], ...] | None

    def diagonal_strides(self, strides: Sequence[int]) -> tuple[int, ...]:
        """The strides of the view of an output with ``strides`` that runs along the
        diagonals ``inflate`` names (for ``as_strided``); in the output's own units."""
        assert self.inflate is not None
        return tuple(sum(strides[axis] for axis in group) for group in self.inflate)


def _split_subscript(ctx: Fails, equation: str, subscript: str) -> tuple[str, str | None]:
    """``(labels before the ellipsis, labels after it)``, or ``(labels, None)`` without one."""
    periods = subscript.count(".")
    if periods not in (0, 3) or (periods == 3 and ELLIPSIS not in subscript):
        raise ctx.fail(
            f"einsum equation {equation!r}: subscript {subscript!r} may hold at most one "
            f"ellipsis (...), and periods only inside it"
        )
    head, _, tail = subscript.partition(ELLIPSIS)
    for label in head + tail:
        if not ("a" <= label <= "z" or "A" <= label <= "Z"):
            raise ctx.fail(
                f"einsum equation {equation!r}: label {label!r} is not a letter (labels are "
                f"a-z and A-Z, plus one ...)"
            )
    return (head, tail) if periods else (head, None)


@dataclass(frozen=True)
class EinsumEquation:
    """A parsed TensorFlow einsum equation: ``"ij,jk->ik"``, ``"...ij,...jk->...ik"``.

    TensorFlow's subset: exactly one ``->``; one or two inputs; labels are letters; each
    subscript holds at most one ellipsis, whose dimensions broadcast between the inputs;
    a label repeated within an input takes a diagonal, one repeated in the output makes
    one; labels absent from the output are summed; a labelled dimension must be the same
    size everywhere it appears (no broadcasting of named dimensions); an output without
    an ellipsis needs inputs whose ellipses cover no dimension.
    """

    equation: str
    inputs: tuple[tuple[str, str | None], ...]
    output: tuple[str, str | None]

    @classmethod
    def parse(cls, ctx: Fails, equation: str) -> EinsumEquation:
        if equation.count("->") != 1:
            raise ctx.fail(f"einsum equation {equation!r} must contain exactly one '->'")
        # No spaces stripped: TensorFlow's op reads a space as a label (tf.einsum's Python
        # wrapper strips them before making the node), which kernloom refuses as it does
        # every label that is not a letter.
        left, right = equation.split("->")
        subscripts = left.split(",")
        if len(subscripts) not in (1, 2):
            raise ctx.fail(
                f"einsum equation {equation!r} has {len(subscripts)} input subscripts; "
                f"TensorFlow's Einsum takes 1 or 2"
            )
        inputs = tuple(_split_subscript(ctx, equation, s) for s in subscripts)
        output = _split_subscript(ctx, equation, right)
        known = {label for head, tail in inputs for label in head + (tail or "")}
        for label in output[0] + (output[1] or ""):
            if label not in known:
                raise ctx.fail(
                    f"einsum equation {equation!r}: output label {label!r} is not present in "
                    f"the input subscripts"
                )
        return cls(equation, inputs, output)

    def _check_count(self, ctx: Fails, count: int) -> None:
        if count != len(self.inputs):
            raise ctx.fail(
                f"einsum equation {self.equation!r} has {len(self.inputs)} input subscripts "
                f"but the op has {count} inputs"
            )

    def _label_axes(
        self, ctx: Fails, index: int, rank: int
    ) -> tuple[list[tuple[str, int]], tuple[int, int]]:
        """(label, axis) pairs of input ``index`` of ``rank``, and its ellipsis's axes."""
        head, tail = self.inputs[index]
        if tail is None:
            if rank != len(head):
                raise ctx.fail(
                    f"input {index} must have rank {len(head)} for einsum equation "
                    f"{self.equation!r}, got rank {rank}"
                )
            return [(label, axis) for axis, label in enumerate(head)], (rank, rank)
        named = len(head) + len(tail)
        if rank < named:
            raise ctx.fail(
                f"input {index} must have rank >= {named} for einsum equation "
                f"{self.equation!r}, got rank {rank}"
            )
        start = rank - len(tail)
        pairs = [(label, axis) for axis, label in enumerate(head)]
        pairs += [(label, start + i) for i, label in enumerate(tail)]
        return pairs, (len(head), start)

    def infer(self, ctx: InferenceContext) -> None:
        """The shape function: the output shape as far as the input shapes are known."""
        self._check_count(ctx, ctx.num_inputs)
        sizes: dict[str, TensorShape] = {}
        broadcast: list[TensorShape] = []
        for index in range(ctx.num_inputs):
            shape = ctx.input_shape(index)
            if shape.rank is None:
                broadcast.append(TensorShape(None if self.inputs[index][1] is not None else []))
                continue
            pairs, (start, stop) = self._label_axes(ctx, index, shape.rank)
            for label, axis in pairs:
                dim = TensorShape([shape[axis]])
                sizes[label] = ctx.merge(
                    sizes.get(label, TensorShape([None])),
                    dim,
                    f"einsum equation {self.equation!r}: dimension {axis} of input {index} "
                    f"(label {label!r})",
                )
            broadcast.append(TensorShape(shape.dims[start:stop]))  # type: ignore[index]
        batch = broadcast_shapes(broadcast, ctx)
        head, tail = self.output
        if tail is None:
            if batch.rank:
                raise ctx.fail(
                    f"einsum equation {self.equation!r} has no ellipsis (...) in its output, "
                    f"but the inputs' ellipses cover dimensions {batch}"
                )
        elif batch.rank is None:
            ctx.set_output(0, None)
            return
        dims: list[Dim] = [sizes.get(label, TensorShape([None]))[0] for label in head]
        if tail is not None:
            dims += list(batch.dims or ())
            dims += [sizes.get(label, TensorShape([None]))[0] for label in tail]
        ctx.set_output(0, dims)

    def plan(self, ctx: Fails, shapes: Sequence[Sequence[int]]) -> EinsumPlan:
        """Check concrete input shapes and say how to compute the output."""
        self._check_count(ctx, len(shapes))
        sizes: dict[str, int] = {}
        broadcast: list[tuple[int, ...]] = []
        for index, shape in enumerate(shapes):
            pairs, (start, stop) = self._label_axes(ctx, index, len(shape))
            for label, axis in pairs:
                if sizes.setdefault(label, int(shape[axis])) != shape[axis]:
                    raise ctx.fail(
                        f"einsum equation {self.equation!r}: label {label!r} is dimension "
                        f"{sizes[label]} elsewhere but dimension {shape[axis]} at axis {axis} "
                        f"of input {index} (shape {list(shape)})"
                    )
            broadcast.append(tuple(int(d) for d in shape[start:stop]))
        rank = max(len(b) for b in broadcast)
        batch = []
        for position in range(rank):
            column = {
                b[len(b) - rank + position] for b in broadcast if len(b) - rank + position >= 0
            }
            if len(column - {1}) > 1:
                raise ctx.fail(
                    f"einsum equation {self.equation!r}: the ellipsis dimensions "
                    f"{', '.join(str(list(b)) for b in broadcast)} cannot be broadcast together"
                )
            batch.append(max(column - {1}, default=1))
        head, tail = self.output
        if tail is None and rank:
            raise ctx.fail(
                f"einsum equation {self.equation!r} has no ellipsis (...) in its output, but "
                f"the inputs' ellipses cover dimensions {batch}"
            )
        # The output's axes, the ellipsis's named "0", "1"... (never repeated).
        out_axes = list(head) + ([str(i) for i in range(rank)] if tail is not None else [])
        out_axes += list(tail or "")
        shape = tuple(sizes[a] if a in sizes else batch[int(a)] for a in out_axes)
        unique = list(dict.fromkeys(out_axes))
        unique_shape = tuple(sizes[a] if a in sizes else batch[int(a)] for a in unique)
        inflate = None
        if len(unique) != len(out_axes):
            inflate = tuple(tuple(i for i, a in enumerate(out_axes) if a == u) for u in unique)
        has_ellipsis = any(t is not None for _, t in self.inputs)
        written = list(head) + ([ELLIPSIS] if tail is not None and has_ellipsis else [])
        written += list(tail or "")
        subscripts = (
            ",".join(h if t is None else f"{h}{ELLIPSIS}{t}" for h, t in self.inputs)
            + "->"
            + "".join(dict.fromkeys(written))
        )
        return EinsumPlan(subscripts, shape, unique_shape, inflate)


def _einsum_shape(ctx: InferenceContext) -> None:
    EinsumEquation.parse(ctx, str(ctx.attr("equation"))).infer(ctx)


def define(lib: OpLibrary) -> None:
    (
        lib.register_op("BatchMatMulV2")
        .input("x: T", "[..., r_x, c_x]")
        .input("y: T", "[..., r_y, c_y]")
        .output("output: T")
        .attr(f"T: {BATCH_MATMUL_TYPES}")
        .attr("adj_x: bool = false", "Use x's adjoint (conjugate transpose) of its last two axes.")
        .attr("adj_y: bool = false", "Use y's adjoint (conjugate transpose) of its last two axes.")
        .attr("grad_x: bool = false", "TensorFlow's gradient marker; changes nothing here.")
        .attr("grad_y: bool = false", "TensorFlow's gradient marker; changes nothing here.")
        .shape_fn(_batch_matmul_shape_fn)
        .doc(
            "Matrix products over the last two axes; the batch axes broadcast (numpy rules).",
            "An adjoint conjugates complex values as well as transposing. Integer products "
            "wrap around on overflow. Deviation: the unsigned types, which TensorFlow's op "
            "lists but its CPU has no kernel for (the node is refused), are computed.",
        )
    )
    (
        lib.register_op("Einsum")
        .input("inputs: N * T")
        .output("output: T")
        .attr("equation: string", "'ij,jk->ik', '...ij,...jk->...ik', 'ii->i', 'i->ii'.")
        .attr("N: int >= 1")
        .attr(f"T: {spec(NUMBERS)}")
        .shape_fn(_einsum_shape)
        .doc(
            "Tensor contraction over the equation's labels (TensorFlow's subset).",
            "One or two inputs; exactly one '->'; labels are letters; at most one ellipsis per "
            "subscript, broadcasting between the inputs; a label repeated in an input takes "
            "its diagonal and one repeated in the output writes one (zeros elsewhere); labels "
            "absent from the output are summed. Named dimensions must match exactly. "
            "Deviations: T is limited to number types, and takes int8, int16 and the unsigned "
            "types, for which TensorFlow's CPU has no kernel (the products wrap around); "
            "labels are letters, where TensorFlow's op takes any character but '.' (a digit, "
            "'#', a space): kernloom refuses the others.",
        )
    )
