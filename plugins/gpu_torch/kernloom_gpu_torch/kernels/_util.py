"""Moving between kernel contexts and torch tensors.

The same kernel functions run on the torch GPU device (inputs and outputs are torch
tensors) and, labelled ``torch``, on the numpy CPU device (inputs and outputs are numpy
arrays, seen by torch through zero-copy ``torch.from_numpy``). These helpers hide which.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import numpy as np
import torch

from kernloom.plugin import KernelLibrary, OpKernelContext, on_inter_op_worker
from kernloom_gpu_torch.device import host_tensor
from kernloom_gpu_torch.dtypes import torch_dtype
from kernloom_gpu_torch.kernels._team_fp import follow_step

__all__ = [
    "SHAPE_CACHE",
    "ConstantInput",
    "cpu_kernel",
    "host_input",
    "intra_op_threads",
    "is_constant",
    "kept_per_shapes",
    "output",
    "output_dtype",
    "result",
    "tensor",
    "tensor_input",
    "tensor_inputs",
    "use_session_threads",
    "use_threads",
]


def tensor(value: Any) -> torch.Tensor:
    """``value`` as a torch tensor: itself on the torch device; a zero-copy view of a numpy
    array (``host_tensor``) on the CPU device."""
    if isinstance(value, torch.Tensor):
        return value
    return host_tensor(value)


def tensor_input(ctx: OpKernelContext, index: int) -> torch.Tensor:
    return tensor(ctx.input(index))


def tensor_inputs(ctx: OpKernelContext, name: str) -> list[torch.Tensor]:
    return [tensor(v) for v in ctx.input_list(name)]


def host_input(ctx: OpKernelContext, index: int) -> np.ndarray[Any, Any]:
    """A host-memory input (an axis, a shape) as numpy. Usually it arrives in host memory;
    one produced on the same device (a Const, a fed ``_Arg``) is copied off it here."""
    value = ctx.input(index)
    if isinstance(value, torch.Tensor):
        return value.cpu().numpy()
    return np.asarray(value)


def output(ctx: OpKernelContext, index: int, shape: Sequence[int]) -> torch.Tensor:
    """A new output buffer of the device (counted by its allocator), as a tensor."""
    return tensor(ctx.allocate_output(index, tuple(int(d) for d in shape)))


def result(ctx: OpKernelContext, index: int, value: torch.Tensor) -> None:
    """Set an output computed by a torch function that has no ``out=``."""
    if ctx.device.backend == "torch":
        ctx.set_output(index, value)
    else:  # the numpy CPU device: a zero-copy numpy view of torch's result
        ctx.set_output(index, value.numpy())


def output_dtype(ctx: OpKernelContext, index: int) -> torch.dtype:
    return torch_dtype(ctx.signature.output_dtypes[index])


_thread_lock = threading.Lock()


def intra_op_threads(ctx: OpKernelContext) -> int | None:
    """The session's intra-op thread count on this device, where the device says it (the
    numpy CPU device's ``intra_op_pool``); None where it does not."""
    pool = getattr(ctx.device, "intra_op_pool", None)
    threads = getattr(pool, "num_threads", None)
    return threads if isinstance(threads, int) and threads > 0 else None


def use_session_threads(ctx: OpKernelContext) -> None:
    """Make torch's thread count the session's ``intra_op_threads`` before a torch call on
    the caller's thread, and 1 on a session's inter-op worker: torch, MKL and oneDNN share
    an OpenMP team per calling thread, and a worker's team would spin on the cores the
    caller's team needs (``kernloom.plugin.on_inter_op_worker``). Two sessions with
    different counts in one process take turns setting it."""
    use_threads(intra_op_threads(ctx), ctx.device)


def use_threads(threads: int | None, device: Any = None) -> None:
    """``use_session_threads`` for a kernel that has its device's count already (None:
    the device does not say; leave torch's). Where ``device`` flushes subnormals, torch's
    team flushes them too for the rest of the step (``_team_fp.follow_step``), or torch
    runs on the calling thread alone where the team cannot be made to."""
    if threads is not None and on_inter_op_worker():
        threads = 1
    if threads is not None and torch.get_num_threads() != threads:
        with _thread_lock:
            torch.set_num_threads(threads)
    if device is not None and getattr(device, "flush_denormals", False):
        team = torch.get_num_threads()
        if team > 1 and not follow_step(device, team):
            with _thread_lock:
                torch.set_num_threads(1)


