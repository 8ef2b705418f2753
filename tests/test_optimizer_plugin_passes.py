"""Plugins add graph passes for their device type (``Registrar.register_graph_pass``): the
meta-optimizer runs them after the built-in passes on graphs with nodes that would run on
that type; one that raises is reported and skipped."""

from __future__ import annotations

import numpy as np
import pytest
from optimizer_helpers import node_named, run_graph
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.plugin import GraphPass, GraphRewriter, PassContext


class SquareAsMul(GraphPass):
    """Rewrites Square(x) as Mul(x, x) under the same name."""

    name = "square_as_mul"
    replacement = "Mul"

    def run(self, graph: kl.Graph, ctx: PassContext) -> kl.Graph:
        if not any(n.op == "Square" for n in graph.nodes):
            return graph
        rewriter = GraphRewriter(graph)
        for node in graph.nodes:
            if node.op != "Square":
                rewriter.copy(node)
                continue
            x = rewriter.mapped(node.inputs[0])
            new = rewriter.add(self.replacement, [x, x], name=node.name, exact_name=True)
            rewriter.alias(node, new.outputs, new)
            ctx.note(f"rewrote {node.name}")
        return rewriter.finish(ctx.preserved)


class Broken(GraphPass):
    name = "broken"

    def run(self, graph: kl.Graph, ctx: PassContext) -> kl.Graph:
        raise RuntimeError("this pass has a bug")


def _registry(*passes: tuple[GraphPass, str]) -> klp.Registry:
    registry = make_registry(accel=True)

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registrar: klp.Registrar) -> None:
            for graph_pass, device_type in passes:
                registrar.register_graph_pass(graph_pass, device_type=device_type)

    registry.register_plugin(Plugin(), name="passes")
    return registry


def _graph(registry: klp.Registry) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        y = kl.ops.square(x, name="sq")
    return g, x, y


def test_a_plugin_pass_runs_for_its_device_type_and_is_reported() -> None:
    registry = _registry((SquareAsMul(), "CPU"))
    assert [p.graph_pass.name for p in registry.graph_passes] == ["square_as_mul"]
    g, x, y = _graph(registry)
    xv = np.array([1.0, -2.0, 3.0], np.float32)
    out, nodes = run_graph(g, y, {x: xv})
    np.testing.assert_array_equal(out, xv * xv)
    assert node_named(nodes, "sq").op == "Mul"
    with kl.Session(g) as sess:
        assert "square_as_mul (round 1): 3 -> 3 nodes" in sess.explain(y, {x: xv})
        assert "rewrote sq" in sess.explain(y, {x: xv})


def test_a_plugin_pass_for_another_device_type_does_not_run() -> None:
    registry = _registry((SquareAsMul(), "FAKE_ACCEL"))
    g, x, y = _graph(registry)
    _, nodes = run_graph(g, y, {x: np.ones(3, np.float32)}, device_filters=("CPU",))
    assert node_named(nodes, "sq").op == "Square"


def test_a_plugin_pass_can_be_disabled_by_name() -> None:
    registry = _registry((SquareAsMul(), "CPU"))
    g, x, y = _graph(registry)
    _, nodes = run_graph(g, y, {x: np.ones(3, np.float32)}, disabled_passes=("square_as_mul",))
    assert node_named(nodes, "sq").op == "Square"


def test_a_failing_plugin_pass_is_skipped_and_reported() -> None:
    registry = _registry((Broken(), "CPU"))
    g, x, y = _graph(registry)
    xv = np.array([2.0, 3.0, 4.0], np.float32)
    out, _ = run_graph(g, y, {x: xv})
    np.testing.assert_array_equal(out, xv * xv)
    with kl.Session(g) as sess:
        text = sess.explain(y, {x: xv})
    assert "broken (round 1)" in text
    assert "failed and skipped (plugin 'passes'): RuntimeError: this pass has a bug" in text


class FrameSafeSquareAsMul(SquareAsMul):
    name = "frame_safe_square_as_mul"
    frame_safe = True


