"""The straight-line schedule compiled to one generated Python function.

The interpreted straight line (``StraightLine``) costs about 0.15 µs a node for its loop
(unpack the entry, read slots, count references, store the result) and 0.10 µs for the
Python call into a kernel's direct entry, on top of the kernel's own work: twice a plain
numpy loop on small tensors. As torch.fx's code generation does, ``CompiledLine`` writes
the schedule out as the source of one function, run once per step, in which every value
slot is a local variable and each elementwise node whose input may be overwritten is one
line calling the kernel's in-place form (``OpKernel.inplace_form``; for numpy the ufunc)
with that input as its ``out``::

    if st.stopped: return
    f0(v3, k5, v3)

(A one-element result is the ufunc's new array instead, ``v3 = f0(v3, k5)``: numpy checks
a one-element ``out`` that is also an input for overlap the slow way.)

Whether a node may do that is decided here, once, not per call: the input it overwrites
is produced earlier in the same program by a kernel that declares an in-place form (whose
outputs are buffers of its own, never views), this node is its only consumer (so it is
not fetched, not fed, not a constant and not read twice), and the static shapes and
dtypes say the result has exactly that input's shape and dtype. A node with a direct
entry of one or two inputs that cannot be proved so -- the first Add of a chain, whose
inputs are the caller's feed and a constant; a node whose input has a second consumer --
calls that entry from the generated code itself, offering the inputs it reads last when
their reference counts say nothing else holds them (the interpreter's rule), ``compute``
when it declines, the output checked. Every other node -- a Reshape, a fused node of
many operands -- runs the node loop's own step (``node_run.run_sync``: its direct entry
or ``compute``, outputs checked, allocations counted) through one call, with the inputs
it reads last taken out of their locals first, so that the forwarding rule holds there
too.

Each node is preceded by the stop check (an attribute read; a step with a deadline runs
a second form of the function that also checks the deadline). An error names the node
as the interpreter's does: the traceback's line in the generated function says which
node failed (a table from line to node, read only on failure). A traced or observed step
never gets here (``Executor.straight_line_for``), nor does a partition with nothing to
write in place (then the interpreter runs it).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import Any, Final, final

import numpy as np

from kernloom.errors import KernelError, KernloomError
from kernloom.framework.device import Device
from kernloom.framework.numpy_elementwise import OUT_BY_KEYWORD
from kernloom.framework.origin import registered_by
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
from kernloom.runtime.straight_line import (
    ARG,
    BINARY,
    CONST,
    RETVAL,
    UNARY,
    StraightLine,
    entry_slots,
)

__all__ = ["CompiledLine", "LineProgram"]

_sources: Final = itertools.count()
"""Numbers the generated functions' file names (``<kernloom line 3>``): a traceback's
frame is matched to its function by that name."""


@final
class _NodeCalls(StepContexts):
    """What the generated code calls for a node it does not write out: the node loop's
    step, on the step's one context where a node needs it (``StepContexts``)."""

    __slots__ = ("items",)

    def __init__(self, view: GraphView, args: RunArgs) -> None:
        super().__init__(view, args)
        self.items = view.items

    def node(self, node: int, given: list[Any], offered: int) -> list[Any]:
        """Run ``node`` on ``given`` (its inputs; one of ``offered``, a bit mask, that
        only the list holds was taken and may be overwritten) and return its outputs."""
        return self.run(self.items[node], given, offered)

    def compute(self, node: int, given: list[Any]) -> Any:
        """``node``'s output through ``compute``, for a node whose direct entry declined."""
        return run_compute(self.get(), self.items[node], given)[0]

    def check(self, node: int, value: Any) -> None:
        """The output check for a direct entry's result whose dtype is not the one
        expected (an error naming the node, unless the dtype is only an equal object)."""
        check_direct(self.get(), self.items[node], value)


@final
class _Function:
    """One generated function and the table from its lines to nodes."""

    __slots__ = ("filename", "function", "line_node")

    def __init__(self, filename: str, function: Callable[..., None], line_node: list[int]):
        self.filename = filename
        self.function = function
        self.line_node = line_node


