"""The frame-aware propagator (TensorFlow's ``PropagatorState`` with its
``FrameState``/``IterationState``): one step's slots and pending counts for a partition
with control flow -- frames, iterations and dead tensors. It keeps the contract written
in ``propagator.py``; its tagged node is ``(node id, frame, iteration, dead)``.

- A node is dead when any input is dead (a control input from a dead node counts); a
  dead node does not run its kernel and all its outputs are dead. Exceptions: ``Merge``
  is ready on its first live input (dead only when every input it can get is dead), and
  ``_Send`` runs to carry the deadness to the other device.
- ``Enter`` creates the child frame instance on first use (id
  ``parent/iteration/frame_name``, the same on every device, so rendezvous keys pair up),
  and delivers to iteration 0 -- or, for a loop invariant (``is_constant``), to every
  iteration, present and future. ``NextIteration`` delivers to the next iteration, which
  starts only while fewer than ``parallel_iterations`` are alive; a dead one ends the
  loop. ``Exit`` delivers to the parent frame; an Exit that never saw a live value
  delivers a dead one when its frame instance ends.
- Iterations end in order: one is finished when nothing of it is ready or running, no
  child frame of it is alive and (for iteration 0) every Enter has arrived. The frame
  instance ends after its last iteration; the step, after the root frame's.

One lock guards all of this state; kernels run outside it. Taken inputs may be
forwarded (``forward`` is True), by the same reference-count rule as the simple
propagator's: every place this propagator keeps a value holds a reference of its own --
a slot until the consumer takes it, ``invariants`` for a loop invariant (delivered to
every iteration, so never the last holder), ``deferred`` for a value waiting for its
iteration -- and Merge's rewritten input list holds the same values as the slots did.
An ``i + 1`` in a loop body therefore writes into ``i``'s buffer, as in a straight line.

A step that nobody observes node by node (no trace, no node-outputs callback) passes
``passes``: the nodes whose kernel is the core's pass-through (Identity, Enter, Exit,
NextIteration). When one becomes ready, its input is delivered on at once, under the
same lock, as if it had run -- a loop iteration saves two node runs of the node loop.

Such a step may also pass ``loops``: loop frames that run on a static schedule
(``LoopSchedule``) instead of through this propagator. Their Enter values are held, per
frame instance, until every Enter of the instance has arrived; then one ready entry,
tagged ``(first Enter, parent frame, parent iteration, LOOP)``, stands for the whole
loop: the node loop runs the schedule (``take_loop`` hands it the values) and
``finish_loop`` delivers the Exit values to the parent frame, as Exits that ran would.
A frame instance whose Enters are all dead delivers dead Exits at once (every node of it
would be dead); one with some dead and some live Enters is handed to this propagator's
frames after all (``_enter``), exactly as if it had never been held.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, MutableSequence, Sequence
from typing import Any, Final, final

from kernloom.framework.op_kernel import DEAD, OpKernelContext
from kernloom.runtime.control_flow import FrameInfo
from kernloom.runtime.frame_layout import (
    ENTER,
    EXIT,
    MERGE,
    NEXT,
    NORMAL,
    ROOT_ID,
    SEND,
    FrameLayout,
)
from kernloom.runtime.graph_view import NodeItem
from kernloom.runtime.loop_schedule import LoopSchedule
from kernloom.runtime.step import Step

_SAME_ITERATION: Final = frozenset({NORMAL, MERGE, SEND})
"""Kinds whose outputs go to consumers in their own frame and iteration."""

__all__ = ["LOOP", "FramePropagator", "Tagged"]


@final
class _LoopMark:
    """The last field of a ready entry that stands for a whole loop frame instance run on
    its schedule (where a node's entry has its dead flag): true, like a dead node's, so
    ``take`` hands no inputs out for it."""

    def __repr__(self) -> str:
        return "LOOP"


LOOP: Final[Any] = _LoopMark()
"""(Typed Any: it stands where a ``Tagged`` entry has its bool, and is only ever tested
for identity or truth.)"""


@final
class _HeldLoop:
    """A loop frame instance on its schedule, waiting for its Enters' values."""

    __slots__ = ("dead", "missing", "schedule", "values")

    def __init__(self, schedule: LoopSchedule) -> None:
        self.schedule = schedule
        self.values: list[Any] = [None] * len(schedule.enters)
        self.dead: list[bool] = [False] * len(schedule.enters)
        self.missing = len(schedule.enters)


@final
class _Iteration:
    __slots__ = (
        "children",
        "dead",
        "frame_iter",
        "held",
        "k",
        "outstanding",
        "pending",
        "slots",
    )

    def __init__(self, k: int, layout: FrameLayout, frame: FrameInfo, frame_id: str) -> None:
        self.k = k
        self.frame_iter = (frame_id, k)
        """What a context of this iteration carries (rendezvous keys): made once here,
        not per node."""
        self.slots: list[Any] = [None] * layout.num_slots[id(frame)]
        self.pending = layout.pending[id(frame)].copy()
        self.dead = [0] * len(self.pending)
        self.outstanding = 0
        """Nodes of this iteration that are ready or running, plus live child frames."""
        self.children: dict[str, _Frame] = {}
        self.held: dict[str, _HeldLoop] | None = None
        """Loop frame instances of this iteration waiting for their Enters (``loops``)."""


@final
class _Frame:
    __slots__ = (
        "deferred",
        "id",
        "info",
        "invariants",
        "iterations",
        "live_exits",
        "newest",
        "oldest",
        "parent",
        "parent_iter",
        "pending_enters",
    )

    def __init__(
        self, info: FrameInfo, frame_id: str, parent: _Frame | None, parent_iter: _Iteration | None
    ) -> None:
        self.info = info
        self.id = frame_id
        self.parent = parent
        self.parent_iter = parent_iter
        self.iterations: dict[int, _Iteration] = {}
        self.oldest = 0
        self.newest = -1
        self.pending_enters = len(info.enters)
        self.invariants: list[tuple[int, Any]] = []
        self.deferred: list[tuple[int, Any]] = []
        """NextIteration values waiting for a free iteration (parallel_iterations)."""
        self.live_exits: set[int] = set()

    def describe(self, iteration: _Iteration) -> str:
        if self.parent is None:
            return ""
        return f" in frame {self.info.name!r} iteration {iteration.k}"


Tagged = tuple[int, _Frame, _Iteration, bool]
"""(node id, frame instance, iteration, whether the node is dead -- or ``LOOP``)."""


@final
class FramePropagator:
    """Frames, iterations and deadness of one step of one control-flow partition."""

    tags_are_ids: Final = False
    forward: Final = True

    def __init__(
        self,
        layout: FrameLayout,
        step: Step,
        passes: Sequence[bool] | None = None,
        loops: Mapping[str, LoopSchedule] | None = None,
    ) -> None:
        """``passes``: per node, whether it is a pass-through (the core's Identity, Enter,
        Exit or NextIteration kernel: its output is its input) that this step may
        deliver through without running it -- a step nobody observes node by node.
        ``loops``: the loop frames this step runs on their schedules, by name
        (``Executor.loops_for`` decides)."""
        self.layout = layout
        self.step = step
        self.passes = passes
        self.loops = loops or None
        self.lock = threading.Lock()
        self.inflight = 0
        self.ended = False
        self.end_due = False
        self.root = _Frame(layout.info.root, ROOT_ID, None, None)

    # -- the propagator contract ------------------------------------------------------------

    def start(self) -> tuple[list[Tagged], bool]:
        ready: list[Tagged] = []
        with self.lock:
            root_iter = self._new_iteration(self.root, 0, ready)
            for node in self.layout.roots:
                self._make_ready(node, self.root, root_iter, False, ready)
            if not ready:
                self._maybe_end_iteration(self.root, root_iter, ready)
            return ready, self._end_due()

    def take(self, tagged: Tagged, item: NodeItem, ctx: OpKernelContext) -> list[Any] | None:
        node, _, iteration, dead = tagged
        flow = self.layout.nodes[node]
        start, end = flow.slot_start, flow.slot_end
        slots = iteration.slots
        inputs = slots[start:end]
        slots[start:end] = item.empty_slots
        kind = flow.kind
        if dead and kind != SEND:
            return None
        if kind == MERGE:
            inputs = [DEAD if v is None else v for v in inputs]
        elif dead:  # a _Send of a dead node sends deadness, whatever its input
            inputs = [DEAD] * len(inputs)
        ctx.frame_iter = iteration.frame_iter
        return inputs

    def propagate(
        self, tagged: Tagged, item: NodeItem, outputs: list[Any], ready: MutableSequence[Tagged]
    ) -> bool:
        node, frame, iteration, dead = tagged
        with self.lock:
            if self.layout.nodes[node].kind in _SAME_ITERATION:
                self._deliver(node, outputs, dead, frame, iteration, ready)
            else:
                self._propagate(node, frame, iteration, outputs, dead, ready)
            # the node is done (``_node_done``, written out: this runs once per node)
            self.inflight -= 1
            iteration.outstanding -= 1
            if iteration.outstanding == 0:
                self._maybe_end_iteration(frame, iteration, ready)
            if self.step.stopped and self.inflight == 0 and not ready:
                self._end_locked()
            if self.end_due:
                self.end_due = False
                return True
            return False

    def finish(self, tagged: Tagged, ready: MutableSequence[Tagged]) -> bool:
        _, frame, iteration, _ = tagged
        with self.lock:
            self._node_done(frame, iteration, ready)
            return self._end_due()

    def live(self, tagged: Tagged) -> bool:
        """Whether the node ran live (a dead node's outputs are not reported)."""
        return not tagged[3]

    def where(self, tagged: Tagged) -> str:
        _, frame, iteration, _ = tagged
        return frame.describe(iteration)

    # -- loop frames on their schedules -------------------------------------------------------

    def take_loop(self, tagged: Tagged) -> tuple[LoopSchedule, list[Any], str]:
        """For a ``LOOP`` entry: the schedule, the Enter values (in the schedule's order;
        the caller becomes their only holder) and the frame instance's id."""
        node, frame, iteration, _ = tagged
        name = self.layout.nodes[node].frame_name
        with self.lock:
            assert iteration.held is not None
            held = iteration.held.pop(name)
        values, held.values = held.values, []
        return held.schedule, values, f"{frame.id}/{iteration.k}/{name}"

    def finish_loop(self, tagged: Tagged, exits: list[Any], ready: MutableSequence[Tagged]) -> bool:
        """A ``LOOP`` entry ran: deliver its Exit values (in the schedule's order) to the
        parent frame, and account for it as for a node that ran. Returns whether the
        step's end is due (as ``propagate``)."""
        node, frame, iteration, _ = tagged
        schedule = self._schedule_of(node)
        with self.lock:
            for exit_node, value in zip(schedule.exits, exits, strict=True):
                self._deliver(exit_node, value, False, frame, iteration, ready)
            self._node_done(frame, iteration, ready)
            return self._end_due()

    def _schedule_of(self, enter: int) -> LoopSchedule:
        assert self.loops is not None
        return self.loops[self.layout.nodes[enter].frame_name]

    def _hold(
        self,
        schedule: LoopSchedule,
        node: int,
        value: Any,
        dead: bool,
        frame: _Frame,
        iteration: _Iteration,
        ready: MutableSequence[Tagged],
    ) -> None:
        """An Enter of a scheduled loop frame delivered ``value``: keep it until every Enter
        of this frame instance has, then make the loop ready (or settle it at once)."""
        name = schedule.frame.name
        if iteration.held is None:
            iteration.held = {}
        held = iteration.held.get(name)
        if held is None:
            held = iteration.held[name] = _HeldLoop(schedule)
            iteration.outstanding += 1  # the loop instance, as a child frame counts
        position = schedule.enter_position[node]
        held.values[position] = value
        held.dead[position] = dead or value is DEAD
        held.missing -= 1
        if held.missing:
            return
        if not any(held.dead):
            self.inflight += 1  # (its outstanding count is the one taken above)
            ready.append((schedule.enters[0], frame, iteration, LOOP))
            return
        del iteration.held[name]
        if all(held.dead):  # every node of the instance would be dead: so are its Exits
            for exit_node in schedule.exits:
                self._deliver(exit_node, DEAD, True, frame, iteration, ready)
        else:  # the general frames decide what is dead
            for enter, enter_value, enter_dead in zip(
                schedule.enters, held.values, held.dead, strict=True
            ):
                self._enter(enter, enter_value, enter_dead, frame, iteration, ready)
        iteration.outstanding -= 1
        if iteration.outstanding == 0:
            self._maybe_end_iteration(frame, iteration, ready)

    # -- frames and iterations (under the lock) ---------------------------------------------

    def _new_iteration(self, frame: _Frame, k: int, ready: MutableSequence[Tagged]) -> _Iteration:
        iteration = _Iteration(k, self.layout, frame.info, frame.id)
        frame.iterations[k] = iteration
        frame.newest = k
        for node, value in frame.invariants:
            self._deliver(node, value, False, frame, iteration, ready)
        return iteration

    def _make_ready(
        self,
        node: int,
        frame: _Frame,
        iteration: _Iteration,
        dead: bool,
        ready: MutableSequence[Tagged],
    ) -> None:
        iteration.outstanding += 1
        self.inflight += 1
        ready.append((node, frame, iteration, dead))

    # -- propagation (under the lock) ---------------------------------------------------------

    def _propagate(
        self,
        node: int,
        frame: _Frame,
        iteration: _Iteration,
        outputs: list[Any],
        dead: bool,
        ready: MutableSequence[Tagged],
    ) -> None:
        flow = self.layout.nodes[node]
        kind = flow.kind
        if kind == ENTER:
            loops = self.loops
            schedule = loops.get(flow.frame_name) if loops is not None else None
            if schedule is not None:
                self._hold(schedule, node, outputs[0], dead, frame, iteration, ready)
            else:
                self._enter(node, outputs[0], dead, frame, iteration, ready)
        elif kind == EXIT:
            if not dead and outputs[0] is not DEAD:
                frame.live_exits.add(node)
                assert frame.parent is not None and frame.parent_iter is not None
                self._deliver(node, outputs[0], False, frame.parent, frame.parent_iter, ready)
        elif kind == NEXT:
            if dead or outputs[0] is DEAD:
                return  # the loop ends here for this value
            k = iteration.k + 1
            following = frame.iterations.get(k)
            if following is None and (
                len(frame.iterations) < frame.info.parallel_iterations and not frame.deferred
            ):
                following = self._new_iteration(frame, k, ready)
            if following is not None:
                self._deliver(node, outputs[0], False, frame, following, ready)
            else:
                frame.deferred.append((node, outputs[0]))
        else:
            self._deliver(node, outputs, dead, frame, iteration, ready)

    def _enter(
        self,
        node: int,
        value: Any,
        dead: bool,
        frame: _Frame,
        iteration: _Iteration,
        ready: MutableSequence[Tagged],
    ) -> None:
        """Enter ``node`` ran in ``frame``/``iteration``: deliver into its child frame
        instance (made on first use)."""
        flow = self.layout.nodes[node]
        child = iteration.children.get(flow.frame_name)
        if child is None:
            info = self.layout.info.frames[flow.frame_name]
            child = _Frame(info, f"{frame.id}/{iteration.k}/{info.name}", frame, iteration)
            iteration.children[info.name] = child
            iteration.outstanding += 1
            self._new_iteration(child, 0, ready)
        child.pending_enters -= 1
        if flow.is_constant:
            child.invariants.append((node, value))
            for target in list(child.iterations.values()):
                self._deliver(node, value, dead, child, target, ready)
        else:
            self._deliver(node, value, dead, child, child.iterations[0], ready)
        first = child.iterations.get(child.oldest)
        if first is not None:
            self._maybe_end_iteration(child, first, ready)

    def _deliver(
        self,
        node: int,
        values: Any,
        dead: bool,
        frame: _Frame,
        iteration: _Iteration,
        ready: MutableSequence[Tagged],
    ) -> None:
        """Hand ``node``'s outputs to its consumers in ``frame``/``iteration``.

        ``values`` is the output list, or for Enter/Exit/NextIteration the one output.
        """
        flow = self.layout.nodes[node]
        single = flow.kind in (ENTER, EXIT, NEXT)
        slots, pending, deads = iteration.slots, iteration.pending, iteration.dead
        passes = self.passes
        through: list[tuple[int, bool]] = []
        arrived: list[tuple[int, int]] = []
        before = len(ready)
        for output, consumer, slot, local, is_merge in flow.edges:
            value = values if single else values[output]
            if dead:
                value = DEAD
            if is_merge:
                count = pending[local]
                if value is DEAD:
                    deads[local] += 1
                    if count == 1 and deads[local] == self._merge_expects(consumer, iteration):
                        pending[local] = -1
                        ready.append((consumer, frame, iteration, True))
                elif count > 0 and count & 1:
                    slots[slot] = value
                    pending[local] = count - 1
                    if count == 1:
                        ready.append((consumer, frame, iteration, False))
                continue
            slots[slot] = value
            if value is DEAD:
                deads[local] += 1
            arrived.append((consumer, local))
        for consumer, local, is_merge in flow.controls:
            if is_merge:
                count = pending[local] - 2
                pending[local] = count
                if count == 0:
                    ready.append((consumer, frame, iteration, False))
                elif count == 1 and deads[local] == self._merge_expects(consumer, iteration):
                    pending[local] = -1
                    ready.append((consumer, frame, iteration, True))
                continue
            if dead:
                deads[local] += 1
            arrived.append((consumer, local))
        for consumer, local in arrived:  # an input (data or control) of a non-Merge arrived
            count = pending[local] - 1
            pending[local] = count
            if count == 0:
                if passes is not None and passes[consumer]:
                    through.append((consumer, deads[local] > 0))
                else:
                    ready.append((consumer, frame, iteration, deads[local] > 0))
        made = len(ready) - before  # (``_make_ready``'s accounting, once for all of them)
        iteration.outstanding += made
        self.inflight += made
        # Pass-throughs that became ready deliver their input on, as if they had run
        # (after the accounting above: what they make ready is accounted by their own).
        for consumer, consumer_dead in through:
            consumer_flow = self.layout.nodes[consumer]
            start = consumer_flow.slot_start
            value = slots[start]
            slots[start] = None
            self._propagate(consumer, frame, iteration, [value], consumer_dead, ready)

    def _merge_expects(self, merge: int, iteration: _Iteration) -> int:
        """How many dead inputs make a Merge dead: all it can get in this iteration -- a
        loop's Merge gets its Enter values in iteration 0 and its NextIteration values
        after; a kl.cond's Merge (no back edge) gets all its inputs in every iteration
        (counting none after iteration 0 left it never ready when its branches were dead,
        so what waits on it -- a nested loop's Enter -- hung the step)."""
        flow = self.layout.nodes[merge]
        if iteration.k == 0 or not flow.back_inputs:
            return flow.forward_inputs
        return flow.back_inputs

    # -- endings (under the lock) -----------------------------------------------------------------

    def _node_done(
        self, frame: _Frame, iteration: _Iteration, ready: MutableSequence[Tagged]
    ) -> None:
        self.inflight -= 1
        iteration.outstanding -= 1
        if iteration.outstanding == 0:
            self._maybe_end_iteration(frame, iteration, ready)
        if self.step.stopped and self.inflight == 0 and not ready:
            self._end_locked()

    def _maybe_end_iteration(
        self, frame: _Frame, iteration: _Iteration, ready: MutableSequence[Tagged]
    ) -> None:
        while True:
            if iteration.outstanding or iteration.k != frame.oldest:
                return
            if iteration.k == 0 and frame.pending_enters > 0:
                return
            del frame.iterations[iteration.k]
            frame.oldest += 1
            if frame.deferred and self.step.stopped:
                frame.deferred.clear()
            if frame.deferred:
                target = self._new_iteration(frame, frame.newest + 1, ready)
                deferred, frame.deferred = frame.deferred, []
                for node, value in deferred:
                    self._deliver(node, value, False, frame, target, ready)
            following = frame.iterations.get(frame.oldest)
            if following is None:
                self._end_frame(frame, ready)
                return
            iteration = following

    def _end_frame(self, frame: _Frame, ready: MutableSequence[Tagged]) -> None:
        parent, parent_iter = frame.parent, frame.parent_iter
        if parent is None or parent_iter is None:
            self._end_locked()
            return
        del parent_iter.children[frame.info.name]
        for exit_node in frame.info.exits:
            if exit_node not in frame.live_exits:
                self._deliver(exit_node, DEAD, True, parent, parent_iter, ready)
        parent_iter.outstanding -= 1
        if parent_iter.outstanding == 0:
            self._maybe_end_iteration(parent, parent_iter, ready)

    def _end_locked(self) -> None:
        """Mark the step's end; the node loop ends the step once the lock is released
        (ending may stop the step, which aborts the rendezvous, whose callbacks take our
        lock): ``_end_due`` hands the mark over, once."""
        if not self.ended:
            self.ended = True
            self.end_due = True

    def _end_due(self) -> bool:
        due, self.end_due = self.end_due, False
        return due
