"""The kit as pytest items: one per device-contract check, kernel case and executor check.

The items are made from the plan, not collected from files, so the kit runs from any
directory (a vendor's project, an empty one) and needs no test module of its own. Their
node ids read ``kernloom[ACME]::kernels::Add-float32-...``; ``-k`` selects among them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

import kernloom.testing.conformance.contract_checks as contract
import kernloom.testing.conformance.executor_checks as executor
from kernloom.testing.conformance.failure import KitFailure
from kernloom.testing.conformance.graph_pass_checks import check_graph_pass, graph_pass_names
from kernloom.testing.conformance.kernel_checks import check_error_case, check_kernel_case
from kernloom.testing.conformance.plan import KitPlan
from kernloom.testing.conformance.report import Entry

__all__ = ["KitCollector", "KitItem", "kit_checks"]

Check = Callable[[], None]


class KitItem(pytest.Item):
    """One check of the kit; a ``KitFailure`` is shown as its message alone."""

    def __init__(self, *, check: Check, entry: Entry, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check
        self.entry = entry
        # -k device, -k kernels, -k executor, -k MatMul select by section and op.
        self.extra_keyword_matches.update(k for k in (entry.section, entry.op) if k)

    def runtest(self) -> None:
        try:
            self.check()
        except executor.Skip as skip:
            pytest.skip(str(skip))
        except (KitFailure, KeyboardInterrupt):
            raise
        except Exception as exc:  # the plugin's code raised where no check expected it
            raise KitFailure(f"{self._where()}: {type(exc).__name__}: {exc}") from exc

    def _where(self) -> str:
        """The check, as a failure message names it: op, dtype, label and case where it
        has them (a kernel check), else its section and name."""
        entry = self.entry
        if not entry.op:
            return f"{entry.section} check {entry.name!r}"
        parts = [entry.op, entry.dtype, f"label {entry.label!r}" if entry.label else ""]
        case = f", case {entry.case!r}" if entry.case else ""
        return f"{' '.join(p for p in parts if p)} on {self._device_name()}{case}"

    def _device_name(self) -> str:
        parent = self.parent
        plan = getattr(parent, "plan", None)
        device = getattr(plan, "device", None)
        return str(getattr(device, "name", "the device under test"))

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> Any:
        if isinstance(excinfo.value, KitFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.nodeid


class KitCollector(pytest.Collector):
    """The kit's items for one device type, made from the plan."""

    def __init__(self, *, plan: KitPlan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan

    def collect(self) -> list[pytest.Item]:
        return [
            KitItem.from_parent(
                self,
                name=entry.name,
                nodeid=f"{self.nodeid}::{entry.section}::{entry.name}",
                check=check,
                entry=entry,
            )
            for entry, check in kit_checks(self.plan)
        ]


def kit_checks(plan: KitPlan) -> Iterator[tuple[Entry, Check]]:
    """Every check of the kit for the plan's device, in the order they run."""
    for dtype in plan.claimed_dtypes():
        yield (
            Entry("device", f"copies[{dtype.name}]", dtype=dtype.name),
            partial(contract.check_copies, plan, dtype),
        )
        yield (
            Entry("device", f"allocation[{dtype.name}]", dtype=dtype.name),
            partial(contract.check_allocation, plan, dtype),
        )
    largest = max(plan.claimed_dtypes(), key=lambda d: d.itemsize, default=None)
    if largest is not None:
        yield (
            Entry("device", f"large-copy[{largest.name}]", dtype=largest.name),
            partial(contract.check_large_copy, plan, largest),
        )
    yield Entry("device", "memory-limit"), partial(contract.check_memory_limit, plan)
    yield Entry("device", "kernel-device-types"), partial(contract.check_kernel_device_types, plan)
    yield Entry("device", "device-count"), partial(contract.check_device_count, plan)
    for case, problem in plan.broken:
        yield (
            Entry("kernels", case.id or case.op, op=case.op, case=case.id),
            partial(_raise, problem),
        )
    probed: set[tuple[str, str, str]] = set()
    for kernel_case in plan.kernel_cases:
        case = kernel_case.case
        key = (case.op, kernel_case.dtype, case.label)
        probe = key not in probed  # the first case of each op and dtype: inputs fetched again
        probed.add(key)
        yield (
            Entry(
                "kernels",
                case.id or case.op,
                op=case.op,
                dtype=kernel_case.dtype,
                label=case.label,
                case=case.id,
            ),
            partial(check_kernel_case, plan, kernel_case, probe=probe),
        )
    for kernel_case in plan.error_cases:
        case = kernel_case.case
        yield (
            Entry("kernels", case.id, op=case.op, dtype=kernel_case.dtype, case=case.id),
            partial(check_error_case, plan, kernel_case),
        )
    for name, check in (
        ("split-graph", executor.check_split_graph),
        ("cond", executor.check_cond),
        ("while-loop", executor.check_while_loop),
        ("variables", executor.check_variables),
        ("concurrent-runs", executor.check_concurrent_runs),
        ("kernel-error", executor.check_kernel_error),
    ):
        yield Entry("executor", name), partial(check, plan)
    passes = graph_pass_names(plan)
    if not passes:
        yield (
            Entry("executor", "graph-passes"),
            partial(_skip, f"no plugin registers a graph pass for {plan.device_type}"),
        )
    for pass_name in passes:
        yield (
            Entry("executor", f"graph-pass[{pass_name}]"),
            partial(check_graph_pass, plan, pass_name),
        )
    labelled = sorted({(kc.op, kc.label) for kc in plan.kernel_cases if kc.label})
    if not labelled:
        yield (
            Entry("executor", "labels"),
            partial(_skip, f"{plan.device_type} has no labelled kernel with a reference case"),
        )
    for op, label in labelled:
        yield (
            Entry("executor", f"labels[{op}={label}]", op=op, label=label),
            partial(executor.check_labels, plan, op, label),
        )


def _raise(problem: str) -> None:
    raise KitFailure(problem)


def _skip(reason: str) -> None:
    raise executor.Skip(reason)
