"""ONNX control flow: If, Loop and Scan, onto kernloom's TensorFlow-style ``kl.cond`` and
``kl.while_loop`` (a Scan is a while_loop over its scan axis with the Loop's scan-output
accumulators).

A subgraph (If's branches, Loop's body) is converted node by node with the ordinary
converters while the branch or body function runs, so kernloom's control-flow context is
open: a value of an enclosing scope that a subgraph names (an ONNX outer-scope reference)
is routed in by a Switch or an Enter like any tensor from outside a branch or loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

import kernloom.dtypes as d
from kernloom import ops
from kernloom.errors import InvalidArgumentError
from kernloom.graph.builder import control_dependencies
from kernloom.graph.control_flow import cond, while_loop
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._convert import convert_nodes, graph_nodes
from kernloom.onnx._dtypes import ONNX_TO_KERNLOOM, kernloom_dtype
from kernloom.onnx._registry import converter
from kernloom.onnx._values import (
    OnnxOptional,
    OnnxSequence,
    Value,
    describe_value,
    flatten,
    rebuild,
    same_form,
)
from kernloom.onnx.errors import OnnxImportError
from kernloom.onnx.ops._helpers import run_time_check
from kernloom.op_library.control_flow_ops import relaxed_shape
from kernloom.shapes import TensorShape

__all__ = ["convert_subgraph", "subgraph_values"]

Result = Sequence[Tensor | None]
Values = Sequence[Value | None]

ONNX_OF = {dtype: elem for elem, dtype in ONNX_TO_KERNLOOM.items()}
"""kernloom dtype -> ONNX element type, to ask onnx's type inference about a body."""


# -- subgraphs -------------------------------------------------------------------------------


def convert_subgraph(
    ctx: ConversionContext,
    node: OnnxNode,
    attr: str,
    bound: dict[str, Tensor],
) -> list[Tensor]:
    """The outputs of the subgraph attribute ``attr`` of ``node``, built into the graph
    where the caller stands (inside a branch or a loop body), with the subgraph's inputs
    bound to ``bound`` and every other name looked up in the enclosing scopes."""
    outputs = subgraph_values(ctx, node, attr, bound)
    for value, output in zip(outputs, _subgraph(node, attr).output, strict=True):
        if not isinstance(value, Tensor):
            raise node.fail(
                f"{attr}'s output {output.name!r} is {describe_value(value)}; here it must "
                "be a tensor (kernloom graphs carry tensors only: a sequence or optional "
                "is resolved at import, so its length cannot change from one iteration to "
                "the next)"
            )
    return [t for t in outputs if isinstance(t, Tensor)]


def subgraph_values(
    ctx: ConversionContext,
    node: OnnxNode,
    attr: str,
    bound: Mapping[str, Value],
    known: Mapping[str, np.ndarray[Any, Any]] | None = None,
) -> list[Value]:
    """The outputs of the subgraph ``attr``, tensors, sequences or optionals, with its
    inputs bound to ``bound`` (``known``: those of them known at import)."""
    inner = _built_subgraph(ctx, node, attr, bound, known)
    return [inner.lookup(value.name) for value in _subgraph(node, attr).output]


def _built_subgraph(
    ctx: ConversionContext,
    node: OnnxNode,
    attr: str,
    bound: Mapping[str, Value],
    known: Mapping[str, np.ndarray[Any, Any]] | None = None,
) -> ConversionContext:
    """The context the subgraph ``attr`` was converted in (its values and those known at
    import time), after checking that each of its outputs has a value."""
    graph = _subgraph(node, attr)
    inner = ctx.child(bound, known)
    for init in graph.initializer:
        array = onnx.numpy_helper.to_array(init)
        kernloom_dtype(init.data_type, f"ONNX node {node.describe()}: {attr}'s initializer")
        inner.static[init.name] = array
        inner.values[init.name] = inner.const(array, kernloom_dtype(init.data_type, init.name))
    if graph.sparse_initializer:
        raise node.fail(f"{attr} has sparse initializers, which the importer does not support")
    convert_nodes(inner, graph_nodes(graph, ctx.opsets, f"{node.name}/{attr}/"))
    for value in graph.output:
        if not inner.knows(value.name):
            raise node.fail(
                f"{attr}'s output {value.name!r} is produced by no node of the subgraph and "
                "is no input or value of an enclosing scope: name an existing value"
            )
    return inner


def _scalar(ctx: ConversionContext, node: OnnxNode, x: Tensor, what: str, dtype: d.DType) -> Tensor:
    """``x`` as a scalar of ``dtype``: ONNX lets a condition or trip count be a tensor of
    one element (shape [1]), kernloom's cond and while_loop want a scalar."""
    if x.dtype is not dtype:
        raise node.fail(f"{what} ({x.name!r}) is {x.dtype.name}; it must be {dtype.name}")
    if x.shape.rank == 0:
        return x
    if x.shape.rank is not None and x.shape.num_elements() not in (None, 1):
        raise node.fail(f"{what} must hold one element, got shape {x.shape}")
    return ops.reshape(x, ctx.int64s([]))


