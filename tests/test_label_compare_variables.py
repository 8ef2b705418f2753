"""``Session.compare_labels`` on a session with variables: both variants run with the
session's variable values as they are now (not the initializers', not none at all), and
the session's own variables are what they were after the comparison, even where the
fetches assign them."""

from __future__ import annotations

import numpy as np
import pytest
from test_label_compare import _plus_half_plugin

import kernloom as kl
import kernloom.plugin as klp


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    """The numpy CPU plugin and a Relu labelled 'plus_half' that is off by exactly 0.5."""
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(_plus_half_plugin(), name="halves")
    return registry


X = np.array([[1.0, 2.0, 4.0], [0.5, 1.0, 8.0]], np.float32)
W_INIT = np.eye(3, dtype=np.float32) * 4
W_NOW = np.eye(3, dtype=np.float32) * 2


def test_the_variants_run_with_the_sessions_current_variable_values(
    registry: klp.Registry,
) -> None:
    graph = kl.Graph(registry)
    with graph.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        w = kl.Variable(W_INIT, name="w")
        y = kl.ops.relu(kl.ops.mat_mul(x, w.value(), name="mm"), name="act")
        init = kl.variables_initializer()
        set_now = w.assign(W_NOW)
    with kl.Session(graph) as session:
        session.run(init)
        session.run(set_now)  # trained: the value is no longer the initializer's
        result = session.compare_labels(y, {x: X}, labels={"Relu": "plus_half"}, runs=3)
        # The session's variable and devices are as they were; it still runs.
        np.testing.assert_array_equal(session.run(w.value()), W_NOW)
        np.testing.assert_array_equal(session.run(y, {x: X}), np.maximum(X @ W_NOW, 0))
    (node,) = result.nodes
    assert (node.node, node.label) == ("act", "plus_half")
    assert node.max_abs == 0.5 and result.fetch_max_abs == 0.5
    # relu(X @ W_NOW) is 2 * X: its smallest element is 1.0 (with the initializer's 4 * eye
    # it would be 2.0, and the relative difference 0.25).
    assert node.max_rel == pytest.approx(0.5 / 1.0)
    assert result.fetch_max_rel == pytest.approx(0.5 / 1.0)


def test_a_fetch_that_assigns_changes_the_copies_not_the_sessions_variable(
    registry: klp.Registry,
) -> None:
    graph = kl.Graph(registry)
    with graph.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        w = kl.Variable(W_INIT, name="w")
        stepped = w.assign_add(np.eye(3, dtype=np.float32))  # every run adds eye to w
        y = kl.ops.relu(kl.ops.mat_mul(x, stepped, name="mm"), name="act")
        init = kl.variables_initializer()
    with kl.Session(graph) as session:
        session.run(init)
        result = session.compare_labels(y, {x: X}, labels={"Relu": "plus_half"}, runs=4)
        np.testing.assert_array_equal(session.run(w.value()), W_INIT)
    # Each variant assigns its own copy, run for run alike: the fetches compared are of
    # the same run number in each, so they differ only by the label's 0.5.
    assert result.fetch_max_abs == 0.5
    assert result.nodes[0].max_abs == 0.5


def test_a_variable_never_initialised_is_still_named() -> None:
    graph = kl.Graph()
    with graph.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        w = kl.Variable(W_INIT, name="w")
        y = kl.ops.mat_mul(x, w.value(), name="mm")
    with (
        kl.Session(graph) as session,
        pytest.raises(kl.KernelArgumentError, match="'w' was never initialised"),
    ):
        session.compare_labels(y, {x: X}, labels={"MatMul": "einsum"}, runs=1)


def test_a_closed_session_says_so(registry: klp.Registry) -> None:
    graph = kl.Graph(registry)
    with graph.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        y = kl.ops.relu(x, name="act")
    session = kl.Session(graph)
    session.close()
    with pytest.raises(kl.KernloomError, match="this session is closed"):
        session.compare_labels(y, {x: X}, labels={"Relu": "plus_half"}, runs=1)
