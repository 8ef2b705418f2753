"""The rules of the shape and indexing ops (StridedSlice, Slice, Pad, Split, Gather...),
written once for the shape functions and for every backend's kernels.

Each rule is a plain function of shapes and host-memory values that raises
``InvalidArgumentError`` with the message TensorFlow gives; a shape function re-raises it
through ``ctx.fail`` and a kernel through ``ctx.fail`` too (``checked``), so that the
node is named either way. Shapes may hold ``None`` (unknown) where the shape functions
call them; kernels always pass complete shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import numpy as np

from kernloom.errors import InvalidArgumentError
from kernloom.framework.op_kernel import OpKernelContext

__all__ = [
    "SpaceBatchSpec",
    "StridedSliceSpec",
    "batch_to_space_layout",
    "broadcast_to_shape",
    "checked",
    "expand_dims_axis",
    "gather_nd_shape",
    "gather_shape",
    "index_error",
    "int_list",
    "known",
    "one_hot_axis",
    "pack_axis",
    "pad_amounts",
    "range_size",
    "reverse_axes",
    "scatter_nd_shape",
    "segment_id_error",
    "segment_shape",
    "segment_start",
    "slice_spec",
    "sorted_segment_rows",
    "space_batch_spec",
    "space_to_batch_layout",
    "split_sizes",
    "squeeze_shape",
    "strided_slice_spec",
    "tile_shape",
    "unsorted_segment_shape",
]

Dim = int | None
Shape = tuple[Dim, ...]
_R = TypeVar("_R")

_NEW_AXIS: Final = -1
_SHRINK_AXIS: Final = -2


def checked(ctx: OpKernelContext, rule: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
    """``rule(*args)`` for a kernel: its ``InvalidArgumentError`` becomes ``ctx.fail``."""
    try:
        return rule(*args, **kwargs)
    except InvalidArgumentError as exc:
        raise ctx.fail(str(exc)) from None


def known(shape: Sequence[Dim] | None) -> tuple[int, ...]:
    """A shape with every dimension known, as the kernels get them from the rules (shapes
    are always complete when a kernel runs; the rules also serve shape functions)."""
    if shape is None or any(d is None for d in shape):
        raise InvalidArgumentError(f"shape {shape} is not fully known")
    return tuple(d for d in shape if d is not None)


def int_list(value: Any, what: str, *, rank: int | None = 1) -> list[int]:
    """A host-memory integer tensor as a flat list, checking its rank when one is given."""
    array = np.asarray(value)
    if rank is not None and array.ndim != rank:
        kind = {0: "a scalar", 1: "a vector", 2: "a matrix"}.get(rank, f"of rank {rank}")
        raise InvalidArgumentError(f"{what} must be {kind}, got shape {list(array.shape)}")
    return [int(v) for v in array.reshape(-1)]


def _axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"{what} {axis} is out of range [{-rank}, {rank})")
    return axis % rank


# -- StridedSlice and Slice -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StridedSliceSpec:
    """What a StridedSlice does to an input of a given shape (TensorFlow's
    ``ValidateStridedSliceOp``): per input dimension a (begin, size, stride) triple, with
    begin and size ``None`` where they are not known at graph-building time, then the
    output shape after new axes are inserted and shrunk axes dropped."""

    begins: tuple[Dim, ...]
    sizes: tuple[Dim, ...]
    strides: tuple[int, ...]
    final_shape: Shape

    @property
    def has_negative_stride(self) -> bool:
        return any(s < 0 for s, n in zip(self.strides, self.sizes, strict=True) if n)

    def slices(self) -> tuple[slice, ...]:
        """numpy basic indexing over the input's dimensions, each taking exactly ``size``
        elements (only when every begin and size is known)."""
        out = []
        for begin, size, stride in zip(self.begins, self.sizes, self.strides, strict=True):
            assert begin is not None and size is not None
            if size == 0:
                out.append(slice(0, 0, 1))
                continue
            stop: int | None = begin + size * stride
            if stop is not None and stop < 0:
                stop = None  # a negative stride running past index 0
            out.append(slice(begin, stop, stride))
        return tuple(out)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _canonical(x: int, masked: bool, masked_value: int, dim: int, low: int, high: int) -> int:
    """A begin or end index: the masked default, else counted from the end when negative
    and clamped to the valid range for the stride's direction."""
    if masked:
        return masked_value
    return min(max(x + dim if x < 0 else x, low), high)


