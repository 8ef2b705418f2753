"""Batched linear algebra: BatchMatMulV2, Einsum, the band and diagonal ops (MatrixBandPart,
MatrixDiagV3, MatrixDiagPartV3, MatrixSetDiagV3) and the decompositions and solvers
(MatrixDeterminant, LogMatrixDeterminant, MatrixInverse, Cholesky, MatrixSolve,
MatrixTriangularSolve), as TensorFlow's math_ops, array_ops and linalg_ops define them.

dtypes: BatchMatMulV2 takes TensorFlow's list (float16/32/64, int16/32/64, uint8/16/32/64,
complex64/128; no bfloat16). Einsum takes every number type (TensorFlow declares
``T: type`` but has kernels only for numbers).

Besides the OpDefs and shape functions, this module holds the run-time rules every
backend's kernels apply (re-exported by ``kernloom.plugin``): the batch-matmul shape check
and the parsed einsum equation, which checks concrete shapes and tells a kernel how to
call its library's ``einsum`` (numpy, CuPy and torch all take the subscripts it gives);
the band limits and the diagonal band (``DiagBand``: which element of which diagonal goes
where, with TensorFlow's alignment); and the square, solve and triangular-solve shape
checks. The decompositions' dtypes are TensorFlow's op-def lists; its CPU registers
kernels for fewer (no float16 except MatrixInverse's), and so do kernloom's kernels, so
that a float16 MatrixDeterminant is refused when it runs, as in TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import InferenceContext, broadcast_shapes
from kernloom.op_library.types import ALL, NUMBERS, spec
from kernloom.shapes import Dim, TensorShape

__all__ = [
    "ALIGNMENTS",
    "DiagBand",
    "EinsumEquation",
    "EinsumPlan",
    "band_limits",
    "band_mask",
    "batch_matmul_shape",
    "define",
    "diag_range",
    "matrix_diag_size",
    "solve_shape",
    "square_batch",
    "triangular_solve_shape",
]

BATCH_MATMUL_TYPES = (
    "{float16, float32, float64, int16, int32, int64, uint8, uint16, uint32, uint64, "
    "complex64, complex128}"
)
ELLIPSIS = "..."
DECOMPOSITION_TYPES = "{float16, float32, float64, complex64, complex128}"
"""TensorFlow's op-def list of the determinants, inverse, Cholesky and solvers (its
MatrixTriangularSolve adds bfloat16, which kernloom lacks)."""
ALIGNMENTS = ("LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT")
"""The ``align`` attr of the V3 diagonal ops: how superdiagonals (first word) and
subdiagonals (second word) shorter than the longest are placed in their row."""


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


# -- MatrixBandPart and the V3 diagonal ops ------------------------------------------------------


def _scalar(ctx: Fails, name: str, value: Any) -> int:
    array = np.asarray(value)
    if array.ndim != 0:
        raise ctx.fail(f"{name} must be scalar, got shape {list(array.shape)}")
    return int(array)


def band_limits(
    ctx: Fails, rows: int, cols: int, num_lower: Any, num_upper: Any
) -> tuple[int, int]:
    """MatrixBandPart's ``(num_lower, num_upper)`` checked as TensorFlow's kernel checks
    them: scalars, each negative (keep the whole triangle) or at most the rows (columns)."""
    lower, upper = _scalar(ctx, "num_lower", num_lower), _scalar(ctx, "num_upper", num_upper)
    if lower > rows:
        raise ctx.fail(
            f"num_lower must be negative or less or equal to number of rows ({rows}) got: {lower}"
        )
    if upper > cols:
        raise ctx.fail(
            f"num_upper must be negative or less or equal to number of columns ({cols}) "
            f"got: {upper}"
        )
    return lower, upper


def band_mask(rows: int, cols: int, lower: int, upper: int) -> np.ndarray[Any, Any]:
    """The ``[rows, cols]`` bool mask of MatrixBandPart's band: (m, n) with
    ``m - n <= lower`` and ``n - m <= upper``, a negative limit bounding nothing."""
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # n - m
    keep = np.ones((rows, cols), bool)
    if lower >= 0:
        keep &= -offset <= lower
    if upper >= 0:
        keep &= offset <= upper
    return keep


def diag_range(ctx: Fails, k: Any) -> tuple[int, int]:
    """The diagonal range ``(lower, upper)`` of a ``k`` input: a scalar (one diagonal) or a
    vector of one or two elements; lower must not exceed upper."""
    array = np.asarray(k)
    if array.ndim > 1:
        raise ctx.fail(
            f"diag_index must be a scalar or vector, received shape: {list(array.shape)}"
        )
    flat = array.reshape(-1)
    if flat.size not in (1, 2):
        raise ctx.fail(
            f"diag_index must have only one or two elements, received {flat.size} elements."
        )
    lower, upper = int(flat[0]), int(flat[-1])
    if lower > upper:
        raise ctx.fail(
            f"lower_diag_index must not be larger than upper_diag_index: {lower} > {upper}"
        )
    return lower, upper


def matrix_diag_size(
    ctx: Fails, diag_shape: Sequence[int], lower: int, upper: int, num_rows: int, num_cols: int
) -> tuple[int, int]:
    """MatrixDiagV3's output ``(rows, cols)``: -1 takes the smallest size the diagonals fit
    (both -1: a square matrix); a given size must fit them, and one of the two must be that
    smallest size (TensorFlow's rule, so that the diagonals' length is the longest one)."""
    if len(diag_shape) < 1:
        raise ctx.fail(f"diagonal must be at least 1-dim, received shape: {list(diag_shape)}")
    num_diags = upper - lower + 1
    if num_diags > 1 and (len(diag_shape) < 2 or diag_shape[-2] != num_diags):
        raise ctx.fail(
            "The number of diagonals provided in the input does not match the lower_diag_index "
            f"and upper_diag_index range ({lower}, {upper}): diagonal shape {list(diag_shape)}"
        )
    length = diag_shape[-1]
    min_rows, min_cols = length - min(upper, 0), length + max(lower, 0)
    if num_rows == -1 and num_cols == -1:
        num_rows = num_cols = max(min_rows, min_cols)
    elif num_rows == -1:
        num_rows = min_rows
    elif num_cols == -1:
        num_cols = min_cols
    if num_rows < min_rows:
        raise ctx.fail(f"The number of rows is too small: {num_rows} < {min_rows}")
    if num_cols < min_cols:
        raise ctx.fail(f"The number of columns is too small: {num_cols} < {min_cols}")
    if num_rows != min_rows and num_cols != min_cols:
        raise ctx.fail(
            f"The number of rows or columns is not consistent with the specified d_lower, "
            f"d_upper, and diagonal: {num_rows} x {num_cols} for k = ({lower}, {upper}) and "
            f"diagonals of length {length}"
        )
    return num_rows, num_cols


@dataclass(frozen=True)
class DiagBand:
    """The diagonals ``lower..upper`` of ``rows x cols`` matrices, packed as TensorFlow's V3
    ops pack them: row ``i`` of the packed form holds diagonal ``upper - i`` (the highest
    first), every row is as long as the longest diagonal, and a shorter one sits at the
    left or the right of its row as ``align`` says (the main diagonal is left-aligned if
    either word says LEFT). A single diagonal has no row axis."""

    rows: int
    cols: int
    lower: int
    upper: int
    align: str

    @classmethod
    def checked(
        cls, ctx: Fails, rows: int, cols: int, lower: int, upper: int, align: str
    ) -> DiagBand:
        """The band of MatrixDiagPartV3 and MatrixSetDiagV3, whose diagonals must lie in the
        matrix (diagonal 0 always does, even of an empty one)."""
        for name, d in (("lower_diag_index", lower), ("upper_diag_index", upper)):
            if not (-rows < d < cols or d == 0):
                raise ctx.fail(
                    f"{name} is out of bound: {d}. It must be between {-rows} and {cols}"
                )
        return cls(rows, cols, lower, upper, align)

    @property
    def num_diags(self) -> int:
        return self.upper - self.lower + 1

    @property
    def max_len(self) -> int:
        """The longest diagonal's length: the packed rows' length."""
        return max(min(self.rows + min(self.upper, 0), self.cols - max(self.lower, 0)), 0)

    def packed_shape(self, batch: Sequence[int]) -> tuple[int, ...]:
        rows = (self.num_diags,) if self.num_diags > 1 else ()
        return (*batch, *rows, self.max_len)

    def check_diagonal(
        self, ctx: Fails, shape: Sequence[int], diagonal: Sequence[int]
    ) -> tuple[int, ...]:
        """MatrixSetDiagV3's check that ``diagonal`` is this band of matrices of ``shape``,
        packed; the batch dimensions."""
        batch = tuple(shape[:-2])
        expected = self.packed_shape(batch)
        if tuple(diagonal) != expected:
            raise ctx.fail(
                f"diagonal must have shape {list(expected)} for input {list(shape)} and k = "
                f"({self.lower}, {self.upper}), got {list(diagonal)}"
            )
        return batch

    def indices(self) -> tuple[np.ndarray[Any, Any], ...]:
        """``(packed row, packed position, matrix row, matrix column)`` of every element of
        every diagonal of the band, as int64 vectors (the positions padding fills are not
        listed). A loop over the diagonals, never over matrices."""
        superdiag_left = self.align in ("LEFT_LEFT", "LEFT_RIGHT")
        subdiag_left = self.align in ("LEFT_LEFT", "RIGHT_LEFT")
        parts: list[tuple[np.ndarray[Any, Any], ...]] = []
        for i, d in enumerate(range(self.upper, self.lower - 1, -1)):
            length = max(min(self.rows + min(d, 0), self.cols - max(d, 0)), 0)
            left = (d >= 0 and superdiag_left) or (d <= 0 and subdiag_left)
            offset = 0 if left else self.max_len - length
            j = np.arange(length, dtype=np.int64)
            parts.append((np.full(length, i, np.int64), j + offset, j + max(-d, 0), j + max(d, 0)))
        return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def _host_value(ctx: InferenceContext, index: int, name: str) -> np.ndarray[Any, Any] | None:
    """A host input's constant value, after checking the rank its op allows (k: <= 1)."""
    shape = ctx.input_shape(index)
    limit = 1 if name == "k" else 0
    if shape.rank is not None and shape.rank > limit:
        what = "a scalar or vector" if limit else "a scalar"
        raise ctx.fail(f"{name} must be {what}, got shape {shape}")
    return ctx.input_value(index)


