"""``kl.cond`` and ``kl.while_loop``: the builders over Switch, Merge, Enter, Exit,
NextIteration and LoopCond (TensorFlow 1's ``cond``/``while_loop`` with their
``CondContext``/``WhileContext``).

While a branch or a loop body is being built, its context is open on the graph
(``Graph.control_flow``): a tensor from outside is routed in once -- through a ``Switch``
on the predicate for a branch (so it is dead when the branch is not taken), through a
loop-invariant ``Enter`` for a loop body -- and a node with no data input gets a control
input from the context's pivot. Both nest either way.

Loop variables and branch results are nested structures (tensors in lists, tuples,
namedtuples and dicts); Python numbers and arrays in them become constants.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from kernloom import dtypes
from kernloom.errors import InvalidArgumentError
from kernloom.graph.builder import apply_op, constant
from kernloom.graph.graph import COLOCATION_ATTR, FlowContext, Graph, Node, get_default_graph
from kernloom.graph.tensor import Tensor
from kernloom.op_library.control_flow_ops import relaxed_shape
from kernloom.shapes import TensorShape, as_shape

__all__ = ["cond", "while_loop"]

_MAX_PARALLEL: Final = 1 << 16


# -- nested structures ---------------------------------------------------------------------------


def _flatten(structure: Any) -> list[Any]:
    if isinstance(structure, Mapping):
        return [leaf for key in sorted(structure) for leaf in _flatten(structure[key])]
    if isinstance(structure, list | tuple):
        return [leaf for item in structure for leaf in _flatten(item)]
    return [structure]


def _pack(structure: Any, leaves: Sequence[Any]) -> Any:
    """``structure`` with its leaves replaced by ``leaves`` (in ``_flatten`` order)."""
    it = iter(leaves)

    def build(node: Any) -> Any:
        if isinstance(node, Mapping):
            built = {key: build(node[key]) for key in sorted(node)}
            return type(node)(**built) if type(node) is not dict else built
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            return type(node)(*(build(item) for item in node))
        if isinstance(node, list | tuple):
            return type(node)(build(item) for item in node)
        return next(it)

    return build(structure)


def _same_structure(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (
            isinstance(a, Mapping)
            and isinstance(b, Mapping)
            and sorted(a) == sorted(b)
            and all(_same_structure(a[k], b[k]) for k in a)
        )
    if isinstance(a, list | tuple) or isinstance(b, list | tuple):
        return (
            isinstance(a, list | tuple)
            and isinstance(b, list | tuple)
            and len(a) == len(b)
            and all(_same_structure(x, y) for x, y in zip(a, b, strict=True))
        )
    return True


def _to_tensor(value: Any, graph: Graph, what: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if value is None or callable(value) or isinstance(value, Node):
        raise InvalidArgumentError(f"{what} is {value!r}; expected a tensor or a number/array")
    return constant(value, graph=graph)


def _graph_of(values: Sequence[Any]) -> Graph:
    for value in values:
        if isinstance(value, Tensor):
            return value.graph
    return get_default_graph()


# -- contexts ------------------------------------------------------------------------------------


class _Context(abc.ABC):
    """What both contexts share: membership, the import cache, the device of imports."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.parent = graph.flow_context
        self.members: set[str] = set()
        self.imported: dict[str, Tensor] = {}
        self._pivot: Node | None = None
        scopes = graph._scopes
        self.device = scopes.device[-1] if scopes.device else ""

    @property
    def pivot(self) -> Node:
        assert self._pivot is not None
        return self._pivot

    def import_tensor(self, tensor: Tensor) -> Tensor:
        if tensor.node.name in self.members:
            return tensor
        found = self.imported.get(tensor.name)
        if found is None:
            graph = self.graph
            # Built in the enclosing context, with none of the body's control dependencies.
            with graph.control_flow(self.parent), graph.control_dependencies(None):
                found = self._import(tensor)
            self.imported[tensor.name] = found
            self.members.add(found.node.name)  # built outside, but its output is in here
        return found

    @abc.abstractmethod
    def _import(self, tensor: Tensor) -> Tensor:
        """Route ``tensor`` (from the enclosing context) into this one."""

    def import_controls(self, controls: list[Node]) -> list[Node]:
        """A node's control inputs as this context needs them. A cond branch runs in the
        frame of its enclosing context, so that context decides: a loop around it brings a
        node from outside the loop into its frame (TensorFlow's ``CondContext`` leaves
        this to its outer ``WhileContext``); outside every loop they are kept as they are."""
        parent = self.parent
        return controls if parent is None else parent.import_controls(controls)


