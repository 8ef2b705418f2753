"""The straight-line executor: a partition run on one thread in an order fixed at build time.

When a step cannot run two of a partition's kernels at once -- it has one inter-op thread,
or the partition's expensive nodes form a chain, as in an MLP -- the general executor's
pending counts, ready stack and lock buy nothing. ``StraightLine`` compiles the partition
once into a flat program, one tuple per node in the order the general executor would run
them (last-in first-out, so a consumer runs right after its producer and values die
early), and a step walks it with one list of values:

- every output that has consumers owns a slot; a node reads its inputs from slots, and
  the node that uses a value last (known at build time) takes it out of its slot, so the
  value is released after its last use, as in the general executor (a constant, which
  its kernel keeps anyway, is never taken: a chain's ``y + c`` takes only ``y``);
- a taken input whose reference count shows nothing else holds it may be overwritten:
  that is the forwarding rule of the general executor (TensorFlow's ``RefCountIsOne``);
- a kernel with a ``direct`` entry (``OpKernel.direct``) and one or two inputs and one
  output is called with its inputs and that mask, without an ``OpKernelContext``; when it
  declines (returns ``NotImplemented``) the node runs through ``compute`` as usual. Every
  other node runs the node loop's step (``node_run.run_sync``) on one reused context,
  which offers a direct entry of more inputs (a fused elementwise node's) the same mask.

It is a schedule, not an executor of its own: ``Executor.straight_line_for`` decides when
a step runs on it (tracing and node-output callbacks off; partitions with asynchronous
kernels or control flow never do), and every node that is not a direct entry, a constant
or a call-frame node -- and a direct entry that declines -- runs through the node loop's
own step (``node_run.run_compute``: the context's ``prepare``, ``compute``, the output
check, the context released). Only the direct entries' call is written out here, as the
loop's specialisation for a static schedule (slots fixed, which input is read last known,
the output dtype to check fixed): that is the dispatch fast path, where one Python call
more per node would cost a fifth of its time (``node_run.run_sync`` is the same step,
unspecialised, which the general loop calls).
"""

from __future__ import annotations

import itertools
import operator
import sys
from typing import Any, Final, NamedTuple, final

from kernloom.errors import KernelError
from kernloom.framework.device_independent_kernels import ArgKernel, ConstKernel, RetvalKernel
from kernloom.framework.op_kernel import OpKernelContext
from kernloom.runtime.graph_view import GraphView, NodeItem
from kernloom.runtime.node_run import (
    Done,
    RunArgs,
    StepContexts,
    check_direct,
    node_error,
    run_compute,
    step_error,
)

__all__ = [
    "ARG",
    "BINARY",
    "CONST",
    "RETVAL",
    "UNARY",
    "Entry",
    "StraightLine",
    "entry_slots",
]

_UNARY: Final = 0
_BINARY: Final = 1
_GENERAL: Final = 2
_CONST: Final = 3
_ARG: Final = 4
_RETVAL: Final = 5
CONST: Final = _CONST
ARG: Final = _ARG
RETVAL: Final = _RETVAL
UNARY: Final = _UNARY
BINARY: Final = _BINARY
"""The entry kinds a second form of the program writes out itself (the rest run a node)."""
_getrefcount: Final = sys.getrefcount
# Bookkeeping a sequential() check may do: nodes x expensive nodes, in bits.
_MAX_REACH_BITS: Final = 1 << 27


class Entry(NamedTuple):
    """One node of the schedule. Unary and binary kinds: ``a`` and ``b`` are the input
    slots, ``take`` has bit i set when this node reads input i last, ``out`` is the
    output's slot (-1: nothing consumes it), ``dtype`` the output's numpy dtype. General
    kind: ``a`` holds every input slot, ``b`` the slots this node reads last, ``take`` the
    bit mask of the input positions whose slots it reads last, ``out``
    (output, slot) pairs, ``direct`` None or, for many inputs, a function of the values
    that gathers them (``_gather``). Const: ``a`` is the constant's device value. _Arg: ``a`` is the
    call-frame index. _Retval: ``a`` is the input slot, ``b`` the call-frame index
    (``take`` as for unary). A kind's unused fields are None, 0 or -1. (A named tuple:
    the loop unpacks it positionally, as fast as a plain one.)"""

    kind: int
    direct: Any
    a: Any
    b: Any
    take: int
    out: Any
    dtype: Any
    node: int


