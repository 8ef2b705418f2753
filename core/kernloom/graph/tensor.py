"""``Tensor``: a symbolic handle to one output of a node in a graph (no data)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

from kernloom.dtypes import DType
from kernloom.graph.tensor_operators import logical, logical_not, slice_tensor, true_divide
from kernloom.shapes import TensorShape

if TYPE_CHECKING:
    from kernloom.graph.graph import Graph, Node

__all__ = ["Tensor"]


@final
class Tensor:
    """Output ``index`` of ``node``, with the dtype and (partial) shape inferred at build time.

    Arithmetic operators build nodes (``a + b`` adds an ``Add``); Python numbers and numpy
    arrays on the other side become constants of this tensor's dtype. They mean what
    TensorFlow's do: ``//`` is ``FloorDiv``, ``%`` ``FloorMod``, ``/`` on integers divides
    in floating point (``tensor_operators.true_divide``), ``&``/``|``/``^``/``~`` are
    logical on bool tensors, ``x[...]`` is one ``StridedSlice``. ``==`` keeps its Python
    meaning (identity), so tensors can be dict keys; use ``kl.ops.equal``.
    """

    __slots__ = ("_name", "dtype", "index", "node", "shape")

    def __init__(self, node: Node, index: int, dtype: DType, shape: TensorShape) -> None:
        self.node = node
        self.index = index
        self.dtype = dtype
        self.shape = shape
        # Made once (a node's name never changes): the optimizer's passes look tensors up
        # by name tens of thousands of times per graph.
        self._name = f"{node.name}:{index}"

    @property
    def name(self) -> str:
        return self._name

    @property
    def graph(self) -> Graph:
        return self.node.graph

    def __repr__(self) -> str:
        return f"<kl.Tensor '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    def __bool__(self) -> bool:
        raise TypeError(
            f"tensor {self.name!r} is symbolic and has no truth value; compare with "
            f"kl.ops.less/greater and branch with kl.cond, or run it in a Session"
        )

    def __iter__(self) -> Any:
        raise TypeError(f"tensor {self.name!r} is symbolic and cannot be iterated")

    __hash__ = object.__hash__

    # Operator overloads go through the graph's apply_op, as the generated wrappers do, so
    # they get the same inference and errors as calling kl.ops.* by hand.
    def _binary(self, op: str, other: object, *, reverse: bool = False) -> Tensor:
        a, b = (other, self) if reverse else (self, other)
        result = self.node.graph.apply_op(op, [a, b], {}, dtype_hint=self.dtype)
        assert isinstance(result, Tensor)
        return result

    def __add__(self, other: object) -> Tensor:
        return self._binary("Add", other)

    def __radd__(self, other: object) -> Tensor:
        return self._binary("Add", other, reverse=True)

    def __sub__(self, other: object) -> Tensor:
        return self._binary("Sub", other)

    def __rsub__(self, other: object) -> Tensor:
        return self._binary("Sub", other, reverse=True)

    def __mul__(self, other: object) -> Tensor:
        return self._binary("Mul", other)

    def __rmul__(self, other: object) -> Tensor:
        return self._binary("Mul", other, reverse=True)

    def __truediv__(self, other: object) -> Tensor:
        return true_divide(self, other)

    def __rtruediv__(self, other: object) -> Tensor:
        return true_divide(self, other, reverse=True)

    def __floordiv__(self, other: object) -> Tensor:
        return self._binary("FloorDiv", other)

    def __rfloordiv__(self, other: object) -> Tensor:
        return self._binary("FloorDiv", other, reverse=True)

    def __mod__(self, other: object) -> Tensor:
        return self._binary("FloorMod", other)

    def __rmod__(self, other: object) -> Tensor:
        return self._binary("FloorMod", other, reverse=True)

    def __pow__(self, other: object) -> Tensor:
        return self._binary("Pow", other)

    def __rpow__(self, other: object) -> Tensor:
        return self._binary("Pow", other, reverse=True)

    def __matmul__(self, other: object) -> Tensor:
        return self._binary("MatMul", other)

    def __rmatmul__(self, other: object) -> Tensor:
        return self._binary("MatMul", other, reverse=True)

    def __lt__(self, other: object) -> Tensor:
        return self._binary("Less", other)

    def __gt__(self, other: object) -> Tensor:
        return self._binary("Greater", other)

    def __le__(self, other: object) -> Tensor:
        return self._binary("LessEqual", other)

    def __ge__(self, other: object) -> Tensor:
        return self._binary("GreaterEqual", other)

    def __and__(self, other: object) -> Tensor:
        return logical(self, "LogicalAnd", other)

    def __rand__(self, other: object) -> Tensor:
        return logical(self, "LogicalAnd", other, reverse=True)

    def __or__(self, other: object) -> Tensor:
        return logical(self, "LogicalOr", other)

    def __ror__(self, other: object) -> Tensor:
        return logical(self, "LogicalOr", other, reverse=True)

    def __xor__(self, other: object) -> Tensor:
        return logical(self, "LogicalXor", other)

    def __rxor__(self, other: object) -> Tensor:
        return logical(self, "LogicalXor", other, reverse=True)

    def __invert__(self) -> Tensor:
        return logical_not(self)

    def __abs__(self) -> Tensor:
        return self._unary("Abs")

    def __getitem__(self, index: object) -> Tensor:
        return slice_tensor(self, index)

    def __neg__(self) -> Tensor:
        return self._unary("Neg")

    def _unary(self, op: str) -> Tensor:
        result = self.node.graph.apply_op(op, [self], {})
        assert isinstance(result, Tensor)
        return result
