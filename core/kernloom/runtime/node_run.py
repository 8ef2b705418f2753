"""The node-running steps every executor shares (TensorFlow's ``ExecutorState``'s
``PrepareInputs``, ``ProcessSync``/``ProcessAsync`` and ``ProcessOutputs``), and how a
step's executor ends.

- ``RunArgs``: what one step gives each of its executors.
- ``step_context``: the one ``OpKernelContext`` an executor reuses node after node
  (``OpKernelContext.prepare`` points it at the next node; nothing else sets it up).
- ``run_sync``: one synchronous node -- its direct entry, or ``compute`` on the reused
  context (``run_compute``) -- with its outputs checked: the "compute" and "process
  outputs" steps of every executor's node loop.
- ``StepContexts``: ``run_sync`` for the straight-line schedules, whose context is made
  only when a node's direct entry declines (or its result needs the general check).
- ``start_async``: one asynchronous node, its outputs checked when it calls back.
- ``node_error``/``step_error``/``end_step``: how failures are named and a step ends.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kernloom.errors import (
    InvalidArgumentError,
    KernelArgumentError,
    KernelError,
    KernloomError,
    ResourceExhaustedError,
)
from kernloom.framework.device import Device
from kernloom.framework.op_kernel import AsyncOpKernel, CallFrame, OpKernelContext, reuse_mask
from kernloom.framework.origin import registered_by
from kernloom.framework.resource_mgr import ResourceMgr
from kernloom.runtime.graph_view import GraphView, NodeItem
from kernloom.runtime.step import Step
from kernloom.runtime.step_stats import StepStatsCollector

_getrefcount: Final = sys.getrefcount

__all__ = [
    "Done",
    "NodeOutputsCallback",
    "RunArgs",
    "StepContexts",
    "check_direct",
    "end_step",
    "forwarded",
    "node_error",
    "offered_mask",
    "run_compute",
    "run_sync",
    "start_async",
    "step_context",
    "step_error",
]


NodeOutputsCallback = Callable[[str, Sequence[Any]], None]
Done = Callable[[BaseException | None], None]
AsyncFinished = Callable[[list[Any] | None, BaseException | None], None]
"""``finished(outputs, error)``: exactly one of the two is None."""


@dataclass(slots=True)
class RunArgs:
    """What one step gives each of its executors."""

    step: Step
    rendezvous: Any = None
    call_frame: CallFrame | None = None
    resource_mgr: ResourceMgr = field(default_factory=ResourceMgr)
    stats: StepStatsCollector | None = None
    node_outputs: NodeOutputsCallback | None = None
    executors: int = 1
    """How many executors run this step: with one, nothing is gained by offering its work
    to the pool's threads (a woken worker would only compete for the caller's core)."""


def step_context(view: GraphView, args: RunArgs) -> OpKernelContext:
    """A context for ``args``'s step on ``view``'s device, reused node after node
    (``OpKernelContext.prepare``); it starts pointed at the first node."""
    return OpKernelContext(
        view.items[0].kernel,
        [],
        view.device,
        resource_mgr=args.resource_mgr,
        step=args.step,
        step_id=args.step.step_id,
        rendezvous=args.rendezvous,
        call_frame=args.call_frame,
    )


def run_sync(ctx: OpKernelContext, item: NodeItem, inputs: list[Any], forward: bool) -> list[Any]:
    """Compute and process the outputs of one synchronous node: its direct entry where it
    has one and the entry accepts (no context is prepared for it), else ``compute`` on
    ``ctx`` (``run_compute``). Returns the checked outputs.

    ``forward``: ``inputs`` was taken out of the step's slots, so an input whose only
    reference is that list may be overwritten -- the rule ``OpKernelContext.prepare``
    applies, counted here the same way (the list, the loop variable, getrefcount's
    argument) for the direct entry's ``reuse`` mask."""
    direct = item.direct
    if direct is not None:
        value = direct(reuse_mask(inputs) if forward else 0, *inputs)
        if value is not NotImplemented:
            ctx.forwarded = ()  # (a direct entry's reuse is read off its result: _forwarded)
            try:  # the output check, inline for the one output
                if value.dtype is item.direct_dtype:
                    return [value]
            except AttributeError:  # not an array at all
                pass
            return check_direct(ctx, item, value)
    return run_compute(ctx, item, inputs, forward)


