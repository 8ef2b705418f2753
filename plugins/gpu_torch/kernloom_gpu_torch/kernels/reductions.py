"""Reductions and orderings with torch: Prod, All, Any, ArgMin, Cumsum, Cumprod, TopKV2.

torch reduces one dimension at a time for prod and reads an empty ``dim`` as "all": the
reduced axes are moved last and flattened, and no axes means a copy, as in TensorFlow.
ArgMin skips NaN (TF's Eigen reduction); TopKV2 uses a stable descending sort, so equal
values keep the lower index first (``torch.topk`` does not promise that).
"""

from __future__ import annotations

import math
from typing import Any

import torch

import kernloom as kl
from kernloom.plugin import KernelLibrary, OpKernelContext, axes_of, reduced_shape, reduction_axes
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import host_input, output, tensor_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "torch"


def _reduction(kind: str) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        x = tensor_input(ctx, 0)
        axes = reduction_axes(ctx, host_input(ctx, 1), x.ndim)
        out = output(ctx, 0, reduced_shape(x.shape, axes, bool(ctx.attr("keep_dims"))))
        kept = out.view(reduced_shape(x.shape, axes, True))
        if not axes and kind != "euclidean":  # (a norm over no axes is |x|)
            kept.copy_(x)
            return
        rest = [i for i in range(x.ndim) if i not in axes]
        count = math.prod(x.shape[a] for a in axes)
        flat = x.permute(*rest, *axes).reshape(*(x.shape[i] for i in rest), count)
        if kind == "prod":
            value = torch.prod(flat, dim=-1, dtype=x.dtype)
        elif kind == "euclidean":  # summed in x's type, as TensorFlow's
            if flat.is_complex():  # |x|^2 as reals (x * conj(x) may keep an imaginary part)
                squares = flat.real * flat.real + flat.imag * flat.imag
                value = torch.sqrt(torch.sum(squares, dim=-1)).to(x.dtype)
            else:
                total = torch.sum(flat * flat, dim=-1, dtype=x.dtype)
                if total.is_floating_point():
                    value = torch.sqrt(total)
                else:  # the root truncated; NaN (a wrapped, negative sum) as TF's cast gives it
                    value = torch.sqrt(total.double()).nan_to_num(nan=float(-(2**31))).long()
        elif kind == "all":
            value = torch.all(flat, dim=-1)
        else:
            value = torch.any(flat, dim=-1)
        kept.copy_(value.reshape(kept.shape))

    return compute


def _scalar_axis(ctx: OpKernelContext, shape: Any, value: Any, op: str) -> int:
    if value.ndim != 0:
        raise ctx.fail(f"axis must be a scalar, got shape {list(value.shape)}")
    if len(shape) == 0:
        raise ctx.fail(f"{op} needs a tensor of rank >= 1")
    (axis,) = axes_of(ctx, value, len(shape), "axis")
    return axis


def arg_min(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    axis = _scalar_axis(ctx, x.shape, host_input(ctx, 1), "ArgMin")
    if x.shape[axis] == 0:
        raise ctx.fail(f"cannot take ArgMin over dimension {axis}, which has size 0")
    if x.is_floating_point():  # NaN and +inf count as the highest finite value (TF's Eigen)
        x = torch.fmin(x, torch.tensor(torch.finfo(x.dtype).max, dtype=x.dtype))
    elif x.dtype == torch.bool:
        x = x.to(torch.uint8)
    out = output(ctx, 0, [n for i, n in enumerate(x.shape) if i != axis])
    out.copy_(torch.argmin(x, dim=axis))  # the first of equal minima


def cumsum(ctx: OpKernelContext) -> None:
    _scan(ctx, "Cumsum", torch.cumsum, torch.zeros_like, plus_zero=True)


def cumprod(ctx: OpKernelContext) -> None:
    _scan(ctx, "Cumprod", torch.cumprod, torch.ones_like, plus_zero=False)


def _scan(ctx: OpKernelContext, op: str, fn: Any, start: Any, *, plus_zero: bool) -> None:
    """Cumsum's and Cumprod's shared walk: ``fn`` along the axis (flipped for ``reverse``);
    ``exclusive`` starts with ``start``'s value (0 or 1), then ``fn`` of all but the last
    element. ``plus_zero``: TF's scan of sums starts at +0, so no sum is -0.0 (torch:
    cumsum([-0.0]) is -0.0); a product's zeros keep their signs in both."""
    x = tensor_input(ctx, 0)
    axis = _scalar_axis(ctx, x.shape, host_input(ctx, 1), op)
    out = output(ctx, 0, x.shape)
    reverse = bool(ctx.attr("reverse"))
    source = torch.flip(x, [axis]) if reverse else x
    if ctx.attr("exclusive"):
        n = source.shape[axis]
        total = start(source)
        if n > 1:
            total.narrow(axis, 1, n - 1).copy_(
                fn(source.narrow(axis, 0, n - 1), dim=axis, dtype=x.dtype)
            )
    else:
        total = fn(source, dim=axis, dtype=x.dtype)
    if plus_zero and (total.is_floating_point() or total.is_complex()):
        total += 0
    out.copy_(torch.flip(total, [axis]) if reverse else total)


def top_k(ctx: OpKernelContext) -> None:
    x, k_value = tensor_input(ctx, 0), host_input(ctx, 1)
    if k_value.ndim != 0:
        raise ctx.fail(f"k must be a scalar, got shape {list(k_value.shape)}")
    k = int(k_value)
    if k < 0:
        raise ctx.fail(f"k must be >= 0, got {k}")
    if x.ndim == 0:
        raise ctx.fail("input must have rank >= 1 (top k runs over the last dimension)")
    if x.shape[-1] < k:
        raise ctx.fail(f"input must have at least k columns: had {x.shape[-1]}, needed {k}")
    shape = (*x.shape[:-1], k)
    values, indices = output(ctx, 0, shape), output(ctx, 1, shape)
    if k == 0 or math.prod(shape) == 0:
        return
    ordered, order = torch.sort(x, dim=-1, descending=True, stable=True)  # NaN first
    values.copy_(ordered[..., :k])
    indices.copy_(order[..., :k])


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def gpu(op: str, types: tuple[Any, ...], **kw: Any) -> Any:
        constraints = {"T": types} if types else None
        return lib.kernel(op, device=GPU, backend=BACKEND, type_constraints=constraints, **kw)

    reduction = {"host_memory": ["reduction_indices"]}
    gpu("Prod", d.NUMBERS, **reduction)(_reduction("prod"))
    gpu(  # (torch has no sums of uint16/32/64)
        "EuclideanNorm",
        tuple(dt for dt in d.NUMBERS if dt.name not in ("uint16", "uint32", "uint64")),
        **reduction,
    )(_reduction("euclidean"))
    gpu("All", (), **reduction)(_reduction("all"))
    gpu("Any", (), **reduction)(_reduction("any"))
    ordered = tuple(t for t in d.ALL if not t.is_complex)  # the reals and bool
    lib.kernel(
        "ArgMin",
        device=GPU,
        backend=BACKEND,
        type_constraints={"T": ordered, "output_type": (kl.int32, kl.int64)},
        host_memory=["dimension"],
    )(arg_min)
    gpu("Cumsum", d.NUMBERS, host_memory=["axis"])(cumsum)
    gpu(  # (torch has no products of uint16/32/64)
        "Cumprod",
        tuple(dt for dt in d.NUMBERS if dt.name not in ("uint16", "uint32", "uint64")),
        host_memory=["axis"],
    )(cumprod)
    gpu("TopKV2", d.REALS, host_memory=["k"])(top_k)
