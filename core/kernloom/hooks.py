"""The plugin API: the hook a plugin implements, the marker it uses, the API version.

A plugin is a module (or object) that a distribution names in the entry-point group
``kernloom``::

    # the plugin's pyproject.toml
    [project.entry-points.kernloom]
    my_device = "my_device.plugin"

    # my_device/plugin.py -- keep its top-level imports light: the module is imported
    # to read KERNLOOM_API before anything else of the plugin is used.
    import kernloom

    KERNLOOM_API = ">=1.0,<2"

    @kernloom.plugin.hookimpl
    def kernloom_register(registry: kernloom.plugin.Registrar) -> None:
        from my_device.device import MyFactory
        registry.register_device_factory("MYDEV", MyFactory(), priority=100)

The runtime discovers it on first use (``kernloom.plugin.default_registry()``), checks
``KERNLOOM_API`` against ``KERNLOOM_API_VERSION``, and calls the hook. A plugin that
fails at any step is recorded with the reason and traceback, warned about once, and
left out, with nothing it registered kept; the numpy CPU plugin goes through exactly
the same path as any third-party one.
"""

from __future__ import annotations

import enum
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import pluggy

from kernloom.errors import InvalidArgumentError
from kernloom.framework.origin import Origin

__all__ = [
    "ENTRY_POINT_GROUP",
    "KERNLOOM_API_VERSION",
    "ApiRange",
    "KernloomHookSpecs",
    "PluginRecord",
    "PluginState",
    "hookimpl",
    "hookspec",
    "in_process_plugin",
]

PROJECT_NAME: Final = "kernloom"
ENTRY_POINT_GROUP: Final = "kernloom"
"""The entry-point group plugins declare themselves in."""

KERNLOOM_API_VERSION: Final = "1.12"
# 1.1: ``kernloom.plugin`` (the declared plugin surface), the array protocol on Device,
# ProbedDeviceFactory, graph passes, device-independent kernels for every device type.
# 1.2: whole-list attr constraints (``fused_ops`` forms: BIAS_FORMS, CONV_FORMS,
# RESIDUAL_FORMS, FusedOps, parse_fused_ops), on_inter_op_worker, GraphRewriter.
# 1.3: what the built-in fusions decide with, for a plugin's own: Consumers, frame_nodes,
# may_rewrite, likely_device_type, kernel_for, replace_groups, fused_from; a rewriter's node
# may be a plugin's OpDef; OpKernel.intra_op_parallel (KernelLibrary.kernel(
# intra_op_parallel=)) and Device.intra_op_threads; for kernels over host arrays,
# NUMPY_ELEMENTWISE, plan_fused_expression and elementwise_output; check_bias (one
# wording, fused or not).
# 1.4: memory_order and concat_output (a concatenation keeps its inputs' shared layout).
# 1.5: concat_output(concatenate=): the kernel's own join (torch.cat) into that layout.
# 1.6: transpose_output (a transpose keeps its input's layout; the kernel's own copy),
# same_layout_output (an output in its inputs' shared layout), tf_reshape_dims (TF's
# reshape rule without a context, for a kernel's direct entry).
# 1.7: WindowAttrs.pool_window (a pool's geometry, its explicit padding checked as TF does);
# Registry.factory_overrides/placement_order/resolve_factories/create_devices(source=).
# 1.8: compile_fused_steps (a planned fused expression as one straight-line function),
# OUT_BY_POSITION, elementwise_output(shapes=); the rules the new ops' kernels share:
# bicubic_weights, crop_and_resize_shape, check_crop_boxes, crop_taps, CropTaps (images);
# DiagBand, band_limits, band_mask, diag_range, matrix_diag_size, solve_shape,
# square_batch, triangular_solve_shape (linear algebra).
# 1.9: FusedInputs (a fused kernel's plan from its inputs' shapes, kept while the same
# inputs come back); Device.holds (a dtype the device's buffers cannot hold keeps the
# core's every-dtype kernels -- Identity, IdentityN, control flow -- off it); bitcast_dims
# (TensorFlow's Bitcast shape rule); spectral_checks (the FFT ops' shapes and TensorFlow's
# messages, for their kernels); non_max_suppression (NonMaxSuppressionV3's checks and
# greedy selection, for every backend's kernel); Window (Window2D, kept as its alias) and
# WindowAttrs cover the 3-D window ops too; WindowAttrs.pool_divisor (AvgPool's count of
# real elements per window); NMS_TYPES, NMS_HOST_MEMORY (NonMaxSuppressionV3's kernels).
# 1.10: WindowAttrs.backprop_input_window (Conv3DBackpropInputV2's checks, for its
# kernels) and WindowAttrs.gradient_canvas (the input gradient's canvas sizes);
# OUT_BY_KEYWORD (the ufuncs the compiled straight line passes ``out=`` to).
# 1.11: a kernel's direct entry (OpKernel.direct) is called for any number of inputs (one
# output); FusedDirect (a fused kernel's direct entry: its output and temporaries).
# 1.12: InferenceContext.input_shape_value (a shape vector input's partly known value where
# it is a Shape's output, for shape functions of ops that take a shape).
"""The version of the plugin API (the hooks and the ``Registrar``), ``MAJOR.MINOR``.

The minor version grows when something is added; the major when something a plugin may
use changes or goes away. It is independent of the distribution's version, so that a
core release that changes nothing for plugins keeps every plugin working.
"""