def _band_part_shape(ctx: InferenceContext) -> None:
    shape = ctx.input_shape(0)
    if shape.rank is not None and shape.rank < 2:
        raise ctx.fail(f"input must be at least 2-dim, got shape {shape}")
    _host_value(ctx, 1, "num_lower")
    _host_value(ctx, 2, "num_upper")
    ctx.set_output(0, shape)


def _diag_part_shape(ctx: InferenceContext) -> None:
    shape = ctx.input_shape(0)
    if shape.rank is not None and shape.rank < 2:
        raise ctx.fail(f"input must be at least 2-dim, got shape {shape}")
    k = _host_value(ctx, 1, "k")
    _host_value(ctx, 2, "padding_value")
    if shape.rank is None or k is None or shape[-2] is None or shape[-1] is None:
        ctx.set_output(0, None)
        return
    lower, upper = diag_range(ctx, k)
    band = DiagBand.checked(ctx, shape[-2], shape[-1], lower, upper, str(ctx.attr("align")))
    ctx.set_output(0, [*shape.dims[:-2], *band.packed_shape(())])  # type: ignore[index]


def _diag_shape(ctx: InferenceContext) -> None:
    shape = ctx.input_shape(0)
    if shape.rank is not None and shape.rank < 1:
        raise ctx.fail(f"diagonal must be at least 1-dim, got shape {shape}")
    values = [_host_value(ctx, i, n) for i, n in ((1, "k"), (2, "num_rows"), (3, "num_cols"))]
    _host_value(ctx, 4, "padding_value")
    if shape.rank is None or any(v is None for v in values) or not shape.is_fully_defined():
        ctx.set_output(0, None)
        return
    k, num_rows, num_cols = values
    lower, upper = diag_range(ctx, k)
    dims = [int(d) for d in shape.dims]  # type: ignore[union-attr, arg-type]
    rows, cols = matrix_diag_size(
        ctx,
        dims,
        lower,
        upper,
        _scalar(ctx, "num_rows", num_rows),
        _scalar(ctx, "num_cols", num_cols),
    )
    batch = dims[:-2] if upper > lower else dims[:-1]
    ctx.set_output(0, [*batch, rows, cols])


