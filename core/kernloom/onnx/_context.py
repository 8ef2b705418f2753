"""What a converter sees: the ONNX node it converts, and the graph being built."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from kernloom.dtypes import DType, as_dtype
from kernloom.graph.builder import constant
from kernloom.graph.graph import Graph
from kernloom.graph.tensor import Tensor
from kernloom.onnx._values import OnnxCoded, OnnxOptional, OnnxSequence, Value, describe_value
from kernloom.onnx.errors import OnnxImportError, outputs_note

__all__ = [
    "CODED_OPS",
    "MOVING_OPS",
    "VALUE_TESTS",
    "ConversionContext",
    "OnnxNode",
    "attribute_value",
    "coded_ops",
]

CODED_OPS = ("Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "Identity", "Constant")
"""The ONNX ops whose converters take tensors of the small types kernloom has no dtype
for (``kernloom.onnx._small_types``); any other refuses them, naming these -- but for
bfloat16, which an op whose inputs and outputs are all tensors gets decoded to float32
(``kernloom.onnx._convert``)."""


_BFLOAT16_TOO: dict[int, str] = {
    int(onnx.TensorProto.BFLOAT16): (
        " and, as float32, every op whose inputs and outputs are tensors"
    )
}
"""What the refusal of a bfloat16 input adds: the ops it reaches (a sequence op does not)."""

MOVING_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Pad", "Shape", "Size")
"""The ops that only move (or count) elements, the ones ONNX defines for float8 and int4:
their converters run on a small type's codes as they are (``kernloom.onnx._convert``)."""

VALUE_TESTS = ("IsNaN", "IsInf")
"""The ops that ask what a value is (bool outputs): a small float input is decoded to
float32 for them (exactly; float8e4m3fn has no infinity, so IsInf finds none), as a
bfloat16 input is for every op on tensors (``kernloom.onnx._convert``)."""


_INTEGER_TYPES = frozenset(
    {
        onnx.TensorProto.INT4,
        onnx.TensorProto.UINT4,
        onnx.TensorProto.INT2,
        onnx.TensorProto.UINT2,
    }
)


def coded_ops(elem_type: int) -> tuple[str, ...]:
    """The ops that take a tensor of ``elem_type``: bfloat16 is no quantized type."""
    if elem_type == onnx.TensorProto.BFLOAT16:
        # (The moving ops take it too, as every op on tensors does: _BFLOAT16_TOO says so.)
        return tuple(op for op in CODED_OPS if op not in ("QuantizeLinear", "DequantizeLinear"))
    floats = elem_type not in _INTEGER_TYPES
    return (
        CODED_OPS
        + MOVING_OPS
        + (("ConstantOfShape", *VALUE_TESTS) if floats else ("ConstantOfShape",))
    )


def attribute_value(attr: onnx.AttributeProto) -> Any:
    """An attribute as Python: tensors as numpy arrays, strings as str."""
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    return value


class OnnxNode:
    """One ONNX node with its attributes decoded and the opset in force for it."""

    __slots__ = ("attrs", "domain", "inputs", "name", "op_type", "opset", "outputs", "proto")

    def __init__(self, proto: onnx.NodeProto, name: str, opset: int) -> None:
        self.proto = proto
        self.name = name
        self.op_type = proto.op_type
        self.domain = proto.domain if proto.domain != "ai.onnx" else ""
        self.opset = opset
        self.inputs: list[str] = list(proto.input)
        self.outputs: list[str] = list(proto.output)
        self.attrs: dict[str, Any] = {a.name: attribute_value(a) for a in proto.attribute}

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def unnamed_outputs(self) -> tuple[str, ...]:
        """The outputs that identify a node the model gives no name (``name`` is then one
        the importer made up, which no ONNX tool shows); empty for a named node."""
        return () if self.proto.name else tuple(o for o in self.outputs if o)

    def describe(self) -> str:
        """``'name' (Op, opset N)``, and for a node without a name, its outputs."""
        op = f"{self.domain}::{self.op_type}" if self.domain else self.op_type
        return f"{self.name!r} ({op}, opset {self.opset})" + outputs_note(self.unnamed_outputs)

    def fail(self, message: str) -> OnnxImportError:
        """An import error naming this node, its op and its opset."""
        return OnnxImportError(f"ONNX node {self.describe()}: {message}")


