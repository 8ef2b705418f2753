"""Kernels that are the same on every device: ``Const`` and ``Identity`` (they only use the
``Device`` contract), ``_Send``/``_Recv`` (they only talk to the step's rendezvous),
``_Arg``/``_Retval`` (they only talk to the step's call frame) and the control-flow ops
(they only forward values; the executor gives them their meaning).

Every device type gets them without a call from its plugin: when a registry first sees a
device factory for a type, it adds ``device_independent_registrations(type)`` at priority
``DEVICE_INDEPENDENT_PRIORITY`` (-1), so a plugin's own kernel for one of these ops wins.
``register_device_independent_kernels`` remains for a kernel library that wants them at
another priority or under a label.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from kernloom.errors import Hint, Setting
from kernloom.framework.kernel_registry import KernelLibrary, KernelRegistration
from kernloom.framework.op_kernel import (
    DEAD,
    AsyncOpKernel,
    CallFrame,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
)
from kernloom.framework.origin import Origin

__all__ = [
    "DEVICE_INDEPENDENT_PRIORITY",
    "ArgKernel",
    "AssertKernel",
    "ConstKernel",
    "PlaceholderKernel",
    "RecvKernel",
    "RetvalKernel",
    "SendKernel",
    "identity",
    "identity_n",
    "merge",
    "no_op",
    "pass_through",
    "register_control_flow_kernels",
    "register_device_independent_kernels",
    "register_graph_kernels",
    "register_sendrecv_kernels",
    "switch",
]

DEVICE_INDEPENDENT_PRIORITY = -1
"""Below every plugin kernel's default priority (0): a plugin may override any of them."""


class PlaceholderKernel(OpKernel):
    """Runs only when a placeholder was not fed (the session replaces fed ones by ``_Arg``)."""

    is_expensive = False

    def compute(self, ctx: OpKernelContext) -> None:
        error = ctx.fail(
            f"placeholder must be fed a {ctx.attr('dtype')} value of shape {ctx.attr('shape')}."
        )
        error.hint = Hint("Pass {feed}.", feed=Setting("feed", key=ctx.signature.node))
        raise error


def no_op(ctx: OpKernelContext) -> None:
    return None


class ConstKernel(OpKernel):
    """Converts the constant to a device value once, when the kernel is built."""

    is_expensive = False

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._value = ctx.device.copy_from_host(ctx.attr("value"))

    @property
    def value(self) -> Any:
        """The device value every run outputs (the straight-line executor reads it once)."""
        return self._value

    def compute(self, ctx: OpKernelContext) -> None:
        ctx.set_output(0, self._value)


def identity(ctx: OpKernelContext) -> None:
    ctx.forward_input_to_output(0, 0)


def identity_n(ctx: OpKernelContext) -> None:
    """IdentityN: every input forwarded, whatever its dtype."""
    for i in range(ctx.num_inputs):
        ctx.forward_input_to_output(i, i)


def summarize(value: Any, limit: int) -> str:
    """A tensor as TensorFlow's ``Tensor::SummarizeValue(limit)`` prints it in an Assert's
    message (``print_v2=false``): the first ``limit`` elements in row-major order (all of
    them when ``limit`` is negative), nested in brackets per dimension as far as they go
    (``[[1 2][3...]...]`` for ``[[1, 2], [3, 4]]`` and 3), separated by spaces, and ``...``
    when some were left out; a scalar bare, and an empty tensor (or a bool one with
    ``limit`` 0) as nothing. Elements print as TensorFlow's ``StrCat``: bools as 1 and 0,
    float16 and float32 as the shortest of ``%.6g`` and ``%.9g`` that reads back as the
    same float32, float64 of ``%.15g`` and ``%.17g``, NaN as ``nan`` or ``-nan``. Complex
    values, which TensorFlow prints as ``?`` (flat), print here as Python's
    ``complex`` (``(1+2j)``), nested as the rest."""
    array = np.asarray(value)
    count = array.size
    shown = count if limit < 0 else min(limit, count)
    if shown == 0 and array.dtype == np.bool_:
        return ""  # (TensorFlow's SummarizeArray<bool> has no data to read: no "...")
    element = _element_format(array.dtype)
    texts = [element(v) for v in array.reshape(-1)[:shown].tolist()]
    text = " ".join(texts) if array.ndim == 0 else _nested(array.shape, texts)
    return text + ("..." if count > shown else "")