@final
class StraightLine:
    """A partition compiled into one sequence of nodes, shared by all steps; immutable
    but for ``sequential``, which measured costs may turn (``recheck``)."""

    __slots__ = ("_rows", "_seeded", "num_values", "program", "sequential", "view")

    def __init__(
        self, view: GraphView, program: list[Entry], num_values: int, sequential: bool
    ) -> None:
        self.view = view
        self.program = program
        # A constant's value is the same every step and no reader takes it from its slot
        # (``compile``'s ``kept``): it is in the step's first list of values, not a row
        # that stores it. A fused node of 1000 constant operands paid 0.15 µs a row.
        seeded: list[Any] = [None] * num_values
        self._rows = []
        """The program as exact tuples: CPython 3.11 specialises unpacking only for those."""
        for entry in program:
            if entry.kind == _CONST:
                if entry.out >= 0:
                    seeded[entry.out] = entry.a
                continue
            self._rows.append(tuple(entry))
        self._seeded = seeded
        """Every value slot: a constant's value, or None."""
        self.num_values = num_values
        self.sequential = sequential
        """Whether no two expensive nodes can ever run at once (each depends on the one
        before): then even a step with an inter-op pool loses nothing by running the
        partition on one thread."""

    @classmethod
    def compile(cls, view: GraphView) -> StraightLine | None:
        """The program for ``view``; None if the partition needs the general executor (it
        has asynchronous kernels or control flow)."""
        items = view.items
        if view.frame_layout is not None or any(item.is_async for item in items):
            return None
        order = _lifo_order(view)
        if order is None:
            return None
        position = {node: i for i, node in enumerate(order)}
        # One value slot per output that something consumes; who reads it last.
        slot_of: dict[tuple[int, int], int] = {}
        inputs: list[list[int]] = [[-1] * item.num_inputs for item in items]
        last_reader: list[int] = []
        for item in items:
            for output, consumer, input_slot in item.out_edges:
                key = (item.id, output)
                if key not in slot_of:
                    slot_of[key] = len(slot_of)
                    last_reader.append(consumer)
                value = slot_of[key]
                inputs[consumer][input_slot - items[consumer].input_start] = value
                if position[consumer] > position[last_reader[value]]:
                    last_reader[value] = consumer
        program = []
        plain = not view.compute_overridden
        # A constant's kernel keeps its value for every step: taking it out of its slot
        # frees nothing and could never make it overwritable, so its reader leaves it
        # (a chain's ``y + c`` then takes only ``y``: the loop's cheapest case).
        kept = {
            slot_of[(item.id, 0)]
            for item in items
            if plain and type(item.kernel) is ConstKernel and (item.id, 0) in slot_of
        }
        for node in order:
            item = items[node]
            taken = [last_reader[value] == node and value not in kept for value in inputs[node]]
            outputs = tuple(
                (output, slot_of[(node, output)])
                for output in range(len(item.node.outputs))
                if (node, output) in slot_of
            )
            program.append(_entry(item, inputs[node], taken, outputs, plain))
        return cls(view, program, len(slot_of), _sequential(view, order))

    def recheck(self) -> None:
        """Work out ``sequential`` again, from the nodes' marks now (``kernel_costs``:
        measured costs turn them)."""
        self.sequential = _sequential(self.view, [entry.node for entry in self.program])

    def run(self, args: RunArgs, done: Done) -> None:
        """Run one step of the partition on this thread, then ``done(error)``."""
        done(self.execute(args))

    def execute(self, args: RunArgs) -> BaseException | None:
        """Run one step of the partition on this thread and return its error (the
        session's inline path, which has no callback to give)."""
        view = self.view
        items = view.items
        device = view.device
        step = args.step
        values = self._seeded.copy()
        contexts: StepContexts | None = None  # made for the first node that needs one
        frame = args.call_frame
        check_deadline = step.deadline is not None
        getrefcount = _getrefcount
        error: BaseException | None = None
        node = -1
        try:
            with device.compute_scope():
                for kind, direct, a, b, take, out, dtype, node in self._rows:
                    if check_deadline:
                        step.check_deadline()
                    if step.stopped:
                        break
                    if kind <= _BINARY:  # a direct entry: _UNARY or _BINARY
                        if kind == _BINARY:
                            x = values[a]
                            y = values[b]
                            if take == 1:  # a chain: the running value is read last
                                values[a] = None
                                value = direct(1 if getrefcount(x) == 2 else 0, x, y)
                            elif take:
                                reuse = 0
                                if take & 1:
                                    values[a] = None
                                if take & 2:
                                    values[b] = None
                                if take & 1 and getrefcount(x) == 2:
                                    reuse = 1
                                if take & 2 and getrefcount(y) == 2:
                                    reuse |= 2
                                value = direct(reuse, x, y)
                            else:
                                value = direct(0, x, y)
                            given = [x, y] if value is NotImplemented else None
                            del x, y
                        else:
                            x = values[a]
                            reuse = 0
                            if take:
                                values[a] = None
                                if getrefcount(x) == 2:
                                    reuse = 1
                            value = direct(reuse, x)
                            given = [x] if value is NotImplemented else None
                            del x
                        if given is not None:  # the entry declined: compute runs
                            if contexts is None:
                                contexts = StepContexts(view, args)
                            value = _through_context(contexts.get(), items[node], given)[0]
                            given = None
                        else:
                            try:
                                checked = value.dtype is dtype
                            except AttributeError:  # not an array at all
                                checked = False
                            if not checked:  # the general check explains it (or accepts)
                                if contexts is None:
                                    contexts = StepContexts(view, args)
                                check_direct(contexts.get(), items[node], value)
                        if out >= 0:
                            values[out] = value
                        del value
                    elif kind == _GENERAL:
                        given = [values[slot] for slot in a] if direct is None else direct(values)
                        for slot in b:
                            values[slot] = None
                        if contexts is None:
                            contexts = StepContexts(view, args)
                        produced = contexts.run(items[node], given, take)  # (direct or compute)
                        del given
                        for output, slot in out:
                            values[slot] = produced[output]
                        del produced
                    elif kind == _ARG:
                        if frame is None:  # outside a session step: the kernel says why
                            if contexts is None:
                                contexts = StepContexts(view, args)
                            value = _through_context(contexts.get(), items[node], [])[0]
                        else:
                            value = frame.args[a]
                        if out >= 0:
                            values[out] = value
                        del value
                    else:  # _RETVAL
                        if frame is None:
                            if contexts is None:
                                contexts = StepContexts(view, args)
                            _through_context(contexts.get(), items[node], [values[a]])
                        else:
                            frame.retvals[b] = values[a]
                        if take:
                            values[a] = None
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                error = exc  # Ctrl-C: the caller's, wherever it landed (node_error says why)
            elif node < 0:  # before the first node: the device's compute scope failed
                error = KernelError(f"{device.name}: entering the compute scope: {exc}")
                error.__cause__ = exc
            else:
                error = node_error(items[node], device, exc)
            step.stop(error)
        return step_error(device, step, error)


