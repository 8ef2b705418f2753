"""What a graph pass is, and what it is given (grappler's ``GraphOptimizer`` and its
``GrapplerItem``).

A pass is a small named object with one method: graph in, graph out. It returns the very
graph it was given when it changed nothing, so the meta-optimizer can tell a fixed point
without comparing graphs. Everything a pass may need from outside -- the registry, the
nodes it must preserve, the session's devices, a way to evaluate constant nodes -- comes
in the ``PassContext``; a pass never imports the session.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import numpy as np

from kernloom.framework.node_def import NodeDef
from kernloom.graph.graph import Graph
from kernloom.registry import Registry

__all__ = [
    "DEFAULT_MAX_CONSTANT_BYTES",
    "FUSED_FROM_ATTR",
    "ConstantEvaluator",
    "GraphPass",
    "PassContext",
]

FUSED_FROM_ATTR: Final = "_fused_from"
"""On a node a pass built in place of others: the names of the user's nodes it replaces,
so ``explain()``, traces and kernel errors name them."""

DEFAULT_MAX_CONSTANT_BYTES: Final = 10 * 1024 * 1024
"""Constant folding keeps no folded value larger than this (grappler's 10 MiB cap)."""

ConstantEvaluator = Callable[[NodeDef, Sequence[np.ndarray[Any, Any]]], list[np.ndarray[Any, Any]]]
"""Runs one node's kernel on host inputs and returns its outputs as host arrays (the
session provides one over its CPU device: ``optimizer.evaluator.KernelEvaluator``)."""


@dataclass
class PassContext:
    """What every pass of one optimization may read (and the notes it writes)."""

    registry: Registry
    preserved: frozenset[str] = frozenset()
    """Nodes no pass may remove or rename (TF's ``nodes_to_preserve``): feeds, fetches,
    their producers, targets. A preserved node may be rewritten in place (same name, same
    value), as when a chain ending in a fetched node is simplified."""
    evaluate: ConstantEvaluator | None = None
    """None: no constant can be evaluated, so constant folding does nothing."""
    device_types: tuple[str, ...] = ()
    """The session's device types, in placement order: fusions are made only where the
    device the nodes would go to has a kernel for the fused op."""
    max_constant_bytes: int = DEFAULT_MAX_CONSTANT_BYTES
    notes: list[str] = field(default_factory=list)
    """What the running pass did, one line per rewrite (the meta-optimizer resets it)."""

    def note(self, message: str) -> None:
        self.notes.append(message)


class GraphPass(abc.ABC):
    """One rewrite of a step graph. Subclasses set ``name`` (what ``SessionConfig.
    disabled_passes`` and reports use) and implement ``run``."""

    name: ClassVar[str] = ""
    frame_safe: ClassVar[bool] = False
    """Whether the pass may rewrite nodes inside loop frames (most leave them alone). The
    built-in passes check frames themselves (``analysis.may_rewrite``); a plugin's pass
    that is not frame-safe and changes a frame node anyway is skipped by the
    meta-optimizer, which compares each frame node before and after it."""

    @abc.abstractmethod
    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        """The rewritten graph, or ``graph`` itself when nothing changed. Must not change
        what any preserved node computes, beyond float reassociation."""

    def __repr__(self) -> str:
        return f"<graph pass {self.name!r}>"
