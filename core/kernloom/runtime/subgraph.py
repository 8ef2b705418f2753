"""The graph one step runs (TensorFlow's ``RewriteGraphForExecution``).

For a (feeds, fetches, targets) signature: keep only the nodes the fetches and targets
need -- walking inputs backwards and stopping at fed tensors, so a fed tensor's producer
does not run -- replace each fed tensor by an ``_Arg`` and consume each fetched tensor
with a ``_Retval`` colocated with its producer. Session kernel labels are applied to the
copies of nodes that do not ask for a label themselves. Each ``_Arg`` and ``_Retval``
records the user's tensor it stands for (``STANDS_FOR_ATTR``), so that an error about it
(the placer's) names that tensor or placeholder, never ``feed/x_0`` (``step_node_where``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from kernloom.errors import Hint, InvalidArgumentError, Setting
from kernloom.framework.node_def import KERNEL_LABEL_ATTR
from kernloom.graph.graph import BACK_EDGE_OPS, COLOCATION_ATTR, Graph, Node, with_stand_ins
from kernloom.graph.tensor import Tensor

__all__ = ["STANDS_FOR_ATTR", "StepGraph", "build_step_graph", "step_node_label", "step_node_where"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-/]")

STANDS_FOR_ATTR: Final = "_stands_for"
"""On a step's ``_Arg`` and ``_Retval``: ``[tensor, op]``, the user's tensor it feeds or
fetches and the op of that tensor's node, for errors to name what the user built
(``node 'x' (op Placeholder)``, ``fetch 'y:0'``) rather than ``feed/x_0``."""


def _stands_for(node: Node) -> tuple[str, str] | None:
    value = node.attrs.get(STANDS_FOR_ATTR) if node.op in ("_Arg", "_Retval") else None
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    return str(value[0]), str(value[1])


def step_node_label(node: Node) -> str:
    """How an error lists ``node`` of a step graph among others: ``'name'``; a feed of a
    placeholder as the placeholder (``'x'``), another feed as ``feed 'y:0'``, a fetch as
    ``fetch 'y:0'``."""
    found = _stands_for(node)
    if found is None:
        return repr(node.name)
    tensor, op = found
    if node.op == "_Retval":
        return f"fetch {tensor!r}"
    if op == "Placeholder":
        return repr(tensor.rpartition(":")[0])
    return f"feed {tensor!r}"


def step_node_where(node: Node) -> str:
    """How an error names ``node`` of a step graph: ``node 'name' (op Op)``; a feed of a
    placeholder as the placeholder (``node 'x' (op Placeholder)``, which asked for the
    device the ``_Arg`` inherits), another feed as ``feed 'y:0' (op _Arg)``, a fetch as
    ``fetch 'y:0' (op _Retval)``."""
    found = _stands_for(node)
    if found is None:
        return f"node {node.name!r} (op {node.op})"
    tensor, op = found
    if node.op == "_Arg" and op == "Placeholder":
        return f"node {tensor.rpartition(':')[0]!r} (op Placeholder)"
    return f"{step_node_label(node)} (op {node.op})"


@dataclass(frozen=True)
class StepGraph:
    graph: Graph
    feeds: tuple[str, ...]
    """Fed tensor names; feed i is ``_Arg`` index i, named ``arg_nodes[i]``."""
    arg_nodes: tuple[str, ...]
    fetches: tuple[str, ...]
    """Fetched tensor names; fetch i is ``_Retval`` index i, named ``retval_nodes[i]``."""
    retval_nodes: tuple[str, ...]
    original_nodes: frozenset[str]
    """Nodes copied from the user's graph (their kernels can be cached across steps)."""


def _needed(
    graph: Graph, fed: set[str], fetches: Sequence[str], targets: Sequence[str]
) -> set[str]:
    needed: set[str] = set()
    stack = [graph.tensor(name).node for name in fetches if name not in fed]
    stack.extend(graph.node(name) for name in targets)
    while stack:
        node = stack.pop()
        if node.name in needed:
            continue
        needed.add(node.name)
        stack.extend(t.node for t in node.inputs if t.name not in fed)
        stack.extend(node.control_inputs)
    return needed


def _loop_frame(tensor: Tensor) -> str | None:
    """The innermost loop frame ``tensor`` is computed in, or None in the root frame.

    A node runs in the frame of its first input (data, else control; a back edge is no
    input here), as ``ControlFlowInfo`` works it out for the whole step; an ``Enter``'s
    outputs are in the frame it names, an ``Exit``'s in the frame around its own. Only
    the chain of first inputs is walked: nothing for a placeholder. A malformed chain
    (a cycle) gives None, for ``ControlFlowInfo`` to report."""
    chain: list[Node] = []
    seen: set[str] = set()
    node: Node | None = tensor.node
    while node is not None and node.name not in seen:
        seen.add(node.name)
        chain.append(node)
        sources = [t.node for t in node.inputs] + list(node.control_inputs)
        node = next((s for s in sources if s.op not in BACK_EDGE_OPS), None)
    if node is not None:
        return None
    frames: list[str] = []  # the frames the node at hand's outputs are in, outermost first
    for node in reversed(chain):
        if node.op == "Enter":
            frames.append(str(node.attrs["frame_name"]))
        elif node.op == "Exit" and frames:
            frames.pop()
    return frames[-1] if frames else None


