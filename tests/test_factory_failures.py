"""A device factory that fails leaves out its device type only: CPU-only graphs still run,
a graph that asks for the type is told why, and strict mode makes it fatal (issue 19)."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing.fake_device import FakeDeviceFactory


class ExplodingFactory(klp.DeviceFactory):
    def __init__(self, result: Any = None) -> None:
        self.result = result

    def list_physical_devices(self) -> list[str]:
        return ["/physical_device:BOOM:0"]

    def create_devices(
        self, options: klp.DeviceOptions, name_prefix: str = klp.LOCAL_PREFIX
    ) -> list[klp.Device]:
        if self.result is None:
            raise RuntimeError("driver version mismatch")
        if self.result == "exit":  # a driver wrapper calling sys.exit()
            raise SystemExit(7)
        if self.result == "twice":  # the same device listed twice
            made = FakeDeviceFactory("BOOM").create_devices(options, name_prefix)
            return made + made
        return self.result  # type: ignore[no-any-return]


def boom_plugin(result: Any = None) -> types.SimpleNamespace:
    @klp.hookimpl
    def kernloom_register(registrar: klp.Registrar) -> None:
        registrar.register_device_factory("BOOM", ExplodingFactory(result), priority=500)

    return types.SimpleNamespace(kernloom_register=kernloom_register, KERNLOOM_API=">=1.0,<2")


def registry(result: Any = None, **settings: Any) -> klp.Registry:
    from kernloom.environment import PluginSettings
    from kernloom_cpu_numpy import plugin as cpu_plugin

    reg = klp.Registry(PluginSettings(**settings))
    reg.register_plugin(cpu_plugin, name="cpu_numpy")
    reg.register_plugin(boom_plugin(result), name="boom")
    return reg


def cpu_graph(reg: klp.Registry) -> tuple[kl.Graph, kl.Tensor]:
    g = kl.Graph(reg)
    with g.as_default():
        x = kl.constant(np.arange(3.0), name="x")
        y = kl.ops.add(x, x, name="y")
    return g, y


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (None, "failed to create BOOM devices: RuntimeError: driver version mismatch"),
        ("not a list", "returned 'not a list' from create_devices"),
        ([object()], "which is not a kernloom"),
        ("exit", "failed to create BOOM devices: SystemExit: 7"),
        ("twice", "created two devices named '/job:localhost/replica:0/task:0/device:BOOM:0'"),
    ],
    ids=["raises", "returns-garbage", "returns-a-non-device", "exits", "same-device-twice"],
)
def test_a_failing_factory_only_fails_graphs_that_need_its_type(result: Any, reason: str) -> None:
    reg = registry(result)
    g, y = cpu_graph(reg)
    with (
        pytest.warns(kl.KernloomPluginWarning, match="BOOM is left out") as caught,
        kl.Session(g) as sess,
    ):
        np.testing.assert_array_equal(sess.run(y), [0.0, 2.0, 4.0])
    assert reason in str(caught[0].message)
    # Warned once per registry: a second session is silent.
    with kl.Session(g) as sess:
        sess.run(y)
    h = kl.Graph(reg)
    with h.as_default(), kl.device("BOOM:0"):
        z = kl.ops.identity(kl.constant(1.0), name="z")
    with kl.Session(h) as sess, pytest.raises(kl.InvalidArgumentError) as info:
        sess.run(z)
    assert "requests device 'BOOM:0'" in str(info.value)
    assert "no BOOM device: " in str(info.value) and reason in str(info.value)


def test_strict_mode_makes_a_failing_factory_fatal() -> None:
    reg = registry(strict=True)
    g, y = cpu_graph(reg)
    with pytest.raises(kl.KernloomError, match="driver version mismatch"):
        kl.Session(g).run(y)


class ProbeFailsFactory(ExplodingFactory):
    """A factory whose ``unavailable_reason`` probe raises (``SystemExit`` too), and that
    finds no device."""

    def create_devices(
        self, options: klp.DeviceOptions, name_prefix: str = klp.LOCAL_PREFIX
    ) -> list[klp.Device]:
        return []

    def unavailable_reason(self) -> str | None:
        if self.result == "exit":
            raise SystemExit("probe died")
        raise RuntimeError("probe died")


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_a_factory_whose_availability_probe_fails_leaves_the_cpu_working(how: str) -> None:
    """Before, every Session of the registry failed (CPU-only graphs too) with the probe's
    RuntimeError, or the program ended with its SystemExit."""

    @klp.hookimpl
    def kernloom_register(registrar: klp.Registrar) -> None:
        registrar.register_device_factory("BOOM", ProbeFailsFactory(how), priority=500)

    from kernloom_cpu_numpy import plugin as cpu_plugin

    reg = klp.Registry()
    reg.register_plugin(cpu_plugin, name="cpu_numpy")
    plugin = types.SimpleNamespace(kernloom_register=kernloom_register, KERNLOOM_API=">=1.0,<2")
    reg.register_plugin(plugin, name="boom")
    g, y = cpu_graph(reg)
    with kl.Session(g) as sess:
        np.testing.assert_array_equal(sess.run(y), [0.0, 2.0, 4.0])
    h = kl.Graph(reg)
    with h.as_default(), kl.device("BOOM:0"):
        z = kl.ops.identity(kl.constant(1.0), name="z")
    with kl.Session(h) as sess, pytest.raises(kl.InvalidArgumentError) as info:
        sess.run(z)
    assert "its unavailable_reason() raised" in str(info.value)
