"""Op definitions (TensorFlow's ``REGISTER_OP``): what an op takes, gives and is configured by.

An op is declared once, with spec strings parsed the way TensorFlow parses them::

    lib.register_op("MatMul")
        .input("a: T").input("b: T").output("product: T")
        .attr("transpose_a: bool = false").attr("transpose_b: bool = false")
        .attr("T: {float16, float32, float64, int32, int64}")
        .shape_fn(matmul_shape)

Input and output specs: ``name: T`` (the dtype is attr ``T``), ``name: float32`` (a fixed
dtype), ``name: N * T`` (a list of ``N`` tensors of dtype ``T``), and ``name: T`` where
``T`` is a ``list(type)`` attr (a list of tensors of any dtypes, one per entry of ``T``:
IdentityN, Assert). Attr specs:
``name: TYPE``, ``name: TYPE = DEFAULT``, ``name: {float32, int32}`` (a type with allowed
values), ``name: {'SAME', 'VALID'}`` (a string with allowed values), ``name: int >= 2``.

Each spec is parsed when it is given, so a malformed one fails at the plugin's own line;
the whole definition is checked when it is finalised (every referenced attr exists and
has the right type, defaults are allowed values), and nothing is registered otherwise.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, final

from pydantic import BaseModel, ConfigDict, Field

from kernloom.dtypes import DType, all_dtypes, as_dtype
from kernloom.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    KernloomError,
    NotFoundError,
    did_you_mean,
)
from kernloom.framework.attr import AttrKind, AttrType, check_attr_value, format_attr_value
from kernloom.framework.origin import Origin, refuse_frozen

if TYPE_CHECKING:
    from kernloom.framework.shape_inference import InferenceContext

__all__ = [
    "ArgDef",
    "AttrDef",
    "OpDef",
    "OpDefBuilder",
    "OpLibrary",
    "OpRegistry",
    "OpSource",
    "ShapeFn",
]

ShapeFn = Callable[["InferenceContext"], None]

_OP_NAME: Final = re.compile(r"_?[A-Z][A-Za-z0-9_]*")
_ARG_NAME: Final = re.compile(r"[a-z][a-z0-9_]*")
_ATTR_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_ARG_SPEC: Final = re.compile(r"\s*(\w+)\s*:\s*(?:([A-Za-z]\w*)\s*\*\s*)?(\w+)\s*")
_ATTR_SPEC: Final = re.compile(
    r"\s*(\w+)\s*:\s*(\{[^}]*\}|[\w()]+)\s*(>=\s*-?\d+)?\s*(?:=\s*(.+?))?\s*"
)
_DTYPE_NAMES: Final = frozenset({*(d.name for d in all_dtypes()), "resource"})

INTERNAL_ATTR_PREFIX: Final = "_"
"""Attrs starting with ``_`` (``_kernel``, ``_class``) belong to the runtime, not the op."""


class ArgDef(BaseModel):
    """One input or output: a tensor (or a list of ``number_attr`` tensors)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    type_attr: str | None = None
    """The attr holding the dtype (``T``); None when the dtype is fixed."""
    dtype: DType | None = None
    """The fixed dtype; None when it comes from ``type_attr``."""
    number_attr: str | None = None
    """For a list argument, the int attr holding its length (``N``)."""
    type_list_attr: str | None = None
    """For a list of tensors of mixed dtypes, the ``list(type)`` attr holding them."""
    description: str = ""

    @property
    def is_list(self) -> bool:
        return self.number_attr is not None or self.type_list_attr is not None

    def count(self, attrs: Mapping[str, Any]) -> int:
        """How many tensors this argument stands for, given a node's attrs."""
        if self.type_list_attr is not None:
            return len(attrs[self.type_list_attr])
        return int(attrs[self.number_attr]) if self.number_attr else 1

    def spec(self) -> str:
        dtype = self.type_attr or self.type_list_attr or (self.dtype.name if self.dtype else "?")
        return f"{self.name}: " + (f"{self.number_attr} * " if self.number_attr else "") + dtype


