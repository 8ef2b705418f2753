"""numpy's BLAS runs a step's products on the session's intra-op threads, and the
caller's count comes back after ``Session.run``. The count a kernel sees is read inside
a kernel of the step, through threadpoolctl (an independent reader of OpenBLAS's own
``openblas_get_num_threads``)."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

import kernloom as kl
import kernloom.plugin as klp
from kernloom_cpu_numpy import plugin as cpu_plugin
from kernloom_cpu_numpy.blas_threads import BlasThreads

CONTROLLER = ThreadpoolController().select(user_api="blas")
pytestmark = pytest.mark.skipif(not CONTROLLER.lib_controllers, reason="numpy has no BLAS here")


def blas_count() -> int:
    return int(CONTROLLER.lib_controllers[0].get_num_threads())


def probing_registry(seen: list[int]) -> klp.Registry:
    """The CPU plugin and a ``Square`` kernel labelled ``probe`` that records the BLAS
    thread count while it runs (and computes a real product, as a MatMul would)."""

    class Probe:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()

            def square(ctx: klp.OpKernelContext) -> None:
                seen.append(blas_count())
                x = ctx.input(0)
                np.multiply(x, x, out=ctx.allocate_output(0, x.shape))

            lib.kernel("Square", device="CPU", backend="numpy", label="probe")(square)
            registry.register_kernels(lib)

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(Probe(), name="probe")
    return registry


@pytest.mark.parametrize("intra", [1, 3])
def test_a_step_multiplies_on_the_intra_op_threads_and_puts_the_count_back(intra: int) -> None:
    seen: list[int] = []
    g = kl.Graph(probing_registry(seen))
    with g.as_default():
        x = kl.placeholder(kl.float32, [4], name="x")
        with kl.kernel_label("probe"):
            y = kl.ops.square(x)
    before = blas_count()
    with kl.Session(g, kl.SessionConfig(intra_op_threads=intra)) as sess:
        np.testing.assert_array_equal(
            sess.run(y, {x: np.arange(4, dtype=np.float32)}), [0, 1, 4, 9]
        )
        assert blas_count() == before  # between runs: the caller's count
        sess.run(y, {x: np.ones(4, np.float32)})
    assert seen == [intra, intra]
    assert blas_count() == before


def test_the_count_is_left_alone_when_it_is_already_right() -> None:
    before = blas_count()
    threads = BlasThreads(before)
    assert threads.enter() is None  # nothing changed, nothing to put back
    threads.leave(None)
    assert blas_count() == before


def test_an_error_in_a_step_still_puts_the_count_back() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 2], name="x")
        y = kl.ops.mat_mul(x, kl.placeholder(kl.float32, None, name="w"))
    before = blas_count()
    with (
        kl.Session(g, kl.SessionConfig(intra_op_threads=1)) as sess,
        pytest.raises(kl.KernloomError),
    ):
        sess.run(y, {"x:0": np.ones((2, 2), np.float32), "w:0": np.ones((3, 3), np.float32)})
    assert blas_count() == before
