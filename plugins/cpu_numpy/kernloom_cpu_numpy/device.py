"""The numpy CPU device: host memory is its memory, numpy arrays are its buffers."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any, Final, final

import numpy as np

import kernloom.plugin
from kernloom_cpu_numpy.blas_threads import BlasThreads
from kernloom_cpu_numpy.denormals import (
    FLUSH_BITS,
    FLUSH_SUPPORTED,
    UNSUPPORTED_REASON,
    end_flush,
    set_flush_permanently,
    start_flush,
)
from kernloom_cpu_numpy.float_errors import ignore_float_errors
from kernloom_cpu_numpy.threadpool import IntraOpPool

__all__ = ["NumpyCPUDevice", "NumpyCPUDeviceFactory"]

_step_ends: Final = threading.local()
"""Per thread: ``callbacks``, what ``NumpyCPUDevice.at_step_end`` was given during the
step running there (absent or empty: nothing to run)."""


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not every platform has these names
        return 16 << 30


class NumpyCPUDevice(kernloom.plugin.Device):
    """The process's CPU, with an intra-op thread pool kernels can split work over.

    Kernels run with subnormal floats flushed to zero, as TensorFlow's CPU kernels do
    (``kernloom_cpu_numpy.denormals``), unless ``flush_denormals=False``: the flag is set
    on a thread when a step's kernels start running there and the thread's own setting is
    put back when they stop, so user code after ``Session.run`` is not affected; the
    intra-op pool's threads keep it. numpy's BLAS runs a step's products on the
    session's intra-op thread count, put back the same way (``blas_threads``).
    """

    memory_is_host = True

    def __init__(
        self,
        attributes: kernloom.plugin.DeviceAttributes,
        intra_op_threads: int | None,
        *,
        flush_denormals: bool = True,
    ) -> None:
        super().__init__(attributes)
        self.flush_denormals = flush_denormals and FLUSH_SUPPORTED
        """True when kernels see subnormals as zero (asked for, and possible here)."""
        self.intra_op_pool = IntraOpPool(
            intra_op_threads,
            name=f"{attributes.device_type}-intra-op",
            worker_setup=set_flush_permanently if self.flush_denormals else None,
        )
        self._blas = BlasThreads(self.intra_op_pool.num_threads)

    def _allocate(
        self, shape: tuple[int, ...], dtype: kernloom.plugin.DType
    ) -> np.ndarray[Any, Any]:
        return np.empty(shape, dtype=dtype.numpy_dtype)

    @property
    def intra_op_threads(self) -> int:
        return self.intra_op_pool.num_threads

    def copy_from_host(self, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        # Host memory is device memory: no copy. A read-only view makes an accidental
        # in-place write into the caller's array fail loudly instead of corrupting it.
        view = (array if type(array) is np.ndarray else np.asarray(array)).view()
        view.setflags(write=False)
        return view

    def copy_to_host(self, value: Any) -> np.ndarray[Any, Any]:
        return np.asarray(value)

    # -- the array protocol: numpy arrays ----------------------------------------------------
    # (Device's defaults for is_device_value, value_dtype, value_shape and value_nbytes
    # already describe numpy arrays, the host format; the rest is this device's to say.)

    def may_overwrite(self, value: Any) -> bool:
        # It owns its memory (a view's base may be seen by others), is writeable (a
        # caller's read-only feed is not) and contiguous (a fresh output's layout).
        return (
            type(value) is np.ndarray
            and value.base is None
            and value.flags.writeable
            and value.flags.c_contiguous
        )

    def reshape_value(self, value: Any, dims: tuple[int, ...]) -> Any | None:
        return value if value.shape == dims else value.reshape(dims)

    def copy_value(self, value: Any) -> np.ndarray[Any, Any]:
        return np.array(value, copy=True)

    def update_value(self, old: Any, delta: Any, *, subtract: bool = False) -> Any:
        with np.errstate(all="ignore"):  # integers wrap around, as the elementwise kernels do
            return np.subtract(old, delta) if subtract else np.add(old, delta)

    def compute_scope(self) -> contextlib.AbstractContextManager[object]:
        # Like TensorFlow, 1/0 is inf and log(-1) nan: no numpy warnings, set once per run
        # of many kernels rather than per kernel (see float_errors for the cost); like
        # TensorFlow, subnormals flushed to zero (see denormals); and numpy's BLAS on the
        # intra-op thread count (see blas_threads).
        return _StepScope(self.flush_denormals, self._blas)

    def at_step_end(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once, on this thread, when the kernels of the step running
        here leave it: before the thread's own floating-point setting is put back. For a
        kernel library that gives threads of its own the step's setting (the torch
        plugin's OpenMP team, ``kernloom_gpu_torch.kernels._team_fp``) and must give them
        back their own after the step, so that user code around ``Session.run`` keeps
        it. Called outside a step, the callback runs at the end of the next one here."""
        callbacks = getattr(_step_ends, "callbacks", None)
        if callbacks is None:
            callbacks = _step_ends.callbacks = []
        callbacks.append(callback)

    def close(self) -> None:
        self.intra_op_pool.close()


