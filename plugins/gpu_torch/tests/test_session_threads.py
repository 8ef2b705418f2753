"""torch's thread count in a CPU kernel: the session's ``intra_op_threads`` on the
caller's thread, one on an inter-op worker (each thread calling torch gets an OpenMP
team of its own; a second team would spin on the cores the first needs). Two kernels
meet at a barrier, so one of them runs on a worker."""

from __future__ import annotations

import threading

import numpy as np
import torch

import kernloom as kl
import kernloom.plugin as klp
from kernloom_cpu_numpy import plugin as cpu_plugin
from kernloom_gpu_torch.kernels._util import use_session_threads


def probe_plugin(seen: list[tuple[bool, int]], barrier: threading.Barrier) -> object:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()

            def meet(ctx: klp.OpKernelContext) -> None:
                use_session_threads(ctx)
                seen.append((klp.on_inter_op_worker(), torch.get_num_threads()))
                barrier.wait(timeout=10)
                x = ctx.input(0)
                np.square(x, out=ctx.allocate_output(0, x.shape))

            lib.kernel("Square", device="CPU", backend="numpy", label="meet")(meet)
            registry.register_kernels(lib)

    return Plugin()


def test_torch_uses_the_intra_op_threads_on_the_caller_and_one_on_a_worker() -> None:
    seen: list[tuple[bool, int]] = []
    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(probe_plugin(seen, threading.Barrier(2)), name="meet")
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        with kl.kernel_label("meet"):
            y = kl.ops.add_v2(kl.ops.square(x), kl.ops.square(x))
    config = kl.SessionConfig(inter_op_threads=2, intra_op_threads=3, graph_optimizer=False)
    saved = torch.get_num_threads()
    try:
        with kl.Session(g, config) as sess:
            np.testing.assert_array_equal(sess.run(y, {x: np.array([1, 2], np.float32)}), [2, 8])
    finally:
        torch.set_num_threads(saved)
    assert sorted(seen) == [(False, 3), (True, 1)]