def _subgraph(node: OnnxNode, attr: str) -> onnx.GraphProto:
    graph = node.attr(attr)
    if not isinstance(graph, onnx.GraphProto):
        raise node.fail(f"attribute {attr!r} must be a graph")
    return graph


# -- If --------------------------------------------------------------------------------------


@converter("If", 1, attrs=("then_branch", "else_branch"))
def _if(node: OnnxNode, ctx: ConversionContext) -> Values:
    pred = _scalar(ctx, node, ctx.input(0), "the condition (input 0)", d.bool_)
    wanted = len(node.outputs)
    for attr in ("then_branch", "else_branch"):
        given = len(_subgraph(node, attr).output)
        if given != wanted:
            raise node.fail(f"{attr} has {given} output(s); the node has {wanted}")

    known = ctx.static.get(node.inputs[0])
    if known is not None and np.size(known) == 1:
        return _taken_branch(ctx, node, "then_branch" if bool(known.reshape(())) else "else_branch")

    built: dict[str, list[Tensor]] = {}
    failed: dict[str, OnnxImportError] = {}
    forms: dict[str, list[Value]] = {}

    def branch(attr: str) -> Any:
        def build() -> list[Tensor]:
            try:
                values = subgraph_values(ctx, node, attr, {})
            except OnnxImportError as exc:
                failed[attr] = exc
                raise
            # Not a branch that fails to build (``_one_branch_fails``): a model kernloom
            # cannot import whichever branch runs.
            _check_forms(node, attr, values, forms)
            built[attr] = [t for value in values for t in flatten(value)]
            return built[attr]

        return build

    try:
        try:
            merged = cond(pred, branch("then_branch"), branch("else_branch"), name="if")
        except OnnxImportError:
            if len(failed) != 1:
                raise
            merged = _one_branch_fails(ctx, node, pred, branch, failed)
    except OnnxImportError:
        raise
    except InvalidArgumentError as exc:
        raise node.fail(
            f"then_branch and else_branch do not give outputs kl.cond can merge: {exc}"
        ) from exc
    template = next(iter(forms.values()))
    tensors = iter([merged] if isinstance(merged, Tensor) else list(merged))
    return [rebuild(value, tensors) for value in template]


def _check_forms(
    node: OnnxNode, attr: str, values: list[Value], forms: dict[str, list[Value]]
) -> None:
    """Record what branch ``attr`` gives, and check it against the branch built before:
    with a condition known only at run time, kl.cond merges the branches tensor by
    tensor, so a sequence must have the same length in both and an optional be empty in
    both or in neither (kernloom resolves them at import)."""
    for other, before in forms.items():
        for index, (mine, theirs) in enumerate(zip(values, before, strict=True)):
            if not same_form(mine, theirs):
                raise node.fail(
                    f"output {index} is {describe_value(theirs)} in {other} but "
                    f"{describe_value(mine)} in {attr}: sequences and optionals are resolved "
                    "at import, so with a condition known only at run time both branches "
                    "must give the same kind of value (a sequence of the same length, an "
                    "optional empty in both or in neither)"
                )
    forms[attr] = values


def _one_branch_fails(
    ctx: ConversionContext,
    node: OnnxNode,
    pred: Tensor,
    branch: Any,
    failed: dict[str, OnnxImportError],
) -> Any:
    """The If built again with the branch that did not build (``failed``) as one that
    fails when it runs: an Assert on the condition, naming the If node and the build
    error. A condition unknown at import leaves both branches to be built, and a branch
    the model never takes for the inputs it is given may not build at all (the expanded
    AffineGrid's 3-D branch, for a 2-D size); TensorFlow's cond would fail the same way at
    graph construction, but an ONNX runtime only ever runs the branch it takes. The
    other branch is built first, so the failing one can give outputs of its dtypes and
    static shapes; if it does not build either, the first error stands."""
    ((bad, error),) = failed.items()
    good = "else_branch" if bad == "then_branch" else "then_branch"
    good_outputs: list[Tensor] = []

    def build_good() -> list[Tensor]:
        good_outputs.extend(branch(good)())
        return good_outputs

    def build_failing() -> list[Tensor]:
        # Runs only where pred selects ``bad``: the Assert's condition is then false.
        holds = pred if bad == "else_branch" else ops.logical_not(pred)
        message = (
            f"ONNX node {node.describe()}: its condition selected {bad} at run time, which "
            f"did not build at import ({error}): feed inputs for which the model takes "
            f"{good}, or fix the model so that {bad} builds"
        )
        check = run_time_check(holds, [pred], message, f"{bad}_did_not_build")
        outputs = []
        with control_dependencies([check]):
            for value in good_outputs:
                outputs.append(ops.identity(ctx.const(_placeholder_value(value), value.dtype)))
        return outputs

    taken = pred if good == "then_branch" else ops.logical_not(pred)
    try:
        return cond(taken, build_good, build_failing, name="if")
    except OnnxImportError:
        raise error from None


