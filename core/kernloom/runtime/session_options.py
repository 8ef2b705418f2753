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
    ValidationInfo,
    field_validator,
)

from kernloom.errors import Hint, InvalidArgumentError, Setting
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


class SessionConfig(BaseModel):
    """TensorFlow's ``ConfigProto``, for the parts a single process has."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    inter_op_threads: PositiveInt | None = None
    """Threads that run one step's kernels, the caller's included; None: the number of
    cores. With 1, every kernel runs on the thread that called ``run``. At most
    ``MAX_THREADS``."""
    intra_op_threads: PositiveInt | None = None
    """Threads a device may use inside one kernel; None: the number of cores. At most
    ``MAX_THREADS``."""

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

    def device_options(self) -> DeviceOptions:
        return DeviceOptions(
            intra_op_threads=self.intra_op_threads,
            device_count=self.device_count,
            memory_limit=self.memory_limit,
            factory_overrides=self.factory_overrides,
        )

    def resolved_inter_op_threads(self) -> int:
        return self.inter_op_threads or min(MAX_THREADS, max(1, os.cpu_count() or 1))


class RunOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    trace: bool = False
    """Collect step stats (per node: device, thread, times, kernel, label, shapes)."""
    timeout_s: PositiveFloat | None = None
    """Fail the run with ``DeadlineExceededError`` after this many seconds."""


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
