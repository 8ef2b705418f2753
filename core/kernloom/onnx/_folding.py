"""Import-time constant propagation: the outputs of an ONNX node whose inputs are all
known at import are known at import too.

Exporters write shape arithmetic as nodes on constants (torch's nn.MultiheadAttention
computes a Slice's end as ``Add(Mod(c, d), e)``); a converter that needs a value at
import (a Reshape's shape, so that the next Unsqueeze knows its rank) sees it only if the
arithmetic before it was carried out during the import. TensorFlow's shape refiner does
the same for small constant subgraphs. After a node's converter has built its kernloom
ops, ``folded_outputs`` evaluates those ops -- with the real kernels, looked up and run as
the optimizer's constant folding runs them (``KernelEvaluator``), so the value is the one
the graph computes -- and the converter's tensors stay in the graph as they are.

Never folded: random ops (two draws are two values), nodes with subgraphs (If, Loop,
Scan: they decide what is known themselves), sequences and optionals, values over
``MAX_FOLDED_ELEMENTS`` elements, and kernloom ops the optimizer may not replace
(stateful, random, control flow, colocated or labelled: ``may_rewrite``) or that wait on
a control input (a run-time check: folding must not skip it). A kernel
that fails leaves the value unknown: the run reports the error, as before.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import onnx

from kernloom.errors import KernloomError
from kernloom.framework.device import DeviceOptions
from kernloom.framework.device_factory_registry import create_devices_checked, probe_unavailable
from kernloom.framework.node_def import NodeDef
from kernloom.graph.node import Node
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.optimizer.analysis import may_rewrite
from kernloom.optimizer.evaluator import KernelEvaluator
from kernloom.registry import Registry, registry_of

__all__ = ["MAX_FOLDED_ELEMENTS", "folded_outputs"]

MAX_FOLDED_ELEMENTS: Final = 4096
"""The most elements an input or output of a folded node may have: shape arithmetic is a
handful of integers, and a large weight computed at import would only duplicate what the
graph computes (the optimizer's constant folding has its own byte cap)."""

_MAX_KERNLOOM_NODES: Final = 64
"""The most kernloom nodes evaluated for one ONNX node: a converter's subgraph is small."""

_NEVER_FOLDED: Final = frozenset(
    {
        "Bernoulli",
        "Dropout",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)
"""ONNX ops that draw random numbers (Dropout does in training mode)."""

Array = np.ndarray[Any, Any]


def folded_outputs(
    ctx: ConversionContext, node: OnnxNode, results: Sequence[object]
) -> dict[str, Array]:
    """The values of ``node``'s outputs (ONNX name -> array) when every input of the node
    is known at import and the node may be folded (the module docstring); ``results``
    are the values its converter gave, one per output. Empty where nothing is folded."""
    if not _foldable(ctx, node, results):
        return {}
    known: dict[Tensor, Array] = {
        ctx.values[name]: ctx.static[name] for name in node.inputs if name
    }
    evaluate = _evaluator(registry_of(ctx.graph.registry))
    if evaluate is None:
        return {}
    walk = _Evaluation(evaluate, known)
    found: dict[str, Array] = {}
    for name, value in zip(node.outputs, results, strict=False):
        if not name or name in ctx.static:
            continue
        assert isinstance(value, Tensor)  # (_foldable)
        array = walk.value(value)
        if array is None or array.size > MAX_FOLDED_ELEMENTS:
            return {}
        found[name] = array
    return found


def _foldable(ctx: ConversionContext, node: OnnxNode, results: Sequence[object]) -> bool:
    """Whether ``node`` is deterministic, has no subgraph, and takes known, small tensors
    and gives tensors (its unnamed outputs aside)."""
    names = [name for name in node.inputs if name]
    if not names or node.op_type in _NEVER_FOLDED:
        return False
    if any(
        attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for attr in node.proto.attribute
    ):
        return False
    if not all(
        index < len(results) and isinstance(results[index], Tensor)
        for index, name in enumerate(node.outputs)
        if name
    ):
        return False  # a sequence, an optional or a small type's codes
    return all(
        name in ctx.values
        and (value := ctx.static.get(name)) is not None
        and np.size(value) <= MAX_FOLDED_ELEMENTS
        for name in names
    )


class _Evaluation:
    """The values of kernloom tensors computed from ``known`` ones and ``Const`` nodes,
    each node evaluated once, at most ``_MAX_KERNLOOM_NODES`` of them."""

    __slots__ = ("_budget", "_evaluate", "_known")

    def __init__(self, evaluate: KernelEvaluator, known: dict[Tensor, Array]) -> None:
        self._evaluate = evaluate
        self._known = dict(known)
        self._budget = _MAX_KERNLOOM_NODES

    def value(self, tensor: Tensor) -> Array | None:
        """``tensor``'s value, or None where it cannot be folded."""
        found = self._known.get(tensor)
        if found is not None:
            return found
        node = tensor.node
        if node.op == "Const":
            return np.asarray(node.attrs["value"])
        outputs = self._run(node)
        if outputs is None:
            return None
        self._known.update(zip(node.outputs, outputs, strict=True))
        return outputs[tensor.index]

    def _run(self, node: Node) -> list[Array] | None:
        """``node``'s outputs, by its kernel on inputs computed first."""
        if not _evaluable(node) or self._budget == 0:
            return None
        self._budget -= 1
        inputs = []
        for tensor in node.inputs:
            value = self.value(tensor)
            if value is None:
                return None
            inputs.append(value)
        try:
            outputs = self._evaluate(
                NodeDef(name=node.name, op=node.op, attrs=dict(node.attrs)), inputs
            )
        except KernloomError:
            return None  # the run reports it where the value is needed
        if any(np.size(v) > MAX_FOLDED_ELEMENTS for v in outputs):
            return None
        return [
            _as_declared(value, tensor) for value, tensor in zip(outputs, node.outputs, strict=True)
        ]


def _evaluable(node: Node) -> bool:
    """A node computed the same at import as at run time, and whose outputs are small as
    far as shape inference knows."""
    # What the optimizer may replace (not stateful, random, control flow, colocated or
    # labelled), with no control input to wait on and something to compute from.
    if not may_rewrite(node, frozenset(), set()) or node.control_inputs or not node.inputs:
        return False
    sizes = [t.shape.num_elements() for t in node.outputs]
    return all(n is None or n <= MAX_FOLDED_ELEMENTS for n in sizes)


def _as_declared(value: Array, tensor: Tensor) -> Array:
    """A kernel's output as the tensor's dtype (a numpy scalar type as an array)."""
    array = np.asarray(value)
    want = tensor.dtype.numpy_dtype
    return array if array.dtype == want else array.astype(want)


@functools.lru_cache(maxsize=4)
def _evaluator(registry: Registry) -> KernelEvaluator | None:
    """A ``KernelEvaluator`` over a host-memory CPU device of ``registry`` (made once),
    None where no CPU factory makes one: the import then folds nothing."""
    options = DeviceOptions(intra_op_threads=1)
    for registration in registry.device_factories.registrations("CPU"):
        if probe_unavailable(registration.factory) is not None:
            continue
        try:
            devices = create_devices_checked(registration, options)
        except KernloomError:
            continue
        host = next((device for device in devices if device.memory_is_host), None)
        if host is not None:
            return KernelEvaluator(registry, host)
    return None