def _set_diag_shape(ctx: InferenceContext) -> None:
    shape = ctx.input_shape(0)
    if shape.rank is not None and shape.rank < 2:
        raise ctx.fail(f"input must be at least 2-dim, got shape {shape}")
    diagonal = ctx.input_shape(1)
    if diagonal.rank is not None and diagonal.rank < 1:
        raise ctx.fail(f"diagonal must be at least 1-dim, got shape {diagonal}")
    _host_value(ctx, 2, "k")
    ctx.set_output(0, shape)


# -- the decompositions and solvers --------------------------------------------------------------


def square_batch(ctx: Fails, shape: Sequence[int], name: str = "input") -> tuple[int, ...]:
    """The batch dimensions of ``[..., M, M]`` matrices (checked: rank >= 2, square)."""
    if len(shape) < 2:
        raise ctx.fail(f"{name} must have rank >= 2, got shape {list(shape)}")
    if shape[-1] != shape[-2]:
        raise ctx.fail(f"{name} matrices must be square, got shape {list(shape)}")
    return tuple(shape[:-2])


def solve_shape(ctx: Fails, matrix: Sequence[int], rhs: Sequence[int]) -> tuple[int, ...]:
    """MatrixSolve's output shape: ``matrix`` is ``[..., M, M]`` and ``rhs`` ``[..., M, K]``
    with the same batch dimensions (TensorFlow's op does not broadcast them)."""
    batch = square_batch(ctx, matrix, "matrix")
    if len(rhs) != len(matrix):
        raise ctx.fail(
            f"All input tensors must have the same rank: matrix {list(matrix)}, rhs {list(rhs)}"
        )
    if tuple(rhs[:-2]) != batch:
        raise ctx.fail(
            f"All input tensors must have the same outer dimensions: matrix {list(matrix)}, "
            f"rhs {list(rhs)}"
        )
    if rhs[-2] != matrix[-1]:
        raise ctx.fail(
            f"Input matrix and rhs are incompatible: matrix {list(matrix)}, rhs {list(rhs)}"
        )
    return tuple(rhs)