def _placeholder_value(value: Tensor) -> np.ndarray[Any, Any]:
    """Zeros with ``value``'s static shape (an unknown dimension as 0, an unknown rank as a
    scalar): what a branch that fails when it runs gives to kl.cond's Merge, so the merged
    output keeps the shape the other branch knows."""
    if value.shape.rank is None:
        return np.zeros((), dtype=value.dtype.numpy_dtype)
    dims = [0 if v is None else int(v) for v in value.shape.as_list()]
    return np.zeros(dims, dtype=value.dtype.numpy_dtype)


def _taken_branch(ctx: ConversionContext, node: OnnxNode, attr: str) -> Values:
    """The branch an If whose condition is known at import time takes, built inline (as
    TensorFlow's ``smart_cond``): the other branch may not even build for these inputs
    (the expanded AffineGrid splits a 4-element size into 5 there), and what the taken
    one knows at import time stays known to the nodes after the If."""
    inner = _built_subgraph(ctx, node, attr, {})
    outputs: list[Value] = []
    for name, value in zip(node.outputs, _subgraph(node, attr).output, strict=False):
        if name and value.name in inner.static:
            ctx.static[name] = inner.static[value.name]
        outputs.append(inner.lookup(value.name))
    return outputs


# -- Loop ------------------------------------------------------------------------------------


def _carried_invariant(initial: Tensor, declared: onnx.ValueInfoProto) -> TensorShape:
    """The shape a loop-carried value keeps over the iterations: its initial shape, with
    the dimensions the body's input declares as unknown or symbolic (or that differ)
    left open, so a body that grows a value along such a dimension converts. A body
    input that declares no shape starts from the initial shape: ``_run_while`` opens the
    dimensions the body changes (``_undeclared``)."""
    if not declared.type.tensor_type.HasField("shape"):
        return initial.shape
    dims = declared.type.tensor_type.shape.dim
    shape = TensorShape([int(v.dim_value) if v.HasField("dim_value") else None for v in dims])
    return relaxed_shape(initial.shape, shape)


def _undeclared(values: Sequence[onnx.ValueInfoProto], first: int) -> list[int]:
    """The loop-variable indices (``values[i]`` is loop variable ``first + i``) of the
    carried values whose body input declares no shape: ONNX's "unknown", so their
    invariants may open wherever the body changes them."""
    return [
        first + i
        for i, value in enumerate(values)
        if value.type.WhichOneof("value") != "tensor_type"
        or not value.type.tensor_type.HasField("shape")
    ]


def _elem_type(value: onnx.ValueInfoProto) -> int:
    """A value's declared tensor element type, 0 when it declares none."""
    if value.type.WhichOneof("value") != "tensor_type":
        return 0
    return int(value.type.tensor_type.elem_type)


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    """The names ``graph`` (and the subgraphs in it) reads but defines nowhere inside:
    its outer-scope references."""
    defined = {v.name for v in graph.input} | {i.name for i in graph.initializer}
    read: set[str] = set()
    for proto in graph.node:
        read.update(name for name in proto.input if name)
        for attr in proto.attribute:
            inner = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in inner:
                read |= _outer_names(sub)
        defined.update(proto.output)
    return read - defined


def _inferred_types(
    ctx: ConversionContext, body: onnx.GraphProto, inputs: list[d.DType]
) -> list[int]:
    """The element types of the body's outputs by onnx's type inference, given the
    dtypes of the body's inputs and of the outer values it reads: a body may leave its
    outputs' types undeclared (the expanded Range function does)."""
    typed = [
        onnx.helper.make_tensor_value_info(value.name, ONNX_OF[dtype], None)
        for value, dtype in zip(body.input, inputs, strict=True)
    ]
    typed += [
        onnx.helper.make_tensor_value_info(name, ONNX_OF[ctx.values[name].dtype], None)
        for name in sorted(_outer_names(body))
        if name in ctx.values and ctx.values[name].dtype in ONNX_OF
    ]
    probe = onnx.helper.make_graph(
        list(body.node), "body", typed, list(body.output), list(body.initializer)
    )
    opsets = [onnx.helper.make_opsetid(domain, v) for domain, v in ctx.opsets.items()]
    try:
        inferred = onnx.shape_inference.infer_shapes(
            onnx.helper.make_model(probe, opset_imports=opsets)
        )
    except Exception:  # onnx raises its own errors on graphs it cannot type
        return [0] * len(body.output)
    return [_elem_type(value) for value in inferred.graph.output]


def _scan_dtype(node: OnnxNode, value: onnx.ValueInfoProto, inferred: int, index: int) -> d.DType:
    """The dtype of a scan output, from the body's declaration or onnx's type inference:
    the accumulator that collects it must exist before the body is built."""
    elem = _elem_type(value) or inferred
    if not elem:
        raise node.fail(
            f"scan output {index} (body output {value.name!r}) has no tensor element type "
            "and onnx's type inference finds none: the importer creates the output before "
            "converting the body; declare the body output's type"
        )
    return kernloom_dtype(elem, f"ONNX node {node.describe()}: scan output {index}")


