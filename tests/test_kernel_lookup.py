"""Kernel lookup exactly as DESIGN.md states it, on isolated registries with fake devices."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
import kernloom.testing
from kernloom.framework.kernel_registry import KernelRegistration
from kernloom.framework.node_def import NodeDef
from kernloom.testing import FakeDeviceFactory, run_kernel


def kernel_plugin(
    *kernels: tuple[str, dict[str, Any]], factories: tuple[tuple[str, str, int], ...] = ()
) -> object:
    """A plugin registering one kernel per (name, KernelLibrary.kernel keywords); the kernel
    writes its own name's length into the output so tests can see which one ran."""

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()
            for name, kw in kernels:

                def compute(ctx: klp.OpKernelContext, tag: float = float(len(name))) -> None:
                    ctx.allocate_output(0, ctx.input(0).shape).fill(tag)

                compute.__qualname__ = name
                lib.kernel(kw.pop("op", "Relu"), **kw)(compute)
            registry.register_kernels(lib)
            for device_type, backend, priority in factories:
                registry.register_device_factory(
                    device_type, FakeDeviceFactory(device_type, backend=backend), priority=priority
                )

    return Plugin()


def registry_with(
    *kernels: tuple[str, dict[str, Any]],
    factories: tuple[tuple[str, str, int], ...] = (("CPU", "numpy", 60), ("GPU", "cupy", 210)),
) -> klp.Registry:
    registry = klp.Registry()
    registry.register_plugin(
        kernel_plugin(*kernels, factories=factories), name="kernels", distribution="dist-k"
    )
    return registry


def node(op: str = "Relu", label: str = "", **attrs: Any) -> NodeDef:
    attrs.setdefault("T", kl.float32)
    if label:
        attrs["_kernel"] = label
    return NodeDef(name="n", op=op, attrs=attrs)


def chosen(
    registry: klp.Registry, n: NodeDef, device_type: str = "CPU", backend: str | None = "numpy"
) -> str:
    return registry.find_kernel(n, device_type, backend).kernel_class.__qualname__


def test_constraints_select_by_attr_value() -> None:
    registry = registry_with(
        ("floats", {"device": "CPU", "type_constraints": {"T": [kl.float32, kl.float64]}}),
        ("ints", {"device": "CPU", "type_constraints": {"T": [kl.int32]}}),
    )
    assert chosen(registry, node(T=kl.float64)) == "floats"
    assert chosen(registry, node(T=kl.int32)) == "ints"
    with pytest.raises(
        klp.NoKernelError, match=r"constraint T in \{float32, float64\} does not hold for T=int8"
    ):
        chosen(registry, node(T=kl.int8))


def test_op_types_means_every_dtype_the_op_declares() -> None:
    """A kernel whose constraint is ``types.OP_TYPES`` lists nothing itself: it takes each
    dtype Relu's OpDef allows, and a dtype the op refuses is refused by the op."""
    registry = registry_with(
        ("relu", {"device": "CPU", "type_constraints": {"T": klp.types.OP_TYPES}})
    )
    (registration,) = registry.kernels.kernels("Relu")
    assert registration.kernel_def.constraints == {}
    allowed = registry.op_def("Relu").attr("T").allowed_values
    assert allowed is not None and kl.int8 in allowed and kl.bool_ not in allowed
    for dtype in allowed:
        assert chosen(registry, node(T=dtype)) == "relu"
    with pytest.raises(kl.InvalidArgumentError, match=r"bool"):
        registry.find_kernel(node(T=kl.bool_), "CPU", "numpy")


def test_a_list_attr_constraint_lists_whole_values() -> None:
    """``fused_ops`` forms: a kernel takes exactly the lists it names, whichever sequence
    type the node or the registration used; a constraint can tell two kernels apart."""
    forms = {"fused_ops": [["BiasAdd"], ("BiasAdd", "Relu")]}
    registry = registry_with(
        ("plain", {"op": "_FusedMatMul", "device": "CPU", "attr_constraints": forms}),
        (
            "elu",
            {
                "op": "_FusedMatMul",
                "device": "CPU",
                "attr_constraints": {"fused_ops": [["BiasAdd", "Elu"]]},
            },
        ),
    )
    (plain,) = [
        r
        for r in registry.kernels.kernels("_FusedMatMul")
        if r.kernel_class.__qualname__ == "plain"
    ]
    assert plain.kernel_def.constraints == {"fused_ops": (("BiasAdd",), ("BiasAdd", "Relu"))}
    fused = {"op": "_FusedMatMul", "num_args": 1}
    assert chosen(registry, node(**fused, fused_ops=("BiasAdd", "Relu"))) == "plain"
    assert chosen(registry, node(**fused, fused_ops=["BiasAdd"])) == "plain"
    assert chosen(registry, node(**fused, fused_ops=["BiasAdd", "Elu"])) == "elu"
    with pytest.raises(klp.NoKernelError, match=r"does not hold for fused_ops=\["):
        chosen(registry, node(**fused, fused_ops=["BiasAdd", "Relu6"]))


