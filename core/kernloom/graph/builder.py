"""The TF-1-style builder: ``kl.constant``, ``kl.placeholder``, scopes, and the generated
op wrappers (``kl.ops.mat_mul(a, b, transpose_b=True)``) with real signatures.

Python numbers, lists and numpy arrays passed where a tensor is expected become
constants. Their dtype follows the other tensor inputs of the same type attr (so
``x + 1`` keeps ``x``'s dtype); with nothing to follow, Python floats become float32 and
ints int32 (int64 when one does not fit), as in TensorFlow, and numpy arrays keep their
dtype. A value that the dtype cannot represent (``x_int32 * 2**40``, ``1.5`` for an
integer, ``1e300`` for float32) is an error here, at graph-building time, naming the op
and input (``kernloom.convert`` holds the rule).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from kernloom.dtypes import DType, as_dtype
from kernloom.framework.op_def import OpDef
from kernloom.graph.graph import Graph, Node, get_default_graph, wrapper_name
from kernloom.graph.op_inputs import make_constant
from kernloom.graph.tensor import Tensor
from kernloom.shapes import as_shape

__all__ = [
    "apply_op",
    "colocate_with",
    "constant",
    "control_dependencies",
    "device",
    "kernel_label",
    "make_wrapper",
    "name_scope",
    "placeholder",
]

OpResult = Tensor | tuple[Tensor, ...] | Node


def _graph_of(values: Sequence[object]) -> Graph:
    for value in values:
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if isinstance(item, Tensor):
                return item.graph
    return get_default_graph()


def constant(
    value: object, dtype: object = None, *, name: str | None = None, graph: Graph | None = None
) -> Tensor:
    """A constant tensor holding ``value`` (converted to ``dtype`` if given)."""
    target = as_dtype(dtype) if dtype is not None else None
    return make_constant(graph or get_default_graph(), value, target, name=name)


def placeholder(
    dtype: object, shape: object = None, *, name: str | None = None, graph: Graph | None = None
) -> Tensor:
    """A value that must be fed when the graph runs; ``shape`` may be partly unknown."""
    graph = graph or get_default_graph()
    node = graph.add_node(
        "Placeholder",
        [],
        # A list or tuple goes to the attr check as it is, so that a bad dimension is
        # reported with the node, op and attr (``kernloom.framework.attr``).
        {
            "dtype": as_dtype(dtype),
            "shape": shape if isinstance(shape, list | tuple) else as_shape(shape),
        },
        name=name or "Placeholder",
    )
    return node.outputs[0]


def apply_op(
    op: str | OpDef,
    inputs: Sequence[object],
    attrs: Mapping[str, Any],
    *,
    name: str | None = None,
    dtype_hint: DType | None = None,
) -> OpResult:
    """Add ``op`` to the graph of its tensor inputs (or the default graph) and return its
    output, a tuple of outputs, or the node itself when it has none."""
    return _graph_of(inputs).apply_op(op, inputs, attrs, name=name, dtype_hint=dtype_hint)


def _inferred_attrs(op_def: OpDef) -> set[str]:
    """Attrs the builder works out from the inputs (``T``, ``N``): not wrapper parameters."""
    names = set()
    for arg in op_def.inputs:
        if arg.type_attr:
            names.add(arg.type_attr)
        if arg.number_attr:
            names.add(arg.number_attr)
        if arg.type_list_attr:
            names.add(arg.type_list_attr)
    return names


def make_wrapper(op_def: OpDef) -> Callable[..., OpResult]:
    """A Python function for ``op_def`` with its real signature and a docstring."""
    inferred = _inferred_attrs(op_def)
    params = [
        inspect.Parameter(a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in op_def.inputs
    ]
    attr_params = []
    for attr in op_def.attrs:
        if attr.name in inferred:
            continue
        default = attr.default if attr.has_default else inspect.Parameter.empty
        attr_params.append(
            inspect.Parameter(attr.name, inspect.Parameter.KEYWORD_ONLY, default=default)
        )
    params += attr_params
    params.append(inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, default=None))
    signature = inspect.Signature(params)
    input_names = [a.name for a in op_def.inputs]
    attr_names = [p.name for p in attr_params]

    def wrapper(*args: Any, **kwargs: Any) -> OpResult:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{wrapper_name(op_def.name)}{signature}: {exc}") from None
        bound.apply_defaults()
        values = [bound.arguments[n] for n in input_names]
        attrs = {n: bound.arguments[n] for n in attr_names}
        return apply_op(op_def, values, attrs, name=bound.arguments["name"])

    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    wrapper.__name__ = wrapper.__qualname__ = wrapper_name(op_def.name)
    wrapper.__module__ = "kernloom.ops"
    lines = [op_def.summary or f"The {op_def.name} op.", "", f"Op: {op_def.signature()}"]
    if op_def.inputs:
        lines += ["", "Args:"] + [
            f"    {a.spec()}" + (f" -- {a.description}" if a.description else "")
            for a in op_def.inputs
        ]
    if attr_params or inferred:
        lines += ["", "Attrs:"] + [
            f"    {a.spec()}" + ("  (inferred from the inputs)" if a.name in inferred else "")
            for a in op_def.attrs
        ]
    if op_def.description:
        lines += ["", op_def.description]
    wrapper.__doc__ = "\n".join(lines)
    return wrapper


# -- scopes on the default graph -------------------------------------------------------------


@contextmanager
def name_scope(name: str | None) -> Iterator[str]:
    """Name the nodes built inside ``name/...`` (``Graph.name_scope``: TensorFlow 1's rules,
    ``"scope/"`` re-enters a scope, None goes back to the root)."""
    with get_default_graph().name_scope(name) as scope:
        yield scope


@contextmanager
def device(name: str) -> Iterator[None]:
    with get_default_graph().device(name):
        yield


@contextmanager
def colocate_with(target: object) -> Iterator[None]:
    """Place the nodes built inside with ``target`` (a tensor, node, variable or node name
    of the default graph, as in TensorFlow: one of another graph is an error)."""
    with get_default_graph().colocate_with(target):
        yield


@contextmanager
def kernel_label(label: str | Mapping[str, str]) -> Iterator[None]:
    with get_default_graph().kernel_label(label):
        yield


@contextmanager
def control_dependencies(deps: Iterable[object] | None) -> Iterator[None]:
    """Nodes built inside run after ``deps`` (tensors, nodes, variables or node names of the
    default graph, as in TensorFlow: one of another graph is an error); None clears the
    outer dependencies."""
    with get_default_graph().control_dependencies(deps):
        yield