def _entry(
    item: NodeItem,
    inputs: list[int],
    taken: list[bool],
    outputs: tuple[tuple[int, int], ...],
    plain: bool,
) -> Entry:
    """``plain``: the device runs kernels as they are (no ``compute`` override), so the
    call-frame and constant kernels can be done in the program itself."""
    node = item.id
    kernel = item.kernel
    exact = type(kernel)
    out = outputs[0][1] if outputs else -1
    if plain:  # (a device that wraps every kernel's compute must see these run too)
        if isinstance(kernel, ConstKernel) and exact is ConstKernel:
            return Entry(_CONST, None, kernel.value, None, 0, out, None, node)
        if isinstance(kernel, ArgKernel) and exact is ArgKernel:
            return Entry(_ARG, None, kernel.index, None, 0, out, None, node)
        if isinstance(kernel, RetvalKernel) and exact is RetvalKernel:
            take = 1 if taken[0] else 0
            return Entry(_RETVAL, None, inputs[0], kernel.index, take, -1, None, node)
    if item.direct is not None and len(inputs) in (1, 2):  # one output
        take = sum(1 << i for i, t in enumerate(taken) if t)
        dtype = kernel.signature.output_numpy_dtypes[0]
        if len(inputs) == 1:
            return Entry(_UNARY, item.direct, inputs[0], None, take, out, dtype, node)
        return Entry(_BINARY, item.direct, inputs[0], inputs[1], take, out, dtype, node)
    taken_slots = tuple(sorted({v for v, t in zip(inputs, taken, strict=True) if t}))
    gather = _gather(inputs) if len(inputs) > _GATHER_FROM else None
    offered = sum(1 << i for i, t in enumerate(taken) if t)  # (the positions it takes)
    return Entry(_GENERAL, gather, tuple(inputs), taken_slots, offered, outputs, None, node)


