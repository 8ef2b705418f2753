"""Kernels and what they see: ``OpKernelConstruction`` at build time, ``OpKernelContext``
when they run (TensorFlow's op_kernel.h).

Contracts:

- A kernel object is built once per node and device (``OpSegment`` caches it) and
  ``compute`` may then run on several threads at once, for different steps: keep
  per-step state in the context, never on ``self``.
- A synchronous ``OpKernel.compute`` must not block waiting on other kernels; anything
  that waits (a receive, a queue) is an ``AsyncOpKernel`` and calls ``done`` when finished.
- Mark a kernel ``is_expensive = False`` when it does less work than handing it to a
  thread would cost (shape ops, identity); the executor then runs it inline.
- Mark a kernel ``intra_op_parallel = True`` when it spreads its own work over the
  device's intra-op threads (a BLAS or oneDNN call with the session's thread count): where
  the device has more than one (``Device.intra_op_threads``), the executor then runs it
  on the step's own thread rather than next to another such kernel on the inter-op pool,
  where both would claim every core.
- Outputs are set exactly once each (``allocate_output``, ``set_output``,
  ``forward_input_to_output`` or ``forward_input_or_allocate_output``) with the dtype the
  op declares; the context checks this and blames the kernel, naming the node.
"""

from __future__ import annotations

import abc
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol

import numpy as np

from kernloom.dtypes import DType, as_dtype
from kernloom.errors import (
    CancelledError,
    DeviceError,
    KernelArgumentError,
    KernelError,
    short_repr,
)
from kernloom.framework.cancellation import CancellationManager
from kernloom.framework.device import Device
from kernloom.framework.kernel_def import KernelDef
from kernloom.framework.op_def import OpDef
from kernloom.framework.origin import Origin, registered_by
from kernloom.framework.resource_mgr import ResourceMgr
from kernloom.shapes import as_shape

__all__ = [
    "DEAD",
    "AsyncOpKernel",
    "CallFrame",
    "FunctionKernel",
    "KernelSignature",
    "OpKernel",
    "OpKernelConstruction",
    "OpKernelContext",
    "reuse_mask",
]


@dataclass(frozen=True, slots=True)
class KernelSignature:
    """What is fixed about one node's kernel: computed once, read by every context."""

    node: str
    op_def: OpDef
    attrs: Mapping[str, Any]
    kernel_def: KernelDef
    input_dtypes: tuple[DType, ...]
    output_dtypes: tuple[DType, ...]
    input_ranges: Mapping[str, tuple[int, int]]
    output_ranges: Mapping[str, tuple[int, int]]
    host_memory_inputs: frozenset[int]
    host_memory_outputs: frozenset[int]
    output_numpy_dtypes: tuple[Any, ...] = ()
    """The outputs' numpy dtypes, for the checks on the hot path."""
    origin: Origin | None = None
    """The plugin that registered the kernel, for errors that blame it."""

    @classmethod
    def make(
        cls,
        node: str,
        op_def: OpDef,
        attrs: Mapping[str, Any],
        kernel_def: KernelDef,
        origin: Origin | None = None,
    ) -> KernelSignature:
        inputs = op_def.arg_ranges(False, attrs)
        outputs = op_def.arg_ranges(True, attrs)

        def host(ranges: Mapping[str, tuple[int, int]]) -> frozenset[int]:
            return frozenset(
                i
                for name in kernel_def.host_memory_args
                if name in ranges
                for i in range(*ranges[name])
            )

        return cls(
            node=node,
            op_def=op_def,
            attrs=dict(attrs),
            kernel_def=kernel_def,
            input_dtypes=tuple(op_def.input_dtypes(attrs)),
            output_dtypes=tuple(op_def.output_dtypes(attrs)),
            input_ranges=inputs,
            output_ranges=outputs,
            host_memory_inputs=host(inputs),
            host_memory_outputs=host(outputs),
            output_numpy_dtypes=tuple(d.numpy_dtype for d in op_def.output_dtypes(attrs)),
            origin=origin,
        )

    @property
    def where(self) -> str:
        fused = self.attrs.get("_fused_from")  # a node the graph optimizer built
        replaced = f", fused from {', '.join(map(str, fused))}" if fused else ""
        return f"node {self.node!r} (op {self.op_def.name}{replaced})"