def triangular_solve_shape(
    ctx: Fails, matrix: Sequence[int], rhs: Sequence[int]
) -> tuple[int, ...]:
    """MatrixTriangularSolve's output shape: the batch dimensions broadcast (TensorFlow 2),
    then ``[M, K]``."""
    square_batch(ctx, matrix, "matrix")
    if len(rhs) < 2:
        raise ctx.fail(f"rhs must have rank >= 2, got shape {list(rhs)}")
    if rhs[-2] != matrix[-1]:
        raise ctx.fail(
            f"Input matrix and rhs are incompatible: matrix {list(matrix)}, rhs {list(rhs)}"
        )
    try:
        batch = np.broadcast_shapes(tuple(matrix[:-2]), tuple(rhs[:-2]))
    except ValueError:
        raise ctx.fail(
            f"In[0] and In[1] must have compatible batch dimensions: {list(matrix)} vs. {list(rhs)}"
        ) from None
    return (*batch, rhs[-2], rhs[-1])


def _square(ctx: InferenceContext, index: int, name: str) -> TensorShape:
    """Input ``index`` as ``[..., M, M]``: rank >= 2, the last two dimensions merged."""
    shape = ctx.input_shape(index)
    if shape.rank is None:
        return shape
    if shape.rank < 2:
        raise ctx.fail(f"{name} must have rank >= 2, got shape {shape}")
    size = ctx.merge(TensorShape([shape[-2]]), TensorShape([shape[-1]]), f"{name}: square matrices")
    return TensorShape([*shape.dims[:-2], size[0], size[0]])  # type: ignore[index]


