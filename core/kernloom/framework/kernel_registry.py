"""Kernel registration and lookup (TensorFlow's kernel registry, without its globals).

A plugin fills a ``KernelLibrary`` with decorators and hands it to the registry in its
hook. Lookup for a node on a device follows DESIGN.md exactly:

1. the kernel's device type is the device's, and its backend (if it names one) the
   device's backend;
2. its label equals the node's label (``label_of``: the first of the node's string
   ``kl.kernel_label`` scopes that some kernel of its op has, else its ``_kernel`` attr):
   an unlabelled node only gets unlabelled kernels, a labelled node only kernels with that
   label -- never a fallback;
3. every constraint holds for the node's attrs;
4. the highest priority wins; two at the top is an error.

When nothing matches, ``NoKernelError`` names the node, op, device type, label and attr
values, and lists every kernel of the op with the reason it was rejected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

from kernloom.errors import (
    InvalidArgumentError,
    KernelError,
    KernloomError,
    NotFoundError,
    did_you_mean,
)
from kernloom.framework.attr import format_attr_value
from kernloom.framework.device import Device
from kernloom.framework.kernel_def import KernelDef, KernelDefBuilder, constraint_value
from kernloom.framework.node_def import NodeDef
from kernloom.framework.op_def import OpDef
from kernloom.framework.op_kernel import (
    FunctionKernel,
    KernelSignature,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
)
from kernloom.framework.origin import Origin, refuse_frozen

__all__ = [
    "KernelConflict",
    "KernelLibrary",
    "KernelRegistration",
    "KernelRegistry",
    "NoKernelError",
    "validate_kernel_def",
]

KernelFactory = type[OpKernel]


class NoKernelError(NotFoundError):
    """No registered kernel fits a node on a device type."""


@dataclass(frozen=True, slots=True)
class KernelRegistration:
    kernel_def: KernelDef
    kernel_class: KernelFactory
    origin: Origin

    @property
    def implementation(self) -> str:
        cls = self.kernel_class
        return f"{cls.__module__}.{cls.__qualname__}"

    def describe(self) -> str:
        return f"{self.kernel_def.describe()} ({self.implementation}, {self.origin})"


@dataclass(frozen=True, slots=True)
class KernelConflict:
    kept: KernelRegistration
    rejected: KernelRegistration

    def __str__(self) -> str:
        return (
            f"kernel conflict: {self.rejected.describe()} cannot be told apart at lookup from "
            f"{self.kept.describe()} (same op, device type, backend, label and priority, "
            f"overlapping constraints); a node that matches both fails at lookup. "
            + settle(self.kept, self.rejected)
        )


def settle(*registrations: KernelRegistration) -> str:
    """How to settle a tie between kernels of different plugins, in the user's words."""
    plugins = sorted({r.origin.plugin for r in registrations})
    dists = sorted({r.origin.distribution or r.origin.plugin for r in registrations})
    return (
        "Give one a different priority or a label (its plugin's KernelDef), or leave one "
        f"plugin out with KERNLOOM_DISABLE_PLUGINS={plugins[-1]} (plugins: "
        f"{', '.join(plugins)}; distributions: {', '.join(dists)})."
    )