class OpKernelConstruction:
    """What a kernel's ``__init__`` may read: attrs, dtypes, the device."""

    def __init__(self, signature: KernelSignature, device: Device) -> None:
        self.signature = signature
        self.device = device

    @property
    def node_name(self) -> str:
        return self.signature.node

    @property
    def op(self) -> str:
        return self.signature.op_def.name

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.signature.attrs

    def attr(self, name: str) -> Any:
        if name not in self.signature.attrs:
            self.signature.op_def.attr(name)  # raises with the list of attrs
        return self.signature.attrs[name]

    @property
    def input_dtypes(self) -> tuple[DType, ...]:
        return self.signature.input_dtypes

    @property
    def output_dtypes(self) -> tuple[DType, ...]:
        return self.signature.output_dtypes

    def allocate_persistent(self, shape: object, dtype: object) -> Any:
        """A buffer that lives as long as the kernel (constants, caches)."""
        return self.device.allocate(shape, dtype)

    def fail(self, message: str) -> KernelArgumentError:
        """``raise ctx.fail("...")``: an error naming this node and op (an
        ``InvalidArgumentError``, as TensorFlow's ``errors::InvalidArgument``)."""
        return KernelArgumentError(f"{self.signature.where}: {message}")


class OpKernel(abc.ABC):
    """A synchronous kernel."""

    is_expensive: ClassVar[bool] = True

    intra_op_parallel: ClassVar[bool] = False
    """Whether the kernel runs its work on the device's intra-op threads (module doc)."""

    direct: Callable[..., Any] | None = None
    """An optional fast entry for kernels with one output (and at least one input), called
    without a context by the executors -- the straight line's own rows for one or two
    inputs, the node step (``run_sync``) for any number (API 1.11; before, only for one or
    two): ``direct(reuse, *inputs)`` returns the output, or ``NotImplemented`` to have
    ``compute`` run instead. ``reuse`` is the bit mask of the inputs nothing else holds
    (bit i: input i), the same rule as ``forward_input_or_allocate_output``'s. It may
    return an input it was given (``Identity``), write into an input whose bit is set (an
    elementwise op in place) or a view, or a new buffer from the device's ``allocate``
    (which counts it, as the context's allocations are counted; no other memory), and must
    give the op's output dtype. A kernel function's entry gets no attrs and no device; a
    kernel class sets ``self.direct`` in ``__init__`` to a method that reads what it kept
    from construction (the numpy ``MatMul``: its transposes and ``ctx.device.allocate``).
    Errors it raises are reported naming the node, as from ``compute``; an entry that
    declines bad inputs lets ``compute`` explain them in its own words."""

    inplace_form: Callable[..., Any] | None = None
    """An optional declaration for elementwise kernels: a plain callable
    ``inplace_form(*inputs, out)`` that writes the op's output into ``out``, one of the
    inputs (for numpy, the ufunc itself: ``np.add``; its return value is ignored). The
    compiled straight line (``kernloom.runtime.compiled_line``) calls it, ``out`` positional
    (a keyword for ``np.maximum`` and ``np.minimum``, which deprecate the position), where
    it has proved at plan time that the input is a buffer nothing else holds and that the
    result has exactly its static shape and dtype; a numpy ufunc is called without ``out``
    where that result has one element (numpy's overlap check makes such an ``out`` 2-3x
    slower than a new array). Declaring it also promises
    that every output of this kernel is a buffer of its own (newly allocated, or an input
    it was allowed to overwrite), never a view or a value kept elsewhere: that is what
    lets its consumer write into it. A kernel with one or two inputs and one output;
    only used where its ``direct`` entry would be."""

    origin: Origin | None = None
    """The plugin that registered this kernel (set by the registry when it builds the kernel),
    for traces and explanations."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        self.signature = ctx.signature

    @property
    def name(self) -> str:
        return self.signature.node

    @abc.abstractmethod
    def compute(self, ctx: OpKernelContext) -> None:
        """Read inputs from ``ctx`` and set every output."""


class AsyncOpKernel(OpKernel):
    """A kernel that finishes later: ``compute_async`` calls ``done`` exactly once, after
    setting its outputs or ``ctx.set_error``."""

    @abc.abstractmethod
    def compute_async(self, ctx: OpKernelContext, done: Callable[[], None]) -> None: ...

    def compute(self, ctx: OpKernelContext) -> None:
        """Run synchronously (the harness, or a caller without an executor): wait for ``done``,
        honouring the step's cancellation, and raise the kernel's error if it set one."""
        finished = threading.Event()
        token = ctx.cancellation.register(finished.set)
        try:
            self.compute_async(ctx, finished.set)
            finished.wait()
        finally:
            if token is not None:
                ctx.cancellation.deregister(token)
        if ctx.error is not None:
            raise ctx.error
        ctx.check_cancelled()


class FunctionKernel(OpKernel):
    """A plain function of the context, as a kernel (the common case)."""

    function: ClassVar[Callable[[OpKernelContext], None]]

    def compute(self, ctx: OpKernelContext) -> None:
        type(self).function(ctx)

    @classmethod
    def wrap(
        cls,
        fn: Callable[[OpKernelContext], None],
        *,
        expensive: bool,
        direct: Callable[..., Any] | None = None,
        inplace_form: Callable[..., Any] | None = None,
        intra_op_parallel: bool = False,
    ) -> type[OpKernel]:
        return type(
            getattr(fn, "__name__", "kernel"),
            (cls,),
            {
                "function": staticmethod(fn),
                "direct": None if direct is None else staticmethod(direct),
                "inplace_form": None if inplace_form is None else staticmethod(inplace_form),
                "is_expensive": expensive,
                "intra_op_parallel": intra_op_parallel,
                "__module__": getattr(fn, "__module__", __name__),
                "__qualname__": getattr(fn, "__qualname__", "kernel"),
            },
        )


_UNSET = object()
_NOTHING: Final[list[Any]] = []
"""What a released context points at: no values (never written to)."""
_getrefcount: Final = sys.getrefcount


def reuse_mask(inputs: list[Any]) -> int:
    """The bit mask (bit i: input i) of the inputs whose only reference is ``inputs``,
    a list the caller took out of the step's slots: their buffers may be overwritten.
    Counted by ``map``, the count is 2 for such a value: the list, and the reference the
    list's iterator hands getrefcount. (In C: a fused node has a thousand inputs, of which
    the one its step took is the only candidate.)"""
    counts = list(map(_getrefcount, inputs))
    mask = 0
    index = -1
    for _ in range(counts.count(2)):
        index = counts.index(2, index + 1)
        mask |= 1 << index
    return mask


class _Dead:
    """The value of a dead tensor: the untaken output of a ``Switch`` and everything computed
    from it. Kernels never see it, except ``Merge`` (which skips dead inputs) and the
    transfer kernels (which carry deadness across devices)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<dead>"

    def __reduce__(self) -> str:
        return "DEAD"