def _nested(shape: tuple[int, ...], texts: list[str]) -> str:
    """TensorFlow's ``PrintOneDim``: ``texts`` (the first elements) in a bracket per
    dimension but the outermost, a dimension left open where they run out."""
    out: list[str] = []
    limit = len(texts)
    last = len(shape) - 1
    index = 0

    def dim(d: int) -> None:
        nonlocal index
        if index >= limit:
            return
        if d == last:
            for i in range(shape[d]):
                if index >= limit:
                    if d != 0:
                        out.append("...")
                    return
                if i > 0:
                    out.append(" ")
                out.append(texts[index])
                index += 1
            return
        for _ in range(shape[d]):
            if index >= limit:
                return  # (no more output: TensorFlow's loop goes on printing nothing)
            out.append("[")
            dim(d + 1)
            out.append("]")

    dim(0)
    return "".join(out)


def _element_format(dtype: np.dtype[Any]) -> Callable[[Any], str]:
    if dtype == np.bool_:
        return lambda v: "1" if v else "0"
    if dtype.kind == "f":
        if dtype.itemsize <= 4:  # float16 prints as the float32 it casts to
            return lambda v: _float_text(v, 6, 9, np.float32)
        return lambda v: _float_text(v, 15, 17, float)
    return str


def _float_text(v: float, digits: int, full: int, kind: Callable[[Any], Any]) -> str:
    """``v`` as tsl's ``FloatToBuffer``/``DoubleToBuffer``: ``%g`` with ``digits``
    significant digits when that reads back as the same value, else with ``full``."""
    if v != v:
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    text = f"{v:.{digits}g}"
    if kind(float(text)) != kind(v):
        text = f"{v:.{full}g}"
    return text


class AssertKernel(OpKernel):
    """Fails the step when its condition is false, showing the data (TensorFlow's
    AssertOp); its inputs are in host memory on every device, so it reads them directly.
    An Assert may carry a ``_message`` attr (an internal attr, as TensorFlow's ``_class``):
    the text TensorFlow would pass as a string data tensor, which kernloom has no dtype
    for (the ONNX importer's If says this way why a branch that did not build failed)."""

    is_expensive = False

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._summarize = int(ctx.attr("summarize"))
        self._message = str(ctx.attrs.get("_message", ""))

    def compute(self, ctx: OpKernelContext) -> None:
        condition = np.asarray(ctx.input(0))
        if condition.ndim != 0:
            raise ctx.fail(
                f"the condition must be a scalar bool, got shape {list(condition.shape)}"
            )
        if bool(condition.reshape(())):
            return
        data = " ".join(f"[{summarize(d, self._summarize)}]" for d in ctx.input_list("data"))
        message = f" {self._message}" if self._message else ""
        raise ctx.fail(f"assertion failed: {data}{message}")


def pass_through(reuse: int, x: Any) -> Any:
    """The direct entry (``OpKernel.direct``) of ``identity``: the input is the output.
    Identity, Enter, Exit and NextIteration run this way without a context -- a loop runs
    three of them every iteration."""
    return x


def host_bool(ctx: OpKernelContext, value: Any) -> bool:
    """A scalar predicate as a Python bool, wherever the device keeps it."""
    if not ctx.device.is_host_value(value):
        value = ctx.device.copy_to_host(value)
    array = np.asarray(value)
    if array.size != 1:
        raise ctx.fail(f"the predicate must be a scalar, got shape {array.shape}")
    return bool(array.reshape(()))


def switch(ctx: OpKernelContext) -> None:
    taken = 1 if host_bool(ctx, ctx.input(1)) else 0
    ctx.forward_input_to_output(0, taken)
    ctx.set_output_dead(1 - taken)


_MERGE_INDICES: list[Any] = []
"""Merge's ``value_index`` outputs, made once each: read-only, and held here, so the
executor never hands one to a kernel to overwrite."""