def cpu_kernel(lib: KernelLibrary, op: str, kernel: Any, **keywords: Any) -> None:
    """Register ``kernel`` for ``op`` on the numpy CPU device. Every torch call there runs on
    the session's intra-op threads (``use_session_threads``), so the kernel is
    ``intra_op_parallel``: a function is marked here and called after ``use_threads``
    (``_on_session_threads``); a class must say so itself and call ``use_threads`` with
    its device before torch computes."""
    cpu: dict[str, Any] = {"device": "CPU", "backend": "numpy", **keywords}
    if isinstance(kernel, type):
        if not getattr(kernel, "intra_op_parallel", False):
            raise TypeError(f"{kernel.__qualname__} runs torch on the CPU: set intra_op_parallel")
        lib.kernel(op, **cpu)(kernel)
    else:
        lib.kernel(op, intra_op_parallel=True, **cpu)(_on_session_threads(op, kernel))


PRODUCT_OPS: Final = frozenset(
    {"MatMul", "BatchMatMulV2", "Conv2D", "Conv3D", "DepthwiseConv2dNative", "Conv2DBackpropInput"}
)
"""Ops whose torch kernel is a GEMM or a convolution: torch splits them over its threads
from small operands on (a [64, 64] by [64, 64] float32 MatMul ran on two threads here)."""
PARALLEL_PRODUCT: Final = 4096
PARALLEL_ELEMENTWISE: Final = 32768
"""The largest input (elements) from which a product's torch kernel, and any other's
(``at::internal::GRAIN_SIZE``), may use torch's other threads: below it the team is not
given the step's flush mode (``_team_fp``; a wake-up of its threads cost 17 µs at the
median and 24 ms at the 90th percentile on this loaded 2-core machine)."""


def _on_session_threads(op: str, kernel: Callable[[OpKernelContext], None]) -> Any:
    """``kernel`` after ``use_threads``, the team following the step's flush mode where the
    largest input is large enough for torch to use it (the standard table's functions
    serve the GPU device too, where torch's CPU threads are not theirs to set)."""
    parallel_from = PARALLEL_PRODUCT if op in PRODUCT_OPS else PARALLEL_ELEMENTWISE

    def on_cpu(ctx: OpKernelContext) -> None:
        device = ctx.device
        large = getattr(device, "flush_denormals", False) and any(
            getattr(ctx.input(i), "size", 0) >= parallel_from for i in range(ctx.num_inputs)
        )  # (the inputs are looked at only where the team would be given the flag)
        use_threads(intra_op_threads(ctx), device if large else None)
        kernel(ctx)

    on_cpu.__name__ = getattr(kernel, "__name__", "kernel")
    on_cpu.__qualname__ = getattr(kernel, "__qualname__", "kernel")
    on_cpu.__module__ = getattr(kernel, "__module__", __name__)
    on_cpu.__doc__ = kernel.__doc__
    return on_cpu


def is_constant(value: Any) -> bool:
    """Whether ``value`` is an array whose content cannot change while the same object is
    seen again: a read-only numpy array (the CPU device's constants and feeds)."""
    return isinstance(value, np.ndarray) and not value.flags.writeable


class ConstantInput:
    """One input as a torch tensor (contiguous, unless told to keep its strides), kept while
    the same constant array comes back (``is_constant``'s rule): a bias that is a constant
    is converted once (one whose memory is read-only at its source would otherwise be
    copied on every call), and a fused elementwise kernel's batch-norm scale and shift are
    wrapped once. The source and its tensor are one tuple, read and replaced in one step: a
    kernel is shared by concurrent runs."""

    __slots__ = ("_contiguous", "_kept")

    def __init__(self, contiguous: bool = True) -> None:
        self._contiguous = contiguous
        self._kept: tuple[Any, torch.Tensor] | None = None

    def get(self, raw: Any) -> torch.Tensor:
        kept = self._kept
        if kept is not None and kept[0] is raw:
            return kept[1]
        value = tensor(raw)
        if self._contiguous:
            value = value.contiguous()
        if is_constant(raw):
            self._kept = (raw, value)
        return value


SHAPE_CACHE: Final = 64
"""How many input-shape combinations a kernel remembers what it worked out for (a graph
fed many shapes works it out again beyond that)."""

_Kept = TypeVar("_Kept")


def kept_per_shapes(cache: dict[Any, _Kept], key: Any, make: Callable[[], _Kept]) -> _Kept:
    """What ``make`` works out for ``key`` (input shapes, and whatever else it depends on),
    from ``cache`` or made now and kept there while it holds fewer than ``SHAPE_CACHE``."""
    known = cache.get(key)
    if known is None:
        known = make()
        if len(cache) < SHAPE_CACHE:
            cache[key] = known
    return known