def _same_square_shape(ctx: InferenceContext) -> None:
    ctx.set_output(0, _square(ctx, 0, "input"))


def _determinant_shape(ctx: InferenceContext) -> None:
    shape = _square(ctx, 0, "input")
    batch = None if shape.rank is None else shape.dims[:-2]  # type: ignore[index]
    for index in range(ctx.num_outputs):
        ctx.set_output(index, batch)


def _matrix_and_rhs(ctx: InferenceContext) -> tuple[TensorShape, TensorShape] | None:
    """A solve's square matrix and its rhs of rank 2 or more, checked; None (the output
    set unknown) where either rank is unknown."""
    matrix = _square(ctx, 0, "matrix")
    rhs = ctx.input_shape(1)
    if rhs.rank is not None and rhs.rank < 2:
        raise ctx.fail(f"rhs must have rank >= 2, got shape {rhs}")
    if matrix.rank is None or rhs.rank is None:
        ctx.set_output(0, None)
        return None
    return matrix, rhs


def _solve_shape_fn(ctx: InferenceContext) -> None:
    shapes = _matrix_and_rhs(ctx)
    if shapes is None:
        return
    matrix, rhs = shapes
    batch = ctx.merge(
        TensorShape(matrix.dims[:-2]),  # type: ignore[index]
        TensorShape(rhs.dims[:-2]),  # type: ignore[index]
        "matrix and rhs: the same batch dimensions",
    )
    rows = ctx.merge(TensorShape([matrix[-1]]), TensorShape([rhs[-2]]), "matrix and rhs rows")
    ctx.set_output(0, [*(batch.dims or ()), rows[0], rhs[-1]])


def _triangular_solve_shape_fn(ctx: InferenceContext) -> None:
    shapes = _matrix_and_rhs(ctx)
    if shapes is None:
        return
    matrix, rhs = shapes
    rows = ctx.merge(TensorShape([matrix[-1]]), TensorShape([rhs[-2]]), "matrix and rhs rows")
    batch = broadcast_shapes(
        [TensorShape(matrix.dims[:-2]), TensorShape(rhs.dims[:-2])],  # type: ignore[index]
        ctx,
    )
    ctx.set_output(0, None if batch.rank is None else [*(batch.dims or ()), rows[0], rhs[-1]])