class AttrDef(BaseModel):
    """One attr: its type, default and allowed values."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str
    type: str
    """``int``, ``type``, ``list(int)``, ... (see ``kernloom.framework.attr``)."""
    has_default: bool = False
    default: Any = None
    allowed_values: tuple[Any, ...] | None = None
    minimum: int | None = None
    description: str = ""

    @property
    def attr_type(self) -> AttrType:
        return AttrType.parse(self.type)

    def spec(self) -> str:
        if self.allowed_values is not None:
            text = "{" + ", ".join(format_attr_value(v) for v in self.allowed_values) + "}"
        else:
            text = self.type
        if self.minimum is not None:
            text += f" >= {self.minimum}"
        if self.has_default:
            text += f" = {format_attr_value(self.default)}"
        return f"{self.name}: {text}"

    def check(self, value: object) -> Any:
        """The canonical form of ``value``; raises with the reason when it is not allowed."""
        canonical = check_attr_value(self.attr_type, value)
        items = canonical if self.attr_type.is_list else [canonical]
        if self.allowed_values is not None:
            for item in items:
                if item not in self.allowed_values:
                    allowed = ", ".join(format_attr_value(v) for v in self.allowed_values)
                    raise InvalidArgumentError(
                        f"value {format_attr_value(item)} is not allowed; allowed: {allowed}"
                    )
        if self.minimum is not None:
            measure = len(canonical) if self.attr_type.is_list else canonical
            if measure < self.minimum:
                what = "length" if self.attr_type.is_list else "value"
                raise InvalidArgumentError(f"{what} {measure} is below the minimum {self.minimum}")
        return canonical


class OpDef(BaseModel):
    """A registered op. Frozen: a declaration, shared by every graph and registry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    inputs: tuple[ArgDef, ...] = ()
    outputs: tuple[ArgDef, ...] = ()
    attrs: tuple[AttrDef, ...] = ()
    is_stateful: bool = False
    """Never pruned or deduplicated; its kernel may keep state across runs."""
    is_commutative: bool = False
    summary: str = ""
    description: str = ""
    shape_fn: Callable[..., None] | None = Field(default=None, exclude=True, repr=False)
    """Called with an ``InferenceContext`` (typed loosely here to avoid an import cycle)."""

    def attr(self, name: str) -> AttrDef:
        for attr in self.attrs:
            if attr.name == name:
                return attr
        raise NotFoundError(
            f"op {self.name} has no attr {name!r}; its attrs: "
            f"{', '.join(a.name for a in self.attrs) or '(none)'}."
            + did_you_mean(name, [a.name for a in self.attrs])
        )

    def has_attr(self, name: str) -> bool:
        return any(a.name == name for a in self.attrs)

    def arg(self, name: str) -> ArgDef:
        for arg in (*self.inputs, *self.outputs):
            if arg.name == name:
                return arg
        names = [a.name for a in (*self.inputs, *self.outputs)]
        raise NotFoundError(
            f"op {self.name} has no input or output named {name!r}; it has: "
            f"{', '.join(names) or '(none)'}." + did_you_mean(name, names)
        )

    def signature(self) -> str:
        """``MatMul(a: T, b: T) -> (product: T)``."""
        ins = ", ".join(a.spec() for a in self.inputs)
        outs = ", ".join(a.spec() for a in self.outputs)
        return f"{self.name}({ins}) -> ({outs})"

    # -- attrs of a node ------------------------------------------------------------------

    def check_attrs(self, attrs: Mapping[str, object], node: str) -> dict[str, Any]:
        """A node's attrs with defaults filled in and every value checked.

        Attrs starting with ``_`` are the runtime's (``_kernel``) and pass through.
        """
        where = f"node {node!r} (op {self.name})"
        out: dict[str, Any] = {}
        declared = {a.name for a in self.attrs}
        for key, value in attrs.items():
            if key.startswith(INTERNAL_ATTR_PREFIX):
                out[key] = value
            elif key not in declared:
                raise InvalidArgumentError(
                    f"{where} has attr {key!r}, which op {self.name} does not declare; its "
                    f"attrs: {', '.join(sorted(declared)) or '(none)'}."
                    + did_you_mean(key, declared)
                )
        for attr in self.attrs:
            if attr.name in attrs:
                try:
                    out[attr.name] = attr.check(attrs[attr.name])
                except InvalidArgumentError as exc:
                    raise InvalidArgumentError(f"{where}: attr '{attr.spec()}': {exc}") from None
            elif attr.has_default:
                out[attr.name] = attr.default
            else:
                raise InvalidArgumentError(
                    f"{where} is missing attr {attr.name!r} ({attr.spec()}) and it has no default"
                )
        return out

    def infer_attrs(
        self, input_dtypes: Iterable[DType | list[DType]], attrs: Mapping[str, object], node: str
    ) -> dict[str, Any]:
        """Fill type and length attrs (``T``, ``N``) from the inputs' dtypes, TensorFlow-style,
        and check that the inputs agree with each other and with attrs given explicitly."""
        where = f"node {node!r} (op {self.name})"
        given = list(input_dtypes)
        if len(given) != len(self.inputs):
            raise InvalidArgumentError(
                f"{where} takes {len(self.inputs)} input(s) "
                f"({', '.join(a.spec() for a in self.inputs)}), got {len(given)}"
            )
        inferred: dict[str, Any] = dict(attrs)
        for arg, dtypes in zip(self.inputs, given, strict=True):
            if arg.is_list:
                if not isinstance(dtypes, list):
                    raise InvalidArgumentError(
                        f"{where}: input {arg.spec()!r} takes a list of tensors"
                    )
                if arg.type_list_attr is not None:
                    self._unify(inferred, arg.type_list_attr, list(dtypes), where, arg)
                    continue
                self._unify(inferred, arg.number_attr or "", len(dtypes), where, arg)
                items = dtypes
            else:
                if isinstance(dtypes, list):
                    raise InvalidArgumentError(
                        f"{where}: input {arg.spec()!r} takes one tensor, got a list"
                    )
                items = [dtypes]
            for dtype in items:
                if arg.type_attr is not None:
                    self._unify(inferred, arg.type_attr, dtype, where, arg)
                elif dtype is not arg.dtype:
                    raise InvalidArgumentError(
                        f"{where}: input {arg.spec()!r} must be {arg.dtype}, got {dtype}"
                    )
        return self.check_attrs(inferred, node)

    @staticmethod
    def _unify(attrs: dict[str, Any], name: str, value: Any, where: str, arg: ArgDef) -> None:
        if name in attrs:
            current = attrs[name]
            if isinstance(value, DType):
                current = as_dtype(current)
            elif isinstance(value, list) and isinstance(current, list | tuple):
                with contextlib.suppress(TypeError, ValueError, KernloomError):
                    current = [as_dtype(c) for c in current]  # else check_attrs says why
            if current != value:
                raise InvalidArgumentError(
                    f"{where}: input {arg.spec()!r} has {name}={format_attr_value(value)}, but "
                    f"{name}={format_attr_value(current)} from an earlier input or an explicit attr"
                )
        else:
            attrs[name] = value

    def _arg_dtypes(self, args: tuple[ArgDef, ...], attrs: Mapping[str, Any]) -> list[DType]:
        out: list[DType] = []
        for arg in args:
            if arg.type_list_attr is not None:
                out.extend(as_dtype(d) for d in attrs[arg.type_list_attr])
                continue
            dtype = arg.dtype if arg.dtype is not None else as_dtype(attrs[arg.type_attr or ""])
            out.extend([dtype] * arg.count(attrs))
        return out

    def input_dtypes(self, attrs: Mapping[str, Any]) -> list[DType]:
        """The dtype of every input tensor, lists flattened, for complete attrs."""
        return self._arg_dtypes(self.inputs, attrs)

    def output_dtypes(self, attrs: Mapping[str, Any]) -> list[DType]:
        return self._arg_dtypes(self.outputs, attrs)

    def arg_ranges(self, outputs: bool, attrs: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
        """Arg name -> [start, end) of its tensors among the flattened inputs or outputs."""
        ranges: dict[str, tuple[int, int]] = {}
        start = 0
        for arg in self.outputs if outputs else self.inputs:
            count = arg.count(attrs)
            ranges[arg.name] = (start, start + count)
            start += count
        return ranges


# -- spec parsing -------------------------------------------------------------------------


def _fail(op: str, kind: str, spec: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"op {op}: malformed {kind} spec {spec!r}: {why}")


def parse_arg_spec(op: str, kind: str, spec: str, description: str = "") -> ArgDef:
    match = _ARG_SPEC.fullmatch(spec) if isinstance(spec, str) else None
    if match is None:
        raise _fail(op, kind, str(spec), "write it as 'name: T', 'name: float32' or 'name: N * T'")
    name, number_attr, dtype = match.groups()
    if _ARG_NAME.fullmatch(name) is None:
        raise _fail(op, kind, spec, f"{kind} names are lower_case, got {name!r}")
    if dtype in _DTYPE_NAMES:
        return ArgDef(
            name=name, dtype=as_dtype(dtype), number_attr=number_attr, description=description
        )
    return ArgDef(name=name, type_attr=dtype, number_attr=number_attr, description=description)


def _parse_literal(op: str, spec: str, attr_type: AttrType, text: str) -> Any:
    text = text.strip()
    if attr_type.is_list:
        if not (text.startswith("[") and text.endswith("]")):
            raise _fail(op, "attr", spec, f"a list default is written [a, b], got {text!r}")
        inner = text[1:-1].strip()
        return (
            [_parse_scalar(op, spec, attr_type.kind, t) for t in inner.split(",")] if inner else []
        )
    return _parse_scalar(op, spec, attr_type.kind, text)


def _parse_scalar(op: str, spec: str, kind: AttrKind, text: str) -> Any:
    text = text.strip()
    try:
        if kind is AttrKind.BOOL:
            if text not in ("true", "false"):
                raise ValueError("a bool is true or false")
            return text == "true"
        if kind is AttrKind.INT:
            return int(text)
        if kind is AttrKind.FLOAT:
            return float(text)
        if kind is AttrKind.STRING:
            if len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
                raise ValueError("a string is quoted, 'like this'")
            return text[1:-1]
        if kind is AttrKind.TYPE:
            return as_dtype(text)
        if kind is AttrKind.SHAPE:
            if text in ("?", "unknown"):
                return check_attr_value(AttrType(AttrKind.SHAPE), None)
            inner = text.strip("[]").strip()
            dims = (
                [None if d.strip() in ("?", "-1") else int(d) for d in inner.split(",")]
                if inner
                else []
            )
            return check_attr_value(AttrType(AttrKind.SHAPE), dims)
    except (ValueError, InvalidArgumentError) as exc:
        raise _fail(op, "attr", spec, f"bad {kind} literal {text!r}: {exc}") from None
    raise _fail(op, "attr", spec, f"{kind} attrs cannot have a default written in a spec")


def parse_attr_spec(op: str, spec: str, description: str = "") -> AttrDef:
    match = _ATTR_SPEC.fullmatch(spec) if isinstance(spec, str) else None
    if match is None:
        raise _fail(
            op,
            "attr",
            str(spec),
            "write it as 'name: type', 'name: type = default', "
            "'name: {float32, int32}' or 'name: int >= 1'",
        )
    name, type_text, minimum_text, default_text = match.groups()
    if _ATTR_NAME.fullmatch(name) is None:
        raise _fail(op, "attr", spec, f"bad attr name {name!r}")
    allowed: tuple[Any, ...] | None = None
    if type_text.startswith("{"):
        items = [t.strip() for t in type_text[1:-1].split(",") if t.strip()]
        if not items:
            raise _fail(op, "attr", spec, "an allowed-values set cannot be empty")
        if all(t[0] in "'\"" for t in items):
            attr_type = AttrType(AttrKind.STRING)
        elif all(t in _DTYPE_NAMES for t in items):
            attr_type = AttrType(AttrKind.TYPE)
        else:
            unknown = [t for t in items if t not in _DTYPE_NAMES and t[0] not in "'\""]
            raise _fail(
                op,
                "attr",
                spec,
                f"{unknown[0]!r} is neither a dtype nor a quoted "
                f"string." + did_you_mean(unknown[0], _DTYPE_NAMES),
            )
        allowed = tuple(_parse_scalar(op, spec, attr_type.kind, t) for t in items)
        if len(set(allowed)) != len(allowed):
            raise _fail(op, "attr", spec, "an allowed value is listed twice")
    else:
        try:
            attr_type = AttrType.parse(type_text)
        except InvalidArgumentError as exc:
            raise _fail(op, "attr", spec, str(exc)) from None
    minimum = None
    if minimum_text is not None:
        if attr_type.kind is not AttrKind.INT and not attr_type.is_list:
            raise _fail(op, "attr", spec, "a minimum ('>= N') applies to int and list attrs only")
        minimum = int(minimum_text[2:])
    attr = AttrDef(
        name=name,
        type=str(attr_type),
        allowed_values=allowed,
        minimum=minimum,
        description=description,
    )
    if default_text is not None:
        default = _parse_literal(op, spec, attr_type, default_text)
        try:
            default = attr.check(default)
        except InvalidArgumentError as exc:
            raise _fail(op, "attr", spec, f"default {default_text.strip()}: {exc}") from None
        attr = attr.model_copy(update={"has_default": True, "default": default})
    return attr


# -- building and registering ----------------------------------------------------------------


@final
class OpDefBuilder:
    """Fluent ``REGISTER_OP``; each spec is parsed at once, the whole op in ``finalize``."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or _OP_NAME.fullmatch(name) is None:
            raise InvalidArgumentError(
                f"op name {name!r} must be CamelCase, such as 'MatMul' (or '_Send' for "
                f"runtime-internal ops)"
            )
        self._name = name
        self._inputs: list[ArgDef] = []
        self._outputs: list[ArgDef] = []
        self._attrs: list[AttrDef] = []
        self._shape_fn: ShapeFn | None = None
        self._flags: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self._name

    def input(self, spec: str, doc: str = "") -> OpDefBuilder:
        self._inputs.append(parse_arg_spec(self._name, "input", spec, doc))
        return self

    def output(self, spec: str, doc: str = "") -> OpDefBuilder:
        self._outputs.append(parse_arg_spec(self._name, "output", spec, doc))
        return self

    def attr(self, spec: str, doc: str = "") -> OpDefBuilder:
        self._attrs.append(parse_attr_spec(self._name, spec, doc))
        return self

    def shape_fn(self, fn: ShapeFn) -> OpDefBuilder:
        if not callable(fn):
            raise InvalidArgumentError(f"op {self._name}: shape_fn must be callable, got {fn!r}")
        self._shape_fn = fn
        return self

    def stateful(self, value: bool = True) -> OpDefBuilder:
        self._flags["is_stateful"] = value
        return self

    def commutative(self, value: bool = True) -> OpDefBuilder:
        self._flags["is_commutative"] = value
        return self

    def doc(self, summary: str, description: str = "") -> OpDefBuilder:
        self._flags["summary"] = summary
        self._flags["description"] = description
        return self

    def finalize(self) -> OpDef:
        """Check the definition as a whole and freeze it."""
        op = self._name
        seen: set[str] = set()
        named: list[tuple[str, str]] = [
            ("argument", a.name) for a in (*self._inputs, *self._outputs)
        ]
        named += [("attr", a.name) for a in self._attrs]
        for kind, item_name in named:
            if item_name in seen:
                raise InvalidArgumentError(f"op {op}: {kind} name {item_name!r} is used twice")
            seen.add(item_name)
        attrs = {a.name: a for a in self._attrs}
        for arg in (*self._inputs, *self._outputs):
            if arg.type_attr is not None:
                attr = attrs.get(arg.type_attr)
                if attr is None:
                    raise InvalidArgumentError(
                        f"op {op}: argument {arg.spec()!r} refers to attr {arg.type_attr!r}, "
                        f"which is not declared; add .attr('{arg.type_attr}: type') or use a "
                        f"dtype name." + did_you_mean(arg.type_attr, [*attrs, *_DTYPE_NAMES])
                    )
                if attr.type not in ("type", "list(type)"):
                    raise InvalidArgumentError(
                        f"op {op}: argument {arg.spec()!r} takes its dtype from attr "
                        f"{arg.type_attr!r}, which is of type {attr.type}, not type or "
                        f"list(type)"
                    )
                if attr.type == "list(type)" and arg.number_attr is not None:
                    raise InvalidArgumentError(
                        f"op {op}: argument {arg.spec()!r}: a list(type) attr gives each "
                        f"tensor its own dtype, so it takes no length attr; write "
                        f"'{arg.name}: {arg.type_attr}'"
                    )
            if arg.number_attr is not None:
                attr = attrs.get(arg.number_attr)
                if attr is None or attr.type != "int":
                    raise InvalidArgumentError(
                        f"op {op}: list argument {arg.spec()!r} needs an int attr "
                        f"{arg.number_attr!r}; add .attr('{arg.number_attr}: int >= 1')"
                    )

        def typed(arg: ArgDef) -> ArgDef:  # `name: T` with T a list(type): a type list
            if arg.type_attr is not None and attrs[arg.type_attr].type == "list(type)":
                return arg.model_copy(update={"type_attr": None, "type_list_attr": arg.type_attr})
            return arg

        return OpDef(
            name=op,
            inputs=tuple(typed(a) for a in self._inputs),
            outputs=tuple(typed(a) for a in self._outputs),
            attrs=tuple(self._attrs),
            shape_fn=self._shape_fn,
            **self._flags,
        )


@final
class OpLibrary:
    """Op definitions being declared (by a plugin or the standard library), finalised together."""

    __slots__ = ("_builders",)

    def __init__(self) -> None:
        self._builders: list[OpDefBuilder] = []

    def register_op(self, name: str) -> OpDefBuilder:
        builder = OpDefBuilder(name)
        self._builders.append(builder)
        return builder

    def finalize(self) -> list[OpDef]:
        ops = [b.finalize() for b in self._builders]
        names = [o.name for o in ops]
        for name in names:
            if names.count(name) > 1:
                raise AlreadyExistsError(f"op {name} is registered twice in one library")
        return ops


@dataclass(frozen=True, slots=True)
class OpRegistration:
    op_def: OpDef
    origin: Origin


class OpSource(Protocol):
    """What a graph needs from a registry: the op definitions, and nothing about kernels,
    devices or plugins (``Registry`` is one; so is anything holding an ``OpRegistry``)."""

    @property
    def ops(self) -> OpRegistry: ...


@final
class OpRegistry:
    """Op definitions by name, each with the plugin that registered it.

    A registry may sit on a ``parent`` (the standard library, shared by every registry):
    lookups fall through to it, and a name in the parent cannot be registered again.
    """

    __slots__ = ("_frozen", "_ops", "_parent")

    def __init__(self, parent: OpRegistry | None = None) -> None:
        self._parent = parent
        self._ops: dict[str, OpRegistration] = {}
        self._frozen = False

    def freeze(self) -> None:
        """Refuse every later ``add`` (plugin loading is over)."""
        self._frozen = True

    def add(self, op_def: OpDef, origin: Origin) -> None:
        if self._frozen:
            raise refuse_frozen("op registry", origin, f"op {op_def.name}")
        existing = self.registration(op_def.name)
        if existing is not None:
            raise AlreadyExistsError(
                f"op {op_def.name} is already registered by {existing.origin}; "
                f"{origin} cannot register it again (pick another name)"
            )
        self._ops[op_def.name] = OpRegistration(op_def, origin)

    def registration(self, name: str) -> OpRegistration | None:
        found = self._ops.get(name)
        if found is None and self._parent is not None:
            return self._parent.registration(name)
        return found

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.registration(name) is not None

    def get(self, name: str) -> OpDef:
        found = self.registration(name)
        if found is None:
            raise NotFoundError(
                f"no op named {name!r} is registered."
                + did_you_mean(name, self.names())
                + " `kernloom ops` lists them."
            )
        return found.op_def

    def names(self) -> list[str]:
        parent = self._parent.names() if self._parent is not None else []
        return sorted({*parent, *self._ops})

    def registrations(self) -> list[OpRegistration]:
        return [r for n in self.names() if (r := self.registration(n)) is not None]