def _merge_index(index: int) -> Any:
    while len(_MERGE_INDICES) <= index:
        value = np.array(len(_MERGE_INDICES), np.int32)
        value.flags.writeable = False
        _MERGE_INDICES.append(value)
    return _MERGE_INDICES[index]


def merge(ctx: OpKernelContext) -> None:
    for index in range(ctx.num_inputs):
        if not ctx.is_input_dead(index):
            ctx.forward_input_to_output(index, 0)
            ctx.set_output(1, _merge_index(index))
            return
    # Unreachable through the executor (a Merge with no live input does not run).
    raise ctx.fail("every input is dead")


def loop_cond(ctx: OpKernelContext) -> None:
    ctx.set_output(0, np.array(host_bool(ctx, ctx.input(0))))


_BOOL = np.dtype(np.bool_)


def loop_cond_direct(reuse: int, x: Any) -> Any:
    """LoopCond's direct entry: a host bool scalar (what a comparison gives) is already
    the output; anything else goes through ``loop_cond``, which converts or explains."""
    if type(x) is np.ndarray and x.dtype is _BOOL and x.shape == ():
        return x
    return NotImplemented


class _CallFrameKernel(OpKernel):
    """Reads or writes slot ``index`` of the step's call frame."""

    is_expensive = False

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._index = int(ctx.attr("index"))

    @property
    def index(self) -> int:
        """The call-frame slot this node reads or writes."""
        return self._index

    def frame(self, ctx: OpKernelContext) -> CallFrame:
        if ctx.call_frame is None:
            raise ctx.fail(
                f"there is no call frame: {ctx.signature.op_def.name} runs only "
                f"inside a session step"
            )
        return ctx.call_frame


class ArgKernel(_CallFrameKernel):
    """Outputs the fed value; the session already moved it to this device."""

    def compute(self, ctx: OpKernelContext) -> None:
        ctx.set_output(0, self.frame(ctx).args[self._index])


class RetvalKernel(_CallFrameKernel):
    """Stores the fetched value; the session copies it to the host after the step."""

    def compute(self, ctx: OpKernelContext) -> None:
        value = ctx.input(0)
        if value is not DEAD:  # a dead fetch leaves its slot empty; the session says so
            self.frame(ctx).retvals[self._index] = value


def _key_prefix(ctx: OpKernelConstruction) -> str:
    incarnation = int(ctx.attr("send_device_incarnation"))
    return (
        f"{ctx.attr('send_device')};{incarnation:016x};{ctx.attr('recv_device')};"
        f"{ctx.attr('tensor_name')};"
    )


class _Rendezvous(Protocol):
    """What the kernels need of ``kernloom.runtime.rendezvous.Rendezvous`` (the framework
    layer does not import the runtime)."""

    def send(
        self, key: str, value: Any, is_dead: bool = ..., *, host_memory: bool = ...
    ) -> None: ...

    def recv_async(
        self,
        key: str,
        callback: Callable[[BaseException | None, Any, bool], None],
        *,
        dst_device: Any = ...,
        to_host: bool = ...,
    ) -> None: ...


def _rendezvous(ctx: OpKernelContext) -> _Rendezvous:
    if ctx.rendezvous is None:
        raise ctx.fail("there is no rendezvous: _Send and _Recv run only inside a step")
    rendezvous: _Rendezvous = ctx.rendezvous
    return rendezvous


class SendKernel(OpKernel):
    is_expensive = False

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._prefix = _key_prefix(ctx)

    def compute(self, ctx: OpKernelContext) -> None:
        rendezvous = _rendezvous(ctx)
        frame, iteration = ctx.frame_iter
        value = ctx.input(0)
        key = f"{self._prefix}{frame}:{iteration}"
        if value is DEAD:
            rendezvous.send(key, None, is_dead=True)
        else:
            # The device says whether the value is host memory (its memory is, or the value
            # is a host-memory output such as a predicate or a shape): only a value in
            # device memory is copied off the device, and counted, by the receiving side.
            rendezvous.send(key, value, host_memory=ctx.device.is_host_value(value))


