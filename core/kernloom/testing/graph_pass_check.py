"""``check_graph_pass``: does a plugin's graph pass keep every fetch's value?

A plugin that registers a pass (``Registrar.register_graph_pass``) calls this from its
tests on graphs its pass rewrites: the graph runs once with every pass and once with the
plugin's pass disabled, and the fetches must agree (to float reassociation: ``rtol``,
``atol``). It also checks that the pass ran and changed the graph, so that a test graph
the pass never matches cannot pass silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kernloom.graph.graph import Graph
from kernloom.graph.tensor import Tensor
from kernloom.registry import registry_of
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import SessionConfig

__all__ = ["check_graph_pass"]


def check_graph_pass(
    graph: Graph,
    pass_name: str,
    fetches: Sequence[Tensor | str],
    feeds: Mapping[Any, Any] | None = None,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    expect_change: bool = True,
) -> list[np.ndarray[Any, Any]]:
    """Run ``fetches`` of ``graph`` (its registry holding the plugin) with and without the
    pass named ``pass_name``; raise ``AssertionError`` naming the fetch that differs, or
    the pass if it did not change the graph (unless ``expect_change`` is false). Returns
    the values with the pass."""
    known = [p.graph_pass.name for p in registry_of(graph.registry).graph_passes]
    if pass_name not in known:
        raise AssertionError(
            f"no plugin of this graph's registry registers a graph pass named {pass_name!r}; "
            f"registered: {', '.join(known) or '(none)'}"
        )
    names = [f if isinstance(f, str) else f.name for f in fetches]
    with Session(graph, SessionConfig(inter_op_threads=1)) as session:
        report = session.explain(names, feeds)
        got = [np.asarray(v) for v in session.run(names, dict(feeds or {}))]
    config = SessionConfig(inter_op_threads=1, disabled_passes=(pass_name,))
    with Session(graph, config) as session:
        want = [np.asarray(v) for v in session.run(names, dict(feeds or {}))]
    if expect_change and f"  {pass_name} (round " not in report:
        raise AssertionError(
            f"graph pass {pass_name!r} did not change the graph for fetches {names}: give "
            f"check_graph_pass a graph the pass rewrites (or expect_change=False)"
        )
    for name, value, reference in zip(names, got, want, strict=True):
        if value.shape != reference.shape or value.dtype != reference.dtype:
            raise AssertionError(
                f"graph pass {pass_name!r} changed fetch {name!r}: {value.dtype}"
                f"{list(value.shape)} instead of {reference.dtype}{list(reference.shape)}"
            )
        try:
            np.testing.assert_allclose(value, reference, rtol=rtol, atol=atol)
        except AssertionError as exc:
            raise AssertionError(
                f"graph pass {pass_name!r} changed fetch {name!r}: {exc}"
            ) from None
    return got
