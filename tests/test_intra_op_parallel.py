"""Kernels that spread over the device's intra-op threads (``OpKernel.intra_op_parallel``)
run one at a time on the step's own thread where the device has several such threads:
two of them side by side on the inter-op pool would each claim every core (ResNet-50 on
two cores with torch's kernels: 25.1 ms at inter_op_threads=2 against 23.0 at 1, before;
``benchmarks/ONNX.md``). With one intra-op thread they are as expensive as any kernel, and
independent ones still run at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.runtime.graph_view import GraphView
from kernloom.runtime.straight_line import StraightLine

_threads: list[str] = []
_lock = threading.Lock()


def _spread(ctx: klp.OpKernelContext) -> None:
    """Stands for a BLAS or oneDNN call: records the thread it ran on. It takes at least
    0.5 ms (off the GIL), so that where it counts as expensive its measured cost keeps it
    so (``kernloom.runtime.kernel_costs``)."""
    with _lock:
        _threads.append(threading.current_thread().name)
    time.sleep(0.0005)
    x = ctx.input(0)
    out = ctx.allocate_output(0, x.shape)
    np.tanh(x @ x, out=out)


def _slow(ctx: klp.OpKernelContext) -> None:
    """An ordinary (expensive) kernel that takes a while: the pool's worker may take it,
    and what it makes ready then becomes ready on the worker. Records its thread too."""
    with _lock:
        _slow_threads.append(threading.current_thread().name)
    time.sleep(0.002)
    ctx.set_output(0, ctx.input(0) * 0.5)


_slow_threads: list[str] = []


class _SpreadClass(klp.OpKernel):
    def compute(self, ctx: klp.OpKernelContext) -> None:
        _spread(ctx)


def _plugin() -> object:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("Spread").input("x: float64").output("y: float64").shape_fn(
                lambda c: c.set_output(0, c.input_shape(0))
            )
            registry.register_op("Slow").input("x: float64").output("y: float64").shape_fn(
                lambda c: c.set_output(0, c.input_shape(0))
            )
            lib = klp.KernelLibrary()
            lib.kernel("Spread", device="CPU", intra_op_parallel=True)(_spread)
            lib.kernel("Slow", device="CPU")(_slow)
            registry.register_kernels(lib)

    return Plugin()


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    registry = make_registry()
    registry.register_plugin(_plugin(), name="spread")
    return registry


def _two_branches(
    registry: klp.Registry, w: np.ndarray, spreads: int, *, slow: bool = False
) -> tuple[kl.Graph, kl.Tensor, np.ndarray]:
    """Two branches of ``spreads`` Spread nodes each on the constant ``w``, each branch
    starting with a Slow node when ``slow``, added; and the value numpy gives."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.constant(w, name="w")
        branches = []
        for b in range(2):
            y = g.add_node("Slow", [x], name=f"slow{b}").outputs[0] if slow else x
            for i in range(spreads):
                y = g.add_node("Spread", [y], name=f"s{b}_{i}").outputs[0]
            branches.append(y)
        out = kl.ops.add(*branches, name="out")
    y = w * 0.5 if slow else w
    for _ in range(spreads):
        y = np.tanh(y @ y)
    return g, out, 2 * y


def _spread_branches(registry: klp.Registry) -> tuple[kl.Graph, kl.Tensor, np.ndarray]:
    return _two_branches(registry, np.random.default_rng(0).standard_normal((64, 64)) / 8, 3)


def _view(registry: klp.Registry, g: kl.Graph, intra: int) -> GraphView:
    options = klp.DeviceOptions(intra_op_threads=intra)
    device = registry.create_devices(options).lookup("CPU:0")
    return GraphView(g, device, lambda n: registry.create_kernel(n.to_node_def(), device))


def test_the_numpy_device_reports_its_intra_op_threads(registry: klp.Registry) -> None:
    for threads in (1, 3):
        options = klp.DeviceOptions(intra_op_threads=threads)
        assert registry.create_devices(options).lookup("CPU:0").intra_op_threads == threads


def test_such_kernels_count_as_inexpensive_only_with_several_intra_op_threads(
    registry: klp.Registry,
) -> None:
    g, _, _ = _spread_branches(registry)
    for intra, expensive, sequential in ((1, True, False), (2, False, True)):
        view = _view(registry, g, intra)
        spread = [item for item in view.items if item.node.op == "Spread"]
        assert {item.is_expensive for item in spread} == {expensive}
        schedule = StraightLine.compile(view)
        assert schedule is not None and schedule.sequential is sequential


@pytest.mark.parametrize(("intra", "workers_used"), [(2, False), (1, True)])
def test_the_branches_run_on_the_caller_s_thread_only_with_several_intra_op_threads(
    registry: klp.Registry, intra: int, workers_used: bool
) -> None:
    """With two intra-op threads every Spread node runs on the calling thread, the general
    executor (traced) included; with one, the inter-op pool takes a branch."""
    g, out, expected = _spread_branches(registry)
    config = kl.SessionConfig(inter_op_threads=2, intra_op_threads=intra, graph_optimizer=False)
    seen: set[bool] = set()
    with kl.Session(g, config) as session:
        for options in (None, kl.RunOptions(trace=True)):
            for _ in range(20):  # a worker takes a branch only if it wakes in time
                _threads.clear()
                np.testing.assert_allclose(session.run(out, options=options), expected)
                seen.update(name != threading.current_thread().name for name in _threads)
    assert (True in seen) is workers_used


def test_what_a_worker_makes_ready_goes_back_to_the_caller_s_thread(
    registry: klp.Registry,
) -> None:
    """Two branches each start with an expensive kernel, which the pool's worker may run;
    the Spread nodes it makes ready still run on the caller's thread (on the worker they
    would get one torch thread, and their team would fight the caller's for the cores:
    Inception v1 at inter_op_threads=2, 19.6-28.4 ms before, 15.2 after)."""
    w = np.random.default_rng(1).standard_normal((32, 32)) / 6
    g, out, expected = _two_branches(registry, w, 2, slow=True)
    config = kl.SessionConfig(inter_op_threads=2, intra_op_threads=2, graph_optimizer=False)
    caller = threading.current_thread().name
    slow_on_worker = False
    with kl.Session(g, config) as session:
        for options in (None, kl.RunOptions(trace=True)):
            for _ in range(20):
                _threads.clear()
                _slow_threads.clear()
                np.testing.assert_allclose(session.run(out, options=options), expected)
                assert _threads == [caller] * 4
                slow_on_worker |= any(name != caller for name in _slow_threads)
    assert slow_on_worker  # (the case in question happened)


def test_a_class_says_it_itself(registry: klp.Registry) -> None:
    lib = klp.KernelLibrary()
    with pytest.raises(kl.InvalidArgumentError, match="intra_op_parallel= is for kernel"):
        lib.kernel("Spread", device="CPU", intra_op_parallel=True)(_SpreadClass)
    lib.kernel("Spread", device="CPU")(_SpreadClass)  # (False: nothing to say)


def test_every_torch_cpu_kernel_is_marked() -> None:
    """The torch plugin's CPU kernels all run torch on the session's threads."""
    pytest.importorskip("torch")
    from kernloom_gpu_torch.kernels import build_library

    cpu: list[Any] = [f for k, f in build_library().entries if k.device_type == "CPU"]
    assert len(cpu) > 20
    assert all(f.intra_op_parallel for f in cpu)