hookspec: Final = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl: Final = pluggy.HookimplMarker(PROJECT_NAME)
"""Decorate a plugin's ``kernloom_register`` function with this."""


def in_process_plugin(register: Callable[[Any], None]) -> types.SimpleNamespace:
    """A plugin object for ``Registry.register_plugin`` whose hook is ``register`` (called
    with the ``Registrar``), declaring this API version: how the fakes and the kit make the
    plugins they register without an entry point."""
    return types.SimpleNamespace(
        kernloom_register=hookimpl(register), KERNLOOM_API=f">={KERNLOOM_API_VERSION}"
    )


class KernloomHookSpecs:
    """The hooks a plugin may implement."""

    @hookspec
    def kernloom_register(self, registrar: object, registry: object) -> None:
        """Register what the plugin provides: device factories, op definitions and kernel
        libraries.

        ``registrar`` is a ``kernloom.plugin.Registrar`` bound to this plugin; declare the
        parameter as ``registrar`` (``registry``, the name API 1.0 documented, receives the
        same object and stays accepted). Every call on it is validated at once: an invalid
        registration raises ``kernloom.plugin.RegistrationError`` inside the hook. If the
        hook raises anything (``sys.exit()`` included; only ``KeyboardInterrupt`` goes
        through), the plugin is recorded as failed and *none* of its registrations are
        kept, so a plugin is either fully in or fully out.

        Each plugin's hook is called through pluggy on its own (a caller subset to that
        plugin, not one call across plugins), in order of entry-point name; the result is
        ignored. Wrapper implementations (``wrapper=True``, ``hookwrapper=True``) have
        nothing to wrap and are rejected with an error.
        """


_VERSION: Final = re.compile(r"\d+(\.\d+)*")
_CLAUSE: Final = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\S+?)\s*")


def _version_tuple(text: str, spec: str) -> tuple[int, ...]:
    if _VERSION.fullmatch(text) is None:
        raise InvalidArgumentError(f"API requirement {spec!r}: {text!r} is not a version like 1.0")
    return tuple(int(p) for p in text.split("."))


def _compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


_OPS: Final = {
    ">=": lambda c: c >= 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    "<": lambda c: c < 0,
    "==": lambda c: c == 0,
    "!=": lambda c: c != 0,
}


@dataclass(frozen=True, slots=True)
class ApiRange:
    """A range of plugin-API versions, written like a pip specifier: ``>=1.0,<2``."""

    spec: str
    clauses: tuple[tuple[str, tuple[int, ...]], ...] = field(repr=False)

    @classmethod
    def parse(cls, spec: object) -> ApiRange:
        if not isinstance(spec, str) or not spec.strip():
            raise InvalidArgumentError(
                f"KERNLOOM_API must be a version range string such as '>=1.0,<2', got {spec!r}"
            )
        clauses = []
        for part in spec.split(","):
            match = _CLAUSE.fullmatch(part)
            if match is None:
                raise InvalidArgumentError(
                    f"API requirement {spec!r}: {part.strip()!r} is not a comparison such as "
                    f"'>=1.0' (operators: >=, <=, >, <, ==, !=)"
                )
            clauses.append((match.group(1), _version_tuple(match.group(2), spec)))
        return cls(spec=spec.strip(), clauses=tuple(clauses))

    def contains(self, version: str) -> bool:
        have = _version_tuple(version, self.spec)
        return all(_OPS[op](_compare(have, want)) for op, want in self.clauses)

    def __str__(self) -> str:
        return self.spec


class PluginState(enum.StrEnum):
    LOADED = "loaded"
    FAILED = "failed"
    INCOMPATIBLE = "incompatible"
    DISABLED = "disabled"


@dataclass(frozen=True, slots=True)
class PluginRecord:
    """What happened to one plugin while a registry was built."""

    name: str
    """The entry-point name (what KERNLOOM_PLUGINS and KERNLOOM_DISABLE_PLUGINS refer to)."""
    value: str
    """The entry point's target, ``module`` or ``module:object``."""
    distribution: str | None
    version: str | None
    state: PluginState
    reason: str = ""
    """Why it failed, is incompatible or is disabled; empty when loaded."""
    traceback: str = ""
    """The formatted traceback of the failure, when there was an exception."""
    api_requirement: str | None = None
    registered: tuple[str, ...] = ()
    """What it registered, in words (``device factory CPU (priority 60)``)."""

    @classmethod
    def of(cls, origin: Origin, value: str, state: PluginState, **details: object) -> PluginRecord:
        """A record for the plugin ``origin`` names, whose entry point targets ``value``."""
        return cls(
            origin.plugin,
            value,
            origin.distribution,
            origin.version,
            state,
            **details,  # type: ignore[arg-type]
        )

    @property
    def failed(self) -> bool:
        return self.state in (PluginState.FAILED, PluginState.INCOMPATIBLE)

    def describe(self) -> str:
        """One line naming the plugin, its distribution and what happened."""
        dist = (
            f" from {self.distribution} {self.version or ''}".rstrip() if self.distribution else ""
        )
        head = f"plugin {self.name!r} (entry point {self.value!r}{dist})"
        return f"{head}: {self.state}" + (f": {self.reason}" if self.reason else "")
