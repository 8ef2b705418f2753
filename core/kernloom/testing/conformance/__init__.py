"""kernloom's conformance kit: a pytest plugin that checks a device plugin.

``pytest --kernloom-device ACME`` runs, against whatever installed plugin provides the
device type ``ACME``:

- the device contract: allocation and its accounting, copies both ways for every dtype
  the device's kernels are registered for (0-d, empty, large, non-contiguous, edge
  values), the memory limit and the out-of-memory error, ``device_count``;
- every case of the shared table (``kernloom.testing.cases``) whose op has a kernel on the
  device, run through a session on a node pinned to it (cases without a kernel there are
  reported as "no kernel", not failed; labelled cases run where the label exists);
- the executor around the device: graphs split with the CPU (copies counted), ``kl.cond``,
  ``kl.while_loop``, resource variables, concurrent runs, a failing kernel's error,
  labelled kernels selected and traced;

and ends with a summary per op (conformant, with failures, without a kernel);
``--kernloom-report FILE.json`` writes it. The registry checked is the first of: the
``pytest_kernloom_registry(config)`` hook (in a ``conftest.py``), ``--kernloom-registry
MODULE:FUNCTION``, the installed plugins (``kernloom.plugin.default_registry()``; with
``--kernloom-plugin`` naming a plugin whose own factory for the type another plugin's
outranks, that plugin's factory selected: ``selection``).

pytest loads this module through the ``kernloom_pytest`` entry point only when
``--kernloom-device`` is given, or directly with ``-p kernloom.testing.conformance``.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest

import kernloom_pytest
from kernloom.errors import KernloomError
from kernloom.fileio import parent_problem
from kernloom.registry import Registry
from kernloom.testing.conformance.items import KitCollector, KitItem
from kernloom.testing.conformance.plan import KitPlan
from kernloom.testing.conformance.report import KitReport
from kernloom.testing.conformance.selection import installed_registry

__all__ = ["KitPlan", "KitReport", "KitSession"]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    kernloom_pytest.add_hookspecs(pluginmanager)


def pytest_addoption(parser: pytest.Parser) -> None:
    kernloom_pytest.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    device_type = config.getoption("kernloom_device", None)
    if device_type and not config.pluginmanager.has_plugin(KitSession.NAME):
        _check_report_path(config.getoption("kernloom_report", None))
        config.pluginmanager.register(KitSession(config, device_type), KitSession.NAME)


def _check_report_path(path: str | None) -> None:
    """Refuse a ``--kernloom-report`` the kit could not write before any check runs, not
    after all of them: a directory, a file in a missing directory, an unwritable one."""
    if not path:
        return
    target = Path(path)
    if target.is_dir():
        raise pytest.UsageError(
            f"--kernloom-report {path}: is a directory; give a file name, e.g. "
            f"{target / 'kit.json'}"
        )
    problem = parent_problem(target)
    if problem is not None:
        raise pytest.UsageError(
            f"--kernloom-report {path}: {problem}; create it, or give a file in an existing "
            f"directory"
        )
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise pytest.UsageError(
            f"--kernloom-report {path}: cannot create files in {target.parent}: permission "
            f"denied; give a file in a directory you can write"
        )


def _registry(config: pytest.Config, device_type: str) -> Registry:
    given = config.hook.pytest_kernloom_registry(config=config)
    if given is not None:
        if not isinstance(given, Registry):
            raise pytest.UsageError(
                f"pytest_kernloom_registry returned {given!r}; return a kernloom.plugin.Registry"
            )
        return given
    spec = config.getoption("kernloom_registry", None)
    if spec:
        module, _, name = str(spec).partition(":")
        try:
            factory = getattr(importlib.import_module(module), name or "registry")
        except (ImportError, AttributeError) as exc:
            raise pytest.UsageError(
                f"--kernloom-registry {spec}: {type(exc).__name__}: {exc}; give MODULE:FUNCTION "
                f"of a function that returns a kernloom.plugin.Registry"
            ) from exc
        registry = factory()
        if not isinstance(registry, Registry):
            raise pytest.UsageError(f"--kernloom-registry {spec} returned {registry!r}")
        return registry
    return installed_registry(device_type, config.getoption("kernloom_plugin", None))


class KitSession:
    """The kit's hooks for one pytest session checking one device type."""

    NAME = "kernloom-conformance-session"

    def __init__(self, config: pytest.Config, device_type: str) -> None:
        self.config = config
        self.device_type = device_type
        self.report: KitReport | None = None

    @pytest.hookimpl(tryfirst=True)  # before -k/-m deselect, so that they apply to the kit
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        try:
            plan = KitPlan.build(
                _registry(config, self.device_type),
                self.device_type,
                only_plugin=config.getoption("kernloom_plugin", None),
            )
        except KernloomError as exc:
            raise pytest.UsageError(str(exc)) from exc
        self.report = KitReport(plan)
        kit = KitCollector.from_parent(
            session,
            name=f"kernloom[{self.device_type}]",
            nodeid=f"kernloom[{self.device_type}]",
            plan=plan,
        )
        for item in session.genitems(kit):
            if isinstance(item, KitItem):
                self.report.add(item.nodeid, item.entry)
            items.append(item)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.report is None:
            return
        if report.failed:
            self.report.record(report.nodeid, "failed", _message(report))
        elif report.skipped:
            self.report.record(report.nodeid, "skipped", _skip_reason(report))
        elif report.when == "call":
            self.report.record(report.nodeid, "passed")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        path = self.config.getoption("kernloom_report", None)
        if path and self.report is not None:
            self.report.write(path)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.report is None:
            return
        terminalreporter.section(f"kernloom conformance: {self.device_type}")
        for line in self.report.lines():
            terminalreporter.write_line(line)
        path = self.config.getoption("kernloom_report", None)
        if path:
            terminalreporter.write_line(f"report written to {path}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.report is not None:
            self.report.plan.devices.close()


def _message(report: pytest.TestReport) -> str:
    text = report.longreprtext
    return text.strip()


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)
