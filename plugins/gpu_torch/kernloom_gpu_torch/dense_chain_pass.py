"""The ``torch_dense_chain`` pass: consecutive dense layers on the CPU become one
``_TorchDenseChain`` node (``dense_chain_op``), with the Softmax or LogSoftmax that
follows them where there is one.

It runs after the built-in passes, so the remapper has already made each MatMul + BiasAdd
[+ activation] one ``_FusedMatMul``; a chain is a run of those, each the only consumer of
the one before (as its left operand), float32, not transposed on the left, with a bias
and an activation the fused op knows. At least two nodes make a chain (two layers, or one
layer and its softmax). The built-in fusions' rules hold: a node that is fed, fetched (but
the last), stateful, labelled, colocated, inside a loop frame or tied by control edges
stays out, every member asks for the same device and would run on the CPU
(``likely_device_type``: with a GPU in the session the layers stay where the placer puts
them), and the fused node takes the last member's name and lists every node it replaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from kernloom.plugin import (
    BIAS_FORMS,
    FUSED_FROM_ATTR,
    Consumers,
    GraphPass,
    PassContext,
    as_dtype,
    frame_nodes,
    fused_from,
    kernel_for,
    likely_device_type,
    may_rewrite,
    replace_groups,
)
from kernloom_gpu_torch.dense_chain_op import OP

__all__ = ["DenseChainPass"]

DEVICE_TYPE: Final = "CPU"
_LAYER_OP: Final = "_FusedMatMul"
_HEAD_OPS: Final = ("Softmax", "LogSoftmax")


@dataclass(frozen=True)
class _Chain:
    layers: tuple[Any, ...]
    """The ``_FusedMatMul`` nodes, in order."""
    head: Any = None
    """The Softmax or LogSoftmax after the last layer, or None."""

    @property
    def members(self) -> list[Any]:
        return [*self.layers, *([self.head] if self.head is not None else [])]


class DenseChainPass(GraphPass):
    name = "torch_dense_chain"

    def run(self, graph: Any, ctx: PassContext) -> Any:
        if DEVICE_TYPE not in ctx.device_types:
            return graph
        consumers = Consumers(graph)
        frames = frame_nodes(graph)
        chains: dict[str, _Chain] = {}
        claimed: set[str] = set()
        for node in graph.nodes:
            if node.name in claimed or not _is_layer(node, frames, ctx):
                continue
            chain = _grow(node, consumers, frames, ctx)
            if len(chain.members) < 2 or kernel_for(OP, _attrs(chain), DEVICE_TYPE, ctx) is None:
                continue
            chains[chain.members[-1].name] = chain
            claimed.update(m.name for m in chain.members)
        if not chains:
            return graph
        inner = {m.name for c in chains.values() for m in c.members[:-1]}
        ctx.note(
            f"fused {len(chains)} dense chain(s): "
            + "; ".join(
                f"{root} <- {' + '.join(m.name for m in chain.members)}"
                for root, chain in sorted(chains.items())
            )
        )
        op_def = ctx.registry.op_def(OP)  # a graph made with kl.Graph() adopts it

        def fused(rewriter: Any, root: Any, chain: _Chain) -> tuple[Any, list[Any], dict[str, Any]]:
            return op_def, _inputs(rewriter, chain), _attrs(chain)

        return replace_groups(graph, chains, inner, fused, ctx.preserved)


def _grow(first: Any, consumers: Consumers, frames: set[str], ctx: PassContext) -> _Chain:
    """The longest chain starting at ``first``: its one consumer as the next layer's left
    operand while that is a layer, then a softmax head if one follows."""
    layers = [first]
    last = first
    while _may_be_inner(last, consumers, frames, ctx):
        ((after, index),) = consumers.of_node(last)
        if after.requested_device != first.requested_device:
            break
        if index == 0 and _is_layer(after, frames, ctx):
            layers.append(after)
            last = after
            continue
        if after.op in _HEAD_OPS and _may_be_last(after, frames, ctx):
            return _Chain(tuple(layers), after)
        break
    return _Chain(tuple(layers))


def _is_layer(node: Any, frames: set[str], ctx: PassContext) -> bool:
    """A ``_FusedMatMul`` the chain kernel runs as ``PackedMatMul`` would: float32, ``a``
    not transposed, one bias and no residual, on the CPU."""
    attrs = node.attrs
    return (
        node.op == _LAYER_OP
        and attrs.get("T") == as_dtype("float32")
        and not attrs.get("transpose_a", False)
        and attrs.get("num_args") == 1
        and tuple(attrs.get("fused_ops", ())) in BIAS_FORMS
        and _may_be_last(node, frames, ctx)
    )


def _may_be_last(node: Any, frames: set[str], ctx: PassContext) -> bool:
    """``node`` may end a chain (it may be fetched: the chain takes its name and value)."""
    return (
        may_rewrite(node, ctx.preserved - {node.name}, frames)
        and not node.control_inputs
        and likely_device_type(node, ctx) == DEVICE_TYPE
    )


def _may_be_inner(node: Any, consumers: Consumers, frames: set[str], ctx: PassContext) -> bool:
    """``node`` may disappear inside a chain: one data consumer and nothing else."""
    return (
        may_rewrite(node, ctx.preserved, frames)
        and len(consumers.of_node(node)) == 1
        and not consumers.control.get(node.name)
    )


def _activation(node: Any) -> str:
    fused_ops: Sequence[str] = node.attrs.get("fused_ops", ())
    return str(fused_ops[1]) if len(fused_ops) > 1 else ""


def _attrs(chain: _Chain) -> dict[str, Any]:
    layers = chain.layers
    return {
        "T": layers[0].attrs["T"],
        "N": len(layers),
        "transpose_b": [bool(n.attrs.get("transpose_b", False)) for n in layers],
        "activations": [_activation(n) for n in layers],
        "leakyrelu_alphas": [float(n.attrs.get("leakyrelu_alpha", 0.2)) for n in layers],
        "head": chain.head.op if chain.head is not None else "",
        "layers": [n.name for n in layers],
        FUSED_FROM_ATTR: fused_from(chain.members),
    }


def _inputs(rewriter: Any, chain: _Chain) -> list[Any]:
    """``x``, the weights, the biases: the layers' inputs in the rewritten graph."""
    layers = chain.layers
    return [
        rewriter.mapped(layers[0].inputs[0]),
        [rewriter.mapped(n.inputs[1]) for n in layers],
        [rewriter.mapped(n.inputs[2]) for n in layers],
    ]
