"""A kernel against its reference case, on the device under test, through a whole session.

The case runs as a graph of placeholders feeding one node pinned to the device (soft
placement off), so the inputs are copied onto the device and the outputs off it, and a
lookup that would silently fall back to another device fails instead.

Besides the values, each case checks what a wrong kernel can get right by accident: the
caller's feeds are unchanged afterwards, the shapes the device reports for the outputs
(``value_shape``, in the trace) are the arrays' own, and on a device whose memory is host
memory no output shares memory with an input (``ALIASING_OPS`` may). The first case of
each op and dtype also fetches each input again, from the device, after the node ran: a
kernel that wrote into its input's device buffer without the runtime forwarding it shows
there. Error cases (``kit_edges.error_cases``) run with placeholders of unknown shape and
must fail with ``InvalidArgumentError``.

A kernel that declares an in-place form (``OpKernel.inplace_form``) is also called through
it, as the compiled straight line calls it (``kernloom.runtime.compiled_line``): on fresh
device buffers of the case's inputs, ``out`` one of them (each that has the result's shape
and dtype, in turn), positional (a keyword for ``OUT_BY_KEYWORD``'s functions), a numpy
ufunc without ``out`` where the result has one element. The single-node graph never runs
it, while a chain of such nodes runs little else.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.dtypes import as_dtype
from kernloom.errors import InvalidArgumentError, KernelError, KernloomError
from kernloom.framework.node_def import KERNEL_LABEL_ATTR
from kernloom.framework.numpy_elementwise import OUT_BY_KEYWORD
from kernloom.graph.builder import apply_op, placeholder
from kernloom.graph.graph import Graph
from kernloom.graph.tensor import Tensor
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import RunMetadata, RunOptions
from kernloom.testing.cases import Array, tolerance
from kernloom.testing.conformance.failure import KitFailure
from kernloom.testing.conformance.plan import NODE, KernelCase, KitPlan

__all__ = ["ALIASING_OPS", "check_error_case", "check_kernel_case", "mismatch", "where"]

ALIASING_OPS = frozenset(
    {
        "Identity",
        "IdentityN",
        "Snapshot",
        "StopGradient",
        "PreventGradient",
        "Reshape",
        "Squeeze",
        "ExpandDims",
        "Bitcast",
        "EnsureShape",
        "CheckNumerics",
    }
)
"""Ops whose outputs may share their inputs' memory (TensorFlow forwards or reshapes the
buffer); any other op's outputs are new buffers."""


def where(plan: KitPlan, kernel_case: KernelCase) -> str:
    """``Add float32 on ACME (/job:.../device:ACME:0), kernel acme.Add from plugin acme``."""
    label = f" [label {kernel_case.label!r}]" if kernel_case.label else ""
    registration = kernel_case.registration
    return (
        f"{kernel_case.op} {kernel_case.dtype}{label} on {plan.device_type} "
        f"({plan.device.name}), kernel {registration.implementation} from "
        f"{registration.origin}, case {kernel_case.case.id!r}"
    )


def _build(
    plan: KitPlan, kernel_case: KernelCase, *, known_shapes: bool = True, probe: bool = False
) -> tuple[Graph, list[Tensor], list[Tensor], dict[Tensor, Any]]:
    """The case's graph: its outputs, the probes of its inputs (when asked) and the feeds."""
    case = kernel_case.case
    graph = Graph(plan.registry)
    feeds: dict[Tensor, Any] = {}
    fed: list[Tensor] = []

    def feed(value: Any) -> Tensor:
        array = np.asarray(value)
        shape = array.shape if known_shapes else None
        tensor = placeholder(as_dtype(array.dtype), shape, graph=graph)
        feeds[tensor] = array
        fed.append(tensor)
        return tensor

    attrs = dict(case.attrs)
    if case.label:
        attrs[KERNEL_LABEL_ATTR] = case.label
    probes: list[Tensor] = []
    with graph.as_default(), graph.device(plan.device.name):
        args = [
            [feed(v) for v in item] if isinstance(item, list) else feed(item)
            for item in case.inputs
        ]
        out = apply_op(case.op, args, attrs, name=NODE)
        if probe:
            with graph.control_dependencies([graph.node(NODE)]):
                for index, tensor in enumerate(fed):
                    identity = apply_op("Identity", [tensor], {}, name=f"kit_input_{index}")
                    assert isinstance(identity, Tensor)
                    probes.append(identity)
    outputs = list(graph.node(NODE).outputs)
    del out
    return graph, outputs, probes, feeds


