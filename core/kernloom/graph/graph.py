"""``Graph`` and ``Node``: the dataflow graph a Session runs.

Nodes are added through ``Graph.add_node`` (the op wrappers, ``kl.constant`` and
``kl.placeholder`` all end there), which does at build time what TensorFlow does in
``Operation.__init__``: makes the name unique, applies the active scopes (name, device,
colocation, kernel label, control dependencies), infers the type attrs from the inputs,
checks every attr against the op, and runs shape inference with constant inputs'
values. A node that fails any of this is not added, and the error names it.
"""

from __future__ import annotations

import contextlib
import keyword
import os
import re
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, final

import numpy as np

from kernloom.dtypes import DType
from kernloom.errors import InvalidArgumentError, NotFoundError, did_you_mean
from kernloom.framework.device_name import parse_device_name
from kernloom.framework.node_def import KERNEL_LABEL_ATTR, KERNEL_SCOPE_ATTR
from kernloom.framework.op_def import OpDef, OpRegistry, OpSource
from kernloom.framework.shape_inference import InferenceContext, infer_shapes
from kernloom.graph.graph_def import graph_from_json, graph_to_json, load_graph
from kernloom.graph.node import COLOCATION_ATTR, Node
from kernloom.graph.op_inputs import convert_inputs
from kernloom.graph.tensor import Tensor
from kernloom.op_library import standard_ops
from kernloom.op_library.control_flow_ops import BACK_EDGE_OPS
from kernloom.shapes import TensorShape, as_shape

__all__ = [
    "BACK_EDGE_OPS",
    "COLOCATION_ATTR",
    "Graph",
    "Node",
    "get_default_graph",
    "with_stand_ins",
]

OUTPUT_SHAPES_ATTR: Final = "_output_shapes"
"""Static output shapes a builder set beyond what inference gives (a loop variable's shape
invariant, a variable's read): kept as an attr so they survive GraphDef and copies."""
_NAME: Final = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*")
_NESTED_SCOPE: Final = re.compile(r"[A-Za-z0-9_.\-/]*")
"""A name scope opened inside another: TensorFlow lets it start with '_', '-' or '/' too
(the full names it gives still start with the outer scope's first character)."""


class FlowContext(Protocol):
    """A ``kl.cond`` branch or ``kl.while_loop`` body being built (``graph.control_flow``).

    ``add_node`` hands it each input first (``import_tensor`` routes a tensor from outside
    through a Switch or an Enter), gives a node without data inputs a control input from
    ``pivot`` (so a constant in a branch is dead when the branch is not taken, and a
    constant in a loop body runs in the loop's frame), hands it the node's control inputs
    (``import_controls``: a loop body waits on a node outside through a value brought into
    its frame), and adds every node it builds to ``members`` of each open context.
    """

    members: set[str]

    @property
    def pivot(self) -> Node: ...

    def import_tensor(self, tensor: Tensor) -> Tensor: ...

    def import_controls(self, controls: list[Node]) -> list[Node]: ...


class _Scopes(threading.local):
    """Builder scopes: per graph and per thread, as the builder is used from one thread."""

    def __init__(self) -> None:
        self.name = ""
        """The current name scope (TensorFlow's name stack): ``"outer/inner"``, or ``""``."""
        self.device: list[str] = []
        self.colocate: list[list[Node]] = []
        self.label: list[str | Mapping[str, str]] = []
        self.control: list[list[Node]] = []
        self.flow: list[FlowContext] = []


class _DefaultGraphs(threading.local):
    def __init__(self) -> None:
        self.stack: list[Graph] = []


_defaults = _DefaultGraphs()
_global_default: Graph | None = None
_global_lock = threading.Lock()


def get_default_graph() -> Graph:
    """The innermost ``with graph.as_default()`` graph, or one global graph created on use."""
    if _defaults.stack:
        return _defaults.stack[-1]
    global _global_default
    with _global_lock:
        if _global_default is None:
            _global_default = Graph()
        return _global_default


