"""Plugin discovery through entry points, and failure isolation.

Each broken plugin is loaded beside a good one: the broken one is recorded with its
name, distribution and reason; the good one still works; strict mode makes it an error.
"""

from __future__ import annotations

import importlib.metadata
import warnings

import pytest
from plugin_helpers import Install, factory_plugin

import kernloom as kl
import kernloom.plugin as klp
from kernloom.hooks import KERNLOOM_API_VERSION, PluginState

GOOD = factory_plugin("GOOD", 10)

BROKEN = {
    "missing_module": {
        "value": "klplugin_does_not_exist",
        "reason": "error importing 'klplugin_does_not_exist': ModuleNotFoundError",
    },
    "import_error": {
        "body": "raise ImportError('needs libfoo.so')",
        "reason": "ImportError: needs libfoo.so",
    },
    "raises_in_hook": {
        "body": """
        @klp.hookimpl
        def kernloom_register(registry):
            registry.register_device_factory("HALF", FakeDeviceFactory("HALF"), priority=1)
            raise RuntimeError("no licence server")
        """,
        "reason": "kernloom_register raised RuntimeError: no licence server",
    },
    "bad_device_type": {
        "body": """
        @klp.hookimpl
        def kernloom_register(registry):
            registry.register_device_factory("gpu", FakeDeviceFactory("gpu"), priority=1)
        """,
        "reason": "device type 'gpu' must be an upper-case name",
    },
    "bad_priority": {
        "body": """
        @klp.hookimpl
        def kernloom_register(registry):
            registry.register_device_factory("NPU", FakeDeviceFactory("NPU"), priority="high")
        """,
        "reason": "priority must be an int, got 'high'",
    },
    "not_a_factory": {
        "body": """
        @klp.hookimpl
        def kernloom_register(registry):
            registry.register_device_factory("NPU", object(), priority=5)
        """,
        "reason": "is not a kernloom.plugin.DeviceFactory",
    },
    "incompatible_api": {
        "header": "import kernloom\nKERNLOOM_API = '>=2.0,<3'\n",
        "body": "",
        "reason": "built for kernloom plugin API >=2.0,<3, but this kernloom (0.1.0) "
        f"provides API {KERNLOOM_API_VERSION}",
        "state": "incompatible",
    },
    "no_api_declared": {
        "header": "import kernloom\n",
        "body": "",
        "reason": "declares no KERNLOOM_API",
    },
    "malformed_api": {
        "header": "KERNLOOM_API = 'version one'\n",
        "body": "",
        "reason": "is not a comparison",
    },
    "no_hook": {"body": "x = 1", "reason": "implements no kernloom hook"},
    "misspelt_hook": {
        "body": """
        @klp.hookimpl
        def kernloom_regsiter(registry):
            pass
        """,
        "reason": "unknown hook 'kernloom_regsiter'",
    },
    "exits_in_hook": {
        "body": """
        import sys

        @klp.hookimpl
        def kernloom_register(registrar):
            sys.exit(3)
        """,
        "reason": "kernloom_register raised SystemExit: 3",
    },
    "wrapper_hook": {
        "body": """
        @klp.hookimpl(wrapper=True)
        def kernloom_register(registrar):
            registrar.register_device_factory("WRAP", FakeDeviceFactory("WRAP"), priority=1)
            return (yield)
        """,
        "reason": "declared as a wrapper hook",
    },
    "old_style_wrapper_hook": {
        "body": """
        @klp.hookimpl(hookwrapper=True)
        def kernloom_register(registry):
            yield
        """,
        "reason": "declared as a wrapper hook",
    },
    "wrong_hook_argument": {
        "body": """
        @klp.hookimpl
        def kernloom_register(reg):
            pass
        """,
        "reason": "Argument(s) {'reg'} are declared in the hookimpl",
    },
}


def test_the_hook_argument_may_be_named_registrar_or_registry(install: Install) -> None:
    body = """
    @klp.hookimpl
    def kernloom_register({name}):
        {name}.register_device_factory("{kind}", FakeDeviceFactory("{kind}"), priority=1)
    """
    registry = load(
        [
            install("new_name", body.format(name="registrar", kind="NEWNAME")),
            install("old_name", body.format(name="registry", kind="OLDNAME")),
        ]
    )
    assert registry.failures == ()
    assert {"NEWNAME", "OLDNAME"} <= set(registry.placement_order())