def strided_slice_spec(
    shape: Sequence[Dim],
    begin: Sequence[int] | None,
    end: Sequence[int] | None,
    strides: Sequence[int],
    *,
    begin_mask: int = 0,
    end_mask: int = 0,
    ellipsis_mask: int = 0,
    new_axis_mask: int = 0,
    shrink_axis_mask: int = 0,
) -> StridedSliceSpec:
    """TensorFlow's sparse-to-dense expansion of a slice spec and its canonicalisation:
    masks, one ellipsis (an implicit one at the end when none is given), negative indices
    counted from the end, clamping, shrinking an axis to one index."""
    n = len(strides)
    for name, values in (("begin", begin), ("end", end)):
        if values is not None and len(values) != n:
            raise InvalidArgumentError(
                f"Expected begin, end, and strides to be 1D equal size tensors, but {name} "
                f"has {len(values)} elements and strides {n}"
            )
    # Sparse spec: which entries are real dimensions, new axes, the ellipsis.
    sparse_dims = n
    ellipsis_seen = False
    new_after_ellipsis = 0
    for i in range(n):
        if ellipsis_seen and new_axis_mask & (1 << i):
            new_after_ellipsis += 1
        if ellipsis_mask & (1 << i):
            if ellipsis_seen:
                raise InvalidArgumentError("Multiple ellipses in slice spec not allowed")
            ellipsis_seen = True
    if not ellipsis_seen:
        ellipsis_mask |= 1 << n
        sparse_dims += 1
    rank = len(shape)
    dense_begin: list[int | None] = [0] * rank
    dense_end: list[int | None] = [0] * rank
    dense_stride = [1] * rank
    dense_begin_mask = dense_end_mask = dense_shrink = 0
    gather: list[int] = []
    full = 0
    for i in range(sparse_dims):
        bit = 1 << i
        if ellipsis_mask & bit:
            next_index = min(rank - (sparse_dims - i) + 1 + new_after_ellipsis, rank)
            while full < next_index:
                dense_begin_mask |= 1 << full
                dense_end_mask |= 1 << full
                gather.append(full)
                full += 1
        elif new_axis_mask & bit:
            gather.append(_NEW_AXIS)
        else:
            if full == rank:
                raise InvalidArgumentError(
                    f"Index out of range using input dim {full}; input has only {rank} dims"
                )
            dense_begin[full] = begin[i] if begin is not None else None
            dense_end[full] = end[i] if end is not None else None
            dense_stride[full] = strides[i]
            if begin_mask & bit:
                dense_begin_mask |= 1 << full
            if end_mask & bit:
                dense_end_mask |= 1 << full
            if shrink_axis_mask & bit:
                dense_shrink |= 1 << full
                gather.append(_SHRINK_AXIS)
            else:
                gather.append(full)
            full += 1
    bounds_known = begin is not None and end is not None
    begins: list[Dim] = []
    sizes: list[Dim] = []
    for i in range(rank):
        stride = dense_stride[i]
        if stride == 0:
            raise InvalidArgumentError(f"strides[{i}] must be non-zero")
        shrink = bool(dense_shrink & (1 << i))
        dim = shape[i]
        if dim is None:
            begins.append(None)
            sizes.append(1 if shrink else None)
            continue
        begin_masked = bool(dense_begin_mask & (1 << i))
        end_masked = bool(dense_end_mask & (1 << i))
        low, high = (0, dim) if stride > 0 else (-1, dim - 1)
        if shrink and stride <= 0:
            raise InvalidArgumentError("only stride 1 allowed on non-range indexing.")
        b, e = dense_begin[i], dense_end[i]
        if bounds_known and b is not None and e is not None:
            if shrink:
                b = b + dim if b < 0 else b
                if not 0 <= b < dim:
                    raise InvalidArgumentError(f"slice index {b} of dimension {i} out of bounds.")
                e = b + 1
            else:
                b = _canonical(b, begin_masked, low if stride > 0 else high, dim, low, high)
                e = _canonical(e, end_masked, high if stride > 0 else low, dim, low, high)
            interval: int | None = e - b
        elif shrink:
            interval = 1
        elif begin_masked and end_masked:
            b = 0 if stride > 0 else dim - 1
            interval = dim if stride > 0 else -dim
        else:
            interval = None
        if interval is None:
            begins.append(None)
            sizes.append(None)
        elif interval == 0 or (interval < 0) != (stride < 0):
            begins.append(0)
            sizes.append(0)
        else:
            begins.append(b)
            sizes.append(_ceil_div(abs(interval), abs(stride)))
    final: list[Dim] = []
    for g in gather:
        if g == _NEW_AXIS:
            final.append(1)
        elif g >= 0:
            final.append(sizes[g])
    return StridedSliceSpec(tuple(begins), tuple(sizes), tuple(dense_stride), tuple(final))


