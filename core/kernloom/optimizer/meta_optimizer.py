"""The meta-optimizer (grappler's ``MetaOptimizer``): runs the passes in a fixed order on a
step graph and reports, per pass, the nodes before and after, the time and what it did.

The order (``DEFAULT_PASSES``), and why:

1. the simplifying passes, repeated until a round changes nothing (at most
   ``max_rounds``), since each exposes work for the others: ``pruning`` (identities,
   unneeded nodes), ``batch_norm_folding`` (its constant expressions are folded next),
   ``constant_folding``, ``arithmetic`` (its combined constants are folded next round),
   ``cse``, ``dead_branch`` (predicates become constants by folding);
2. ``remapper``: MatMul/Conv2D + BiasAdd [+ activation] fusions, once;
3. ``elementwise_fusion``, once: it consumes what the remapper left;
4. ``pin_to_host``, once, last of the built-ins: small integer computations (run-time
   shapes) go to the CPU, where the accelerator's host-memory arguments read them;
5. the plugins' passes for the device types the graph's nodes would run on, in
   registration order.

``disabled`` names passes to skip (``SessionConfig.disabled_passes``); an unknown name is
an error listing the known ones.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, cast

from kernloom.errors import Hint, InvalidArgumentError, KernloomError, Setting, did_you_mean
from kernloom.graph.graph import Graph
from kernloom.graph.node import Node
from kernloom.optimizer.analysis import frame_nodes, node_signature
from kernloom.optimizer.arithmetic import ArithmeticSimplification
from kernloom.optimizer.batch_norm_folding import BatchNormFolding
from kernloom.optimizer.constant_folding import ConstantFolding
from kernloom.optimizer.cse import CommonSubexpressionElimination
from kernloom.optimizer.dead_branch import DeadBranchRemoval
from kernloom.optimizer.elementwise_fusion import ElementwiseFusion
from kernloom.optimizer.graph_pass import FUSED_FROM_ATTR, GraphPass, PassContext
from kernloom.optimizer.pin_to_host import PinToHost
from kernloom.optimizer.placement_hint import likely_device_type
from kernloom.optimizer.pruning import Pruning
from kernloom.optimizer.remapper import Remapper
from kernloom.registrar import GraphPassRegistration as PluginPass

__all__ = [
    "BUILTIN_PASS_NAMES",
    "DEFAULT_PASSES",
    "MetaOptimizer",
    "OptimizerReport",
    "PassRecord",
    "PluginPass",
    "check_pass_names",
]

SIMPLIFYING: Final[tuple[GraphPass, ...]] = (
    Pruning(),
    BatchNormFolding(),
    ConstantFolding(),
    ArithmeticSimplification(),
    CommonSubexpressionElimination(),
    DeadBranchRemoval(),
)
FUSING: Final[tuple[GraphPass, ...]] = (Remapper(), ElementwiseFusion(), PinToHost())
DEFAULT_PASSES: Final = (*SIMPLIFYING, *FUSING)
BUILTIN_PASS_NAMES: Final = tuple(p.name for p in DEFAULT_PASSES)


@dataclass(frozen=True, slots=True)
class PassRecord:
    name: str
    round: int
    nodes_before: int
    nodes_after: int
    seconds: float
    notes: tuple[str, ...]
    changed: bool


@dataclass
class OptimizerReport:
    """What the optimizer did to one step graph, pass by pass."""

    records: list[PassRecord] = field(default_factory=list)
    disabled: tuple[str, ...] = ()
    enabled: bool = True
    fused: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Each node of the result that replaces several of the user's: their names."""

    @property
    def nodes_before(self) -> int:
        return self.records[0].nodes_before if self.records else 0

    @property
    def nodes_after(self) -> int:
        return self.records[-1].nodes_after if self.records else 0

    def explain(self) -> str:
        if not self.enabled:
            return "Graph optimizer: off"
        seconds = sum(r.seconds for r in self.records)
        lines = [
            f"Graph optimizer: {self.nodes_before} -> {self.nodes_after} nodes in "
            f"{seconds * 1e3:.2f} ms"
            + (f" (disabled: {', '.join(self.disabled)})" if self.disabled else "")
        ]
        for r in self.records:
            if not r.changed and not r.notes:
                continue
            lines.append(
                f"  {r.name} (round {r.round}): {r.nodes_before} -> {r.nodes_after} nodes, "
                f"{r.seconds * 1e3:.2f} ms"
            )
            lines += [f"    {note}" for note in r.notes]
        if len(lines) == 1:
            lines.append("  no pass changed the graph")
        if self.fused:
            lines.append("  fused nodes:")
            lines += [f"    {name} <- {', '.join(parts)}" for name, parts in self.fused.items()]
        return "\n".join(lines)