def load(entry_points: list[importlib.metadata.EntryPoint], **environ: str) -> klp.Registry:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kl.KernloomPluginWarning)
        return klp.Registry.from_entry_points(entry_points=entry_points, environ=environ)


@pytest.fixture(params=sorted(BROKEN))
def broken(request: pytest.FixtureRequest, install: Install) -> tuple[str, dict[str, str], object]:
    name: str = request.param
    case = BROKEN[name]
    kwargs = {k: case[k] for k in ("header", "value") if k in case}
    return name, case, install(name, case.get("body", ""), **kwargs)


def test_a_broken_plugin_is_recorded_and_the_others_still_load(
    broken: tuple[str, dict[str, str], importlib.metadata.EntryPoint], install: Install
) -> None:
    name, case, ep = broken
    registry = load([ep, install("good", GOOD)])
    record = {r.name: r for r in registry.plugins}
    assert record["good"].state is PluginState.LOADED
    assert record[name].state == case.get("state", "failed")
    assert case["reason"] in record[name].reason
    assert record[name].failed
    # The good plugin works; nothing of the broken one (not even a half) was kept.
    assert registry.placement_order() == ["GOOD"]
    assert [d.device_type for d in registry.create_devices()] == ["GOOD"]
    problems = registry.problems()
    assert len(problems) == 1 and f"plugin {name!r}" in problems[0]


def test_strict_mode_turns_each_failure_into_an_error(
    broken: tuple[str, dict[str, str], importlib.metadata.EntryPoint], install: Install
) -> None:
    name, case, ep = broken
    with pytest.raises(kl.PluginError) as info:
        load([ep, install("good", GOOD)], KERNLOOM_STRICT_PLUGINS="1")
    message = str(info.value)
    assert f"plugin {name!r}" in message and case["reason"] in message
    assert "KERNLOOM_STRICT_PLUGINS" in message


def test_a_failure_keeps_its_traceback(install: Install) -> None:
    ep = install("raises", BROKEN["raises_in_hook"]["body"])
    (record,) = load([ep]).plugins
    assert "RuntimeError: no licence server" in record.traceback
    assert "klplugin_raises.py" in record.traceback  # points at the plugin's own file


def test_each_failure_is_warned_about_once(install: Install) -> None:
    eps = [
        install("a", "raise ImportError('x')"),
        install("b", "raise ImportError('y')"),
        install("good", GOOD),
    ]
    with pytest.warns(kl.KernloomPluginWarning) as caught:
        klp.Registry.from_entry_points(entry_points=eps, environ={})
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert "plugin 'a'" in messages[0] and "plugin 'b'" in messages[1]


def test_allow_list_and_disable_list(install: Install) -> None:
    eps = [
        install("a", factory_plugin("AAA", 1)),
        install("b", factory_plugin("BBB", 2)),
        install("c", factory_plugin("CCC", 3)),
    ]
    allowed = load(eps, KERNLOOM_PLUGINS="a, c")
    assert allowed.placement_order() == ["CCC", "AAA"]
    b = {r.name: r for r in allowed.plugins}["b"]
    assert b.state is PluginState.DISABLED and "not in KERNLOOM_PLUGINS=a,c" in b.reason
    assert not allowed.problems()  # disabling is not a failure

    disabled = load(eps, KERNLOOM_DISABLE_PLUGINS="c")
    assert disabled.placement_order() == ["BBB", "AAA"]
    assert {r.name: r for r in disabled.plugins}[
        "c"
    ].reason == "disabled by KERNLOOM_DISABLE_PLUGINS"


def test_a_disabled_plugin_is_never_imported(install: Install) -> None:
    ep = install("bomb", "raise SystemExit('imported!')")
    (record,) = load([ep], KERNLOOM_DISABLE_PLUGINS="bomb").plugins
    assert record.state is PluginState.DISABLED


def test_an_allow_list_typo_is_reported(install: Install) -> None:
    eps = [install("cpu_numpy", factory_plugin("CPU", 60))]
    registry = load(eps, KERNLOOM_PLUGINS="cpu_nunpy")
    (problem,) = registry.problems()
    assert "'cpu_nunpy'" in problem and "Did you mean 'cpu_numpy'" in problem
    with pytest.raises(kl.PluginError, match="cpu_nunpy"):
        load(eps, KERNLOOM_PLUGINS="cpu_nunpy", KERNLOOM_STRICT_PLUGINS="1")


