"""Who runs a step's work: the caller's thread and the session's inter-op pool.

``inter_op_threads = N`` means at most N threads run one step's kernels: the thread that
called ``Session.run`` (it drains the step's queue instead of sleeping) and the pool's
``N - 1`` workers. With ``N = 1`` every kernel runs on the caller's thread, which makes
one-thread timings honest and a step debuggable with a plain debugger.

Work is queued per step, so one step never runs another's kernels on its caller's thread;
each queued task also gives the pool one ticket to take a task from that step.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import final

from kernloom.errors import CancelledError, KernloomError
from kernloom.framework.cancellation import CancellationManager
from kernloom.framework.inter_op import mark_inter_op_worker

__all__ = ["InterOpPool", "Step"]

Task = Callable[[], None]
_FIRST_USE = threading.Lock()
"""Guards the first creation of a step's condition and cancellation manager."""


@final
class InterOpPool:
    """``num_workers`` daemon threads taking tasks from the steps that hand them tickets."""

    def __init__(self, num_workers: int, *, name: str = "kernloom-inter-op") -> None:
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self._tickets: queue.SimpleQueue[Step | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(num_workers)
        ]
        self._closed = False
        for count, thread in enumerate(self._threads):
            try:
                thread.start()
            except BaseException:  # e.g. "can't start new thread": stop the ones started
                self._threads = self._threads[:count]
                self.close()
                raise

    @property
    def num_workers(self) -> int:
        return len(self._threads)

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        return tuple(self._threads)

    def ticket(self, step: Step) -> None:
        self._tickets.put(step)

    def _work(self) -> None:
        mark_inter_op_worker()
        while True:
            step = self._tickets.get()
            if step is None:
                return
            step.run_one()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the workers after the tasks queued before; wait for them up to ``timeout_s``."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._tickets.put(None)
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