def slice_spec(
    shape: Sequence[Dim], begin: Sequence[int], size: Sequence[int] | None
) -> tuple[tuple[int, ...], Shape]:
    """Slice's begin and output shape (size ``-1``: to the end), bounds checked where the
    dimensions are known (TensorFlow's ``SharedSliceValidation``)."""
    rank = len(shape)
    if len(begin) != rank or (size is not None and len(size) != rank):
        raise InvalidArgumentError(
            f"Expected begin and size arguments to be 1-D tensors of size {rank}, but got "
            f"{len(begin)} and {len(size) if size is not None else '?'} elements instead"
        )
    out: list[Dim] = []
    for i, dim in enumerate(shape):
        b = begin[i]
        s = size[i] if size is not None else None
        if s is not None and s < -1:
            raise InvalidArgumentError(f"size[{i}] = {s}: sizes cannot be < -1")
        if dim is None:
            out.append(None if s in (None, -1) else s)
            continue
        if s == -1:
            s = dim - b
        if dim == 0 and b == 0 and s in (0, None):
            out.append(0)
            continue
        if not 0 <= b <= dim:
            raise InvalidArgumentError(f"Expected begin[{i}] in [0, {dim}], but got {b}")
        if s is not None and not 0 <= s <= dim - b:
            raise InvalidArgumentError(f"Expected size[{i}] in [0, {dim - b}], but got {s}")
        out.append(s)
    return tuple(begin), tuple(out)


# -- padding, splitting, tiling ------------------------------------------------------------


def pad_amounts(
    shape: Sequence[Dim], paddings: Any, mirror_mode: str | None = None
) -> tuple[list[tuple[int, int]], Shape]:
    """The (before, after) pairs of a ``[rank, 2]`` paddings matrix and the padded shape.
    A mirror pad takes at most ``dim - 1`` (REFLECT) or ``dim`` (SYMMETRIC) per side."""
    array = np.asarray(paddings)
    rank = len(shape)
    if array.shape != (rank, 2):
        raise InvalidArgumentError(
            f"paddings must be a matrix of shape [{rank}, 2] for an input of rank {rank}, "
            f"got shape {list(array.shape)}"
        )
    pairs = [(int(a), int(b)) for a, b in array.reshape(rank, 2)]
    out: list[Dim] = []
    for i, ((before, after), dim) in enumerate(zip(pairs, shape, strict=True)):
        if before < 0 or after < 0:
            raise InvalidArgumentError(
                f"Paddings must be non-negative, got [{before}, {after}] for dimension {i}"
            )
        if mirror_mode is not None and dim is not None:
            limit = dim - (1 if mirror_mode == "REFLECT" else 0)
            if before > limit or after > limit:
                raise InvalidArgumentError(
                    f"paddings must be no greater than the dimension size minus "
                    f"{1 if mirror_mode == 'REFLECT' else 0} in {mirror_mode} mode: "
                    f"[{before}, {after}] for dimension {i} of size {dim}"
                )
        out.append(None if dim is None else dim + before + after)
    return pairs, tuple(out)