def _define_band_and_diag(lib: OpLibrary) -> None:
    """MatrixBandPart and the V3 diagonal ops: TensorFlow's ``T: type``, which kernloom's
    dtypes (numbers and bool) all are; k, num_rows and num_cols are int32 host inputs."""
    all_types = spec(ALL)
    align = "align: {" + ", ".join(f"'{a}'" for a in ALIGNMENTS) + "} = 'RIGHT_LEFT'"
    (
        lib.register_op("MatrixBandPart")
        .input("input: T", "[..., M, N]")
        .input("num_lower: Tindex", "Subdiagonals to keep; negative: all of them.")
        .input("num_upper: Tindex", "Superdiagonals to keep; negative: all of them.")
        .output("band: T")
        .attr(f"T: {all_types}")
        .attr("Tindex: {int32, int64} = int64")
        .shape_fn(_band_part_shape)
        .doc(
            "The band of each matrix: element (m, n) is kept where (num_lower < 0 or "
            "m - n <= num_lower) and (num_upper < 0 or n - m <= num_upper), else zero.",
            "band_part(x, 0, -1) is the upper triangle, (-1, 0) the lower, (0, 0) the "
            "diagonal. num_lower above M, or num_upper above N, is an InvalidArgumentError "
            "when the kernel runs (as in TensorFlow; its shape function reads neither).",
        )
    )
    (
        lib.register_op("MatrixDiagV3")
        .input("diagonal: T", "[..., L] (one diagonal) or [..., D, L] (D = k[1] - k[0] + 1).")
        .input("k: int32", "The diagonal (scalar) or the range [low, high]; 0 is the main one.")
        .input("num_rows: int32", "Rows of the output; -1: the fewest the diagonals fit.")
        .input("num_cols: int32", "Columns of the output; -1: the fewest the diagonals fit.")
        .input("padding_value: T", "The value everywhere off the given diagonals.")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(align, "Where shorter diagonals sit: superdiagonals first word, subdiagonals second.")
        .shape_fn(_diag_shape)
        .doc(
            "Matrices with the given diagonals (k-band) and padding_value elsewhere.",
            "Row i of diagonal holds diagonal k[1] - i; a diagonal shorter than L sits at the "
            "left or right of its row as align says (RIGHT_LEFT: superdiagonals right, "
            "subdiagonals left). num_rows and num_cols of -1 are inferred; both -1 makes a "
            "square matrix; sizes the diagonals do not fit are an InvalidArgumentError.",
        )
    )
    (
        lib.register_op("MatrixDiagPartV3")
        .input("input: T", "[..., M, N]")
        .input("k: int32", "The diagonal (scalar) or the range [low, high]; 0 is the main one.")
        .input("padding_value: T", "Fills the packed rows past a shorter diagonal's end.")
        .output("diagonal: T")
        .attr(f"T: {all_types}")
        .attr(align, "Where shorter diagonals sit: superdiagonals first word, subdiagonals second.")
        .shape_fn(_diag_part_shape)
        .doc(
            "The diagonals k[0]..k[1] of each matrix, packed: [..., L] for one diagonal, "
            "[..., D, L] for a range (the highest diagonal first), L the longest's length.",
            "Each k must be in (-M, N) (0 always is). A shorter diagonal is padded with "
            "padding_value on the side align says.",
        )
    )
    (
        lib.register_op("MatrixSetDiagV3")
        .input("input: T", "[..., M, N]")
        .input("diagonal: T", "Packed as MatrixDiagPartV3 returns them.")
        .input("k: int32", "The diagonal (scalar) or the range [low, high]; 0 is the main one.")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(align, "Where shorter diagonals sit: superdiagonals first word, subdiagonals second.")
        .shape_fn(_set_diag_shape)
        .doc(
            "input with the diagonals k[0]..k[1] replaced by the packed diagonal.",
            "diagonal must have exactly the shape MatrixDiagPartV3 would return for input and "
            "k; its padding positions are not read.",
        )
    )