@final
class _StepScope:
    """``ignore_float_errors()``, FTZ/DAZ (when flushing) and the BLAS thread count as one
    context: the flag is two foreign calls per step and thread, made directly (no second
    context object to build and enter)."""

    __slots__ = ("_blas", "_blas_saved", "_errors", "_flush", "_saved")

    def __init__(self, flush: bool, blas: BlasThreads) -> None:
        self._flush = flush
        self._blas = blas

    def __enter__(self) -> None:
        errors = self._errors = ignore_float_errors()
        errors.__enter__()
        try:
            self._saved = start_flush() if self._flush else FLUSH_BITS
            self._blas_saved = self._blas.enter()
        except BaseException:  # (nothing half-set is left on the thread)
            errors.__exit__(None, None, None)
            raise

    def __exit__(self, *exc_info: object) -> None:
        try:
            callbacks = getattr(_step_ends, "callbacks", None)
            while callbacks:  # (at_step_end: first given, first run)
                callbacks.pop(0)()
        finally:
            # The caller's numpy error state first, then its flag and BLAS count: the
            # states are independent, and the first is what user code notices.
            self._errors.__exit__(None, None, None)
            saved = self._saved
            if saved & FLUSH_BITS != FLUSH_BITS:  # a thread that flushes already stays so
                end_flush(saved)
            self._blas.leave(self._blas_saved)


class NumpyCPUDeviceFactory(kernloom.plugin.DeviceFactory):
    """One CPU device per process (TensorFlow's ThreadPoolDeviceFactory)."""

    def list_physical_devices(self) -> list[str]:
        return ["/physical_device:CPU:0"]

    def create_devices(
        self,
        options: kernloom.plugin.DeviceOptions,
        name_prefix: str = kernloom.plugin.LOCAL_PREFIX,
    ) -> list[kernloom.plugin.Device]:
        if kernloom.plugin.device_count_for(options, "CPU", 1) == 0:
            return []
        threads = options.intra_op_threads or os.cpu_count() or 1
        attributes = kernloom.plugin.DeviceAttributes(
            name=kernloom.plugin.full_device_name(name_prefix, "CPU", 0),
            device_type="CPU",
            backend="numpy",
            memory_limit=options.memory_limit.get("CPU", _physical_memory()),
            physical_device_desc=(
                f"numpy {np.__version__}, {threads} intra-op threads, "
                + _subnormals_description(options.flush_denormals)
            ),
        )
        return [NumpyCPUDevice(attributes, threads, flush_denormals=options.flush_denormals)]


def _subnormals_description(asked: bool) -> str:
    if not asked:
        return "IEEE subnormals (flush_denormals=False)"
    if FLUSH_SUPPORTED:
        return "subnormals flushed to zero"
    return f"IEEE subnormals ({UNSUPPORTED_REASON})"