def test_a_disable_list_typo_is_reported(install: Install) -> None:
    """A name in KERNLOOM_DISABLE_PLUGINS that no installed plugin has disables nothing:
    reported as the same typo in KERNLOOM_PLUGINS is (and fatal under strict)."""
    eps = [
        install("cpu_numpy", factory_plugin("CPU", 60)),
        install("gpu_torch", factory_plugin("GPU", 90)),
    ]
    registry = load(eps, KERNLOOM_DISABLE_PLUGINS="gpu_tourch")
    assert {r.name: r.state for r in registry.plugins} == {
        "cpu_numpy": PluginState.LOADED,
        "gpu_torch": PluginState.LOADED,
    }
    (problem,) = registry.problems()
    assert problem.startswith("KERNLOOM_DISABLE_PLUGINS names 'gpu_tourch', but no installed")
    assert "installed: cpu_numpy, gpu_torch" in problem
    assert "Did you mean 'gpu_torch'" in problem
    with pytest.raises(kl.PluginError, match="gpu_tourch"):
        load(eps, KERNLOOM_DISABLE_PLUGINS="gpu_tourch", KERNLOOM_STRICT_PLUGINS="1")
    assert not load(eps, KERNLOOM_DISABLE_PLUGINS="gpu_torch").problems()


def _absent_gpu(reason: str, priority: int) -> str:
    """A plugin body whose GPU factory finds no GPU, saying why."""
    return f"""
    @klp.hookimpl
    def kernloom_register(registry):
        registry.register_device_factory(
            "GPU", FakeDeviceFactory("GPU", count=0, unavailable_reason={reason!r}),
            priority={priority})
    """


def test_no_device_with_a_device_plugin_disabled_says_how_to_enable_it(install: Install) -> None:
    """The only device plugin that would create a device is installed but disabled: the
    error says so and names the variable, rather than telling the user to install it; and
    it gives every factory's reason, not only the one in use for each type."""
    eps = [
        install("cpu_numpy", factory_plugin("CPU", 60)),
        install("gpu_cupy", _absent_gpu("CuPy is not installed", 100)),
        install("gpu_torch", _absent_gpu("torch finds no CUDA device", 90)),
    ]
    registry = load(eps, KERNLOOM_DISABLE_PLUGINS="cpu_numpy")
    with pytest.raises(kl.NotFoundError) as info:
        registry.create_devices()
    message = str(info.value)
    assert message.startswith("no device could be created: ")
    assert "CuPy is not installed" in message and "torch finds no CUDA device" in message
    assert "plugin 'cpu_numpy'" in message and "disabled by KERNLOOM_DISABLE_PLUGINS" in message
    assert "KERNLOOM_PLUGINS" in message
    assert "pip install" not in message

    registry = load(eps, KERNLOOM_PLUGINS="gpu_torch")
    with pytest.raises(kl.NotFoundError) as info:
        registry.create_devices()
    message = str(info.value)
    assert "not in KERNLOOM_PLUGINS=gpu_torch" in message
    assert "pip install" not in message

    registry = load(eps[1:])  # nothing disabled: installing a device plugin is the advice
    with pytest.raises(kl.NotFoundError, match="pip install kernloom-cpu-numpy"):
        registry.create_devices()


def test_duplicate_entry_point_names_keep_the_first(install: Install) -> None:
    first = install("dup", factory_plugin("AAA", 1))
    second = importlib.metadata.EntryPoint(name="dup", value="klplugin_other", group="kernloom")
    registry = load([first, second])
    assert registry.placement_order() == ["AAA"]
    (problem,) = registry.problems()
    assert "entry-point name 'dup' is also used" in problem


def test_plugins_load_in_name_order_so_conflicts_are_deterministic(install: Install) -> None:
    eps = [install("zeta", factory_plugin("GPU", 5)), install("alpha", factory_plugin("GPU", 5))]
    for order in (eps, eps[::-1]):
        (conflict,) = load(order).conflicts
        assert conflict.kept.origin.plugin == "alpha"


