"""The executor around the device: split graphs, control flow, variables, threads, errors
and labels, each through a real ``Session``.

The checks build their graphs from one *probe* op the device has a float kernel for
(``Add``, ``Mul``, ...), so they test the runtime around any device, not a particular op
set. A check that needs something the device does not register (a CPU to split with,
variable kernels, labelled kernels) is skipped with the reason, never failed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernloom.dtypes import DType, float32, float64, int32
from kernloom.errors import KernelError, KernloomError
from kernloom.framework.kernel_registry import KernelLibrary, NoKernelError
from kernloom.framework.node_def import NodeDef
from kernloom.framework.op_kernel import OpKernelContext
from kernloom.graph import control_flow
from kernloom.graph.builder import apply_op, placeholder
from kernloom.graph.graph import Graph
from kernloom.graph.tensor import Tensor
from kernloom.graph.variables import Variable
from kernloom.hooks import in_process_plugin
from kernloom.registrar import Registrar
from kernloom.registry import Registry
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import RunMetadata, RunOptions, SessionConfig
from kernloom.testing.conformance.failure import KitFailure
from kernloom.testing.conformance.plan import PROBE_PLUGIN, KitPlan

__all__ = [
    "FAIL_OP",
    "PROBE_PLUGIN",
    "Probe",
    "Skip",
    "check_concurrent_runs",
    "check_cond",
    "check_kernel_error",
    "check_labels",
    "check_split_graph",
    "check_variables",
    "check_while_loop",
    "find_probe",
    "probe_registry",
]

FAIL_OP = "KernloomKitFail"
"""An op whose kernel on the device under test always raises: the kit's error probe."""

_PROBES: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("Add", np.add),
    ("AddV2", np.add),
    ("Mul", np.multiply),
    ("Sub", np.subtract),
    ("Maximum", np.maximum),
    ("Minimum", np.minimum),
)


class Skip(Exception):
    """The check does not apply to this device; the message says why."""


@dataclass(frozen=True, slots=True)
class Probe:
    """A binary float op the device has a kernel for, and its numpy reference."""

    op: str
    dtype: DType
    reference: Callable[..., Any]

    def values(self, seed: int, shape: tuple[int, ...] = (2, 3)) -> np.ndarray[Any, Any]:
        rng = np.random.default_rng(seed)
        return rng.standard_normal(shape).astype(self.dtype.numpy_dtype)


def find_probe(plan: KitPlan) -> Probe:
    """The first of Add, AddV2, Mul, Sub, Maximum, Minimum with a float32 (or float64)
    kernel on the device; ``Skip`` when it has none."""
    for dtype in (float32, float64):
        for op, reference in _PROBES:
            if op not in plan.registry.ops:
                continue
            node = NodeDef(name="probe", op=op, attrs={"T": dtype})
            try:
                plan.registry.find_kernel(node, plan.device_type, plan.device.backend)
            except (NoKernelError, KernloomError):
                continue
            return Probe(op, dtype, reference)
    raise Skip(
        f"{plan.device_type} has no float32/float64 kernel for any of "
        f"{', '.join(op for op, _ in _PROBES)}; the executor checks build their graphs from one"
    )


def _pin(plan: KitPlan) -> str:
    return plan.device.name


def _cpu(plan: KitPlan) -> str:
    if plan.device_type == "CPU":
        raise Skip("the device under test is the CPU: there is no other device to split with")
    names = [d.name for d in plan.devices if d.device_type == "CPU"]
    if not names:
        raise Skip("no CPU device is installed to split the graph with (pip install a CPU plugin)")
    return names[0]


def _run(
    graph: Graph,
    plan: KitPlan,
    fetches: Any,
    feeds: dict[Tensor, Any],
    config: SessionConfig | None = None,
) -> tuple[Any, RunMetadata]:
    metadata = RunMetadata()
    with Session(graph, config, registry=plan.registry) as session:
        value = session.run(fetches, feeds, RunOptions(trace=True), metadata)
    return value, metadata


def _placed(metadata: RunMetadata, node: str) -> str:
    assert metadata.placement is not None
    return metadata.placement[node]


