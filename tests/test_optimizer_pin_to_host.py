"""``pin_to_host``: a shape computed at run time on an accelerator runs on the CPU, so the
accelerator never waits to copy a few integers back (grappler's PinToHostOptimizer).

FAKE_ACCEL gets integer kernels here (a ``Shape`` whose output is host memory, as on a real
GPU, and int32 ``Mul``/``FloorDiv`` that read accelerator memory); its device counts every
copy, which is what the pass saves. References: numpy's reshape of the ReLU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import AccelArray

ACCEL = "/job:localhost/replica:0/task:0/device:FAKE_ACCEL:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
OFF = kl.SessionConfig(disabled_passes=("pin_to_host",))


def registry() -> klp.Registry:
    def shape(ctx: klp.OpKernelContext) -> None:
        ctx.allocate_output(0, (len(ctx.input(0).shape),))[...] = ctx.input(0).shape

    def integer(fn: Any) -> Any:
        def compute(ctx: klp.OpKernelContext) -> None:
            a, b = ctx.input(0), ctx.input(1)
            assert isinstance(a, AccelArray) and isinstance(b, AccelArray)
            ctx.allocate_output(0, np.broadcast_shapes(a.shape, b.shape)).data[...] = fn(
                a.data, b.data
            )

        return compute

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()
            ints = {"T": (kl.int32,)}
            accel = {"device": "FAKE_ACCEL", "backend": "fake"}
            lib.kernel("Shape", host_memory=["output"], **accel)(shape)
            lib.kernel("Mul", type_constraints=ints, **accel)(integer(np.multiply))
            lib.kernel("FloorDiv", type_constraints=ints, **accel)(integer(np.floor_divide))
            registry.register_kernels(lib)

    reg = make_registry(accel=True)
    reg.register_plugin(Plugin(), name="accel_integers")
    return reg


def reshaped_relu(
    rows: int | None = None, size: int = 3
) -> tuple[kl.Graph, kl.Tensor, kl.Tensor, dict[str, kl.Tensor]]:
    """relu(x) reshaped to a shape computed from x's own at run time: (s * 2) // 2."""
    g = kl.Graph(registry())
    with g.as_default():
        x = kl.placeholder(kl.float32, [rows, 3, 5], name="x")
        s = kl.ops.shape(x, name="s")
        twice = kl.ops.mul(s, kl.constant(np.full(size, 2, np.int32), name="two"), name="twice")
        back = kl.ops.floor_div(twice, kl.constant(np.full(size, 2, np.int32)), name="back")
        y = kl.ops.reshape(kl.ops.relu(x, name="r"), back, name="y")
    return g, x, y, {"twice": twice, "back": back}


def run(config: kl.SessionConfig | None, batch: int) -> tuple[Any, kl.RunMetadata, Any]:
    g, x, y, _ = reshaped_relu()
    feed = np.linspace(-1, 1, batch * 15, dtype=np.float32).reshape(batch, 3, 5)
    md = kl.RunMetadata()
    with kl.Session(g, config) as sess:
        got = sess.run(y, {x: feed}, run_metadata=md)
        accel = sess.devices.lookup("FAKE_ACCEL")
        copies = (accel.copies_to_device, accel.copies_to_host)
    np.testing.assert_array_equal(got, np.maximum(feed, 0))
    return md, copies, got


@pytest.mark.parametrize("batch", [1, 4])
def test_a_shape_computed_at_run_time_runs_on_the_cpu(batch: int) -> None:
    md, copies, _ = run(None, batch)
    assert md.placement is not None
    assert md.placement["twice"] == CPU and md.placement["back"] == CPU
    assert md.placement["two"] == CPU  # its constant goes with it
    assert md.placement["r"] == ACCEL and md.placement["y"] == ACCEL
    # Only the feed goes to the accelerator and only the fetch comes back: the shape
    # never crosses as accelerator memory.
    assert copies == (1, 1)


def test_without_the_pass_the_accelerator_copies_the_shape_both_ways() -> None:
    md, copies, _ = run(OFF, 2)
    assert md.placement is not None and md.placement["back"] == ACCEL
    assert copies[0] > 1 and copies[1] > 1  # the shape to the device, the result back


def test_the_report_names_the_pinned_nodes() -> None:
    g, x, y, _ = reshaped_relu()
    with kl.Session(g) as sess:
        report = sess.explain(y, {x: np.zeros((2, 3, 5), np.float32)})
    assert "pin_to_host" in report
    # (the two equal constants are one after cse)
    assert "pinned 3 small integer node(s) to the CPU: back, twice, two" in report


def test_a_node_the_user_placed_or_a_large_one_stays() -> None:
    g = kl.Graph(registry())
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3, 5], name="x")
        s = kl.ops.shape(x, name="s")
        with kl.device("FAKE_ACCEL"):
            kept = kl.ops.mul(s, kl.constant(np.full(3, 2, np.int32)), name="kept")
        big = kl.placeholder(kl.int32, [100], name="big")
        large = kl.ops.mul(big, kl.constant(np.full(100, 2, np.int32)), name="large")
    md = kl.RunMetadata()
    feeds = {x: np.zeros((2, 3, 5), np.float32), big: np.arange(100, dtype=np.int32)}
    with kl.Session(g) as sess:
        got_kept, got_large = sess.run([kept, large], feeds, run_metadata=md)
    np.testing.assert_array_equal(got_kept, [4, 6, 10])
    np.testing.assert_array_equal(got_large, 2 * np.arange(100))
    assert md.placement is not None
    assert md.placement["kept"] == ACCEL and md.placement["large"] == ACCEL


def test_a_cpu_only_session_is_left_alone() -> None:
    g = kl.Graph(make_registry())
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        y = kl.ops.reshape(x, kl.ops.mul(kl.ops.shape(x), kl.constant(np.ones(2, np.int32))))
    with kl.Session(g) as sess:
        report = sess.explain(y, {x: np.zeros((2, 3), np.float32)})
    assert "pin_to_host" not in report