def check_pass_names(names: Iterable[str], plugin_passes: Sequence[PluginPass] = ()) -> None:
    known = [*BUILTIN_PASS_NAMES, *(p.graph_pass.name for p in plugin_passes)]
    for name in names:
        if name not in known:
            raise InvalidArgumentError(
                f"no graph pass is named {name!r}; passes: {', '.join(known)}."
                + did_you_mean(name, known),
                hint=Hint("(asked for by {given})", given=Setting("disabled_pass", value=name)),
            )


class MetaOptimizer:
    """Runs the built-in passes, then the plugins', on one step graph."""

    def __init__(
        self,
        *,
        disabled: Iterable[str] = (),
        plugin_passes: Sequence[PluginPass] = (),
        max_rounds: int = 3,
    ) -> None:
        self.disabled = tuple(disabled)
        check_pass_names(self.disabled, plugin_passes)
        self.plugin_passes = tuple(plugin_passes)
        self.max_rounds = max_rounds

    def optimize(self, graph: Graph, ctx: PassContext) -> tuple[Graph, OptimizerReport]:
        report = OptimizerReport(disabled=self.disabled)
        simplifying = [p for p in SIMPLIFYING if p.name not in self.disabled]
        for round_ in range(1, self.max_rounds + 1):
            changed = False
            for graph_pass in simplifying:
                graph, did = self._run_builtin(graph_pass, graph, ctx, report, round_)
                changed = changed or did
            if not changed:
                break
        for graph_pass in FUSING:
            if graph_pass.name not in self.disabled:
                graph, _ = self._run_builtin(graph_pass, graph, ctx, report, 1)
        if self.plugin_passes:
            types = {likely_device_type(n, ctx) for n in graph.nodes}
            for plugin_pass in self.plugin_passes:
                if plugin_pass.graph_pass.name in self.disabled:
                    continue
                if plugin_pass.device_type in types:
                    graph = self._run_plugin_pass(plugin_pass, graph, ctx, report)
        for node in graph.nodes:
            parts = node.attrs.get(FUSED_FROM_ATTR)
            if parts:
                report.fused[node.name] = tuple(map(str, parts))
        return graph, report

    def _run_plugin_pass(
        self, plugin_pass: PluginPass, graph: Graph, ctx: PassContext, report: OptimizerReport
    ) -> Graph:
        """A plugin's pass: one that raises (``SystemExit`` included: a plugin must never
        end the host; ``KeyboardInterrupt`` reaches the caller), returns something else
        than a graph, removes or changes a node it must keep (``ctx.preserved``: feeds,
        fetches, their producers, targets) or (not declared ``frame_safe``) changes a node
        inside a ``while_loop`` frame is reported and skipped (the graph stays as it
        was), never fatal to the run."""
        graph_pass = plugin_pass.graph_pass
        frames = {} if graph_pass.frame_safe else _frame_signatures(graph)
        result: object
        try:
            result = cast(object, self._run(graph_pass, graph, ctx, report, 1)[0])
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            # SystemExit too, as from a plugin's hook (plugin_loader.run_hook).
            why = f"failed and skipped (plugin {plugin_pass.plugin!r}): {type(exc).__name__}: {exc}"
            report.records.append(_skipped(graph_pass, graph, 0.0, why))
            return graph
        if not isinstance(result, Graph):
            why = (
                f"returned {type(result).__name__}, not a Graph; skipped (plugin "
                f"{plugin_pass.plugin!r})"
            )
        elif result is not graph and (broken := _broken_preserved(graph, result, ctx.preserved)):
            why = (
                f"{broken}; a pass keeps every node in ctx.preserved, with its outputs; "
                f"skipped (plugin {plugin_pass.plugin!r})"
            )
        elif frames and result is not graph and (touched := _first_changed(frames, result)):
            why = (
                f"changed node {touched!r} inside a while_loop frame, which a pass leaves "
                f"alone unless it sets frame_safe = True; skipped (plugin {plugin_pass.plugin!r})"
            )
        else:
            return result
        report.records[-1] = _skipped(graph_pass, graph, report.records[-1].seconds, why)
        return graph

    def _run_builtin(
        self,
        graph_pass: GraphPass,
        graph: Graph,
        ctx: PassContext,
        report: OptimizerReport,
        round_: int,
    ) -> tuple[Graph, bool]:
        """A built-in pass; one whose rewrite cannot be built is skipped (the graph stays
        as it was), never fatal to the run (grappler's meta-optimizer does the same). A
        rewrite can make an input constant whose consumer's shape inference then finds an
        error (a ``Reshape`` to a materialized shape its input cannot take, perhaps in a
        branch that never runs): the graph as built reports that when, and only if, the
        node runs."""
        started = time.perf_counter()
        try:
            return self._run(graph_pass, graph, ctx, report, round_)
        except KernloomError as exc:
            why = f"failed and skipped: {type(exc).__name__}: {exc}"
            seconds = time.perf_counter() - started
            report.records.append(
                PassRecord(graph_pass.name, round_, len(graph), len(graph), seconds, (why,), False)
            )
            return graph, False

    def _run(
        self,
        graph_pass: GraphPass,
        graph: Graph,
        ctx: PassContext,
        report: OptimizerReport,
        round_: int,
    ) -> tuple[Graph, bool]:
        ctx.notes = []
        before = len(graph)
        started = time.perf_counter()
        result = graph_pass.run(graph, ctx)
        seconds = time.perf_counter() - started
        changed = result is not graph
        after = len(result) if isinstance(result, Graph) else before
        report.records.append(
            PassRecord(graph_pass.name, round_, before, after, seconds, tuple(ctx.notes), changed)
        )
        return result, changed


