"""``--kernloom-plugin`` names the plugin whose device the kit checks, also where another
plugin's factory for the same type has the higher priority (CuPy's GPU shadows torch's
when both are installed: the kit refused to check torch's on an H100 with both)."""

from __future__ import annotations

import pytest
from plugin_helpers import Install

from kernloom.errors import KernloomError
from kernloom.framework.device import DeviceOptions
from kernloom.testing.conformance.plan import KitPlan
from kernloom.testing.conformance.selection import installed_registry

ACME_PLUGIN = """
lib = klp.KernelLibrary()

@lib.kernel("Neg", device="ACME", backend={backend!r}, type_constraints={{"T": ["float32"]}})
def neg(ctx):
    x = ctx.input(0)
    ctx.set_output(0, -x)

@klp.hookimpl
def kernloom_register(registry):
    registry.register_device_factory(
        "ACME",
        FakeDeviceFactory(
            "ACME", backend={backend!r}, count={count}, unavailable_reason={reason!r}
        ),
        priority={priority},
    )
    registry.register_kernels(lib)
"""


def _plugins(install: Install, low_reason: str | None = None) -> list[object]:
    return [
        install("acme_hi", ACME_PLUGIN.format(backend="hi", priority=200, count=1, reason=None)),
        install(
            "acme_lo",
            ACME_PLUGIN.format(
                backend="lo", priority=100, count=0 if low_reason else 1, reason=low_reason
            ),
        ),
    ]


def _backends(registry: object) -> set[str]:
    devices = registry.create_devices(DeviceOptions())  # type: ignore[attr-defined]
    return {d.attributes.backend for d in devices if d.device_type == "ACME"}


def test_the_named_plugins_factory_creates_the_devices(install: Install) -> None:
    eps = _plugins(install)
    assert _backends(installed_registry("ACME", None, environ={}, entry_points=eps)) == {"hi"}
    registry = installed_registry("ACME", "acme_lo", environ={}, entry_points=eps)
    assert _backends(registry) == {"lo"}
    plan = KitPlan.build(registry, "ACME", only_plugin="acme_lo")
    assert {c.op for c in plan.kernel_cases} == {"Neg"}
    assert {c.registration.origin.plugin for c in plan.kernel_cases} == {"acme_lo"}
    # The plugin already in use needs no selection; the environment's own is kept.
    hi = installed_registry("ACME", "acme_hi", environ={}, entry_points=eps)
    assert _backends(hi) == {"hi"}


def test_a_conflicting_environment_selection_is_refused(install: Install) -> None:
    eps = _plugins(install)
    with pytest.raises(KernloomError) as info:
        installed_registry(
            "ACME", "acme_lo", environ={"KERNLOOM_DEVICE_FACTORY": "ACME=acme_hi"}, entry_points=eps
        )
    message = str(info.value)
    assert "--kernloom-plugin acme_lo" in message
    assert "KERNLOOM_DEVICE_FACTORY selects plugin 'acme_hi' for ACME" in message
    assert "ACME=acme_lo" in message


def test_a_named_plugin_without_a_device_says_why(install: Install) -> None:
    eps = _plugins(install, low_reason="no ACME card in this machine")
    with pytest.raises(
        KernloomError, match=r"acme_lo: its ACME factory finds no device \(no ACME card"
    ):
        installed_registry("ACME", "acme_lo", environ={}, entry_points=eps)


def test_a_given_registry_gets_the_fix_in_the_error(install: Install) -> None:
    """A registry from the hook or --kernloom-registry is the user's: the kit says how to
    select the plugin's factory rather than rebuilding it."""
    import kernloom.plugin as klp

    registry = klp.Registry.from_entry_points(entry_points=_plugins(install), environ={})
    with pytest.raises(KernloomError) as info:
        KitPlan.build(registry, "ACME", only_plugin="acme_lo")
    message = str(info.value)
    assert "no kernel for ACME comes from a plugin of that name" in message
    assert "KERNLOOM_DEVICE_FACTORY=ACME=acme_lo" in message
