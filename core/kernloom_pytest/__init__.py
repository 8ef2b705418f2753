"""The pytest entry point (group ``pytest11``) of kernloom's conformance kit.

pytest loads every installed ``pytest11`` plugin in every run, so this module is the
kit's doorway only: it imports nothing but pytest, adds the kit's options and its hook,
and loads the kit itself (``kernloom.testing.conformance``) only when a run asks for it
with ``--kernloom-device TYPE``. Importing ``kernloom`` costs most of a second (pydantic
models, the op library); a pytest run that does not ask for the kit must not pay it.

``pytest -p kernloom.testing.conformance`` loads the kit directly where plugin
auto-loading is off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``); it adds the same options and
hook through the functions below, which tolerate being called twice.
"""

from __future__ import annotations

import importlib

import pytest

__all__ = ["KIT_MODULE", "KitHookSpecs", "add_hookspecs", "add_options"]

KIT_MODULE = "kernloom.testing.conformance"


class KitHookSpecs:
    """The hook a vendor's ``conftest.py`` implements to give the kit its own registry."""

    @pytest.hookspec(firstresult=True)
    def pytest_kernloom_registry(self, config: pytest.Config) -> object | None:
        """Return the ``kernloom.plugin.Registry`` the kit checks the device in, or None to
        leave the choice to the next implementation (``--kernloom-registry``, then the
        registry of the installed plugins, ``kernloom.plugin.default_registry()``).

        Implement it in a ``conftest.py`` that pytest loads at start-up (the rootdir's, or
        one in a directory named on the command line)::

            def pytest_kernloom_registry(config):
                registry = kernloom.plugin.Registry()
                registry.register_plugin(my_plugin, name="my_plugin")
                return registry
        """


def add_hookspecs(pluginmanager: pytest.PytestPluginManager) -> None:
    if not any(
        getattr(caller, "spec", None) is not None
        for name, caller in vars(pluginmanager.hook).items()
        if name == "pytest_kernloom_registry"
    ):
        pluginmanager.add_hookspecs(KitHookSpecs)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("kernloom", "kernloom conformance kit")
    try:
        group.addoption(
            "--kernloom-device",
            metavar="TYPE",
            default=None,
            help="run kernloom's conformance kit against the installed plugin that provides "
            "device type TYPE (e.g. CPU, GPU, ACME)",
        )
        group.addoption(
            "--kernloom-report",
            metavar="FILE.json",
            default=None,
            help="with --kernloom-device: write the kit's summary (op -> status, dtypes, "
            "failures) to this JSON file",
        )
        group.addoption(
            "--kernloom-plugin",
            metavar="NAME",
            default=None,
            help="with --kernloom-device: check only the kernels of this plugin (entry-point or "
            "distribution name), e.g. a kernel library for a device another plugin provides",
        )
        group.addoption(
            "--kernloom-registry",
            metavar="MODULE:FUNCTION",
            default=None,
            help="with --kernloom-device: build the registry to check by calling this "
            "function of no arguments (default: the installed plugins)",
        )
    except ValueError:  # added already: the kit was also loaded with -p
        pass


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    add_hookspecs(pluginmanager)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("kernloom_device", None) and not config.pluginmanager.has_plugin(
        KIT_MODULE
    ):
        # Not pluginmanager.import_plugin: that would mark the kit for assertion rewriting,
        # which warns when another test of the same process has imported it already.
        config.pluginmanager.register(importlib.import_module(KIT_MODULE), KIT_MODULE)
