"""Every device type a factory registers gets Const, Identity, NoOp, Placeholder, _Send/_Recv,
_Arg/_Retval and the control-flow kernels without any call from its plugin (issue 17)."""

from __future__ import annotations

import types

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import FakeDeviceFactory

ACME0 = "/job:localhost/replica:0/task:0/device:ACME:0"
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
INDEPENDENT = {
    "Const",
    "Identity",
    "IdentityN",
    "Assert",
    "NoOp",
    "Placeholder",
    "_Send",
    "_Recv",
    "_Arg",
    "_Retval",
    "Switch",
    "Merge",
    "Enter",
    "Exit",
    "NextIteration",
    "LoopCond",
}


def acme_plugin(*, own_identity: bool = False) -> types.SimpleNamespace:
    """A vendor's plugin as the README teaches it: a factory and one kernel, nothing else."""

    def add(ctx: klp.OpKernelContext) -> None:
        x, y = ctx.input(0), ctx.input(1)
        np.add(x, y, out=ctx.allocate_output(0, np.broadcast_shapes(x.shape, y.shape)))

    def identity_times_ten(ctx: klp.OpKernelContext) -> None:
        x = ctx.input(0)
        np.multiply(x, 10, out=ctx.allocate_output(0, x.shape))

    @klp.hookimpl
    def kernloom_register(registry: klp.Registrar) -> None:
        registry.register_device_factory("ACME", FakeDeviceFactory("ACME"), priority=100)
        lib = klp.KernelLibrary()
        lib.kernel("Add", device="ACME", type_constraints={"T": [kl.float32]})(add)
        if own_identity:
            lib.kernel("Identity", device="ACME")(identity_times_ten)
        registry.register_kernels(lib)

    return types.SimpleNamespace(kernloom_register=kernloom_register, KERNLOOM_API=">=1.0,<2")


def registry(**options: bool) -> klp.Registry:
    from kernloom_cpu_numpy import plugin as cpu_plugin

    reg = klp.Registry()
    reg.register_plugin(cpu_plugin, name="cpu_numpy")
    reg.register_plugin(acme_plugin(**options), name="acme")
    return reg


def test_a_new_device_type_gets_every_device_independent_kernel() -> None:
    reg = registry()
    on_acme = {r.kernel_def.op for r in reg.kernels.kernels() if r.kernel_def.device_type == "ACME"}
    assert on_acme == INDEPENDENT | {"Add"}
    core = [r for r in reg.kernels.kernels() if r.kernel_def.op == "_Recv"]
    assert {r.kernel_def.device_type for r in core} == {"CPU", "ACME"}
    assert all(r.origin.plugin == "kernloom" and r.kernel_def.priority == -1 for r in core)


def test_a_graph_mixing_cpu_and_the_new_device_runs_with_its_copies_counted() -> None:
    g = kl.Graph(registry())
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        y = kl.ops.add(x, kl.constant(np.ones(3, np.float32)), name="y")  # ACME: has Add
        z = kl.ops.tanh(y, name="z")  # CPU: ACME has no Tanh
    metadata = kl.RunMetadata()
    with kl.Session(g) as sess:
        out = sess.run(z, {x: np.arange(3, dtype=np.float32)}, run_metadata=metadata)
    np.testing.assert_allclose(out, np.tanh(np.arange(3) + 1.0), rtol=1e-6)
    assert metadata.placement is not None
    assert (metadata.placement["y"], metadata.placement["z"]) == (ACME0, CPU0)
    assert metadata.copies.get((ACME0, CPU0)) == 1  # y crosses to the CPU's Tanh
    assert metadata.bytes_copied.get((ACME0, CPU0)) == 12


def test_a_plugin_kernel_overrides_the_core_one_by_priority() -> None:
    g = kl.Graph(registry(own_identity=True))
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        with kl.device("ACME:0"):
            y = kl.ops.identity(x, name="y")
    with kl.Session(g) as sess:
        np.testing.assert_array_equal(sess.run(y, {x: np.ones(2, np.float32)}), [10, 10])


def test_a_one_op_graph_runs_on_the_new_device() -> None:
    g = kl.Graph(registry())
    with g.as_default():
        a = kl.constant(np.ones(2, np.float32), name="a")
        s = kl.ops.add(a, a, name="s")
    metadata = kl.RunMetadata()
    with kl.Session(g) as sess:
        np.testing.assert_array_equal(sess.run(s, run_metadata=metadata), [2, 2])
    assert metadata.placement is not None
    assert metadata.placement["s"] == metadata.placement["a"] == ACME0


@pytest.mark.parametrize("loop", [False, True])
def test_control_flow_runs_on_the_new_device(loop: bool) -> None:
    g = kl.Graph(registry())
    with g.as_default(), kl.device("ACME:0"):
        x = kl.placeholder(kl.float32, [2], name="x")
        if loop:
            (result,) = kl.while_loop(
                lambda v: kl.ops.less(kl.ops.sum(v, [0]), 20.0), lambda v: [v + v], [x]
            )
        else:
            result = kl.cond(kl.constant(True), lambda: x + x, lambda: x)
    with kl.Session(g, config=kl.SessionConfig(allow_soft_placement=True)) as sess:
        out = sess.run(result, {x: np.ones(2, np.float32)})
    np.testing.assert_array_equal(out, [16, 16] if loop else [2, 2])


def test_loop_conds_direct_entry_passes_a_bool_scalar_and_declines_anything_else() -> None:
    """What a comparison gives (a 0-d bool array) is LoopCond's output as it is; a numpy
    bool scalar, a one-element vector or an int goes through ``compute``, which converts
    or explains."""
    from kernloom.framework.device_independent_kernels import loop_cond_direct

    flag = np.array(True)
    assert loop_cond_direct(0, flag) is flag
    for other in (np.bool_(True), np.array([True]), np.array(1, np.int32), True):
        assert loop_cond_direct(0, other) is NotImplemented