@final
class CompiledLine:
    """A straight-line schedule as one generated function; immutable, shared by all steps."""

    __slots__ = (
        "_bound",
        "_deadline_form",
        "_form",
        "_needs_frame",
        "_nodes",
        "_targets",
        "in_place",
        "schedule",
        "sequential",
        "view",
    )

    def __init__(
        self,
        schedule: StraightLine,
        nodes: list[tuple[int, list[str]]],
        bound: dict[str, Any],
        in_place: tuple[int, ...],
        needs_frame: bool,
        targets: dict[int, tuple[int, str]],
    ) -> None:
        self.schedule = schedule
        self.view = schedule.view
        self.sequential = schedule.sequential
        self.in_place = in_place
        """The nodes written out as a call of their in-place form (plan structure, for
        explanations and tests)."""
        self._targets = targets
        """Per in-place node: the node whose output it overwrites, and that output's local
        (read from a failed step's frame: ``_broken_promise``)."""
        self._nodes = nodes
        self._bound = bound
        self._needs_frame = needs_frame
        self._form = _generate(nodes, bound, deadline=False)
        self._deadline_form: _Function | None = None  # generated for the first such step

    @classmethod
    def compile(cls, schedule: StraightLine) -> CompiledLine | None:
        """The compiled form of ``schedule``; None when no node of it can be written in
        place (the interpreter then runs it: nothing would be gained)."""
        view = schedule.view
        items = view.items
        program = schedule.program
        slots = [entry_slots(entry) for entry in program]
        producer: dict[int, tuple[int, int]] = {}
        for entry, (_, _, outputs) in zip(program, slots, strict=True):
            for output, slot in outputs:
                producer[slot] = (entry.node, output)
        readers: dict[tuple[int, int], int] = {}
        for item in items:
            for output, _, _ in item.out_edges:
                readers[(item.id, output)] = readers.get((item.id, output), 0) + 1
        names = {slot: f"v{slot}" for slot in producer}
        bound: dict[str, Any] = {}
        form_names: dict[int, str] = {}
        nodes: list[tuple[int, list[str]]] = []
        """Per node in program order: its id and its lines (after its stop check)."""
        in_place: list[int] = []
        targets: dict[int, tuple[int, str]] = {}
        needs_frame = False
        for entry, (inputs, taken, outputs) in zip(program, slots, strict=True):
            node = entry.node
            kind = entry.kind
            if kind == CONST:
                if outputs:
                    name = f"k{node}"
                    bound[name] = entry.a
                    names[outputs[0][1]] = name
                continue
            if kind == ARG:
                needs_frame = True
                lines = [f"{names[outputs[0][1]]} = fa[{entry.a}]"] if outputs else []
                nodes.append((node, lines))
                continue
            if kind == RETVAL:
                needs_frame = True
                lines = [f"fr[{entry.b}] = {names[inputs[0]]}"]
                lines += [f"{names[slot]} = None" for slot in taken]
                nodes.append((node, lines))
                continue
            args = [names[slot] for slot in inputs]
            target = _overwritable(items, producer, readers, inputs, taken, items[node])
            if target is not None:
                form = items[node].kernel.inplace_form
                form_name = form_names.setdefault(id(form), f"f{len(form_names)}")
                bound[form_name] = form
                out_name = names[inputs[target]]
                out = f"out={out_name}" if form in OUT_BY_KEYWORD else out_name
                call = f"{form_name}({', '.join(args)}, {out})"
                one = _one_element(items[node])
                if one is not None and isinstance(form, np.ufunc):
                    # A new one-element result, in the input's local: numpy checks an
                    # ``out`` of one element that is also an input for overlap the slow
                    # way (0.57-0.66 µs a call against 0.21-0.35 for a new array). A 0-d
                    # result comes back a numpy scalar; ``[...]`` makes it an array.
                    call = f"{out_name} = {form_name}({', '.join(args)}){one}"
                others = [names[s] for s in taken if s != inputs[target]]
                # The result is in ``out``'s buffer by the form's contract: its return
                # value is not needed, and the output lives on in the input's local.
                if outputs:
                    names[outputs[0][1]] = out_name
                    lines = [call]
                else:
                    lines = [call, f"{out_name} = None"]
                lines += [f"{other} = None" for other in others]
                in_place.append(node)
                targets[node] = (producer[inputs[target]][0], out_name)
                nodes.append((node, lines))
                continue
            if kind in (UNARY, BINARY):
                direct_name, dtype_name = f"d{node}", f"t{node}"
                bound[direct_name] = entry.direct
                bound[dtype_name] = entry.dtype
                out_name = names[outputs[0][1]] if outputs else "_r"
                offered = [slot in taken for slot in inputs]
                nodes.append((node, _direct_lines(node, args, offered, out_name)))
                continue
            lines = [f"_g = [{', '.join(args)}]"]
            lines += [f"{names[slot]} = None" for slot in taken]
            offered_bits = sum(1 << i for i, slot in enumerate(inputs) if slot in taken)
            if len(outputs) == 1:
                lines.append(
                    f"{names[outputs[0][1]]} = call({node}, _g, {offered_bits})[{outputs[0][0]}]"
                )
            else:
                lines.append(f"_o = call({node}, _g, {offered_bits})")
                lines += [f"{names[slot]} = _o[{output}]" for output, slot in outputs]
                lines.append("_o = None")
            lines.append("_g = None")
            nodes.append((node, lines))
        if not in_place:
            return None
        bound["_rc"] = sys.getrefcount
        return cls(schedule, nodes, bound, tuple(in_place), needs_frame, targets)

    def run(self, args: RunArgs, done: Done) -> None:
        """Run one step of the partition on this thread, then ``done(error)``."""
        done(self.execute(args))

    def execute(self, args: RunArgs) -> BaseException | None:
        """Run one step of the partition on this thread and return its error."""
        frame = args.call_frame
        if frame is None and self._needs_frame:  # outside a session step: the _Arg says why
            return self.schedule.execute(args)
        view = self.view
        device = view.device
        step = args.step
        form = self._form if step.deadline is None else self._with_deadline()
        calls = _NodeCalls(view, args)
        error: BaseException | None = None
        try:
            with device.compute_scope():
                form.function(
                    step,
                    None if frame is None else frame.args,
                    None if frame is None else frame.retvals,
                    calls.node,
                    step.check_deadline,
                    calls.compute,
                    calls.check,
                )
        except BaseException as exc:
            node = _failed_node(form, exc)
            if isinstance(exc, KeyboardInterrupt):
                error = exc  # Ctrl-C: the caller's, wherever it landed (node_error says why)
            elif node < 0:  # not in a node: the device's compute scope failed
                error = KernelError(f"{device.name}: the compute scope: {exc}")
                error.__cause__ = exc
            else:
                error = node_error(view.items[node], device, exc)
                if node in self._targets and not isinstance(exc, KernloomError):
                    error = self._broken_promise(form, node, exc, error)
            step.stop(error)
        return step_error(device, step, error)

    def _broken_promise(
        self, form: _Function, node: int, exc: BaseException, error: BaseException
    ) -> BaseException:
        """For an in-place node that crashed (the error path only): when the buffer it
        wrote into is one its device does not let be overwritten (read-only, a view, not
        its own), the kernel that produced that buffer broke the promise its in-place form
        declares (``OpKernel.inplace_form``: every output a buffer of its own), and the
        error says so, naming that kernel and its plugin; else ``error`` as it is."""
        device = self.view.device
        if type(device).may_overwrite is Device.may_overwrite or not isinstance(error, KernelError):
            return error  # a device that says nothing about its buffers: no verdict
        source, local = self._targets[node]
        value = _local_at(form, exc, local)
        if value is None or device.may_overwrite(value):
            return error
        made_by = self.view.items[source]
        kernel = type(made_by.kernel)
        registered = registered_by(made_by.kernel.origin)
        blamed = KernelError(
            f"{error.message}. It ran in place, writing into the output of node "
            f"{made_by.node.name!r} (op {made_by.node.op}), which the device does not let be "
            f"overwritten (read-only, a view or not a buffer of its own): the fault is kernel "
            f"{kernel.__module__}.{kernel.__qualname__}{registered}, which declares an in-place "
            f"form (OpKernel.inplace_form) and so promises that each of its outputs is a buffer "
            f"of its own, but returned another",
            hint=error.hint,
        )
        blamed.__cause__ = exc
        return blamed

    def _with_deadline(self) -> _Function:
        form = self._deadline_form
        if form is None:  # (two threads may both generate it: either result is right)
            form = self._deadline_form = _generate(self._nodes, self._bound, deadline=True)
        return form