def split_sizes(
    shape: Sequence[Dim], axis: int, num_split: int, size_splits: Sequence[int] | None = None
) -> tuple[int, list[Dim]]:
    """The (normalised) axis and the size of every piece: even pieces for Split, the given
    sizes (one may be -1, the rest) for SplitV."""
    rank = len(shape)
    if rank == 0:
        raise InvalidArgumentError("Can't split scalars")
    axis = _axis(axis, rank, "split_dim")
    dim = shape[axis]
    if size_splits is None:
        if dim is None:
            return axis, [None] * num_split
        if dim % num_split:
            raise InvalidArgumentError(
                f"Number of ways to split should evenly divide the split dimension, but got "
                f"split_dim {axis} (size = {dim}) and num_split {num_split}"
            )
        return axis, [dim // num_split] * num_split
    sizes = list(size_splits)
    if len(sizes) != num_split:
        raise InvalidArgumentError(
            f"Length of size_splits should be equal to num_split ({num_split}), got "
            f"{len(sizes)}: {sizes}"
        )
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1:
        raise InvalidArgumentError(f"size_splits can only have one -1, got {sizes}")
    if any(s < -1 for s in sizes):
        raise InvalidArgumentError(f"size_splits must be >= 0 (or one -1), got {sizes}")
    known = sum(s for s in sizes if s != -1)
    out: list[Dim] = list(sizes)
    if dim is not None:
        if (known > dim) if unknown else (known != dim):
            raise InvalidArgumentError(
                f"can't split axis of size {dim} into pieces of size {sizes}"
            )
        if unknown:
            out[unknown[0]] = dim - known
    elif unknown:
        out[unknown[0]] = None
    return axis, out


def tile_shape(shape: Sequence[Dim], multiples: Sequence[int]) -> Shape:
    if len(multiples) != len(shape):
        raise InvalidArgumentError(
            f"Expected multiples argument to be a vector of length {len(shape)} but got "
            f"length {len(multiples)}"
        )
    for i, m in enumerate(multiples):
        if m < 0:
            raise InvalidArgumentError(f"Expected multiples[{i}] >= 0, but got {m}")
    return tuple(None if d is None else d * m for d, m in zip(shape, multiples, strict=True))


def broadcast_to_shape(shape: Sequence[Dim], target: Sequence[int]) -> Shape:
    """``target`` after checking ``shape`` broadcasts to it (only from left to right)."""
    if any(t < 0 for t in target):
        raise InvalidArgumentError(f"shape {list(target)} has a negative dimension")
    if len(shape) > len(target):
        raise InvalidArgumentError(
            f"Rank of input ({len(shape)}) must be no greater than rank of output shape "
            f"({len(target)})"
        )
    offset = len(target) - len(shape)
    for i, d in enumerate(shape):
        if d is not None and d != 1 and d != target[offset + i]:
            raise InvalidArgumentError(
                f"Unable to broadcast tensor of shape {_shape_text(shape)} to tensor of "
                f"shape {list(target)}"
            )
    return tuple(target)


def _shape_text(shape: Sequence[Dim]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


# -- axes -----------------------------------------------------------------------------------


def squeeze_shape(shape: Sequence[Dim], squeeze_dims: Sequence[int]) -> Shape | None:
    """The squeezed shape; None when it cannot be known (squeezing every 1 of a shape with
    unknown dimensions)."""
    rank = len(shape)
    axes = set()
    for i, d in enumerate(squeeze_dims):
        if not -rank <= d < rank:
            raise InvalidArgumentError(f"squeeze_dims[{i}] = {d} not in [{-rank}, {rank})")
        axes.add(d % rank)
    out: list[Dim] = []
    for i, dim in enumerate(shape):
        if dim is None:
            if i in axes:
                continue
            if not axes:
                return None
        elif dim == 1:
            if i in axes or not axes:
                continue
        elif i in axes:
            raise InvalidArgumentError(
                f"Can not squeeze dim[{i}], expected a dimension of 1, got {dim}"
            )
        out.append(dim)
    return tuple(out)


def expand_dims_axis(rank: int, dim: Any) -> int:
    values = np.asarray(dim).reshape(-1)
    if values.size != 1:
        raise InvalidArgumentError(
            f"'dim' must be a tensor with a single value, got {values.size} values"
        )
    axis = int(values[0])
    if not -rank - 1 <= axis <= rank:
        raise InvalidArgumentError(f"dim {axis} not in the interval [{-rank - 1}, {rank}].")
    return axis + rank + 1 if axis < 0 else axis


def pack_axis(axis: int, rank_after: int) -> int:
    if not -rank_after <= axis < rank_after:
        raise InvalidArgumentError(
            f"Invalid axis: {axis}; must be in [{-rank_after}, {rank_after})"
        )
    return axis % rank_after


def reverse_axes(rank: int, axis: Sequence[int]) -> tuple[int, ...]:
    seen: list[int] = []
    for i, a in enumerate(axis):
        if not -rank <= a < max(rank, 0) or rank == 0:
            raise InvalidArgumentError(f"'axis'[{i}] = {a} is out of valid range [0, {rank - 1}]")
        canonical = a % rank
        if canonical in seen:
            raise InvalidArgumentError(f"axis {canonical} specified more than once.")
        seen.append(canonical)
    return tuple(seen)


def one_hot_axis(axis: int, indices_rank: int) -> int:
    if axis < -1 or axis > indices_rank:
        raise InvalidArgumentError(
            f"Expected axis to be -1 or between [0, {indices_rank}).  But received: {axis}"
        )
    return indices_rank if axis == -1 else axis


def range_size(start: Any, limit: Any, delta: Any) -> int:
    """The number of elements of ``Range``: ``ceil(|limit - start| / |delta|)``, exact for
    integers and in the inputs' float type (numpy scalars) for floats, as TensorFlow."""
    if delta == 0:
        raise InvalidArgumentError("Requires delta != 0")
    if delta > 0 and start > limit:
        raise InvalidArgumentError(f"Requires start <= limit when delta > 0: {start}/{limit}")
    if delta < 0 and start < limit:
        raise InvalidArgumentError(f"Requires start >= limit when delta < 0: {start}/{limit}")
    if isinstance(start, int | np.integer) and isinstance(delta, int | np.integer):
        span, step = abs(int(limit) - int(start)), abs(int(delta))
        return (span + step - 1) // step
    with np.errstate(all="ignore"):  # computed in the inputs' own type, as TensorFlow does
        size = np.ceil(np.abs((limit - start) / delta))
    if not np.isfinite(size):
        raise InvalidArgumentError(f"Requires a finite range, got {start}/{limit}/{delta}")
    return int(size)


# -- gathers and scatters -----------------------------------------------------------------


def gather_shape(
    params: Sequence[Dim], indices: Sequence[Dim], axis: int, batch_dims: int
) -> tuple[int, int, Shape]:
    """GatherV2's normalised axis and batch_dims and its output shape:
    ``params[:axis] + indices[batch_dims:] + params[axis + 1:]``."""
    p_rank, i_rank = len(params), len(indices)
    if p_rank == 0:
        raise InvalidArgumentError("params must be at least 1 dimensional")
    axis = _axis(axis, p_rank, "axis")
    if not -i_rank <= batch_dims <= i_rank:
        raise InvalidArgumentError(
            f"Expected batch_dims in the range [{-i_rank}, {i_rank}], but got {batch_dims}"
        )
    if batch_dims < 0:
        batch_dims += i_rank
    if batch_dims >= p_rank:
        raise InvalidArgumentError(
            f"batch_dims ({batch_dims}) must be less than rank(params) ({p_rank})."
        )
    if batch_dims > axis:
        raise InvalidArgumentError(
            f"batch_dims ({batch_dims}) must be less than or equal to axis ({axis})."
        )
    for i in range(batch_dims):
        if params[i] is not None and indices[i] is not None and params[i] != indices[i]:
            raise InvalidArgumentError(
                f"params.shape[{i}]: {params[i]} should be equal to indices.shape[{i}]: "
                f"{indices[i]}"
            )
    out = (*params[:axis], *indices[batch_dims:], *params[axis + 1 :])
    return axis, batch_dims, tuple(out)


def gather_nd_shape(params: Sequence[Dim], indices: Sequence[Dim]) -> Shape | None:
    """``indices[:-1] + params[indices.shape[-1]:]``; None while the index depth is unknown."""
    if len(indices) == 0:
        raise InvalidArgumentError("indices must be at least a vector")
    if len(params) == 0:
        raise InvalidArgumentError("params must be at least a vector")
    depth = indices[-1]
    if depth is None:
        return None
    if depth > len(params):
        raise InvalidArgumentError(
            f"indices.shape[-1] must be <= params.rank, but saw indices shape: "
            f"{_shape_text(indices)} and params shape: {_shape_text(params)}"
        )
    return (*indices[:-1], *params[depth:])


def scatter_nd_shape(indices: Sequence[Dim], updates: Sequence[Dim], shape: Sequence[int]) -> None:
    """Check ScatterNd's updates against its indices and output shape:
    ``updates.shape == indices.shape[:-1] + shape[indices.shape[-1]:]``."""
    if len(indices) == 0:
        raise InvalidArgumentError("indices must be at least a vector")
    if any(d < 0 for d in shape):
        raise InvalidArgumentError(f"shape {list(shape)} has a negative dimension")
    if len(shape) == 0:
        raise InvalidArgumentError("Output must be at least 1-D")
    if math.prod(shape) == 0 and (_count(indices) or _count(updates)):
        raise InvalidArgumentError("Indices and updates specified for empty output")
    depth = indices[-1]
    if depth is None:
        return
    if depth > len(shape):
        raise InvalidArgumentError(
            f"indices.shape[-1] must be <= shape.rank, but saw indices shape: "
            f"{_shape_text(indices)} and shape: {list(shape)}"
        )
    outer = len(indices) - 1
    expected = (*indices[:-1], *shape[depth:])
    if len(updates) != len(expected) or any(
        u is not None and e is not None and u != e for u, e in zip(updates, expected, strict=True)
    ):
        raise InvalidArgumentError(
            f"updates has shape {_shape_text(updates)}, but must have shape "
            f"{_shape_text(expected)}: dimensions [0, {outer}) of indices "
            f"{_shape_text(indices)} followed by dimensions [{depth}, {len(shape)}) of "
            f"shape {list(shape)}"
        )


def _count(shape: Sequence[Dim]) -> int:
    """The element count, 0 when unknown (as TensorFlow's ``Value`` of an unknown count is
    never positive)."""
    return 0 if any(d is None for d in shape) else math.prod(d or 0 for d in shape)


def index_error(
    indices: Any, bad: np.ndarray[Any, Any], what: str, limit: Sequence[int] | int
) -> InvalidArgumentError:
    """The error of an out-of-range gather/scatter index, naming its position and value as
    TensorFlow's CPU kernels do: ``indices[1,2] = 7 is not in [0, 5)``, or for an index
    vector ``indices[0] = [3, 0] does not index into param shape [2, 2]`` (``what`` is
    "param shape" or "shape"). ``bad`` is a boolean mask over ``indices`` (for index
    vectors, over ``indices.shape[:-1]``)."""
    host = np.asarray(indices)
    position = tuple(int(p) for p in np.argwhere(bad)[0])
    where = "[" + ",".join(str(p) for p in position) + "]"
    if isinstance(limit, int):
        return InvalidArgumentError(f"indices{where} = {host[position]} is not in [0, {limit})")
    value = ", ".join(str(v) for v in host[position].reshape(-1))
    return InvalidArgumentError(
        f"indices{where} = [{value}] does not index into {what} {list(limit)}"
    )


# -- segment reductions -----------------------------------------------------------------------


def segment_start(dtype: Any, kind: str, *, finite: bool) -> Any:
    """What a segment reduction ``kind`` (Sum, Prod, Max, Min) of ``dtype`` (anything
    ``np.dtype`` takes) starts from, and an unsorted op's empty segment holds: 0, 1, or for
    Max (Min) the dtype's lowest (highest) value -- finite for the unsorted ops
    (TensorFlow's numeric_limits::lowest/max), an infinity for the sorted ones (Eigen's
    MaxReducer/MinReducer)."""
    if kind == "Sum":
        return 0
    if kind == "Prod":
        return 1
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        if not finite:
            return -np.inf if kind == "Max" else np.inf
        info: Any = np.finfo(dtype)
    else:
        info = np.iinfo(dtype)
    return info.min if kind == "Max" else info.max


def unsorted_segment_shape(
    data: Sequence[Dim], segment_ids: Sequence[Dim], num_segments: int | None
) -> Shape:
    """UnsortedSegment{Sum,Max,Min,Prod}'s output shape, ``[num_segments] +
    data.shape[segment_ids.rank:]``: segment_ids' shape must be a prefix of data's (one id
    per slice of data), and num_segments is never negative. TensorFlow's kernel checks in
    this order, with these messages."""
    rank = len(segment_ids)
    if rank > len(data) or any(
        a is not None and b is not None and a != b
        for a, b in zip(data[:rank], segment_ids, strict=False)
    ):
        raise InvalidArgumentError(
            f"data.shape = {_shape_text(data)} does not start with segment_ids.shape = "
            f"{_shape_text(segment_ids)}"
        )
    if num_segments is not None and num_segments < 0:
        raise InvalidArgumentError(f"Input num_segments == {num_segments} must not be negative.")
    return (num_segments, *data[rank:])


def segment_shape(data: Sequence[Dim], segment_ids: Sequence[Dim]) -> Shape:
    """Segment{Sum,Mean,Max,Min,Prod}'s output shape with its first dimension unknown (it
    is the last id + 1, a value): data of rank >= 1 and a vector of one id per row."""
    if len(data) == 0:
        raise InvalidArgumentError("input must be at least rank 1")
    if len(segment_ids) != 1:
        raise InvalidArgumentError("segment_ids should be a vector.")
    if segment_ids[0] is not None and data[0] is not None and segment_ids[0] != data[0]:
        raise InvalidArgumentError("segment_ids should be the same size as dimension 0 of input.")
    return (None, *data[1:])


def sorted_segment_rows(segment_ids: Any) -> int:
    """The output rows of a sorted segment reduction (the last id + 1; 0 for no ids), after
    TensorFlow's CPU checks: the last id is >= 0, and, run by run in order, each run's id is
    below the next run's ("not increasing") and within [0, rows). Vectorised: the first
    run that breaks either rule is the one TensorFlow's loop stops at."""
    ids = np.asarray(segment_ids).reshape(-1)
    if ids.size == 0:
        return 0
    rows = int(ids[-1]) + 1
    if rows <= 0:
        raise InvalidArgumentError("segment ids must be >= 0")
    runs = ids[np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])]
    decreasing = np.r_[runs[:-1] > runs[1:], False]
    bad = decreasing | (runs < 0) | (runs >= rows)
    if bad.any():
        k = int(np.argmax(bad))
        if decreasing[k]:
            raise InvalidArgumentError("segment ids are not increasing")
        raise InvalidArgumentError(
            f"Segment id {int(runs[k])} out of range [0, {rows}), possibly because "
            "'segment_ids' input is not sorted."
        )
    return rows