def _define_decompositions(lib: OpLibrary) -> None:
    """Determinants, inverse, Cholesky and the solvers (TensorFlow's linalg_ops.cc)."""
    matrices = "[..., M, M]"
    (
        lib.register_op("MatrixDeterminant")
        .input("input: T", matrices)
        .output("output: T")
        .attr(f"T: {DECOMPOSITION_TYPES}")
        .shape_fn(_determinant_shape)
        .doc(
            "The determinant of each square matrix, through a partially pivoted LU "
            "factorisation; shape [...].",
            "An empty (0 x 0) matrix has determinant 1; a singular one 0 (possibly -0.0); a "
            "matrix holding NaN gives NaN; the product may overflow to +-inf. float16 has no "
            "kernel (TensorFlow's CPU has none).",
        )
    )
    (
        lib.register_op("LogMatrixDeterminant")
        .input("input: T", matrices)
        .output("sign: T")
        .output("log_abs_determinant: T")
        .attr(f"T: {DECOMPOSITION_TYPES}")
        .shape_fn(_determinant_shape)
        .doc(
            "The sign and log|det| of each square matrix, so that det = sign * "
            "exp(log_abs_determinant) without overflow; shapes [...].",
            "Complex: sign is the unit phase of det, log_abs_determinant a real value in T. "
            "A singular matrix gives sign 0 and -inf; an empty one 1 and 0; NaN in the "
            "matrix gives NaN for both. float16 has no kernel (as in TensorFlow's CPU).",
        )
    )
    (
        lib.register_op("MatrixInverse")
        .input("input: T", matrices)
        .output("output: T")
        .attr("adjoint: bool = false", "Invert the adjoint (conjugate transpose) instead.")
        .attr(f"T: {DECOMPOSITION_TYPES}")
        .shape_fn(_same_square_shape)
        .doc(
            "The inverse of each square matrix (partially pivoted LU).",
            "A singular matrix (a zero pivot, or NaN in it) is an InvalidArgumentError "
            "'Input is not invertible.' for the whole batch, as TensorFlow's CPU kernel "
            "raises; empty matrices give empty output. float16 is inverted in float32.",
        )
    )
    (
        lib.register_op("Cholesky")
        .input("input: T", matrices)
        .output("output: T")
        .attr(f"T: {DECOMPOSITION_TYPES}")
        .shape_fn(_same_square_shape)
        .doc(
            "The lower-triangular L of each Hermitian positive-definite matrix, input = L L^H.",
            "Only the lower triangle is read (the upper one is taken as its conjugate "
            "transpose). A matrix that is not positive definite is no error, as in "
            "TensorFlow 2.21's CPU kernel: its lower triangle is NaN (TensorFlow leaves the "
            "strict upper triangle uninitialised; kernloom writes zeros). float16 has no "
            "kernel (as in TensorFlow's CPU).",
        )
    )
    (
        lib.register_op("MatrixSolve")
        .input("matrix: T", matrices)
        .input("rhs: T", "[..., M, K]")
        .output("output: T")
        .attr("adjoint: bool = false", "Solve with the adjoint of each matrix instead.")
        .attr(f"T: {DECOMPOSITION_TYPES}")
        .shape_fn(_solve_shape_fn)
        .doc(
            "X with matrix X = rhs (adjoint(matrix) X = rhs with adjoint) for each matrix; "
            "the batch dimensions must be equal (no broadcasting, as TensorFlow's op).",
            "A singular matrix is an InvalidArgumentError 'Input matrix is not invertible.'. "
            "float16 has no kernel (as in TensorFlow's CPU).",
        )
    )
    (
        lib.register_op("MatrixTriangularSolve")
        .input("matrix: T", matrices)
        .input("rhs: T", "[..., M, K]")
        .output("output: T")
        .attr("lower: bool = true", "Read the lower triangle of matrix (else the upper).")
        .attr("adjoint: bool = false", "Solve with the adjoint of that triangle instead.")
        .attr("T: {float64, float32, float16, complex64, complex128}")
        .shape_fn(_triangular_solve_shape_fn)
        .doc(
            "X with T X = rhs by substitution, T the lower (or upper) triangle of matrix "
            "(adjoint(T) X = rhs with adjoint); the other triangle is never read.",
            "The batch dimensions broadcast (TensorFlow 2). A zero on T's diagonal is no "
            "error: the division gives +-inf or NaN, as in TensorFlow. TensorFlow's list "
            "adds bfloat16, which kernloom lacks; float16 has no kernel (as in TensorFlow's "
            "CPU).",
        )
    )


def define(lib: OpLibrary) -> None:
    _define_band_and_diag(lib)
    _define_decompositions(lib)
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
