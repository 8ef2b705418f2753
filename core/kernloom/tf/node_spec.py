"""``NodeSpec``: one NodeDef of a GraphDef as the importer works with it, inputs parsed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["NodeSpec"]


@dataclass(slots=True)
class NodeSpec:
    """One node to build: its NodeDef's fields, inputs split into data and control.

    ``attrs`` is the NodeDef's ``attr`` map (protobuf ``AttrValue`` values);
    ``converted``, once set, is that map as kernloom attrs, and is what the node is built
    with (a node the importer writes itself has only ``converted``)."""

    position: int
    """Where the node comes in the graph: ready nodes are built in this order."""
    name: str
    op: str
    device: str
    data: list[tuple[str, int]]
    """``(node, output)`` of each data input, in order."""
    control: list[str]
    attrs: Any
    converted: dict[str, Any] | None = None