def _declared_dims(value: onnx.ValueInfoProto) -> list[int]:
    """A scan output's per-iteration shape when the body declares it fully, else []:
    the shape a loop of zero iterations gives its (empty) scan output after axis 0."""
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return []
    dims = tensor_type.shape.dim
    if not all(v.HasField("dim_value") for v in dims):
        return []
    return [int(v.dim_value) for v in dims]


class _LoopPlan:
    """What a Loop node's body takes and gives, checked against the node before any op
    is built: ``carried`` loop-carried values, then ``scans`` scan outputs."""

    def __init__(self, node: OnnxNode, body: onnx.GraphProto) -> None:
        self.carried = len(node.inputs) - 2
        if self.carried < 0:
            raise node.fail("Loop takes at least two inputs (M and cond, either may be empty)")
        if len(body.input) != self.carried + 2:
            raise node.fail(
                f"the body has {len(body.input)} input(s); a Loop with {self.carried} "
                f"loop-carried value(s) needs {self.carried + 2} (iteration_num, cond_in, "
                "then one per loop-carried value)"
            )
        self.scans = len(body.output) - 1 - self.carried
        if self.scans < 0:
            raise node.fail(
                f"the body has {len(body.output)} output(s); it needs at least "
                f"{self.carried + 1} (cond_out, then one per loop-carried value)"
            )
        if len(node.outputs) > self.carried + self.scans:
            raise node.fail(
                f"the node has {len(node.outputs)} outputs but the body gives only "
                f"{self.carried} loop-carried value(s) and {self.scans} scan output(s)"
            )
        self.input_names = [value.name for value in body.input]
        self.scan_values = list(body.output[1 + self.carried :])


@converter("Loop", 1, attrs=("body",))
def _loop(node: OnnxNode, ctx: ConversionContext) -> Values:
    body = _subgraph(node, "body")
    plan = _LoopPlan(node, body)
    if any(
        ctx.has_input(i) and isinstance(ctx.value(i), OnnxSequence | OnnxOptional)
        for i in range(2, 2 + plan.carried)
    ):
        return _unrolled(node, ctx, body, plan)
    trip_count = ctx.optional(0)
    limit = None if trip_count is None else _scalar(ctx, node, trip_count, "M (input 0)", d.int64)
    has_cond = ctx.has_input(1)
    keep0 = (
        _scalar(ctx, node, ctx.input(1), "cond (input 1)", d.bool_)
        if has_cond
        else ctx.const(np.bool_(True))
    )
    carried = []
    for index in range(plan.carried):
        if not ctx.has_input(2 + index):
            raise node.fail(f"loop-carried input {2 + index} is empty; give it a value")
        carried.append(ctx.input(2 + index))
    given = [d.int64, d.bool_, *(t.dtype for t in carried)]
    accumulators, elements = _accumulators(
        ctx, node, body, plan.scan_values, given, 1 + plan.carried
    )
    invariants = [
        TensorShape([]),
        TensorShape([]),
        *(_carried_invariant(t, v) for t, v in zip(carried, body.input[2:], strict=True)),
        *([TensorShape([None])] * (2 * plan.scans)),
    ]
    recorded: list[TensorShape] = []

    def keep_going(step: Tensor, keep: Tensor, *_: Tensor) -> Tensor:
        return keep if limit is None else ops.logical_and(ops.less(step, limit), keep)

    def iterate(step: Tensor, keep: Tensor, *state: Tensor) -> list[Tensor]:
        values, accs, _ = _split(state, plan)
        bound = dict(zip(plan.input_names, [step, keep, *values], strict=True))
        outputs = convert_subgraph(ctx, node, "body", bound)
        keep_out = (
            _scalar(ctx, node, outputs[0], "the body's cond_out", d.bool_) if has_cond else keep
        )
        grown = _grown(ctx, node, accs, outputs[1 + plan.carried :], recorded)
        return [
            ops.add(step, ctx.const(np.int64(1))),
            keep_out,
            *outputs[1 : 1 + plan.carried],
            *grown,
        ]

    final = _run_while(
        node,
        keep_going,
        iterate,
        [ctx.const(np.int64(0)), keep0, *carried, *accumulators, *elements],
        invariants,
        "0 and 1 are the iteration count and the condition",
        _undeclared(body.input[2:], 2),
    )
    count, values, accs, shapes = final[0], *_split(final[2:], plan)
    return [*values, *_all_stacked(ctx, count, accs, shapes, recorded)]


_MOST_UNROLLED = 10_000
"""The most iterations a Loop carrying a sequence is unrolled to at import."""