def _changed(before: Array, after: Any) -> bool:
    after = np.asarray(after)
    if after.shape != before.shape or after.dtype != before.dtype:
        return True
    return not np.array_equal(before, after, equal_nan=before.dtype.kind in "fc")


def check_kernel_case(plan: KitPlan, kernel_case: KernelCase, *, probe: bool = False) -> None:
    """The case's outputs match its reference, and the kernel kept to the rules above;
    ``probe``: fetch the inputs again from the device after the node ran."""
    case = kernel_case.case
    try:
        graph, outputs, probes, feeds = _build(plan, kernel_case, probe=probe)
    except KernloomError as exc:
        raise KitFailure(
            f"{where(plan, kernel_case)}: the graph could not be built: {exc}"
        ) from exc
    fed = list(feeds.values())
    snapshots = [np.array(v, copy=True) for v in fed]
    metadata = RunMetadata()
    try:
        with Session(graph, registry=plan.registry) as session:
            fetched = session.run(
                [*outputs, *probes], feeds, options=RunOptions(trace=True), run_metadata=metadata
            )
    except KernloomError as exc:
        raise KitFailure(f"{where(plan, kernel_case)}: the run failed: {exc}") from exc
    except Exception as exc:  # the device's or kernel's code broke the session itself
        raise KitFailure(
            f"{where(plan, kernel_case)}: the run failed: {type(exc).__name__}: {exc}"
        ) from exc
    values = [np.asarray(v) for v in fetched[: len(outputs)]]
    placed = metadata.placement[NODE] if metadata.placement is not None else None
    if placed != plan.device.name:
        raise KitFailure(f"{where(plan, kernel_case)}: the node ran on {placed}")
    for index, (before, after) in enumerate(zip(snapshots, fed, strict=True)):
        if _changed(before, after):
            raise KitFailure(
                f"{where(plan, kernel_case)}: the kernel wrote into input {index} (the caller's "
                f"feed changed); a kernel may only write into an input the runtime forwards to "
                f"it (ctx.forward_input_or_allocate_output)"
            )
    for index, (before, after) in enumerate(zip(snapshots, fetched[len(outputs) :], strict=False)):
        if _changed(before, after):
            raise KitFailure(
                f"{where(plan, kernel_case)}: the kernel wrote into input {index} (its buffer on "
                f"the device, which another node also reads); a kernel may only write into an "
                f"input the runtime forwards to it (ctx.forward_input_or_allocate_output)"
            )
    problem = mismatch(values, case.expected())
    if problem is not None:
        raise KitFailure(f"{where(plan, kernel_case)}: wrong result: {problem}")
    if metadata.step_stats is not None:
        reported = metadata.step_stats.for_node(NODE).output_shapes
        for index, (shape, value) in enumerate(zip(reported, values, strict=False)):
            if shape is not None and tuple(shape) != value.shape:
                raise KitFailure(
                    f"{where(plan, kernel_case)}: the device's value_shape reports {list(shape)} "
                    f"for output {index}, whose array has shape {list(value.shape)}"
                )
    _check_inplace_form(plan, kernel_case, graph, values[0] if len(values) == 1 else None)
    if plan.device.memory_is_host and case.op not in ALIASING_OPS:
        for o, value in enumerate(values):
            for i, array in enumerate(fed):
                if value.size and np.shares_memory(value, array):
                    raise KitFailure(
                        f"{where(plan, kernel_case)}: output {o} shares memory with input {i} "
                        f"(the caller's feed): a {case.op} must return a new buffer, or one the "
                        f"runtime forwarded (ctx.forward_input_or_allocate_output)"
                    )


