"""The environment variables that steer plugin loading, read in one place.

=============================  =========================================================
variable                       meaning
=============================  =========================================================
``KERNLOOM_PLUGINS``           comma-separated entry-point names: load only these
``KERNLOOM_DISABLE_PLUGINS``   comma-separated entry-point names: never load these
``KERNLOOM_STRICT_PLUGINS``    ``1``: any plugin failure or conflict is an error at start-up
``KERNLOOM_DEVICE_FACTORY``    ``GPU=torch,CPU=cpu_numpy``: use that plugin's factory for
                               that type instead of the highest-priority one
=============================  =========================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kernloom.errors import InvalidArgumentError
from kernloom.framework.device_factory_registry import FactoryOverride
from kernloom.framework.device_name import is_valid_device_type

__all__ = ["PluginSettings"]

PLUGINS: Final = "KERNLOOM_PLUGINS"
DISABLE_PLUGINS: Final = "KERNLOOM_DISABLE_PLUGINS"
STRICT_PLUGINS: Final = "KERNLOOM_STRICT_PLUGINS"
DEVICE_FACTORY: Final = "KERNLOOM_DEVICE_FACTORY"

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


def _names(text: str) -> frozenset[str]:
    return frozenset(n.strip() for n in text.split(",") if n.strip())


def _flag(environ: Mapping[str, str], variable: str) -> bool:
    value = environ.get(variable, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidArgumentError(
        f"{variable}={environ[variable]!r} is not a yes/no value; set it to 1 or 0"
    )


def _factory_overrides(environ: Mapping[str, str]) -> dict[str, FactoryOverride]:
    text = environ.get(DEVICE_FACTORY, "")
    overrides: dict[str, FactoryOverride] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        device_type, sep, plugin = (s.strip() for s in item.partition("="))
        if not sep or not plugin or not is_valid_device_type(device_type):
            raise InvalidArgumentError(
                f"{DEVICE_FACTORY}={text!r}: {item!r} is not TYPE=plugin; write it as "
                f"{DEVICE_FACTORY}=GPU=torch (several separated by commas)"
            )
        if device_type in overrides:
            raise InvalidArgumentError(f"{DEVICE_FACTORY}={text!r} names {device_type} twice")
        overrides[device_type] = FactoryOverride(plugin=plugin, source=f"{DEVICE_FACTORY}")
    return overrides


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """Plugin-loading settings from the environment (or given directly in tests)."""

    allow: frozenset[str] | None = None
    """Only these entry-point names are loaded; None loads every plugin."""
    disable: frozenset[str] = frozenset()
    strict: bool = False
    factory_overrides: dict[str, FactoryOverride] = field(default_factory=dict)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> PluginSettings:
        allow_text = environ.get(PLUGINS)
        return cls(
            allow=None if allow_text is None or not allow_text.strip() else _names(allow_text),
            disable=_names(environ.get(DISABLE_PLUGINS, "")),
            strict=_flag(environ, STRICT_PLUGINS),
            factory_overrides=_factory_overrides(environ),
        )

    def why_skipped(self, name: str) -> str | None:
        """Why the plugin ``name`` is not to be loaded, or None when it is."""
        if name in self.disable:
            return f"disabled by {DISABLE_PLUGINS}"
        if self.allow is not None and name not in self.allow:
            return f"not in {PLUGINS}={','.join(sorted(self.allow))}"
        return None
