"""Measured kernel costs: which nodes are worth another inter-op thread (TensorFlow's
``KernelStats``: ``IsExpensive`` is the kernel's flag *and* a measured cost above a
threshold).

A kernel's ``is_expensive`` says what it may cost, not what it costs on this graph's
shapes: an ``Add`` of two scalars is marked expensive like an ``Add`` of two million
floats. Handing a node to another thread costs this runtime tens of µs (a wake-up and
the GIL), so a step with an inter-op pool that hands over nodes of a few µs runs several
times slower than on one thread: a loop of two independent scalar updates took 35 µs an
iteration with two threads against 5 with one, and a small graph of two branches 47 µs
a step against 9.

So the general executor times the nodes whose kernels are marked expensive, in steps
that have a pool (where the mark decides anything), and keeps a moving average per node
(``record``; a tenth of each new time, as TensorFlow's cost estimate). A node whose
average falls below ``CHEAP_S`` counts as inexpensive (``NodeItem.is_expensive`` turns
False: it runs inline); above ``EXPENSIVE_S`` it counts as expensive again. The gap
between the two keeps a node near the line from flipping on noise. Every change bumps
``generation``, which the executor compares at each step's start to re-derive what it
decided from the marks: whether the partition, or a loop, can run on its one-thread
schedule (``Executor.straight_line_for``, ``Executor.loops_for``).

A partition that then runs on its straight line is no longer timed: a node measured
cheap stays cheap for it (the straight line adds nothing per node to time it), so a graph
whose inputs grow by orders of magnitude between steps keeps the one-thread schedule its
small inputs earned; a new session measures afresh.
"""

from __future__ import annotations

from typing import Final, final

from kernloom.runtime.graph_view import NodeItem

__all__ = ["CHEAP_S", "EXPENSIVE_S", "KernelCosts"]

CHEAP_S: Final = 30e-6
"""Below this average a node runs inline: handing it to another thread costs about as
much (``benchmarks/EXECUTOR.md``, "Measured costs")."""

EXPENSIVE_S: Final = 60e-6
"""Above this average a node measured cheap counts as expensive again."""

_LONGEST_SAMPLE_S: Final = 4 * EXPENSIVE_S
"""One time counts at most this much: a node that waited 5 ms for the GIL once (the
interpreter's switch interval) is not made expensive by that one wait."""

_WEIGHT: Final = 0.1
"""How much of each new time goes into the average (TensorFlow's ``kCostDecay`` of 10)."""


@final
class KernelCosts:
    """The measured costs of one compiled partition's nodes, shared by all its steps.
    Updates from concurrent steps may overwrite each other: a lost sample only delays a
    change of mark, and the marks decide only where nodes run, never what they compute."""

    __slots__ = ("_average", "generation")

    def __init__(self, size: int) -> None:
        self._average: list[float] = [-1.0] * size
        """Per node, its average time in seconds (-1: not timed yet)."""
        self.generation = 0
        """Bumped whenever a node's mark changes."""

    def record(self, item: NodeItem, seconds: float) -> None:
        """Add one timed run of ``item``'s kernel; change its mark where the average
        crosses a threshold."""
        sample = min(seconds, _LONGEST_SAMPLE_S)
        average = self._average[item.id]
        average = sample if average < 0 else average + (sample - average) * _WEIGHT
        self._average[item.id] = average
        if item.is_expensive:
            if average < CHEAP_S:
                item.is_expensive = False
                self.generation += 1
        elif average > EXPENSIVE_S:
            item.is_expensive = True
            self.generation += 1

    def average(self, node: int) -> float | None:
        """``node``'s average time in seconds, or None when it has not been timed."""
        average = self._average[node]
        return None if average < 0 else average