_GATHER_FROM: Final = 8
"""From this many inputs a general entry reads them with one ``itemgetter`` (a C loop)
instead of a list comprehension: a fused node of 1000 operands spent 27 µs a run there."""


def _gather(slots: list[int]) -> Any:
    """``values -> [values[s] for s in slots]`` in C, for two or more slots."""
    getter = operator.itemgetter(*slots)

    def gather(values: list[Any]) -> list[Any]:
        return list(getter(values))

    return gather


def entry_slots(entry: Entry) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """One program entry's slots, whatever its kind: the input slots in input order, the
    slots it reads last (takes), and its (output, slot) pairs -- what a second form of
    the program (``CompiledLine``) is generated from."""
    kind, _, a, b, take, out, _, _ = entry
    if kind in (_UNARY, _BINARY):
        inputs = [a] if kind == _UNARY else [a, b]
        taken = [slot for i, slot in enumerate(inputs) if take >> i & 1]
        return inputs, taken, [(0, out)] if out >= 0 else []
    if kind == _GENERAL:
        return list(a), list(b), list(out)
    if kind in (_CONST, _ARG):
        return [], [], [(0, out)] if out >= 0 else []
    return [a], [a] if take else [], []  # _RETVAL


def _through_context(ctx: OpKernelContext, item: NodeItem, given: list[Any]) -> list[Any]:
    """Run a node through the node loop's own step (``run_compute``: ``compute`` on the
    step's context, outputs checked, context released) and return its outputs. ``given``
    holds the inputs: one that nothing but the list holds was taken and may be forwarded."""
    return run_compute(ctx, item, given)


def _lifo_order(view: GraphView) -> list[int] | None:
    """The order the general executor runs the nodes in on one thread: a stack of ready
    nodes, consumers pushed in edge order. None if some node never becomes ready."""
    pending = list(view.pending)
    ready = list(view.roots)
    order: list[int] = []
    items = view.items
    while ready:
        node = ready.pop()
        order.append(node)
        item = items[node]
        for consumer in [edge[1] for edge in item.out_edges] + list(item.control_out):
            pending[consumer] -= 1
            if pending[consumer] == 0:
                ready.append(consumer)
    return order if len(order) == len(items) else None


def _sequential(view: GraphView, order: list[int]) -> bool:
    """Whether each expensive node (in ``order``) depends on the expensive node before it,
    so that no two can run at the same time."""
    items = view.items
    expensive = [node for node in order if items[node].is_expensive]
    if len(expensive) <= 1:
        return True
    if len(items) * len(expensive) > _MAX_REACH_BITS:
        return False  # not worth the bookkeeping: the general executor decides at run time
    bit = {node: 1 << i for i, node in enumerate(expensive)}
    reach = [0] * len(items)
    """The expensive nodes each node depends on, as a bit set."""
    for node in order:
        mine = reach[node] | bit.get(node, 0)
        item = items[node]
        for consumer in [edge[1] for edge in item.out_edges] + list(item.control_out):
            reach[consumer] |= mine
    return all(reach[later] & bit[earlier] for earlier, later in itertools.pairwise(expensive))
