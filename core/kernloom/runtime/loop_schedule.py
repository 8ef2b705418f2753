"""A loop frame's static per-iteration schedule: the straight line's idea applied to frames.

The frame-aware propagator runs a loop as TensorFlow does -- per iteration a slot list,
pending counts, dead flags, a ready stack and a lock -- which costs ~4 µs a node. For a
loop whose every iteration is the same straight line, nothing of that is needed when the
loop runs on one thread: ``LoopSchedule.compile`` works the frame out once, and
``LoopSchedule.run`` runs it as a Python loop:

- the Enter values: loop invariants (``is_constant``) sit in their consumers' slots in
  every iteration; each loop variable's Enter gives its Merge the value of iteration 0,
  and its NextIteration the value of every later one;
- the *condition part* (every node of the frame not downstream of a Switch's true output:
  the Merges' consumers, the predicate, the LoopCond) runs in every iteration, the last
  one included, in a fixed topological order;
- the Switches, written out: the LoopCond's value sends each Switch's input to the body
  (true) or to its Exit (false: the loop ends, the Exits' values go to the outer frame);
- the *body* (everything downstream of a Switch's true output or its control edges) runs
  in a fixed topological order; each NextIteration's value becomes its Merge's value in
  the next iteration.

Merge, Switch and the core's pass-throughs (Identity, Enter, Exit, NextIteration) do not
run: their edges are resolved once into slot numbers. Every other node runs through the
shared node step (``node_run.run_sync``: its direct entry or ``compute`` on the step's
context, outputs checked), with inputs taken out of their slots so that the
reference-count rule forwards buffers as the general executor does (an ``i + 1`` writes
into ``i``; an invariant, held by the schedule's template, never is).

Iterations run one after another: ``parallel_iterations`` allows iterations to overlap,
never requires it, so the results are those of the general executor on one thread.
A nested loop with a schedule of its own is one row of its parent's schedule (its
Enters' slots in, its Exits' values out); ``compile_loops`` compiles inner frames first.
What the schedule does not handle, the frame-aware propagator still runs (``compile``
returns None): a nested frame without a schedule, a Switch or Merge other than the loop's own
(a ``kl.cond`` in the cond or body), asynchronous kernels or Send/Recv, a device that wraps
every kernel, control-flow kernels other than the core's, or a graph whose Exits feed
the same frame's Enters.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import Any, Final, final

import numpy as np

from kernloom.framework.device import Device
from kernloom.framework.device_independent_kernels import (
    ConstKernel,
    loop_cond_direct,
    merge,
    switch,
)
from kernloom.framework.op_kernel import OpKernelContext
from kernloom.graph.graph import BACK_EDGE_OPS
from kernloom.runtime.control_flow import FrameInfo
from kernloom.runtime.frame_layout import ENTER, EXIT, MERGE, NEXT, NORMAL, FrameLayout
from kernloom.runtime.graph_view import GraphView, NodeItem
from kernloom.runtime.node_run import node_error, run_compute, run_sync
from kernloom.runtime.step import Step

__all__ = ["LoopSchedule", "compile_loops"]

_MAX_REACH_BITS: Final = 1 << 27
"""Bookkeeping the sequential check may do (nodes x expensive nodes, in bits), as the
straight line's."""

Row = tuple[int, NodeItem, Any, Any, Any, Any, Any]
"""One node that runs: (kind, item, a, b, out, direct, dtype). ``_UNARY``/``_BINARY``: a
kernel's direct entry (one output) called with the input slots ``a`` (and ``b``), its
result checked against ``dtype`` and put into the slots ``out``. ``_GENERAL``: the node
step (``run_sync``) on the input slots [a, b); ``out`` holds per consumed output the
slots it goes to. ``_LOOP``: a nested loop's schedule ``b``, run on the slots ``a`` of
its Enters (in its order); ``out`` holds per Exit the slots its value goes to."""
_UNARY: Final = 0
_BINARY: Final = 1
_GENERAL: Final = 2
_LOOP: Final = 3
_getrefcount: Final = sys.getrefcount


