"""What a fused elementwise kernel works out from its inputs' shapes, kept while the same
inputs come back.

The optimizer fuses connected elementwise ops into one ``_FusedElementwise`` node whose
inputs are every operand of the group: a chain of 1000 ``Add``/``Mul`` in turn has 1000
inputs, all but one of them constants. Reading each input's shape (numpy makes a new
tuple each time it is asked), looking the plan up by all of them and choosing the output
among the inputs of its shape took 0.12 µs per input on every run: the fused chain ran
0.30 µs per original op against 0.18 for the unfused straight line
(``benchmarks/bench_optimizer.py chain``, ``benchmarks/OPTIMIZER.md``).

An input that is the same object as on the last run has the same shape, and is held by
something that outlives the run (a constant, a variable's buffer), so it is never an
input the output may take over. Such inputs are checked by identity, in one C loop; the
others -- the fed and computed values, which change every run -- by shape.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from kernloom.framework.op_kernel import OpKernelContext
from kernloom.framework.output_layout import same_layout_output

__all__ = ["FusedDirect", "FusedInputs"]

T = TypeVar("T")
Shapes = tuple[tuple[int, ...], ...]
Plan = Callable[[Shapes], tuple[tuple[int, ...], T]]


class _Seen(Generic[T]):
    """One run's inputs: the objects at the stable positions, the shapes at the others,
    the plan made from the shapes, and the inputs the output may take over."""

    __slots__ = (
        "candidates",
        "count",
        "derived",
        "pick",
        "positions",
        "shape",
        "stable",
        "volatile",
    )

    def __init__(
        self,
        inputs: Sequence[Any],
        shapes: Shapes,
        planned: tuple[tuple[int, ...], T],
        volatile: set[int],
    ) -> None:
        self.count = len(inputs)
        self.shape, self.derived = planned
        self.positions = tuple(i for i in range(self.count) if i not in volatile)
        self.stable = tuple(inputs[i] for i in self.positions)
        self.pick = _picker(self.positions)
        self.volatile = tuple((i, shapes[i]) for i in sorted(volatile))
        whole = [i for i, _ in self.volatile if shapes[i] == self.shape]
        # Only a changing input can be taken over; where none has the output's shape, the
        # stable ones still say which memory order to write in.
        self.candidates = whole or [i for i in range(self.count) if shapes[i] == self.shape]

    def matches(self, inputs: Sequence[Any]) -> bool:
        if len(inputs) != self.count:
            return False
        if self.stable and not all(map(operator.is_, self.pick(inputs), self.stable)):
            return False
        for i, shape in self.volatile:  # noqa: SIM110 (a generator's frame costs more)
            if inputs[i].shape != shape:
                return False
        return True

    def changed(self, inputs: Sequence[Any]) -> set[int]:
        """The stable positions that hold another object in ``inputs`` (of the same count)."""
        held = zip(self.positions, self.stable, strict=True)
        return {i for i, x in held if inputs[i] is not x}


def _picker(positions: tuple[int, ...]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    if len(positions) == 1:
        (only,) = positions
        return lambda inputs: (inputs[only],)
    if not positions:
        return lambda inputs: ()
    return operator.itemgetter(*positions)


class FusedInputs(Generic[T]):
    """A fused kernel's plan from its inputs' shapes (the output's shape and whatever
    else the kernel derives from them), made again only when an input changes shape or a
    stable input is replaced. A kernel is shared by concurrent runs: the kept state is one
    object, read once and replaced in one step."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: _Seen[T] | None = None

    def plan(self, inputs: Sequence[Any], make: Plan[T]) -> tuple[tuple[int, ...], T, list[int]]:
        """``(shape, derived, candidates)``: ``make(shapes)``'s output shape and value for
        these inputs, and the positions of the inputs the output may reuse or follow in
        memory order (``output``). ``make`` raises for shapes that do not broadcast."""
        seen = self._seen
        if seen is None or not seen.matches(inputs):
            shapes = tuple([x.shape for x in inputs])
            planned = make(shapes)
            if seen is None or seen.count != len(inputs):
                volatile: set[int] = set()
            else:  # positions that changed once are read by shape from now on
                volatile = {i for i, _ in seen.volatile} | seen.changed(inputs)
            seen = self._seen = _Seen(inputs, shapes, planned, volatile)
        return seen.shape, seen.derived, seen.candidates

    @staticmethod
    def output(
        ctx: OpKernelContext, inputs: Sequence[Any], shape: tuple[int, ...], candidates: list[int]
    ) -> Any:
        """``elementwise_output``'s buffer, chosen among ``candidates`` only: laid out as
        they are, else one of them that nothing else holds, else a new C-order buffer."""
        out = same_layout_output(ctx, [inputs[i] for i in candidates], shape)
        return (
            out if out is not None else ctx.forward_input_or_allocate_output(candidates, 0, shape)
        )


