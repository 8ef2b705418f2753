"""``kl.Variable``: a resource variable in the graph (TensorFlow's ``ResourceVariable``).

A variable is a ``VarHandleOp`` node (its handle) plus the ops that use it. Its value lives
in the session's ``ResourceMgr``, so it persists across ``Session.run`` calls and goes away
with the session; ``v.initializer`` assigns the initial value. ``v.value()`` (or using
``v`` where a tensor is expected) reads it; ``assign``, ``assign_add`` and ``assign_sub``
update it and return the value read after the update. The placer keeps every node that
takes the handle on the variable's device.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kernloom.dtypes import DType, as_dtype
from kernloom.errors import InvalidArgumentError
from kernloom.graph.builder import apply_op, constant
from kernloom.graph.graph import Graph, Node, get_default_graph
from kernloom.graph.tensor import Tensor
from kernloom.shapes import TensorShape, as_shape

__all__ = ["Variable", "global_variables", "variables_initializer"]

_by_graph: weakref.WeakKeyDictionary[Graph, list[Variable]] = weakref.WeakKeyDictionary()
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_.\-/]")
"""A character no node name may hold (the graph's rule, TensorFlow's without '>')."""


def _checked_name(name: object, graph: Graph) -> str:
    """``name`` if the variable's nodes can be named after it; else an error naming the
    ``name=`` argument, what is wrong with it and a name that would do."""
    if not isinstance(name, str):
        raise TypeError(f"kl.Variable: name must be a str, got {type(name).__name__}")
    try:
        graph.unique_name(name, mark_used=False)
    except InvalidArgumentError:
        pass
    else:
        if not name.endswith("/"):
            return name
    bad = sorted(set(_NOT_IN_NAMES.findall(name)), key=name.index)
    if not name:
        problem = "it is empty"
    elif bad:
        listed = ", ".join(repr(c) for c in bad)
        problem = f"{listed} {'is' if len(bad) == 1 else 'are'} not allowed in a node name"
        if ":" in bad:
            problem += " (as in TensorFlow, where 'node:0' names output 0 of a node)"
    elif name[0] in "_-/":
        problem = f"it starts with {name[0]!r}"
    else:
        problem = "it ends with '/', which names a scope, not a node"
    suggestion = _NOT_IN_NAMES.sub("_", name).lstrip("_-/").rstrip("/") or "Variable"
    raise InvalidArgumentError(
        f"kl.Variable: name={name!r} is not a valid node name: {problem}; use letters, "
        f"digits, '_', '.', '-' and '/' (for scopes), starting with a letter, a digit or "
        f"'.': pass e.g. name={suggestion!r}"
    )


class Variable:
    """A variable holding ``initial_value``'s dtype and shape (or ``dtype``/``shape``).

    Its nodes are named as TensorFlow names them: ``name`` is opened as a name scope (so
    inside ``kl.name_scope("sc")`` the handle is ``sc/v``, and a second ``v`` there is
    ``sc/v_1``), the handle takes exactly that scope's name, which is also its storage key
    (``shared_name``): two ``kl.Variable`` never share a value. Its nodes sit under it:
    ``sc/v/initial_value``, ``sc/v/Assign`` (the initializer), ``sc/v/Read``...

    As TensorFlow's ``init_scope`` does, the handle, the initial value and the initializer
    are built outside any ``kl.cond`` branch or ``kl.while_loop`` body and without the
    open ``kl.control_dependencies`` (the name and device scopes stay): a variable created
    in a branch or a loop body is initialised by ``kl.variables_initializer()`` with no
    feed and can be read after the loop. Its reads and assignments stay where they are
    built. An initial value computed inside the branch or body cannot be moved out, and
    is an error naming the variable.
    """

    def __init__(
        self,
        initial_value: object,
        dtype: object = None,
        *,
        shape: object = None,
        name: str = "Variable",
        container: str = "",
        graph: Graph | None = None,
    ) -> None:
        if isinstance(initial_value, Tensor):
            graph = graph or initial_value.graph
        else:
            graph = graph or get_default_graph()
        name = _checked_name(name, graph)
        if isinstance(initial_value, Tensor):
            init = initial_value
            if dtype is not None and as_dtype(dtype) is not init.dtype:
                raise InvalidArgumentError(
                    f"kl.Variable {name!r}: initial value {init.name!r} is {init.dtype.name}, "
                    f"not {as_dtype(dtype).name}; cast it first"
                )
            if graph.built_in_flow(init.node):
                raise InvalidArgumentError(
                    f"kl.Variable {graph.unique_name(name, mark_used=False)!r}: the initial "
                    f"value {init.name!r} is computed inside a kl.cond branch or kl.while_loop "
                    f"body. A variable is created outside all control flow (as TensorFlow's "
                    f"init_scope does), where that value does not exist; build the initial "
                    f"value outside the kl.cond/kl.while_loop (TensorFlow raises here too)"
                )
        # The variable's name scope (``sc/v``, or ``sc/v_1`` when taken), reserved once the
        # handle is added under exactly that name, so a variable refused below takes none.
        unique = graph.unique_name(name, mark_used=False)
        # TensorFlow's init_scope: outside every kl.cond/kl.while_loop context and free of
        # the open control dependencies, in the current name and device scopes.
        with (
            graph.control_flow(None),
            graph.control_dependencies(None),
            graph.name_scope(unique + "/"),
        ):
            if not isinstance(initial_value, Tensor):
                init = constant(initial_value, dtype, graph=graph, name="initial_value")
            self.graph = graph
            self.dtype: DType = init.dtype
            self.shape: TensorShape = as_shape(shape) if shape is not None else init.shape
            if not self.shape.is_compatible_with(init.shape):
                raise InvalidArgumentError(
                    f"kl.Variable {unique!r}: initial value has shape {init.shape}, not "
                    f"{self.shape}"
                )
            self.handle: Tensor = graph.add_node(
                "VarHandleOp",
                [],
                {
                    "dtype": self.dtype,
                    "shape": self.shape,
                    "shared_name": unique,
                    "container": container,
                },
                name=unique,
                exact_name=True,  # not made unique again (and so not ``sc/v/sc/v``)
            ).outputs[0]
            self.name = self.handle.node.name
            self.initializer: Node = self._update("AssignVariableOp", init, "Assign")
        _by_graph.setdefault(graph, []).append(self)

    @contextmanager
    def _own_scope(self) -> Iterator[None]:
        """The variable's name scope re-entered (``sc/v/``): its nodes are ``sc/v/Read``,
        ``sc/v/Read_1``..., wherever they are built."""
        with self.graph.name_scope(self.name + "/"):
            yield

    def _update(self, op: str, value: object, what: str) -> Node:
        if isinstance(value, Variable):
            value = value.value()
        with self._own_scope():
            if not isinstance(value, Tensor):
                value = constant(value, self.dtype, graph=self.graph, name=f"{what}_value")
            if not self.shape.is_compatible_with(value.shape):
                raise InvalidArgumentError(
                    f"kl.Variable {self.name!r}: cannot {what.lower()} {value.name!r} of shape "
                    f"{value.shape} to a variable of shape {self.shape}"
                )
            if value.dtype is not self.dtype:
                raise InvalidArgumentError(
                    f"kl.Variable {self.name!r}: cannot {what.lower()} {value.name!r} of dtype "
                    f"{value.dtype.name} to a variable of dtype {self.dtype.name}"
                )
            node = apply_op(op, [self.handle, value], {"dtype": self.dtype}, name=what)
        assert isinstance(node, Node)
        return node

    def value(self) -> Tensor:
        """The value (a new ``ReadVariableOp``: it reads when it runs)."""
        with self._own_scope():
            node = self.graph.add_node(
                "ReadVariableOp", [self.handle], {"dtype": self.dtype}, name="Read"
            )
        self.graph.set_output_shape(node.outputs[0], self.shape)
        return node.outputs[0]

    read_value = value

    def _read_after(self, update: Node) -> Tensor:
        with self.graph.control_dependencies([update]):
            return self.value()

    def assign(self, value: object) -> Tensor:
        """Replace the value; returns the value read after the assignment."""
        return self._read_after(self._update("AssignVariableOp", value, "Assign"))

    def assign_add(self, delta: object) -> Tensor:
        """Add ``delta`` atomically; returns the value read after the update."""
        return self._read_after(self._update("AssignAddVariableOp", delta, "AssignAdd"))

    def assign_sub(self, delta: object) -> Tensor:
        """Subtract ``delta`` atomically; returns the value read after the update."""
        return self._read_after(self._update("AssignSubVariableOp", delta, "AssignSub"))

    def is_initialized(self) -> Tensor:
        with self._own_scope():
            node = self.graph.add_node(
                "VarIsInitializedOp", [self.handle], {}, name="IsInitialized"
            )
        return node.outputs[0]

    def __kl_tensor__(self) -> Tensor:
        """What the builder uses where a tensor is expected: the value."""
        return self.value()

    def __repr__(self) -> str:
        return f"<kl.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>"


def _delegate(method: str) -> Any:
    def operator(self: Variable, *args: Any) -> Tensor:
        result: Tensor = getattr(self.value(), method)(*args)
        return result

    operator.__name__ = method
    return operator


for _method in (
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__pow__",
    "__rpow__",
    "__matmul__",
    "__rmatmul__",
    "__lt__",
    "__gt__",
    "__neg__",
):
    setattr(Variable, _method, _delegate(_method))


def global_variables(graph: Graph | None = None) -> list[Variable]:
    """Every ``kl.Variable`` built in ``graph`` (the default graph if None)."""
    return list(_by_graph.get(graph or get_default_graph(), []))


def existing_variables(
    graph: Graph | None, caller: str, advice: str
) -> tuple[Graph, list[Variable]]:
    """``graph`` (the default graph if None) and its variables, for a ``caller`` that
    defaults to all of them: none is an ``InvalidArgumentError`` naming the caller and
    ``advice`` (most likely the call was made outside ``graph.as_default()``)."""
    target = graph or get_default_graph()
    found = global_variables(target)
    if not found:
        raise InvalidArgumentError(f"{caller}: the graph has no kl.Variable{advice}")
    return target, found


def variables_initializer(
    variables: Sequence[Variable] | None = None,
    *,
    graph: Graph | None = None,
    name: str = "init",
) -> Node:
    """A node whose run initialises ``variables`` (by default every variable of ``graph``,
    or of the default graph): ``session.run(kl.variables_initializer())``."""
    if variables is None:
        target, found = existing_variables(
            graph,
            "kl.variables_initializer()",
            ". Call it inside `with graph.as_default():`, or pass graph= or the variables.",
        )
    else:
        found = list(variables)
        target = found[0].graph if found else graph or get_default_graph()
    with target.control_dependencies([v.initializer for v in found]):
        return target.add_node("NoOp", [], {}, name=name)
