"""The executor (TensorFlow's ``ExecutorImpl``/``ExecutorState``): runs one partition.

``Executor.build`` compiles a partition once (``GraphView``) and, where it can, a
straight-line schedule of it (``StraightLine``). ``Executor.straight_line_for`` is the one
place that decides how a step runs it:

- on the straight-line schedule, when nothing could run in parallel (one thread, or no
  two expensive nodes independent of each other) and nobody observes single nodes
  (no trace, no node-outputs callback);
- otherwise on ``ExecutorState``: the one node loop, over the propagator chosen once per
  executor -- ``SimplePropagator`` for a partition without frames or dead values,
  ``FramePropagator`` for one with control flow.

``Executor.loops_for`` likewise decides, once per step, which loop frames run on their
static per-iteration schedules (``LoopSchedule``: the straight line's idea applied to a
loop frame): every frame that has one, when nobody observes single nodes and the step has
no other thread or the loop no two expensive nodes that could run at once. The
frame-aware propagator hands such a frame instance to the node loop as one ready entry
(``LOOP``), which runs the schedule and gives the Exit values back
(``ExecutorState._run_loop``).

The node loop (``ExecutorState._process``), per ready node: prepare its inputs (the
propagator takes them out of their slots: a value is alive exactly while a consumer that
has not run yet, or the caller, a fetch, a constant, still holds it; one that nothing
else holds may be overwritten), compute and process the outputs (``node_run.run_sync``:
the kernel's direct entry or its ``compute`` on the step's one reused context, outputs
checked; or ``start_async`` for an asynchronous kernel, which continues through its
callback), propagate them (the propagator says what became ready), and schedule what
became ready: inexpensive nodes run inline on this thread, first in first out; of the
expensive nodes that become ready together one stays inline and the rest are handed to
the step (the caller's thread and the inter-op pool take them). A loop on its schedule
runs to its end in one go, so it goes to the pool when other work is ready on this
thread, or, with no pool, after that work: a loop may wait on a branch beside it (a
variable it reads), or that branch fail. The first failure stops the step
(``Step.stop``); the loop then skips what is left and the step reports once, through
``done``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, MutableSequence
from time import perf_counter
from typing import Any, final

from kernloom.framework.device import Device
from kernloom.framework.inter_op import on_inter_op_worker
from kernloom.framework.op_kernel import DEAD, OpKernelContext
from kernloom.graph.graph import Graph
from kernloom.runtime.compiled_line import CompiledLine, LineProgram
from kernloom.runtime.frame_propagator import LOOP, FramePropagator
from kernloom.runtime.graph_view import GraphView, KernelFactory, NodeItem
from kernloom.runtime.kernel_costs import KernelCosts
from kernloom.runtime.loop_schedule import LoopSchedule, compile_loops
from kernloom.runtime.node_run import (
    Done,
    RunArgs,
    end_step,
    forwarded,
    node_error,
    run_sync,
    start_async,
    step_context,
)
from kernloom.runtime.propagator import SimplePropagator
from kernloom.runtime.step import Step
from kernloom.runtime.straight_line import StraightLine

__all__ = [
    "Executor",
    "ExecutorBarrier",
    "ExecutorState",
    "GraphView",
    "NodeItem",
    "RunArgs",
]

Propagator = SimplePropagator | FramePropagator


@final
class Executor:
    """Runs one compiled partition; any number of steps may run it at once."""

    def __init__(self, view: GraphView) -> None:
        self.view = view
        self.schedule = StraightLine.compile(view)
        """The partition as one sequence, for steps that run it on one thread; None when
        it has asynchronous kernels or control flow."""
        self.compiled = None if self.schedule is None else CompiledLine.compile(self.schedule)
        """The schedule as one generated function, where some node of it can be written
        as an in-place call; None otherwise (the schedule is interpreted)."""
        self.loops: dict[str, LoopSchedule] = compile_loops(view)
        """The loop frames that can run on a static per-iteration schedule, by name."""
        self._sequential_loops = self._loops_without_overlap()
        self.costs = KernelCosts(len(view.items))
        """The nodes' measured costs, which may turn their ``is_expensive`` marks."""
        self._generation = 0
        """The ``costs.generation`` that ``schedule.sequential`` and the sequential loops
        were last worked out for."""

    @classmethod
    def build(
        cls,
        graph: Graph,
        device: Device,
        kernels: KernelFactory,
        *,
        control_flow: bool | None = None,
    ) -> Executor:
        """``control_flow``: whether values may be dead or frames exist (the session says
        so for every partition of a graph with control flow, as a partition without
        control-flow ops can still receive dead values); None works it out from ``graph``."""
        return cls(GraphView(graph, device, kernels, control_flow=control_flow))

    @property
    def device(self) -> Device:
        return self.view.device

    def straight_line_for(self, *, parallel: bool, observed: bool) -> LineProgram | None:
        """The straight-line schedule, if a step may run this partition on it: nobody
        observes single nodes (``observed``: a trace or a node-outputs callback), and the
        step has no other thread (``parallel`` is False) or no two expensive nodes of the
        partition could use one; its compiled form where it has one. The only place this
        is decided."""
        schedule = self.schedule
        if schedule is None or observed or (parallel and not schedule.sequential):
            return None
        return self.compiled or schedule

    def parallel_inline(self) -> LineProgram | None:
        """``straight_line_for`` a step with a pool that nobody observes, after measured
        costs have been taken into account (the session's inline path asks each step)."""
        self._follow_costs()
        return self.straight_line_for(parallel=True, observed=False)

    def loops_for(self, *, parallel: bool, observed: bool) -> dict[str, LoopSchedule] | None:
        """The loop frames a step runs on their schedules: none when somebody observes
        single nodes (a trace reports every node of every iteration); with other threads
        (``parallel``), only loops whose expensive nodes the general executor could never
        overlap (``LoopSchedule.sequential``: within an iteration or across
        ``parallel_iterations``). The only place this is decided."""
        if observed or not self.loops:
            return None
        return self._sequential_loops if parallel else self.loops

    def run_async(self, args: RunArgs, done: Done) -> None:
        """Start the partition for ``args.step``; ``done(error)`` is called once at the end.

        The work is queued for the thread that waits on the step (``Step.wait``, which
        the caller must drive); nothing runs on this call's own stack.
        """
        parallel = args.step.pool is not None
        if parallel:
            self._follow_costs()
        observed = args.stats is not None or args.node_outputs is not None
        straight = self.straight_line_for(parallel=parallel, observed=observed)
        if straight is not None:
            # Another executor's work may be queued for the caller too: then let a pool
            # thread take this partition, so that the two run at once.
            args.step.schedule(lambda: straight.run(args, done), ticket=args.executors > 1)
            return
        loops = self.loops_for(parallel=parallel, observed=observed)
        ExecutorState(self.view, args, done, loops, self.costs if parallel else None).start()

    def _follow_costs(self) -> None:
        """Where measured costs have turned some node's mark since the last step, work
        out again which schedules a parallel step may use (steps racing here compute the
        same answer)."""
        generation = self.costs.generation
        if generation == self._generation:
            return
        if self.schedule is not None:
            self.schedule.recheck()
        for loop in self.loops.values():
            loop.recheck()
        self._sequential_loops = self._loops_without_overlap()
        self._generation = generation

    def _loops_without_overlap(self) -> dict[str, LoopSchedule]:
        """The loops a step with a pool may run on their schedules (``loops_for``)."""
        return {name: loop for name, loop in self.loops.items() if loop.sequential}

    def run(self, args: RunArgs) -> None:
        """Run synchronously on this thread (and the step's pool); raise the first error."""
        errors: list[BaseException | None] = []

        def done(error: BaseException | None) -> None:
            errors.append(error)
            args.step.finish()

        self.run_async(args, done)
        args.step.wait()
        if errors and errors[0] is not None:
            raise errors[0]


