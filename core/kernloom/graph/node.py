"""``Node``: one op instance in a graph, with its complete attrs and its output tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, final

from kernloom.errors import InvalidArgumentError
from kernloom.framework.node_def import KERNEL_LABEL_ATTR, KERNEL_SCOPE_ATTR, NodeDef
from kernloom.framework.op_def import OpDef

if TYPE_CHECKING:
    from kernloom.graph.graph import Graph
    from kernloom.graph.tensor import Tensor

__all__ = ["COLOCATION_ATTR", "Node"]

COLOCATION_ATTR: Final = "_class"
"""TensorFlow's colocation attr: ``["loc:@node_name", ...]``."""


@final
class Node:
    """One op instance: its attrs are complete (defaults filled, types inferred)."""

    __slots__ = (
        "assigned_device",
        "attrs",
        "control_inputs",
        "graph",
        "inputs",
        "name",
        "op_def",
        "outputs",
        "position",
        "requested_device",
    )

    def __init__(
        self,
        graph: Graph,
        name: str,
        op_def: OpDef,
        attrs: dict[str, Any],
        inputs: list[Tensor],
        control_inputs: list[Node],
        requested_device: str,
    ) -> None:
        self.graph = graph
        self.name = name
        self.op_def = op_def
        self.attrs = attrs
        self.inputs = inputs
        self.control_inputs = control_inputs
        self.requested_device = requested_device
        self.assigned_device: str | None = None
        self.outputs: list[Tensor] = []
        self.position = len(graph)
        """Where the node stands in the order nodes were added (its graph's size before)."""

    @property
    def op(self) -> str:
        return self.op_def.name

    @property
    def kernel_label(self) -> str:
        """The label this node asks for: its innermost string ``kl.kernel_label`` scope's,
        else its ``_kernel`` attr (a label map's, or a loaded GraphDef's). A scope's label
        is a wish settled where the kernel is chosen: a node whose op has no kernel with
        it gets its default kernel there."""
        scoped = self.attrs.get(KERNEL_SCOPE_ATTR)
        if isinstance(scoped, list) and scoped and isinstance(scoped[0], str):
            return scoped[0]
        label = self.attrs.get(KERNEL_LABEL_ATTR, "")
        return label if isinstance(label, str) else ""

    @property
    def colocation_names(self) -> list[str]:
        """Names of the nodes this one must be placed with (``_class`` = ``loc:@name``)."""
        return [c.removeprefix("loc:@") for c in self.attrs.get(COLOCATION_ATTR, [])]

    def output(self, index: int = 0) -> Tensor:
        if not 0 <= index < len(self.outputs):
            raise InvalidArgumentError(
                f"node {self.name!r} (op {self.op}) has {len(self.outputs)} output(s); "
                f"there is no output {index}"
            )
        return self.outputs[index]

    def input_names(self) -> list[str]:
        """Inputs as GraphDef writes them: ``node:slot`` for data, ``^node`` for control."""
        return [t.name for t in self.inputs] + [f"^{n.name}" for n in self.control_inputs]

    def group_inputs(self, tensors: Sequence[Tensor]) -> list[Tensor | list[Tensor]]:
        """``tensors`` (one per flat input of this node) grouped as ``add_node`` takes them:
        a list per list argument. For copying the node into another graph."""
        ranges = self.op_def.arg_ranges(False, self.attrs)
        return [
            list(tensors[a:b]) if arg.is_list else tensors[a]
            for arg, (a, b) in ((arg, ranges[arg.name]) for arg in self.op_def.inputs)
        ]

    def to_node_def(self) -> NodeDef:
        return NodeDef(
            name=self.name,
            op=self.op,
            inputs=self.input_names(),
            device=self.requested_device,
            attrs=dict(self.attrs),
        )

    def __repr__(self) -> str:
        return f"<kl.Node '{self.name}' op={self.op}>"