def _skipped(graph_pass: GraphPass, graph: Graph, seconds: float, why: str) -> PassRecord:
    """The record of a plugin's pass whose result was not used: the graph unchanged."""
    return PassRecord(graph_pass.name, 1, len(graph), len(graph), seconds, (why,), False)


def _broken_preserved(graph: Graph, result: Graph, preserved: frozenset[str]) -> str | None:
    """What ``result`` lost of the nodes ``graph`` had to keep (the first, in graph
    order): removed, or with other outputs (count, dtypes; for ``_Arg`` and ``_Retval``,
    another op), or None when it kept them all."""
    for before in graph.nodes:
        if before.name not in preserved:
            continue
        if before.name not in result:
            return f"removed node {before.name!r}, which it must keep ({_role(graph, before)})"
        after = result.node(before.name)
        was = [t.dtype.name for t in before.outputs]
        now = [t.dtype.name for t in after.outputs]
        if was != now or (before.op in ("_Arg", "_Retval") and after.op != before.op):
            return (
                f"changed the outputs of node {before.name!r}, which it must keep "
                f"({_role(graph, before)}): op {before.op} with outputs ({', '.join(was)}) "
                f"became op {after.op} with ({', '.join(now)})"
            )
    return None


def _role(graph: Graph, node: Node) -> str:
    """Why the run needs ``node`` (for the message of a pass that lost it)."""
    if node.op == "_Arg":
        return "a feed"
    if node.op == "_Retval":
        return "a fetch"
    for other in graph.nodes:
        if other.op == "_Retval" and other.inputs and other.inputs[0].node.name == node.name:
            return "a fetched node's producer"
    return "a target"


def _frame_signatures(graph: Graph) -> dict[str, tuple[object, ...]]:
    """What each node inside a loop frame is (``node_signature``), by name."""
    by_name = {n.name: n for n in graph.nodes}
    return {name: node_signature(by_name[name]) for name in frame_nodes(graph)}


def _first_changed(frames: dict[str, tuple[object, ...]], graph: Graph) -> str | None:
    """The first frame node (by name) ``graph`` removed or changed, or None."""
    after = {n.name: n for n in graph.nodes}
    for name in sorted(frames):
        node = after.get(name)
        if node is None or node_signature(node) != frames[name]:
            return name
    return None