DEAD: Final = _Dead()


class CallFrame:
    """A step's fed values and the slots its fetched values go to (``_Arg``/``_Retval``)."""

    __slots__ = ("args", "retvals")

    def __init__(self, args: Sequence[Any], num_retvals: int) -> None:
        self.args = args if type(args) is list else list(args)
        self.retvals: list[Any] = [None] * num_retvals


class _StepLike(Protocol):
    """What a context needs of the runtime's ``Step`` (the framework does not import it)."""

    @property
    def cancellation(self) -> CancellationManager: ...


class OpKernelContext:
    """One run of one kernel: its inputs, outputs, device and step state.

    ``forwardable`` lists the input indices whose buffers the caller hands over: nothing
    but this node holds that value or any view of its memory (the executor checks the
    buffer's reference count, as TensorFlow's ``RefCountIsOne`` does, so a fed, fetched,
    constant or still-needed value is never handed over). The context trusts it and asks
    the device the rest (``Device.forward_buffer``): whether the buffer type permits
    writing it, and whether its dtype and size match the output's.

    The executor reuses one context for many nodes of a step (``prepare``) so that running
    a node allocates no bookkeeping objects; kernels must not keep the context.
    """

    __slots__ = (
        "_cancellation",
        "_inputs",
        "_outputs",
        "_step",
        "call_frame",
        "device",
        "error",
        "forwardable",
        "forwarded",
        "frame_iter",
        "kernel",
        "rendezvous",
        "resource_mgr",
        "signature",
        "step_id",
    )

    def __init__(
        self,
        kernel: OpKernel,
        inputs: list[Any],
        device: Device,
        *,
        forwardable: Sequence[int] = (),
        resource_mgr: ResourceMgr | None = None,
        cancellation: CancellationManager | None = None,
        step: _StepLike | None = None,
        step_id: int = 0,
        rendezvous: Any = None,
        call_frame: CallFrame | None = None,
    ) -> None:
        """``step``: where ``cancellation`` comes from when it is not given, asked only when
        a kernel uses it (most never do, and a step makes its manager on first use)."""
        self.device = device
        self.resource_mgr = resource_mgr if resource_mgr is not None else ResourceMgr()
        self._cancellation = cancellation
        self._step = step
        self.step_id = step_id
        self.rendezvous = rendezvous
        self.call_frame = call_frame
        self.frame_iter: tuple[str, int] = ("0", 0)
        """The loop frame instance and iteration this run belongs to (rendezvous keys carry
        them, so a loop spanning devices pairs each iteration's sends and receives)."""
        self.error: BaseException | None = None
        """Set by an asynchronous kernel that failed (``set_error``)."""
        outputs = [_UNSET] * len(kernel.signature.output_dtypes)
        self.prepare(kernel, inputs, outputs)
        for index in forwardable:
            self.forwardable |= 1 << index

    def prepare(
        self,
        kernel: OpKernel,
        inputs: list[Any],
        outputs: list[Any],
        forward: bool = False,
        device_inputs: frozenset[int] = frozenset(),
    ) -> None:
        """Point the context at another node of the same step: the one place an executor
        sets a context up (TensorFlow's ``PrepareInputs`` into ``OpKernelContext::Params``).

        ``outputs`` is a fresh list, one unset entry per output, that the kernel fills.
        ``forward``: the executor took ``inputs`` out of its slots, so an input that
        nothing but the list holds -- its reference count says so, as TensorFlow's
        ``RefCountIsOne`` does -- may have its buffer reused for an output. That rule is
        applied here and nowhere else (the straight-line schedule's direct entries apply
        the same count to their two local names). The previous node's lists are replaced
        first, so that the context itself never counts as a holder.

        ``device_inputs``: inputs that arrive in host memory although the kernel reads them
        in the device's (``NodeItem.device_inputs``); they are copied to the device here.
        """
        host_inputs = kernel.signature.host_memory_inputs
        if (host_inputs or device_inputs) and not self.device.memory_is_host:
            # Values in the wrong memory for this kernel are moved here, as TensorFlow's
            # memory-type pass would: a host-memory input produced on this device (a
            # shape Const placed with its consumer) to the host, a host-memory output (a
            # Shape's) to the device for a kernel that reads it there.
            device = self.device
            for i in host_inputs:
                value = inputs[i]
                if value is not DEAD and not device.is_host_value(value):
                    inputs[i] = device.copy_to_host(value)
            for i in device_inputs:
                value = inputs[i]
                if value is not DEAD and device.is_host_value(value):
                    inputs[i] = device.copy_from_host(np.asarray(value))
        self._inputs = inputs
        self._outputs = outputs
        mask = reuse_mask(inputs) if forward else 0
        self.kernel = kernel
        self.signature = kernel.signature
        self.forwardable = mask
        """The bit mask of inputs whose buffers may be reused (bit i: input i); what a
        kernel's direct entry receives as ``reuse``. Set by ``prepare`` only."""
        self.forwarded: tuple[tuple[int, int], ...] = ()
        """(input, output) pairs whose buffer was reused, for step stats and tests."""

    def release(self) -> None:
        """Drop this node's values: a reused context must not keep them alive (or stop
        their buffers from being forwarded) after the node has run."""
        self._inputs = self._outputs = _NOTHING

    # -- inputs ---------------------------------------------------------------------------

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def _index(self, key: int | str, outputs: bool) -> int:
        if isinstance(key, int):
            return key
        ranges = self.signature.output_ranges if outputs else self.signature.input_ranges
        if key not in ranges:
            self.signature.op_def.arg(key)  # raises naming the args
        start, end = ranges[key]
        if end - start != 1:
            raise self.fail(f"argument {key!r} is a list; use input_list({key!r})")
        return start

    def input(self, key: int | str) -> Any:
        if type(key) is int:
            return self._inputs[key]
        return self._inputs[self._index(key, False)]

    def is_input_dead(self, index: int) -> bool:
        """Whether input ``index`` is dead (only ``Merge`` and ``_Send`` ever see one)."""
        return self._inputs[index] is DEAD

    def input_list(self, name: str) -> list[Any]:
        if name not in self.signature.input_ranges:
            self.signature.op_def.arg(name)
        start, end = self.signature.input_ranges[name]
        return self._inputs[start:end]

    def input_dtype(self, key: int | str) -> DType:
        return self.signature.input_dtypes[self._index(key, False)]

    def attr(self, name: str) -> Any:
        if name not in self.signature.attrs:
            self.signature.op_def.attr(name)
        return self.signature.attrs[name]

    def input_is_host_memory(self, index: int) -> bool:
        return index in self.signature.host_memory_inputs

    # -- outputs --------------------------------------------------------------------------

    def output_dtype(self, key: int | str) -> DType:
        return self.signature.output_dtypes[self._index(key, True)]

    def _allocate_for(self, index: int, shape: object, dtype: DType) -> Any:
        if index in self.signature.host_memory_outputs:
            # Host-memory outputs (shapes, indices) live in numpy whatever the device.
            return np.empty(as_shape(shape).as_tuple(), dtype.numpy_dtype)
        return self.device.allocate(shape, dtype)

    def allocate_output(self, key: int | str, shape: object) -> Any:
        index = key if type(key) is int else self._index(key, True)
        if self._outputs[index] is not _UNSET:
            raise self._kernel_fault(f"{self._blame()} set output {index} twice")
        buffer = self._allocate_for(index, shape, self.signature.output_dtypes[index])
        self._outputs[index] = buffer
        return buffer

    def allocate_temp(self, shape: object, dtype: object) -> Any:
        return self.device.allocate(shape, as_dtype(dtype))

    def set_output(self, key: int | str, value: Any) -> None:
        index = self._index(key, True)
        if self._outputs[index] is not _UNSET:
            raise self._kernel_fault(f"{self._blame()} set output {index} twice")
        self._outputs[index] = value

    def set_output_dead(self, key: int | str) -> None:
        """Mark an output dead (``Switch``'s untaken branch, a dead ``_Recv``)."""
        self.set_output(key, DEAD)

    def forward_input_to_output(self, input_key: int | str, output_key: int | str) -> None:
        """Output ``output_key`` *is* input ``input_key`` (shared, not copied: Identity)."""
        self.set_output(output_key, self.input(input_key))

    def forward_input_or_allocate_output(
        self, candidates: Sequence[int], output_key: int | str, shape: object
    ) -> Any:
        """A buffer for the output, reusing a candidate input's memory when allowed.

        An input is reused when the caller marked it forwardable, no view or other holder
        of its memory is alive, and its dtype and element count match the output's.
        The kernel may still read that input: elementwise kernels write in place.
        """
        index = output_key if type(output_key) is int else self._index(output_key, True)
        dims = shape if type(shape) is tuple else tuple(int(d) for d in shape)  # type: ignore[attr-defined]
        forwardable = self.forwardable
        signature = self.signature
        if forwardable and index not in signature.host_memory_outputs:
            dtype = signature.output_dtypes[index]
            forward = self.device.forward_buffer
            for candidate in candidates:
                if not (forwardable >> candidate) & 1:
                    continue
                out = forward(self._inputs[candidate], dtype, dims)
                if out is None:
                    continue
                if self._outputs[index] is not _UNSET:
                    raise self._kernel_fault(f"{self._blame()} set output {index} twice")
                self._outputs[index] = out
                self.forwarded = (*self.forwarded, (candidate, index))
                return out
        return self.allocate_output(index, dims)

    def outputs(self) -> list[Any]:
        """Every output, after checking the kernel set each one with the declared dtype."""
        outputs = self._outputs
        for value, expected in zip(outputs, self.signature.output_numpy_dtypes, strict=True):
            if getattr(value, "dtype", None) is not expected and value is not DEAD:
                return self._checked_outputs()  # the general check (and its errors)
        return outputs

    def _checked_outputs(self) -> list[Any]:
        """The general check, after the fast one failed: every output set, each an array
        the runtime can carry (the device's own buffer or a host array; DEAD for a dead
        branch) of the declared dtype. The device says what a value is (its array
        protocol); an error blames the kernel and the plugin that registered it."""
        device = self.device
        for index, value in enumerate(self._outputs):
            if value is _UNSET:
                raise self._kernel_fault(
                    f"{self._blame()} did not set output {self._output_name(index)}"
                )
            if value is DEAD:
                continue
            expected = self.signature.output_dtypes[index]
            actual = device.output_dtype(value)
            if actual is None:
                raise self._kernel_fault(
                    f"{self._blame()} produced output {self._output_name(index)} as a "
                    f"{type(value).__name__} ({short_repr(value)}), not an array of "
                    f"{device.name} or a host array; the kernel must set a {expected.name} array "
                    f"(ctx.allocate_output or ctx.set_output with the device's array type)"
                )
            if actual is not expected:
                allocator = self._allocator_fault(index, expected, actual)
                if allocator is not None:
                    raise allocator
                raise self._kernel_fault(
                    f"{self._blame()} produced output {index} with dtype {actual.name}, but "
                    f"the op declares {expected.name}"
                )
        return self._outputs

    def _allocator_fault(self, index: int, expected: DType, actual: DType) -> DeviceError | None:
        """For an output of the wrong dtype (the error path only): when the device's
        allocator itself returns another dtype than asked for, the error blaming the
        device's plugin (the kernel that wrote into ``ctx.allocate_output``'s buffer is not
        at fault); else None."""
        device = self.device
        try:
            got = device.output_dtype(device.allocate((1,), expected))
        except Exception:
            return None
        if got is None or got is expected:
            return None
        plugin = str(device.origin) if device.origin is not None else "its plugin"
        return DeviceError(
            f"{self.signature.where} on {device.name}: output {index} came back {actual.name} "
            f"because the device's allocator ({plugin}) returned a {got.name} buffer for a "
            f"{expected.name} allocation. This is a fault of the device plugin (its "
            f"Device._allocate must honour the dtype asked for), not of the kernel or the graph"
        )

    def _output_name(self, index: int) -> str:
        names = [n for n, (s, e) in self.signature.output_ranges.items() if s <= index < e]
        return f"{index} ({names[0] if names else '?'})"

    def _kernel_fault(self, message: str) -> KernelError:
        """The error for a kernel that broke its contract (an output unset, set twice, or
        not an array of the declared dtype): a plain ``KernelError``, the plugin's fault and
        not the caller's bad argument, naming the node, op and device."""
        return KernelError(f"{self.signature.where} on {self.device.name}: {message}")

    def _blame(self) -> str:
        """The kernel and where it came from: its class and registering plugin."""
        kernel = type(self.kernel)
        where = registered_by(self.signature.origin)
        return f"kernel {kernel.__module__}.{kernel.__qualname__}{where}"

    # -- step state -------------------------------------------------------------------------

    @property
    def cancellation(self) -> CancellationManager:
        """The step's cancellation (kernels that block register a wake-up with it)."""
        manager = self._cancellation
        if manager is None:
            step = self._step
            manager = step.cancellation if step is not None else CancellationManager()
            self._cancellation = manager
        return manager

    def set_error(self, error: BaseException) -> None:
        """Record the failure of an asynchronous kernel (before it calls ``done``)."""
        if self.error is None:
            self.error = error

    def check_cancelled(self) -> None:
        """Raise ``CancelledError`` if the step was cancelled; long kernels call this."""
        if self.cancellation.is_cancelled:
            raise CancelledError(
                f"{self.signature.where} was cancelled: {self.cancellation.reason}"
            )

    def fail(self, message: str) -> KernelArgumentError:
        """``raise ctx.fail("...")``: an error naming this node and op (an
        ``InvalidArgumentError``, as TensorFlow's ``errors::InvalidArgument``)."""
        return KernelArgumentError(f"{self.signature.where}: {message}")
