"""Shape and indexing kernels with torch (Pad, GatherV2, StridedSlice, Split, Pack, Tile...).

The rules come from ``kernloom.plugin.indexing_checks``, shared with the CPU kernels and
the shape functions. As TensorFlow's GPU kernels, gathers give zeros for out-of-range
indices and ScatterNd skips them (checking would synchronise the device every call).
Selecting and reshaping ops (Slice, StridedSlice with positive strides, Split, Unpack,
Squeeze, ExpandDims) return torch views of their input, as ``Reshape`` does; no torch
kernel writes into its inputs, so a view is never overwritten behind its back.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from kernloom.plugin import KernelDefBuilder, KernelLibrary, OpKernelContext, broadcast_shape
from kernloom.plugin import indexing_checks as ic
from kernloom.plugin import types as t
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import host_input, output, result, tensor_input

__all__ = ["register"]

WHERE_SCALAR = (
    "Where takes a tensor of rank 1 or more (TensorFlow's kernel refuses a scalar); "
    "reshape it to [1]"
)

SCATTER_DEPTH_0 = (
    "Indices and updates specified for empty output shape: indices.shape[-1] is 0 (as "
    "TensorFlow's kernel, ScatterNd takes no index vectors of length 0)"
)

GPU = "GPU"
BACKEND = "torch"
GPU_POLICIES = ("", "DEFAULT", "IGNORE")
"""The bad_indices_policy values the GPU kernels take: ERROR would need every index
checked (a device synchronisation), so such nodes find no GPU kernel and go to the CPU."""
MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
Kernel = Callable[[OpKernelContext], None]
RANGE_TYPES = d.supported((*t.FLOATS, *t.SIGNED_INTEGERS))
"""Range's Tidx types that torch computes with (its uint16/uint32 are storage only)."""


def _ints(ctx: OpKernelContext, index: int, what: str, rank: int | None = 1) -> list[int]:
    return ic.checked(ctx, ic.int_list, host_input(ctx, index), what, rank=rank)


def _scalar(ctx: OpKernelContext, index: int, what: str) -> int:
    return _ints(ctx, index, what, rank=0)[0]


# -- padding --------------------------------------------------------------------------------