class ConversionContext:
    """The graph under construction and the kernloom tensor of every ONNX value so far.

    ``static`` holds the values known at import time (initializers, Constant nodes, shapes
    that are fully known): converters read attributes-turned-inputs (Reshape's shape,
    Slice's starts...) from it, so that the graph gets the same static shapes a graph
    written by hand would have. A value computed at run time stays a tensor.
    """

    __slots__ = (
        "containers",
        "declared_ranks",
        "defaults",
        "graph",
        "node",
        "opsets",
        "pinned",
        "static",
        "values",
    )

    def __init__(self, graph: Graph, opsets: dict[str, int] | None = None) -> None:
        self.graph = graph
        self.opsets: dict[str, int] = opsets if opsets is not None else {"": 1}
        """The model's opset per domain (``""`` is ai.onnx): subgraph nodes use them too."""
        self.values: dict[str, Tensor] = {}
        self.containers: dict[str, OnnxSequence | OnnxOptional | OnnxCoded] = {}
        """The ONNX values that are sequences or optionals (``kernloom.onnx._values``),
        resolved at import, never in the graph, and the tensors of small types kernloom
        has no dtype for (their codes); ``values`` holds the tensors."""
        self.static: dict[str, np.ndarray[Any, Any]] = {}
        self.defaults: dict[str, np.ndarray[Any, Any]] = {}
        """Initializers that are graph inputs too (a feed may replace them): not known at
        import time, unless a converter cannot do without their value (``pinned``)."""
        self.pinned: dict[str, str] = {}
        """Of ``defaults``, those a converter read (name -> the node that needed it): the
        importer converts the model again with them as constants."""
        self.node: OnnxNode | None = None
        self.declared_ranks: dict[str, int] = {}
        """The ranks the model's value_info declares for values between nodes (what
        ``onnx.shape_inference.infer_shapes`` writes): a converter's output whose rank
        kernloom's shape inference cannot tell gets it (``kernloom.onnx._convert``)."""

    def child(
        self,
        bound: Mapping[str, Value],
        known: Mapping[str, np.ndarray[Any, Any]] | None = None,
    ) -> ConversionContext:
        """A context for a subgraph (an If branch, a Loop body): it sees every value of
        this scope by name (ONNX's outer-scope references) except those ``bound`` shadows
        (the subgraph's own inputs, tensors or sequences), and what it adds stays its own.
        ``known``: the values of bound tensors known at import (an unrolled Loop's
        iteration number). What a converter pins is still recorded for the whole import."""
        inner = ConversionContext(self.graph, self.opsets)
        inner.values = {k: v for k, v in self.values.items() if k not in bound}
        inner.containers = {k: v for k, v in self.containers.items() if k not in bound}
        inner.set_values(bound)
        inner.static = {k: v for k, v in self.static.items() if k not in bound}
        inner.static.update(known or {})
        inner.defaults = {k: v for k, v in self.defaults.items() if k not in bound}
        inner.pinned = self.pinned
        inner.declared_ranks = self.declared_ranks
        return inner

    # -- inputs ---------------------------------------------------------------------------

    def _node(self) -> OnnxNode:
        assert self.node is not None
        return self.node

    def set_values(self, values: Mapping[str, Value]) -> None:
        """Record ONNX values by name: tensors in ``values``, sequences, optionals and
        coded tensors in ``containers``."""
        for name, value in values.items():
            if isinstance(value, OnnxSequence | OnnxOptional | OnnxCoded):
                self.containers[name] = value
            else:
                self.values[name] = value

    def lookup(self, name: str) -> Value:
        """The value of an ONNX name, whatever its kind."""
        found = self.containers.get(name)
        return found if found is not None else self.values[name]

    def knows(self, name: str) -> bool:
        return name in self.values or name in self.containers

    def value(self, index: int) -> Value:
        """Input ``index`` whatever its kind: a tensor, a sequence or an optional."""
        node = self._node()
        if not self.has_input(index):
            raise node.fail(f"input {index} is required")
        return self.lookup(node.inputs[index])

    def sequence(self, index: int) -> OnnxSequence:
        """Input ``index``, which must be a sequence."""
        value = self.value(index)
        if not isinstance(value, OnnxSequence):
            name = self._node().inputs[index]
            raise self._node().fail(
                f"input {index} ({name!r}) is {describe_value(value)}; it must be a sequence"
            )
        return value

    def has_input(self, index: int) -> bool:
        inputs = self._node().inputs
        return index < len(inputs) and inputs[index] != ""

    def input(self, index: int) -> Tensor:
        node = self._node()
        if not self.has_input(index):
            raise node.fail(f"input {index} is required")
        name = node.inputs[index]
        container = self.containers.get(name)
        if isinstance(container, OnnxCoded):
            takers = ", ".join(coded_ops(container.elem_type))
            takers += _BFLOAT16_TOO.get(container.elem_type, "")
            raise node.fail(
                f"input {index} ({name!r}) is {describe_value(container)}, a type kernloom "
                f"has no dtype for: {container.type_name} values are supported by {takers}, "
                f"not by {node.op_type} (Cast it to a float type first)"
            )
        if container is not None:
            raise node.fail(
                f"input {index} ({name!r}) is {describe_value(container)}; this op takes a "
                "tensor (OptionalGetElement or SequenceAt takes a tensor out of one)"
            )
        return self.values[name]

    def tensor_or_coded(self, index: int) -> Tensor | OnnxCoded:
        """Input ``index``, a tensor or a tensor of a small type (``OnnxCoded``): for the
        converters that read those (Cast, QuantizeLinear...)."""
        value = self.value(index)
        if isinstance(value, Tensor | OnnxCoded):
            return value
        return self.input(index)  # the error a sequence or optional gets

    def optional(self, index: int) -> Tensor | None:
        return self.input(index) if self.has_input(index) else None

    def inputs(self) -> list[Tensor]:
        return [self.input(i) for i in range(len(self._node().inputs)) if self.has_input(i)]

    def static_input(self, index: int) -> np.ndarray[Any, Any] | None:
        """Input ``index`` as numpy when it is known at import time, else None."""
        if not self.has_input(index):
            return None
        name = self._node().inputs[index]
        value = self.static.get(name)
        if value is None and name in self.defaults:
            self.pinned.setdefault(name, self._node().describe())
            value = self.defaults[name]
        return value

    def required_static(self, index: int, what: str) -> np.ndarray[Any, Any]:
        value = self.static_input(index)
        if value is None:
            raise self._node().fail(
                f"{what} (input {index}) must be known at import time (an initializer or a "
                "Constant); a value computed at run time is not supported here"
            )
        return value

    # -- building -------------------------------------------------------------------------

    def const(self, value: object, dtype: DType | str | None = None) -> Tensor:
        array = np.asarray(value, dtype=as_dtype(dtype).numpy_dtype if dtype else None)
        if array.dtype == np.float64 and dtype is None and not isinstance(value, np.generic):
            array = array.astype(np.float32)
        return constant(array, name="const", graph=self.graph)

    def const_like(self, value: object, like: Tensor) -> Tensor:
        return self.const(value, like.dtype)

    def int64s(self, values: Sequence[int]) -> Tensor:
        return self.const(np.asarray(values, dtype=np.int64))

    def int32s(self, values: Sequence[int]) -> Tensor:
        return self.const(np.asarray(values, dtype=np.int32))