@final
class KernelLibrary:
    """Kernels a plugin provides, declared with decorators::

    lib = KernelLibrary()

    @lib.kernel(KernelDefBuilder("Relu").device("CPU").type_constraint("T", FLOATS))
    def relu(ctx: OpKernelContext) -> None: ...

    @lib.kernel("MatMul", device="CPU", label="einsum")
    class EinsumMatMul(OpKernel): ...
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: list[tuple[KernelDef, KernelFactory]] = []

    def kernel(
        self,
        spec: KernelDef | KernelDefBuilder | str,
        *,
        device: str | None = None,
        label: str = "",
        priority: int = 0,
        backend: str | None = None,
        type_constraints: Mapping[str, Sequence[object] | None] | None = None,
        attr_constraints: Mapping[str, Sequence[object]] | None = None,
        host_memory: Sequence[str] = (),
        expensive: bool = True,
        direct: Callable[..., Any] | None = None,
        inplace_form: Callable[..., Any] | None = None,
        intra_op_parallel: bool = False,
    ) -> Callable[[Any], Any]:
        """Register the decorated ``OpKernel`` subclass or function ``fn(ctx)``.

        ``spec`` is a ``KernelDef``, a builder, or an op name completed by the keywords.
        A ``type_constraints`` value of ``None`` (``kernloom.plugin.types.OP_TYPES``)
        constrains nothing: the kernel takes every dtype its op allows.
        ``attr_constraints`` names the values of other attrs it takes (for a list attr,
        whole lists: ``{"fused_ops": CONV_FORMS}``, ``CONV_FORMS`` from ``kernloom.plugin``).
        ``expensive``, ``direct`` (``OpKernel.direct``, the context-free fast entry),
        ``inplace_form`` (``OpKernel.inplace_form``, an elementwise kernel's ``f(*inputs,
        out)``) and ``intra_op_parallel`` (``OpKernel.intra_op_parallel``: it uses the
        device's intra-op threads) apply to functions; a class sets ``is_expensive``,
        ``direct``, ``inplace_form`` and ``intra_op_parallel`` itself.
        """
        if isinstance(spec, str):
            builder = KernelDefBuilder(spec)
            if device is not None:
                builder.device(device)
            builder.label(label).priority(priority).host_memory(*host_memory)
            if backend is not None:
                builder.backend(backend)
            for attr, dtypes in (type_constraints or {}).items():
                if dtypes is not None:  # None (types.OP_TYPES): every dtype the op allows
                    builder.type_constraint(attr, list(dtypes))
            for attr, values in (attr_constraints or {}).items():
                builder.attr_constraint(attr, list(values))
            kernel_def = builder.build()
        elif isinstance(spec, KernelDefBuilder):
            kernel_def = spec.build()
        elif isinstance(spec, KernelDef):
            kernel_def = spec
        else:
            raise InvalidArgumentError(
                f"kernel spec must be a KernelDef, builder or op name, got {spec!r}"
            )

        def register(impl: Any) -> Any:
            self.add(
                kernel_def,
                impl,
                expensive=expensive,
                direct=direct,
                inplace_form=inplace_form,
                intra_op_parallel=intra_op_parallel,
            )
            return impl

        return register

    def add(
        self,
        kernel_def: KernelDef,
        impl: Any,
        *,
        expensive: bool = True,
        direct: Callable[..., Any] | None = None,
        inplace_form: Callable[..., Any] | None = None,
        intra_op_parallel: bool = False,
    ) -> None:
        if isinstance(impl, type) and issubclass(impl, OpKernel):
            given_keywords = (
                ("direct", direct),
                ("inplace_form", inplace_form),
                ("intra_op_parallel", intra_op_parallel or None),
            )
            for keyword, given in given_keywords:
                if given is not None:
                    raise InvalidArgumentError(
                        f"kernel for {kernel_def.describe()}: {keyword}= is for kernel "
                        f"functions; the class {impl.__qualname__} sets its own "
                        f"`{keyword}` attribute"
                    )
            cls: KernelFactory = impl
        elif callable(impl) and not isinstance(impl, type):
            cls = FunctionKernel.wrap(
                impl,
                expensive=expensive,
                direct=direct,
                inplace_form=inplace_form,
                intra_op_parallel=intra_op_parallel,
            )
        else:
            raise InvalidArgumentError(
                f"kernel for {kernel_def.describe()}: {impl!r} is neither an OpKernel subclass "
                f"nor a function of the context"
            )
        self._entries.append((kernel_def, cls))

    @property
    def entries(self) -> tuple[tuple[KernelDef, KernelFactory], ...]:
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def validate_kernel_def(kernel_def: KernelDef, op_def: OpDef | None, what: str) -> None:
    """Check a kernel against its op: the op exists, constrained attrs and host-memory args
    are the op's, constraint values are values the attr can take."""
    if op_def is None:
        raise InvalidArgumentError(
            f"{what} is for op {kernel_def.op!r}, which is not registered; register the op "
            f"first (in this plugin or another)"
        )
    for attr_name, values in kernel_def.constraints.items():
        if not op_def.has_attr(attr_name):
            raise InvalidArgumentError(
                f"{what} constrains attr {attr_name!r}, which op {op_def.name} does not have; "
                f"its attrs: {', '.join(a.name for a in op_def.attrs) or '(none)'}"
            )
        attr = op_def.attr(attr_name)
        for value in values:
            try:
                if attr.attr_type.is_list and not isinstance(value, tuple):
                    raise InvalidArgumentError(
                        "a list attr's constraint lists whole values (lists), not elements"
                    )
                attr.check(list(value) if attr.attr_type.is_list else value)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(
                    f"{what}: constraint value {format_attr_value(value)} for attr "
                    f"'{attr.spec()}' is impossible: {exc}"
                ) from None
    arg_names = {a.name for a in (*op_def.inputs, *op_def.outputs)}
    for arg in kernel_def.host_memory_args:
        if arg not in arg_names:
            raise InvalidArgumentError(
                f"{what} declares host-memory argument {arg!r}, but op {op_def.name} has "
                f"only: {', '.join(sorted(arg_names)) or '(none)'}"
            )


def _overlap(a: KernelDef, b: KernelDef) -> bool:
    if (a.op, a.device_type, a.backend, a.label, a.priority) != (
        b.op,
        b.device_type,
        b.backend,
        b.label,
        b.priority,
    ):
        return False
    for attr in a.constraints.keys() & b.constraints.keys():
        if not set(a.constraints[attr]) & set(b.constraints[attr]):
            return False
    return True


def rejection(
    kernel_def: KernelDef,
    attrs: Mapping[str, Any],
    device_type: str,
    backend: str | None,
    label: str,
) -> str | None:
    """Why a kernel does not fit, or None when it does."""
    if kernel_def.device_type != device_type:
        return f"device type {kernel_def.device_type}, not {device_type}"
    if kernel_def.backend is not None and backend is not None and kernel_def.backend != backend:
        return (
            f"needs backend {kernel_def.backend}, but the {device_type} device's backend is "
            f"{backend} (a kernel never runs on a device of another backend)"
        )
    if kernel_def.label != label:
        if not label:
            return f"labelled {kernel_def.label!r}; the node asks for no label"
        if not kernel_def.label:
            return f"unlabelled; the node asks for label {label!r}"
        return f"labelled {kernel_def.label!r}, not {label!r}"
    for attr, allowed in kernel_def.constraints.items():
        if constraint_value(attrs.get(attr)) not in allowed:
            return (
                f"constraint {attr} in {{{', '.join(format_attr_value(v) for v in allowed)}}} "
                f"does not hold for {attr}={format_attr_value(attrs.get(attr))}"
            )
    return None


@final
class KernelRegistry:
    """The kernels of a registry: lookup (``find``) and construction (``create``) of the
    kernel for a node on a device. Filled while plugins load, then frozen."""

    __slots__ = ("_by_op", "_conflicts", "_frozen", "_labels")

    def __init__(self) -> None:
        self._by_op: dict[str, list[KernelRegistration]] = {}
        self._conflicts: list[KernelConflict] = []
        self._labels: set[str] = set()
        self._frozen = False

    def freeze(self) -> None:
        """Refuse every later ``add`` (plugin loading is over)."""
        self._frozen = True

    def overlapping(self, kernel_def: KernelDef) -> KernelRegistration | None:
        for existing in self._by_op.get(kernel_def.op, ()):
            if _overlap(existing.kernel_def, kernel_def):
                return existing
        return None

    def add(self, registration: KernelRegistration) -> KernelConflict | None:
        """Add a kernel. One that cannot be told apart from an existing one is kept all the
        same and reported: the lookup of a node that matches both fails, naming both, rather
        than the load order silently picking one (as TensorFlow's registry refuses)."""
        if self._frozen:
            raise refuse_frozen(
                "kernel registry", registration.origin, registration.kernel_def.describe()
            )
        existing = self.overlapping(registration.kernel_def)
        conflict = None
        if existing is not None:
            conflict = KernelConflict(kept=existing, rejected=registration)
            self._conflicts.append(conflict)
        self._by_op.setdefault(registration.kernel_def.op, []).append(registration)
        if registration.kernel_def.label:
            self._labels.add(registration.kernel_def.label)
        return conflict

    def label_of(self, node: NodeDef, where: str) -> str:
        """The label ``node`` asks for: the first of its string ``kl.kernel_label`` scopes
        (innermost first) that some kernel of its op has, else its ``_kernel`` attr.

        Labels are checked here, where kernels are chosen, not when the graph is built: a
        scope label that no kernel at all has (a typo, or the plugin that has it is not
        installed) is an ``InvalidArgumentError`` naming the node, op, label, ``where``
        (the device) and the labels that do exist.
        """
        scoped = node.scope_labels
        if scoped:
            own = {r.kernel_def.label for r in self._by_op.get(node.op, ())}
            for label in scoped:
                if label in own:
                    return label
            for label in scoped:
                if label not in self._labels:
                    raise InvalidArgumentError(
                        f"node {node.name!r} (op {node.op}) on {where}: kl.kernel_label asks "
                        f"for kernel label {label!r}, but no kernel is registered with it; "
                        f"labels: {', '.join(sorted(self._labels)) or '(none)'}."
                        + did_you_mean(label, self._labels)
                        + " Install the plugin that provides it, or fix the label."
                    )
        return node.kernel_label

    @property
    def conflicts(self) -> tuple[KernelConflict, ...]:
        return tuple(self._conflicts)

    def kernels(self, op: str | None = None) -> list[KernelRegistration]:
        if op is not None:
            return list(self._by_op.get(op, ()))
        return [r for name in sorted(self._by_op) for r in self._by_op[name]]

    def find(
        self,
        node: NodeDef,
        attrs: Mapping[str, Any],
        device_type: str,
        backend: str | None = None,
    ) -> KernelRegistration:
        """The kernel for ``node`` (with complete ``attrs``) on a device of this type/backend."""
        label = self.label_of(node, f"device type {device_type}")
        candidates = self._by_op.get(node.op, [])
        fits = [
            r
            for r in candidates
            if rejection(r.kernel_def, attrs, device_type, backend, label) is None
        ]
        if not fits:
            raise NoKernelError(self._no_kernel_message(node, attrs, device_type, backend, label))
        fits.sort(key=lambda r: -r.kernel_def.priority)
        if len(fits) > 1 and fits[0].kernel_def.priority == fits[1].kernel_def.priority:
            tied = [r for r in fits if r.kernel_def.priority == fits[0].kernel_def.priority]
            raise InvalidArgumentError(
                f"node {node.name!r} (op {node.op}) on {device_type}: {len(tied)} kernels tie at "
                f"priority {fits[0].kernel_def.priority}: "
                + "; ".join(r.describe() for r in tied)
                + ". "
                + settle(*tied)
            )
        return fits[0]

    def create(
        self, node: NodeDef, op_def: OpDef, attrs: Mapping[str, Any], device: Device
    ) -> OpKernel:
        """Look up and construct the kernel for ``node`` (its ``attrs`` complete) on ``device``.

        A kernel whose constructor raises is reported as a ``KernelError`` naming the node,
        op, device and kernel class.
        """
        registration = self.find(node, attrs, device.device_type, device.backend)
        signature = KernelSignature.make(
            node.name, op_def, attrs, registration.kernel_def, registration.origin
        )
        construction = OpKernelConstruction(signature, device)
        try:
            kernel = registration.kernel_class(construction)
        except KernelError:
            raise
        except Exception as exc:
            raise KernelError(
                f"node {node.name!r} (op {node.op}): constructing kernel "
                f"{registration.implementation}{_by(registration.origin)} on {device.name}"
                f"{_by(device.origin, 'of')} failed: {type(exc).__name__}: {exc}"
            ) from exc
        kernel.signature = signature
        kernel.origin = registration.origin
        return kernel

    def _no_kernel_message(
        self,
        node: NodeDef,
        attrs: Mapping[str, Any],
        device_type: str,
        backend: str | None,
        label: str,
    ) -> str:
        shown = ", ".join(
            f"{k}={format_attr_value(v)}" for k, v in sorted(attrs.items()) if not k.startswith("_")
        )
        head = (
            f"no kernel for node {node.name!r} (op {node.op}) on device type {device_type}"
            + (f" (backend {backend})" if backend else "")
            + (f" with label {label!r}" if label else " (no label)")
            + (f"; attrs: {shown}" if shown else "")
        )
        candidates = self._by_op.get(node.op, [])
        if not candidates:
            return head + f". No kernel at all is registered for op {node.op}."
        lines = [
            f"  - {r.describe()}: {rejection(r.kernel_def, attrs, device_type, backend, label)}"
            for r in candidates
        ]
        return head + ". Registered kernels of the op:\n" + "\n".join(lines)

    def why_not(
        self, node: NodeDef, attrs: Mapping[str, Any], device_type: str, backend: str | None = None
    ) -> str | None:
        """In one line, why ``node`` has no kernel on ``device_type``; None when it has one.
        (For placement explanations; ``find`` gives the full list.)"""
        label = self.label_of(node, f"device type {device_type}")
        candidates = self._by_op.get(node.op, [])
        reasons = [rejection(r.kernel_def, attrs, device_type, backend, label) for r in candidates]
        if any(reason is None for reason in reasons):
            return None
        if not candidates:
            return f"no kernel is registered for op {node.op}"
        on_type = [
            reason
            for r, reason in zip(candidates, reasons, strict=True)
            if r.kernel_def.device_type == device_type
        ]
        if not on_type:
            return f"no {node.op} kernel for {device_type}"
        return "; ".join(dict.fromkeys(r for r in on_type if r))

    def supported_device_types(
        self,
        node: NodeDef,
        attrs: Mapping[str, Any],
        device_types: Sequence[str],
        backends: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The types in ``device_types`` (placement order) on which the node has a kernel."""
        label = self.label_of(node, f"device types {', '.join(device_types) or '(none)'}")
        backends = backends or {}
        return [
            t
            for t in device_types
            if any(
                rejection(r.kernel_def, attrs, t, backends.get(t), label) is None
                for r in self._by_op.get(node.op, ())
            )
        ]


def run_compute(kernel: OpKernel, ctx: OpKernelContext) -> None:
    """Run a kernel through its device (inside its ``compute_scope``), turning a crash into
    an error naming the node."""
    try:
        with ctx.device.compute_scope():
            ctx.device.compute(kernel, ctx)
    except KernloomError:
        raise
    except Exception as exc:
        raise ctx.fail(
            f"kernel {type(kernel).__qualname__} failed: {type(exc).__name__}: {exc}"
        ) from exc


def _by(origin: Origin | None, word: str = "registered by") -> str:
    """`` registered by plugin 'p' (dist 1.0)`` (or ``of``) where the origin is known: a
    constructor's crash is its plugin's to fix, or the device's (a Const's copy onto it)."""
    return f" ({word} {origin})" if origin is not None else ""