LineProgram = StraightLine | CompiledLine
"""What a step runs a partition on one thread with: the compiled form where there is one."""


def _overwritable(
    items: list[NodeItem],
    producer: dict[int, tuple[int, int]],
    readers: dict[tuple[int, int], int],
    inputs: list[int],
    taken: list[int],
    item: NodeItem,
) -> int | None:
    """Which input of ``item`` its in-place form may write into (its index), or None.

    The input must be produced in this program by a kernel with an in-place form (its
    outputs are its own buffers: fresh, or an input it was allowed to overwrite), read by
    nothing but this node (so it is neither fetched, nor fed, nor a constant, nor read
    twice), and have exactly the static shape and dtype of this node's output (then the
    broadcast result fits it)."""
    form = item.kernel.inplace_form
    if form is None or item.direct is None or item.num_outputs != 1:
        return None
    result = item.node.outputs[0]
    if not result.shape.is_fully_defined():
        return None
    result_dtype = item.signature.output_numpy_dtypes[0]
    for index, slot in enumerate(inputs):
        if slot not in taken or slot not in producer:
            continue
        source, output = producer[slot]
        made_by = items[source]
        if made_by.kernel.inplace_form is None or made_by.direct is None:
            continue
        if readers.get((source, output), 0) != 1:
            continue
        tensor = made_by.node.outputs[output]
        if (
            tensor.shape.is_fully_defined()
            and tensor.shape.as_tuple() == result.shape.as_tuple()
            and made_by.signature.output_numpy_dtypes[output] is result_dtype
        ):
            return index
    return None