def compile_loops(view: GraphView) -> dict[str, LoopSchedule]:
    """The schedules of every loop frame of ``view`` that can run on one (see the module
    docstring), by frame name."""
    layout = view.frame_layout
    if layout is None or view.compute_overridden:
        return {}
    index = {node.name: i for i, node in enumerate(view.graph.nodes)}
    position = _positions(view)
    schedules: dict[str, LoopSchedule] = {}
    for frame in sorted(layout.info.frames.values(), key=_depth, reverse=True):
        if frame.parent is None:
            continue
        schedule = LoopSchedule.compile(view, layout, frame, index, position, schedules)
        if schedule is not None:
            schedules[frame.name] = schedule
    return schedules


def _depth(frame: FrameInfo) -> int:
    depth = 0
    while frame.parent is not None:
        frame, depth = frame.parent, depth + 1
    return depth


def _is_function_kernel(item: NodeItem, function: Any) -> bool:
    return getattr(type(item.kernel), "function", None) is function


@final
class LoopSchedule:
    """One loop frame compiled into a per-iteration program; immutable, shared by steps."""

    __slots__ = (
        "_members",
        "body",
        "cond",
        "constants",
        "device",
        "enter_position",
        "enters",
        "exit_slots",
        "exits",
        "frame",
        "merges",
        "next_slots",
        "num_slots",
        "sequential",
        "switches",
        "template",
    )

    def __init__(self) -> None:
        self.frame: FrameInfo
        self.enters: tuple[int, ...] = ()
        """The frame's Enter nodes (which run in the parent frame), in a fixed order: the
        propagator holds their values in this order until all have arrived."""
        self.enter_position: dict[int, int] = {}
        self.exits: tuple[int, ...] = ()
        """The frame's Exit nodes; ``run`` returns their values in this order."""
        self.exit_slots: tuple[int, ...] = ()
        self.template: tuple[tuple[int, tuple[int, ...]], ...] = ()
        """Per loop invariant: its Enter's position and the slots it fills every iteration."""
        self.merges: tuple[tuple[int, int, tuple[int, ...], tuple[int, ...], Any, Any], ...] = ()
        """Per loop variable: its Enter's position, its next-iteration slot, the slots its
        value fills, the slots its value_index fills, and value_index in iteration 0 and
        in the later ones."""
        self.constants: tuple[tuple[Any, tuple[int, ...]], ...] = ()
        """Per constant of the frame: its value and the slots it fills every iteration."""
        self.next_slots: tuple[int, int] = (0, 0)
        self.cond: tuple[Row, ...] = ()
        self.switches: tuple[tuple[int, int, tuple[int, ...], tuple[int, ...]], ...] = ()
        """Per Switch: its data slot, its predicate slot, where the data goes when the
        predicate is false (Exits) and when it is true (the body)."""
        self.body: tuple[Row, ...] = ()
        self.num_slots = 0
        self.device: Device
        self._members: tuple[GraphView, Sequence[int], set[int]] | None = None
        """What ``recheck`` reads: the partition, the frame's nodes and the set of them;
        None for a loop with a nested loop, which is never sequential (``compile``)."""
        self.sequential = True
        """Whether no two expensive nodes of the loop can ever run at once on the general
        executor -- within an iteration, or across iterations where
        ``parallel_iterations`` lets them overlap: then even a step with an inter-op pool
        loses nothing by running the loop on its schedule (``_sequential``)."""

    # -- compiling -----------------------------------------------------------------------------

    @classmethod
    def compile(
        cls,
        view: GraphView,
        layout: FrameLayout,
        frame: FrameInfo,
        index: dict[str, int] | None = None,
        position: list[int] | None = None,
        inner: dict[str, LoopSchedule] | None = None,
    ) -> LoopSchedule | None:
        """The schedule of ``frame``, or None if it needs the frame-aware propagator.
        ``inner``: the schedules of frames nested in it, which it runs as rows of its own
        (a nested frame without one keeps the whole loop on the propagator)."""
        nodes = view.graph.nodes
        if index is None:  # (``compile_loops`` makes it once for all frames)
            index = {node.name: i for i, node in enumerate(nodes)}
        items = view.items
        passes = view.passes
        flows = layout.nodes
        members = frame.nodes
        in_frame = set(members)
        if frame.loop_cond is None or not frame.exits or not frame.enters:
            return None
        # A nested loop with a schedule of its own is one row: its Enters (which run here)
        # and its Exits (whose outputs are here) stand for it, under its first Enter.
        nested: dict[int, LoopSchedule] = {}
        group: dict[int, int] = {}
        for i in members:
            if flows[i].kind == ENTER:
                child = (inner or {}).get(flows[i].frame_name)
                if child is None or not passes[i]:
                    return None
                nested[child.enters[0]] = child
                group[i] = child.enters[0]
        for first, child in nested.items():
            for x in child.exits:
                group[x] = first
        for i in members:
            item = items[i]
            flow = flows[i]
            if flow.kind == ENTER:
                continue
            if item.is_async or flow.kind not in (NORMAL, MERGE, EXIT, NEXT):
                return None  # a _Send or a _Recv
            if flow.kind in (EXIT, NEXT) and not passes[i]:
                return None
        loop_cond = frame.loop_cond
        if items[loop_cond].direct is not loop_cond_direct:
            return None
        enters = tuple(frame.enters)
        for e in enters:
            if not passes[e]:
                return None
        if position is None:
            position = _positions(view)
        last_enter = max(position[e] for e in frame.enters)
        # An order with every Enter before every Exit proves no Exit feeds an Enter.
        if last_enter > min(position[x] for x in frame.exits) and _exits_reach_enters(view, frame):
            return None
        # -- the loop variables: Merge(Enter, NextIteration) ---------------------------------
        merges = [i for i in members if flows[i].kind == MERGE]
        switches = [i for i in members if nodes[i].op == "Switch"]
        if not merges or not switches:
            return None
        merge_init: dict[int, int] = {}  # merge -> Enter
        for m in merges:
            node = nodes[m]
            if not _is_function_kernel(items[m], merge) or node.control_inputs:
                return None
            if len(node.inputs) != 2:
                return None
            sources = [t.node for t in node.inputs]
            ops = [s.op for s in sources]
            if sorted(ops) != ["Enter", "NextIteration"]:
                return None
            enter = sources[ops.index("Enter")]
            if enter.attrs.get("is_constant", False):
                return None
            merge_init[m] = index[enter.name]
        for e in enters:
            flow = flows[e]
            if nodes[e].attrs.get("is_constant", False):
                continue
            if flow.controls or any(not is_merge for _, _, _, _, is_merge in flow.edges):
                return None  # a loop variable reaching another node exists in iteration 0 only
        # -- the body: downstream of a Switch's true output ---------------------------------
        for s in switches:
            node = nodes[s]
            if not _is_function_kernel(items[s], switch) or node.control_inputs:
                return None
            if flows[s].controls:
                return None  # a control edge from a Switch is live when its body is dead
            pred = node.inputs[1]
            if index[pred.node.name] != loop_cond or pred.index != 0:
                return None  # a kl.cond's Switch: the propagator handles deadness
            for output, consumer, _, _, _ in flows[s].edges:
                if output == 0 and flows[consumer].kind != EXIT:
                    return None
        body: set[int] = set()
        stack = [c for s in switches for o, c, _, _, _ in flows[s].edges if o == 1]
        while stack:
            node_id = stack.pop()
            if node_id in body:
                continue
            body.add(node_id)
            head = group.get(node_id)  # a nested loop: what its Exits feed is body too
            emitters = list(nested[head].exits) if head is not None else [node_id]
            for emitter in emitters:
                flow = flows[emitter]
                for _, consumer, _, _, is_merge in flow.edges:
                    if not is_merge:
                        stack.append(consumer)
                stack.extend(consumer for consumer, _, _ in flow.controls)
        for child in nested.values():
            if len({e in body for e in child.enters}) != 1:
                return None  # a nested loop half in the body: the propagator decides
        for i in members:
            kind = flows[i].kind
            if kind == NEXT and i not in body:
                return None
            if kind in (MERGE, EXIT) and i in body:
                return None
            if i in body and nodes[i].op in ("Switch", "LoopCond"):
                return None
        if not body.issubset(in_frame):
            return None
        for e in frame.exits:
            source = nodes[e].inputs[0]
            if nodes[index[source.node.name]].op != "Switch" or source.index != 0:
                return None
        # -- slots: the frame's own input slots, then one per Merge (its next value), then
        #    one per Exit.
        base = layout.num_slots[id(frame)]
        next_slot = {m: base + j for j, m in enumerate(merges)}
        exit_slot = {e: base + len(merges) + j for j, e in enumerate(frame.exits)}
        size = base + len(merges) + len(frame.exits)

        def dests(node_id: int, output: int) -> tuple[int, ...] | None:
            """Where ``node_id``'s ``output`` goes, through Merges' back edges and the
            pass-throughs; None when something the schedule cannot place consumes it."""
            found: list[int] = []
            for out, consumer, slot, _, is_merge in flows[node_id].edges:
                if out != output:
                    continue
                kind = flows[consumer].kind
                if is_merge:
                    if flows[node_id].kind != NEXT:
                        return None
                    found.append(next_slot[consumer])
                elif kind == EXIT:
                    if consumer not in exit_slot:
                        return None
                    found.append(exit_slot[consumer])
                elif kind == NEXT or (passes[consumer] and kind == NORMAL):
                    further = dests(consumer, 0)
                    if further is None:
                        return None
                    found.extend(further)
                elif consumer in in_frame:
                    found.append(slot)
                else:
                    return None
            return tuple(found)

        schedule = cls()
        schedule.frame = frame
        schedule.enters = enters
        schedule.enter_position = {e: p for p, e in enumerate(enters)}
        schedule.exits = tuple(frame.exits)
        schedule.exit_slots = tuple(exit_slot[e] for e in frame.exits)
        schedule.num_slots = size
        schedule.next_slots = (base, base + len(merges))
        template: list[tuple[int, tuple[int, ...]]] = []
        for p, e in enumerate(enters):
            if nodes[e].attrs.get("is_constant", False):
                targets = dests(e, 0)
                if targets is None:
                    return None
                template.append((p, targets))
        schedule.template = tuple(template)
        merge_rows = []
        for m in merges:
            values, indices = dests(m, 0), dests(m, 1)
            if values is None or indices is None:
                return None
            init = 0 if nodes[m].inputs[0].node.op == "Enter" else 1
            merge_rows.append(
                (
                    schedule.enter_position[merge_init[m]],
                    next_slot[m],
                    values,
                    indices,
                    _merge_index(init),
                    _merge_index(1 - init),
                )
            )
        schedule.merges = tuple(merge_rows)
        switch_rows = []
        for s in switches:
            start = flows[s].slot_start
            taken, exited = dests(s, 1), dests(s, 0)
            if taken is None or exited is None:
                return None
            switch_rows.append((start, start + 1, exited, taken))
        schedule.switches = tuple(switch_rows)
        # A constant (its kernel keeps the value: never overwritten) sits in the template.
        constants = [i for i in members if type(items[i].kernel) is ConstKernel]
        for i in constants:
            targets = dests(i, 0)
            if targets is None:
                return None
            value = items[i].kernel
            assert isinstance(value, ConstKernel)
            schedule.constants += ((value.value, targets),)
        written_out = set(merges) | set(switches) | set(constants)
        runs = [
            i for i in members if i not in written_out and flows[i].kind == NORMAL and not passes[i]
        ]
        runs += list(nested)
        running = set(runs)
        ordered = [i for i in _topological(view, members, in_frame, group) if i in running]
        if len(ordered) != len(runs):
            return None
        order = [i for i in ordered if i not in body]
        body_order = [i for i in ordered if i in body]
        rows: list[Row] = []
        for i in order + body_order:
            flow = flows[i]
            item = items[i]
            child = nested.get(i)
            if child is not None:
                enter_slots = tuple(flows[e].slot_start for e in child.enters)
                exit_dests = tuple(dests(x, 0) for x in child.exits)
                if any(d is None for d in exit_dests):
                    return None
                rows.append((_LOOP, item, enter_slots, child, exit_dests, None, None))
                continue
            outs = []
            for output in range(flow.num_outputs):
                targets = dests(i, output)
                if targets is None:
                    return None
                if targets:
                    outs.append((output, targets))
            start, end = flow.slot_start, flow.slot_end
            if item.direct is not None and end - start in (1, 2):  # one output
                kind = _UNARY if end - start == 1 else _BINARY
                out = outs[0][1] if outs else ()
                rows.append((kind, item, start, end - 1, out, item.direct, item.direct_dtype))
            else:
                rows.append((_GENERAL, item, start, end, tuple(outs), None, None))
        schedule.cond = tuple(rows[: len(order)])
        schedule.body = tuple(rows[len(order) :])
        # (With a nested loop, the general executor could overlap it with the outer
        # loop's nodes: such a loop runs on its schedule only in one-thread steps.)
        schedule._members = None if nested else (view, members, in_frame)
        schedule.recheck()
        schedule.device = view.device
        return schedule

    def recheck(self) -> None:
        """Work out ``sequential`` again, from the nodes' marks now (``kernel_costs``:
        measured costs turn them)."""
        members = self._members
        self.sequential = members is not None and _sequential(
            *members, self.frame.parallel_iterations
        )

    # -- running -------------------------------------------------------------------------------

    def run(
        self, ctx: OpKernelContext, step: Step, values: list[Any], frame_id: str
    ) -> list[Any] | None:
        """Run the loop from its Enter values (``values``, in ``enters`` order; the list is
        emptied, so that the loop holds its variables alone) and return the Exit values in
        ``exits`` order; None when the step stopped meanwhile. A failing node raises the
        error that names it and the iteration, as the general executor's does."""
        slots: list[Any] = [None] * self.num_slots
        template: list[Any] = [None] * self.num_slots
        for value, targets in self.constants:
            for slot in targets:
                template[slot] = value
        for position, targets in self.template:
            value = values[position]
            for slot in targets:
                template[slot] = value
        merges = self.merges
        carried: list[Any] = [values[row[0]] for row in merges]
        values.clear()
        value = None
        next_start, next_end = self.next_slots
        cond, switches, body = self.cond, self.switches, self.body
        run_rows = self._run_rows
        frame_iter = (frame_id, 0)
        check_deadline = step.deadline is not None
        k = 0
        while True:
            if check_deadline:
                step.check_deadline()
            if step.stopped:
                return None
            ctx.frame_iter = frame_iter = (frame_id, k)
            slots[:] = template
            for j, (_, _, targets, index_targets, initial, later) in enumerate(merges):
                value = carried[j]
                for slot in targets:
                    slots[slot] = value
                if index_targets:
                    index = later if k else initial
                    for slot in index_targets:
                        slots[slot] = index
            del carried
            value = None  # the slots alone hold the loop variables
            # the condition part: runs in every iteration, the last one included
            if not run_rows(cond, slots, ctx, step, frame_iter):
                return None
            pred = slots[switches[0][1]]
            for data, predicate, exited, taken in switches:  # the Switches, written out
                slots[predicate] = None
                value = slots[data]
                slots[data] = None
                for slot in taken if pred else exited:
                    slots[slot] = value
            value = None
            if not pred:
                return [slots[slot] for slot in self.exit_slots]
            if not run_rows(body, slots, ctx, step, frame_iter):
                return None
            carried = slots[next_start:next_end]
            k += 1

    def _run_rows(
        self,
        rows: tuple[Row, ...],
        slots: list[Any],
        ctx: OpKernelContext,
        step: Step,
        frame_iter: tuple[str, int],
    ) -> bool:
        """Run one part of the iteration ``frame_iter``: each node's inputs taken out of
        their slots (one that nothing else holds may be overwritten: the reference-count
        rule), its outputs put into its consumers' slots. A direct entry is called here,
        as the straight line calls it; a nested loop runs on its own schedule; everything
        else is the shared node step. False when the step stopped in a nested loop."""
        getrefcount = _getrefcount
        item: NodeItem | None = None
        kind = _GENERAL
        try:
            for kind, item, a, b, out, direct, dtype in rows:
                if kind == _BINARY:
                    x = slots[a]
                    y = slots[b]
                    slots[a] = slots[b] = None
                    reuse = 1 if getrefcount(x) == 2 else 0
                    if getrefcount(y) == 2:
                        reuse |= 2
                    value = direct(reuse, x, y)
                    if value is NotImplemented:
                        given = [x, y]
                        del x, y
                        value = run_compute(ctx, item, given)[0]
                        del given
                    else:
                        del x, y
                        if getattr(value, "dtype", None) is not dtype:
                            value = _checked(ctx, item, value)
                    for slot in out:
                        slots[slot] = value
                    del value
                elif kind == _UNARY:
                    x = slots[a]
                    slots[a] = None
                    value = direct(1 if getrefcount(x) == 2 else 0, x)
                    if value is NotImplemented:
                        given = [x]
                        del x
                        value = run_compute(ctx, item, given)[0]
                        del given
                    else:
                        del x
                        if getattr(value, "dtype", None) is not dtype:
                            value = _checked(ctx, item, value)
                    for slot in out:
                        slots[slot] = value
                    del value
                elif kind == _GENERAL:
                    inputs = slots[a:b]
                    slots[a:b] = item.empty_slots
                    outputs = run_sync(ctx, item, inputs, True)
                    del inputs
                    for output, targets in out:
                        value = outputs[output]
                        for slot in targets:
                            slots[slot] = value
                    del outputs
                    value = None
                else:  # _LOOP: a nested loop, one instance per iteration of this one
                    given = [slots[slot] for slot in a]
                    for slot in a:
                        slots[slot] = None
                    exits = b.run(
                        ctx, step, given, f"{frame_iter[0]}/{frame_iter[1]}/{b.frame.name}"
                    )
                    ctx.frame_iter = frame_iter
                    if exits is None:
                        return False
                    for value, targets in zip(exits, out, strict=True):
                        for slot in targets:
                            slots[slot] = value
                    del exits
                    value = None
        except BaseException as exc:
            if kind == _LOOP or isinstance(exc, KeyboardInterrupt):
                raise  # named by the nested loop: its node, frame and iteration; Ctrl-C as is
            assert item is not None
            where = f" in frame {self.frame.name!r} iteration {frame_iter[1]}"
            raise node_error(item, self.device, exc, where=where) from exc
        return True


