"""The kit's check of a plugin's graph passes: each pass registered for the device type
under test must keep what a graph returns (TensorFlow's PluggableDevice optimizers carry
the same duty). The graph, pinned to the device: chains of the probe op over inputs and
constants, a shared intermediate, a value used twice, a ``kl.cond`` over a constant
predicate -- what fusions, folding and simplification passes match -- run with the
plugin's pass alone and with no pass at all."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.dtypes import DType
from kernloom.errors import KernloomError
from kernloom.framework.node_def import NodeDef
from kernloom.graph import control_flow
from kernloom.graph.builder import apply_op, constant, placeholder
from kernloom.graph.graph import Graph
from kernloom.optimizer import BUILTIN_PASS_NAMES
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import SessionConfig
from kernloom.testing.conformance.executor_checks import _PROBES, Probe, find_probe
from kernloom.testing.conformance.failure import KitFailure
from kernloom.testing.conformance.plan import KitPlan

__all__ = ["check_graph_pass", "graph_pass_names"]


def graph_pass_names(plan: KitPlan) -> list[str]:
    """The plugins' passes for the device type under test."""
    return [
        p.graph_pass.name for p in plan.registry.graph_passes if p.device_type == plan.device_type
    ]


def _run(plan: KitPlan, graph: Graph, fetches: Any, feeds: Any, disabled: tuple[str, ...]) -> Any:
    config = SessionConfig(inter_op_threads=1, disabled_passes=disabled)
    with Session(graph, config, registry=plan.registry) as session:
        return session.run(fetches, feeds)


def check_graph_pass(plan: KitPlan, name: str) -> None:
    """The pass keeps what the graph returns, on a graph of each probe op the device has
    (Add, AddV2, Mul, Sub, Maximum, Minimum), with inputs holding NaN, infinities and -0.0
    and constants 0, 1 and 0.5 (what algebraic simplifications such as x * 0 -> 0 match)."""
    first = find_probe(plan)
    probes = [
        Probe(op, first.dtype, fn) for op, fn in _PROBES if _has_kernel(plan, op, first.dtype)
    ]
    for probe in probes or [first]:
        _check_with(plan, name, probe)


def _has_kernel(plan: KitPlan, op: str, dtype: DType) -> bool:
    if op not in plan.registry.ops:
        return False
    node = NodeDef(name="probe", op=op, attrs={"T": dtype})
    try:
        plan.registry.find_kernel(node, plan.device_type, plan.device.backend)
    except KernloomError:
        return False
    return True


def _check_with(plan: KitPlan, name: str, probe: Probe) -> None:
    dtype = probe.dtype
    np_dtype = dtype.numpy_dtype
    graph = Graph(plan.registry)
    with graph.as_default(), graph.device(plan.device.name):
        x = placeholder(dtype, [4, 6], name="x")
        y = placeholder(dtype, [4, 6], name="y")
        c = constant(np.full((4, 6), 0.5, np_dtype), name="c")
        zero = constant(np.zeros((4, 6), np_dtype), name="zero")
        one = constant(np.ones((4, 6), np_dtype), name="one")
        a = apply_op(probe.op, [x, c], {}, name="a")
        b = apply_op(probe.op, [a, y], {}, name="b")
        shared = apply_op(probe.op, [b, b], {}, name="shared")
        d = apply_op(probe.op, [shared, apply_op(probe.op, [c, c], {}, name="cc")], {}, name="d")
        taken = control_flow.cond(
            constant(True),
            lambda: apply_op(probe.op, [d, x], {}),
            lambda: apply_op("Identity", [d], {}),
        )
        out = apply_op(probe.op, [taken, shared], {}, name="out")
        with_zero = apply_op(probe.op, [x, zero], {}, name="with_zero")
        zero_with = apply_op(probe.op, [zero, y], {}, name="zero_with")
        with_one = apply_op(probe.op, [x, one], {}, name="with_one")
        self_op = apply_op(probe.op, [x, x], {}, name="self_op")
        # Fetched through Identity: a pass leaves the nodes it must preserve (fetches) alone.
        fetches = {
            "out": out,
            "shared": shared,
            **{
                n: apply_op("Identity", [t], {}, name=f"{n}_out")
                for n, t in (
                    ("with_zero", with_zero),
                    ("zero_with", zero_with),
                    ("with_one", with_one),
                    ("self_op", self_op),
                )
            },
        }
    xv, yv = probe.values(1, (4, 6)), probe.values(2, (4, 6))
    xv[0, :4] = np.array([np.nan, np.inf, -np.inf, -0.0], np_dtype)
    yv[1, :4] = np.array([np.inf, np.nan, -0.0, -np.inf], np_dtype)
    feeds = {x: xv, y: yv}
    where = f"graph pass {name!r} for {plan.device_type} ({probe.op} {dtype.name})"
    # The pass alone, on the graph as built: the built-in passes would otherwise rewrite
    # (fuse, fold) much of what it matches before it runs.
    others = tuple(
        n
        for n in (*BUILTIN_PASS_NAMES, *(p.graph_pass.name for p in plan.registry.graph_passes))
        if n != name
    )
    names = list(fetches)
    with np.errstate(all="ignore"):
        try:
            want = _run(plan, graph, list(fetches.values()), feeds, (*others, name))
        except KernloomError as exc:
            raise KitFailure(f"{where}: the graph fails even without the pass: {exc}") from exc
        try:
            got = _run(plan, graph, list(fetches.values()), feeds, others)
        except KernloomError as exc:
            raise KitFailure(f"{where}: the graph fails with the pass, not without: {exc}") from exc
    rtol = 2e-5 if dtype.itemsize == 4 else 1e-10
    for fetch, value, reference in zip(names, got, want, strict=True):
        try:
            np.testing.assert_allclose(value, reference, rtol=rtol, atol=rtol)
        except AssertionError as exc:
            raise KitFailure(f"{where} changed fetch {fetch!r}:{str(exc).rstrip()}") from None
