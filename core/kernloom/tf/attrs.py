"""A NodeDef's attrs as kernloom attrs: values converted, TensorFlow-only attrs handled.

kernloom's ops carry TensorFlow's attrs by design, so most attrs map one to one. What
TensorFlow writes beyond them:

- attrs of the runtime (names starting with ``_``): ``_class`` (colocation,
  ``loc:@node``) is kept for the nodes the graph has; ``_kernel`` (a kernel label) means
  the same in both and is kept; every other one (``_output_shapes``,
  ``_has_manual_control_dependencies``, ``_XlaCompile``, grappler's marks...) describes
  how TensorFlow built or ran the graph and is dropped.
- attrs of TensorFlow's op definitions that kernloom's do not declare, listed in
  ``TF_ONLY_ATTRS`` with the values that change nothing kernloom computes: they are
  dropped; any other value of them is an error, since ignoring it would compute
  something else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from kernloom.framework.op_def import OpDef
from kernloom.graph.graph import COLOCATION_ATTR
from kernloom.tf.tensors import ConversionError, to_array, to_dtype, to_shape

__all__ = ["TF_ONLY_ATTRS", "convert_attrs", "convert_value"]

KERNEL_ATTR: Final = "_kernel"


def _any(value: object) -> bool:
    return True


TF_ONLY_ATTRS: Final[Mapping[tuple[str, str], tuple[Callable[[Any], bool], str]]] = {
    ("MatMul", "grad_a"): (_any, "any value (a hint for gradient kernels)"),
    ("MatMul", "grad_b"): (_any, "any value (a hint for gradient kernels)"),
    ("BatchMatMulV2", "grad_x"): (_any, "any value (a hint for gradient kernels)"),
    ("BatchMatMulV2", "grad_y"): (_any, "any value (a hint for gradient kernels)"),
    ("AssignVariableOp", "validate_shape"): (_any, "any value (kernloom always checks)"),
    ("VarHandleOp", "debug_name"): (_any, "any value (a name for messages)"),
    ("VarHandleOp", "allowed_devices"): (lambda v: v == [], "[] (no device restriction)"),
    ("Equal", "incompatible_shape_error"): (lambda v: v is True, "true (shapes must broadcast)"),
    ("NotEqual", "incompatible_shape_error"): (
        lambda v: v is True,
        "true (shapes must broadcast)",
    ),
}
"""(op, attr) of TensorFlow's op definitions that kernloom's lack: a predicate on the
value saying when dropping it changes nothing, and those values in words."""

_LIST_FIELDS: Final = ("s", "i", "f", "b", "type", "shape", "tensor", "func")
_KINDS: Final[Mapping[str, str]] = {
    "s": "string",
    "i": "int",
    "f": "float",
    "b": "bool",
    "type": "type",
    "shape": "shape",
    "tensor": "tensor",
    "func": "func",
}
"""The attr type (``kernloom.framework.attr``) each AttrValue field holds."""


def _string(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConversionError(f"string {raw[:40]!r} is not UTF-8") from None


def _scalar(field: str, raw: Any, max_bytes: int) -> Any:
    if field == "s":
        return _string(bytes(raw))
    if field == "i":
        return int(raw)
    if field == "f":
        return float(raw)
    if field == "b":
        return bool(raw)
    if field == "type":
        return to_dtype(int(raw))
    if field == "shape":
        return to_shape(raw)
    if field == "tensor":
        return to_array(raw, max_bytes=max_bytes)
    raise ConversionError(
        f"a function value ({raw.name!r}): kernloom does not import TensorFlow functions"
    )


def value_kind(value: Any) -> str | None:
    """The attr type an AttrValue holds (``int``, ``list(type)``); None for an empty list,
    which fits every list type, or no value."""
    field = value.WhichOneof("value")
    if field is None or field == "placeholder":
        return None
    if field != "list":
        return _KINDS[field]
    filled = [f for f in _LIST_FIELDS if len(getattr(value.list, f))]
    return f"list({_KINDS[filled[0]]})" if len(filled) == 1 else None


def _check_kind(op_def: OpDef, key: str, value: Any) -> None:
    """Refuse a value of another attr type than ``op_def`` declares (a DataType where an
    int is wanted...): the node would otherwise fail later without saying which attr."""
    kind = value_kind(value)
    if kind is None:
        return
    declared = op_def.attr(key).type.replace(" ", "")
    if kind == declared or (kind == "int" and declared == "float"):
        return
    base = declared.removeprefix("list(").removesuffix(")")
    field = next((f for f, k in _KINDS.items() if k == base), "?")
    example = f"{field}: ..." if base == declared else f"list {{ {field}: ... }}"
    raise ConversionError(
        f"attr {key!r} holds a value of type {kind}, but kernloom's {op_def.name} (as "
        f"TensorFlow's) declares it {declared}: the graph was edited by hand or written for "
        f"another version of the op; write the attr as {declared} (AttrValue {example})"
    )


def convert_value(value: Any, *, max_bytes: int) -> Any:
    """An AttrValue as a kernloom attr value (a list stays a list; an empty one is [])."""
    field = value.WhichOneof("value")
    if field is None:
        raise ConversionError("the attr has no value")
    if field == "placeholder":
        raise ConversionError(
            f"a function's placeholder ({value.placeholder!r}) outside a function"
        )
    if field != "list":
        return _scalar(field, getattr(value, field), max_bytes)
    items = value.list
    filled = [f for f in _LIST_FIELDS if len(getattr(items, f))]
    if len(filled) > 1:
        raise ConversionError(f"a list with values of several kinds ({', '.join(filled)})")
    if not filled:
        return []
    return [_scalar(filled[0], raw, max_bytes) for raw in getattr(items, filled[0])]


def convert_attrs(
    op_def: OpDef, attrs: Mapping[str, Any], node_names: Mapping[str, object], *, max_bytes: int
) -> dict[str, Any]:
    """A NodeDef's ``attr`` map as the attrs of a kernloom node of ``op_def``."""
    out: dict[str, Any] = {}
    for key in sorted(attrs):
        if key.startswith("_") and key not in (COLOCATION_ATTR, KERNEL_ATTR):
            continue
        try:
            value = convert_value(attrs[key], max_bytes=max_bytes)
        except ConversionError as exc:
            raise ConversionError(f"attr {key!r}: {exc}") from None
        if key == COLOCATION_ATTR:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConversionError(f"attr {key!r}: colocation is a list of 'loc:@node'")
            kept = [v for v in value if v.removeprefix("loc:@") in node_names]
            if kept:
                out[key] = kept
            continue
        if key.startswith("_"):
            out[key] = value
            continue
        if op_def.has_attr(key):
            _check_kind(op_def, key, attrs[key])
            out[key] = value
            continue
        allowed = TF_ONLY_ATTRS.get((op_def.name, key))
        if allowed is None:
            declared = ", ".join(sorted(a.name for a in op_def.attrs)) or "(none)"
            raise ConversionError(
                f"attr {key!r}, which kernloom's {op_def.name} does not declare (its attrs: "
                f"{declared})"
            )
        accepts, words = allowed
        if not accepts(value):
            raise ConversionError(
                f"attr {key!r} = {value!r}: kernloom's {op_def.name} computes what TensorFlow "
                f"does only for {words}"
            )
    return out
