"""Fixtures for loading plugins through entry points without installing anything.

``install`` writes plugin modules into a temporary directory on ``sys.path`` and
returns hand-made ``EntryPoint``s for them, so the real import path (``ep.load()``,
``KERNLOOM_API`` check, pluggy registration, hook call) is exercised end to end.
"""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import run  # noqa: F401 (the CLI tests' fixture, here so that they share it)
from plugin_helpers import PLUGIN_HEADER, Install

import kernloom.plugin as klp


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """``install(name, body, header=PLUGIN_HEADER)`` -> an entry point for a new module."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    created: list[str] = []

    def make(
        name: str, body: str = "", *, header: str = PLUGIN_HEADER, value: str | None = None
    ) -> importlib.metadata.EntryPoint:
        module = f"klplugin_{name}"
        (root / f"{module}.py").write_text(header + textwrap.dedent(body))
        created.append(module)
        return importlib.metadata.EntryPoint(name=name, value=value or module, group="kernloom")

    yield make
    for module in created:
        sys.modules.pop(module, None)


@pytest.fixture(scope="module")
def accel_registry() -> klp.Registry:
    """An isolated registry with the numpy CPU plugin and the FAKE_ACCEL fake accelerator."""
    from kernloom.testing import fake_accelerator_plugin
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(fake_accelerator_plugin(), name="fake_accel")
    return registry