def _refuse_feeds_inside_loops(graph: Graph, feeds: Sequence[str]) -> None:
    for name in feeds:
        frame = _loop_frame(graph.tensor(name))
        if frame is not None:
            raise InvalidArgumentError(
                f"cannot feed {name!r}: it is computed inside a loop (frame {frame!r}), where "
                f"it has one value per iteration, not one for the run. Feed a value from "
                f"outside the loop instead (a placeholder the loop starts from or its body "
                f"reads), or compute the value inside the body from its loop variables."
            )


def _unfed_placeholder_error(node: Node, fetches: Sequence[str], targets: Sequence[str]) -> str:
    wanted = ", ".join(repr(n) for n in [*fetches, *targets])
    shape = node.outputs[0].shape
    return (
        f"placeholder {node.name!r} ({node.outputs[0].dtype.name}, shape {shape}) must be "
        f"fed: {wanted} need(s) it."
    )


def _in_step(colocation: Sequence[str], graph: Graph, needed: set[str]) -> list[str]:
    """A node's colocation constraints (``loc:@name``) without those naming a node of the
    graph that this step does not run (fed, or not needed), as TensorFlow's placer ignores
    them: colocation with a fed placeholder must not fail the step. A name that is in no
    graph at all stays, for the placer to report."""
    kept = []
    for entry in colocation:
        target = entry.removeprefix("loc:@")
        if target in graph and target not in needed:
            continue
        kept.append(entry)
    return kept


def build_step_graph(
    graph: Graph,
    feeds: Sequence[str],
    fetches: Sequence[str],
    targets: Sequence[str],
    kernel_labels: Mapping[str, str] | None = None,
) -> StepGraph:
    fed = set(feeds)
    _refuse_feeds_inside_loops(graph, feeds)
    needed = _needed(graph, fed, fetches, targets)
    step = graph.derived()
    step.reserve_names([n.name for n in graph.nodes])
    labels = dict(kernel_labels or {})
    args: dict[str, Tensor] = {}
    arg_nodes: list[str] = []
    later: list[tuple[str, int, str]] = []
    for index, name in enumerate(feeds):
        tensor = graph.tensor(name)
        base = _UNSAFE.sub("_", name.replace(":", "_"))
        requested = tensor.node.requested_device if tensor.node.op == "Placeholder" else ""
        arg = step.add_node(
            "_Arg",
            [],
            {
                "T": tensor.dtype,
                "index": index,
                "shape": tensor.shape,
                STANDS_FOR_ATTR: [name, tensor.node.op],
            },
            name=f"feed/{base}",
            device=requested,
        )
        args[name] = arg.outputs[0]
        arg_nodes.append(arg.name)
    for node in graph.nodes:
        if node.name not in needed:
            continue
        if node.op == "Placeholder":
            raise InvalidArgumentError(
                _unfed_placeholder_error(node, fetches, targets),
                hint=Hint("Pass {feed}.", feed=Setting("feed", key=node.name)),
            )
        found: list[Tensor | None] = []
        for index, t in enumerate(node.inputs):
            if t.name in fed:
                found.append(args[t.name])
            elif t.node.name in step:
                found.append(step.tensor(t.name))
            else:  # a loop's back edge: a stand-in now, the real input once it exists
                later.append((node.name, index, t.name))
                found.append(None)
        mapped = with_stand_ins(node, found)
        attrs = dict(node.attrs)
        colocation = attrs.get(COLOCATION_ATTR)
        if colocation:
            attrs[COLOCATION_ATTR] = _in_step(colocation, graph, needed)
        if node.op in labels and not attrs.get(KERNEL_LABEL_ATTR):
            attrs[KERNEL_LABEL_ATTR] = labels[node.op]
        controls = [step.node(c.name) for c in node.control_inputs]
        if attrs == node.attrs:  # as it is: its checked attrs and output types (copy_node)
            step.copy_node(
                node,
                node.group_inputs(mapped),
                device=node.requested_device,
                control_inputs=controls,
            )
        else:
            step.add_node(
                node.op,
                node.group_inputs(mapped),
                attrs,
                name=node.name,
                device=node.requested_device,
                control_inputs=controls,
                exact_name=True,
            )
    for consumer, index, name in later:
        step.update_input(step.node(consumer), index, step.tensor(name))
    retval_nodes: list[str] = []
    for index, name in enumerate(fetches):
        source = args[name] if name in fed else step.tensor(name)
        base = _UNSAFE.sub("_", name.replace(":", "_"))
        retval = step.add_node(
            "_Retval",
            [source],
            {
                "T": source.dtype,
                "index": index,
                COLOCATION_ATTR: [f"loc:@{source.node.name}"],
                STANDS_FOR_ATTR: [name, graph.tensor(name).node.op],
            },
            name=f"fetch/{base}",
        )
        retval_nodes.append(retval.name)
    return StepGraph(
        step,
        tuple(feeds),
        tuple(arg_nodes),
        tuple(fetches),
        tuple(retval_nodes),
        frozenset(needed),
    )