def _checked(ctx: OpKernelContext, item: NodeItem, value: Any) -> Any:
    """A direct entry's result that is not an array of the expected dtype: the general
    output check (``OpKernelContext.outputs``) accepts it or explains why not."""
    ctx.prepare(item.kernel, [], [value])
    try:
        return ctx.outputs()[0]
    finally:
        ctx.release()


def _merge_index(index: int) -> Any:
    """A Merge's value_index output: read-only, so that no kernel overwrites it."""
    value = np.array(index, np.int32)
    value.flags.writeable = False
    return value


def _frame_edges(
    view: GraphView,
    members: Sequence[int],
    in_frame: set[int],
    group: dict[int, int] | None = None,
) -> dict[int, list[int]]:
    """Per member, the members that wait for it within one iteration (data edges but the
    NextIteration -> Merge back edge, and control edges). ``group`` maps a nested loop's
    Enters and Exits to its first Enter, which stands for the whole nested loop."""
    items = view.items
    group = group or {}
    consumers: dict[int, list[int]] = {group.get(i, i): [] for i in members}
    nodes = view.graph.nodes
    for i in [*members, *(x for x in group if x not in in_frame)]:
        if nodes[i].op in BACK_EDGE_OPS or (i in group and nodes[i].op == "Enter"):
            continue  # (a nested loop's Enters feed its own nodes)
        item = items[i]
        source = group.get(i, i)
        for c in [edge[1] for edge in item.out_edges] + list(item.control_out):
            target = group.get(c, c)
            if (c in in_frame or c in group) and target != source:
                consumers[source].append(target)
    return consumers