def _unrolled(
    node: OnnxNode, ctx: ConversionContext, body: onnx.GraphProto, plan: _LoopPlan
) -> Values:
    """A Loop that carries a sequence or an optional, unrolled at import: kernloom resolves
    those at import (``kernloom.onnx._values``), so their length cannot change from one
    iteration of a run-time while_loop to the next. Exact, and possible only where the
    number of iterations is known at import: the trip count and the condition known then,
    and the body's cond_out known at import in every iteration (SequenceMap's expansion
    loops over ``SequenceLength`` with a constant condition)."""
    why = (
        "this Loop carries a sequence or an optional, which kernloom resolves at import, so "
        "it is unrolled at import and its number of iterations must be known then"
    )
    trips = ctx.static_input(0) if ctx.has_input(0) else np.int64(_MOST_UNROLLED)
    if trips is None:
        raise node.fail(f"{why}: M (input 0) is computed or fed at run time")
    keep = ctx.static_input(1) if ctx.has_input(1) else np.bool_(True)
    if keep is None:
        raise node.fail(f"{why}: cond (input 1) is computed or fed at run time")
    carried: list[Value] = []
    for index in range(2, 2 + plan.carried):
        if not ctx.has_input(index):
            raise node.fail(f"loop-carried input {index} is empty; give it a value")
        carried.append(ctx.value(index))
    scanned: list[list[Tensor]] = [[] for _ in range(plan.scans)]
    step = 0
    while bool(np.asarray(keep).reshape(())) and step < int(np.asarray(trips).reshape(())):
        if step == _MOST_UNROLLED:
            raise node.fail(f"{why}: it runs more than {_MOST_UNROLLED} iterations")
        names = plan.input_names
        bound: dict[str, Value] = {
            names[0]: ctx.const(np.int64(step)),
            names[1]: ctx.const(np.bool_(True)),
        }
        known = {names[0]: np.asarray(step, np.int64), names[1]: np.asarray(True)}
        inner = _built_subgraph(
            ctx, node, "body", {**bound, **dict(zip(names[2:], carried, strict=True))}, known
        )
        outputs = [inner.lookup(value.name) for value in body.output]
        keep = inner.static.get(body.output[0].name)
        if keep is None:
            raise node.fail(f"{why}: the body's cond_out is computed at run time")
        carried = outputs[1 : 1 + plan.carried]
        for index, (values, value) in enumerate(
            zip(scanned, outputs[1 + plan.carried :], strict=True)
        ):
            if not isinstance(value, Tensor):
                raise node.fail(
                    f"scan output {index} is {describe_value(value)}; it must be a tensor"
                )
            values.append(value)
        step += 1
    if plan.scans and step == 0:
        raise node.fail(f"{why}; it runs no iteration, and its scan outputs' shapes are unknown")
    stacked: list[Value] = [ops.pack(values) for values in scanned]
    return [*carried, *stacked][: len(node.outputs)]


def _accumulators(
    ctx: ConversionContext,
    node: OnnxNode,
    body: onnx.GraphProto,
    scan_values: list[onnx.ValueInfoProto],
    given: list[d.DType],
    first: int,
) -> tuple[list[Tensor], list[Tensor]]:
    """The initial loop variables of the scan outputs (body outputs ``first`` on, fed
    inputs of dtypes ``given``): an empty flat accumulator each, of the dtype the body
    declares or onnx infers, and its per-iteration shape as far as declared."""
    inferred = [0] * len(scan_values)
    if any(not _elem_type(value) for value in scan_values):
        inferred = _inferred_types(ctx, body, given)[first:]
    dtypes = [_scan_dtype(node, value, inferred[i], i) for i, value in enumerate(scan_values)]
    accumulators = [ctx.const(np.zeros(0, dtype.numpy_dtype), dtype) for dtype in dtypes]
    return accumulators, [ctx.int64s(_declared_dims(value)) for value in scan_values]


def _grown(
    ctx: ConversionContext,
    node: OnnxNode,
    accs: list[Tensor],
    scanned: Sequence[Tensor],
    recorded: list[TensorShape],
) -> list[Tensor]:
    """The accumulators with this iteration's scan-output values appended, then those
    values' shapes (loop variables too); their static shapes go to ``recorded``."""
    recorded[:] = [t.shape for t in scanned]
    grown = [
        _append(ctx, node, acc, t, i) for i, (acc, t) in enumerate(zip(accs, scanned, strict=True))
    ]
    return [*grown, *(ops.shape(t, out_type=d.int64) for t in scanned)]


def _run_while(
    node: OnnxNode,
    keep_going: Any,
    iterate: Any,
    variables: list[Tensor],
    invariants: list[TensorShape],
    leading: str,
    relaxable: Sequence[int] = (),
) -> list[Tensor]:
    """``kl.while_loop`` over ``variables``, its shape and dtype errors reported on the
    node (``leading`` says what the first loop variables are). The invariants of the
    loop variables in ``relaxable`` (undeclared shapes) open where the body returns
    another shape, those of the others where it returns a compatible but less specific
    one, and the loop is built again: as TensorFlow's ``shape_invariants`` with ``None``
    where a value changes. Each try opens a dimension or more, so this ends; the tries
    that failed leave unreachable nodes, as an If's failed branch does."""
    returned: list[TensorShape] = []
    body = _recording(iterate, returned)
    while True:
        returned.clear()
        try:
            return list(while_loop(keep_going, body, variables, shape_invariants=invariants))
        except OnnxImportError:
            raise
        except InvalidArgumentError as exc:
            opened = _opened(invariants, returned, relaxable)
            if opened is None:
                raise node.fail(
                    f"the body does not keep its loop-carried values' dtypes and shapes: "
                    f"{exc} (loop variable {leading}; a loop-carried value whose shape "
                    "changes converts when the body's input declares the changing "
                    "dimensions as symbolic, or declares no shape)"
                ) from exc
            invariants = opened


