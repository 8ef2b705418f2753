"""Subnormals flushed to zero while the CPU device's kernels run (TensorFlow's
``ScopedFlushDenormal``), the caller's thread put back afterwards, and the opt-out.

The expected values are worked out by hand: 1e-40 is a float32 subnormal (the smallest
normal float32 is about 1.18e-38), so flushed it reads as 0, ``log(0)`` is ``-inf`` and
``0 * 1`` is 0; kept, ``log(1e-40)`` is ``-40 * ln(10) = -92.1034...``.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
from kernloom_cpu_numpy import denormals
from kernloom_cpu_numpy import plugin as cpu_plugin
from kernloom_cpu_numpy.denormals import FLUSH_BITS, FlushDenormals, read_mxcsr

pytestmark = pytest.mark.skipif(
    not denormals.FLUSH_SUPPORTED, reason=f"no flushing here: {denormals.UNSUPPORTED_REASON}"
)

SUBNORMAL = np.float32(1e-40)
CONTROL = ~0x3F & 0xFFFF
"""MXCSR without its sticky status flags (numpy clears and sets those on every loop)."""


def log_and_product(config: kl.SessionConfig | None = None) -> tuple[float, float]:
    graph = kl.Graph()
    with graph.as_default():
        x = kl.placeholder(kl.float32, [1], name="x")
        log = kl.ops.log(x, name="log")
        product = kl.ops.mul(x, kl.constant(np.float32(3.0)), name="product")
    with kl.Session(graph, config=config) as session:
        a, b = session.run([log, product], {x: np.array([SUBNORMAL])})
    return float(a[0]), float(b[0])


def test_kernels_see_subnormals_as_zero_as_tensorflows_do() -> None:
    log, product = log_and_product()
    assert log == -math.inf
    assert product == 0.0


def test_flush_denormals_false_keeps_ieee_subnormals() -> None:
    log, product = log_and_product(kl.SessionConfig(flush_denormals=False))
    assert log == pytest.approx(-40 * math.log(10), rel=1e-4)  # -92.1034
    assert product == pytest.approx(3e-40, rel=1e-3)


def test_the_callers_thread_is_put_back_after_run() -> None:
    before = read_mxcsr()
    assert before & FLUSH_BITS == 0  # pytest's thread computes with subnormals
    log_and_product()
    assert read_mxcsr() & CONTROL == before & CONTROL
    # and numpy after the run is IEEE again: log(1e-40) is finite
    assert np.isfinite(np.log(SUBNORMAL))


def test_a_caller_that_flushes_itself_still_flushes_after_run() -> None:
    with FlushDenormals():
        log_and_product(kl.SessionConfig(flush_denormals=False))
        assert read_mxcsr() & FLUSH_BITS == FLUSH_BITS
        assert np.float32(SUBNORMAL) * np.float32(1.0) == 0.0
    assert read_mxcsr() & FLUSH_BITS == 0


def test_steps_on_the_inter_op_pool_flush_too() -> None:
    # Two threads: nodes may run on pool threads, which enter the scope themselves.
    log, product = log_and_product(kl.SessionConfig(inter_op_threads=2))
    assert (log, product) == (-math.inf, 0.0)


def test_scope_keeps_rounding_mode_and_masks_and_restores_exactly() -> None:
    before = read_mxcsr()
    with FlushDenormals():
        inside = read_mxcsr()
        assert inside & FLUSH_BITS == FLUSH_BITS
        assert inside & ~FLUSH_BITS & CONTROL == before & CONTROL  # nothing else changed
        with FlushDenormals():  # nested: already flushing, left alone
            pass
        assert read_mxcsr() & FLUSH_BITS == FLUSH_BITS
    assert read_mxcsr() & CONTROL == before & CONTROL


def test_mxcsr_is_per_thread() -> None:
    # (A thread inherits its creator's MXCSR when it starts, so this one starts first.)
    seen: list[int] = []
    go = threading.Event()

    def read_later() -> None:
        go.wait()
        seen.append(read_mxcsr())

    worker = threading.Thread(target=read_later)
    worker.start()
    with FlushDenormals():
        go.set()
        worker.join()
    assert seen[0] & FLUSH_BITS == 0


def test_the_device_says_whether_it_flushes() -> None:
    with (
        kl.Session(kl.Graph()) as on,
        kl.Session(kl.Graph(), config=kl.SessionConfig(flush_denormals=False)) as off,
    ):
        assert "subnormals flushed to zero" in _cpu_description(on)
        assert "IEEE subnormals (flush_denormals=False)" in _cpu_description(off)


def _cpu_description(session: kl.Session) -> str:
    return next(
        d.attributes.physical_device_desc for d in session.devices if d.device_type == "CPU"
    )


def test_the_torch_kernels_on_the_cpu_device_see_the_flag() -> None:
    torch = pytest.importorskip("torch")
    t = torch.tensor([1e-40, 1.0], dtype=torch.float32)
    with FlushDenormals():
        flushed = (t * 3).tolist()
    assert flushed[0] == 0.0  # DAZ/FTZ hold for torch's vectorised arithmetic too
    assert (t * 3).tolist()[0] == pytest.approx(3e-40, rel=1e-3)


def test_a_thread_with_only_one_of_the_two_bits_gets_exactly_that_back() -> None:
    before = read_mxcsr()
    ftz_only = (before & ~FLUSH_BITS) | 0x8000
    denormals._restore(ftz_only)  # as a library that sets FTZ alone would leave it
    try:
        log_and_product()
        assert read_mxcsr() & CONTROL == ftz_only & CONTROL
    finally:
        denormals._restore(before)
    assert read_mxcsr() & FLUSH_BITS == 0


def test_at_step_end_runs_once_on_the_step_s_thread_before_the_flag_is_put_back() -> None:
    """``NumpyCPUDevice.at_step_end``: a kernel library that gave threads of its own the
    step's setting (the torch plugin's OpenMP team) gives them theirs back there. The
    callback runs once, at the end of the step that asked, on that step's thread, while
    the thread still flushes; a step that does not ask does not run it again."""
    seen: list[tuple[str, int]] = []

    def ask(ctx: klp.OpKernelContext) -> None:
        def callback() -> None:
            seen.append((threading.current_thread().name, read_mxcsr() & FLUSH_BITS))

        ctx.device.at_step_end(callback)  # type: ignore[attr-defined]
        ctx.set_output(0, ctx.input(0))

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()
            lib.kernel("Identity", device="CPU", backend="numpy", label="ask")(ask)
            registry.register_kernels(lib)

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(Plugin(), name="asks")
    graph = kl.Graph(registry)
    with graph.as_default():
        x = kl.placeholder(kl.float32, [1], name="x")
        with kl.kernel_label("ask"):
            y = kl.ops.identity(x, name="y")
        plain = kl.ops.neg(x, name="plain")
    before = read_mxcsr() & FLUSH_BITS
    one = np.ones(1, np.float32)
    with kl.Session(graph, config=kl.SessionConfig(inter_op_threads=1)) as session:
        session.run(y, {x: one})
        assert seen == [(threading.current_thread().name, FLUSH_BITS)]
        session.run(plain, {x: one})
        assert len(seen) == 1
        session.run(y, {x: one})
        assert len(seen) == 2
    assert read_mxcsr() & FLUSH_BITS == before
