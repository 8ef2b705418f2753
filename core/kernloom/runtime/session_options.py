"""What a session is configured with, what one run asks for, and what it reports."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from kernloom.errors import Hint, InvalidArgumentError, Setting, did_you_mean, short_repr
from kernloom.framework.allocator import AllocatorStats
from kernloom.framework.device import DeviceOptions

if TYPE_CHECKING:
    from kernloom.graph.graph import Graph
    from kernloom.runtime.placer import Placement
    from kernloom.runtime.step_stats import StepStats

__all__ = ["MAX_THREADS", "RunMetadata", "RunOptions", "SessionConfig"]

MAX_THREADS: Final = 1024
"""The most ``inter_op_threads`` or ``intra_op_threads`` a session takes: far beyond any
machine's cores, low enough that a typo (``10**6``) is an error, not a process that
exhausts its thread limit."""


def _invalid_arguments(model: type[BaseModel], exc: ValidationError) -> InvalidArgumentError:
    """A ``ValidationError`` as the ``InvalidArgumentError`` every bad argument of the
    Python API is: one line per bad argument, written as the call that gave it
    (``SessionConfig(inter_op_threads=-1): must be greater than 0``)."""
    where = model.__name__
    fields = list(model.model_fields)
    lines = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"] if part != "[key]"]
        name = loc[0] if loc else "?"
        value = error.get("input")
        if error["type"] == "extra_forbidden":
            lines.append(
                f"{where}({name}=...): {where} has no argument {name!r}; its arguments: "
                f"{', '.join(fields)}." + did_you_mean(name, fields)
            )
            continue
        message = str(error["msg"]).removeprefix("Value error, ")
        message = message.replace("Input should be", "must be")
        if len(loc) > 1:  # an entry of a dict or tuple argument
            message = f"entry {'/'.join(loc[1:])!r}: {message}"
        lines.append(f"{where}({name}={short_repr(value)}): {message}")
    return InvalidArgumentError("\n".join(lines))


def _whole_number(name: str, value: object) -> object:
    """Refuse what pydantic would otherwise take for a count: ``True`` (1), ``"4"``."""
    if isinstance(value, bool | str | bytes):
        raise ValueError(f"{name} must be a whole number, not a {type(value).__name__}")
    return value


class _Checked(BaseModel):
    """A model whose bad arguments raise ``InvalidArgumentError`` (a ``ValueError``, as
    pydantic's ``ValidationError`` is) naming each argument, as every kernloom error does."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _invalid_arguments(type(self), exc) from None


class SessionConfig(_Checked):
    """TensorFlow's ``ConfigProto``, for the parts a single process has."""

    inter_op_threads: PositiveInt | None = None
    """Threads that run one step's kernels, the caller's included; None: the number of
    cores. With 1, every kernel runs on the thread that called ``run``. At most
    ``MAX_THREADS``."""
    intra_op_threads: PositiveInt | None = None
    """Threads a device may use inside one kernel; None: the number of cores. At most
    ``MAX_THREADS``."""

    @field_validator("inter_op_threads", "intra_op_threads", mode="before")
    @classmethod
    def _a_count(cls, value: object, info: ValidationInfo) -> object:
        return _whole_number(str(info.field_name), value)

    @field_validator("inter_op_threads", "intra_op_threads")
    @classmethod
    def _bounded(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value > MAX_THREADS:
            raise ValueError(
                f"{info.field_name}={value} is more than the {MAX_THREADS} threads a session "
                f"may use; this machine has {os.cpu_count()} cores (None uses them all)"
            )
        return value

    allow_soft_placement: bool = False
    """Place a node elsewhere when its requested device has no kernel for it."""
    log_device_placement: bool = False
    """Log each node's device (and why) when a signature is first compiled."""
    device_filters: tuple[str, ...] = ()
    """Only devices matching one of these (partial) names: ``("CPU",)``, ``("/device:GPU:1",)``."""
    device_count: dict[str, int] = Field(default_factory=dict)
    memory_limit: dict[str, int] = Field(default_factory=dict)
    factory_overrides: dict[str, str] = Field(default_factory=dict)
    """Device type -> plugin whose factory to use instead of the highest-priority one."""
    kernel_labels: dict[str, str] = Field(default_factory=dict)
    """Op type -> kernel label, for nodes that do not ask for a label themselves."""
    graph_optimizer: bool = True
    """Rewrite each step graph with the graph optimizer (``kernloom.optimizer``) before
    placing it; False runs the graph exactly as built."""
    disabled_passes: tuple[str, ...] = ()
    """Graph passes to skip, by name (``("constant_folding", "elementwise_fusion")``)."""
    flush_denormals: bool = True
    """CPU kernels flush subnormal floats to zero, as TensorFlow's do (``log(1e-40f)`` is
    ``-inf``); False keeps IEEE subnormals. The caller's thread is restored after ``run``."""

    @field_validator("device_filters", "disabled_passes", mode="before")
    @classmethod
    def _names(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str | bytes):  # tuple("CPU") would be ("C", "P", "U")
            raise ValueError(
                f"{info.field_name} must be a tuple of names, not one string: write "
                f"{info.field_name}=({value!r},)"
            )
        return value

    @field_validator("device_count", "memory_limit", mode="before")
    @classmethod
    def _per_type_counts(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, dict):
            for device_type, count in value.items():
                _whole_number(f"{info.field_name}[{device_type!r}]", count)
        return value

    @field_validator("device_count", "memory_limit", "factory_overrides", "kernel_labels")
    @classmethod
    def _keyed_by_name(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        for key, entry in value.items():
            if not key:
                raise ValueError(f"{info.field_name} has an empty key")
            if info.field_name == "device_count" and entry < 0:
                raise ValueError(
                    f"device_count[{key!r}]={entry}: a device count is 0 (no {key} device) or more"
                )
            if info.field_name == "memory_limit" and entry <= 0:
                raise ValueError(
                    f"memory_limit[{key!r}]={entry}: a memory limit is a number of bytes "
                    f"greater than 0"
                )
        return value

    def device_options(self) -> DeviceOptions:
        return DeviceOptions(
            intra_op_threads=self.intra_op_threads,
            device_count=self.device_count,
            memory_limit=self.memory_limit,
            factory_overrides=self.factory_overrides,
            flush_denormals=self.flush_denormals,
        )

    def resolved_inter_op_threads(self) -> int:
        return self.inter_op_threads or min(MAX_THREADS, max(1, os.cpu_count() or 1))


class RunOptions(_Checked):
    """TensorFlow's ``RunOptions``: what one run asks for."""

    trace: bool = False
    """Collect step stats (per node: device, thread, times, kernel, label, shapes)."""
    timeout_s: PositiveFloat | None = None
    """Fail the run with ``DeadlineExceededError`` after this many seconds."""

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        if isinstance(value, bool | str | bytes):  # True would be 1 s, "10" 10 s
            raise ValueError(f"timeout_s must be a number of seconds, not a {type(value).__name__}")
        return value


@dataclass
class RunMetadata:
    """Filled in by ``Session.run(..., run_metadata=md)``."""

    step_id: int = -1
    step_stats: StepStats | None = None
    """Only with ``RunOptions(trace=True)``."""
    placement: Placement | None = None
    partition_graphs: dict[str, Graph] = field(default_factory=dict)
    copies: dict[tuple[str, str], int] = field(default_factory=dict)
    """Values moved between memories, per (source, destination); feeds come from
    ``"client"`` and fetches go to it."""
    bytes_copied: dict[tuple[str, str], int] = field(default_factory=dict)
    memory: dict[str, AllocatorStats] = field(default_factory=dict)
    """Per device, after the step; ``peak_bytes_in_use`` is the step's own peak."""
    wall_s: float = 0.0

    def total_bytes_copied(self) -> int:
        return sum(self.bytes_copied.values())

    def chrome_trace(self) -> dict[str, Any]:
        from kernloom.runtime.step_stats import chrome_trace

        if self.step_stats is None:
            raise InvalidArgumentError(
                "the run collected no step stats.",
                hint=Hint("Ask for them with {trace}.", trace=Setting("trace")),
            )
        return chrome_trace(self.step_stats)

    def write_trace(self, path: str | os.PathLike[str]) -> None:
        """Write a Chrome/Perfetto trace of the step (open it in https://ui.perfetto.dev)."""
        from kernloom.fileio import atomic_write_text

        atomic_write_text(path, json.dumps(self.chrome_trace()))