def test_labels_never_fall_back_in_either_direction() -> None:
    registry = registry_with(
        ("plain", {"device": "CPU"}), ("fancy", {"device": "CPU", "label": "fancy"})
    )
    assert chosen(registry, node()) == "plain"  # an unlabelled node never gets a labelled kernel
    assert chosen(registry, node(label="fancy")) == "fancy"
    only_labelled = registry_with(("fancy", {"device": "CPU", "label": "fancy"}))
    with pytest.raises(klp.NoKernelError, match="labelled 'fancy'; the node asks for no label"):
        chosen(only_labelled, node())
    only_plain = registry_with(("plain", {"device": "CPU"}))
    with pytest.raises(klp.NoKernelError, match="unlabelled; the node asks for label 'fancy'"):
        chosen(only_plain, node(label="fancy"))  # a labelled node never falls back


def test_highest_priority_wins_and_a_tie_is_an_error() -> None:
    registry = registry_with(
        ("low", {"device": "CPU", "priority": 1}), ("high", {"device": "CPU", "priority": 5})
    )
    assert chosen(registry, node()) == "high"
    # Overlapping kernels are caught at registration; a tie at lookup can only come from
    # kernels that overlap only for some attr values, as here for T=float32.
    tied = klp.Registry()
    tied.kernels.add(
        KernelRegistration(
            klp.KernelDefBuilder("Relu").device("CPU").build(), klp.OpKernel, klp.Origin("a")
        )
    )
    tied.kernels._by_op["Relu"].append(
        KernelRegistration(  # bypass the overlap check
            klp.KernelDefBuilder("Relu").device("CPU").build(), klp.OpKernel, klp.Origin("b")
        )
    )
    with pytest.raises(kl.InvalidArgumentError, match="2 kernels tie at priority 0"):
        tied.find_kernel(node(), "CPU")


def test_backend_keeps_kernels_on_their_own_array_library() -> None:
    registry = registry_with(
        ("cupy_kernel", {"device": "GPU", "backend": "cupy"}),
        ("torch_kernel", {"device": "GPU", "backend": "torch", "priority": 9}),
    )
    assert chosen(registry, node(), "GPU", "cupy") == "cupy_kernel"
    assert chosen(registry, node(), "GPU", "torch") == "torch_kernel"
    only_torch = registry_with(("torch_kernel", {"device": "GPU", "backend": "torch"}))
    with pytest.raises(klp.NoKernelError) as info:
        chosen(only_torch, node(), "GPU", "cupy")
    assert "needs backend torch, but the GPU device's backend is cupy" in str(info.value)
    assert "never runs on a device of another backend" in str(info.value)


def test_the_no_kernel_message_names_everything_and_lists_every_candidate() -> None:
    registry = registry_with(
        ("gpu_only", {"device": "GPU"}),
        ("ints", {"device": "CPU", "type_constraints": {"T": [kl.int32]}}),
        ("labelled", {"device": "CPU", "label": "x"}),
    )
    with pytest.raises(klp.NoKernelError) as info:
        registry.find_kernel(node(T=kl.float16), "CPU", "numpy")
    message = str(info.value)
    assert (
        "node 'n' (op Relu) on device type CPU (backend numpy) (no label); attrs: T=float16"
        in message
    )
    assert "Relu on GPU" in message and "device type GPU, not CPU" in message
    assert "T in {int32} does not hold for T=float16" in message
    assert "labelled 'x'; the node asks for no label" in message
    assert message.count("plugin 'kernels' (dist-k)") == 3


def test_supported_device_types_follow_placement_order() -> None:
    registry = registry_with(
        ("cpu", {"device": "CPU"}),
        ("gpu", {"device": "GPU", "type_constraints": {"T": [kl.float32]}}),
    )
    assert registry.supported_device_types(node()) == ["GPU", "CPU"]
    assert registry.supported_device_types(node(T=kl.int32)) == ["CPU"]
    assert registry.supported_device_types(node(label="x")) == []
    assert registry.supported_device_types(node(), backends={"GPU": "torch"}) == ["GPU", "CPU"]


def test_two_plugins_with_indistinguishable_kernels_are_a_reported_conflict() -> None:
    registry = klp.Registry()
    registry.register_plugin(
        kernel_plugin(
            ("first", {"device": "CPU", "type_constraints": {"T": [kl.float32, kl.int32]}})
        ),
        name="a",
        distribution="dist-a",
    )
    registry.register_plugin(
        kernel_plugin(("second", {"device": "CPU", "type_constraints": {"T": [kl.float32]}})),
        name="b",
        distribution="dist-b",
    )
    # Disjoint constraints, another label or another priority are no conflict.
    registry.register_plugin(
        kernel_plugin(
            ("third", {"device": "CPU", "type_constraints": {"T": [kl.float64]}}),
            ("fourth", {"device": "CPU", "label": "z"}),
        ),
        name="c",
    )
    (conflict,) = registry.kernel_conflicts
    assert "dist-a" in str(conflict) and "dist-b" in str(conflict)
    assert str(conflict) in registry.problems()
    # The lookup fails, naming both kernels, their plugins and how to settle it...
    with pytest.raises(kl.InvalidArgumentError) as info:
        chosen(registry, node(T=kl.float32))
    message = str(info.value)
    assert "2 kernels tie at priority 0" in message
    assert "plugin 'a' (dist-a)" in message and "plugin 'b' (dist-b)" in message
    assert "KERNLOOM_DISABLE_PLUGINS=b" in message and "priority" in message
    # ... while a node only one of them matches is unaffected.
    assert chosen(registry, node(T=kl.int32)) == "first"


