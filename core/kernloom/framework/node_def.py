"""``NodeDef``: one node as the runtime sees it -- name, op, inputs, device, attrs.

The graph builder produces these (and GraphDef stores them); kernel lookup, placement
and kernel construction read them. Attrs hold plain Python values (see
``kernloom.framework.attr``); attrs starting with ``_`` are the runtime's own, such as
``_kernel``, the label that selects an experimental kernel.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KERNEL_LABEL_ATTR", "NodeDef"]

KERNEL_LABEL_ATTR: Final = "_kernel"


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