def test_entry_point_objects_as_well_as_modules(install: Install) -> None:
    body = """
    class Plugin:
        KERNLOOM_API = ">=1"
        @klp.hookimpl
        def kernloom_register(self, registry):
            registry.register_device_factory("OBJ", FakeDeviceFactory("OBJ"), priority=3)
    plugin = Plugin()
    """
    ep = install(
        "obj",
        body,
        header=(
            "import kernloom\nimport kernloom.plugin as klp\n"
            "from kernloom.testing import FakeDeviceFactory\n"
        ),
        value="klplugin_obj:plugin",
    )
    assert load([ep]).placement_order() == ["OBJ"]


def test_registering_after_the_hook_returned_is_refused() -> None:
    kept: list[klp.Registrar] = []

    class Sneaky:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            kept.append(registry)

    klp.Registry().register_plugin(Sneaky(), name="sneaky")
    with pytest.raises(klp.RegistrationError, match="after its kernloom_register hook returned"):
        kept[0].register_device_factory("LATE", kl.testing.FakeDeviceFactory("LATE"), priority=1)


def test_register_plugin_raises_at_once() -> None:
    class Bad:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_device_factory("CPU", "not a factory", priority=1)  # type: ignore[arg-type]

    registry = klp.Registry()
    with pytest.raises(kl.PluginError, match=r"plugin 'bad'.*not a kernloom.plugin.DeviceFactory"):
        registry.register_plugin(Bad(), name="bad")
    assert registry.placement_order() == []


def test_a_factory_class_is_instantiated() -> None:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_device_factory("FAKE", kl.testing.FakeDeviceFactory, priority=1)

    registry = klp.Registry()
    registry.register_plugin(Plugin(), name="p")
    assert isinstance(
        registry.device_factories.chosen()["FAKE"].factory, kl.testing.FakeDeviceFactory
    )


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"KERNLOOM_STRICT_PLUGINS": "maybe"}, "KERNLOOM_STRICT_PLUGINS='maybe' is not a yes/no"),
        ({"KERNLOOM_DEVICE_FACTORY": "GPU"}, "'GPU' is not TYPE=plugin"),
        ({"KERNLOOM_DEVICE_FACTORY": "gpu=torch"}, "'gpu=torch' is not TYPE=plugin"),
        ({"KERNLOOM_DEVICE_FACTORY": "GPU=a,GPU=b"}, "names GPU twice"),
    ],
)
def test_malformed_environment_variables(environ: dict[str, str], message: str) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=message):
        klp.Registry.from_entry_points(entry_points=[], environ=environ)


@pytest.mark.parametrize(
    ("spec", "contained"),
    [
        (">=1.0,<2", True),
        (">=1", True),
        ("==1.3", True),
        (">1.3", False),
        ("<1", False),
        (">=0.9, <1.4", True),
        ("!=1.3", False),
        ("<=1.3.0", True),
        ("==1.0", False),
    ],
)
def test_api_ranges(spec: str, contained: bool) -> None:
    from kernloom.hooks import ApiRange

    assert ApiRange.parse(spec).contains("1.3") is contained  # (a fixed version: the parser)


def test_the_installed_cpu_plugin_loads_through_the_entry_point() -> None:
    registry = klp.Registry.from_entry_points(environ={})
    record = {r.name: r for r in registry.plugins}["cpu_numpy"]
    assert record.state is PluginState.LOADED
    assert record.distribution == "kernloom-cpu-numpy"
    assert record.registered[0] == "device factory CPU (priority 60)"
    own = [r for r in registry.kernels.kernels() if r.origin.plugin == "cpu_numpy"]
    ops = {r.kernel_def.op for r in own}
    # The device-independent kernels (Const, _Send, ...) come from the core, not the plugin.
    assert record.registered[1] == f"{len(own)} kernel(s) for {len(ops)} op(s)"
    assert "_Send" not in ops and "Add" in ops
    assert klp.default_registry() is klp.default_registry()


def test_a_plugin_that_exits_on_import_does_not_end_the_host(install: Install) -> None:
    ep = install("exits", "import sys\nsys.exit('no GPU here, bye')")
    (record,) = load([ep]).plugins
    assert record.state is PluginState.FAILED
    assert "SystemExit: no GPU here, bye" in record.reason