class RecvKernel(AsyncOpKernel):
    is_expensive = False

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._prefix = _key_prefix(ctx)
        self._to_host = bool(ctx.attr("recv_into_host_memory"))

    def compute_async(self, ctx: OpKernelContext, done: Callable[[], None]) -> None:
        try:
            rendezvous = _rendezvous(ctx)
        except Exception as exc:
            ctx.set_error(exc)
            done()
            return
        frame, iteration = ctx.frame_iter

        def received(error: BaseException | None, value: object, is_dead: bool) -> None:
            if error is not None:
                ctx.set_error(error)
            elif is_dead:
                ctx.set_output_dead(0)
            else:
                ctx.set_output(0, value)
            done()

        rendezvous.recv_async(
            f"{self._prefix}{frame}:{iteration}",
            received,
            dst_device=ctx.device,
            to_host=self._to_host,
        )


def register_sendrecv_kernels(
    lib: KernelLibrary, device_type: str, *, backend: str | None = None
) -> None:
    lib.kernel("_Send", device=device_type, backend=backend)(SendKernel)
    lib.kernel("_Recv", device=device_type, backend=backend)(RecvKernel)


def register_control_flow_kernels(
    lib: KernelLibrary, device_type: str, *, backend: str | None = None
) -> None:
    """Switch, Merge, Enter, Exit, NextIteration and LoopCond; predicates and Merge's
    value_index live in host memory, as in TensorFlow's GPU kernels."""
    for op, fn, host_memory, direct in (
        ("Switch", switch, ("pred",), None),
        ("Merge", merge, ("value_index",), None),
        ("Enter", identity, (), pass_through),
        ("Exit", identity, (), pass_through),
        ("NextIteration", identity, (), pass_through),
        ("LoopCond", loop_cond, ("input", "output"), loop_cond_direct),
    ):
        lib.kernel(
            op,
            device=device_type,
            backend=backend,
            host_memory=host_memory,
            expensive=False,
            direct=direct,
        )(fn)


def register_graph_kernels(
    lib: KernelLibrary, device_type: str, *, backend: str | None = None
) -> None:
    """Placeholder and NoOp, for a device that runs whole graphs (not only a few ops).

    Kept out of ``register_device_independent_kernels`` so that a device offering only
    some ops (FAKE_ACCEL) does not draw NoOps and unfed placeholders onto itself.
    """
    lib.kernel("Placeholder", device=device_type, backend=backend)(PlaceholderKernel)
    lib.kernel("NoOp", device=device_type, backend=backend, expensive=False)(no_op)


def register_device_independent_kernels(
    lib: KernelLibrary, device_type: str, *, backend: str | None = None
) -> None:
    """Const, Identity, IdentityN, Assert, _Send, _Recv, _Arg, _Retval and the
    control-flow kernels for ``device_type``."""
    lib.kernel("Const", device=device_type, backend=backend)(ConstKernel)
    lib.kernel("_Arg", device=device_type, backend=backend)(ArgKernel)
    lib.kernel("_Retval", device=device_type, backend=backend)(RetvalKernel)
    lib.kernel(
        "Identity", device=device_type, backend=backend, expensive=False, direct=pass_through
    )(identity)
    lib.kernel("IdentityN", device=device_type, backend=backend, expensive=False)(identity_n)
    lib.kernel("Assert", device=device_type, backend=backend, host_memory=("condition", "data"))(
        AssertKernel
    )
    register_sendrecv_kernels(lib, device_type, backend=backend)
    register_control_flow_kernels(lib, device_type, backend=backend)


CORE_ORIGIN = Origin("kernloom", "kernloom")
"""Where the device-independent kernels come from: the core itself."""


def device_independent_registrations(device_type: str) -> list[KernelRegistration]:
    """Const, Identity, NoOp, Placeholder, _Send/_Recv, _Arg/_Retval and the control-flow
    kernels for ``device_type`` (any backend), at ``DEVICE_INDEPENDENT_PRIORITY``."""
    lib = KernelLibrary()
    register_device_independent_kernels(lib, device_type)
    register_graph_kernels(lib, device_type)
    return [
        KernelRegistration(
            kernel_def.model_copy(update={"priority": DEVICE_INDEPENDENT_PRIORITY}),
            kernel_class,
            CORE_ORIGIN,
        )
        for kernel_def, kernel_class in lib.entries
    ]