def pad(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    pairs, shape = ic.checked(ctx, ic.pad_amounts, tuple(x.shape), host_input(ctx, 1))
    out = output(ctx, 0, ic.known(shape))
    if ctx.num_inputs == 3:
        constant = tensor_input(ctx, 2)
        if constant.dim() != 0:
            raise ctx.fail(f"constant_values must be a scalar, got shape {list(constant.shape)}")
        out.fill_(constant)
    else:
        out.zero_()
    out[tuple(slice(b, b + n) for (b, _), n in zip(pairs, x.shape, strict=True))] = x


def _mirror_index(size: int, before: int, after: int, reflect: bool, device: Any) -> Any:
    """The source position of every output position along one dimension."""
    i = torch.arange(-before, size + after, device=device)
    edge = 0 if reflect else 1
    i = torch.where(i < 0, -i - edge, i)
    return torch.where(i >= size, 2 * size - 2 + edge - i, i)


def mirror_pad(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    mode = ctx.attr("mode")
    pairs, shape = ic.checked(ctx, ic.pad_amounts, tuple(x.shape), host_input(ctx, 1), mode)
    out = output(ctx, 0, ic.known(shape))
    if out.numel() == 0:
        return
    for dim, (before, after) in enumerate(pairs):
        if before or after:
            index = _mirror_index(x.shape[dim], before, after, mode == "REFLECT", x.device)
            x = x.index_select(dim, index)
    out.copy_(x)


# -- gathers and scatters -------------------------------------------------------------------


def gather_v2(ctx: OpKernelContext) -> None:
    params, indices = tensor_input(ctx, 0), tensor_input(ctx, 1)
    axis, batch_dims, shape = ic.checked(
        ctx,
        ic.gather_shape,
        tuple(params.shape),
        tuple(indices.shape),
        _scalar(ctx, 2, "axis"),
        int(ctx.attr("batch_dims")),
    )
    out = output(ctx, 0, ic.known(shape))
    limit = params.shape[axis]
    if out.numel() == 0:
        return
    if limit == 0:
        out.zero_()
        return
    index = indices.long()
    valid = (index >= 0) & (index < limit)
    safe = torch.where(valid, index, 0)
    batch = math.prod(params.shape[:batch_dims])
    outer = math.prod(params.shape[batch_dims:axis])
    flat_params = params.reshape(batch, outer, limit, -1)
    rows = torch.arange(batch, device=params.device).reshape(batch, 1, 1)
    columns = torch.arange(outer, device=params.device).reshape(1, outer, 1)
    gathered = flat_params[rows, columns, safe.reshape(batch, 1, -1)]
    keep = valid.reshape(batch, 1, -1, 1)
    out.view(gathered.shape).copy_(torch.where(keep, gathered, torch.zeros((), dtype=out.dtype)))


def _offsets(indices: torch.Tensor, limits: tuple[int, ...]) -> tuple[Any, Any]:
    """(valid rows, linear offsets with invalid rows at 0) of the index vectors."""
    rows = indices.reshape(math.prod(indices.shape[:-1]), len(limits)).long()
    offsets = torch.zeros(rows.shape[0], dtype=torch.int64, device=indices.device)
    valid = torch.ones(rows.shape[0], dtype=torch.bool, device=indices.device)
    stride = 1
    for k in range(len(limits) - 1, -1, -1):
        column = rows[:, k]
        valid &= (column >= 0) & (column < limits[k])
        offsets += column * stride
        stride *= limits[k]
    return valid, torch.where(valid, offsets, 0)


def gather_nd(ctx: OpKernelContext) -> None:
    params, indices = tensor_input(ctx, 0), tensor_input(ctx, 1)
    shape = ic.checked(ctx, ic.gather_nd_shape, tuple(params.shape), tuple(indices.shape))
    limits = tuple(params.shape[: indices.shape[-1]])
    out = output(ctx, 0, ic.known(shape))
    if out.numel() == 0:
        return
    if math.prod(limits) == 0:
        out.zero_()
        return
    valid, offsets = _offsets(indices, limits)
    gathered = params.reshape(math.prod(limits), -1)[offsets]
    zero = torch.zeros((), dtype=out.dtype)
    out.view(gathered.shape).copy_(torch.where(valid[:, None], gathered, zero))


def scatter_nd(ctx: OpKernelContext) -> None:
    indices, updates = tensor_input(ctx, 0), tensor_input(ctx, 1)
    shape = _ints(ctx, 2, "shape")
    ic.checked(ctx, ic.scatter_nd_shape, tuple(indices.shape), tuple(updates.shape), shape)
    if indices.shape[-1] == 0:
        raise ctx.fail(SCATTER_DEPTH_0)
    limits = tuple(shape[: indices.shape[-1]])
    out = output(ctx, 0, ic.known(shape))
    out.zero_()
    if out.numel() == 0 or math.prod(indices.shape[:-1]) == 0:
        return
    valid, offsets = _offsets(indices, limits)
    zero = torch.zeros((), dtype=out.dtype)
    rows = torch.where(valid[:, None], updates.reshape(offsets.numel(), -1), zero)
    flat = out.view(math.prod(limits), -1)
    if out.dtype == torch.bool:  # logical or: count the true updates per element
        counts = torch.zeros(flat.shape, dtype=torch.int32, device=out.device)
        counts.index_add_(0, offsets, rows.to(torch.int32))
        flat.copy_(counts != 0)
    else:
        flat.index_add_(0, offsets, rows)


# -- slicing ---------------------------------------------------------------------------------


def slice_(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    begin, shape = ic.checked(
        ctx, ic.slice_spec, tuple(x.shape), _ints(ctx, 1, "begin"), _ints(ctx, 2, "size")
    )
    result(ctx, 0, x[tuple(slice(b, b + s) for b, s in zip(begin, ic.known(shape), strict=True))])


def strided_slice(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    spec = ic.checked(
        ctx,
        ic.strided_slice_spec,
        tuple(x.shape),
        _ints(ctx, 1, "begin"),
        _ints(ctx, 2, "end"),
        _ints(ctx, 3, "strides"),
        **{mask: int(ctx.attr(mask)) for mask in MASKS},
    )
    # torch slices only forwards: a negative stride runs forwards over the flipped input.
    flipped = [
        i for i, (s, n) in enumerate(zip(spec.strides, spec.sizes, strict=True)) if n and s < 0
    ]
    source = x.flip(flipped) if flipped else x
    index = []
    for i, (begin, size, stride) in enumerate(
        zip(spec.begins, spec.sizes, spec.strides, strict=True)
    ):
        assert begin is not None and size is not None
        if size == 0:
            index.append(slice(0, 0))
        elif i in flipped:
            start = x.shape[i] - 1 - begin
            index.append(slice(start, start + (size - 1) * -stride + 1, -stride))
        else:
            index.append(slice(begin, begin + (size - 1) * stride + 1, stride))
    result(ctx, 0, source[tuple(index)].reshape(ic.known(spec.final_shape)))


def _split_into(ctx: OpKernelContext, x: torch.Tensor, axis: int, sizes: list[int | None]) -> None:
    start = 0
    for i, size in enumerate(sizes):
        assert size is not None
        result(ctx, i, x.narrow(axis, start, size))
        start += size


def split(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 1)
    axis, sizes = ic.checked(
        ctx,
        ic.split_sizes,
        tuple(x.shape),
        _scalar(ctx, 0, "split_dim"),
        int(ctx.attr("num_split")),
    )
    _split_into(ctx, x, axis, sizes)


def split_v(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    axis, sizes = ic.checked(
        ctx,
        ic.split_sizes,
        tuple(x.shape),
        _scalar(ctx, 2, "split_dim"),
        int(ctx.attr("num_split")),
        _ints(ctx, 1, "size_splits"),
    )
    _split_into(ctx, x, axis, sizes)


def unpack(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    num = int(ctx.attr("num"))
    axis = ic.checked(ctx, ic.pack_axis, int(ctx.attr("axis")), x.dim())
    if x.shape[axis] != num:
        raise ctx.fail(f"Input shape axis {axis} must equal {num}, got shape {list(x.shape)}")
    for i in range(num):
        result(ctx, i, x.select(axis, i))


# -- reshaping ---------------------------------------------------------------------------------


def squeeze(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    shape = ic.checked(ctx, ic.squeeze_shape, tuple(x.shape), list(ctx.attr("squeeze_dims")))
    result(ctx, 0, x.reshape(ic.known(shape)))


def expand_dims(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    axis = ic.checked(ctx, ic.expand_dims_axis, x.dim(), host_input(ctx, 1))
    result(ctx, 0, x.unsqueeze(axis))


def pack(ctx: OpKernelContext) -> None:
    values = [tensor_input(ctx, i) for i in range(ctx.num_inputs)]
    first = tuple(values[0].shape)
    for i, v in enumerate(values):
        if tuple(v.shape) != first:
            raise ctx.fail(
                f"Shapes of all inputs must match: values[0].shape = {list(first)} != "
                f"values[{i}].shape = {list(v.shape)}"
            )
    axis = ic.checked(ctx, ic.pack_axis, int(ctx.attr("axis")), len(first) + 1)
    torch.stack(values, dim=axis, out=output(ctx, 0, (*first[:axis], len(values), *first[axis:])))


def tile(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    multiples = _ints(ctx, 1, "multiples")
    out = output(ctx, 0, ic.known(ic.checked(ctx, ic.tile_shape, tuple(x.shape), multiples)))
    if out.numel() == 0:
        return
    interleaved = [n for pair in zip(multiples, x.shape, strict=True) for n in pair]
    out.view(interleaved).copy_(x.reshape([n for s in x.shape for n in (1, s)]))


def broadcast_to(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    shape = ic.checked(ctx, ic.broadcast_to_shape, tuple(x.shape), _ints(ctx, 1, "shape"))
    output(ctx, 0, ic.known(shape)).copy_(x)


def reverse_v2(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    axes = ic.checked(ctx, ic.reverse_axes, x.dim(), _ints(ctx, 1, "axis"))
    output(ctx, 0, x.shape).copy_(x.flip(axes) if axes else x)


# -- sizes, sequences, selections ---------------------------------------------------------------


def size(ctx: OpKernelContext) -> None:
    ctx.allocate_output(0, ())[...] = math.prod(ctx.input(0).shape)


def rank(ctx: OpKernelContext) -> None:
    ctx.allocate_output(0, ())[...] = len(ctx.input(0).shape)


def range_(ctx: OpKernelContext) -> None:
    values = [host_input(ctx, i) for i in range(3)]
    for name, value in zip(("start", "limit", "delta"), values, strict=True):
        if value.ndim != 0:
            raise ctx.fail(f"{name} must be a scalar, not shape {list(value.shape)}")
    start, limit, delta = (v.reshape(())[()] for v in values)
    n = ic.checked(ctx, ic.range_size, start, limit, delta)
    out = output(ctx, 0, (n,))
    out.copy_(torch.arange(n, device=out.device))
    out.mul_(delta.item()).add_(start.item())


def one_hot(ctx: OpKernelContext) -> None:
    indices = tensor_input(ctx, 0)
    on, off = tensor_input(ctx, 2), tensor_input(ctx, 3)
    depth = _scalar(ctx, 1, "depth")
    if depth < 0:
        raise ctx.fail(f"depth must be non-negative, got: {depth}")
    for name, value in (("on_value", on), ("off_value", off)):
        if value.dim() != 0:
            raise ctx.fail(f"{name} must be a scalar, but got shape {list(value.shape)}")
    axis = ic.checked(ctx, ic.one_hot_axis, int(ctx.attr("axis")), indices.dim())
    shape = (*indices.shape[:axis], depth, *indices.shape[axis:])
    last = output(ctx, 0, shape).movedim(axis, -1)
    last.fill_(off)
    hot = indices.long().unsqueeze(-1) == torch.arange(depth, device=indices.device)
    last.masked_fill_(hot, on)


def where(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    if x.ndim == 0:
        raise ctx.fail(WHERE_SCALAR)
    result(ctx, 0, torch.argwhere(x))


def select_v2(ctx: OpKernelContext) -> None:
    condition, then, otherwise = (tensor_input(ctx, i) for i in range(3))
    shape = broadcast_shape(ctx, condition.shape, then.shape, otherwise.shape)
    output(ctx, 0, shape).copy_(torch.where(condition, then, otherwise))


def stop_gradient(ctx: OpKernelContext) -> None:
    ctx.forward_input_to_output(0, 0)


def unique(ctx: OpKernelContext) -> None:
    """Distinct values in order of first appearance; every NaN is its own value. One
    stable sort: a value starts a group where it differs from its predecessor (NaN
    differs from everything), the group's first index is its first appearance."""
    x = tensor_input(ctx, 0)
    if x.ndim != 1:
        raise ctx.fail(f"unique expects a 1D vector, got shape {list(x.shape)}")
    n = x.shape[0]
    if x.is_complex():  # torch sorts no complex numbers: order by (real, imag) instead
        keys = torch.view_as_real(x)
        order = torch.sort(keys[:, 1], stable=True).indices
        order = order[torch.sort(keys[order, 0], stable=True).indices]
        values = x[order]
    else:
        values, order = torch.sort(x.to(torch.uint8) if x.dtype == torch.bool else x, stable=True)
        values = x[order]
    starts = torch.ones(n, dtype=torch.bool, device=x.device)
    starts[1:] = values[1:] != values[:-1]
    group = torch.cumsum(starts, 0) - 1
    first = order[starts]
    by_appearance = torch.sort(first).indices
    position = torch.empty_like(by_appearance)
    position[by_appearance] = torch.arange(by_appearance.numel(), device=x.device)
    output(ctx, 0, (int(first.numel()),)).copy_(x[first[by_appearance]])
    idx = output(ctx, 1, (n,))
    idx[order] = position[group].to(idx.dtype)


def placeholder_with_default(ctx: OpKernelContext) -> None:
    ctx.forward_input_to_output(0, 0)  # a fed value replaces the node before it runs


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def gpu(op: str, *host: str, types: tuple[str, ...] = ("T",), expensive: bool = True) -> Any:
        spec = KernelDefBuilder(op).device(GPU).backend(BACKEND).host_memory(*host)
        for attr in types:
            spec.type_constraint(attr, RANGE_TYPES if op == "Range" else d.ALL)
        if op in ("GatherNd", "ScatterNd"):
            spec.attr_constraint("bad_indices_policy", list(GPU_POLICIES))
        return lib.kernel(spec, expensive=expensive)

    gpu("Pad", "paddings")(pad)
    gpu("PadV2", "paddings")(pad)
    gpu("MirrorPad", "paddings")(mirror_pad)
    gpu("GatherV2", "axis", types=("Tparams",))(gather_v2)
    gpu("GatherNd", types=("Tparams",))(gather_nd)
    gpu("ScatterNd", "shape")(scatter_nd)
    gpu("Slice", "begin", "size", expensive=False)(slice_)
    gpu("StridedSlice", "begin", "end", "strides")(strided_slice)
    gpu("Split", "split_dim", expensive=False)(split)
    gpu("SplitV", "size_splits", "split_dim", expensive=False)(split_v)
    gpu("Unpack", expensive=False)(unpack)
    gpu("Squeeze", expensive=False)(squeeze)
    gpu("ExpandDims", "dim", expensive=False)(expand_dims)
    gpu("Pack")(pack)
    gpu("Tile", "multiples")(tile)
    gpu("BroadcastTo", "shape")(broadcast_to)
    gpu("ReverseV2", "axis")(reverse_v2)
    gpu("Size", "output", expensive=False)(size)
    gpu("Rank", "output", expensive=False)(rank)
    gpu("Range", "start", "limit", "delta", types=("Tidx",))(range_)
    gpu("OneHot", "depth")(one_hot)
    gpu("Where")(where)
    gpu("SelectV2")(select_v2)
    gpu("StopGradient", expensive=False)(stop_gradient)
    gpu("PlaceholderWithDefault", types=("dtype",), expensive=False)(placeholder_with_default)
    lib.kernel(  # no complex: TensorFlow has no CPU Unique for it
        KernelDefBuilder("Unique")
        .device(GPU)
        .backend(BACKEND)
        .type_constraint("T", tuple(x for x in d.ALL if not x.is_complex))
    )(unique)