def _recording(iterate: Any, returned: list[TensorShape]) -> Any:
    """``iterate``, keeping the shapes of what it returns in ``returned`` (the body's
    loop variables as built, which a failed ``kl.while_loop`` does not say)."""

    def body(*state: Tensor) -> list[Tensor]:
        results: list[Tensor] = iterate(*state)
        returned[:] = [t.shape for t in results]
        return results

    return body


def _opened(
    invariants: list[TensorShape], returned: list[TensorShape], relaxable: Sequence[int]
) -> list[TensorShape] | None:
    """``invariants`` with those in ``relaxable`` relaxed to the shapes the body
    ``returned``, and every other one relaxed where the body's shape is compatible with it
    but less specific (``kl.while_loop`` needs each iteration's shape at least as specific
    as the invariant: a body whose inference leaves open a dimension the body's input
    declares would otherwise not convert); None where none changes (the error is another:
    a dtype, or a shape that contradicts the declared one)."""
    if len(returned) != len(invariants):
        return None
    opened = list(invariants)
    for index, (invariant, shape) in enumerate(zip(invariants, returned, strict=True)):
        if index in relaxable or invariant.is_compatible_with(shape):
            opened[index] = relaxed_shape(invariant, shape)
    return None if opened == invariants else opened


def _all_stacked(
    ctx: ConversionContext,
    count: Tensor,
    accs: list[Tensor],
    shapes: list[Tensor],
    recorded: list[TensorShape],
) -> list[Tensor]:
    """Every scan output stacked along a new axis 0 (see :func:`_stacked`)."""
    return [
        _stacked(ctx, count, acc, shape, recorded[i] if recorded else TensorShape(None))
        for i, (acc, shape) in enumerate(zip(accs, shapes, strict=True))
    ]


def _split(
    state: Sequence[Tensor], plan: _LoopPlan | _ScanPlan
) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """Loop variables after the counter (and a Loop's condition): (carried,
    accumulators, shapes)."""
    carried, rest = list(state[: plan.carried]), list(state[plan.carried :])
    return carried, rest[: plan.scans], rest[plan.scans :]


def _append(
    ctx: ConversionContext, node: OnnxNode, acc: Tensor, value: Tensor, index: int
) -> Tensor:
    """``acc`` (the scan output so far, flat) with this iteration's value appended: a flat
    accumulator has one shape whatever the value's, so it is a plain loop variable."""
    if value.dtype is not acc.dtype:
        raise node.fail(
            f"scan output {index} is {value.dtype.name} but the body declares it "
            f"{acc.dtype.name}; fix the body output's declared type"
        )
    flat = ops.reshape(value, ctx.int64s([-1]))
    return ops.concat_v2([acc, flat], ctx.const(np.int32(0)))


def _stacked(
    ctx: ConversionContext, count: Tensor, acc: Tensor, shape: Tensor, element: TensorShape
) -> Tensor:
    """A scan output as ONNX gives it: the iterations' values stacked along a new axis
    0. The per-iteration shape is a constant where the body's value had a static shape
    (so the output's static shape is known), else the last iteration's, carried."""
    if element.rank is not None and element.is_fully_defined():
        shape = ctx.int64s([int(v) for v in element.as_tuple()])
    dims = ops.concat_v2([ops.reshape(count, ctx.int64s([1])), shape], ctx.const(np.int32(0)))
    return ops.reshape(acc, dims)


# -- Scan ------------------------------------------------------------------------------------


def _ints(node: OnnxNode, attr: str, count: int, what: str) -> list[int]:
    """The per-input or per-output list attribute ``attr``, zeros when absent: ONNX
    lets Scan leave its axes and directions out (axis 0, forward)."""
    given = node.attr(attr)
    if given is None:
        return [0] * count
    values = [int(v) for v in given]
    if len(values) != count:
        raise node.fail(f"{attr} has {len(values)} value(s); give one per {what} ({count})")
    return values


def _directions(node: OnnxNode, attr: str, count: int, what: str) -> list[int]:
    values = _ints(node, attr, count, what)
    if any(v not in (0, 1) for v in values):
        raise node.fail(f"{attr} must hold 0 (forward) or 1 (reverse) only, got {values}")
    return values


