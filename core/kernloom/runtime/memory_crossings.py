"""Where a host-memory value meets a kernel that reads device memory, within one
partition (TensorFlow's memory-type pass, ``EnsureMemoryTypes``).

A ``Shape``'s output lives in host memory on every device; on a device whose memory is
not the host's, a kernel reading it as an ordinary input (a ``Neg`` of an ONNX model's
slice bounds on a GPU) would receive a numpy array. TensorFlow inserts a copy on such an
edge; here the partition's view records the inputs (``NodeItem.device_inputs``) and
``OpKernelContext.prepare`` copies them to the device.
"""

from __future__ import annotations

from typing import Final

from kernloom.framework.op_kernel import OpKernel
from kernloom.graph.graph import Node

__all__ = ["host_fed_inputs"]

_HANDS_ON: Final = frozenset({"Identity", "IdentityN", "Enter", "Exit", "NextIteration"})
"""Ops whose output ``j`` is their input ``j``, in whatever memory it arrived."""
_ANY_MEMORY: Final = _HANDS_ON | {"Switch", "Merge", "LoopCond", "_Send", "_Retval"}
"""Ops that hand a value on, or read it wherever it is (``_Send`` says which memory it
sends from; a predicate is read through ``host_bool``): nothing is copied for them."""


def host_fed_inputs(
    nodes: list[Node], index: dict[str, int], node_kernels: list[OpKernel]
) -> dict[int, frozenset[int]]:
    """Per node, the inputs that arrive in host memory but that its kernel reads in
    device memory: fed by a host-memory output, directly or through ops that hand values
    on (``_HANDS_ON``, ``Switch``, ``Merge``)."""
    host = {
        (i, o)
        for i, kernel in enumerate(node_kernels)
        for o in kernel.signature.host_memory_outputs
    }
    changed = bool(host)
    while changed:  # what hands a host value on gives a host value (loops: a fixpoint)
        changed = False
        for i, node in enumerate(nodes):
            if node.op not in _ANY_MEMORY:
                continue
            fed = [(index[t.node.name], t.index) in host for t in node.inputs]
            if node.op in _HANDS_ON:
                outputs = [j for j, f in enumerate(fed) if f and j < len(node.outputs)]
            elif node.op == "Switch":
                outputs = [0, 1] if fed and fed[0] else []
            elif node.op == "Merge":
                outputs = [0] if any(fed) else []
            else:
                outputs = []
            for o in outputs:
                if (i, o) not in host:
                    host.add((i, o))
                    changed = True
    fed_inputs: dict[int, frozenset[int]] = {}
    for i, node in enumerate(nodes):
        if node.op in _ANY_MEMORY:
            continue
        wanted = node_kernels[i].signature.host_memory_inputs
        found = frozenset(
            j
            for j, tensor in enumerate(node.inputs)
            if j not in wanted and (index[tensor.node.name], tensor.index) in host
        )
        if found:
            fed_inputs[i] = found
    return fed_inputs
