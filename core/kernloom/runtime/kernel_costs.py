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
that have a pool (where the mark decides anything), and keeps an estimate per node
(``record``). A longer time moves it a tenth of the way (TensorFlow's cost decay); a
shorter one replaces it at once: a node timed while another thread held the GIL reads
several times slower than it is (an ``Exp`` of 16 Ki floats, 10 µs alone, read 50-70 µs
beside a ``Cos`` on the other thread), and a step that hands such nodes over keeps them
contending, so an average would keep them expensive for ever; the shortest times are
their cost. A node whose estimate falls below ``CHEAP_S`` counts as inexpensive
(``NodeItem.is_expensive`` turns False: it runs inline); above ``EXPENSIVE_S`` it counts
as expensive again. The gap between the two keeps a node near the line from flipping on
noise. Every change bumps
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
"""Below this estimate a node runs inline: handing it to another thread costs about as
much (``benchmarks/EXECUTOR.md``, "Measured costs")."""

EXPENSIVE_S: Final = 60e-6
"""Above this estimate a node measured cheap counts as expensive again."""

_LONGEST_SAMPLE_S: Final = 4 * EXPENSIVE_S
"""One time counts at most this much: a node that waited 5 ms for the GIL once (the
interpreter's switch interval) is not made expensive by that one wait."""

_WEIGHT: Final = 0.1
"""How much of a longer time goes into the estimate (TensorFlow's ``kCostDecay`` of 10)."""


@final
class KernelCosts:
    """The measured costs of one compiled partition's nodes, shared by all its steps.
    Updates from concurrent steps may overwrite each other: a lost sample only delays a
    change of mark, and the marks decide only where nodes run, never what they compute."""

    __slots__ = ("_estimate", "generation")

    def __init__(self, size: int) -> None:
        self._estimate: list[float] = [-1.0] * size
        """Per node, its estimated time in seconds (-1: not timed yet)."""
        self.generation = 0
        """Bumped whenever a node's mark changes."""

    def record(self, item: NodeItem, seconds: float) -> None:
        """Add one timed run of ``item``'s kernel; change its mark where the estimate
        crosses a threshold."""
        sample = min(seconds, _LONGEST_SAMPLE_S)
        estimate = self._estimate[item.id]
        if estimate < 0 or sample < estimate:
            estimate = sample
        else:
            estimate += (sample - estimate) * _WEIGHT
        self._estimate[item.id] = estimate
        if item.is_expensive:
            if estimate < CHEAP_S:
                item.is_expensive = False
                self.generation += 1
        elif estimate > EXPENSIVE_S:
            item.is_expensive = True
            self.generation += 1

    def estimate(self, node: int) -> float | None:
        """``node``'s estimated time in seconds, or None when it has not been timed."""
        estimate = self._estimate[node]
        return None if estimate < 0 else estimate