def _expect_close(what: str, actual: Any, expected: Any, dtype: DType) -> None:
    rtol = 2e-5 if dtype is float32 else 1e-10
    try:
        np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=rtol)
    except AssertionError as exc:
        raise KitFailure(f"{what}: wrong result:{str(exc).rstrip()}") from None


def check_split_graph(plan: KitPlan) -> None:
    """CPU -> device -> CPU: the values cross by ``_Send``/``_Recv`` and every crossing is
    counted in ``RunMetadata.copies`` (unless the device's memory is host memory)."""
    probe = find_probe(plan)
    cpu = _cpu(plan)
    graph = Graph(plan.registry)
    with graph.as_default():
        x = placeholder(probe.dtype, [2, 3], name="x")
        y = placeholder(probe.dtype, [2, 3], name="y")
        with graph.device(cpu):
            a = apply_op("Identity", [x], {}, name="on_cpu_a")
            b = apply_op("Identity", [y], {}, name="on_cpu_b")
        with graph.device(_pin(plan)):
            z = apply_op(probe.op, [a, b], {}, name="on_device")
        with graph.device(cpu):
            out = apply_op("Identity", [z], {}, name="back_on_cpu")
    xv, yv = probe.values(1), probe.values(2)
    where = f"{probe.op} {probe.dtype.name} on {plan.device.name} between CPU nodes"
    try:
        value, metadata = _run(graph, plan, out, {x: xv, y: yv})
    except KernloomError as exc:
        raise KitFailure(f"{where}: the run failed: {exc}") from exc
    _expect_close(where, value, probe.reference(xv, yv), probe.dtype)
    if _placed(metadata, "on_device") != plan.device.name:
        raise KitFailure(f"{where}: the node ran on {_placed(metadata, 'on_device')}")
    if plan.device.memory_is_host:
        return
    to_device = metadata.copies.get((cpu, plan.device.name), 0)
    to_host = metadata.copies.get((plan.device.name, cpu), 0)
    if to_device < 2 or to_host < 1:
        raise KitFailure(
            f"{where}: RunMetadata.copies counts {to_device} copies CPU -> "
            f"{plan.device_type} (expected 2) and {to_host} back (expected 1): {metadata.copies}. "
            f"A value on a non-host device must go through copy_to_host/copy_from_host."
        )


def check_cond(plan: KitPlan) -> None:
    """``kl.cond`` with the probe op on the device in both branches, for both predicates."""
    probe = find_probe(plan)
    graph = Graph(plan.registry)
    with graph.as_default():
        pred = placeholder(np.bool_, [], name="pred")
        x = placeholder(probe.dtype, [2, 3], name="x")
        y = placeholder(probe.dtype, [2, 3], name="y")
        with graph.device(_pin(plan)):
            out = control_flow.cond(
                pred,
                lambda: apply_op(probe.op, [x, y], {}, name="taken_if_true"),
                lambda: apply_op(probe.op, [y, y], {}, name="taken_if_false"),
            )
    xv, yv = probe.values(3), probe.values(4)
    for flag in (True, False):
        where = f"kl.cond({flag}) with {probe.op} {probe.dtype.name} on {plan.device.name}"
        try:
            value, _ = _run(graph, plan, out, {pred: np.array(flag), x: xv, y: yv})
        except KernloomError as exc:
            raise KitFailure(f"{where}: the run failed: {exc}") from exc
        expected = probe.reference(xv, yv) if flag else probe.reference(yv, yv)
        _expect_close(where, value, expected, probe.dtype)