def _direct_lines(node: int, args: list[str], offered: list[bool], out: str) -> list[str]:
    """A node's direct entry (``OpKernel.direct``) called from the generated code, as the
    interpreter calls it: ``args`` are its inputs' locals, ``offered`` says which it reads
    last (each taken out of its local first, and offered for reuse when nothing else holds
    it: a reference count of 2, the operand and getrefcount's argument); a declined entry
    runs ``compute`` on the same inputs (in a list only it holds); a result of another
    dtype than the kernel's goes to the output check (``chk``), which explains it."""
    operands = ["_x", "_y"][: len(args)]
    lines = [f"{operand} = {arg}" for operand, arg in zip(operands, args, strict=True)]
    lines += [f"{arg} = None" for arg, take in zip(args, offered, strict=True) if take]
    reuse = " | ".join(
        f"({1 << i} if _rc({operand}) == 2 else 0)"
        for i, (operand, take) in enumerate(zip(operands, offered, strict=True))
        if take
    )
    operand_list = ", ".join(operands)
    cleared = f"{' = '.join(operands)} = None"
    return [
        *lines,
        f"_r = d{node}({reuse or 0}, {operand_list})",
        "if _r is NotImplemented:",
        f"    _g = [{operand_list}]",
        f"    {cleared}",
        f"    _r = comp({node}, _g)",
        "    _g = None",
        "else:",
        f"    {cleared}",
        f"    if getattr(_r, 'dtype', None) is not t{node}: chk({node}, _r)",
        *([f"{out} = _r"] if out != "_r" else []),
        "_r = None",
    ]


def _one_element(item: NodeItem) -> str | None:
    """For a node whose (static) result has exactly one element, what makes the ufunc's
    return value an array: ``"[...]"`` for rank 0 (a numpy scalar otherwise), ``""`` for a
    higher rank; None for a result of any other size."""
    shape = item.node.outputs[0].shape.as_tuple()
    if any(size != 1 for size in shape):
        return None
    return "" if shape else "[...]"


def _generate(
    nodes: list[tuple[int, list[str]]], bound: dict[str, Any], *, deadline: bool
) -> _Function:
    """The function's source, compiled: ``(st, fa, fr, call, cd, comp, chk)`` -- the step,
    the call frame's arguments and results, the node step for nodes not written out, the
    step's deadline check, ``compute`` for a declined direct entry, the output check."""
    filename = f"<kernloom line {next(_sources)}>"
    source = ["def line(st, fa, fr, call, cd, comp, chk):"]
    line_node = [-1, -1]  # (1-based line numbers; line 1 is the def)
    if bound:
        source.append(f"    {', '.join(bound)}, = _bound")
        line_node.append(-1)
    check = ["cd()", "if st.stopped: return"] if deadline else ["if st.stopped: return"]
    for node, lines in nodes:
        for line in (*check, *lines):
            source.append(f"    {line}")
            line_node.append(node)
    namespace: dict[str, Any] = {"_bound": tuple(bound.values())}
    exec(compile("\n".join(source) + "\n", filename, "exec"), namespace)
    return _Function(filename, namespace["line"], line_node)


def _local_at(form: _Function, exc: BaseException, name: str) -> Any:
    """The local ``name`` of ``form``'s frame when ``exc`` was raised there; None if none."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == form.filename:
            return tb.tb_frame.f_locals.get(name)
        tb = tb.tb_next
    return None


def _failed_node(form: _Function, exc: BaseException) -> int:
    """The node whose line in ``form`` was running when ``exc`` was raised; -1 if none."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == form.filename:
            line = tb.tb_lineno
            return form.line_node[line] if line < len(form.line_node) else -1
        tb = tb.tb_next
    return -1