def _loop_graph(registry: klp.Registry) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    """x squared three times in a while_loop, then once more outside it."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        _, looped = kl.while_loop(
            lambda i, v: i < 3, lambda i, v: (i + 1, kl.ops.square(v)), [0, x]
        )
        y = kl.ops.square(looped, name="sq")
    return g, x, y


@pytest.mark.parametrize("frame_safe", [False, True])
def test_a_plugin_pass_changing_a_loop_body_needs_frame_safe(frame_safe: bool) -> None:
    """A pass not declared frame_safe that changes a node inside a while_loop frame is
    skipped and reported (the graph stays as it was); one declared frame_safe applies."""
    graph_pass = FrameSafeSquareAsMul() if frame_safe else SquareAsMul()
    registry = _registry((graph_pass, "CPU"))
    g, x, y = _loop_graph(registry)
    xv = np.array([1.5, -1.0, 0.5], np.float32)
    out, nodes = run_graph(g, y, {x: xv})
    np.testing.assert_allclose(out, xv.astype(np.float64) ** 16, rtol=1e-6)
    assert node_named(nodes, "sq").op == ("Mul" if frame_safe else "Square")
    with kl.Session(g) as sess:
        text = sess.explain(y, {x: xv})
    skipped = "inside a while_loop frame, which a pass leaves alone unless it sets frame_safe"
    assert (skipped in text) is not frame_safe
    if not frame_safe:
        assert "skipped (plugin 'passes')" in text


@pytest.mark.parametrize(
    ("graph_pass", "device_type", "message"),
    [
        (SquareAsMul(), "cpu", "device type 'cpu' must be an upper-case name"),
        (SquareAsMul, "CPU", "is not a graph pass instance"),
        (object(), "CPU", "is not a graph pass instance"),
    ],
)
def test_bad_pass_registrations_fail_the_plugin_with_a_clear_error(
    graph_pass: object, device_type: str, message: str
) -> None:
    registry = make_registry()

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registrar: klp.Registrar) -> None:
            registrar.register_graph_pass(graph_pass, device_type=device_type)

    with pytest.raises(kl.PluginError, match=message):
        registry.register_plugin(Plugin(), name="bad_passes")


def test_two_passes_with_one_name_are_refused() -> None:
    registry = make_registry()

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registrar: klp.Registrar) -> None:
            registrar.register_graph_pass(SquareAsMul(), device_type="CPU")
            registrar.register_graph_pass(SquareAsMul(), device_type="CPU")

    with pytest.raises(kl.PluginError, match="a pass named 'square_as_mul' is already registered"):
        registry.register_plugin(Plugin(), name="twice")


class WrongSquare(SquareAsMul):
    """A buggy pass: Square(x) becomes x + x."""

    name = "wrong_square"
    replacement = "Add"


def test_check_graph_pass_accepts_a_pass_that_keeps_results() -> None:
    registry = _registry((SquareAsMul(), "CPU"))
    g, x, y = _graph(registry)
    xv = np.array([1.0, -2.0, 3.0], np.float32)
    (got,) = kl.testing.check_graph_pass(g, "square_as_mul", [y], {x: xv})
    np.testing.assert_array_equal(got, xv * xv)


def test_check_graph_pass_names_the_fetch_a_pass_breaks() -> None:
    registry = _registry((WrongSquare(), "CPU"))
    g, x, y = _graph(registry)
    with pytest.raises(AssertionError, match=r"graph pass 'wrong_square' changed fetch 'sq:0'"):
        kl.testing.check_graph_pass(g, "wrong_square", [y], {x: np.full(3, 3, np.float32)})


def test_check_graph_pass_refuses_a_graph_the_pass_does_not_touch() -> None:
    registry = _registry((SquareAsMul(), "CPU"))
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        y = kl.ops.neg(x)
    with pytest.raises(AssertionError, match="did not change the graph"):
        kl.testing.check_graph_pass(g, "square_as_mul", [y], {x: np.ones(3, np.float32)})
    with pytest.raises(AssertionError, match="registered: square_as_mul"):
        kl.testing.check_graph_pass(g, "squares", [y], {x: np.ones(3, np.float32)})


class AddAsSub(GraphPass):
    """A wrong pass for the kit to catch: every Add becomes a Sub."""

    name = "add_as_sub"

    def run(self, graph: kl.Graph, ctx: PassContext) -> kl.Graph:
        if not any(n.op == "Add" for n in graph.nodes):
            return graph
        rewriter = GraphRewriter(graph)
        for node in graph.nodes:
            if node.op != "Add" or node.name in ctx.preserved:
                rewriter.copy(node)
                continue
            a, b = (rewriter.mapped(t) for t in node.inputs)
            new = rewriter.add("Sub", [a, b], name=node.name, exact_name=True)
            rewriter.alias(node, new.outputs, new)
        return rewriter.finish(ctx.preserved)


def test_the_conformance_kit_checks_each_plugin_pass_of_the_device_type() -> None:
    from kernloom.testing.conformance.failure import KitFailure
    from kernloom.testing.conformance.graph_pass_checks import (
        check_graph_pass,
        graph_pass_names,
    )
    from kernloom.testing.conformance.items import kit_checks
    from kernloom.testing.conformance.plan import KitPlan

    registry = _registry((SquareAsMul(), "CPU"), (AddAsSub(), "CPU"), (Broken(), "FAKE_ACCEL"))
    plan = KitPlan.build(registry, "CPU")
    assert graph_pass_names(plan) == ["square_as_mul", "add_as_sub"]
    names = [entry.name for entry, _ in kit_checks(plan)]
    assert "graph-pass[square_as_mul]" in names and "graph-pass[add_as_sub]" in names
    assert "graph-pass[broken]" not in names  # registered for FAKE_ACCEL, not CPU
    check_graph_pass(plan, "square_as_mul")  # keeps results: no error
    changed = r"graph pass 'add_as_sub' for CPU \(Add float32\) changed fetch"
    with pytest.raises(KitFailure, match=changed):
        check_graph_pass(plan, "add_as_sub")


class Exits(GraphPass):
    """A pass that ends the process (``sys.exit``) or is interrupted (Ctrl-C)."""

    name = "exits"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def run(self, graph: kl.Graph, ctx: PassContext) -> kl.Graph:
        raise self.exc


def test_a_plugin_pass_calling_sys_exit_is_skipped_and_reported() -> None:
    """SystemExit from a plugin's pass is reported and skipped, as from its hook: a plugin
    must never end the host."""
    registry = _registry((Exits(SystemExit(7)), "CPU"))
    g, x, y = _graph(registry)
    xv = np.array([2.0, 3.0, 4.0], np.float32)
    out, _ = run_graph(g, y, {x: xv})
    np.testing.assert_array_equal(out, xv * xv)
    with kl.Session(g) as sess:
        text = sess.explain(y, {x: xv})
    assert "failed and skipped (plugin 'passes'): SystemExit: 7" in text


def test_a_keyboard_interrupt_in_a_plugin_pass_reaches_the_caller() -> None:
    registry = _registry((Exits(KeyboardInterrupt()), "CPU"))
    g, x, y = _graph(registry)
    with kl.Session(g) as sess, pytest.raises(KeyboardInterrupt):
        sess.run(y, {x: np.ones(3, np.float32)})


class Drops(GraphPass):
    """A buggy pass that drops every node ``drop`` says to (and whatever reads them)."""

    name = "drops"

    def __init__(self, drop: str) -> None:
        self.drop = drop

    def run(self, graph: kl.Graph, ctx: PassContext) -> kl.Graph:
        if self.drop == "everything":
            return kl.Graph(graph.registry)
        rewriter = GraphRewriter(graph)
        for node in graph.nodes:
            gone = node.op == self.drop or node.name == self.drop
            if gone or any(t.node.name == self.drop for t in node.inputs):
                continue
            rewriter.copy(node)
        return rewriter.finish(ctx.preserved)


class NewFetch(GraphPass):
    """A buggy pass that replaces the fetched Square with a Shape under the same name
    (present, but with another output dtype), dropping the _Retval that would refuse it."""

    name = "new_fetch"

    def run(self, graph: kl.Graph, ctx: PassContext) -> kl.Graph:
        rewriter = GraphRewriter(graph)
        for node in graph.nodes:
            if node.op == "_Retval":
                continue
            if node.name != "sq":
                rewriter.copy(node)
                continue
            new = rewriter.add(
                "Shape", [rewriter.mapped(node.inputs[0])], name="sq", exact_name=True
            )
            rewriter.alias(node, new.outputs, new)
        return rewriter.finish(ctx.preserved)


@pytest.mark.parametrize(
    ("graph_pass", "message"),
    [
        (Drops("sq"), "removed node 'sq', which it must keep (a fetched node's producer)"),
        (Drops("_Retval"), "removed node 'fetch/sq_0', which it must keep (a fetch)"),
        (Drops("everything"), "removed node 'feed/x_0', which it must keep (a feed)"),
        (
            NewFetch(),
            "changed the outputs of node 'sq', which it must keep (a fetched node's "
            "producer): op Square with outputs (float32) became op Shape with (int32)",
        ),
    ],
    ids=["fetched-node", "retval", "everything", "outputs"],
)
def test_a_plugin_pass_that_drops_a_preserved_node_is_skipped_and_reported(
    graph_pass: GraphPass, message: str
) -> None:
    """docs/optimizer.md: a pass keeps ``ctx.preserved``. One that does not is reported,
    naming the pass, the node and the plugin, and skipped (not a KeyError in the placer)."""
    registry = _registry((graph_pass, "CPU"))
    g, x, y = _graph(registry)
    xv = np.array([2.0, 3.0, 4.0], np.float32)
    out, nodes = run_graph(g, y, {x: xv})
    np.testing.assert_array_equal(out, xv * xv)
    assert node_named(nodes, "sq").op == "Square"
    with kl.Session(g) as sess:
        text = sess.explain(y, {x: xv})
    assert f"{graph_pass.name} (round 1): 3 -> 3 nodes" in text
    assert message in text
    assert "skipped (plugin 'passes')" in text