@final
class Graph:
    """A set of nodes and the builder state used to add more."""

    def __init__(self, registry: OpSource | None = None) -> None:
        self._registry = registry
        self._adopted: dict[str, OpDef] = {}
        """Ops from outside ``ops`` that the generated wrappers brought (a plugin's op
        built into a graph made without a registry)."""
        self._nodes: dict[str, Node] = {}
        self._names_in_use: dict[str, int] = {}
        self._scopes = _Scopes()
        self._lock = threading.RLock()
        self._mutated: list[int] = []
        """Positions of the nodes changed in place after they were added, in order."""
        self.mutations = 0
        """How many in-place changes (``update_input``, ``set_output_shape``) the graph has
        seen: a session compares it with the count it compiled against, and recompiles
        what a change reaches (``changed_since``)."""

    @property
    def registry(self) -> OpSource | None:
        """The registry the graph was made with; None for the installed plugins' registry,
        which a session builds when it first needs kernels or devices (never the graph:
        building a graph loads no plugin)."""
        return self._registry

    def derived(self) -> Graph:
        """A new, empty graph with this one's ops (a rewrite or a step's copy of it)."""
        graph = Graph(self._registry)
        graph._adopted = dict(self._adopted)
        return graph

    @property
    def ops(self) -> OpRegistry:
        """The ops this graph can be built from: its registry's, else the standard ones."""
        return self._registry.ops if self._registry is not None else standard_ops()

    def op_def(self, op: str | OpDef) -> OpDef:
        """The definition of ``op``. An ``OpDef`` (a generated wrapper's, for a plugin's op
        this graph's ops do not have) is adopted: later nodes and loads find it by name."""
        if isinstance(op, OpDef):
            if op.name not in self.ops:
                self._adopted.setdefault(op.name, op)
            return self.op_def(op.name)
        adopted = self._adopted.get(op)
        if adopted is not None:
            return adopted
        if self._registry is None and op not in self.ops:
            raise NotFoundError(
                f"no op named {op!r} is in the standard library."
                + did_you_mean(op, self.ops.names())
                + " An op a plugin defines is built with its wrapper (kl.ops), or in a graph "
                "made with that plugin's registry: kl.Graph(registry=default_registry()) "
                "(kernloom.plugin)."
            )
        return self.ops.get(op)

    # -- lookup -----------------------------------------------------------------------

    @property
    def nodes(self) -> list[Node]:
        """Every node, in the order added (a topological order)."""
        return list(self._nodes.values())

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def node(self, name: str) -> Node:
        found = self._nodes.get(name)
        if found is None:
            raise NotFoundError(
                f"the graph has no node named {name!r}." + did_you_mean(name, self._nodes)
            )
        return found

    # -- GraphDef ---------------------------------------------------------------------------

    def to_json(self, *, indent: int | None = 1) -> str:
        return graph_to_json(self, indent=indent)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the graph as GraphDef JSON, atomically: on any failure (a full disk, a
        kill) the file at ``path`` is the old one; an ``OSError`` is ``FileError``."""
        from kernloom.fileio import atomic_write_text

        atomic_write_text(path, self.to_json())

    @classmethod
    def from_json(
        cls, text: str, *, registry: OpSource | None = None, source: str = "<string>"
    ) -> Graph:
        """A graph from GraphDef JSON, validated completely; errors name the node."""
        return graph_from_json(text, new_graph=cls, registry=registry, source=source)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        registry: OpSource | None = None,
        max_bytes: int | None = None,
    ) -> Graph:
        """Load a file written by ``save``; a file over ``max_bytes`` (default 2 GiB) is
        refused. Every problem is ``InvalidArgumentError`` naming the file and node."""
        from kernloom.fileio import DEFAULT_MAX_READ_BYTES

        return load_graph(
            Path(path),
            new_graph=cls,
            registry=registry,
            max_bytes=max_bytes or DEFAULT_MAX_READ_BYTES,
        )

    def changed_since(self, mutations: int) -> int:
        """The lowest position of a node changed in place since the graph had seen
        ``mutations`` changes (``len(self)`` when none was): everything compiled while the
        graph had more nodes than that may run a stale copy of the node."""
        with self._lock:
            changed = self._mutated[mutations:]
            return min(changed) if changed else len(self._nodes)

    def _record_change(self, node: Node) -> None:
        with self._lock:
            self._mutated.append(node.position)
            self.mutations = len(self._mutated)

    def tensor(self, name: str) -> Tensor:
        """``"node:1"`` (or ``"node"`` for output 0) as a Tensor."""
        node_name, _, slot = name.rpartition(":") if ":" in name else (name, "", "0")
        if not slot.isdigit():
            raise InvalidArgumentError(f"tensor name {name!r} must be 'node' or 'node:index'")
        return self.node(node_name).output(int(slot))

    # -- building -------------------------------------------------------------------------

    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        _defaults.stack.append(self)
        try:
            yield self
        finally:
            _defaults.stack.pop()

    def unique_name(self, base: str, *, mark_used: bool = True) -> str:
        """``base`` inside the current name scope, made unique the way TensorFlow does
        (``add``, ``add_1``, ``add_2``)."""
        if _NAME.fullmatch(base) is None:
            raise InvalidArgumentError(
                f"{base!r} is not a valid node name: use letters, digits, '_', '.', '-' and "
                f"'/' for scopes, starting with a letter or digit"
            )
        return self._unique(f"{self._scopes.name}/{base}" if self._scopes.name else base, mark_used)

    def _unique(self, full: str, mark_used: bool) -> str:
        """``full`` (a name with its scope), or ``full_1``, ``full_2``... if it is taken;
        names compare without case, as in TensorFlow."""
        key = full.lower()
        candidate, count = full, self._names_in_use.get(key, 0)
        while candidate.lower() in self._names_in_use or candidate in self._nodes:
            count += 1
            candidate = f"{full}_{count}"
        if mark_used:
            self._names_in_use[key] = count
            self._names_in_use.setdefault(candidate.lower(), 0)
        return candidate

    def reserve_names(self, names: Iterator[str] | list[str]) -> None:
        """Keep ``names`` from being handed out by ``unique_name`` (for nodes added later
        under exactly those names, as when partitioning)."""
        for name in names:
            self._names_in_use.setdefault(name.lower(), 0)

    @contextlib.contextmanager
    def name_scope(self, name: str | None) -> Iterator[str]:
        """Name the nodes built inside ``name/...``; yields the scope, ``"name/"``.

        TensorFlow 1's ``Graph.name_scope`` rules: ``name`` is opened inside the current
        scope and made unique there (``layer``, then ``layer_1``); it may hold ``/``
        (``"a/b"`` opens ``a/b``). A name ending in ``/`` (a scope this yielded before,
        ``"layer/"``) re-enters exactly that scope, from the root and without making it
        unique. ``None`` or ``""`` goes back to the root scope. A name opened at the root
        starts with a letter, a digit or ``.``; inside another scope it may also start with
        ``_``, ``-`` or ``/``; any other character is an error naming the scope.
        """
        if name is not None and not isinstance(name, str):
            raise TypeError(
                f"name scope {name!r}: a name scope is a str (or None for the root scope), "
                f"not {type(name).__name__}"
            )
        current = self._scopes.name
        if name:
            if name.endswith("/"):  # a whole scope, from the root: the root's rule
                valid = _NAME.fullmatch(name) is not None or (name == "/" and bool(current))
                rule = (
                    "; a name ending in '/' re-enters that scope from the root, so it starts "
                    "with a letter, a digit or '.'"
                )
            elif current:
                valid = _NESTED_SCOPE.fullmatch(name) is not None
                rule = f" (opened inside {current!r})"
            else:
                valid = _NAME.fullmatch(name) is not None
                rule = (
                    ", starting with a letter, a digit or '.' at the root (inside another scope "
                    "it may also start with '_', '-' or '/')"
                )
            if not valid:
                raise InvalidArgumentError(
                    f"name scope {name!r} is not a valid scope name: use letters, digits, "
                    f"'_', '.', '-' and '/'{rule}"
                )
        if not name:
            stack = scope = ""
        elif name.endswith("/"):
            stack, scope = name[:-1], name
        else:
            stack = self._unique(f"{current}/{name}" if current else name, mark_used=True)
            scope = stack + "/"
        self._scopes.name = stack
        try:
            yield scope
        finally:
            self._scopes.name = current

    @contextlib.contextmanager
    def device(self, name: str) -> Iterator[None]:
        parse_device_name(name)  # a malformed name fails here, at the scope, not later
        self._scopes.device.append(name)
        try:
            yield
        finally:
            self._scopes.device.pop()

    def as_graph_element(self, item: object, what: str) -> Node:
        """The node ``item`` stands for where a scope takes nodes (TensorFlow's
        ``Graph.as_graph_element``): a ``kl.Node``; a ``kl.Tensor``'s node; a
        ``kl.Variable``'s handle (its ``VarHandleOp``: TensorFlow uses the variable's op);
        the name of a node (``"n"``) or of a tensor (``"n:0"``) of this graph. Anything
        else, a node of another graph, or a name the graph does not have is an error
        naming ``what`` (the scope's argument) and ``item``."""
        if isinstance(item, str):
            try:
                return self.tensor(item).node if ":" in item else self.node(item)
            except (NotFoundError, InvalidArgumentError) as exc:
                raise type(exc)(f"{what}: {exc}") from None
        handle = getattr(item, "handle", None)
        if isinstance(item, Tensor):
            node, kind = item.node, f"tensor {item.name!r}"
        elif isinstance(item, Node):
            node, kind = item, f"node {item.name!r}"
        elif isinstance(handle, Tensor):  # a kl.Variable
            node, kind = handle.node, f"variable {handle.node.name!r}"
        else:
            raise TypeError(
                f"{what}: got {item!r} ({type(item).__name__}); expected a kl.Tensor, a "
                f"kl.Node, a kl.Variable or the name of a node of this graph"
            )
        if node.graph is not self:
            raise InvalidArgumentError(
                f"{what}: {kind} is not an element of this graph (it belongs to "
                f"another kl.Graph); open the scope inside `with graph.as_default():` for the "
                f"graph it belongs to"
            )
        return node

    @contextlib.contextmanager
    def colocate_with(self, target: object) -> Iterator[None]:
        """Place the nodes built inside with ``target``: a tensor, node, variable or node
        name of this graph (``as_graph_element``)."""
        if target is None:
            raise InvalidArgumentError(
                "kl.colocate_with: target is None; pass the kl.Tensor, kl.Node, kl.Variable "
                "or node name to place the nodes built inside with"
            )
        node = self.as_graph_element(target, "kl.colocate_with")
        self._scopes.colocate.append([node])
        try:
            yield
        finally:
            self._scopes.colocate.pop()

    @contextlib.contextmanager
    def kernel_label(self, label: str | Mapping[str, str]) -> Iterator[None]:
        """Nodes built inside ask for kernels with this label.

        A string applies to the nodes whose op has a kernel with that label (so the
        constants and casts built alongside keep their default kernels). Which ops have
        one is a question about kernels, which the graph does not know: the node records
        the wish (attr ``_kernel_scope``) and the label is settled where its kernel is
        chosen, where a label that no kernel has is an error naming the node, op, device
        and the labels there are. A mapping ``{"MatMul": "einsum"}`` labels exactly those
        op types (TensorFlow's label map, attr ``_kernel``): an op name that does not exist
        is an error here; a label that none of the op's kernels has fails kernel lookup,
        naming the node and op.
        """
        if isinstance(label, str):
            if not label:
                raise InvalidArgumentError(
                    "kl.kernel_label: the label is empty; give the label of the kernels to use"
                )
        elif isinstance(label, Mapping):
            for op, wanted in label.items():
                if not isinstance(op, str) or not isinstance(wanted, str):
                    raise InvalidArgumentError(
                        f"kl.kernel_label: a label map takes op names to label strings, got "
                        f"{op!r}: {wanted!r}"
                    )
                try:
                    self.op_def(op)
                except NotFoundError as exc:
                    raise NotFoundError(f"kl.kernel_label({dict(label)!r}): {exc}") from None
        else:
            raise InvalidArgumentError(
                f"a kernel label is a string or an op->label mapping, got {label!r}"
            )
        self._scopes.label.append(label)
        try:
            yield
        finally:
            self._scopes.label.pop()

    @contextlib.contextmanager
    def control_dependencies(self, deps: Iterable[object] | None) -> Iterator[None]:
        """Nodes built inside run after ``deps``; ``None`` clears the outer dependencies.

        ``deps`` is a list (any iterable) of tensors, nodes, variables (their handle) or
        node names of this graph (``as_graph_element``); anything else is an error naming
        it, checked here, before the scope opens."""
        if deps is None:
            nodes: list[Node] = []
        else:
            if isinstance(deps, str | bytes | Tensor | Node) or not isinstance(deps, Iterable):
                raise TypeError(
                    f"kl.control_dependencies takes a list of kl.Tensor, kl.Node, kl.Variable "
                    f"or node names (or None to clear the outer dependencies), got {deps!r}; "
                    f"wrap a single one in a list"
                )
            nodes = [
                self.as_graph_element(d, f"kl.control_dependencies: item {i}")
                for i, d in enumerate(deps)
            ]
        saved = self._scopes.control
        self._scopes.control = [] if deps is None else [*saved, nodes]
        try:
            yield
        finally:
            self._scopes.control = saved

    @contextlib.contextmanager
    def control_flow(self, context: FlowContext | None) -> Iterator[None]:
        """Build inside ``context`` (pushed on the open ones); None builds outside every
        context, as the Switch and Enter nodes that import a tensor must be."""
        saved = self._scopes.flow
        if context is None:
            self._scopes.flow = []
        elif context in saved:
            self._scopes.flow = saved[: saved.index(context) + 1]
        else:
            self._scopes.flow = [*saved, context]
        try:
            yield
        finally:
            self._scopes.flow = saved

    @property
    def flow_context(self) -> FlowContext | None:
        """The innermost open ``kl.cond``/``kl.while_loop`` context of this thread."""
        return self._scopes.flow[-1] if self._scopes.flow else None

    def built_in_flow(self, node: Node) -> bool:
        """Whether ``node`` belongs to a ``kl.cond`` branch or ``kl.while_loop`` body open
        on this thread (built there, or a value routed into it)."""
        return any(node.name in context.members for context in self._scopes.flow)

    def set_output_shape(self, tensor: Tensor, shape: object) -> None:
        """Give ``tensor`` a static shape that inference cannot work out (it must be
        compatible with the inferred one); recorded in the node's ``_output_shapes``."""
        given = as_shape(shape)
        if not given.is_compatible_with(tensor.shape):
            raise InvalidArgumentError(
                f"cannot set the shape of {tensor.name!r} to {given}: inference gives "
                f"{tensor.shape}"
            )
        tensor.shape = given
        node = tensor.node
        node.attrs[OUTPUT_SHAPES_ATTR] = [_encode_shape(t.shape) for t in node.outputs]
        self._record_change(node)

    def update_input(self, node: Node, index: int, tensor: Tensor) -> None:
        """Make ``tensor`` data input ``index`` of ``node``: how a loop's ``Merge`` gets its
        ``NextIteration`` input, which can only exist after the Merge. The dtype must stay
        the same; the node's output shapes are not inferred again. A session that has
        already compiled the node recompiles on its next run (``mutations``)."""
        with self._lock:
            if node.graph is not self or tensor.graph is not self:
                raise InvalidArgumentError(
                    f"update_input: node {node.name!r} and tensor {tensor.name!r} must both be "
                    f"in this graph"
                )
            if not 0 <= index < len(node.inputs):
                raise InvalidArgumentError(
                    f"node {node.name!r} (op {node.op}) has {len(node.inputs)} input(s); "
                    f"there is no input {index}"
                )
            old = node.inputs[index]
            if old.dtype is not tensor.dtype:
                raise InvalidArgumentError(
                    f"node {node.name!r} (op {node.op}) input {index} is "
                    f"{old.dtype.name}; cannot replace it with {tensor.name!r} "
                    f"({tensor.dtype.name})"
                )
            node.inputs[index] = tensor
            self._record_change(node)

    def _scoped_labels(self, op: str) -> dict[str, Any]:
        """The label attrs the open ``kernel_label`` scopes give a node of ``op``: the
        string scopes inside the innermost map that names ``op`` (``_kernel_scope``,
        innermost first) and that map's label (``_kernel``)."""
        wishes: list[str] = []
        for label in reversed(self._scopes.label):
            if isinstance(label, str):
                wishes.append(label)
            elif op in label:
                return {KERNEL_LABEL_ATTR: label[op]} | (
                    {KERNEL_SCOPE_ATTR: wishes} if wishes else {}
                )
        return {KERNEL_SCOPE_ATTR: wishes} if wishes else {}

    def apply_op(
        self,
        op: str | OpDef,
        inputs: Sequence[object],
        attrs: Mapping[str, Any],
        *,
        name: str | None = None,
        dtype_hint: DType | None = None,
    ) -> Tensor | tuple[Tensor, ...] | Node:
        """Add ``op`` with Python values turned into constants (their dtype from the op's
        type attrs, the other inputs, or ``dtype_hint``); return its output, a tuple of
        outputs, or the node itself when it has none. The wrappers and the ``Tensor``
        operators end here."""
        op_def = self.op_def(op)
        if len(inputs) != len(op_def.inputs):
            raise InvalidArgumentError(
                f"op {op_def.name} takes {len(op_def.inputs)} input(s) "
                f"({', '.join(a.name for a in op_def.inputs)}), got {len(inputs)}"
            )
        converted = convert_inputs(op_def, inputs, attrs, self, dtype_hint)
        node = self.add_node(op_def.name, converted, attrs, name=name)
        if not node.outputs:
            return node
        return node.outputs[0] if len(node.outputs) == 1 else tuple(node.outputs)

    def add_node(
        self,
        op: str | OpDef,
        inputs: Sequence[Tensor | Sequence[Tensor]] = (),
        attrs: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        device: str | None = None,
        control_inputs: Sequence[Node] = (),
        exact_name: bool = False,
    ) -> Node:
        """Add a node of ``op`` (a name, or a plugin's ``OpDef``, which the graph adopts:
        ``op_def``); list arguments (``N * T``) take a sequence of tensors.

        ``name`` defaults to the op's snake_case name and is made unique, unless
        ``exact_name`` (loading a GraphDef), when a taken name is an error. ``device``
        overrides the device scope.
        """
        with self._lock:
            op_def = self.op_def(op)
            op = op_def.name
            flow = self._scopes.flow[-1] if self._scopes.flow and not exact_name else None
            scoped = [n for group in self._scopes.control for n in group]
            if flow is not None:
                # Before naming this node: importing may add Switch/Enter nodes.
                inputs = [
                    [flow.import_tensor(t) for t in item]
                    if isinstance(item, list | tuple)
                    else flow.import_tensor(item)
                    if isinstance(item, Tensor)
                    else item
                    for item in inputs
                ]
                if not inputs or all(isinstance(i, list | tuple) and not i for i in inputs):
                    control_inputs = [*control_inputs, flow.pivot]
                if control_inputs or scoped:  # (may add Enter and Identity nodes too)
                    control_inputs = flow.import_controls([*control_inputs, *scoped])
                    scoped = []
            if exact_name:
                if name is None or name in self._nodes or _NAME.fullmatch(name) is None:
                    raise InvalidArgumentError(f"node name {name!r} is invalid or already taken")
                node_name = name
            else:
                node_name = self.unique_name(name or snake_case(op), mark_used=False)
            where = f"node {node_name!r} (op {op})"
            flat: list[Tensor] = []
            dtypes: list[DType | list[DType]] = []
            for item in inputs:
                is_list = isinstance(item, list | tuple)
                group: list[Any] = list(item) if isinstance(item, list | tuple) else [item]
                for tensor in group:
                    if not isinstance(tensor, Tensor):
                        raise InvalidArgumentError(f"{where}: input {tensor!r} is not a kl.Tensor")
                    if tensor.graph is not self:
                        raise InvalidArgumentError(
                            f"{where}: input {tensor.name!r} belongs to another graph"
                        )
                flat.extend(group)
                dtypes.append([t.dtype for t in group] if is_list else group[0].dtype)
            given = dict(attrs or {})
            if self._scopes.label and KERNEL_LABEL_ATTR not in given:
                given.update(self._scoped_labels(op))
            colocate = [n for group in self._scopes.colocate for n in group]
            if colocate and COLOCATION_ATTR not in given:
                given[COLOCATION_ATTR] = [f"loc:@{n.name}" for n in colocate]
            full_attrs = op_def.infer_attrs(dtypes, given, node_name)
            for key, value in full_attrs.items():
                if isinstance(value, np.ndarray):
                    full_attrs[key] = owned_array(value)
            requested = (
                device
                if device is not None
                else (self._scopes.device[-1] if self._scopes.device else "")
            )
            if requested:
                try:
                    parse_device_name(requested)
                except InvalidArgumentError as exc:
                    raise InvalidArgumentError(f"{where}: {exc}") from None
            producers = {t.node.name for t in flat}
            controls = [*control_inputs, *scoped]
            unique_controls = list(
                {n.name: n for n in controls if n.name not in producers}.values()
            )
            node = Node(self, node_name, op_def, full_attrs, flat, unique_controls, requested)
            shapes = infer_shapes(
                InferenceContext(
                    op_def,
                    node_name,
                    full_attrs,
                    [t.shape for t in flat],
                    [t.dtype for t in flat],
                    [inferable_value(t) for t in flat],
                    [shape_value(t) for t in flat],
                )
            )
            recorded = full_attrs.get(OUTPUT_SHAPES_ATTR)
            if recorded is not None:
                shapes = _recorded_shapes(recorded, shapes, where)
            node.outputs = [
                Tensor(node, i, dtype, shape)
                for i, (dtype, shape) in enumerate(
                    zip(op_def.output_dtypes(full_attrs), shapes, strict=True)
                )
            ]
            if exact_name:
                self._names_in_use.setdefault(node_name.lower(), 0)
            else:
                self.unique_name(name or snake_case(op))  # the node is valid: reserve its name
            self._nodes[node_name] = node
            for context in self._scopes.flow if flow is not None else ():
                context.members.add(node_name)
            return node

    def copy_node(
        self,
        node: Node,
        inputs: Sequence[Tensor | Sequence[Tensor]],
        *,
        device: str,
        control_inputs: Sequence[Node] = (),
    ) -> Node:
        """``node`` of another graph, copied under its own name with its attrs, onto
        ``inputs`` (grouped as ``add_node`` takes them): what a graph rewriter does with
        every node it leaves as it is.

        Where each input has the dtype, shape and constant value (the same array) of the
        input it stands for, the copy takes the source's checked attrs and output types as
        they are -- ``add_node`` would check and infer the same again, since both depend
        on nothing else. An optimizer pass copies the whole graph, and a DenseNet-121's
        passes spent 70 % of their time there. Otherwise (a rewritten input, a scope in
        force) it is ``add_node``."""
        flat: list[Tensor] = []
        for item in inputs:
            if isinstance(item, list | tuple):
                flat.extend(item)
            else:
                flat.append(item)  # type: ignore[arg-type]
        scopes = self._scopes
        same = (
            self.op_def(node.op) is node.op_def
            and len(flat) == len(node.inputs)
            and not (scopes.flow or scopes.control or scopes.label or scopes.colocate)
            and all(
                isinstance(new, Tensor)
                and new.graph is self
                and new.dtype == old.dtype
                and new.shape == old.shape
                and constant_value(new) is constant_value(old)
                for new, old in zip(flat, node.inputs, strict=True)
            )
        )
        if not same:
            return self.add_node(
                node.op,
                inputs,
                dict(node.attrs),
                name=node.name,
                device=device,
                control_inputs=control_inputs,
                exact_name=True,
            )
        name = node.name
        op_def = node.op_def
        with self._lock:
            if name in self._nodes:
                raise InvalidArgumentError(f"node name {name!r} is invalid or already taken")
            if device and device != node.requested_device:
                try:
                    parse_device_name(device)
                except InvalidArgumentError as exc:
                    raise InvalidArgumentError(f"node {name!r} (op {op_def.name}): {exc}") from None
            producers = {t.node.name for t in flat}
            unique_controls = list(
                {n.name: n for n in control_inputs if n.name not in producers}.values()
            )
            new = Node(self, name, op_def, dict(node.attrs), flat, unique_controls, device)
            new.outputs = [Tensor(new, i, t.dtype, t.shape) for i, t in enumerate(node.outputs)]
            self._names_in_use.setdefault(name.lower(), 0)
            self._nodes[name] = new
            return new


def with_stand_ins(node: Node, found: Sequence[Tensor | None]) -> list[Tensor]:
    """``found`` (the copy's inputs of ``node``, None for a loop's back edge whose source
    is not copied yet) with each gap filled by another input of the node: the stand-in
    ``update_input`` replaces once the source exists."""
    stand_in = next((t for t in found if t is not None), None)
    if stand_in is None:
        if found:
            raise InvalidArgumentError(
                f"node {node.name!r} (op {node.op}): every input comes back from a loop; a "
                f"Merge needs an input from outside the loop too"
            )
        return []
    return [t if t is not None else stand_in for t in found]


def _encode_shape(shape: TensorShape) -> str:
    """``?`` for an unknown rank, else the dims joined by ``,`` (``?`` for unknown ones)."""
    if shape.dims is None:
        return "?"
    return ",".join("?" if d is None else str(d) for d in shape.dims)


def _decode_shape(text: str, where: str) -> TensorShape:
    if text == "?":
        return TensorShape(None)
    try:
        return TensorShape([None if d == "?" else int(d) for d in text.split(",")] if text else [])
    except ValueError:
        raise InvalidArgumentError(
            f"{where}: malformed {OUTPUT_SHAPES_ATTR} entry {text!r}"
        ) from None


def _recorded_shapes(
    recorded: object, inferred: list[TensorShape], where: str
) -> list[TensorShape]:
    if not isinstance(recorded, list) or len(recorded) != len(inferred):
        raise InvalidArgumentError(
            f"{where}: {OUTPUT_SHAPES_ATTR} must list one shape per output ({len(inferred)})"
        )
    shapes = []
    for text, shape in zip(recorded, inferred, strict=True):
        given = _decode_shape(str(text), where)
        if not given.is_compatible_with(shape):
            raise InvalidArgumentError(
                f"{where}: {OUTPUT_SHAPES_ATTR} says {given}, but inference gives {shape}"
            )
        shapes.append(given)
    return shapes


_OWNED: weakref.WeakValueDictionary[int, np.ndarray[Any, Any]] = weakref.WeakValueDictionary()
"""Arrays a graph owns (by id): copied in and frozen once, shared by the graph's copies."""


def owned_array(value: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``value`` as an array the graph owns: a read-only copy, made once (TensorFlow copies a
    constant into its ``TensorProto``). A caller who changes the array afterwards changes
    nothing in the graph, in a compiled session or in what ``Graph.save`` writes; a
    graph's own arrays (the subgraphs and partitions a session copies) are not copied
    again, nor are read-only arrays over immutable ``bytes`` (a loaded GraphDef's)."""
    if _OWNED.get(id(value)) is value:
        return value
    base: object = value.base
    while isinstance(base, np.ndarray):
        base = base.base
    if not value.flags.writeable and isinstance(base, bytes):
        owned = value
    else:
        owned = np.array(value, copy=True, order="K")
        owned.setflags(write=False)
    _OWNED[id(owned)] = owned
    return owned


def constant_value(tensor: Tensor) -> np.ndarray[Any, Any] | None:
    """The value of a tensor when it is known at build time (a Const's output)."""
    if tensor.node.op == "Const":
        value: np.ndarray[Any, Any] = tensor.node.attrs["value"]
        return value
    return None


_SAME_VALUE_OPS: Final = frozenset({"Identity", "Enter", "StopGradient"})
"""Ops whose output 0 is their input 0's value (an ``Enter``'s in every iteration)."""


def _through_stand_ins(tensor: Tensor) -> Tensor:
    """The tensor whose value ``tensor`` has: through ``Identity``, ``Enter`` and
    ``StopGradient`` (a chain of them is short; 64 steps bound a malformed cycle)."""
    for _ in range(64):
        node = tensor.node
        if node.op not in _SAME_VALUE_OPS or tensor.index != 0 or not node.inputs:
            break
        tensor = node.inputs[0]
    return tensor


def shape_value(tensor: Tensor) -> TensorShape | None:
    """``tensor``'s value as a partly known shape where it is a ``Shape``'s output
    (``InferenceContext.input_shape_value``), else None."""
    node = _through_stand_ins(tensor).node
    if node.op == "Shape" and node.inputs and node.inputs[0].shape.rank is not None:
        return node.inputs[0].shape
    return None


def inferable_value(tensor: Tensor) -> np.ndarray[Any, Any] | None:
    """A tensor's value where shape inference can know it at build time: a Const's, seen
    through ``Identity`` and ``Enter`` (a constant made outside a loop and used in its
    body), or a ``Shape`` of a fully known shape (TensorFlow's shape refiner knows both).
    So ``reshape(x, shape(y))`` or a constant shape brought into a loop gives the body's
    results the shapes ``while_loop``'s invariants are checked against."""
    node = _through_stand_ins(tensor).node
    if node.op == "Const":
        value: np.ndarray[Any, Any] = node.attrs["value"]
        return value
    if node.op == "Shape" and node.inputs and node.inputs[0].shape.is_fully_defined():
        dims = node.inputs[0].shape.as_tuple()
        known = np.array(dims, dtype=node.attrs["out_type"].numpy_dtype)
        known.setflags(write=False)
        return known
    return None


def wrapper_name(op: str) -> str:
    """The name of an op's generated wrapper in ``kl.ops``: its ``snake_case``, with an
    underscore after a Python keyword (``Assert`` -> ``assert_``)."""
    name = snake_case(op)
    return name + "_" if keyword.iskeyword(name) else name


def snake_case(op: str) -> str:
    """TensorFlow's generated Python name for an op: ``MatMul`` -> ``mat_mul``,
    ``Conv2D`` -> ``conv2d``, ``TopKV2`` -> ``top_kv2``, ``Conv2DBackpropInput`` ->
    ``conv2d_backprop_input``: an underscore goes before a capital that follows a lower-case
    letter, or that starts a new word after a run of capitals."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op.lstrip("_")).lower()