class _CondContext(_Context):
    def __init__(self, graph: Graph, pred: Tensor, branch: int, pivot: Node) -> None:
        super().__init__(graph)
        self.pred = pred
        self.branch = branch
        self._pivot = pivot

    def _import(self, tensor: Tensor) -> Tensor:
        node = self.graph.add_node(
            "Switch", [tensor, self.pred], {}, name="switch", device=self.device
        )
        return node.outputs[self.branch]


class _WhileContext(_Context):
    def __init__(self, graph: Graph, frame_name: str, parallel_iterations: int) -> None:
        super().__init__(graph)
        self.frame_name = frame_name
        self.parallel_iterations = parallel_iterations

    def set_pivot(self, node: Node) -> None:
        self._pivot = node

    def enter(self, tensor: Tensor, *, is_constant: bool) -> Tensor:
        node = self.graph.add_node(
            "Enter",
            [tensor],
            {
                "frame_name": self.frame_name,
                "is_constant": is_constant,
                "parallel_iterations": self.parallel_iterations,
            },
            name="enter",
            device=self.device,
        )
        self.members.add(node.name)
        return node.outputs[0]

    def _import(self, tensor: Tensor) -> Tensor:
        return self.enter(tensor, is_constant=True)

    def import_controls(self, controls: list[Node]) -> list[Node]:
        """Control inputs from outside the loop waited on from inside the frame, as
        TensorFlow's ``WhileContext._RemoveExternalControlEdges`` does: an edge from a node
        of another frame cannot be followed, so the body waits on an Identity of a value of
        that node brought in by an Enter (a node without outputs gives that value through a
        constant that waits on it). One such Identity per outside node and loop."""
        graph = self.graph
        result = []
        for node in controls:
            if node.name in self.members:
                result.append(node)
                continue
            key = f"^{node.name}"
            found = self.imported.get(key)
            if found is None:
                with graph.control_flow(self.parent), graph.control_dependencies(None):
                    if node.outputs:
                        value = node.outputs[0]
                    else:
                        with graph.control_dependencies([node]):
                            value = constant(0, name="control_value")
                    entered = self._import(value)
                with graph.control_flow(self), graph.control_dependencies(None):
                    found = graph.add_node("Identity", [entered], {}, name="control").outputs[0]
                self.imported[key] = found
            result.append(found.node)
        return result