class _ScanPlan:
    """What a Scan node's body takes and gives, checked against the node before any op
    is built: ``carried`` state values, ``inputs`` scan inputs, ``scans`` scan outputs.
    ``carried`` and ``scans`` name the same counts as :class:`_LoopPlan`'s, so the
    Loop's helpers (``_split``) serve the Scan's while_loop as well."""

    def __init__(self, node: OnnxNode, body: onnx.GraphProto, given: int) -> None:
        count = node.attr("num_scan_inputs")
        if count is None or int(count) < 1:
            raise node.fail("num_scan_inputs must be given and at least 1")
        self.inputs = int(count)
        self.carried = given - self.inputs
        if self.carried < 0:
            raise node.fail(
                f"num_scan_inputs is {self.inputs} but the node has only {given} state and "
                "scan input(s)"
            )
        if len(body.input) != given:
            raise node.fail(
                f"the body has {len(body.input)} input(s); this Scan needs {given} (one per "
                f"state value, {self.carried}, then one per scan input, {self.inputs})"
            )
        self.scans = len(body.output) - self.carried
        if self.scans < 0:
            raise node.fail(
                f"the body has {len(body.output)} output(s); it needs at least one per state "
                f"value ({self.carried})"
            )
        if len(node.outputs) > self.carried + self.scans:
            raise node.fail(
                f"the node has {len(node.outputs)} outputs but the body gives only "
                f"{self.carried} state value(s) and {self.scans} scan output(s)"
            )
        self.input_names = [value.name for value in body.input]
        self.scan_values = list(body.output[self.carried :])
        self.input_dirs = [0] * self.inputs
        self.output_axes = [0] * self.scans
        self.output_dirs = [0] * self.scans


def _scan_length(
    ctx: ConversionContext, node: OnnxNode, xs: list[Tensor], axes: list[int]
) -> Tensor:
    """The number of iterations: the scan inputs' common length along their scan axes,
    a constant where the first input's is known at import time."""
    known = [
        x.shape.as_list()[a] if x.shape.rank is not None else None
        for x, a in zip(xs, axes, strict=True)
    ]
    lengths = {n for n in known if n is not None}
    if len(lengths) > 1:
        raise node.fail(
            f"the scan inputs have different lengths along their scan axes ({known}); "
            "they must all have the same"
        )
    if known[0] is not None:
        return ctx.const(np.int64(known[0]))
    return ops.gather_v2(
        ops.shape(xs[0], out_type=d.int64), ctx.const(np.int64(axes[0])), ctx.const(np.int32(0))
    )


def _scan_axis(node: OnnxNode, x: Tensor, axis: int, what: str) -> int:
    """``axis`` of ``x`` made non-negative (opset 11 allows negative axes)."""
    rank = x.shape.rank
    if rank is None:
        if axis < 0:
            raise node.fail(f"{what} has a negative axis {axis} and a rank unknown at import time")
        return axis
    if not -rank <= axis < rank:
        raise node.fail(
            f"{what}'s axis {axis} is out of range for its rank {rank}: give one in "
            f"[{-rank}, {rank - 1}]"
        )
    return axis % rank


def _scan_loop(
    ctx: ConversionContext,
    node: OnnxNode,
    plan: _ScanPlan,
    states: list[Tensor],
    xs: list[Tensor],
    axes: list[int],
    length: Tensor,
) -> tuple[list[Tensor], list[Tensor]]:
    """The states after ``length`` iterations of the body, and each scan output stacked
    along a new axis 0 in iteration order: one while_loop over the scan axis whose body
    binds the states and this iteration's slice of every scan input (from the end for a
    reversed input) and grows the scan outputs as the Loop's accumulators do."""
    body = _subgraph(node, "body")
    given = [*(t.dtype for t in states), *(x.dtype for x in xs)]
    accumulators, elements = _accumulators(ctx, node, body, plan.scan_values, given, plan.carried)
    invariants = [
        TensorShape([]),
        *(_carried_invariant(t, v) for t, v in zip(states, body.input, strict=False)),
        *([TensorShape([None])] * (2 * plan.scans)),
    ]
    last = ops.sub(length, ctx.const(np.int64(1)))
    recorded: list[TensorShape] = []

    def keep_going(step: Tensor, *_: Tensor) -> Tensor:
        return ops.less(step, length)

    def iterate(step: Tensor, *state: Tensor) -> list[Tensor]:
        values, accs, _ = _split(state, plan)
        slices = [
            ops.gather_v2(x, ops.sub(last, step) if reverse else step, ctx.const(np.int32(axis)))
            for x, axis, reverse in zip(xs, axes, plan.input_dirs, strict=True)
        ]
        bound = dict(zip(plan.input_names, [*values, *slices], strict=True))
        outputs = convert_subgraph(ctx, node, "body", bound)
        grown = _grown(ctx, node, accs, outputs[plan.carried :], recorded)
        return [ops.add(step, ctx.const(np.int64(1))), *outputs[: plan.carried], *grown]

    final = _run_while(
        node,
        keep_going,
        iterate,
        [ctx.const(np.int64(0)), *states, *accumulators, *elements],
        invariants,
        "0 is the iteration count",
        _undeclared(body.input[: plan.carried], 1),
    )
    count, values, accs, shapes = final[0], *_split(final[1:], plan)
    return values, _all_stacked(ctx, count, accs, shapes, recorded)


