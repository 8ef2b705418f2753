"""Test ops for the executor and session: kernels that fail, hang or finish late."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kernloom as kl
import kernloom.plugin as klp
import kernloom.testing

NEVER_FINISHES_STARTED = threading.Event()
"""Set when a ``NeverFinishes`` kernel starts: a test cancels after that, not after a fixed
time (compiling the session can outlast any fixed time on a loaded machine)."""


class NeverFinishes(klp.AsyncOpKernel):
    """Starts and never calls ``done``: only a deadline or a cancellation ends the step."""

    is_expensive = False

    def compute_async(self, ctx: klp.OpKernelContext, done: Callable[[], None]) -> None:
        NEVER_FINISHES_STARTED.set()


class FinishesLater(klp.AsyncOpKernel):
    """Calls ``done`` from another thread after ``delay_s`` (a device completing work)."""

    is_expensive = False

    def compute_async(self, ctx: klp.OpKernelContext, done: Callable[[], None]) -> None:
        x = ctx.input(0)
        delay = float(ctx.attr("delay_s"))

        def later() -> None:
            time.sleep(delay)
            out = ctx.allocate_output(0, x.shape)
            np.multiply(x, 2, out=out)
            done()

        threading.Thread(target=later, daemon=True).start()


def run_workers(
    worker: Callable[[int], None], count: int, timeout_s: float = 60
) -> list[BaseException]:
    """Run ``worker(k)`` for k in range(count) on threads of their own, at once; what
    they raised, and a TimeoutError for each still running after ``timeout_s``."""
    errors: list[BaseException] = []

    def guarded(k: int) -> None:
        try:
            worker(k)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    stuck = [k for k, thread in enumerate(threads) if thread.is_alive()]
    return errors + [TimeoutError(f"worker {k} still running after {timeout_s} s") for k in stuck]


def fail_if_negative(ctx: klp.OpKernelContext) -> None:
    x = ctx.input(0)
    if (x < 0).any():
        raise ValueError("negative input")
    out = ctx.allocate_output(0, x.shape)
    out[...] = x


def faults_plugin() -> object:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("FailIfNegative").input("x: float32").output("y: float32")
            registry.register_op("NeverFinishes").input("x: float32").output("y: float32")
            (
                registry.register_op("FinishesLater")
                .input("x: float32")
                .output("y: float32")
                .attr("delay_s: float = 0.05")
            )
            lib = klp.KernelLibrary()
            lib.kernel("FailIfNegative", device="CPU")(fail_if_negative)
            lib.kernel("NeverFinishes", device="CPU")(NeverFinishes)
            lib.kernel("FinishesLater", device="CPU")(FinishesLater)
            registry.register_kernels(lib)

    return Plugin()


def make_registry(*, accel: bool = False, faults: bool = False) -> klp.Registry:
    """An isolated registry: the numpy CPU plugin, optionally FAKE_ACCEL and the test ops."""
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    if accel:
        registry.register_plugin(kl.testing.fake_accelerator_plugin(), name="fake_accel")
    if faults:
        registry.register_plugin(faults_plugin(), name="faults")
    return registry


def two_chains(
    registry: klp.Registry, n: int = 256, depth: int = 4
) -> tuple[kl.Graph, kl.Tensor, np.ndarray]:
    """Two independent chains of ``depth`` n x n MatMul+Tanh joined by an Add (work two
    inter-op threads can share), and the result computed in numpy."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float64)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.constant(w, name="w")
        chains = []
        for c in range(2):
            y = x
            for i in range(depth):
                y = kl.ops.tanh(kl.ops.mat_mul(y, x, name=f"mm{c}_{i}"))
            chains.append(y)
        out = kl.ops.add(*chains, name="out")
    y = w
    for _ in range(depth):
        y = np.tanh(y @ w)
    return g, out, 2 * y


def elementwise_chain(
    registry: klp.Registry, n: int, *, add_feed: bool = False
) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    """``n`` elementwise ops (Neg, then Tanh/Relu/Square/Sigmoid in turn) on a fed float32
    vector; with ``add_feed`` the result is added to the feed (a binary op at the end)."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None], name="x")
        y = kl.ops.neg(x)
        for i in range(n - 1):
            y = (kl.ops.tanh, kl.ops.relu, kl.ops.square, kl.ops.sigmoid)[i % 4](y)
        if add_feed:
            y = kl.ops.add(y, x)
    return g, x, y


def chain_reference(x: np.ndarray, n: int, *, add_feed: bool = False) -> np.ndarray:
    """``elementwise_chain``'s result computed in numpy (float64)."""
    y = -x.astype(np.float64)
    fns = (np.tanh, lambda v: np.maximum(v, 0), np.square, lambda v: 1 / (1 + np.exp(-v)))
    for i in range(n - 1):
        y = fns[i % 4](y)
    return y + x if add_feed else y


def spy_on_compute(monkeypatch: Any, *, op_names: bool = False) -> list[str]:
    """The nodes (their names, or ops with ``op_names``) that run through ``compute`` from
    now on: the interpreted and compiled lines' fallbacks for a declined direct entry and
    the node step's (``node_run.run_compute``, which the general rows call)."""
    from kernloom.runtime import compiled_line, node_run, straight_line

    seen: list[str] = []
    for module in (straight_line, compiled_line, node_run):
        original = module.run_compute

        def spy(
            ctx: Any, item: Any, given: list[Any], forward: bool = True, original: Any = original
        ) -> list[Any]:
            seen.append(item.signature.op_def.name if op_names else item.name)
            return original(ctx, item, given, forward)  # type: ignore[no-any-return]

        monkeypatch.setattr(module, "run_compute", spy)
    return seen


def run_tanh_mul_add(registry: klp.Registry, xv: Any, cv: Any, add: str = "Add") -> Any:
    """One ``_FusedElementwise`` node ``tanh(x) * c + x`` named ``f`` (``x`` fed, ``c`` a
    constant), run with the optimizer off; checked against float64 numpy and the feed left
    as it was. Returns the result."""
    kept = xv.copy()
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, list(xv.shape), name="x")
        expression = f"Tanh(i0); Mul(t0, i1); {add}(t1, i0)"
        y = g.add_node(
            "_FusedElementwise", [[x, kl.constant(cv)]], {"expression": expression}, name="f"
        ).outputs[0]
    with kl.Session(g, kl.SessionConfig(graph_optimizer=False, inter_op_threads=1)) as sess:
        got = sess.run(y, {x: xv})
    v = kept.astype(np.float64)
    np.testing.assert_allclose(got, np.tanh(v) * cv + v, rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(xv, kept)
    return got