def _check_inplace_form(
    plan: KitPlan, kernel_case: KernelCase, graph: Graph, result: Array | None
) -> None:
    """The kernel's in-place form, if it declares one, gives the case's reference into each
    input it may be given as ``out`` (those of the result's shape and dtype), leaving the
    other inputs alone (see the module's docstring)."""
    case = kernel_case.case
    if result is None or any(isinstance(item, list) for item in case.inputs):
        return  # a form serves kernels of one output and plain inputs only
    hosts = [np.asarray(item) for item in case.inputs]
    targets = [
        i for i, x in enumerate(hosts) if x.shape == result.shape and x.dtype == result.dtype
    ]
    if not targets:
        return
    device = plan.device
    try:
        kernel = plan.registry.create_kernel(graph.node(NODE).to_node_def(), device)
    except KernloomError as exc:
        raise KitFailure(
            f"{where(plan, kernel_case)}: the kernel could not be built: {exc}"
        ) from exc
    form: Any = kernel.inplace_form  # (not narrowed to a ufunc by OUT_BY_KEYWORD)
    if form is None:
        return
    expected = case.expected()
    for target in targets:
        args = [device.copy_value(device.copy_from_host(np.array(x, copy=True))) for x in hosts]
        call = _form_call(form, len(args), target, result)
        try:
            with device.compute_scope():
                if result.size == 1 and isinstance(form, np.ufunc):
                    value = device.copy_to_host(form(*args))
                else:
                    if form in OUT_BY_KEYWORD:
                        form(*args, out=args[target])
                    else:
                        form(*args, args[target])
                    value = device.copy_to_host(args[target])
        except Exception as exc:
            raise KitFailure(
                f"{where(plan, kernel_case)}: the kernel's in-place form (inplace_form "
                f"{_name(form)}), called as {call}, raised {type(exc).__name__}: {exc}"
            ) from exc
        problem = mismatch([np.asarray(value)], expected[:1])
        if problem is not None:
            raise KitFailure(
                f"{where(plan, kernel_case)}: the kernel's in-place form (inplace_form "
                f"{_name(form)}), called as {call} (as the compiled straight line calls it "
                f"where input {target} is a buffer nothing else holds), gives a wrong result: "
                f"{problem}. inplace_form(*inputs, out) must write the op's output into out, "
                f"as compute does"
            )
        for index, (host, arg) in enumerate(zip(hosts, args, strict=True)):
            if index != target and _changed(host, device.copy_to_host(arg)):
                raise KitFailure(
                    f"{where(plan, kernel_case)}: the kernel's in-place form (inplace_form "
                    f"{_name(form)}), called as {call}, wrote into input {index}, which is "
                    f"not its out"
                )


def _form_call(form: Any, count: int, target: int, result: Array) -> str:
    """How the compiled straight line calls ``form``, in words: ``f(x0, x1, out=x0)``."""
    operands = [f"x{i}" for i in range(count)]
    if result.size == 1 and isinstance(form, np.ufunc):
        return f"{_name(form)}({', '.join(operands)}) (one element: no out)"
    out = f"out=x{target}" if form in OUT_BY_KEYWORD else f"x{target}"
    return f"{_name(form)}({', '.join([*operands, out])})"


def _name(form: Any) -> str:
    """A form for a message: ``np.add`` for a ufunc, else its module and qualified name."""
    name = getattr(form, "__qualname__", None) or getattr(form, "__name__", None)
    module = getattr(form, "__module__", None)
    if isinstance(form, np.ufunc):
        return f"np.{form.__name__}"
    return f"{module}.{name}" if module and name else repr(form)


def check_error_case(plan: KitPlan, kernel_case: KernelCase) -> None:
    """The op rejects the case's inputs with ``InvalidArgumentError`` naming the node."""
    try:
        graph, outputs, _, feeds = _build(plan, kernel_case, known_shapes=False)
        with Session(graph, registry=plan.registry) as session:
            session.run(outputs, feeds)
    except InvalidArgumentError as exc:
        if isinstance(exc, KernelError) and f"'{NODE}'" not in str(exc):
            raise KitFailure(
                f"{where(plan, kernel_case)}: the error does not name the node: {exc}"
            ) from exc
        return
    except KernloomError as exc:
        cause = exc.__cause__
        what = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        raise KitFailure(
            f"{where(plan, kernel_case)}: bad input must fail with InvalidArgumentError (raise "
            f"ctx.fail(...) or kernloom.plugin.InvalidArgumentError), the kernel raised "
            f"{type(exc).__name__} ({what})"
        ) from exc
    raise KitFailure(f"{where(plan, kernel_case)}: the kernel accepted bad input")


def mismatch(actual: list[Array], expected: list[Array]) -> str | None:
    """What differs between the outputs and the references (``tolerance`` per dtype), or
    None when they agree. NaN equals NaN; integers and bools must be exact."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for index, (value, reference) in enumerate(zip(actual, expected, strict=True)):
        if value.shape != reference.shape:
            return f"output {index} has shape {value.shape}, expected {reference.shape}"
        if value.dtype != reference.dtype:
            return f"output {index} is {value.dtype}, expected {reference.dtype}"
        try:
            if value.dtype.kind in "fc":
                tol = tolerance(value.dtype)
                np.testing.assert_allclose(value, reference, rtol=tol["rtol"], atol=tol["atol"])
            else:
                np.testing.assert_array_equal(value, reference)
        except AssertionError as exc:
            return f"output {index} differs from the reference:" + str(exc).rstrip()
    return None