def _topological(
    view: GraphView,
    members: Sequence[int],
    in_frame: set[int],
    group: dict[int, int] | None = None,
) -> list[int]:
    """The frame's nodes in an order one iteration may run them in: the general
    executor's last-in first-out order on one thread (a consumer right after its
    producer, so values die early; ties broken by node id)."""
    consumers = _frame_edges(view, members, in_frame, group)
    pending = dict.fromkeys(consumers, 0)
    for i in consumers:
        for c in consumers[i]:
            pending[c] += 1
    ready = sorted((i for i in consumers if pending[i] == 0), reverse=True)
    order: list[int] = []
    while ready:
        node = ready.pop()
        order.append(node)
        for c in consumers[node]:
            pending[c] -= 1
            if pending[c] == 0:
                ready.append(c)
    return order


def _sequential(
    view: GraphView, members: Sequence[int], in_frame: set[int], parallel_iterations: int
) -> bool:
    """Whether the loop's expensive nodes, unrolled, form one chain (each depends on the
    one before), so that the general executor could never run two at once. Checked on
    two consecutive iterations -- iteration k+1's Merges fed by iteration k's
    NextIterations -- which by periodicity covers every iteration; on one iteration when
    ``parallel_iterations`` is 1 (the next iteration starts after this one ends)."""
    items = view.items
    nodes = view.graph.nodes
    expensive = [i for i in members if items[i].is_expensive]
    if not expensive or (len(expensive) == 1 and parallel_iterations == 1):
        return True
    if len(members) * len(expensive) * 2 > _MAX_REACH_BITS:
        return False
    consumers = _frame_edges(view, members, in_frame)
    order = _topological(view, members, in_frame)
    copies = 1 if parallel_iterations == 1 else 2
    unrolled = [(i, k) for k in range(copies) for i in order]
    chain = [(i, k) for i, k in unrolled if items[i].is_expensive]
    bit = {key: 1 << b for b, key in enumerate(chain)}
    reach: dict[tuple[int, int], int] = dict.fromkeys(unrolled, 0)
    for i, k in unrolled:
        mine = reach[(i, k)] | bit.get((i, k), 0)
        for c in consumers[i]:
            reach[(c, k)] |= mine
        if k + 1 < copies and nodes[i].op in BACK_EDGE_OPS:  # NextIteration -> next Merge
            for _, c, _ in items[i].out_edges:  # (the Merges it feeds)
                reach[(c, k + 1)] |= mine
    return all(reach[later] & bit[earlier] for earlier, later in itertools.pairwise(chain))