def _check_scalar_bool(value: Any, what: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise InvalidArgumentError(f"{what} must be a bool scalar tensor, got {value!r}")
    if value.dtype is not dtypes.bool_:
        raise InvalidArgumentError(
            f"{what} must be a bool scalar tensor, got {value.name!r} of dtype {value.dtype.name}"
        )
    if value.shape.rank not in (None, 0):
        raise InvalidArgumentError(
            f"{what} must be a scalar, got {value.name!r} of shape {value.shape}"
        )
    return value


# -- cond ----------------------------------------------------------------------------------------


def cond(
    pred: Tensor,
    true_fn: Callable[[], Any],
    false_fn: Callable[[], Any],
    *,
    name: str | None = None,
) -> Any:
    """``true_fn()`` if ``pred`` else ``false_fn()``, as one graph: only the taken branch runs.

    Both functions return the same structure of tensors with the same dtypes; each output's
    shape is the most specific shape both branches agree on.
    """
    pred = _check_scalar_bool(pred, "kl.cond's pred")
    if not callable(true_fn) or not callable(false_fn):
        raise InvalidArgumentError("kl.cond takes two callables: true_fn and false_fn")
    graph = pred.graph
    with graph.name_scope(name or "cond"):
        outer = graph.flow_context
        pred_in = outer.import_tensor(pred) if outer is not None else pred
        switch = graph.add_node("Switch", [pred_in, pred_in], {}, name="switch_pred")
        pivots = (
            graph.add_node("Identity", [switch.outputs[0]], {}, name="switch_f"),
            graph.add_node("Identity", [switch.outputs[1]], {}, name="switch_t"),
        )
        structures: list[Any] = []
        flats: list[list[Tensor]] = []
        for branch, fn in ((1, true_fn), (0, false_fn)):
            context = _CondContext(graph, pred_in, branch, pivots[branch])
            with graph.control_flow(context):
                result = fn()
                what = "true_fn" if branch else "false_fn"
                leaves = [
                    context.import_tensor(_to_tensor(leaf, graph, f"kl.cond: {what}'s output {i}"))
                    for i, leaf in enumerate(_flatten(result))
                ]
            structures.append(result)
            flats.append(leaves)
        (true_out, false_out), (true_leaves, false_leaves) = structures, flats
        if not _same_structure(true_out, false_out) or len(true_leaves) != len(false_leaves):
            raise InvalidArgumentError(
                f"kl.cond: true_fn and false_fn must return the same structure; true_fn "
                f"returned {_describe(true_out)}, false_fn {_describe(false_out)}"
            )
        merged: list[Tensor] = []
        for index, (t, f) in enumerate(zip(true_leaves, false_leaves, strict=True)):
            if t.dtype is not f.dtype:
                raise InvalidArgumentError(
                    f"kl.cond: output {index} is {t.dtype.name} in true_fn ({t.name!r}) but "
                    f"{f.dtype.name} in false_fn ({f.name!r}); cast one of them"
                )
            merge = graph.add_node("Merge", [[f, t]], {}, name="merge")
            merged.append(merge.outputs[0])
    return _pack(true_out, merged)


def _describe(structure: Any) -> str:
    if isinstance(structure, Tensor):
        return "a tensor"
    leaves = _flatten(structure)
    return f"{type(structure).__name__} of {len(leaves)} value(s)"


# -- while_loop ----------------------------------------------------------------------------------


def while_loop(
    cond_fn: Callable[..., Any],
    body_fn: Callable[..., Any],
    loop_vars: Any,
    *,
    shape_invariants: Any = None,
    parallel_iterations: int = 10,
    maximum_iterations: int | Tensor | None = None,
    name: str | None = None,
) -> Any:
    """Repeat ``loop_vars = body_fn(*loop_vars)`` while ``cond_fn(*loop_vars)``; returns the
    final loop variables in the structure of ``loop_vars``.

    ``loop_vars`` is a tensor or a (nested) list/tuple/namedtuple/dict of them; a list or
    tuple (a namedtuple too) is unpacked into the functions' arguments. The body must keep
    each variable's dtype and return a shape at least as specific as its invariant (by
    default the variable's initial shape: a body result of shape ``(?,)`` for a variable
    that enters as ``(2,)`` is an error; pass ``shape_invariants`` with ``None`` dimensions
    for a variable whose shape changes). Up to ``parallel_iterations`` iterations run at
    once; ``maximum_iterations`` bounds the count.
    """
    if not callable(cond_fn) or not callable(body_fn):
        raise InvalidArgumentError("kl.while_loop takes two callables: cond_fn and body_fn")
    if (
        not isinstance(parallel_iterations, int)
        or isinstance(parallel_iterations, bool)
        or not 1 <= parallel_iterations <= _MAX_PARALLEL
    ):
        raise InvalidArgumentError(
            f"kl.while_loop: parallel_iterations must be an int from 1 to {_MAX_PARALLEL}, got "
            f"{parallel_iterations!r}"
        )
    user_leaves = _flatten(loop_vars)
    if not user_leaves:
        raise InvalidArgumentError("kl.while_loop needs at least one loop variable")
    graph = _graph_of(user_leaves)
    initial = [
        _to_tensor(v, graph, f"kl.while_loop: loop variable {i}") for i, v in enumerate(user_leaves)
    ]
    invariants = _invariants(shape_invariants, loop_vars, initial)
    counted = maximum_iterations is not None
    with graph.name_scope(name or "while") as scope:
        if counted:
            limit = _to_tensor(maximum_iterations, graph, "kl.while_loop: maximum_iterations")
            if limit.dtype is not dtypes.int32 or limit.shape.rank not in (None, 0):
                raise InvalidArgumentError(
                    f"kl.while_loop: maximum_iterations must be an int32 scalar, got "
                    f"{limit.dtype.name} of shape {limit.shape}"
                )
            initial = [constant(0, dtypes.int32, name="iteration"), *initial]
            invariants = [TensorShape([]), *invariants]
        context = _WhileContext(graph, scope.rstrip("/"), parallel_iterations)
        enters = [context.enter(v, is_constant=False) for v in initial]
        # The body runs in its own frame: control dependencies opened outside the loop
        # apply to its Enter nodes, not to the nodes of the body.
        with graph.control_flow(context), graph.control_dependencies(None):
            merges = [graph.add_node("Merge", [[e, e]], {}, name="merge") for e in enters]
            context.set_pivot(merges[0])
            cond_start = len(graph)
            current = []
            for merge, shape in zip(merges, invariants, strict=True):
                graph.set_output_shape(merge.outputs[0], shape)
                current.append(merge.outputs[0])
            user_current = current[1:] if counted else current
            keep_going = _check_scalar_bool(
                _call(cond_fn, loop_vars, user_current), "kl.while_loop: cond_fn's result"
            )
            if counted:
                below = apply_op("Less", [current[0], limit], {})
                keep_going = apply_op("Select", [below, keep_going, False], {})  # type: ignore[assignment]
            loop_cond = graph.add_node("LoopCond", [keep_going], {}, name="loop_cond")
            switches = [
                graph.add_node("Switch", [m.outputs[0], loop_cond.outputs[0]], {}, name="switch")
                for m in merges
            ]
            exits = [graph.add_node("Exit", [s.outputs[0]], {}, name="exit") for s in switches]
            _guard_invariant_only(context, cond_start, len(graph))
            body_start = len(graph)
            body_in = [
                graph.add_node("Identity", [s.outputs[1]], {}, name="body") for s in switches
            ]
            context.set_pivot(body_in[0])
            body_tensors = [b.outputs[0] for b in body_in]
            user_body = body_tensors[1:] if counted else body_tensors
            result = _call(body_fn, loop_vars, user_body)
            results = _body_results(result, loop_vars, graph, context)
            if counted:
                step = apply_op("Add", [body_tensors[0], 1], {})
                assert isinstance(step, Tensor)
                results = [step, *results]
            for index, (value, entry, shape) in enumerate(
                zip(results, initial, invariants, strict=True)
            ):
                _check_loop_var(index - int(counted), value, entry, shape)
            for value, merge in zip(results, merges, strict=True):
                following = graph.add_node(
                    "NextIteration",
                    [value],
                    {COLOCATION_ATTR: [f"loc:@{merge.name}"]},
                    name="next_iteration",
                )
                graph.update_input(merge, 1, following.outputs[0])
            _guard_invariant_only(context, body_start, len(graph))
        outputs = []
        for exit_node, shape in zip(exits, invariants, strict=True):
            graph.set_output_shape(exit_node.outputs[0], shape)
            outputs.append(exit_node.outputs[0])
    return _pack(loop_vars, outputs[1:] if counted else outputs)


def _guard_invariant_only(context: _WhileContext, start: int, end: int) -> None:
    """Give the loop's nodes built at positions ``start:end`` whose every input is a loop
    invariant (and that wait on nothing else) a control input from the pivot (TensorFlow's
    ``WhileContext._MaybeAddControlDependency``).

    Such a node would otherwise run in every iteration the frame has, the last one too,
    where the predicate is false: an ``assign_add(x)`` of an outside ``x`` ran once more
    than the body (once for a loop of no iterations), and a body that returns an outside
    tensor unchanged fed its ``NextIteration`` a live value in that last iteration, which
    started iteration after iteration (a traced run never ended). The pivot of the
    condition is the first Merge; of the body, the first Switch's true output."""
    graph, frame, pivot = context.graph, context.frame_name, context.pivot
    for node in graph.nodes[start:end]:
        if (
            node.op == "Enter"
            or node.control_inputs
            or not node.inputs
            or node.name not in context.members
        ):
            continue
        if all(
            t.node.op == "Enter"
            and t.node.attrs.get("is_constant")
            and t.node.attrs.get("frame_name") == frame
            for t in node.inputs
        ):
            node.control_inputs.append(pivot)


def _call(fn: Callable[..., Any], structure: Any, leaves: list[Tensor]) -> Any:
    """``fn`` on the loop variables: a list or tuple (a namedtuple too, as TensorFlow's
    ``while_loop`` does) unpacked into its arguments, anything else as one argument."""
    packed = _pack(structure, leaves)
    if isinstance(structure, list | tuple):
        return fn(*packed)
    return fn(packed)


def _invariants(shape_invariants: Any, loop_vars: Any, initial: list[Tensor]) -> list[TensorShape]:
    if shape_invariants is None:
        return [t.shape for t in initial]
    given = _flatten_shapes(shape_invariants, loop_vars)
    if len(given) != len(initial):
        raise InvalidArgumentError(
            f"kl.while_loop: {len(given)} shape invariant(s) for {len(initial)} loop variable(s)"
        )
    shapes = []
    for index, (shape, tensor) in enumerate(zip(given, initial, strict=True)):
        invariant = as_shape(shape)
        if not invariant.is_compatible_with(tensor.shape) or (
            relaxed_shape(invariant, tensor.shape) != invariant
        ):
            raise InvalidArgumentError(
                f"kl.while_loop: loop variable {index} ({tensor.name!r}) has shape "
                f"{tensor.shape}, which is not an instance of its shape invariant {invariant}"
            )
        shapes.append(invariant)
    return shapes


def _flatten_shapes(shape_invariants: Any, loop_vars: Any) -> list[Any]:
    """Shape invariants in the structure of ``loop_vars`` (a shape is a leaf, not a list)."""
    if isinstance(loop_vars, Mapping):
        return [
            s for k in sorted(loop_vars) for s in _flatten_shapes(shape_invariants[k], loop_vars[k])
        ]
    if isinstance(loop_vars, list | tuple):
        if not isinstance(shape_invariants, list | tuple) or len(shape_invariants) != len(
            loop_vars
        ):
            raise InvalidArgumentError(
                "kl.while_loop: shape_invariants must have the structure of loop_vars"
            )
        return [
            s
            for inv, var in zip(shape_invariants, loop_vars, strict=True)
            for s in _flatten_shapes(inv, var)
        ]
    return [shape_invariants]


def _body_results(result: Any, loop_vars: Any, graph: Graph, context: FlowContext) -> list[Tensor]:
    expected = _flatten(loop_vars)
    if len(expected) == 1 and isinstance(result, Tensor | int | float):
        leaves = [result]
    elif isinstance(result, list | tuple) and len(expected) == 1 and len(result) == 1:
        leaves = list(result)
    else:
        if not _same_structure(result, loop_vars) or len(_flatten(result)) != len(expected):
            raise InvalidArgumentError(
                f"kl.while_loop: body_fn must return the structure of loop_vars "
                f"({_describe(loop_vars)}), got {_describe(result)}"
            )
        leaves = _flatten(result)
    return [
        context.import_tensor(_to_tensor(v, graph, f"kl.while_loop: body_fn's output {i}"))
        for i, v in enumerate(leaves)
    ]


def _check_loop_var(index: int, value: Tensor, entry: Tensor, invariant: TensorShape) -> None:
    """``value`` (what the body returns for loop variable ``index``, which entered the
    loop as ``entry``) against the variable's dtype and shape invariant.

    The invariant is the static shape of the loop variable on every iteration (its Merge
    and the loop's output have it), so the body's result must be at least as specific:
    the invariant's rank, and every dimension the invariant knows, known and equal
    (TensorFlow's ``_EnforceShapeInvariant``). A merely compatible result -- ``(?,)``
    for ``(2,)`` -- would let the loop's output claim a shape its value may not have."""
    if value.dtype is not entry.dtype:
        raise InvalidArgumentError(
            f"kl.while_loop: loop variable {index} enters the loop as {entry.dtype.name} but "
            f"body_fn returns {value.dtype.name} ({value.name!r}); cast it"
        )
    if relaxed_shape(invariant, value.shape) != invariant:
        declared = "" if invariant == entry.shape else f" (shape invariant {invariant})"
        raise InvalidArgumentError(
            f"kl.while_loop: loop variable {index} ({entry.name!r}) enters the loop with "
            f"shape {entry.shape}{declared}, but has shape {value.shape} after one iteration "
            f"({value.name!r}); to allow the shape to vary across iterations, pass "
            f"shape_invariants= with a less-specific shape (None for each dimension that "
            f"changes, kl.TensorShape(None) for a rank that changes)"
        )