class StepContexts:
    """A step's one ``OpKernelContext`` for a straight-line schedule, made when the first
    node needs it: a node whose direct entry accepts never does, and making the context
    (``step_context``) cost a step of one fused node a microsecond."""

    __slots__ = ("_args", "_ctx", "_view")

    def __init__(self, view: GraphView, args: RunArgs) -> None:
        self._view = view
        self._args = args
        self._ctx: OpKernelContext | None = None

    def get(self) -> OpKernelContext:
        ctx = self._ctx
        if ctx is None:
            ctx = self._ctx = step_context(self._view, self._args)
        return ctx

    def run(self, item: NodeItem, inputs: list[Any], offered: int) -> list[Any]:
        """``run_sync(ctx, item, inputs, True)``, the context made only where the direct
        entry declines (``compute`` runs) or its output fails the dtype check (the
        general check explains it). ``offered``: the bit mask of the inputs the caller
        took out of the step's slots, the only ones that may be overwritten (a fused node
        of a thousand constants has one; counting every input's references cost 16 µs)."""
        direct = item.direct
        if direct is not None:
            value = direct(offered_mask(inputs, offered) if offered else 0, *inputs)
            if value is not NotImplemented:
                try:
                    if value.dtype is item.direct_dtype:
                        return [value]
                except AttributeError:  # not an array at all
                    pass
                return check_direct(self.get(), item, value)
        return run_compute(self.get(), item, inputs, True)


def offered_mask(inputs: list[Any], offered: int) -> int:
    """``reuse_mask`` over the inputs of ``offered`` (a bit mask) only: those whose only
    reference is ``inputs`` (a count of 2: the list, and getrefcount's argument)."""
    reuse = 0
    while offered:
        low = offered & -offered
        if _getrefcount(inputs[low.bit_length() - 1]) == 2:
            reuse |= low
        offered ^= low
    return reuse


def check_direct(ctx: OpKernelContext, item: NodeItem, value: Any) -> list[Any]:
    """A direct entry's result that is not an array of the expected dtype, through the
    general output check on ``ctx`` (which explains it, or accepts a dtype that is only
    an equal object)."""
    outputs = [value]
    del value
    ctx.prepare(item.kernel, [], outputs)
    try:
        return ctx.outputs()
    finally:
        ctx.release()


def run_compute(
    ctx: OpKernelContext, item: NodeItem, inputs: list[Any], forward: bool = True
) -> list[Any]:
    """Run one synchronous node through ``compute`` on ``ctx`` and return its checked
    outputs (``forward`` as for ``run_sync``: ``OpKernelContext.prepare`` applies the
    rule). The context is released afterwards: a reused context must not keep the node's
    values alive, or count as a holder that stops their buffers being forwarded."""
    ctx.prepare(item.kernel, inputs, item.unset_outputs.copy(), forward, item.device_inputs)
    try:
        item.run(ctx)
        return ctx.outputs()
    finally:
        ctx.release()


def forwarded(
    ctx: OpKernelContext, item: NodeItem, inputs: list[Any], outputs: list[Any]
) -> tuple[tuple[int, int], ...]:
    """What step stats report as forwarded: the context's record, or for a direct entry
    (which writes into an input without a context) the input it returned."""
    if ctx.forwarded or item.direct is None:
        return ctx.forwarded
    return tuple((i, 0) for i, x in enumerate(inputs) if x is outputs[0])


def start_async(
    view: GraphView,
    item: NodeItem,
    ctx: OpKernelContext,
    stats: StepStatsCollector | None,
    finished: AsyncFinished,
) -> None:
    """Start an asynchronous node on ``ctx`` (already prepared); ``finished(outputs,
    error)`` is called once -- a kernel that calls back twice is heard once."""
    record = stats.start(item, view.device) if stats is not None else None
    kernel = item.kernel
    assert isinstance(kernel, AsyncOpKernel)
    fired = threading.Event()

    def done() -> None:
        if fired.is_set():
            return
        fired.set()
        error = ctx.error
        outputs: list[Any] | None = None
        if error is None:
            try:
                outputs = ctx.outputs()
            except BaseException as exc:
                error = exc
        if outputs is not None and record is not None:
            record.finish(outputs, ctx.forwarded)
        finished(outputs, error)

    try:
        if view.compute_overridden:
            view.device.compute_async(kernel, ctx, done)
        else:
            kernel.compute_async(ctx, done)
    except BaseException as exc:
        if not fired.is_set():
            fired.set()
            finished(None, exc)