def _placed(
    ctx: ConversionContext, node: OnnxNode, stacked: Tensor, axis: int, reverse: int, index: int
) -> Tensor:
    """A scan output stacked along axis 0 in iteration order, moved where the node's
    ``scan_output_axes`` and ``scan_output_directions`` put it (a reversed one has the
    last iteration's value first)."""
    if reverse:
        stacked = ops.reverse_v2(stacked, ctx.int32s([0]))
    if axis == 0:
        return stacked
    rank = stacked.shape.rank
    if rank is None:
        raise node.fail(
            f"scan output {index} goes along axis {axis}, but the body's value has a rank "
            "unknown at import time: declare the body output's shape"
        )
    if not -rank <= axis < rank:
        raise node.fail(f"scan_output_axes[{index}] = {axis} is out of range for rank {rank}")
    axis %= rank
    perm = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
    return ops.transpose(stacked, ctx.int32s(perm))


_SCAN_ATTRS = ("body", "num_scan_inputs")


@converter(
    "Scan",
    9,
    attrs=(
        *_SCAN_ATTRS,
        "scan_input_axes",
        "scan_input_directions",
        "scan_output_axes",
        "scan_output_directions",
    ),
)
def _scan(node: OnnxNode, ctx: ConversionContext) -> Result:
    plan = _ScanPlan(node, _subgraph(node, "body"), len(node.inputs))
    plan.input_dirs = _directions(node, "scan_input_directions", plan.inputs, "scan input")
    plan.output_axes = _ints(node, "scan_output_axes", plan.scans, "scan output")
    plan.output_dirs = _directions(node, "scan_output_directions", plan.scans, "scan output")
    values = [ctx.input(i) for i in range(len(node.inputs))]
    states, xs = values[: plan.carried], values[plan.carried :]
    axes = [
        _scan_axis(node, x, axis, f"scan input {i}")
        for i, (x, axis) in enumerate(
            zip(xs, _ints(node, "scan_input_axes", plan.inputs, "scan input"), strict=True)
        )
    ]
    finals, stacked = _scan_loop(
        ctx, node, plan, states, xs, axes, _scan_length(ctx, node, xs, axes)
    )
    scans = [
        _placed(ctx, node, t, axis, reverse, i)
        for i, (t, axis, reverse) in enumerate(
            zip(stacked, plan.output_axes, plan.output_dirs, strict=True)
        )
    ]
    return [*finals, *scans]


@converter("Scan", 8, 8, attrs=(*_SCAN_ATTRS, "directions"))
def _scan8(node: OnnxNode, ctx: ConversionContext) -> Result:
    """Scan-8: every state and scan input has a batch axis 0 and scans along axis 1; the
    body sees one batch entry. Each entry (the batch size must be known at import time)
    runs its own while_loop, for ``sequence_lens[b]`` iterations where that input is
    given, its scan outputs zero-padded to the inputs' length as onnxruntime does."""
    plan = _ScanPlan(node, _subgraph(node, "body"), len(node.inputs) - 1)
    plan.input_dirs = _directions(node, "directions", plan.inputs, "scan input")
    values = [ctx.input(i) for i in range(1, len(node.inputs))]
    batch = values[0].shape.as_list()[0] if values[0].shape.rank else None
    if batch is None or batch < 1:
        raise node.fail(
            f"the batch size (axis 0 of {node.inputs[1]!r}) is {batch}; Scan-8 converts "
            "for a batch size known at import time and at least 1 (or export with opset 9+)"
        )
    lengths = ctx.optional(0)
    xs = values[plan.carried :]
    axes = [_scan_axis(node, x, 1, f"scan input {i}") for i, x in enumerate(xs)]
    full = _scan_length(ctx, node, xs, axes)
    entries = []
    for b in range(batch):
        index = ctx.const(np.int64(b))
        picked = [ops.gather_v2(v, index, ctx.const(np.int32(0))) for v in values]
        length = full if lengths is None else ops.gather_v2(lengths, index, ctx.const(np.int32(0)))
        finals, stacked = _scan_loop(
            ctx,
            node,
            plan,
            picked[: plan.carried],
            picked[plan.carried :],
            [0] * plan.inputs,
            length,
        )
        if lengths is not None:
            stacked = [_padded(ctx, node, t, ops.sub(full, length)) for t in stacked]
        entries.append([*finals, *stacked])
    return [ops.pack(list(column), axis=0) for column in zip(*entries, strict=True)]


def _padded(ctx: ConversionContext, node: OnnxNode, stacked: Tensor, extra: Tensor) -> Tensor:
    """``stacked`` with ``extra`` zero rows appended along axis 0: a batch entry whose
    sequence is shorter than the inputs' scan axis."""
    rank = stacked.shape.rank
    if rank is None:
        raise node.fail(
            "with sequence_lens, a scan output's rank must be known at import time to pad "
            "it: declare the body output's shape"
        )
    first = ops.pack([ctx.const(np.int64(0)), extra], axis=0)
    rows = [ops.reshape(first, ctx.int64s([1, 2])), ctx.const(np.zeros((rank - 1, 2), np.int64))]
    return ops.pad(stacked, ops.concat_v2(rows, ctx.const(np.int32(0))))
