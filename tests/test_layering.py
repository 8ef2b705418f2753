"""Layering: building a graph knows ops, not kernels or plugins.

A graph is built against the op registry alone; ``kl.kernel_label`` scopes are wishes the
graph records, settled where kernels are chosen (kernel lookup, the placer), and a label
no kernel has is an error there that names the node, op, label, device and the labels
there are.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    return registry


def test_building_a_graph_with_a_label_scope_loads_no_plugin() -> None:
    """In a fresh process: the graph, its label scopes and its wrappers read no entry
    point, import no plugin and build no registry; the first session does."""
    script = textwrap.dedent(
        """
        import importlib.metadata, sys
        reads = []
        real = importlib.metadata.entry_points
        def counting(*args, **kwargs):
            reads.append(kwargs.get("group"))
            return real(*args, **kwargs)
        importlib.metadata.entry_points = counting

        import numpy as np
        import kernloom as kl
        import kernloom.registry as registry_module

        g = kl.Graph()
        with g.as_default():
            x = kl.placeholder(kl.float32, [2, 2], name="x")
            with kl.kernel_label("no-such-label"), kl.kernel_label({"MatMul": "einsum"}):
                y = kl.ops.relu(kl.ops.mat_mul(x, x) + 1.0)
        loaded = sorted(m for m in sys.modules if m.startswith("kernloom_"))
        print("built", loaded, "kernloom" in reads, registry_module._default is None)
        with kl.Session(g) as session:
            session.run(kl.ops.relu(x), {x: np.ones((2, 2), np.float32)})
        print("ran", "kernloom_cpu_numpy" in sys.modules, "kernloom" in reads)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == ["built [] False True", "ran True True"], done.stdout


def test_a_scope_label_no_kernel_has_fails_where_the_kernel_is_chosen(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 2], name="x")
        with kl.kernel_label("einsm"):
            y = kl.ops.mat_mul(x, x, name="mm")  # built: the graph does not know kernels
    assert y.node.kernel_label == "einsm"
    with (
        kl.Session(g, registry=registry) as session,
        pytest.raises(kl.InvalidArgumentError) as info,
    ):
        session.run(y, {x: np.eye(2, dtype=np.float32)})
    message = str(info.value)
    assert "node 'mm' (op MatMul) on device type CPU" in message
    assert "kl.kernel_label asks for kernel label 'einsm'" in message
    assert "no kernel is registered with it; labels: blocked, einsum, logsumexp" in message
    assert "Did you mean 'einsum'" in message


def test_a_scope_label_applies_only_to_ops_with_a_kernel_of_that_label(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        a = kl.placeholder(kl.float32, [3, 3], name="a")
        with kl.kernel_label("einsum"):
            product = kl.ops.mat_mul(a, a, name="mm")
            shifted = kl.ops.add(product, kl.constant(np.float32(1)), name="shift")
    value = np.arange(9, dtype=np.float32).reshape(3, 3)
    metadata = kl.RunMetadata()
    with kl.Session(g, registry=registry) as session:
        out = session.run(
            shifted, {a: value}, options=kl.RunOptions(trace=True), run_metadata=metadata
        )
    expected = np.einsum("ij,jk->ik", value.astype(np.float64), value) + 1
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    labels = {s.node: s.label for s in metadata.step_stats.nodes}  # type: ignore[union-attr]
    assert labels["mm"] == "einsum"  # MatMul has an einsum kernel: the wish is granted
    assert labels["shift"] == ""  # Add has none: its default kernel, no error


def test_an_inner_string_scope_beats_an_outer_label_map(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        a = kl.placeholder(kl.float32, [2, 2], name="a")
        with kl.kernel_label({"MatMul": "no-such"}), kl.kernel_label("einsum"):
            inner = kl.ops.mat_mul(a, a, name="inner")
        with kl.kernel_label("einsum"), kl.kernel_label({"MatMul": ""}):
            outer = kl.ops.mat_mul(a, a, name="outer")
    metadata = kl.RunMetadata()
    with kl.Session(g, registry=registry) as session:
        session.run(
            [inner, outer],
            {a: np.eye(2, dtype=np.float32)},
            options=kl.RunOptions(trace=True),
            run_metadata=metadata,
        )
    labels = {s.node: s.label for s in metadata.step_stats.nodes}  # type: ignore[union-attr]
    assert (labels["inner"], labels["outer"]) == ("einsum", "")


def test_a_used_registry_is_frozen_and_says_what_to_do_instead() -> None:
    from kernloom.framework.kernel_registry import KernelRegistration
    from kernloom.testing import fake_accelerator_plugin
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    assert not registry.frozen  # in-process plugins may still join
    registry.create_devices()
    assert registry.frozen
    with pytest.raises(kl.PluginError) as info:
        registry.register_plugin(fake_accelerator_plugin(), name="fake_accel")
    message = str(info.value)
    assert "cannot register plugin 'fake_accel'" in message and "frozen" in message
    assert "Build a new kernloom.plugin.Registry()" in message
    assert [r.name for r in registry.plugins] == ["cpu_numpy"]  # nothing half-registered
    # The tables themselves refuse too, naming who registers what.
    relu = registry.kernels.kernels("Relu")[0]
    late = KernelRegistration(relu.kernel_def, relu.kernel_class, klp.Origin("late"))
    with pytest.raises(kl.KernloomError, match=r"plugin 'late' registers .*Relu.* frozen"):
        registry.kernels.add(late)
    with pytest.raises(kl.KernloomError, match=r"plugin 'late' registers op Relu .*frozen"):
        registry.ops.add(registry.op_def("Relu"), klp.Origin("late"))
    factory = registry.device_factories.registrations("CPU")[0]
    with pytest.raises(kl.KernloomError, match=r"a CPU device factory into a device factory"):
        registry.device_factories.add(factory)


def test_the_default_registry_is_frozen_when_built() -> None:
    assert klp.default_registry().frozen


def test_the_graph_package_imports_the_op_registry_and_nothing_about_plugins() -> None:
    """``graph/`` sits on ``framework/`` and the op library: no module of it imports the
    plugin registry, plugin loading, the hooks or the runtime, not even inside a function."""
    import ast
    from pathlib import Path

    import kernloom.graph

    forbidden = ("kernloom.registry", "kernloom.plugin", "kernloom.hooks", "kernloom.runtime")
    found = []
    for path in sorted(Path(kernloom.graph.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.name}: {n}" for n in names if n.startswith(forbidden)]
    assert found == []
