"""``kernloom.plugin.on_inter_op_worker``: True inside a kernel that runs on a session's
inter-op worker, False on the caller's thread. Two kernels that wait for each other at a
barrier must run at once, so one of them is on a worker (a graph of two independent
expensive nodes, ``inter_op_threads=2``)."""

from __future__ import annotations

import threading

import numpy as np

import kernloom as kl
import kernloom.plugin as klp


def barrier_plugin(seen: list[tuple[str, bool]], barrier: threading.Barrier) -> object:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()

            def meet(ctx: klp.OpKernelContext) -> None:
                seen.append((threading.current_thread().name, klp.on_inter_op_worker()))
                barrier.wait(timeout=10)
                x = ctx.input(0)
                np.square(x, out=ctx.allocate_output(0, x.shape))

            lib.kernel("Square", device="CPU", backend="numpy", label="meet")(meet)
            registry.register_kernels(lib)

    return Plugin()


def test_a_kernel_knows_whether_it_runs_on_an_inter_op_worker() -> None:
    from kernloom_cpu_numpy import plugin as cpu_plugin

    seen: list[tuple[str, bool]] = []
    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(barrier_plugin(seen, threading.Barrier(2)), name="meet")
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        with kl.kernel_label("meet"):
            a, b = kl.ops.square(x, name="a"), kl.ops.square(x, name="b")
        y = kl.ops.add_v2(a, b)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=2, graph_optimizer=False)) as sess:
        out = sess.run(y, {x: np.array([1, 2, 3], np.float32)})
    np.testing.assert_array_equal(out, [2, 8, 18])
    assert sorted(flag for _, flag in seen) == [False, True]
    caller = next(name for name, flag in seen if not flag)
    assert caller == threading.current_thread().name
    assert not klp.on_inter_op_worker()
