"""``Session.close(timeout_s)`` when a kernel ignores cancellation and never returns.

TensorFlow's ``DirectSession`` waits for such a kernel however long it takes. Here close
cancels the step, waits ``timeout_s``, and then raises ``DeadlineExceededError`` naming the
stuck node, op and device, without freeing anything that step uses: the kernel, once it
returns, still finds its variables and its device, and the session is released only
then. Nothing in these tests waits on a clock to decide anything: the kernel blocks on an
Event the test sets.
"""

from __future__ import annotations

import contextlib
import threading
import time
from functools import partial

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp

_entered = threading.Event()
_release = threading.Event()
_seen: list[str] = []
"""What the blocked kernel found once released: its variable and its device's memory."""


def _block(ctx: klp.OpKernelContext) -> None:
    """Blocks until the test releases it, ignoring cancellation; then checks that the
    session's variable and the device are still there under it."""
    _entered.set()
    assert _release.wait(60)
    _seen.append("variables: " + ",".join(ctx.resource_mgr.names()))
    out = ctx.allocate_output(0, ctx.input(0).shape)
    out[...] = ctx.input(0)
    _seen.append("allocated")


def _plugin() -> object:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("Block").input("x: float32").output("y: float32").shape_fn(
                lambda c: c.set_output(0, c.input_shape(0))
            )
            lib = klp.KernelLibrary()
            lib.kernel("Block", device="CPU")(_block)
            registry.register_kernels(lib)

    return Plugin()


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    registry = make_registry()
    registry.register_plugin(_plugin(), name="block")
    return registry


def _graph(registry: klp.Registry) -> tuple[kl.Graph, kl.Tensor, object]:
    from kernloom.graph.builder import apply_op

    g = kl.Graph(registry)
    with g.as_default():
        w = kl.Variable(np.full(2, 3.0, np.float32), name="w")
        blocked = apply_op("Block", [w.value()], {}, name="block")
        assert isinstance(blocked, kl.Tensor)
        y = blocked * 2.0
        init = kl.variables_initializer()
    return g, y, init


@pytest.mark.parametrize("threads", [1, 4])
def test_close_does_not_free_what_a_stuck_kernel_uses(registry: klp.Registry, threads: int) -> None:
    _entered.clear()
    _release.clear()
    _seen.clear()
    g, y, init = _graph(registry)
    session = kl.Session(g, kl.SessionConfig(inter_op_threads=threads))
    session.run(init)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            session.run(y)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        assert _entered.wait(30)
        with pytest.raises(kl.DeadlineExceededError) as info:
            session.close(timeout_s=0.1)
        message = str(info.value)
        assert "Session.close(timeout_s=0.1): 1 cancelled step(s) still running" in message
        assert "node 'block' (op Block) on /job:localhost/replica:0/task:0/device:CPU:0" in message
        assert "(kernel " in message and "thread " in message
        assert "released when those steps end" in message
        assert session.closed
        with pytest.raises(kl.KernloomError, match="this session is closed"):
            session.run(y)
        # Nothing was freed under the kernel: its variable is still there.
        assert "w" in ",".join(session.resource_mgr.names())
        session.close()  # a second close is a no-op, not a second wait
    finally:
        _release.set()
        runner.join(60)
    assert not runner.is_alive()
    assert _seen and _seen[0].startswith("variables: ") and "w" in _seen[0]
    assert _seen[1] == "allocated"
    (error,) = outcome
    assert isinstance(error, kl.CancelledError) and "session closed" in str(error)
    # Once the kernel returns the step ends, and the session releases what it held, on a
    # thread of its own (wait for that: the kernel may still be returning right now).
    waited = 0
    while session.resource_mgr.names() and waited < 6000:
        time.sleep(0.01)
        waited += 1
    assert session.resource_mgr.names() == []


def _run_quietly(session: kl.Session, fetch: kl.Tensor) -> None:
    with contextlib.suppress(kl.KernloomError):  # cancelled by the close
        session.run(fetch)


def test_a_stuck_close_in_a_with_block_that_raises_becomes_a_note(
    registry: klp.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _entered.clear()
    _release.clear()
    _seen.clear()
    g, y, init = _graph(registry)
    runner: threading.Thread | None = None
    caught: KeyError | None = None
    try:
        with kl.Session(g) as session:
            session.run(init)
            runner = threading.Thread(target=_run_quietly, args=(session, y))
            runner.start()
            assert _entered.wait(30)
            monkeypatch.setattr(session, "close", partial(kl.Session.close, session, timeout_s=0.1))
            raise KeyError("the caller's own error")
    except KeyError as exc:  # the caller's error, not the close's, is what propagates
        caught = exc
    finally:
        _release.set()
        if runner is not None:
            runner.join(60)
    assert caught is not None and caught.args == ("the caller's own error",)
    notes = getattr(caught, "__notes__", [])
    assert any("node 'block' (op Block)" in note for note in notes)