def segment_id_error(segment_ids: Any, num_segments: int) -> InvalidArgumentError | None:
    """The error TensorFlow's CPU gives for the first id >= num_segments (negative ids are
    dropped, not errors), naming its position as ``segment_ids[i,j]``; None if none is."""
    ids = np.asarray(segment_ids)
    above = ids >= num_segments
    if not above.any():
        return None
    flat = int(np.argmax(above.reshape(-1)))
    where = ",".join(str(int(i)) for i in np.unravel_index(flat, ids.shape))
    return InvalidArgumentError(
        f"segment_ids[{where}] = {int(ids.reshape(-1)[flat])} is out of range [0, {num_segments})"
    )


# -- SpaceToBatchND, BatchToSpaceND -----------------------------------------------------------


@dataclass(frozen=True)
class SpaceBatchSpec:
    """A checked SpaceToBatchND (BatchToSpaceND): the block, the (before, after) padding
    (cropping) of each block dimension, and the output shape (None where unknown)."""

    block: tuple[int, ...]
    amounts: tuple[tuple[int, int], ...]
    shape: Shape


def space_batch_spec(
    shape: Sequence[Dim], block_shape: Any, amounts: Any, *, to_batch: bool
) -> SpaceBatchSpec:
    """TensorFlow's checks of SpaceToBatchND (``to_batch``; ``amounts`` its paddings) and
    BatchToSpaceND (``amounts`` its crops), in its kernels' order and with their messages;
    only the block dimensions that do anything (not a block of 1 with no padding, which
    TensorFlow folds into the batch or depth) are checked for sizes."""
    block_array, amount_array = np.asarray(block_shape), np.asarray(amounts)
    what = "paddings" if to_batch else "crops"
    if block_array.ndim != 1:
        raise InvalidArgumentError(f"block_shape rank should be 1 instead of {block_array.ndim}")
    m = block_array.size
    if len(shape) < 1 + m:
        raise InvalidArgumentError(f"input rank should be >= {1 + m} instead of {len(shape)}")
    if amount_array.shape != (m, 2):
        raise InvalidArgumentError(
            f"{what} should have shape [{m}, 2] instead of {_shape_text(amount_array.shape)}"
        )
    block = tuple(int(b) for b in block_array)
    pairs = tuple((int(a), int(b)) for a, b in amount_array.reshape(m, 2))
    if to_batch:
        for i, b in enumerate(block):
            if b < 1:
                raise InvalidArgumentError(
                    f"All values in block_shape must be positive, got value, {b} at index {i}."
                )
    product = math.prod(block)
    if product <= 0:
        raise InvalidArgumentError(f"Product of block sizes must be positive, got {product}")
    batch = shape[0]
    if not to_batch and batch is not None and batch % product:
        raise InvalidArgumentError(
            f"Input batch dimension ({batch}) is not divisible by product of block sizes "
            f"({product})"
        )
    spatial: list[Dim] = []
    for i, (b, (before, after)) in enumerate(zip(block, pairs, strict=True)):
        size = shape[1 + i]
        if b == 1 and before == 0 and after == 0:
            spatial.append(size)
            continue
        if before < 0 or after < 0:
            raise InvalidArgumentError(f"{what.capitalize()} must be non-negative")
        if size is None:
            spatial.append(None)
        elif to_batch:
            padded = size + before + after
            if padded % b:
                raise InvalidArgumentError(
                    f"padded_shape[{i}]={padded} is not divisible by block_shape[{i}]={b}"
                )
            spatial.append(padded // b)
        else:
            cropped = size * b - before - after
            if cropped < 0:
                raise InvalidArgumentError(f"cropped_shape[{i}]={cropped} must be non-negative")
            spatial.append(cropped)
    if to_batch:
        out_batch = None if batch is None else batch * product
    else:
        out_batch = None if batch is None else batch // product
    return SpaceBatchSpec(block, pairs, (out_batch, *spatial, *shape[1 + m :]))


def space_to_batch_layout(
    shape: Sequence[int], spec: SpaceBatchSpec
) -> tuple[list[int], list[int], list[int]]:
    """How SpaceToBatchND moves ``shape``'s elements in TensorFlow's batch layout, for a
    kernel of any array library: (the padded input's shape, that shape split into
    [batch, s1/b1, b1, ..., sM/bM, bM, rest], the transpose to [b1, ..., bM, batch,
    s1/b1, ..., sM/bM, rest]); reshaping the result to ``spec.shape`` ends it."""
    m = len(spec.block)
    sizes = [s + a + b for s, (a, b) in zip(shape[1 : 1 + m], spec.amounts, strict=True)]
    rest = list(shape[1 + m :])
    blocked: list[int] = [shape[0]]
    for size, b in zip(sizes, spec.block, strict=True):
        blocked += [size // b, b]
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)]
    perm += list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
    return [shape[0], *sizes, *rest], blocked + rest, perm


def batch_to_space_layout(
    shape: Sequence[int], spec: SpaceBatchSpec
) -> tuple[list[int], list[int], list[int], tuple[slice, ...]]:
    """BatchToSpaceND's inverse of ``space_to_batch_layout`` for an input of ``shape``:
    (the input split into [b1, ..., bM, batch, s1, ..., sM, rest], the transpose to
    [batch, s1, b1, ..., sM, bM, rest], the joined shape [batch, s1*b1, ..., rest], the
    slices that crop it)."""
    m = len(spec.block)
    batch = shape[0] // math.prod(spec.block)
    spatial, rest = list(shape[1 : 1 + m]), list(shape[1 + m :])
    perm = [m]
    for i in range(m):
        perm += [m + 1 + i, i]
    perm += list(range(2 * m + 1, 2 * m + 1 + len(rest)))
    joined = [batch, *(s * b for s, b in zip(spatial, spec.block, strict=True)), *rest]
    keys = tuple(
        slice(before, joined[1 + i] - after) for i, (before, after) in enumerate(spec.amounts)
    )
    return [*spec.block, batch, *spatial, *rest], perm, joined, (slice(None), *keys)