def check_while_loop(plan: KitPlan) -> None:
    """``kl.while_loop`` whose body runs the probe op on the device three times (the loop
    counter runs wherever an int32 ``Less`` and ``Add`` exist: the device or the CPU)."""
    probe = find_probe(plan)
    if not _counter_device(plan):
        raise Skip(
            f"no device has int32 Less and Add kernels for the loop counter ({plan.device_type} "
            f"has none, and no CPU plugin is installed)"
        )
    graph = Graph(plan.registry)
    with graph.as_default():
        x = placeholder(probe.dtype, [2, 3], name="x")
        y = placeholder(probe.dtype, [2, 3], name="y")

        def body(i: Tensor, acc: Tensor) -> tuple[Tensor, Tensor]:
            with graph.device(_pin(plan)):
                step = apply_op(probe.op, [acc, y], {}, name="body_on_device")
            assert isinstance(step, Tensor)
            return i + 1, step

        _, out = control_flow.while_loop(
            lambda i, acc: i < 3, body, [np.array(0, np.int32), x], name="loop"
        )
    xv, yv = probe.values(5), probe.values(6)
    expected = xv
    for _ in range(3):
        expected = probe.reference(expected, yv)
    where = f"kl.while_loop with {probe.op} {probe.dtype.name} on {plan.device.name}"
    try:
        value, metadata = _run(
            graph, plan, out, {x: xv, y: yv}, SessionConfig(allow_soft_placement=True)
        )
    except KernloomError as exc:
        raise KitFailure(f"{where}: the run failed: {exc}") from exc
    _expect_close(where, value, expected, probe.dtype)
    body_nodes = [n for n in (metadata.placement or {}) if n.endswith("body_on_device")]
    if not body_nodes or _placed(metadata, body_nodes[0]) != plan.device.name:
        raise KitFailure(f"{where}: the loop body did not run on the device")


def _counter_device(plan: KitPlan) -> bool:
    for device in plan.devices:
        try:
            for op in ("Less", "Add"):
                node = NodeDef(name="counter", op=op, attrs={"T": int32})
                plan.registry.find_kernel(node, device.device_type, device.backend)
        except KernloomError:
            continue
        return True
    return False


def check_variables(plan: KitPlan) -> None:
    """A resource variable on the device keeps its value across runs and updates."""
    if not any(r.kernel_def.op == "VarHandleOp" for r in plan.registrations()):
        raise Skip(
            f"{plan.device_type} registers no VarHandleOp kernel "
            f"(kernloom.plugin.register_variable_kernels adds the variable kernels)"
        )
    probe = find_probe(plan)
    graph = Graph(plan.registry)
    initial = probe.values(7)
    delta_value = probe.values(8)
    with graph.as_default(), graph.device(_pin(plan)):
        v = Variable(initial, name="kit_variable")
        delta = placeholder(probe.dtype, [2, 3], name="delta")
        bump = v.assign_add(delta)
        read = v.value()
    where = f"a {probe.dtype.name} resource variable on {plan.device.name}"
    try:
        with Session(graph, registry=plan.registry) as session:
            session.run(v.initializer)
            for _ in range(3):
                session.run(bump, {delta: delta_value})
            metadata = RunMetadata()
            value = session.run(read, None, RunOptions(), metadata)
    except KernloomError as exc:
        raise KitFailure(f"{where}: the run failed: {exc}") from exc
    _expect_close(where, value, initial + 3 * delta_value, probe.dtype)
    handle = v.handle.node.name
    if handle in (metadata.placement or {}) and _placed(metadata, handle) != plan.device.name:
        raise KitFailure(f"{where}: the variable was placed on {_placed(metadata, handle)}")