def test_indistinguishable_kernels_within_one_plugin_fail_that_plugin() -> None:
    with pytest.raises(kl.PluginError, match="cannot be told apart at lookup"):
        klp.Registry().register_plugin(
            kernel_plugin(("one", {"device": "CPU"}), ("two", {"device": "CPU"})), name="p"
        )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"device": "CPU", "op": "Rleu"}, "is for op 'Rleu', which is not registered"),
        (
            {"device": "CPU", "type_constraints": {"U": [kl.float32]}},
            "constrains attr 'U', which op Relu does not have",
        ),
        (
            {"device": "CPU", "type_constraints": {"T": [kl.bool_]}},
            "constraint value bool for attr .* is impossible",
        ),
        ({"device": "CPU", "host_memory": ["nope"]}, "host-memory argument 'nope'"),
        (
            {"device": "CPU", "op": "_FusedMatMul", "attr_constraints": {"fused_ops": ["BiasAdd"]}},
            "a list attr's constraint lists whole values",
        ),
        (
            {
                "device": "CPU",
                "op": "_FusedMatMul",
                "attr_constraints": {"fused_ops": [["BiasAdd", 3]]},
            },
            "constraint value .* for attr 'fused_ops: list\\(string\\).*' is impossible",
        ),
    ],
)
def test_invalid_kernels_fail_naming_kernel_and_plugin(kw: dict[str, Any], message: str) -> None:
    registry = klp.Registry()
    with pytest.raises(kl.PluginError, match=message) as info:
        registry.register_plugin(
            kernel_plugin(("bad_kernel", kw)), name="vendor", distribution="dist-v"
        )
    assert "bad_kernel" in str(info.value) and "plugin 'vendor' (dist-v)" in str(info.value)
    assert registry.kernels.kernels() == []


def test_kernel_def_builder_validates_as_it_goes() -> None:
    kd = (
        klp.KernelDefBuilder("MatMul")
        .device("CPU")
        .type_constraint("T", ["float32"])
        .host_memory("a")
        .label("x")
        .priority(3)
        .backend("numpy")
        .build()
    )
    assert kd.constraints == {"T": (kl.float32,)} and kd.host_memory_args == ("a",)
    assert (
        kd.describe()
        == "MatMul on CPU, backend numpy, label 'x', T in {float32}, host memory: a, priority 3"
    )
    with pytest.raises(kl.InvalidArgumentError, match="device type 'cpu'"):
        klp.KernelDefBuilder("MatMul").device("cpu")
    with pytest.raises(kl.InvalidArgumentError, match="names no device type"):
        klp.KernelDefBuilder("MatMul").build()
    with pytest.raises(kl.InvalidArgumentError, match="priority must be an int"):
        klp.KernelDefBuilder("MatMul").priority("high")  # type: ignore[arg-type]
    with pytest.raises(
        kl.InvalidArgumentError, match=r"type constraint on 'T'.*unknown dtype name 'f32'"
    ):
        klp.KernelDefBuilder("MatMul").type_constraint("T", ["f32"])


def test_the_fake_accelerator_runs_plugin_kernels() -> None:
    registry = registry_with(("fake_relu", {"device": "FAKE"}), factories=(("FAKE", "numpy", 100),))
    run = run_kernel(
        "Relu", [np.array([-1.0, 2.0], np.float32)], registry=registry, device="FAKE:0"
    )
    np.testing.assert_array_equal(run.outputs[0], [9.0, 9.0])  # len("fake_relu")


def test_construction_failures_name_the_node_device_and_kernel() -> None:
    class Broken(klp.OpKernel):
        def __init__(self, ctx: klp.OpKernelConstruction) -> None:
            raise RuntimeError("no tuning table")

        def compute(self, ctx: klp.OpKernelContext) -> None:
            raise AssertionError

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()
            lib.kernel("Relu", device="FAKE")(Broken)
            registry.register_kernels(lib)
            registry.register_device_factory("FAKE", FakeDeviceFactory("FAKE"), priority=1)

    registry = klp.Registry()
    registry.register_plugin(Plugin(), name="p")
    device = registry.create_devices().lookup("FAKE:0")
    with pytest.raises(
        kl.KernelError,
        match=r"node 'n' \(op Relu\): constructing kernel .*Broken \(registered by plugin 'p'\) "
        r"on .*FAKE:0 \(of plugin 'p'\) failed: RuntimeError: no tuning table",
    ):
        registry.create_kernel(node(), device)
    assert kernloom.testing is not None