@final
class ExecutorState:
    """One step of one executor: the node loop over this step's propagator."""

    __slots__ = ("args", "costs", "device", "done", "error", "propagator", "step", "view")

    def __init__(
        self,
        view: GraphView,
        args: RunArgs,
        done: Done,
        loops: dict[str, LoopSchedule] | None = None,
        costs: KernelCosts | None = None,
    ) -> None:
        """``costs``: where the kernels of nodes marked expensive are timed (a step with
        an inter-op pool, where the marks decide where nodes run); None times nothing."""
        self.view = view
        self.costs = costs
        self.device = view.device
        self.args = args
        self.step = args.step
        self.done = done
        self.error: BaseException | None = None
        layout = view.frame_layout
        observed = args.stats is not None or args.node_outputs is not None
        self.propagator: Propagator = (
            SimplePropagator(view)
            if layout is None
            else FramePropagator(layout, args.step, None if observed else view.passes, loops)
        )

    def start(self) -> None:
        ready, ended = self.propagator.start()
        if ready:
            self.step.schedule(lambda: self.process(ready), ticket=False)
        if ended:
            self._end()

    def process(self, ready: list[Any]) -> None:
        """Run ``ready`` and whatever becomes ready inline, until nothing is left here."""
        with self.device.compute_scope():
            self._process(ready)

    # -- the node loop ----------------------------------------------------------------------

    def _process(self, started: list[Any]) -> None:
        # First in, first out, as TensorFlow's inline queue: a node that became ready
        # earlier runs before the ones it unblocks later, so a long chain of work (a loop's
        # iterations) cannot keep an independent ready node waiting behind it.
        ready = deque(started)
        view = self.view
        items = view.items
        propagator = self.propagator
        take = propagator.take
        propagate = propagator.propagate
        plain = propagator.tags_are_ids
        forward = propagator.forward
        step = self.step
        stats = self.args.stats
        node_outputs = self.args.node_outputs
        check_deadline = step.deadline is not None
        costs = self.costs
        ctx = step_context(view, self.args)
        newly: list[Any] = []
        expensive_here = sum(1 for t in ready if items[t if plain else t[0]].is_expensive)
        on_worker = step.pool is not None and on_inter_op_worker()
        while ready:
            tagged = ready.popleft()
            node = tagged if plain else tagged[0]
            item = items[node]
            if item.is_expensive:
                expensive_here -= 1
            if check_deadline:
                step.check_deadline()
            if step.stopped:
                if propagator.finish(tagged, ready):
                    self._end()
                continue
            # prepare inputs: from here on only this node holds them
            inputs = take(tagged, item, ctx)
            if inputs is None:
                if not plain and tagged[3] is LOOP:  # a loop frame instance on its schedule
                    loop_ended = self._run_loop(tagged, ctx, ready, newly)
                    if loop_ended is None:
                        continue
                    ended = loop_ended
                else:  # a dead node: no kernel runs, every output is dead
                    ended = propagate(tagged, item, [DEAD] * len(item.unset_outputs), newly)
            elif item.is_async:
                self._start_async(tagged, item, ctx, inputs)
                ctx = step_context(view, self.args)  # the kernel keeps that one
                continue
            else:
                record = stats.start(item, self.device) if stats is not None else None
                try:  # compute and process the outputs (checked)
                    if costs is not None and item.timed:
                        began = perf_counter()
                        outputs = run_sync(ctx, item, inputs, forward)
                        costs.record(item, perf_counter() - began)
                    else:
                        outputs = run_sync(ctx, item, inputs, forward)
                except BaseException as exc:
                    del inputs
                    self._fail(tagged, exc, ready)
                    continue
                if record is not None:
                    record.finish(outputs, forwarded(ctx, item, inputs, outputs))
                del inputs
                if node_outputs is not None and propagator.live(tagged):
                    node_outputs(item.node.name, outputs)
                ended = propagate(tagged, item, outputs, newly)
                del outputs
            if newly:
                for consumer in newly:
                    consumer_item = items[consumer if plain else consumer[0]]
                    if on_worker and consumer_item.on_caller_thread:
                        step.schedule_for_caller(self._task(consumer))
                        continue
                    if consumer_item.is_expensive:
                        if expensive_here:
                            step.schedule(self._task(consumer))
                            continue
                        expensive_here += 1
                    ready.append(consumer)
                newly.clear()
            if ended:
                self._end()

    def _run_loop(
        self, tagged: Any, ctx: OpKernelContext, ready: deque[Any], newly: list[Any]
    ) -> bool | None:
        """Run a loop frame instance on its schedule (a ``LOOP`` entry); its Exits' consumers
        go to ``newly``. Returns whether the step's end is due, or None when the loop was
        handed to the step's pool, failed or the step stopped (then handled here, as
        ``_fail`` does)."""
        if ready and self.step.pool is not None:
            # Other work waits on this thread's queue: let the pool take the loop (or this
            # thread, once that work is done), as an expensive node would be handed over.
            self.step.schedule(self._task(tagged))
            return None
        if any(other[3] is not LOOP for other in ready):
            # No other thread: the loop runs to its end in one go, so the nodes ready
            # beside it run first (their work could end the loop, or fail the step).
            ready.append(tagged)
            return None
        propagator = self.propagator
        assert isinstance(propagator, FramePropagator)
        schedule, values, frame_id = propagator.take_loop(tagged)
        try:
            exits = schedule.run(ctx, self.step, values, frame_id)
        except BaseException as error:  # named already: node, frame and iteration
            with propagator.lock:
                if self.error is None:
                    self.error = error
            self.step.stop(error)
            exits = None
        del values
        if exits is None:
            if propagator.finish(tagged, ready):
                self._end()
            return None
        return propagator.finish_loop(tagged, exits, newly)

    def _task(self, tagged: Any) -> Callable[[], None]:
        return lambda: self.process([tagged])

    # -- asynchronous kernels -----------------------------------------------------------------

    def _start_async(
        self, tagged: Any, item: NodeItem, ctx: OpKernelContext, inputs: list[Any]
    ) -> None:
        propagator = self.propagator
        ctx.prepare(
            item.kernel, inputs, item.unset_outputs.copy(), propagator.forward, item.device_inputs
        )
        del inputs

        def finished(outputs: list[Any] | None, error: BaseException | None) -> None:
            newly: list[Any] = []
            ended = False
            if outputs is None:
                self._fail(tagged, error or RuntimeError("no outputs"), newly)
            else:
                node_outputs = self.args.node_outputs
                if node_outputs is not None:
                    node_outputs(item.node.name, outputs)
                ended = propagator.propagate(tagged, item, outputs, newly)
            if newly:
                # Continue on the step's threads, not on the stack of whoever called back.
                self.step.schedule(lambda: self.process(newly))
            if ended:
                self._end()

        start_async(self.view, item, ctx, self.args.stats, finished)

    # -- endings --------------------------------------------------------------------------------

    def _fail(self, tagged: Any, exc: BaseException, ready: MutableSequence[Any]) -> None:
        propagator = self.propagator
        node = tagged if propagator.tags_are_ids else tagged[0]
        error = node_error(self.view.items[node], self.device, exc, where=propagator.where(tagged))
        with propagator.lock:
            if self.error is None:
                self.error = error
        self.step.stop(error)
        if propagator.finish(tagged, ready):
            self._end()

    def _end(self) -> None:
        end_step(self.device, self.step, self.error, self.done)


@final
class ExecutorBarrier:
    """Joins the executors of one step: the first error stops the step (aborting the
    rendezvous through its cancellation) and is the one reported; ``done`` runs once,
    after the last executor."""

    def __init__(self, count: int, step: Step, done: Done) -> None:
        self._remaining = count
        self._step = step
        self._done = done
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        if count == 0:
            done(None)

    def executor_done(self, error: BaseException | None) -> None:
        with self._lock:
            if error is not None and self._error is None:
                self._error = error
            self._remaining -= 1
            last = self._remaining == 0
        if error is not None:
            self._step.stop(error)
        if last:
            # The step's error is the first failure anywhere; executors that failed only
            # because the rendezvous was aborted report that same error or a later one.
            first = self._step.error if self._step.error is not None else self._error
            self._done(first)
