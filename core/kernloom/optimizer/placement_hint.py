"""Where a node will most likely run, before the placer has run: the first of the
session's device types (in placement order) that the node's requested device allows and
that has a kernel for it. Fusions ask it so that a fused node goes only where a kernel
for the fused op exists (ONNX Runtime keeps its rewrites behind the provider that can run
the result); where none does, the nodes are left as they are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernloom.errors import KernloomError
from kernloom.framework.device_name import parse_device_name
from kernloom.framework.kernel_def import KernelDef
from kernloom.framework.node_def import NodeDef
from kernloom.graph.graph import Node
from kernloom.optimizer.graph_pass import PassContext

__all__ = ["has_kernel", "kernel_for", "likely_device_type"]


def likely_device_type(node: Node, ctx: PassContext) -> str | None:
    wanted = _requested_type(node.requested_device)
    try:
        supported = ctx.registry.supported_device_types(node.to_node_def())
    except KernloomError:
        return None
    for device_type in ctx.device_types:
        if (wanted is None or wanted == device_type) and device_type in supported:
            return device_type
    return None


def has_kernel(op: str, attrs: Mapping[str, Any], device_type: str, ctx: PassContext) -> bool:
    """Whether a node of ``op`` with ``attrs`` has a kernel on ``device_type``."""
    return kernel_for(op, attrs, device_type, ctx) is not None


def kernel_for(
    op: str, attrs: Mapping[str, Any], device_type: str, ctx: PassContext
) -> KernelDef | None:
    """The definition of the kernel a node of ``op`` with ``attrs`` gets on
    ``device_type`` (what it declares it takes), or None where it has none."""
    try:
        found = ctx.registry.find_kernel(
            NodeDef(name="probe", op=op, attrs=dict(attrs)), device_type
        )
    except KernloomError:
        return None
    return found.kernel_def


def _requested_type(requested: str) -> str | None:
    if not requested:
        return None
    try:
        return parse_device_name(requested).device_type or None
    except KernloomError:
        return None
