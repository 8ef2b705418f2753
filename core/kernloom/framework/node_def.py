"""``NodeDef``: one node as the runtime sees it -- name, op, inputs, device, attrs.

The graph builder produces these (and GraphDef stores them); kernel lookup, placement
and kernel construction read them. Attrs hold plain Python values (see
``kernloom.framework.attr``); attrs starting with ``_`` are the runtime's own, such as
``_kernel``, the label that selects an experimental kernel.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KERNEL_LABEL_ATTR", "KERNEL_SCOPE_ATTR", "NodeDef"]

KERNEL_LABEL_ATTR: Final = "_kernel"
KERNEL_SCOPE_ATTR: Final = "_kernel_scope"
"""The labels of the string ``kl.kernel_label`` scopes a node was built in, innermost
first. Unlike ``_kernel`` they are wishes, not demands: where the kernel is chosen, the
first one that some kernel of the node's op has is the node's label (so the constants
built alongside keep their default kernels), and one that no kernel at all has is an
error there. The graph builder cannot decide this: it knows ops, not kernels."""


class NodeDef(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str
    op: str
    inputs: list[str] = Field(default_factory=list)
    """``node:slot`` for data inputs (``node`` means slot 0), ``^node`` for control inputs."""
    device: str = ""
    """The requested device, full or partial; empty lets the placer choose."""
    attrs: dict[str, Any] = Field(default_factory=dict)

    @property
    def kernel_label(self) -> str:
        """The kernel label this node asks for; empty for the default kernel."""
        label = self.attrs.get(KERNEL_LABEL_ATTR, "")
        return label if isinstance(label, str) else ""

    @property
    def scope_labels(self) -> list[str]:
        """The string ``kl.kernel_label`` scopes around the node, innermost first."""
        labels = self.attrs.get(KERNEL_SCOPE_ATTR, [])
        return [x for x in labels if isinstance(x, str)] if isinstance(labels, list) else []