def _positions(view: GraphView) -> list[int]:
    """Every node's place in one topological order of the partition (back edges left
    out); a node never reached (a malformed graph) comes last."""
    items = view.items
    nodes = view.graph.nodes
    pending = [0] * len(items)
    for item in items:
        if nodes[item.id].op in BACK_EDGE_OPS:
            continue
        for _, c, _ in item.out_edges:
            pending[c] += 1
        for c in item.control_out:
            pending[c] += 1
    ready = [i for i, count in enumerate(pending) if count == 0]
    position = [len(items)] * len(items)
    placed = 0
    while ready:
        i = ready.pop()
        position[i] = placed
        placed += 1
        if nodes[i].op in BACK_EDGE_OPS:
            continue
        item = items[i]
        for c in [edge[1] for edge in item.out_edges] + list(item.control_out):
            pending[c] -= 1
            if pending[c] == 0:
                ready.append(c)
    return position


def _exits_reach_enters(view: GraphView, frame: FrameInfo) -> bool:
    """Whether a value of ``frame``'s Exits can feed one of its Enters (not through an
    outer loop's back edge): the schedule, which waits for every Enter before it starts,
    would wait for itself."""
    items = view.items
    nodes = view.graph.nodes
    targets = set(frame.enters)
    seen: set[int] = set()
    stack = list(frame.exits)
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i in targets:
            return True
        if nodes[i].op in BACK_EDGE_OPS:
            continue
        stack.extend(c for _, c, _ in items[i].out_edges)
        stack.extend(items[i].control_out)
    return False