def check_concurrent_runs(plan: KitPlan, threads: int = 8, runs: int = 20) -> None:
    """One session run from several threads at once, each with its own feeds."""
    probe = find_probe(plan)
    graph = Graph(plan.registry)
    with graph.as_default():
        x = placeholder(probe.dtype, [2, 3], name="x")
        y = placeholder(probe.dtype, [2, 3], name="y")
        with graph.device(_pin(plan)):
            out = apply_op(probe.op, [x, y], {}, name="shared")
    errors: list[str] = []

    def worker(session: Session, index: int) -> None:
        for run in range(runs):
            xv, yv = probe.values(100 * index + run), probe.values(100 * index + run + 50)
            try:
                value = session.run(out, {x: xv, y: yv})
                _expect_close("the result", value, probe.reference(xv, yv), probe.dtype)
            except (KernloomError, KitFailure) as exc:
                errors.append(f"thread {index}, run {run}: {exc}")
                return

    with Session(graph, registry=plan.registry) as session:
        pool = [threading.Thread(target=worker, args=(session, i)) for i in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    if errors:
        raise KitFailure(
            f"{probe.op} {probe.dtype.name} on {plan.device.name} run from {threads} threads at "
            f"once: {len(errors)} thread(s) failed; first: {errors[0]}"
        )


def _fail(ctx: OpKernelContext) -> None:
    raise RuntimeError("the conformance kit's probe kernel fails on purpose")


def probe_registry(plan: KitPlan) -> Registry:
    """A registry of the kit's own for its failing probe kernel: the factory in use for the
    device under test (the same instance) and ``FAIL_OP`` with its kernel. The registry
    under test is loaded, hence frozen, and never changed by the kit."""
    registry = plan.registry
    factory = registry.device_factories.chosen(registry.factory_overrides())[plan.device_type]
    library = KernelLibrary()
    library.kernel(FAIL_OP, device=plan.device_type)(_fail)

    def kernloom_register(registry: Registrar) -> None:
        registry.register_device_factory(
            plan.device_type, factory.factory, priority=factory.priority
        )
        registry.register_op(FAIL_OP).input("x: T").output("y: T").attr("T: type")
        registry.register_kernels(library)

    probe = Registry()
    probe.register_plugin(in_process_plugin(kernloom_register), name=PROBE_PLUGIN)
    return probe


def check_kernel_error(plan: KitPlan) -> None:
    """A kernel that raises on the device fails the run with an error naming the node and
    the device (the device's ``compute`` must let the exception through)."""
    registry = probe_registry(plan)
    graph = Graph(registry)
    with graph.as_default():
        x = placeholder(int32, [2], name="x")
        with graph.device(_pin(plan)):
            out = apply_op(FAIL_OP, [x], {}, name="kit_failing_node")
    try:
        with Session(graph, registry=registry) as session:
            session.run(out, {x: np.arange(2, dtype=np.int32)})
    except KernelError as exc:
        message = str(exc)
        missing = [s for s in ("kit_failing_node", plan.device.name) if s not in message]
        if missing:
            raise KitFailure(
                f"a kernel failing on {plan.device.name}: the error does not name "
                f"{' and '.join(missing)}: {message}"
            ) from exc
        return
    except Exception as exc:
        raise KitFailure(
            f"a kernel failing on {plan.device.name} ended the run with "
            f"{type(exc).__name__} instead of a KernelError naming the node: {exc}"
        ) from exc
    raise KitFailure(f"a kernel that raises on {plan.device.name} did not fail the run")


def check_labels(plan: KitPlan, op: str, label: str) -> None:
    """``SessionConfig.kernel_labels={op: label}`` selects the labelled kernel on the device,
    and the trace reports that kernel and label for the node."""
    labelled = [kc for kc in plan.kernel_cases if kc.op == op and kc.label == label]
    if not labelled:
        raise Skip(f"no reference case has a {label!r} kernel of {op} on {plan.device_type}")
    kernel_case = labelled[0]
    case = kernel_case.case
    graph = Graph(plan.registry)
    feeds: dict[Tensor, Any] = {}

    def fed(value: Any) -> Tensor:
        array = np.asarray(value)
        tensor = placeholder(array.dtype, array.shape)
        feeds[tensor] = array
        return tensor

    with graph.as_default():
        args = [
            [fed(v) for v in item] if isinstance(item, list) else fed(item) for item in case.inputs
        ]
        with graph.device(_pin(plan)):
            apply_op(op, args, case.attrs, name="labelled")
    fetches = list(graph.node("labelled").outputs)
    where = f"{op} {kernel_case.dtype} with label {label!r} on {plan.device.name}"
    try:
        _, metadata = _run(graph, plan, fetches, feeds, SessionConfig(kernel_labels={op: label}))
    except KernloomError as exc:
        raise KitFailure(f"{where}: the run failed: {exc}") from exc
    assert metadata.step_stats is not None
    stats = metadata.step_stats.for_node("labelled")
    expected = kernel_case.registration.kernel_class.__qualname__
    if stats.label != label or stats.kernel != expected:
        raise KitFailure(
            f"{where}: the trace reports kernel {stats.kernel} label {stats.label!r}, "
            f"expected {expected} label {label!r}"
        )