@final
class Step:
    """One step's work queue, stop flag and completion.

    ``stop(error)`` is how everything ends early -- a kernel's failure, a cancellation, the
    deadline: the first error is kept, the step's ``CancellationManager`` fires (which
    aborts the rendezvous and wakes blocked kernels) and executors skip what is left.
    """

    __slots__ = (
        "_callers",
        "_cancellation",
        "_cond",
        "_done",
        "_queue",
        "_token",
        "deadline",
        "error",
        "pool",
        "step_id",
        "stopped",
        "timeout_s",
    )

    def __init__(
        self,
        pool: InterOpPool | None = None,
        *,
        step_id: int = 0,
        timeout_s: float | None = None,
        cancellation: CancellationManager | None = None,
    ) -> None:
        self.pool = pool if pool is not None and pool.num_workers else None
        self.step_id = step_id
        self.timeout_s = timeout_s
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.error: BaseException | None = None
        self.stopped = False
        self._queue: deque[Task] = deque()
        self._callers: deque[Task] = deque()
        """Tasks for the thread waiting on the step (``schedule_for_caller``) alone."""
        # Both made on first use: a step run inline on the caller's thread with no error
        # needs neither, and on a machine whose caches the kernels just flushed they cost
        # tens of microseconds per step (see ``_condition`` and ``cancellation``).
        self._cond: threading.Condition | None = None
        self._cancellation = cancellation
        self._done = False
        self._token = None
        if cancellation is not None:
            self._token = cancellation.register(self._cancelled_from_outside)
            if self._token is None:
                self.stop(CancelledError(f"step {step_id} was cancelled before it started"))

    @property
    def cancellation(self) -> CancellationManager:
        """The step's cancellation: the caller's, else one made on first use (born
        cancelled if the step has already stopped). Cancelling it stops the step."""
        manager = self._cancellation
        if manager is None:
            with _FIRST_USE:
                manager = self._cancellation
                if manager is None:
                    manager = CancellationManager()
                    if self.stopped:
                        manager.cancel(str(self.error))
                    else:  # cancelling it (a kernel may) stops the step
                        self._token = manager.register(self._cancelled_from_outside)
                    self._cancellation = manager
        return manager

    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _FIRST_USE:
                cond = self._cond
                if cond is None:
                    # An RLock: Condition looks up _release_save and friends on its lock,
                    # and a plain Lock's missing ones cost three caught AttributeErrors.
                    cond = self._cond = threading.Condition(threading.RLock())
        return cond

    # -- scheduling ---------------------------------------------------------------------------

    def schedule(self, task: Task, *, ticket: bool = True) -> None:
        """Queue ``task``; ``ticket=False`` leaves it to the thread waiting on the step
        (a step's first tasks: handing them to a worker would only add a thread switch)."""
        self._queue.append(task)
        if ticket and self.pool is not None:
            self.pool.ticket(self)
        cond = self._condition()
        with cond:
            cond.notify()

    def schedule_for_caller(self, task: Task) -> None:
        """Queue ``task`` for the thread waiting on the step (the session's caller), never a
        pool worker: a kernel that spreads over the device's intra-op threads belongs to the
        caller's thread team (on a worker it would get one thread, and its team would
        compete with the caller's for the cores)."""
        self._callers.append(task)
        cond = self._condition()
        with cond:
            cond.notify_all()

    def run_one(self) -> None:
        """Run one queued task, if any is left (a pool ticket)."""
        try:
            task = self._queue.popleft()
        except IndexError:
            return
        task()

    # -- ending -------------------------------------------------------------------------------

    def stop(self, error: BaseException) -> None:
        """End the step with ``error`` (the first one wins) and wake everything waiting."""
        cond = self._condition()
        with cond:
            if self.stopped:
                return
            self.stopped = True
            self.error = error
            cond.notify_all()
        with _FIRST_USE:  # made after this point, the manager is born cancelled
            manager = self._cancellation
        if manager is not None:
            manager.cancel(str(error))

    def _cancelled_from_outside(self) -> None:
        if not self.stopped:
            self.stop(CancelledError(f"step {self.step_id} was cancelled"))

    def check_deadline(self) -> None:
        """Stop the step if its deadline has passed (the executor calls this between nodes)."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.stop(self._deadline_error())

    def _deadline_error(self) -> KernloomError:
        from kernloom.errors import DeadlineExceededError, Hint, Setting

        return DeadlineExceededError(
            f"step {self.step_id} did not finish within its timeout of {self.timeout_s:.3g} s; "
            f"a kernel is slow, or an asynchronous kernel never finished.",
            hint=Hint(
                "The timeout is {timeout}; {trace} shows which nodes ran.",
                timeout=Setting("timeout"),
                trace=Setting("trace"),
            ),
        )

    def finish(self) -> None:
        """Every executor of the step is done (ExecutorBarrier calls this once)."""
        cond = self._condition()
        with cond:
            self._done = True
            cond.notify_all()

    def wait(self, *, grace_s: float = 1.0) -> None:
        """Work on the step's queue until it is done; raise its error if it failed.

        After a stop, wait at most ``grace_s`` for in-flight kernels to wind down: a kernel
        that never returns (or never calls back) must not hang the caller.
        """
        stop_deadline: float | None = None
        cond = self._condition()
        callers, queue = self._callers, self._queue
        while True:
            try:
                task = callers.popleft() if callers else queue.popleft()
            except IndexError:
                task = None
            if task is not None:
                task()
                continue
            with cond:
                if self._done:
                    break
                if queue or callers:
                    continue
                now = time.monotonic()
                if self.stopped:
                    if stop_deadline is None:
                        stop_deadline = now + grace_s
                    if now >= stop_deadline:
                        break
                    cond.wait(stop_deadline - now)
                    continue
                if self.deadline is None:
                    cond.wait()
                    continue
                if now < self.deadline:
                    cond.wait(self.deadline - now)
                    continue
            self.stop(self._deadline_error())  # only reached when the deadline has passed
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Drop queued work and the cancellation hook (after ``wait``)."""
        self._queue.clear()
        self._callers.clear()
        if self._token is not None and self._cancellation is not None:
            self._cancellation.deregister(self._token)
            self._token = None