class FusedDirect:
    """A fused elementwise kernel's direct entry (``OpKernel.direct``: a kernel sets
    ``self.direct`` to one) for a kernel that evaluates its plan over host arrays
    (``compile_fused_steps``' ``evaluate(inputs, out, temps)``). Its buffers: the output
    -- an input of its shape that may be overwritten (``reuse``'s bit, a C-order buffer
    of its own), else a new C-order buffer from the device's ``allocate`` (counted) --
    and the plan's temporaries, each of the output's shape (a step broadcasts into it),
    slot 0 being a new output itself: every step reads and writes element by element,
    the plan never writes a slot whose value is still to be read, and only the last step
    writes the output, so the chain runs in one buffer as the unfused straight line runs
    it in place (a temporary fewer). An output that is an input keeps a slot of its own
    (a step after the first may still read that input). The shapes are planned once per
    set of input shapes (``FusedInputs``).

    It declines (``NotImplemented``: ``compute`` runs) where the shapes do not broadcast
    (compute explains), an input of the output's shape is not C-ordered
    (``FusedInputs.output``'s layout rules are compute's), or the output has ``max_size``
    elements or more (the kernel's small-output path: compute keeps its blocks or
    threads for the rest)."""

    __slots__ = ("_allocate", "_dtype", "_evaluate", "_inputs", "_max_size", "_temps")

    def __init__(
        self,
        evaluate: Callable[[Sequence[Any], Any, list[Any]], None],
        num_temps: int,
        allocate: Callable[[tuple[int, ...], Any], Any],
        dtype: Any,
        max_size: int,
    ) -> None:
        self._inputs: FusedInputs[int] = FusedInputs()
        self._evaluate = evaluate
        self._temps = num_temps
        self._allocate = allocate
        self._dtype = dtype
        self._max_size = max_size

    def __call__(self, reuse: int, *inputs: Any) -> Any:
        try:
            shape, size, candidates = self._inputs.plan(inputs, _broadcast)
        except _NoBroadcast:
            return NotImplemented
        if size >= self._max_size:
            return NotImplemented
        out = None
        for index in candidates:
            x = inputs[index]
            flags = x.flags
            if not flags.c_contiguous:
                return NotImplemented
            if out is None and reuse >> index & 1 and x.base is None and flags.writeable:
                out = x
        count = self._temps
        if out is not None:  # an input: every temporary is a buffer of its own
            temps = [np.empty_like(out) for _ in range(count)]
        else:
            out = self._allocate(shape, self._dtype)
            if count == 1:  # (the common plan: one slot, the output itself)
                temps = [out]
            else:
                temps = [out, *[np.empty_like(out) for _ in range(count - 1)]] if count else []
        if size:
            self._evaluate(inputs, out, temps)
        return out


class _NoBroadcast(Exception):
    """Shapes that do not broadcast, in ``FusedDirect``'s plan."""


def _broadcast(shapes: Shapes) -> tuple[tuple[int, ...], int]:
    """The output's shape and size."""
    if all(s == shapes[0] for s in shapes):
        return shapes[0], math.prod(shapes[0])
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise _NoBroadcast from None
    return shape, math.prod(shape)
