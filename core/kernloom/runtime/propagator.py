"""The simple propagator (TensorFlow's ``SimplePropagatorState``): one step's input slots
and pending counts for a partition without frames or dead values.

The contract every propagator keeps with the node loop (``executor.ExecutorState``):

- A *tagged node* names one run of a node. Here it is the node's id; the frame-aware
  propagator's is a tuple whose first element is the id (``tags_are_ids`` says which).
- ``start()`` returns the tagged nodes ready at the start, and whether the step is
  already over (a partition with nothing to run).
- ``take(tagged, item, ctx)`` hands over the node's inputs, taking them out of their slots
  (from then on only the running node holds them); None means the node is dead and runs
  no kernel: all its outputs are dead.
- ``propagate(tagged, item, outputs, ready)`` delivers the outputs to their consumers,
  appends every node that became ready to ``ready`` (which the loop passes empty) and
  accounts the node as done;
  ``finish(tagged, ready)`` accounts a node that ends without outputs (skipped after a
  stop, or failed). Both return whether the step's work is over, so that the loop ends
  the step once, outside the propagator's lock.
- ``forward``: whether taken inputs may have their buffers reused (the reference-count
  rule holds for how this propagator keeps values).
- ``live(tagged)``: whether the node ran live (a dead node's outputs are not reported);
  ``where(tagged)``: what an error adds to the node's name (its frame and iteration).
"""

from __future__ import annotations

import threading
from collections.abc import MutableSequence
from typing import Any, Final, final

from kernloom.framework.op_kernel import OpKernelContext
from kernloom.runtime.graph_view import GraphView, NodeItem

__all__ = ["SimplePropagator"]


@final
class SimplePropagator:
    """Flat slots and pending counts; one lock guards the counts and the slot writes."""

    __slots__ = ("lock", "outstanding", "pending", "roots", "slots")

    tags_are_ids: Final = True
    forward: Final = True

    def __init__(self, view: GraphView) -> None:
        self.slots: list[Any] = [None] * view.num_slots
        self.pending = view.pending.copy()
        self.lock = threading.Lock()
        self.roots = view.roots
        self.outstanding = len(view.roots)
        """Nodes that are ready or running."""

    def start(self) -> tuple[list[int], bool]:
        return list(self.roots), not self.roots

    def take(self, node: int, item: NodeItem, ctx: OpKernelContext) -> list[Any]:
        slots = self.slots
        start, end = item.input_start, item.input_end
        inputs = slots[start:end]
        slots[start:end] = item.empty_slots
        return inputs

    def propagate(self, node: int, item: NodeItem, outputs: list[Any], ready: list[int]) -> bool:
        slots, pending = self.slots, self.pending
        with self.lock:
            for output, consumer, slot in item.out_edges:
                slots[slot] = outputs[output]
                count = pending[consumer] - 1
                pending[consumer] = count
                if count == 0:
                    ready.append(consumer)
            for consumer in item.control_out:
                count = pending[consumer] - 1
                pending[consumer] = count
                if count == 0:
                    ready.append(consumer)
            self.outstanding += len(ready) - 1
            return self.outstanding == 0

    def finish(self, node: int, ready: MutableSequence[int]) -> bool:
        with self.lock:
            self.outstanding -= 1
            return self.outstanding == 0

    def live(self, node: int) -> bool:
        return True

    def where(self, node: int) -> str:
        return ""
