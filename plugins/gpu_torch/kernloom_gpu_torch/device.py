"""The torch device: buffers are torch tensors on one ``torch.device``.

On CUDA every kernel of the device runs on the device's own stream (entered once per
run of many kernels, through ``compute_scope``); copies to and from the host are issued
on that stream too, so they are ordered after the kernels that produced their data
whatever thread asks for them, and ``sync()`` waits for the stream at the end of a step.
Memory statistics come from torch's caching allocator, which sees every tensor the
kernels create (not only the outputs allocated through the context).

A ``TorchDevice`` bound to torch's CPU is a construction for tests only (the factory
never makes one): it runs every torch kernel through the real executor on machines
without a GPU, copying in and out exactly as a GPU would.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import numpy as np
import torch

import kernloom.plugin as klp
from kernloom.plugin import AllocatorStats
from kernloom_gpu_torch.dtypes import TORCH_DTYPES, kl_dtype, torch_dtype

__all__ = ["TorchDevice", "host_tensor"]


def _accept_read_only_arrays() -> None:
    """Let ``torch.from_numpy`` take read-only arrays without a warning or a copy.

    The CPU device's constants are read-only at their source (the graph owns a frozen
    copy), so no writeable view of them can be made; copying instead cost the MLP of
    ``benchmarks/OPTIMIZER.md`` a 4 MB copy of each weight on every run. torch only warns
    that writing through such a tensor is undefined, and our kernels never write into an
    input. The warning is ``TORCH_WARN_ONCE``: raised once here, where it is ignored, torch
    never raises it again in this process (a user's own ``from_numpy`` of a read-only
    array is not warned either; the plugin's ``tests/test_host_tensor.py`` checks both)."""
    frozen = np.zeros(1, np.float32)
    frozen.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.from_numpy(frozen)


_accept_read_only_arrays()


def host_tensor(array: Any) -> torch.Tensor:
    """A zero-copy torch view of a host array, with its strides (an NCHW array in NHWC
    memory stays so, see ``kernels.onednn``), read-only memory included. Copied only where
    torch has no view: negative strides, or strides that are not whole elements."""
    array = array if isinstance(array, np.ndarray) else np.asarray(array)
    if array.ndim and min(array.strides) < 0:
        return torch.from_numpy(np.ascontiguousarray(array))
    try:
        return torch.from_numpy(array)
    except ValueError:  # strides torch cannot express
        return torch.from_numpy(np.ascontiguousarray(array))


class TorchDevice(klp.Device):
    """One torch device (``cuda:N``; ``cpu`` in tests) as a kernloom device of backend torch."""

    def __init__(self, attributes: klp.DeviceAttributes, torch_device: torch.device) -> None:
        super().__init__(attributes)
        self.torch_device = torch_device
        self.is_cuda = torch_device.type == "cuda"
        self.stream: torch.cuda.Stream | None = (
            torch.cuda.Stream(device=torch_device)  # type: ignore[no-untyped-call]
            if self.is_cuda
            else None
        )

    def _stream_scope(self) -> contextlib.AbstractContextManager[object]:
        if self.stream is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self.stream)

    def compute_scope(self) -> contextlib.AbstractContextManager[object]:
        return self._stream_scope()

    def sync(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()

    # -- memory ------------------------------------------------------------------------

    def _allocate(self, shape: tuple[int, ...], dtype: klp.DType) -> torch.Tensor:
        return torch.empty(shape, dtype=torch_dtype(dtype), device=self.torch_device)

    def holds(self, dtype: klp.DType) -> bool:
        # Not uint16/32/64: torch stores them but implements almost nothing for them, and
        # copying them in is refused (``copy_from_host``). Resource handles are host objects.
        return dtype in TORCH_DTYPES or dtype.numpy_dtype.kind == "O"

    def copy_from_host(self, array: np.ndarray[Any, Any]) -> torch.Tensor:
        host = np.asarray(array)
        dtype = klp.as_dtype(host.dtype)
        if dtype not in TORCH_DTYPES:
            raise klp.InvalidArgumentError(
                f"cannot copy a {dtype.name} array to {self.name}: torch has no usable "
                f"{dtype.name} tensors; place the node that needs it on the CPU "
                f"(kl.device('CPU')) or cast it first"
            )
        with self._stream_scope():
            # Allocated on the device's stream, which then reads it: a block of the
            # default stream's pool, freed while a kernel on ours still read it, could be
            # handed to the next allocation on the default stream (torch's caching
            # allocator orders a block's reuse by the stream it was allocated on).
            out: torch.Tensor = self.allocate(host.shape, dtype)
            out.copy_(host_tensor(host))
        return out

    def copy_to_host(self, value: Any) -> np.ndarray[Any, Any]:
        if not isinstance(value, torch.Tensor):
            return np.asarray(value)  # a host-memory value (a shape, a predicate)
        with self._stream_scope():
            # copy=True: on the CPU-bound test device too, the caller gets its own memory.
            host = value.detach().to("cpu", copy=True)
        return host.resolve_conj().numpy()

    # -- the array protocol: torch tensors (and host arrays, for host-memory outputs) ----

    def is_device_value(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor)

    def value_dtype(self, value: Any) -> klp.DType:
        if isinstance(value, torch.Tensor):
            return kl_dtype(value.dtype)
        return klp.as_dtype(value.dtype)

    def value_shape(self, value: Any) -> klp.TensorShape:
        return klp.TensorShape(tuple(value.shape))

    def value_nbytes(self, value: Any) -> int:
        if isinstance(value, torch.Tensor):
            return int(value.element_size() * value.nelement())
        return int(value.nbytes)

    # may_overwrite stays False (the default): a torch tensor can share its storage with
    # another tensor object without showing it (``detach``, ``from_numpy``), so its
    # reference count does not prove that nothing else sees its memory.

    def copy_value(self, value: Any) -> Any:
        with self._stream_scope():
            return value.clone() if isinstance(value, torch.Tensor) else super().copy_value(value)

    def update_value(self, old: Any, delta: Any, *, subtract: bool = False) -> Any:
        with self._stream_scope():
            return torch.sub(old, delta) if subtract else torch.add(old, delta)

    def copy_from_device(self, source: klp.Device, value: Any) -> Any | None:
        if isinstance(source, TorchDevice) and isinstance(value, torch.Tensor):
            if source.stream is not None and self.stream is not None:
                self.stream.wait_stream(source.stream)
            with self._stream_scope():
                return value.to(self.torch_device, copy=True)
        if source.backend == "cupy" and self.is_cuda:
            source.sync()  # DLPack hands over memory, not the producing stream's order
            with self._stream_scope():
                return torch.utils.dlpack.from_dlpack(value).to(self.torch_device, copy=True)
        return None

    def memory_stats(self) -> AllocatorStats:
        if not self.is_cuda:
            return super().memory_stats()
        stats = torch.cuda.memory_stats(self.torch_device)
        return AllocatorStats(
            num_allocs=int(stats.get("allocation.all.allocated", 0)),
            bytes_in_use=int(stats.get("allocated_bytes.all.current", 0)),
            peak_bytes_in_use=int(stats.get("allocated_bytes.all.peak", 0)),
            # torch does not track its largest request; the context's allocations are ours.
            largest_alloc_size=super().memory_stats().largest_alloc_size,
            bytes_limit=self.attributes.memory_limit,
        )

    def reset_peak_memory(self) -> None:
        super().reset_peak_memory()
        if self.is_cuda:
            torch.cuda.reset_peak_memory_stats(self.torch_device)