def end_step(device: Device, step: Step, error: BaseException | None, done: Done) -> None:
    """An executor's end of a step: ``done`` with what ``step_error`` says."""
    done(step_error(device, step, error))


def step_error(device: Device, step: Step, error: BaseException | None) -> BaseException | None:
    """Sync the device at the end of an executor's step, and say how the step ended: the
    executor's own error, else the step's (another executor's failure, the deadline, a
    cancellation), else a failed sync."""
    if error is None and step.stopped:
        error = step.error
    try:
        device.sync()
    except Exception as exc:
        error = error or KernelError(f"{device.name}: sync at the end of the step: {exc}")
    return error


def node_error(
    item: NodeItem, device: Device, exc: BaseException, *, where: str = ""
) -> BaseException:
    """The error a failed node reports: a ``KernelError`` naming node, op, device, kernel
    and the plugin that registered it (and ``where``: the loop frame and iteration),
    chained to the original; the original itself when it already says all that, or when
    it is a ``KeyboardInterrupt`` (Ctrl-C is the caller's, not the kernel's failure: it
    must reach them as itself, not as an ``Exception`` that ``except Exception``
    swallows). ``SystemExit`` from a kernel stays a ``KernelError``: a plugin must never
    end the host."""
    if isinstance(exc, KeyboardInterrupt):
        return exc
    if isinstance(exc, KernloomError) and repr(item.node.name) in str(exc) and not where:
        return exc
    # A hint stays a hint (each interface spells its settings), not text in the message.
    text, hint = (exc.message, exc.hint) if isinstance(exc, KernloomError) else (str(exc), None)
    if isinstance(exc, MemoryError):  # a device's limit, or the host out of memory
        wanted = getattr(exc, "_total_size", None)  # numpy's _ArrayMemoryError knows it
        asked = f" ({wanted} bytes)" if isinstance(wanted, int) else ""
        exhausted: BaseException = ResourceExhaustedError(
            f"{item.where}{where} on {device.name} ran out of memory{asked} in kernel "
            f"{_kernel_named(item)}: {text}",
            hint=hint,
        )
        exhausted.__cause__ = exc
        return exhausted
    # A bad argument stays one (``except kl.InvalidArgumentError``) when a loop frame is
    # added to its message; anything else the kernel raised is a crash of its code.
    kind = KernelArgumentError if isinstance(exc, InvalidArgumentError) else KernelError
    named = _named_by(item, exc, text)
    if named is not None:
        # The error names the node already (``ctx.fail``, a broken output contract): the
        # loop frame and the device go into that name, which is not said twice.
        rest = text[len(named) :].removeprefix(f" on {device.name}")
        error = kind(f"{named}{where} on {device.name}{rest}", hint=hint)
    else:
        error = kind(
            f"{item.where}{where} on {device.name} failed in kernel "
            f"{_kernel_named(item)}: {type(exc).__name__}: {text}",
            hint=hint,
        )
    error.__cause__ = exc
    return error


def _kernel_named(item: NodeItem) -> str:
    """The failed kernel, for a message: its class and the plugin that registered it (a
    crash is that plugin's to fix)."""
    registered = registered_by(item.kernel.origin)
    return f"{type(item.kernel).__qualname__}{registered}"


def _named_by(item: NodeItem, exc: BaseException, text: str) -> str | None:
    """How a kernel error's ``text`` names ``item``'s node at its start (``node 'x' (op
    X)``, or with the nodes the optimizer fused it from), or None if it does not."""
    if not isinstance(exc, KernelError):
        return None
    for named in (item.where, item.kernel.signature.where):
        if text.startswith(named):
            return named
    return None
